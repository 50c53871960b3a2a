/* cmd_eval.c: `khlua eval --task DIR --solution FILE|NAME ...`: evaluates a
 * solution on a task's workloads (engine/eval/eval.h) and prints a table per
 * workload, or FlashInfer-Bench Trace JSONL with --json.  Exit 0 when every
 * workload PASSED, 1 when any did not (or the evaluation could not run), 2 on
 * usage errors, 130 when interrupted.  With --incumbent, the paired
 * comparison (cmd_eval_paired.c). */
#include "cli.h"
#include "commands.h"

#include "eval/eval.h"
#include "task/task.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The progress line on stderr (a terminal, no --json): workloads done of
 * all, their verdicts so far, elapsed time and ETA. */
typedef struct progress {
    double t0;
    size_t passed, failed;
    int shown;
} progress;

static void dur(char *b, size_t n, double s)
{
    long x = (long)(s + 0.5);
    if (x >= 3600)
        snprintf(b, n, "%ldh%02ldm", x / 3600, x % 3600 / 60);
    else if (x >= 60)
        snprintf(b, n, "%ldm%02lds", x / 60, x % 60);
    else
        snprintf(b, n, "%lds", x);
}

/* Per GPU that ran the workloads: its kernel time over the run's wall time,
 * and its active time (docs/evaluation.md, "The GPU's busy fraction"). */
static void print_busy(const json_t *traces, double wall_s)
{
    const char *uuids[8];
    double kern[8], act[8];
    size_t n = 0, i;
    json_t *t;
    json_array_foreach(traces, i, t) {
        json_t *kl = json_object_get(json_object_get(t, "evaluation"), "khlua");
        const char *u = json_string_value(json_object_get(kl, "gpu_uuid"));
        json_t *ks = json_object_get(kl, "gpu_kernel_seconds");
        json_t *as = json_object_get(kl, "gpu_active_seconds");
        if (!u || !json_is_number(ks))
            continue;
        size_t k = 0;
        while (k < n && strcmp(uuids[k], u))
            k++;
        if (k == n && n < 8) {
            uuids[n] = u;
            kern[n] = act[n] = 0;
            n++;
        }
        if (k < n) {
            kern[k] += json_number_value(ks);
            act[k] += json_is_number(as) ? json_number_value(as) : 0;
        }
    }
    for (size_t k = 0; k < n && wall_s > 0; k++)
        printf("GPU %.12s: busy %.1f%% (kernel time %.6f s over %.3f s wall), active %.1f%% "
               "(%.6f s)\n", uuids[k], 100.0 * kern[k] / wall_s, kern[k], wall_s,
               100.0 * act[k] / wall_s, act[k]);
}

/* The last line of the table: verdicts by status, and over the PASSED ones
 * the mean latency and the geometric mean speedup. */
static void print_summary(const json_t *traces)
{
    const char *names[16];
    size_t counts[16], nn = 0, nlat = 0, nsp = 0;
    double lat = 0, logsp = 0;
    size_t i;
    json_t *t;
    json_array_foreach(traces, i, t) {
        json_t *evj = json_object_get(t, "evaluation");
        const char *st = json_string_value(json_object_get(evj, "status"));
        st = st ? st : "?";
        size_t k = 0;
        while (k < nn && strcmp(names[k], st))
            k++;
        if (k == nn && nn < 16) {
            names[nn] = st;
            counts[nn++] = 0;
        }
        if (k < nn)
            counts[k]++;
        json_t *p = json_object_get(evj, "performance");
        double ms = json_number_value(json_object_get(p, "latency_ms"));
        double sp = json_number_value(json_object_get(p, "speedup_factor"));
        if (!strcmp(st, "PASSED") && ms > 0) {
            lat += ms;
            nlat++;
        }
        if (!strcmp(st, "PASSED") && sp > 0) {
            logsp += log(sp);
            nsp++;
        }
    }
    printf("%zu workload%s:", json_array_size(traces), json_array_size(traces) == 1 ? "" : "s");
    for (size_t k = 0; k < nn; k++)
        printf("%s %zu %s", k ? "," : "", counts[k], names[k]);
    if (nlat)
        printf("; mean latency %.4f ms", lat / (double)nlat);
    if (nsp)
        printf("; speedup (geometric mean) %.2fx", exp(logsp / (double)nsp));
    printf("\n");
}

