/* cmd_compile.c: `khlua compile FILE.cu [--header FILE ...] [--arch A] [--json]
 * [--kernel NAME ...]`, one NVRTC build with the same checks and outputs as kh.compile.build: the
 * kernels' resources and the timings as a table or JSON, the log, and on
 * request the cubin.  By default the build goes through the compile service:
 * a look-up in the store, else a compile server, and the result recorded in
 * the store (--no-store, --in-process turn those off). */
#include "commands.h"

#include "compile/compile.h"
#include "compile/compile_service.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: khlua compile FILE.cu [--header FILE ...] [--arch A] [--json]\n"
            "                     [--kernel NAME ...] [--option OPT ...] [--deadline S]\n"
            "                     [--trusted] [--no-pch] [--out FILE.cubin] [--no-store]\n"
            "                     [--in-process]\n"
            "\n"
            "Compiles FILE.cu with NVRTC into a cubin and prints each kernel's registers,\n"
            "static shared memory, local memory, spill instructions and launch bounds, the\n"
            "compile time split into phases, and the compiler log.  The source is checked\n"
            "as model-written code (device code only, allowlisted #includes, extern \"C\"\n"
            "kernels) unless --trusted.  The store (--store, $KHLUA_STORE, else .khlua/store)\n"
            "is asked first: a source compiled before with the same options, NVRTC and\n"
            "headers is answered from it.  Otherwise a compile server (a `khlua worker\n"
            "--role compile` process, killed at the deadline) compiles it, and the cubin,\n"
            "log and a compile record go into the store.\n"
            "\n"
            "  --header FILE   one more source of the candidate, which FILE.cu (or another\n"
            "                  header) includes as \"NAME\": NAME is FILE's path from\n"
            "                  FILE.cu's folder (e.g. util.cuh, include/util.cuh); repeatable\n"
            "  --arch A        target architecture (default $KHLUA_ARCH or %s)\n"
            "  --json          one JSON object instead of the table\n"
            "  --kernel NAME   a kernel that must be in the cubin (repeatable)\n"
            "  --option OPT    an extra NVRTC option, e.g. --option=-use_fast_math (repeatable)\n"
            "  --deadline S    give up after S seconds (default %.0f)\n"
            "  --trusted       written by a person: skip the static checks, compile in process\n"
            "  --no-pch        do not use a precompiled header\n"
            "  --out FILE      write the cubin there\n"
            "  --no-store      neither read nor write the store\n"
            "  --in-process    no compile server: compile in this process (in a child\n"
            "                  process killed at the deadline, unless --trusted)\n"
            "\n"
            "Exit 0 when it compiled, 1 when it did not (the log says why), 2 on usage errors.\n",
            KH_COMPILE_DEFAULT_ARCH, KH_COMPILE_DEFAULT_DEADLINE);
}

static char *read_file(const char *path, size_t *len, char *why, size_t why_n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_n, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 64 * 1024, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap > KH_COMPILE_MAX_SOURCE) {
                snprintf(why, why_n, "%s is larger than %u bytes", path, KH_COMPILE_MAX_SOURCE);
                free(buf);
                fclose(f);
                return NULL;
            }
            char *b = realloc(buf, cap * 2);
            if (!b)
                break;
            buf = b;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    if (!buf || ferror(f)) {
        snprintf(why, why_n, "cannot read %s", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* "--name=value" or "--name value"; NULL if argv[*i] is not --name. */
static const char *arg_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n))
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

/* A header's name: its path from the entry file's folder, written as it is
 * under that folder ("dir/x.cu" and "dir/sub/u.cuh": "sub/u.cuh"); NULL when
 * it is not under it, lexically. */
static const char *header_name(const char *entry, const char *path)
{
    while (!strncmp(entry, "./", 2))
        entry += 2;
    while (!strncmp(path, "./", 2))
        path += 2;
    const char *slash = strrchr(entry, '/');
    if (!slash)
        return path;
    size_t n = (size_t)(slash - entry) + 1; /* "dir/" */
    return strncmp(path, entry, n) ? NULL : path + n;
}

