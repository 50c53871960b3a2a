/* cmd_store.c: `khlua store <verb>`, the artifact store from the shell: ls,
 * show, cat, stats, verify, export, import, gc, backup.  Reading verbs open
 * the store read-only, so they run beside a coordinator that is writing.
 * Exit 0 ok, 1 failure or problems found, 2 usage. */
#include "cli.h"
#include "commands.h"
#include "core/proc.h"

#include "store/store.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define P "khlua store"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " P " VERB [options] [--store PATH]\n"
            "\n"
            "verbs:\n"
            "  ls [--type T] [--task X] [--run R] [--candidate C] [--status S]\n"
            "     [--since TIME] [--limit N] [--json]     records, newest first (limit 50);\n"
            "                                   a run marked running whose process is gone\n"
            "                                   shows as dead (JSON: \"alive\": false)\n"
            "  show ID [--json]                 one record (indented JSON; --json: one line)\n"
            "  cat HASH                         a blob's bytes to stdout\n"
            "  stats [--json]                   counts per type, bytes stored and raw, map use\n"
            "  verify [--json]                  check every record, blob and index entry;\n"
            "                                   exit 1 with a report on any problem\n"
            "  export --format jsonl|fib-trace [--task X] [--run R] [--gate] [--output FILE]\n"
            "                                   jsonl: blobs and records (what import reads);\n"
            "                                   fib-trace: FlashInfer-Bench Trace JSONL of\n"
            "                                   official-protocol timings (a run's finalists,\n"
            "                                   khlua eval --protocol official); --run: one\n"
            "                                   run's; --gate: the gate's measurements too,\n"
            "                                   marked in their logs\n"
            "  import FILE                      read what export --format jsonl wrote (- = stdin)\n"
            "  gc [--grace SECONDS] [--json]    delete blobs no record references (spares\n"
            "                                   blobs younger than the grace, default 3600 s)\n"
            "  backup DEST                      a consistent compacted copy, safe while in use\n"
            "\n"
            "The store is --store PATH, else $KHLUA_STORE, else .khlua/store.  A task may be\n"
            "given by name or id (task-<name>).\n");
}

static int fail(const char *verb, const kh_err *err)
{
    fprintf(stderr, P " %s: %s\n", verb, err->msg);
    return 1;
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, P ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see " P " --help)\n");
    va_end(ap);
    return 2;
}

static void print_json(json_t *j, int compact)
{
    char *s = json_dumps(j, compact ? JSON_COMPACT : JSON_INDENT(2));
    if (s)
        puts(s);
    free(s);
}

static const char *task_id(const char *t, char *buf, size_t n)
{
    if (!t || !strncmp(t, "task-", 5))
        return t;
    snprintf(buf, n, "task-%s", t);
    return buf;
}

static const char *str(json_t *rec, const char *f)
{
    const char *s = json_string_value(json_object_get(rec, f));
    return s ? s : "-";
}

typedef struct opts {
    const char *store;
    const char *type, *task, *run, *candidate, *status, *since, *format, *output;
    long limit;
    double grace;
    int json, gate;
    const char *pos[2];
    int npos;
} opts;

