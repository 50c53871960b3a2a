/* cmd_export.c: `khlua export solution RUN|CANDIDATE|FILE|NAME --task DIR
 * --out DIR [--name NAME] [--json]`: a khlua CUDA solution as a
 * FlashInfer-Bench Solution that FlashInfer-Bench's own builder and
 * benchmark run unchanged.  Finds the solution (a run's incumbent as
 * `khlua best` does, engine/store/best.h; a candidate record; a Solution file; a
 * solution of the task), loads it against the task's definitions (task.h),
 * compiles it as eval does (NVRTC, compile.h: the cubin the export embeds)
 * and leaves the export itself to engine/task/fib_export.h.  Reads the store
 * read-only.  Exit 0 ok, 1 failure, 2 usage. */
#include "cli.h"
#include "commands.h"

#include "compile/compile.h"
#include "store/best.h"
#include "task/fib_export.h"
#include "store/store.h"
#include "task/task.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define P "khlua export"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: khlua [--store PATH] export solution WHAT --task DIR --out DIR [--name NAME]\n"
            "                                    [--arch A | --source-only] [--json]\n"
            "  A khlua CUDA solution as a FlashInfer-Bench Solution that FlashInfer-Bench's\n"
            "  own builder (TVM-FFI) compiles and its benchmark runs: the kernel source (the\n"
            "  entry file renamed .cuh) and a generated host entry, binding.cu::run, which\n"
            "  checks the tensors and launches the kernels as the launch manifest says\n"
            "  (docs/fib-export.md).\n"
            "  WHAT is one of\n"
            "    RUN         a run's best kernel, as `khlua best RUN` finds it ('last': the\n"
            "                newest run)\n"
            "    CANDIDATE   a candidate record of the store (candidate-...)\n"
            "    FILE        a Solution JSON file\n"
            "    NAME        a solution of the --task package or dataset\n"
            "  --task DIR    the task package or FlashInfer-Bench dataset holding its definition\n"
            "  --out DIR     where to write NAME.json and the sources beside it (created)\n"
            "  --name NAME   the exported Solution's name (default: the solution's own)\n"
            "  --arch A      the architecture of the embedded cubin (default $KHLUA_ARCH, else\n"
            "                sm_90a): khlua compiles the kernels as eval does (NVRTC) and\n"
            "                kernels.cu carries that cubin; binding.cu launches its kernels on a\n"
            "                GPU of that architecture, so FlashInfer-Bench times the code khlua\n"
            "                timed (NVRTC and nvcc can emit different code for one source), and\n"
            "                on any other GPU the kernels nvcc builds from the source\n"
            "  --source-only no cubin: the kernels nvcc builds from the source everywhere\n"
            "  --json        print a JSON summary on stdout\n"
            "  Host-backend (C) and cuda_so solutions are refused: FlashInfer-Bench runs every\n"
            "  solution on CUDA tensors.\n"
            "exit codes: 0 ok, 1 failure, 2 usage\n");
}

static int fail(const char *msg)
{
    fprintf(stderr, P ": %s\n", msg);
    return 1;
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A Solution from the store into a private file for kh_task_load, which
 * reads Solutions from disk only; the folder is removed by the caller. */
static kh_status stage(const json_t *sol, char *dir, size_t dn, char *file, size_t fn,
                       kh_err *err)
{
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, dn, "%s/khlua-export-XXXXXX", tmp);
    if (!mkdtemp(dir))
        return kh_err_set(err, KH_EIO, "%s: %s", dir, strerror(errno));
    snprintf(file, fn, "%s/solution.json", dir);
    if (json_dump_file(sol, file, JSON_INDENT(2)))
        return kh_err_set(err, KH_EIO, "writing %s", file);
    return KH_OK;
}

/* The cubin eval would run for sol: its sources through NVRTC, untrusted (the
 * static checks) and in a child killed at the deadline, for arch (NULL:
 * $KHLUA_ARCH, else the default). */
static kh_status compile_image(kh_engine *e, const kh_task_solution *sol, const char *arch,
                               kh_artifact **out, kh_err *err)
{
    const char *src = NULL;
    size_t len = 0, nh = 0, nk = 0;
    kh_source *hdrs = NULL;
    const char *kernels[64];
    *out = NULL;
    kh_status st = kh_task_cuda_sources(sol, &src, &len, &hdrs, &nh, err);
    if (st)
        return st;
    for (size_t l = 0; l < sol->manifest->nlaunches && nk < 64; l++)
        kernels[nk++] = sol->manifest->launches[l].kernel;
    kh_compiler *c = kh_compile_new(e, err);
    if (!c) {
        free(hdrs);
        return err->code;
    }
    kh_compile_req rq = {.source = src, .source_len = len, .name = sol->entry_file,
                         .headers = hdrs, .n_headers = nh, .arch = arch, .kernels = kernels,
                         .n_kernels = nk, .isolate = 1};
    st = kh_compile_build(c, &rq, out, err);
    if (st == KH_ECOMPILE && *out && (*out)->log && (*out)->log[0])
        kh_err_set(err, KH_ECOMPILE, "it does not compile (khlua compiles the kernels to embed "
                   "their cubin; --source-only embeds none):\n%.900s", (*out)->log);
    else if (st)
        kh_err_prefix(err, "compiling its kernels (the cubin to embed; --source-only embeds "
                      "none)");
    if (st) {
        kh_artifact_free(*out);
        *out = NULL;
    }
    kh_compile_free(c);
    free(hdrs);
    return st;
}