static void print_table(const char *file, const kh_artifact *a)
{
    char by[64];
    if (a->server_pid)
        snprintf(by, sizeof by, "server pid %d", a->server_pid);
    else
        snprintf(by, sizeof by, "%s", a->served_by ? a->served_by : "in-process");
    printf("%s: %s, %zu-byte cubin for %s, NVRTC %s, pch %s, from %s%s\n", file,
           a->ok ? "compiled" : "failed", a->cubin_len, a->arch, a->nvrtc_version, a->pch, by,
           a->cache_hit ? ", cache hit" : "");
    printf("hash %s\n", a->hash);
    printf("time %.1f ms: check %.1f, key %.2f, pch warm-up %.1f, create %.1f, compile %.1f, "
           "extract %.1f, parse %.2f\n", a->t.total * 1e3, a->t.check * 1e3, a->t.key * 1e3,
           a->t.warm * 1e3,
           a->t.create * 1e3, a->t.compile * 1e3, a->t.extract * 1e3, a->t.parse * 1e3);
    if (a->res.n_kernels)
        printf("%-32s %5s %9s %9s %7s %8s %7s\n", "kernel", "regs", "smem", "local", "spills",
               "maxthr", "maxreg");
    for (size_t i = 0; i < a->res.n_kernels; i++) {
        const kh_kernel_res *k = &a->res.kernels[i];
        printf("%-32s %5d %9ld %9ld %7d %8d %7d\n", k->name, k->registers, k->shared_static,
               k->local_bytes, k->spill_instructions, k->max_threads, k->maxreg);
    }
    if (a->log_len)
        printf("log:\n%s%s", a->log, a->log[a->log_len - 1] == '\n' ? "" : "\n");
}

/* What the command line asks for. */
typedef struct compile_args {
    const char *file, *arch, *outp;
    const char *kernels[64], *options[64], *hpaths[64];
    size_t nk, no, nh;
    int json, trusted, no_pch, no_store, in_process;
    double deadline;
} compile_args;

/* argv into a: -1 to go on, else the exit code (0 after --help, 2 on a
 * usage error, said on stderr). */
static int parse_args(int argc, char **argv, compile_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            a->json = 1;
        } else if (!strcmp(argv[i], "--trusted")) {
            a->trusted = 1;
        } else if (!strcmp(argv[i], "--no-pch")) {
            a->no_pch = 1;
        } else if (!strcmp(argv[i], "--no-store")) {
            a->no_store = 1;
        } else if (!strcmp(argv[i], "--in-process")) {
            a->in_process = 1;
        } else if ((v = arg_value(argc, argv, &i, "--arch", &missing))) {
            a->arch = v;
        } else if ((v = arg_value(argc, argv, &i, "--out", &missing))) {
            a->outp = v;
        } else if ((v = arg_value(argc, argv, &i, "--kernel", &missing))) {
            if (a->nk == KH_ARRAY_LEN(a->kernels)) {
                fprintf(stderr, "khlua compile: too many --kernel\n");
                return 2;
            }
            a->kernels[a->nk++] = v;
        } else if ((v = arg_value(argc, argv, &i, "--header", &missing))) {
            if (a->nh == KH_ARRAY_LEN(a->hpaths)) {
                fprintf(stderr, "khlua compile: too many --header (at most %zu)\n",
                        KH_ARRAY_LEN(a->hpaths));
                return 2;
            }
            a->hpaths[a->nh++] = v;
        } else if ((v = arg_value(argc, argv, &i, "--option", &missing))) {
            if (a->no == KH_ARRAY_LEN(a->options)) {
                fprintf(stderr, "khlua compile: too many --option\n");
                return 2;
            }
            a->options[a->no++] = v;
        } else if ((v = arg_value(argc, argv, &i, "--deadline", &missing))) {
            char *end;
            a->deadline = strtod(v, &end);
            if (*end || a->deadline <= 0 || a->deadline > 3600) {
                fprintf(stderr, "khlua compile: --deadline wants seconds in (0, 3600]\n");
                return 2;
            }
        } else if (missing) {
            fprintf(stderr, "khlua compile: %s needs a value\n", argv[i]);
            return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "khlua compile: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (a->file) {
            fprintf(stderr, "khlua compile: one file at a time ('%s' and '%s')\n", a->file,
                    argv[i]);
            return 2;
        } else {
            a->file = argv[i];
        }
    }
    if (!a->file) {
        usage(stderr);
        return 2;
    }
    return -1;
}

/* The headers a->hpaths names, read into headers (their texts the caller's
 * to free); 0, or -1 with what failed said on stderr and nothing kept. */