static void show_progress(void *ud, size_t done, size_t total, const json_t *trace)
{
    progress *pg = ud;
    const char *st = json_string_value(json_object_get(json_object_get(trace, "evaluation"),
                                                       "status"));
    if (st && !strcmp(st, "PASSED"))
        pg->passed++;
    else
        pg->failed++;
    double spent = kh_now() - pg->t0;
    char el[32], eta[32] = "--";
    dur(el, sizeof el, spent);
    if (done < total)
        dur(eta, sizeof eta, spent / (double)done * (double)(total - done));
    fprintf(stderr, "\r\033[Kworkloads %zu/%zu | %zu PASSED", done, total, pg->passed);
    if (pg->failed)
        fprintf(stderr, ", %zu not", pg->failed);
    fprintf(stderr, " | %s | ETA %s", el, done < total ? eta : "0s");
    fflush(stderr);
    pg->shown = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: khlua eval --task DIR --solution FILE|NAME [options]\n"
            "\n"
            "Evaluates a solution (a Solution JSON file, or the name of one in the task)\n"
            "on the task's workloads: correctness against the definition's trusted\n"
            "reference with FlashInfer-Bench's rules plus khlua's hardened checks\n"
            "(poisoned outputs, unchanged inputs, guard bands, determinism, verified\n"
            "timed calls, the speed-of-light bound), then timing.  docs/evaluation.md.\n"
            "A definition with no trusted reference is checked against its own Python\n"
            "run (FlashInfer-Bench's `reference`), computed once per seed with python3\n"
            "and torch ($KHLUA_PYTHON) and cached in the store.\n"
            "\n"
            "  --workloads all|N|UUID,...  which workloads (default all; N: the first N)\n"
            "  --protocol P      official (default), screen or precise\n"
            "  --no-timing       correctness only\n"
            "  --no-reference-timing  time the solution only (no reference latency,\n"
            "                    no speedup)\n"
            "  --parity          FlashInfer-Bench's checks alone (no hardened checks)\n"
            "  --host-compare    send the outputs back and compare them here, the reference\n"
            "                    in a request of its own; the default (--device-compare):\n"
            "                    where the trusted reference runs on the GPU too, it runs\n"
            "                    in the candidate's request and the outputs are compared\n"
            "                    there (parts come back, not outputs)\n"
            "  --trials N        input sets for correctness (default 3)\n"
            "  --shapes N        also check correctness on N admissible shapes that are not\n"
            "                    in the workload list (drawn from the base seed; 0 to 64)\n"
            "  --seed N          base seed of every input and of which timed calls are\n"
            "                    verified (default: drawn from the OS per run; recorded as\n"
            "                    khlua.base_seed: pass it back to reproduce a run)\n"
            "  --warmup N, --iters N, --timing-trials N   protocol overrides\n"
            "  --max-iters N     screen and precise: at most N timed calls\n"
            "  --rotate N        timing input sets (default 3)\n"
            "  --warm            no cache flush before timed calls (default: flush)\n"
            "  --verify F        share of timed calls whose outputs are checked (default 1:\n"
            "                    all, fewer where their outputs pass 256 MiB a workload)\n"
            "  --deadline S      seconds per workload and worker request (default 300)\n"
            "  --host-memory MB  memory limit of the host worker (default 8192)\n"
            "  --atol X, --rtol X, --ratio X   tolerance overrides (required matched ratio)\n"
            "  --sanitize LIST   cuda: after a PASS, run once under each compute-sanitizer\n"
            "                    tool in LIST (memcheck,racecheck,initcheck,synccheck);\n"
            "                    errors in the candidate's kernels fail the workload\n"
            "  --sanitize-deadline S  seconds per tool (default 4 x --deadline)\n"
            "  --no-store        do not record the verdicts in the store\n"
            "\n"
            "Paired comparison (docs/evaluation.md): is --solution faster than another?\n"
            "  --incumbent FILE|NAME  measure the solution and this one alternately (A B,\n"
            "                    B A, ...), each repetition on the same inputs and GPU,\n"
            "                    every check of --protocol (default here: screen); prints\n"
            "                    the ratio (incumbent / solution latency) and its bootstrap\n"
            "                    interval (--json: the result object)\n"
            "  --reps R          repetitions (default 5)\n"
            "\n"
            "Scale-out (docs/scale-out.md): workloads run in parallel on the workers.\n"
            "  --gpus all|N|LIST one gpu worker per GPU (indices or UUIDs, e.g. 0,2);\n"
            "                    default: one worker on the default GPU\n"
            "  --workers-per-gpu K  workers sharing each GPU (default 1)\n"
            "  --host-workers N  host workers (per host; default 1)\n"
            "  --launch L        local (default), srun, ssh, or a template such as\n"
            "                    \"srun -N1 --gres=gpu:1 {exe} worker --role {role}\"\n"
            "  --hosts A,B       hosts for the ssh launch ({host})\n"
            "  --json            FlashInfer-Bench Trace JSONL, one line per workload\n"
            "On a terminal, stderr shows progress (workloads done, verdicts, ETA); not\n"
            "with --json.\n"
            "\n"
            "Exit 0 when every workload PASSED, 1 otherwise, 2 on usage errors.\n");
}

