/* cmd_profile.c: `khlua profile`: profiler evidence for one launch list: the
 * range profiler's metrics per kernel in a profile worker, the bottleneck
 * state, and with --ncu Nsight Compute's report beside it.  Also the hidden
 * `--run-only` mode, the process ncu profiles.  --task/--solution build the
 * cubin and the launch list from a task's candidate (profile_task.c). */
#include "commands.h"

#include "profile/profile.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: khlua profile --cubin FILE --spec LAUNCHLIST.json [--json]\n"
            "                     [--metrics A,B,...] [--replay user|kernel]\n"
            "                     [--min-bytes N] [--flops N] [--latency-ns T]\n"
            "                     [--ncu] [--ncu-path P] [--sections S,...] [--out DIR]\n"
            "                     [--store PATH | --no-store] [--candidate ID] [--evaluation ID]\n"
            "                     [--remeasure-peaks] [--peaks-max-age SECONDS]\n"
            "       khlua profile --task DIR --solution FILE|NAME [--workload UUID] [--seed N]\n"
            "                     [--trusted] [--dry-run] [--ncu] [--json] [same options]\n"
            "\n"
            "Profiles each kernel of a launch list (engine/gpu/launch.h) in a profile worker\n"
            "with CUPTI's range profiler, and prints per kernel its time, SM / memory /\n"
            "DRAM throughput in %% of peak, occupancy, and the bottleneck state\n"
            "(Nsight Compute's speed-of-light rule, the re-read factor against\n"
            "--min-bytes, the fraction of speed of light against the copy bandwidth the\n"
            "worker measured at start).  Where counters are not permitted it says\n"
            "\"no counters\" and why, and still times the list.\n"
            "\n"
            "  --metrics LIST  metric names (default $KHLUA_PROFILE_METRICS or the built-in\n"
            "                  list; names the GPU does not know are dropped and listed)\n"
            "  --replay MODE   user (default: buffers restored and L2 flushed before each\n"
            "                  pass) or kernel (CUPTI replays each kernel)\n"
            "  --min-bytes N   the task's minimum bytes moved (re-read factor, SOL)\n"
            "  --flops N       the task's FLOPs\n"
            "  --latency-ns T  a measured latency to take the SOL fraction against\n"
            "  --ncu           also run Nsight Compute (--clock-control none) and compare\n"
            "  --ncu-path P    the ncu executable (default: PATH, then $CUDA_HOME/bin)\n"
            "  --sections S    ncu sections (default SpeedOfLight,LaunchStats,Occupancy,\n"
            "                  MemoryWorkloadAnalysis)\n"
            "  --out DIR       where ncu's report.ncu-rep and raw.csv go\n"
            "  --json          the whole report as one JSON object\n"
            "  --store PATH    record into this store (default: --store before the command,\n"
            "                  $KHLUA_STORE, else .khlua/store): a profile record with the\n"
            "                  metrics and states, ncu's report and raw CSV and the cubin as\n"
            "                  blobs; the GPU's peaks as a device record, reused while fresh\n"
            "  --no-store      neither read nor write a store (peaks measured afresh)\n"
            "  --candidate ID, --evaluation ID   link the profile record to these\n"
            "  --remeasure-peaks      measure the copy bandwidth now, whatever is stored\n"
            "  --peaks-max-age S      stored peaks older than S seconds are re-measured\n"
            "                         (default 604800, one week; same driver required)\n"
            "\n"
            "--task DIR --solution FILE|NAME: the candidate's source is compiled (NVRTC, as\n"
            "khlua eval does) and its manifest resolved for one workload (--workload UUID,\n"
            "else the first) into a launch list with random inputs; the task's minimum\n"
            "bytes and FLOPs (unless given) feed the state, and the record links the task\n"
            "and candidate when the store holds them (khlua eval writes them).\n"
            "  --dry-run       print what would be profiled (launch list, context, cubin\n"
            "                  hash) as JSON and stop before any worker starts\n"
            "Exit 0 when profiled (with or without counters), 1 when it could not run,\n"
            "2 on usage errors.\n");
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            unsigned char *b = cap < (1u << 30) ? realloc(buf, cap * 2) : NULL;
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (!r)
            break;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