/* Parse the options after the verb; returns 0 or 2 (usage). */
static int parse(int argc, char **argv, opts *o, const char *allowed)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *names[] = {"--store", "--type", "--task", "--run", "--candidate",
                               "--status", "--since", "--format", "--output", "--limit",
                               "--grace"};
        int matched = 0;
        for (size_t k = 0; k < KH_ARRAY_LEN(names); k++) {
            size_t n = strlen(names[k]);
            if (strncmp(a, names[k], n) || (a[n] && a[n] != '='))
                continue;
            if (k > 0 && !strstr(allowed, names[k]))
                return usage_error("this verb takes no %s", names[k]);
            const char *v = a[n] == '=' ? a + n + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v)
                return usage_error("%s needs a value", names[k]);
            const char **slot[] = {&o->store, &o->type, &o->task, &o->run, &o->candidate,
                                   &o->status, &o->since, &o->format, &o->output};
            if (k < KH_ARRAY_LEN(slot)) {
                *slot[k] = v;
            } else {
                char *end;
                errno = 0;
                double d = strtod(v, &end);
                if (*end || errno || d < 0 || (k == 9 && d != (long)d))
                    return usage_error("bad number '%s'", v);
                if (k == 9)
                    o->limit = (long)d;
                else
                    o->grace = d;
            }
            matched = 1;
            break;
        }
        if (matched)
            continue;
        if (!strcmp(a, "--json") && strstr(allowed, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--gate") && strstr(allowed, "--gate")) {
            o->gate = 1;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("unknown option '%s'", a);
        } else if (o->npos < 2) {
            o->pos[o->npos++] = a;
        } else {
            return usage_error("unexpected argument '%s'", a);
        }
    }
    return 0;
}

static kh_status open_store(kh_engine *e, const opts *o, int readonly, kh_store **s,
                            kh_err *err)
{
    kh_store_opts so = {.readonly = readonly};
    return kh_store_open(o->store ? o->store : kh_engine_store_path(e), &so, s, err);
}

/* A run marked running whose process is gone (killed, the machine rebooted)
 * shows as dead: its record's liveness mark {pid, host, start} names a
 * process of this host that no longer runs.  Sets "alive" on such records
 * (false, or true when the process still runs). */
static void mark_liveness(json_t *arr)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1))
        return;
    size_t i;
    json_t *r;
    json_array_foreach(arr, i, r) {
        const json_t *live = json_object_get(r, "live");
        const char *st = json_string_value(json_object_get(r, "status"));
        const char *h = json_string_value(json_object_get(live, "host"));
        if (!st || strcmp(st, "running") || !h || strcmp(h, host))
            continue;
        int a = kh_proc_alive((long)json_integer_value(json_object_get(live, "pid")),
                              (unsigned long long)json_integer_value(json_object_get(live,
                                                                                     "start")));
        if (a >= 0)
            json_object_set_new(r, "alive", json_boolean(a));
    }
}

static int cmd_ls(kh_store *s, const opts *o)
{
    char tb[160];
    kh_store_filter q = {.type = o->type, .task = task_id(o->task, tb, sizeof tb),
                         .run = o->run, .candidate = o->candidate, .status = o->status,
                         .limit = o->limit >= 0 ? (size_t)o->limit : 50};
    kh_err err;
    if (o->since && kh_store_parse_time(o->since, &q.since_us, &err))
        return fail("ls", &err);
    json_t *arr;
    if (kh_store_query(s, &q, 0, &arr, &err))
        return fail("ls", &err);
    mark_liveness(arr);
    if (o->json) {
        print_json(arr, 1);
    } else {
        size_t i;
        json_t *r;
        json_array_foreach(arr, i, r) {
            const char *status = str(r, "status");
            if (json_is_false(json_object_get(r, "alive")))
                status = "dead";
            printf("%-40s %-11s %-20s %-28s %s\n", str(r, "id"), str(r, "type"),
                   status, str(r, "created_at"),
                   strcmp(str(r, "task"), "-") ? str(r, "task") : str(r, "run"));
        }
        fprintf(stderr, "%zu record%s\n", json_array_size(arr),
                json_array_size(arr) == 1 ? "" : "s");
    }
    json_decref(arr);
    return 0;
}

static kh_status cat_sink(void *arg, const void *data, size_t len, kh_err *err)
{
    if (fwrite(data, 1, len, arg) != len)
        return kh_err_set(err, KH_EIO, "writing to stdout: %s", strerror(errno));
    return KH_OK;
}

static kh_status cat_cb(kh_store_txn *tx, void *arg, kh_err *err)
{
    return kh_store_txn_stream_blob(tx, arg, cat_sink, stdout, err);
}

