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

int kh_cmd_profile(kh_engine *e, int argc, char **argv)
{
    const char *cubin_path = NULL, *spec_path = NULL, *metrics = NULL, *replay = "user";
    const char *task = NULL, *solution = NULL, *ncu_path = NULL, *sections = NULL,
               *out_dir = NULL;
    const char *store_path = NULL, *candidate = NULL, *evaluation = NULL, *workload = NULL;
    int trusted = 0, have_min_bytes = 0, have_flops = 0, dry_run = 0;
    unsigned long long seed = 0;
    int json = 0, ncu = 0, run_only = 0, no_store = 0;
    kh_profile_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        double v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--ncu")) {
            ncu = 1;
        } else if (!strcmp(a, "--no-store")) {
            no_store = 1;
        } else if (!strcmp(a, "--remeasure-peaks")) {
            o.remeasure_peaks = 1;
        } else if (!strcmp(a, "--store") && has) {
            store_path = argv[++i];
        } else if (!strcmp(a, "--candidate") && has) {
            candidate = argv[++i];
        } else if (!strcmp(a, "--evaluation") && has) {
            evaluation = argv[++i];
        } else if (!strcmp(a, "--peaks-max-age") && has) {
            if (!num_arg(argv[i + 1], &v) || v <= 0) {
                fprintf(stderr, "khlua profile: --peaks-max-age wants seconds > 0, not '%s'\n",
                        argv[i + 1]);
                return 2;
            }
            o.peaks_max_age_s = v;
            i++;
        } else if (!strcmp(a, "--run-only")) {
            run_only = 1;
        } else if (!strcmp(a, "--cubin") && has) {
            cubin_path = argv[++i];
        } else if (!strcmp(a, "--spec") && has) {
            spec_path = argv[++i];
        } else if (!strcmp(a, "--metrics") && has) {
            metrics = argv[++i];
        } else if (!strcmp(a, "--replay") && has) {
            replay = argv[++i];
        } else if (!strcmp(a, "--ncu-path") && has) {
            ncu_path = argv[++i];
        } else if (!strcmp(a, "--sections") && has) {
            sections = argv[++i];
        } else if (!strcmp(a, "--out") && has) {
            out_dir = argv[++i];
        } else if (!strcmp(a, "--task") && has) {
            task = argv[++i];
        } else if (!strcmp(a, "--solution") && has) {
            solution = argv[++i];
        } else if (!strcmp(a, "--workload") && has) {
            workload = argv[++i];
        } else if (!strcmp(a, "--dry-run")) {
            dry_run = 1;
        } else if (!strcmp(a, "--trusted")) {
            trusted = 1;
        } else if (!strcmp(a, "--seed") && has) {
            char *end;
            errno = 0;
            seed = strtoull(argv[i + 1], &end, 10);
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
                o.ctx.min_bytes = v, have_min_bytes = 1;
            else if (!strcmp(a, "--flops"))
                o.ctx.flops = v, have_flops = 1;
            else
                o.ctx.measured_ns = v;
        } else {
            fprintf(stderr, "khlua profile: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (task || solution) {
        if (!task || !solution) {
            fprintf(stderr, "khlua profile: --task and --solution go together\n");
            return 2;
        }
        if (cubin_path || spec_path) {
            fprintf(stderr, "khlua profile: --task/--solution exclude --cubin/--spec\n");
            return 2;
        }
    } else if (workload || trusted || seed || dry_run) {
        fprintf(stderr, "khlua profile: --workload, --seed, --trusted and --dry-run need "
                        "--task\n");
        return 2;
    } else if (!cubin_path || !spec_path) {
        fprintf(stderr, "khlua profile: --cubin and --spec are required\n");
        usage(stderr);
        return 2;
    }
    if (strcmp(replay, "user") && strcmp(replay, "kernel")) {
        fprintf(stderr, "khlua profile: --replay is user or kernel, not '%s'\n", replay);
        return 2;
    }
    kh_err err = {0};
    size_t n = 0;
    unsigned char *cubin = NULL;
    json_t *spec = NULL;
    kh_profile_task pt = {0};
    if (task) {
        if (run_only) {
            fprintf(stderr, "khlua profile: --run-only takes --cubin and --spec\n");
            return 2;
        }
        kh_profile_task_opts to = {.task_path = task, .solution = solution,
                                   .workload = workload, .seed = seed, .trusted = trusted};
        kh_status pst = kh_profile_task_prepare(e, &to, &pt, &err);
        if (pst) {
            fprintf(stderr, "khlua profile: %s (%s)\n", err.msg, kh_status_name(pst));
            return 1;
        }
        /* the prepared task owns these until kh_profile_task_free */
        cubin = pt.cubin;
        n = pt.cubin_len;
        pt.cubin = NULL;
        spec = pt.spec;
        pt.spec = NULL;
        if (!have_min_bytes)
            o.ctx.min_bytes = pt.ctx.min_bytes;
        if (!have_flops)
            o.ctx.flops = pt.ctx.flops;
        o.context = pt.context;
        if (dry_run) {
            kh_hash h;
            char hex[33];
            kh_hash_bytes(cubin, n, &h);
            kh_hash_hex(&h, hex);
            json_t *d = json_pack("{s:O, s:O, s:O, s:f, s:f, s:I, s:s, s:s, s:s}", "spec", spec,
                                  "context", pt.context, "compile", pt.compile, "min_bytes",
                                  o.ctx.min_bytes, "flops", o.ctx.flops, "cubin_bytes",
                                  (json_int_t)n, "cubin_hash", hex, "task", pt.task_id,
                                  "candidate", pt.candidate_id);
            char *txt = json_dumps(d, JSON_INDENT(2) | JSON_SORT_KEYS);
            if (txt)
                puts(txt);
            free(txt);
            json_decref(d);
            json_decref(spec);
            free(cubin);
            kh_profile_task_free(&pt);
            return 0;
        }
    } else {
        cubin = slurp(cubin_path, &n);
        if (!cubin || !n) {
            fprintf(stderr, "khlua profile: cannot read %s%s%s\n", cubin_path,
                    cubin ? ": empty" : ": ", cubin ? "" : strerror(errno));
            free(cubin);
            return 1;
        }
        json_error_t je;
        spec = json_load_file(spec_path, 0, &je);
        if (!json_is_object(spec)) {
            fprintf(stderr, "khlua profile: %s:%d: %s\n", spec_path, je.line,
                    spec ? "not a JSON object" : je.text);
            json_decref(spec);
            free(cubin);
            return 1;
        }
        if (run_only) {
            /* ncu's target: no output of our own on stdout (ncu's CSV may share it). */
            kh_status st = kh_profile_target(cubin, n, spec, &err);
            json_decref(spec);
            free(cubin);
            if (st)
                fprintf(stderr, "khlua profile --run-only: %s\n", err.msg);
            return st ? 1 : 0;
        }
    }
    json_t *mlist = NULL;
    if (metrics) {
        mlist = json_array();
        char *copy = kh_strdup(metrics), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ", ", &save) : NULL; t;
             t = strtok_r(NULL, ", ", &save))
            json_array_append_new(mlist, json_string(t));
        free(copy);
    }
    o.cubin = cubin;
    o.cubin_len = n;
    o.spec = spec;
    o.metrics = mlist;
    o.kernel_replay = !strcmp(replay, "kernel");
    o.ncu = ncu;
    o.ncu_path = ncu_path;
    o.ncu_sections = sections;
    o.out_dir = out_dir;
    json_t *rep = NULL;
    if (no_store && (store_path || candidate || evaluation)) {
        fprintf(stderr, "khlua profile: --no-store excludes --store, --candidate and "
                        "--evaluation\n");
        json_decref(spec);
        json_decref(mlist);
        free(cubin);
        kh_profile_task_free(&pt);
        return 2;
    }
    kh_store *store = NULL;
    if (!no_store) {
        kh_store_opts so = {0};
        const char *sp = store_path ? store_path : kh_engine_store_path(e);
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
    o.store = store;
    o.candidate = candidate;
    o.evaluation = evaluation;
    if (task && store) {
        /* link what khlua eval recorded: the task and this very candidate */
        json_t *r = NULL;
        kh_err lerr;
        if (!kh_store_get(store, pt.task_id, &r, &lerr))
            o.task = pt.task_id;
        json_decref(r);
        r = NULL;
        if (!candidate && !kh_store_get(store, pt.candidate_id, &r, &lerr))
            o.candidate = pt.candidate_id;
        json_decref(r);
    }
    kh_status st = kh_profile_run(e, &o, &rep, &err);
    kh_store_close(store);
    json_decref(spec);
    json_decref(mlist);
    free(cubin);
    kh_profile_task_free(&pt);
    if (st) {
        fprintf(stderr, "khlua profile: %s (%s)\n", err.msg, kh_status_name(st));
        return 1;
    }
    if (json) {
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
    int bad_ncu = ncu && json_object_get(json_object_get(rep, "ncu"), "error") != NULL;
    json_decref(rep);
    return bad_ncu ? 1 : 0;
}