static int num_arg(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return 0;
    *out = v;
    return 1;
}

static const char *fmt_num(const json_t *j, char *buf, size_t n, int digits)
{
    if (json_is_string(j))
        snprintf(buf, n, "%s", json_string_value(j));
    else if (json_is_number(j) && digits < 0)
        snprintf(buf, n, "%.3g", json_number_value(j));
    else if (json_is_number(j))
        snprintf(buf, n, "%.*f", digits, json_number_value(j));
    else
        snprintf(buf, n, "-");
    return buf;
}

/* The admissible range of each numeric option (usage error, exit 2, outside). */
typedef struct range {
    const char *opt;
    double lo, hi;
    int integer;
} range;
static const range RANGES[] = {
    {"--trials", 1, 64, 1},          {"--warmup", 0, 100000, 1},
    {"--iters", 1, 1000000, 1},      {"--timing-trials", 1, 1000, 1},
    {"--rotate", 1, 8, 1},           {"--verify", 0, 1, 0},
    {"--host-memory", 1, 1 << 30, 0}, {"--deadline", 0.001, 86400, 0},
    {"--atol", 0, 1e300, 0},         {"--rtol", 0, 1e300, 0},
    {"--ratio", 0, 1, 0},            {"--sanitize-deadline", 0.001, 86400, 0},
    {"--reps", 1, 100, 1},           {"--max-iters", 1, 1000000, 1},
};

static int in_range(const char *a, const char *v, double x, const range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(a, r[i].opt) &&
            (x < r[i].lo || x > r[i].hi || (r[i].integer && x != floor(x)))) {
            fprintf(stderr, "khlua eval: %s: expected %s from %g to %g, got '%s'\n", a,
                    r[i].integer ? "an integer" : "a number", r[i].lo, r[i].hi, v);
            return 0;
        }
    return 1;
}

/* The verdicts: a table per workload and the summary (FlashInfer-Bench
 * Trace JSONL with as_json); busy-machine and store warnings on stderr.
 * Returns 1 when every workload PASSED. */