static int read_headers(const compile_args *a, kh_source *headers)
{
    char why[512];
    for (size_t h = 0; h < a->nh; h++) {
        const char *hn = header_name(a->file, a->hpaths[h]);
        char *text = NULL;
        size_t hl = 0;
        if (!hn)
            snprintf(why, sizeof why, "--header %s: not in %s's folder (%.*s); a header is "
                     "named by its path from there, as #include names it", a->hpaths[h],
                     a->file, (int)(strrchr(a->file, '/') - a->file), a->file);
        else
            text = read_file(a->hpaths[h], &hl, why, sizeof why);
        if (!text) {
            fprintf(stderr, "khlua compile: %s\n", why);
            for (size_t k = 0; k < h; k++)
                free((char *)headers[k].text);
            return -1;
        }
        headers[h] = (kh_source){.name = hn, .text = text, .len = hl};
    }
    return 0;
}

/* The result on stdout (the table, or --json's object), what failed on
 * stderr, and the cubin to --out; returns the exit code. */
static int report(const compile_args *a, kh_status st, const kh_artifact *art, const kh_err *err)
{
    int rc = st == KH_OK ? 0 : st == KH_EINTR ? 130 : 1;
    if (a->json) {
        json_t *j = art ? kh_artifact_to_json(art) : json_object();
        if (j && st) {
            json_object_set_new(j, "ok", json_false());
            json_object_set_new(j, "error", json_string(err->msg));
            json_object_set_new(j, "code", json_string(kh_status_name(st)));
        }
        char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
        if (s)
            puts(s);
        free(s);
        json_decref(j);
    } else {
        if (art)
            print_table(a->file, art);
        if (st)
            fprintf(stderr, "khlua compile: %s: %s\n", kh_status_name(st), err->msg);
    }
    if (st == KH_OK && a->outp) {
        FILE *f = fopen(a->outp, "wb");
        if (!f || fwrite(art->cubin, 1, art->cubin_len, f) != art->cubin_len || fclose(f)) {
            fprintf(stderr, "khlua compile: cannot write %s: %s\n", a->outp, strerror(errno));
            rc = 1;
        }
    }
    return rc;
}

int kh_cmd_compile(kh_engine *e, int argc, char **argv)
{
    compile_args ca;
    int prc = parse_args(argc, argv, &ca);
    if (prc >= 0)
        return prc;
    char why[512];
    size_t len = 0;
    char *src = read_file(ca.file, &len, why, sizeof why);
    if (!src) {
        fprintf(stderr, "khlua compile: %s\n", why);
        return 1;
    }
    const char *base = strrchr(ca.file, '/') ? strrchr(ca.file, '/') + 1 : ca.file;
    kh_source headers[KH_ARRAY_LEN(ca.hpaths)];
    if (read_headers(&ca, headers)) {
        free(src);
        return 1;
    }
    kh_compile_req req = {.source = src, .source_len = len, .name = base, .arch = ca.arch,
                          .options = ca.options, .n_options = ca.no, .kernels = ca.kernels,
                          .n_kernels = ca.nk, .deadline_s = ca.deadline, .trusted = ca.trusted,
                          .isolate = !ca.trusted, .no_pch = ca.no_pch, .no_cache = ca.no_store,
                          .headers = headers, .n_headers = ca.nh};
    kh_err err;
    kh_store *store = NULL;
    if (!ca.no_store) {
        kh_store_opts so = {0};
        if (kh_store_open(kh_engine_store_path(e), &so, &store, &err)) {
            fprintf(stderr, "khlua compile: not using the store %s: %s\n",
                    kh_engine_store_path(e), err.msg);
            store = NULL;
        }
    }
    /* one job needs one server */
    kh_compile_service_opts o = {.servers = 1, .in_process = ca.in_process};
    kh_compile_service *svc = kh_compile_service_new(e, &o, &err);
    if (!svc) {
        kh_store_close(store);
        for (size_t h = 0; h < ca.nh; h++)
            free((char *)headers[h].text);
        free(src);
        fprintf(stderr, "khlua compile: %s\n", err.msg);
        return 1;
    }
    kh_artifact *a = NULL;
    kh_status st = kh_compile_service_build(svc, store, &req, &a, &err);
    kh_compile_service_stats sst;
    kh_compile_service_stats_get(svc, &sst);
    if (sst.store_errors)
        fprintf(stderr, "khlua compile: store: %s\n", sst.last_store_error);
    kh_compile_service_free(svc);
    kh_store_close(store);
    int rc = report(&ca, st, a, &err);
    kh_artifact_free(a);
    for (size_t h = 0; h < ca.nh; h++)
        free((char *)headers[h].text);
    free(src);
    return rc;
}