static int num_arg(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return !errno && end != s && !*end && isfinite(*v) && *v >= 0;
}

static const char *str_or(const json_t *o, const char *k, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : dflt;
}

static double num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* A right-aligned number, or "-" when unknown. */
static void cell(char *buf, int width, int prec, double v)
{
    if (isfinite(v))
        snprintf(buf, 24, "%*.*f", width, prec, v);
    else
        snprintf(buf, 24, "%*s", width, "-");
}

static void print_report(const json_t *rep)
{
    const json_t *gpu = json_object_get(rep, "gpu");
    const json_t *peaks = json_object_get(rep, "peaks");
    printf("gpu       %s (%s)\n", str_or(gpu, "name", "?"), str_or(gpu, "uuid", "?"));
    if (isfinite(num(peaks, "copy_bytes_per_s")))
        printf("peaks     copy %.0f GB/s (%s %s)\n", num(peaks, "copy_bytes_per_s") / 1e9,
               !strcmp(str_or(peaks, "source", "?"), "store") ? "kept from" : "measured",
               str_or(peaks, "measured_at", "?"));
    else
        printf("peaks     %s\n", str_or(peaks, "error", "not measured"));
    if (json_is_true(json_object_get(rep, "counters")))
        printf("counters  %s, %s replay, %lld passes\n", str_or(rep, "chip", "?"),
               str_or(rep, "replay", "?"),
               (long long)json_integer_value(json_object_get(rep, "passes")));
    else
        printf("counters  none: %s\n", str_or(rep, "why", "?"));
    size_t i;
    const json_t *d;
    json_array_foreach(json_object_get(rep, "dropped"), i, d)
        printf("dropped   %s: %s\n", str_or(d, "metric", "?"), str_or(d, "why", "?"));
    printf("\n%-3s %-24s %10s %6s %6s %6s %6s %7s  %s\n", "#", "kernel", "time us", "sm%",
           "mem%", "dram%", "warps%", "occ%", "state");
    const json_t *k;
    json_array_foreach(json_object_get(rep, "kernels"), i, k) {
        const json_t *m = json_object_get(k, "metrics"), *s = json_object_get(k, "state");
        char c[6][24];
        cell(c[0], 10, 2, num(s, "time_ns") / 1e3);
        cell(c[1], 6, 1, num(s, "sm_pct"));
        cell(c[2], 6, 1, num(s, "mem_pct"));
        cell(c[3], 6, 1, num(s, "dram_pct"));
        cell(c[4], 6, 1, num(m, "sm__warps_active.avg.pct_of_peak_sustained_active"));
        cell(c[5], 7, 1, num(s, "occupancy_pct"));
        printf("%-3zu %-24.24s %s %s %s %s %s %s  %s\n", i, str_or(k, "kernel", "?"), c[0],
               c[1], c[2], c[3], c[4], c[5], str_or(s, "signature", "?"));
    }
    const json_t *t = json_object_get(rep, "timing");
    if (t)
        printf("\ntiming    %.2f us (%s, %s protocol)\n", num(t, "latency_ns") / 1e3,
               str_or(t, "timer", "?"), str_or(t, "protocol", "?"));
    printf("state     %s\n", str_or(rep, "signature", "?"));
    if (json_object_get(rep, "store_id"))
        printf("stored    %s\n", str_or(rep, "store_id", "?"));
    else if (json_object_get(rep, "store_error"))
        printf("stored    no: %s\n", str_or(rep, "store_error", "?"));
    const json_t *ncu = json_object_get(rep, "ncu");
    if (ncu && json_object_get(ncu, "error")) {
        printf("ncu       failed: %s\n", str_or(ncu, "error", "?"));
    } else if (ncu) {
        printf("ncu       %s\n", str_or(ncu, "report", "?"));
        json_array_foreach(json_object_get(ncu, "kernels"), i, k) {
            const json_t *s = json_object_get(k, "state");
            const json_t *dd = json_array_get(json_object_get(ncu, "dram_pct_delta"), i);
            printf("  %-3zu %-24.24s dram %5.1f%% (%+.1f vs in-process)  %s\n", i,
                   str_or(k, "kernel", "?"), num(s, "dram_pct"),
                   json_is_number(dd) ? json_number_value(dd) : NAN,
                   str_or(s, "signature", "?"));
        }
    }
}