static int print_traces(const json_t *traces, int as_json, double wall_s)
{
    int all_ok = 1;
    size_t i;
    json_t *t;
    const char *last_detail = NULL; /* a detail is printed once, not per workload */
    if (!as_json)
        printf("%-38s %-20s %-17s %11s %11s %12s %8s %7s %8s  %s\n", "workload", "status",
               "failed check", "max abs", "max rel", "latency ms", "GB/s", "SoL %", "speedup",
               "axes");
    json_array_foreach(traces, i, t) {
        json_t *evj = json_object_get(t, "evaluation");
        const char *status = json_string_value(json_object_get(evj, "status"));
        if (!status || strcmp(status, "PASSED"))
            all_ok = 0;
        /* host timing on a busy machine: said, on stderr, with --json too */
        json_t *tm = json_object_get(json_object_get(evj, "khlua"), "timing");
        json_int_t kept = json_integer_value(
            json_object_get(json_object_get(tm, "contended"), "kept"));
        json_int_t ncalls = json_integer_value(json_object_get(tm, "n"));
        if (kept > 0 && ncalls > 0 && (double)kept > 0.1 * (double)ncalls)
            fprintf(stderr, "khlua eval: warning: workload %s: %lld of %lld timed calls waited on "
                    "the run queue (another process had the core) even after retakes: its "
                    "latency is not reliable; measure on a quieter machine\n",
                    json_string_value(json_object_get(json_object_get(t, "workload"), "uuid")),
                    (long long)kept, (long long)ncalls);
        if (as_json) {
            char *line = json_dumps(t, JSON_COMPACT);
            if (line)
                printf("%s\n", line);
            free(line);
            continue;
        }
        json_t *kl = json_object_get(evj, "khlua");
        json_t *c = json_object_get(evj, "correctness");
        json_t *p = json_object_get(evj, "performance");
        const char *fc = json_string_value(json_object_get(kl, "failed_check"));
        char b1[32], b2[32], b3[32], b4[32], gbs[32] = "-", solf[32] = "-", axes[160] = "";
        /* bytes moved per second and the fraction of the speed-of-light bound,
         * where the definition gives the bound's figures */
        const json_t *sl = json_object_get(kl, "speed_of_light");
        double lat_ms = json_number_value(json_object_get(p, "latency_ms"));
        double bytes = json_number_value(json_object_get(sl, "bytes"));
        double bound = json_number_value(json_object_get(sl, "bound_ns"));
        if (lat_ms > 0 && bytes > 0)
            snprintf(gbs, sizeof gbs, "%.3g", bytes / (lat_ms * 1e6));
        if (lat_ms > 0 && bound > 0)
            snprintf(solf, sizeof solf, "%.3g", 100.0 * bound / (lat_ms * 1e6));
        const char *ak;
        json_t *av;
        size_t al = 0;
        json_object_foreach(json_object_get(json_object_get(t, "workload"), "axes"), ak, av) {
            if (al < sizeof axes)
                al += (size_t)snprintf(axes + al, sizeof axes - al, "%s%s=%lld", al ? " " : "",
                                       ak, (long long)json_integer_value(av));
        }
        printf("%-38s %-20s %-17s %11s %11s %12s %8s %7s %8s  %s\n",
               json_string_value(json_object_get(json_object_get(t, "workload"), "uuid")),
               status ? status : "?", fc ? fc : "-",
               fmt_num(json_object_get(c, "max_absolute_error"), b1, sizeof b1, -1),
               fmt_num(json_object_get(c, "max_relative_error"), b2, sizeof b2, -1),
               fmt_num(json_object_get(p, "latency_ms"), b3, sizeof b3, 4), gbs, solf,
               fmt_num(json_object_get(p, "speedup_factor"), b4, sizeof b4, 2), axes);
        const char *detail = json_string_value(json_object_get(kl, "detail"));
        if (status && strcmp(status, "PASSED") && detail && *detail) {
            if (last_detail && !strcmp(last_detail, detail))
                printf("    (the same as above)\n");
            else
                printf("    %.300s\n", detail);
            last_detail = detail;
        }
    }
    if (!as_json) {
        print_summary(traces);
        print_busy(traces, wall_s);
    }
    /* a verdict the store refused is said, not skipped in silence */
    json_array_foreach(traces, i, t) {
        const char *stored = json_string_value(
            json_object_get(json_object_get(json_object_get(t, "evaluation"), "khlua"), "stored"));
        if (stored && strcmp(stored, "yes") && strncmp(stored, "no (", 4)) {
            fprintf(stderr, "khlua eval: the verdicts were not recorded: %s\n", stored);
            break;
        }
    }
    return all_ok;
}