/* What was exported, to stdout (the Solution file, or --json's summary)
 * and stderr (where its kernels come from). */
static void print_export(const kh_fib_export *x, const kh_task_solution *sol, const char *path,
                         const char *out, const char *kind, const char *what, const kh_best *b,
                         const kh_artifact *art, const char *about, int as_json)
{
    const json_t *xs = x->solution;
    const char *xname = json_string_value(json_object_get(xs, "name"));
    const char *entry = json_string_value(json_object_get(json_object_get(xs, "spec"),
                                                          "entry_point"));
    if (as_json) {
        json_t *srcs = json_array();
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(xs, "sources"), i, s) {
            char p[4400];
            snprintf(p, sizeof p, "%s/%s", out, json_string_value(json_object_get(s, "path")));
            json_array_append_new(srcs, json_string(p));
        }
        json_t *from = json_pack("{s:s, s:s}", "kind", kind, "what", what);
        if (b->run[0])
            json_object_set_new(from, "run", json_string(b->run));
        if (b->candidate[0])
            json_object_set_new(from, "candidate", json_string(b->candidate));
        json_t *sum = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o}", "solution",
                                path, "name", xname, "definition", sol->definition,
                                "entry_point", entry, "kernel_file", x->kernel_file,
                                "wrapper_file", x->wrapper_file, "entry_file", x->entry_file,
                                "sources", srcs, "from", from);
        json_object_set_new(sum, "image", art ? json_pack("{s:s, s:s, s:s, s:I}", "arch",
                                                          art->arch, "nvrtc", art->nvrtc_version,
                                                          "compile_key", art->hash, "bytes",
                                                          (json_int_t)art->cubin_len)
                                              : json_null());
        char *t = sum ? json_dumps(sum, JSON_SORT_KEYS) : NULL;
        printf("%s\n", t ? t : "{}");
        free(t);
        json_decref(sum);
    } else {
        printf("%s\n", path);
        fprintf(stderr, "%s: %s%s%s exported to %s: entry %s, kernels in %s (compiled by %s); "
                "FlashInfer-Bench builds it with its TVM-FFI builder\n", what, xname,
                b->candidate[0] ? " of " : "", b->candidate[0] ? b->candidate : "", out, entry,
                x->kernel_file, x->wrapper_file);
        if (art)
            fprintf(stderr, "%s: embeds the %s cubin khlua compiled (%s): a GPU of that "
                    "architecture runs the code khlua timed, others nvcc's build of the source\n",
                    xname, art->arch, about);
        else
            fprintf(stderr, "%s: no cubin embedded (--source-only): nvcc's build of the source "
                    "runs, whose code may differ from what khlua timed\n", xname);
    }
}

/* What the command line asks for. */
typedef struct export_args {
    const char *what, *task, *out, *name, *arch;
    int as_json, source_only;
} export_args;

/* argv into a: -1 to go on, else the exit code (0 after --help, 2 on a
 * usage error, said on stderr). */
static int parse_args(int argc, char **argv, export_args *a)
{
    if (argc < 2 || kh_cli_wants_help(argc, argv)) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "solution")) {
        fprintf(stderr, P ": expected 'solution', got '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    memset(a, 0, sizeof *a);
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            a->as_json = 1;
        } else if (!strcmp(argv[i], "--source-only")) {
            a->source_only = 1;
        } else if (!strcmp(argv[i], "--arch") && i + 1 < argc) {
            a->arch = argv[++i];
        } else if ((!strcmp(argv[i], "--task") || !strcmp(argv[i], "--out") ||
                    !strcmp(argv[i], "--name")) && i + 1 < argc) {
            const char **slot = argv[i][2] == 't'   ? &a->task
                                : argv[i][2] == 'o' ? &a->out
                                                    : &a->name;
            *slot = argv[++i];
        } else if (argv[i][0] == '-' || a->what) {
            fprintf(stderr, P ": unexpected argument '%s'%s\n", argv[i],
                    argv[i][0] == '-' && i + 1 == argc ? " (it needs a value)" : "");
            usage(stderr);
            return 2;
        } else {
            a->what = argv[i];
        }
    }
    if (a->arch && a->source_only) {
        fprintf(stderr, P ": --arch names the embedded cubin's architecture; --source-only "
                "embeds none\n");
        usage(stderr);
        return 2;
    }
    if (!a->what || !a->task || !a->out) {
        fprintf(stderr, P ": %s\n", !a->what ? "which solution? (a run, a candidate, a Solution "
                                                "file or a solution name)"
                                     : !a->task ? "--task DIR is required: the package or "
                                                  "dataset that holds its definition"
                                                : "--out DIR is required");
        usage(stderr);
        return 2;
    }
    return -1;
}