static int cmd_stats(kh_store *s, const opts *o)
{
    json_t *j;
    kh_err err;
    if (kh_store_stats(s, &j, &err))
        return fail("stats", &err);
    if (o->json) {
        print_json(j, 0);
        json_decref(j);
        return 0;
    }
    printf("store      %s (schema %d)\n", kh_store_path(s), KH_STORE_SCHEMA);
    printf("records    %lld\n", (long long)json_integer_value(json_object_get(j, "records_total")));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(j, "records"), k, v)
        printf("  %-12s %lld\n", k, (long long)json_integer_value(v));
    long long raw = json_integer_value(json_object_get(j, "blob_bytes_raw"));
    long long stored = json_integer_value(json_object_get(j, "blob_bytes_stored"));
    printf("blobs      %lld, %lld bytes raw, %lld stored (%.2fx)\n",
           (long long)json_integer_value(json_object_get(j, "blobs")), raw, stored,
           stored ? (double)raw / (double)stored : 1.0);
    long long ms = json_integer_value(json_object_get(j, "map_size"));
    long long mu = json_integer_value(json_object_get(j, "map_used"));
    printf("map        %lld of %lld bytes used (%.1f%%)\n", mu, ms, ms ? 100.0 * mu / ms : 0);
    json_decref(j);
    return 0;
}

static int cmd_verify(kh_store *s, const opts *o)
{
    json_t *r;
    kh_err err;
    if (kh_store_verify(s, &r, &err))
        return fail("verify", &err);
    long long np = json_integer_value(json_object_get(r, "problems_total"));
    if (o->json) {
        print_json(r, 0);
    } else {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(r, "problems"), i, p)
            printf("problem: %s\n", json_string_value(p));
        if ((size_t)np > json_array_size(json_object_get(r, "problems")))
            printf("... and %lld more\n",
                   np - (long long)json_array_size(json_object_get(r, "problems")));
        printf("%lld records, %lld blobs, %lld index entries: %s\n",
               (long long)json_integer_value(json_object_get(r, "records")),
               (long long)json_integer_value(json_object_get(r, "blobs")),
               (long long)json_integer_value(json_object_get(r, "index_entries")),
               np ? "PROBLEMS FOUND" : "ok");
    }
    json_decref(r);
    return np ? 1 : 0;
}

static int cmd_export(kh_store *s, const opts *o)
{
    char tb[160];
    FILE *f = stdout;
    if (o->output && strcmp(o->output, "-") && !(f = fopen(o->output, "w"))) {
        fprintf(stderr, P " export: cannot write %s: %s\n", o->output, strerror(errno));
        return 1;
    }
    size_t n = 0, marked = 0;
    kh_err err;
    kh_store_export_opts eo = {.format = o->format, .task = task_id(o->task, tb, sizeof tb),
                               .run = o->run, .gate = o->gate};
    kh_status st = kh_store_export(s, &eo, f, &n, &marked, &err);
    if (f != stdout && fclose(f) != 0 && !st)
        st = kh_err_set(&err, KH_EIO, "closing %s: %s", o->output, strerror(errno));
    if (st) {
        if (f != stdout)
            remove(o->output);
        return fail("export", &err);
    }
    if (strcmp(eo.format ? eo.format : "jsonl", "jsonl"))
        fprintf(stderr, "exported %zu traces (%zu official-protocol timings%s)\n", n, n - marked,
                o->gate ? ", the rest gate measurements, marked in their logs"
                        : "; --gate adds the gate's measurements, marked");
    else
        fprintf(stderr, "exported %zu records (and their blobs)\n", n);
    return 0;
}

