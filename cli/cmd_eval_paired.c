/* cmd_eval_paired.c: `khlua eval --task DIR --solution A --incumbent B`: the
 * paired comparison (engine/eval/eval.h kh_eval_paired; docs/evaluation.md,
 * "Paired comparison"): A and B measured alternately on the same inputs,
 * the ratio (B's latency over A's) with its bootstrap interval, as a table
 * or (--json) the result object.  Exit 0 when both were measured on every
 * repetition, 1 when either failed (or it could not run), 130 when
 * interrupted. */
#include "cli.h"
#include "commands.h"

#include "eval/eval.h"
#include "gpu/bench.h"
#include "task/task.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A Solution file is checked as `task check` would: its first error is
 * named with file and line (on stderr, after "khlua eval: what"), and
 * nothing runs.  Returns 1 for a checked file, 0 for a name, -1 on errors. */
int kh_cmd_eval_check_file(const char *arg, const char *what)
{
    struct stat sst;
    if (stat(arg, &sst) || !S_ISREG(sst.st_mode))
        return 0;
    kh_err err;
    kh_task_set *S = NULL;
    kh_task_opts to = {0};
    kh_status st = kh_task_load(arg, &to, &S, &err);
    if (!st)
        st = kh_task_check_errors(S, arg, &err);
    kh_task_set_free(S);
    if (st) {
        fprintf(stderr, "khlua eval: %s%s\n", what, err.msg);
        return -1;
    }
    return 1;
}

/* A solution argument: a Solution file (checked, then handed over as its
 * JSON) or the name of one in the task.  *text is the file's, for the
 * caller to free. */
static int solution_arg(const char *arg, const char *what, kh_eval_solution *es, char **text)
{
    memset(es, 0, sizeof *es);
    *text = NULL;
    int f = kh_cmd_eval_check_file(arg, what);
    if (f <= 0) {
        es->name = arg;
        return f;
    }
    size_t len = 0;
    if (kh_read_file(arg, text, &len)) {
        fprintf(stderr, "khlua eval: cannot read %s %s\n", what, arg);
        return -1;
    }
    es->json = *text;
    es->json_len = len;
    es->label = arg;
    return 0;
}

static double median(const json_t *xs)
{
    size_t n = json_array_size(xs);
    double v[100]; /* one latency per repetition: at most 100 */
    if (!n || n > 100)
        return 0;
    for (size_t i = 0; i < n; i++)
        v[i] = json_number_value(json_array_get(xs, i));
    return kh_stat_median(v, n);
}

static void print_table(const json_t *r, const char *sol, const char *inc)
{
    printf("paired comparison: %s (candidate) against %s (incumbent), %lld repetitions of "
           "%s, seed %lld\n", sol, inc, json_integer_value(json_object_get(r, "reps")),
           json_string_value(json_object_get(r, "measure_protocol")),
           json_integer_value(json_object_get(r, "seed")));
    printf("%-38s %16s %16s %8s\n", "workload", "candidate ms", "incumbent ms", "ratio");
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(r, "workloads"), i, u) {
        const char *uuid = json_string_value(u);
        double c = median(json_object_get(json_object_get(r, "candidate_ms"), uuid));
        double b = median(json_object_get(json_object_get(r, "incumbent_ms"), uuid));
        char ratio[32] = "-";
        if (c > 0 && b > 0)
            snprintf(ratio, sizeof ratio, "%.3f", b / c);
        printf("%-38s %16.4f %16.4f %8s\n", uuid, c, b, ratio);
    }
    const json_t *f = json_object_get(r, "failed");
    if (f) {
        const char *chk = json_string_value(json_object_get(f, "check"));
        printf("%s %s on workload %s%s%s%s: no ratio\n",
               json_string_value(json_object_get(f, "who")),
               json_string_value(json_object_get(f, "status")),
               json_string_value(json_object_get(f, "workload")), chk ? " (check " : "",
               chk ? chk : "", chk ? ")" : "");
        return;
    }
    double a = json_number_value(json_object_get(r, "alpha"));
    printf("ratio (incumbent / candidate latency, geometric mean of %zu): %.3f; bootstrap "
           "%g%% to %g%% quantiles: %.3f to %.3f\n",
           json_array_size(json_object_get(r, "ratios")),
           json_number_value(json_object_get(r, "ratio")), 100 * a, 100 * (1 - a),
           json_number_value(json_object_get(r, "lo")), json_number_value(json_object_get(r, "hi")));
}

int kh_cmd_eval_paired(kh_engine *e, const char *task, const char *sol, const char *inc,
                       const kh_eval_opts *o, int reps, int as_json)
{
    kh_eval_solution cs, is;
    char *ctext = NULL, *itext = NULL;
    if (solution_arg(sol, "--solution ", &cs, &ctext) ||
        solution_arg(inc, "--incumbent ", &is, &itext)) {
        free(ctext);
        return 1;
    }
    kh_eval_paired_opts po;
    kh_eval_paired_opts_default(&po);
    if (reps > 0)
        po.reps = reps;
    kh_err err;
    kh_task *t = NULL;
    kh_task_opts to = {0};
    kh_eval *ev = NULL;
    json_t *r = NULL;
    kh_status st = kh_task_open(task, &to, &t, &err);
    if (!st && !(ev = kh_eval_new(e, NULL, &err)))
        st = err.code;
    if (!st)
        st = kh_eval_paired(ev, t, &cs, &is, o, &po, &r, &err);
    kh_eval_free(ev);
    kh_task_close(t);
    free(ctext);
    free(itext);
    if (st) {
        fprintf(stderr, "khlua eval: %s\n", err.msg);
        return st == KH_EINTR ? 130 : 1;
    }
    double busy = json_number_value(json_object_get(r, "contended"));
    if (busy > 0.1) /* said on stderr, with --json too */
        fprintf(stderr, "khlua eval: warning: the machine was busy: %.0f%% of one measurement's "
                "timed calls waited on the run queue (another process had the core) even after "
                "retakes: the ratio is not reliable; compare on a quieter machine\n",
                100 * busy);
    if (as_json) {
        char *line = json_dumps(r, JSON_COMPACT);
        if (line)
            printf("%s\n", line);
        free(line);
    } else {
        print_table(r, sol, inc);
    }
    int ok = !json_object_get(r, "failed");
    json_decref(r);
    return ok ? 0 : 1;
}