int kh_cmd_export(kh_engine *e, int argc, char **argv)
{
    export_args ea;
    int prc = parse_args(argc, argv, &ea);
    if (prc >= 0)
        return prc;
    const char *what = ea.what, *task = ea.task, *out = ea.out;
    int rc = 1;
    kh_err err;
    kh_task_set *T = NULL, *S = NULL;
    kh_store *store = NULL;
    kh_best b = {0};
    kh_fib_export x = {0};
    kh_artifact *art = NULL;
    char tmpdir[4200] = "", tmpfile[4300] = "";
    const char *kind = NULL;
    char msg[1400];

    kh_task_opts to = {0};
    if (kh_task_load(task, &to, &T, &err) || kh_task_check_errors(T, task, &err)) {
        snprintf(msg, sizeof msg, "--task: %s", err.msg);
        fail(msg);
        goto done;
    }
    const char *file = NULL;
    if (is_file(what)) {
        kind = "file";
        file = what;
    } else if (!strcmp(what, "last") || !strncmp(what, "run-", 4) ||
               !strncmp(what, "candidate-", 10)) {
        kind = !strncmp(what, "candidate-", 10) ? "candidate" : "run";
        kh_store_opts so = {.readonly = 1};
        if (kh_store_open(kh_engine_store_path(e), &so, &store, &err)) {
            snprintf(msg, sizeof msg, "store: %s", err.msg);
            fail(msg);
            goto done;
        }
        kh_status st = !strcmp(kind, "run") ? kh_best_of_run(store, what, &b, &err)
                                            : kh_best_of_candidate(store, what, &b, &err);
        if (st || stage(b.solution, tmpdir, sizeof tmpdir, tmpfile, sizeof tmpfile, &err)) {
            fail(err.msg);
            goto done;
        }
        file = tmpfile;
    } else {
        kind = "name";
    }

    const kh_task_solution *sol = NULL;
    const kh_task_set *owner = T;
    if (file) {
        kh_task_opts so = {.defs_from = task};
        if (kh_task_load(file, &so, &S, &err)) {
            snprintf(msg, sizeof msg, "%s: %s", what, err.msg);
            fail(msg);
            goto done;
        }
        if (kh_task_nsolutions(S) != 1) {
            snprintf(msg, sizeof msg, "%s: expected one Solution, found %zu%s", what,
                     kh_task_nsolutions(S),
                     kh_task_nproblems(S) ? " (khlua task check FILE says why)" : "");
            fail(msg);
            goto done;
        }
        kh_task_bind_definitions(S, T);
        sol = kh_task_solution_at(S, 0);
        owner = S;
    } else if (!(sol = kh_task_find_solution(T, what))) {
        snprintf(msg, sizeof msg, "%s: not a file, a run (run-..., last), a candidate "
                 "(candidate-...) nor a solution of %s", what, task);
        fail(msg);
        goto done;
    }
    if (kh_task_solution_errors(owner, sol, &err)) {
        snprintf(msg, sizeof msg, "%s: %s", what, err.msg);
        fail(msg);
        goto done;
    }
    /* a Solution file inside another package was checked against that
     * package's definition: --task must hold it too */
    if (!sol->def || !sol->definition || !kh_task_find_def(T, sol->definition)) {
        snprintf(msg, sizeof msg, "%s: its definition '%s' is not in --task %s", what,
                 sol->definition ? sol->definition : "?", task);
        fail(msg);
        goto done;
    }
    kh_fib_export_opts xo = {.name = ea.name};
    char about[200] = "";
    /* what the export refuses (no manifest, host, cuda_so) it refuses below */
    const kh_task_manifest *man = sol->manifest;
    if (!ea.source_only && man && !man->host && !man->so && man->nlaunches) {
        if (compile_image(e, sol, ea.arch, &art, &err)) {
            snprintf(msg, sizeof msg, "%s: %s", what, err.msg);
            fail(msg);
            goto done;
        }
        snprintf(about, sizeof about, "NVRTC %s, compile key %s", art->nvrtc_version, art->hash);
        xo.image = art->cubin;
        xo.image_len = art->cubin_len;
        xo.image_arch = art->arch;
        xo.image_about = about;
    }
    char path[4200];
    if (kh_fib_export_solution(sol, &xo, &x, &err) ||
        kh_fib_export_write(&x, out, path, sizeof path, &err)) {
        fail(err.msg);
        goto done;
    }

    print_export(&x, sol, path, out, kind, what, &b, art, about, ea.as_json);
    rc = 0;
done:
    if (tmpfile[0])
        unlink(tmpfile);
    if (tmpdir[0])
        rmdir(tmpdir);
    kh_fib_export_free(&x);
    kh_artifact_free(art);
    kh_best_free(&b);
    kh_store_close(store);
    kh_task_set_free(S);
    kh_task_set_free(T);
    return rc;
}