static int cmd_import(kh_store *s, const opts *o)
{
    FILE *f = stdin;
    if (strcmp(o->pos[0], "-") && !(f = fopen(o->pos[0], "r"))) {
        fprintf(stderr, P " import: cannot read %s: %s\n", o->pos[0], strerror(errno));
        return 1;
    }
    json_t *r;
    kh_err err;
    kh_status st = kh_store_import(s, f, &r, &err);
    if (f != stdin)
        fclose(f);
    if (st)
        return fail("import", &err);
    printf("imported %lld records and %lld blobs; %lld records already present\n",
           (long long)json_integer_value(json_object_get(r, "records")),
           (long long)json_integer_value(json_object_get(r, "blobs")),
           (long long)json_integer_value(json_object_get(r, "skipped")));
    json_decref(r);
    return 0;
}

int kh_cmd_store(kh_engine *e, int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *verb = argv[1];
    static const struct {
        const char *verb, *allowed;
        int npos, readonly;
    } verbs[] = {
        {"ls", "--type --task --run --candidate --status --since --limit --json", 0, 1},
        {"show", "--json", 1, 1},
        {"cat", "", 1, 1},
        {"stats", "--json", 0, 1},
        {"verify", "--json", 0, 1},
        {"export", "--format --task --run --gate --output", 0, 1},
        {"import", "", 1, 0},
        {"gc", "--grace --json", 0, 0},
        {"backup", "", 1, 1},
    };
    int vi = -1;
    for (size_t i = 0; i < KH_ARRAY_LEN(verbs); i++)
        if (!strcmp(verbs[i].verb, verb))
            vi = (int)i;
    if (vi < 0)
        return usage_error("unknown verb '%s'", verb);
    if (kh_cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    opts o = {.limit = -1, .grace = 3600};
    int rc = parse(argc, argv, &o, verbs[vi].allowed);
    if (rc)
        return rc;
    if (o.npos != verbs[vi].npos)
        return verbs[vi].npos ? usage_error("%s needs one argument", verb)
                              : usage_error("%s takes no argument", verb);
    if (vi == 5 && !o.format)
        return usage_error("%s needs --format jsonl or --format fib-trace", verb);
    kh_hash h;
    kh_err err;
    if (vi == 2 && kh_hash_parse(o.pos[0], &h, &err)) {
        fprintf(stderr, P " cat: %s\n", err.msg);
        return 2;
    }
    kh_store *s;
    if (open_store(e, &o, verbs[vi].readonly, &s, &err))
        return fail(verb, &err);
    switch (vi) {
    case 0:
        rc = cmd_ls(s, &o);
        break;
    case 1: {
        json_t *r;
        if (kh_store_get(s, o.pos[0], &r, &err)) {
            rc = fail("show", &err);
        } else {
            print_json(r, o.json);
            json_decref(r);
        }
        break;
    }
    case 2:
        rc = kh_store_view(s, cat_cb, &h, &err) ? fail("cat", &err) : 0;
        if (fflush(stdout) != 0)
            rc = 1;
        break;
    case 3:
        rc = cmd_stats(s, &o);
        break;
    case 4:
        rc = cmd_verify(s, &o);
        break;
    case 5:
        rc = cmd_export(s, &o);
        break;
    case 6:
        rc = cmd_import(s, &o);
        break;
    case 7: {
        json_t *r;
        if (kh_store_gc(s, o.grace, &r, &err)) {
            rc = fail("gc", &err);
        } else {
            if (o.json)
                print_json(r, 1);
            else
                printf("deleted %lld unreferenced blobs (%lld bytes raw); kept %lld\n",
                       (long long)json_integer_value(json_object_get(r, "deleted")),
                       (long long)json_integer_value(json_object_get(r, "bytes")),
                       (long long)json_integer_value(json_object_get(r, "kept")));
            json_decref(r);
        }
        break;
    }
    case 8:
        if (kh_store_backup(s, o.pos[0], &err))
            rc = fail("backup", &err);
        else
            printf("backup written to %s\n", o.pos[0]);
        break;
    }
    kh_store_close(s);
    return rc;
}