/* What the command line asks for. */
typedef struct eval_args {
    kh_eval_opts o;
    const char *task, *sol, *inc;
    int as_json, reps, protocol_given;
} eval_args;

/* argv into ea (its o from kh_eval_opts_default): -1 to go on, else the
 * exit code of a usage error (2, said on stderr). */
static int parse_args(int argc, char **argv, eval_args *ea)
{
    memset(ea, 0, sizeof *ea);
    kh_eval_opts_default(&ea->o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        int takes = 1;
        if (!strcmp(a, "--json")) {
            ea->as_json = 1;
            takes = 0;
        } else if (!strcmp(a, "--parity")) {
            ea->o.parity = 1;
            takes = 0;
        } else if (!strcmp(a, "--host-compare")) {
            ea->o.device_compare = 0;
            takes = 0;
        } else if (!strcmp(a, "--device-compare")) {
            ea->o.device_compare = 1;
            takes = 0;
        } else if (!strcmp(a, "--no-store")) {
            ea->o.record = 0;
            takes = 0;
        } else if (!strcmp(a, "--warm")) {
            ea->o.cold = 0;
            takes = 0;
        } else if (!strcmp(a, "--no-timing")) {
            ea->o.timing = 0;
            takes = 0;
        } else if (!strcmp(a, "--no-reference-timing")) {
            ea->o.time_reference = 0;
            takes = 0;
        } else if (!v) {
            fprintf(stderr, "khlua eval: %s: %s\n", a,
                    a[0] == '-' ? "unknown option or missing value" : "unexpected argument");
            usage(stderr);
            return 2;
        } else if (!strcmp(a, "--task"))
            ea->task = v;
        else if (!strcmp(a, "--solution"))
            ea->sol = v;
        else if (!strcmp(a, "--incumbent"))
            ea->inc = v;
        else if (!strcmp(a, "--workloads"))
            ea->o.workloads = v;
        else if (!strcmp(a, "--protocol")) {
            ea->o.protocol = v;
            ea->protocol_given = 1;
        }
        else if (!strcmp(a, "--sanitize"))
            ea->o.sanitize = v;
        else if (!strcmp(a, "--gpus"))
            ea->o.gpus = v;
        else if (!strcmp(a, "--launch"))
            ea->o.launch = v;
        else if (!strcmp(a, "--hosts"))
            ea->o.hosts = v;
        else if (!strcmp(a, "--seed")) {
            /* exact: a seed past 2^53 must not round */
            char *end;
            errno = 0;
            unsigned long long sv = strtoull(v, &end, 0);
            if (errno || end == v || *end || *v == '-' || sv > INT64_MAX) {
                fprintf(stderr, "khlua eval: --seed: expected an integer from 0 to 2^63-1 "
                        "(a trace's khlua.base_seed), got '%s'\n", v);
                return 2;
            }
            ea->o.seed = (uint64_t)sv;
        } else if (!num_arg(v, &x)) {
            fprintf(stderr, "khlua eval: %s: expected a number, got '%s'\n", a, v);
            return 2;
        } else if (!strcmp(a, "--shapes")) {
            if (x < 0 || x > 64 || x != floor(x)) {
                fprintf(stderr, "khlua eval: --shapes: expected an integer from 0 to 64, got "
                        "'%s'\n", v);
                return 2;
            }
            ea->o.shapes = (int)x;
        } else if (!in_range(a, v, x, RANGES, KH_ARRAY_LEN(RANGES))) {
            return 2;
        } else if (!strcmp(a, "--trials"))
            ea->o.trials = (int)x;
        else if (!strcmp(a, "--reps"))
            ea->reps = (int)x;
        else if (!strcmp(a, "--max-iters"))
            ea->o.max_iters = (int)x;
        else if (!strcmp(a, "--warmup"))
            ea->o.warmup = (int)x;
        else if (!strcmp(a, "--iters"))
            ea->o.iters = (int)x;
        else if (!strcmp(a, "--timing-trials"))
            ea->o.timing_trials = (int)x;
        else if (!strcmp(a, "--rotate"))
            ea->o.rotate_inputs = (int)x;
        else if (!strcmp(a, "--verify"))
            ea->o.verify_timed_fraction = x;
        else if (!strcmp(a, "--host-memory"))
            ea->o.host_memory_bytes = (uint64_t)(x * 1048576.0);
        else if (!strcmp(a, "--deadline"))
            ea->o.deadline_s = x;
        else if (!strcmp(a, "--atol"))
            ea->o.atol = x;
        else if (!strcmp(a, "--rtol"))
            ea->o.rtol = x;
        else if (!strcmp(a, "--ratio"))
            ea->o.required_matched_ratio = x;
        else if (!strcmp(a, "--sanitize-deadline"))
            ea->o.sanitize_deadline_s = x;
        else if (!strcmp(a, "--workers-per-gpu") || !strcmp(a, "--host-workers")) {
            if (x < 1 || x > 256 || x != (int)x) {
                fprintf(stderr, "khlua eval: %s: expected a count from 1 to 256, got '%s'\n", a,
                        v);
                return 2;
            }
            *(!strcmp(a, "--host-workers") ? &ea->o.host_workers : &ea->o.workers_per_gpu) =
                (int)x;
        }
        else {
            fprintf(stderr, "khlua eval: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        i += takes;
    }
    if (!ea->task || !ea->sol) {
        fprintf(stderr, "khlua eval: --task and --solution are required\n");
        usage(stderr);
        return 2;
    }
    if (strcmp(ea->o.protocol, "official") && strcmp(ea->o.protocol, "screen") &&
        strcmp(ea->o.protocol, "precise")) {
        fprintf(stderr, "khlua eval: --protocol: expected official, screen or precise\n");
        return 2;
    }
    if (ea->reps && !ea->inc) {
        fprintf(stderr, "khlua eval: --reps is the paired comparison's (--incumbent)\n");
        return 2;
    }
    return -1;
}

int kh_cmd_eval(kh_engine *e, int argc, char **argv)
{
    if (kh_cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    eval_args ea;
    int prc = parse_args(argc, argv, &ea);
    if (prc >= 0)
        return prc;
    if (ea.inc) {
        if (!ea.protocol_given) /* each measurement a screen, unless told */
            ea.o.protocol = "screen";
        return kh_cmd_eval_paired(e, ea.task, ea.sol, ea.inc, &ea.o, ea.reps, ea.as_json);
    }
    kh_err err;
    if (kh_cmd_eval_check_file(ea.sol, "") < 0)
        return 1;
    progress pg = {.t0 = kh_now()};
    if (!ea.as_json && isatty(STDERR_FILENO)) {
        ea.o.progress = show_progress;
        ea.o.progress_ud = &pg;
    }
    kh_eval *ev = kh_eval_new(e, NULL, &err);
    json_t *traces = NULL;
    kh_status st = ev ? kh_eval_run(ev, ea.task, ea.sol, &ea.o, &traces, &err) : err.code;
    kh_eval_free(ev);
    if (pg.shown) /* the table starts on a clean line */
        fprintf(stderr, "\r\033[K");
    if (st) {
        fprintf(stderr, "khlua eval: %s\n", err.msg);
        return st == KH_EINTR ? 130 : 1;
    }
    int all_ok = print_traces(traces, ea.as_json, kh_now() - pg.t0);
    json_decref(traces);
    return all_ok ? 0 : 1;
}