/* What the command line asks for; o gets the options kh_profile_opts
 * takes as they are. */
typedef struct profile_args {
    kh_profile_opts o;
    const char *cubin_path, *spec_path, *metrics, *replay;
    const char *task, *solution, *ncu_path, *sections, *out_dir;
    const char *store_path, *candidate, *evaluation, *workload;
    int trusted, have_min_bytes, have_flops, dry_run;
    unsigned long long seed;
    int json, ncu, run_only, no_store;
} profile_args;

/* argv into pa: -1 to go on, else the exit code (0 after --help, 2 on a
 * usage error, said on stderr). */
static int parse_args(int argc, char **argv, profile_args *pa)
{
    memset(pa, 0, sizeof *pa);
    pa->replay = "user";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        double v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            pa->json = 1;
        } else if (!strcmp(a, "--ncu")) {
            pa->ncu = 1;
        } else if (!strcmp(a, "--no-store")) {
            pa->no_store = 1;
        } else if (!strcmp(a, "--remeasure-peaks")) {
            pa->o.remeasure_peaks = 1;
        } else if (!strcmp(a, "--store") && has) {
            pa->store_path = argv[++i];
        } else if (!strcmp(a, "--candidate") && has) {
            pa->candidate = argv[++i];
        } else if (!strcmp(a, "--evaluation") && has) {
            pa->evaluation = argv[++i];
        } else if (!strcmp(a, "--peaks-max-age") && has) {
            if (!num_arg(argv[i + 1], &v) || v <= 0) {
                fprintf(stderr, "khlua profile: --peaks-max-age wants seconds > 0, not '%s'\n",
                        argv[i + 1]);
                return 2;
            }
            pa->o.peaks_max_age_s = v;
            i++;
        } else if (!strcmp(a, "--run-only")) {
            pa->run_only = 1;
        } else if (!strcmp(a, "--cubin") && has) {
            pa->cubin_path = argv[++i];
        } else if (!strcmp(a, "--spec") && has) {
            pa->spec_path = argv[++i];
        } else if (!strcmp(a, "--metrics") && has) {
            pa->metrics = argv[++i];
        } else if (!strcmp(a, "--replay") && has) {
            pa->replay = argv[++i];
        } else if (!strcmp(a, "--ncu-path") && has) {
            pa->ncu_path = argv[++i];
        } else if (!strcmp(a, "--sections") && has) {
            pa->sections = argv[++i];
        } else if (!strcmp(a, "--out") && has) {
            pa->out_dir = argv[++i];
        } else if (!strcmp(a, "--task") && has) {
            pa->task = argv[++i];
        } else if (!strcmp(a, "--solution") && has) {
            pa->solution = argv[++i];
        } else if (!strcmp(a, "--workload") && has) {
            pa->workload = argv[++i];
        } else if (!strcmp(a, "--dry-run")) {
            pa->dry_run = 1;
        } else if (!strcmp(a, "--trusted")) {
            pa->trusted = 1;
        } else if (!strcmp(a, "--seed") && has) {
            char *end;
            errno = 0;
            pa->seed = strtoull(argv[i + 1], &end, 10);
            if (errno || end == argv[i + 1] || *end || argv[i + 1][0] == '-') {
                fprintf(stderr, "khlua profile: --seed wants a non-negative integer, not '%s'\n",
                        argv[i + 1]);
                return 2;
            }
            i++;
        } else if ((!strcmp(a, "--min-bytes") || !strcmp(a, "--flops") ||
                    !strcmp(a, "--latency-ns")) && has) {
            if (!num_arg(argv[i + 1], &v)) {
                fprintf(stderr, "khlua profile: %s wants a non-negative number, not '%s'\n", a,
                        argv[i + 1]);
                return 2;
            }
            i++;
            if (!strcmp(a, "--min-bytes"))
                pa->o.ctx.min_bytes = v, pa->have_min_bytes = 1;
            else if (!strcmp(a, "--flops"))
                pa->o.ctx.flops = v, pa->have_flops = 1;
            else
                pa->o.ctx.measured_ns = v;
        } else {
            fprintf(stderr, "khlua profile: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (pa->task || pa->solution) {
        if (!pa->task || !pa->solution) {
            fprintf(stderr, "khlua profile: --task and --solution go together\n");
            return 2;
        }
        if (pa->cubin_path || pa->spec_path) {
            fprintf(stderr, "khlua profile: --task/--solution exclude --cubin/--spec\n");
            return 2;
        }
    } else if (pa->workload || pa->trusted || pa->seed || pa->dry_run) {
        fprintf(stderr, "khlua profile: --workload, --seed, --trusted and --dry-run need "
                        "--task\n");
        return 2;
    } else if (!pa->cubin_path || !pa->spec_path) {
        fprintf(stderr, "khlua profile: --cubin and --spec are required\n");
        usage(stderr);
        return 2;
    }
    if (strcmp(pa->replay, "user") && strcmp(pa->replay, "kernel")) {
        fprintf(stderr, "khlua profile: --replay is user or kernel, not '%s'\n", pa->replay);
        return 2;
    }
    return -1;
}

/* --task/--solution: the cubin and the launch list from the task's
 * candidate, into *cubin, *n and *spec (the caller's then), its context
 * into pa->o.  -1 to go on, else the exit code (--dry-run ends here,
 * printing what it would profile). */
static int from_task(kh_engine *e, profile_args *pa, kh_profile_task *pt, unsigned char **cubin,
                     size_t *n, json_t **spec)
{
    kh_err err = {0};
    if (pa->run_only) {
        fprintf(stderr, "khlua profile: --run-only takes --cubin and --spec\n");
        return 2;
    }
    kh_profile_task_opts to = {.task_path = pa->task, .solution = pa->solution,
                               .workload = pa->workload, .seed = pa->seed,
                               .trusted = pa->trusted};
    kh_status pst = kh_profile_task_prepare(e, &to, pt, &err);
    if (pst) {
        fprintf(stderr, "khlua profile: %s (%s)\n", err.msg, kh_status_name(pst));
        return 1;
    }
    /* the prepared task owns these until kh_profile_task_free */
    *cubin = pt->cubin;
    *n = pt->cubin_len;
    pt->cubin = NULL;
    *spec = pt->spec;
    pt->spec = NULL;
    if (!pa->have_min_bytes)
        pa->o.ctx.min_bytes = pt->ctx.min_bytes;
    if (!pa->have_flops)
        pa->o.ctx.flops = pt->ctx.flops;
    pa->o.context = pt->context;
    if (!pa->dry_run)
        return -1;
    kh_hash h;
    char hex[33];
    kh_hash_bytes(*cubin, *n, &h);
    kh_hash_hex(&h, hex);
    json_t *d = json_pack("{s:O, s:O, s:O, s:f, s:f, s:I, s:s, s:s, s:s}", "spec", *spec,
                          "context", pt->context, "compile", pt->compile, "min_bytes",
                          pa->o.ctx.min_bytes, "flops", pa->o.ctx.flops, "cubin_bytes",
                          (json_int_t)*n, "cubin_hash", hex, "task", pt->task_id,
                          "candidate", pt->candidate_id);
    char *txt = json_dumps(d, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (txt)
        puts(txt);
    free(txt);
    json_decref(d);
    json_decref(*spec);
    free(*cubin);
    kh_profile_task_free(pt);
    return 0;
}

/* --cubin/--spec: the files into *cubin, *n and *spec (the caller's then).
 * -1 to go on, else the exit code (--run-only ends here, having run the
 * list for ncu). */
static int from_files(const profile_args *pa, unsigned char **cubin, size_t *n, json_t **spec)
{
    kh_err err = {0};
    *cubin = slurp(pa->cubin_path, n);
    if (!*cubin || !*n) {
        fprintf(stderr, "khlua profile: cannot read %s%s%s\n", pa->cubin_path,
                *cubin ? ": empty" : ": ", *cubin ? "" : strerror(errno));
        free(*cubin);
        return 1;
    }
    json_error_t je;
    *spec = json_load_file(pa->spec_path, 0, &je);
    if (!json_is_object(*spec)) {
        fprintf(stderr, "khlua profile: %s:%d: %s\n", pa->spec_path, je.line,
                *spec ? "not a JSON object" : je.text);
        json_decref(*spec);
        free(*cubin);
        return 1;
    }
    if (!pa->run_only)
        return -1;
    /* ncu's target: no output of our own on stdout (ncu's CSV may share it). */
    kh_status st = kh_profile_target(*cubin, *n, *spec, &err);
    json_decref(*spec);
    free(*cubin);
    if (st)
        fprintf(stderr, "khlua profile --run-only: %s\n", err.msg);
    return st ? 1 : 0;
}

/* The report on stdout (a table, or --json's object), what went wrong on
 * stderr; returns the exit code. */
static int print_result(const profile_args *pa, const json_t *rep)
{
    if (pa->json) {
        char *s = json_dumps(rep, JSON_INDENT(2) | JSON_SORT_KEYS);
        if (s)
            puts(s);
        free(s);
    } else {
        print_report(rep);
    }
    if (json_object_get(rep, "store_error"))
        fprintf(stderr, "khlua profile: not recorded: %s\n",
                json_string_value(json_object_get(rep, "store_error")));
    return pa->ncu && json_object_get(json_object_get(rep, "ncu"), "error") != NULL ? 1 : 0;
}

int kh_cmd_profile(kh_engine *e, int argc, char **argv)
{
    profile_args pa;
    int prc = parse_args(argc, argv, &pa);
    if (prc >= 0)
        return prc;
    kh_profile_opts *o = &pa.o;
    kh_err err = {0};
    size_t n = 0;
    unsigned char *cubin = NULL;
    json_t *spec = NULL;
    kh_profile_task pt = {0};
    prc = pa.task ? from_task(e, &pa, &pt, &cubin, &n, &spec)
                  : from_files(&pa, &cubin, &n, &spec);
    if (prc >= 0)
        return prc;
    json_t *mlist = NULL;
    if (pa.metrics) {
        mlist = json_array();
        char *copy = kh_strdup(pa.metrics), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ", ", &save) : NULL; t;
             t = strtok_r(NULL, ", ", &save))
            json_array_append_new(mlist, json_string(t));
        free(copy);
    }
    o->cubin = cubin;
    o->cubin_len = n;
    o->spec = spec;
    o->metrics = mlist;
    o->kernel_replay = !strcmp(pa.replay, "kernel");
    o->ncu = pa.ncu;
    o->ncu_path = pa.ncu_path;
    o->ncu_sections = pa.sections;
    o->out_dir = pa.out_dir;
    json_t *rep = NULL;
    if (pa.no_store && (pa.store_path || pa.candidate || pa.evaluation)) {
        fprintf(stderr, "khlua profile: --no-store excludes --store, --candidate and "
                        "--evaluation\n");
        json_decref(spec);
        json_decref(mlist);
        free(cubin);
        kh_profile_task_free(&pt);
        return 2;
    }
    kh_store *store = NULL;
    if (!pa.no_store) {
        kh_store_opts so = {0};
        const char *sp = pa.store_path ? pa.store_path : kh_engine_store_path(e);
        if (kh_store_open(sp, &so, &store, &err)) {
            fprintf(stderr, "khlua profile: cannot open the store %s: %s (--no-store to "
                            "profile without one)\n", sp, err.msg);
            json_decref(spec);
            json_decref(mlist);
            free(cubin);
            kh_profile_task_free(&pt);
            return 1;
        }
    }
    o->store = store;
    o->candidate = pa.candidate;
    o->evaluation = pa.evaluation;
    if (pa.task && store) {
        /* link what khlua eval recorded: the task and this very candidate */
        json_t *r = NULL;
        kh_err lerr;
        if (!kh_store_get(store, pt.task_id, &r, &lerr))
            o->task = pt.task_id;
        json_decref(r);
        r = NULL;
        if (!pa.candidate && !kh_store_get(store, pt.candidate_id, &r, &lerr))
            o->candidate = pt.candidate_id;
        json_decref(r);
    }
    kh_status st = kh_profile_run(e, o, &rep, &err);
    kh_store_close(store);
    json_decref(spec);
    json_decref(mlist);
    free(cubin);
    kh_profile_task_free(&pt);
    if (st) {
        fprintf(stderr, "khlua profile: %s (%s)\n", err.msg, kh_status_name(st));
        return 1;
    }
    int rc = print_result(&pa, rep);
    json_decref(rep);
    return rc;
}
