/* eval_paired.c: the paired comparison (eval.h kh_eval_paired;
 * docs/evaluation.md, "Paired comparison").  Owns the repetitions' order
 * and seeds, the per-(repetition, workload) ratios, their geometric mean
 * and its percentile bootstrap, and the result's shape.  Each measurement
 * is a whole kh_eval_run_task (every check of the protocol, recorded like
 * any other verdict); the workers, the placement (a workload's requests on
 * one GPU, whoever is evaluated) and the store are the evaluator's. */
#include "eval/eval_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kh_eval_paired_opts_default(kh_eval_paired_opts *po)
{
    po->reps = 5;
    po->alpha = 0.05;
    po->resamples = 2000;
    po->stop_below = 0;
}

/* splitmix64: one repetition's seed from the call's (63 bits, as every
 * recorded seed: exact in JSON and as a Lua integer). */
static uint64_t rep_seed(uint64_t base, int rep)
{
    uint64_t z = base + 0x9E3779B97F4A7C15ull * (uint64_t)(rep + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) & INT64_MAX;
}

/* ---- the bootstrap -----------------------------------------------------------
 * The same generator, resampling and quantile as policies/lib/stats.lua
 * (rng, bootstrap, quantile), so that a decision replays from its recorded
 * ratios and seed in either language. */
typedef struct xs64 {
    uint64_t s;
} xs64;

static void xs_init(xs64 *r, uint64_t seed)
{
    r->s = seed ^ 0x9E3779B97F4A7C15ull;
    if (!r->s)
        r->s = 1;
}

static double xs_next(xs64 *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    uint64_t x = r->s * 0x2545F4914F6CDD1Dull;
    return (double)((x >> 11) & ((1ull << 53) - 1)) / (double)(1ull << 53);
}

static double geomean(const double *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += log(x[i]);
    return exp(s / (double)n);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* q-quantile of sorted x (linear between order statistics, stats.quantile) */
static double quantile(const double *x, size_t n, double q)
{
    double pos = (double)(n - 1) * q;
    size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : n - 1;
    return x[lo] + (x[hi] - x[lo]) * (pos - (double)lo);
}

static kh_status bootstrap(const double *x, size_t n, const kh_eval_paired_opts *po,
                           uint64_t seed, double *lo, double *hi, kh_err *err)
{
    size_t B = (size_t)po->resamples;
    double *reps = malloc(B * sizeof *reps), *tmp = malloc(n * sizeof *tmp);
    if (!reps || !tmp) {
        free(reps);
        free(tmp);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    xs64 r;
    xs_init(&r, seed);
    for (size_t b = 0; b < B; b++) {
        for (size_t i = 0; i < n; i++)
            tmp[i] = x[(size_t)floor(xs_next(&r) * (double)n)];
        reps[b] = geomean(tmp, n);
    }
    qsort(reps, B, sizeof *reps, cmp_double);
    *lo = quantile(reps, B, po->alpha);
    *hi = quantile(reps, B, 1 - po->alpha);
    free(reps);
    free(tmp);
    return KH_OK;
}

/* ---- one measurement's traces ------------------------------------------------ */
typedef struct paired {
    json_t *out;          /* the result being made */
    json_t *lat[2];       /* {uuid: [latency_ms, ...]}: candidate, incumbent */
    json_t *rep_ms[2];    /* this repetition's {uuid: latency_ms} */
    json_t *failed;       /* the first failure, NULL while none */
    double contended;
} paired;

static const char *const WHO[2] = {"candidate", "incumbent"};

static double num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* Take one measurement's traces: evidence ids, latencies, the first failure,
 * the contended share (host timing: timed calls kept although they waited on
 * the run queue after the retakes ran out). */
static kh_status take(paired *p, int who, json_t *traces, kh_err *err)
{
    json_t *ev = json_object_get(p->out, "evidence"), *all = json_object_get(p->out, WHO[who]);
    size_t i;
    json_t *t;
    json_array_foreach(traces, i, t) {
        json_t *e = json_object_get(t, "evaluation"), *kx = json_object_get(e, "khlua");
        const char *uuid = json_string_value(json_object_get(json_object_get(t, "workload"),
                                                             "uuid"));
        const char *status = json_string_value(json_object_get(e, "status"));
        const json_t *rec = json_object_get(kx, "record");
        if (!uuid || !status)
            return kh_err_set(err, KH_ESTATE, "paired: a trace without workload or status");
        if (json_is_string(rec) && json_array_append(ev, (json_t *)rec))
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        const json_t *tm = json_object_get(kx, "timing");
        double n = num(tm, "n"), kept = num(json_object_get(tm, "contended"), "kept");
        double c = kept / (n > 1 ? n : 1);
        if (c > p->contended)
            p->contended = c;
        const json_t *lat = json_object_get(json_object_get(e, "performance"), "latency_ms");
        if (!strcmp(status, "PASSED") && json_is_number(lat) && json_number_value(lat) > 0) {
            json_t *xs = json_object_get(p->lat[who], uuid);
            if (!xs && json_object_set_new(p->lat[who], uuid, xs = json_array()))
                return kh_err_set(err, KH_ENOMEM, "out of memory");
            if (json_array_append(xs, (json_t *)lat) ||
                json_object_set(p->rep_ms[who], uuid, (json_t *)lat))
                return kh_err_set(err, KH_ENOMEM, "out of memory");
        } else if (!p->failed) {
            const json_t *chk = json_object_get(kx, "failed_check"), *log = json_object_get(e, "log");
            p->failed = json_pack("{s:s, s:s, s:s, s:O, s:O}", "who", WHO[who], "status",
                                  !strcmp(status, "PASSED") ? "NO_LATENCY" : status, "workload",
                                  uuid, "check", json_is_string(chk) ? chk : json_null(),
                                  "log", json_is_string(log) ? log : json_null());
            if (!p->failed)
                return kh_err_set(err, KH_ENOMEM, "out of memory");
        }
    }
    if (json_array_extend(all, traces))
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    return KH_OK;
}

static kh_status check_paired(const kh_eval_opts *o, const kh_eval_paired_opts *po, kh_err *err)
{
    if (po->reps < 1 || po->reps > 100)
        return kh_err_set(err, KH_EINVAL, "paired: reps must be 1 to 100, got %d", po->reps);
    if (!(po->alpha > 0 && po->alpha < 0.5))
        return kh_err_set(err, KH_EINVAL, "paired: alpha must be in (0, 0.5), got %g", po->alpha);
    if (po->resamples < 100 || po->resamples > 1000000)
        return kh_err_set(err, KH_EINVAL, "paired: resamples must be 100 to 1000000, got %d",
                          po->resamples);
    if (!(po->stop_below >= 0 && po->stop_below < 1))
        return kh_err_set(err, KH_EINVAL, "paired: stop_below must be in [0, 1) (0: every "
                          "repetition), got %g", po->stop_below);
    if (!o->timing)
        return kh_err_set(err, KH_EINVAL, "paired: a comparison of latencies needs timing on");
    if (o->shapes)
        return kh_err_set(err, KH_EINVAL, "paired: shapes are correctness only (no latency to "
                          "pair); check them with a plain evaluation");
    return KH_OK;
}

/* This repetition's ratios (incumbent / candidate latency per workload), in
 * the result's workload order. */
static kh_status rep_ratios(paired *p, json_t *ratios, kh_err *err)
{
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(p->out, "workloads"), i, u) {
        const char *uuid = json_string_value(u);
        const json_t *c = json_object_get(p->rep_ms[0], uuid), *n = json_object_get(p->rep_ms[1], uuid);
        if (!c || !n)
            return kh_err_set(err, KH_ESTATE, "paired: no latency for workload %s", uuid);
        if (json_array_append_new(ratios, json_real(json_number_value(n) / json_number_value(c))))
            return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    return KH_OK;
}

/* Whether every ratio so far is below x (the early stop, stop_below). */
static int all_below(const json_t *ratios, double x)
{
    size_t i;
    json_t *r;
    json_array_foreach(ratios, i, r) {
        if (!(json_number_value(r) < x))
            return 0;
    }
    return json_array_size(ratios) > 0;
}

/* The workloads measured, from the first measurement (every later one runs
 * the same selection). */
static kh_status workloads_of(json_t *out, const json_t *traces, kh_err *err)
{
    json_t *ws = json_object_get(out, "workloads");
    size_t i;
    json_t *t;
    json_array_foreach(traces, i, t) {
        json_t *u = json_object_get(json_object_get(t, "workload"), "uuid");
        if (!json_is_string(u) || json_array_append(ws, u))
            return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    return KH_OK;
}

static kh_status summarise(paired *p, const kh_eval_paired_opts *po, uint64_t seed, kh_err *err)
{
    json_t *out = p->out, *rs = json_object_get(out, "ratios");
    json_object_set_new(out, "contended", json_real(p->contended));
    if (p->failed) {
        json_object_set_new(out, "failed", p->failed);
        p->failed = NULL;
        return KH_OK;
    }
    size_t n = json_array_size(rs);
    double *x = malloc((n ? n : 1) * sizeof *x);
    if (!x)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        x[i] = json_number_value(json_array_get(rs, i));
    double lo = 0, hi = 0;
    kh_status st = n ? bootstrap(x, n, po, seed, &lo, &hi, err)
                     : kh_err_set(err, KH_ESTATE, "paired: no workload measured");
    if (!st) {
        json_object_set_new(out, "ratio", json_real(geomean(x, n)));
        json_object_set_new(out, "lo", json_real(lo));
        json_object_set_new(out, "hi", json_real(hi));
    }
    free(x);
    return st;
}

static kh_status new_result(paired *p, const kh_eval_opts *o, const kh_eval_paired_opts *po,
                            uint64_t seed, kh_err *err)
{
    p->out = json_pack("{s:s, s:s, s:i, s:I, s:f, s:i, s:f, s:[], s:[], s:[], s:[], s:[], "
                       "s:[]}",
                       "protocol", "paired", "measure_protocol", o->protocol, "reps", po->reps,
                       "seed", (json_int_t)seed, "alpha", po->alpha, "resamples", po->resamples,
                       "stop_below", po->stop_below, "workloads", "ratios", "order", "evidence",
                       "candidate", "incumbent");
    for (int w = 0; w < 2; w++)
        p->lat[w] = json_object();
    if (!p->out || !p->lat[0] || !p->lat[1])
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    json_object_set(p->out, "candidate_ms", p->lat[0]);
    json_object_set(p->out, "incumbent_ms", p->lat[1]);
    return KH_OK;
}

static void paired_free(paired *p)
{
    for (int w = 0; w < 2; w++) {
        json_decref(p->lat[w]);
        json_decref(p->rep_ms[w]);
    }
    json_decref(p->failed);
}

kh_status kh_eval_paired(kh_eval *ev, const kh_task *t, const kh_eval_solution *cand,
                         const kh_eval_solution *inc, const kh_eval_opts *o,
                         const kh_eval_paired_opts *po, json_t **out, kh_err *err)
{
    *out = NULL;
    kh_eval_paired_opts dpo;
    if (!po) {
        kh_eval_paired_opts_default(&dpo);
        po = &dpo;
    }
    kh_status st = check_paired(o, po, err);
    uint64_t seed = o->seed;
    if (st || (seed == KH_EVAL_SEED_RANDOM && (st = kh_secure_seed(&seed, err))))
        return st;
    paired p = {0};
    if ((st = new_result(&p, o, po, seed, err))) {
        json_decref(p.out);
        paired_free(&p);
        return st;
    }
    char purpose[2][160];
    for (int r = 0; r < po->reps && !st && !p.failed; r++) {
        /* A B, B A, ...: a slow drift of the machine falls on both */
        int first = r % 2;
        for (int w = 0; w < 2; w++) {
            json_decref(p.rep_ms[w]);
            p.rep_ms[w] = json_object();
        }
        for (int k = 0; k < 2 && !st; k++) {
            int who = first ^ k;
            kh_eval_opts oo = *o;
            oo.seed = rep_seed(seed, r); /* the same inputs for both */
            snprintf(purpose[who], sizeof purpose[who], "%.120s:%s",
                     o->purpose ? o->purpose : "paired", WHO[who]);
            oo.purpose = purpose[who];
            json_t *traces = NULL;
            st = kh_eval_run_task(ev, t, who ? inc : cand, &oo, &traces, err);
            if (!st && r == 0 && k == 0)
                st = workloads_of(p.out, traces, err);
            if (!st && !(st = take(&p, who, traces, err)) &&
                json_array_append_new(json_object_get(p.out, "order"), json_string(WHO[who])))
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
            json_decref(traces);
        }
        /* both were measured in this repetition even when one failed: the
         * incumbent's figures still serve regression detection */
        if (!st && !p.failed)
            st = rep_ratios(&p, json_object_get(p.out, "ratios"), err);
        /* A candidate slower than stop_below on every workload of two
         * repetitions (both orders) is not measured further: more
         * repetitions of a kernel many times slower only cost seconds. */
        if (!st && !p.failed && po->stop_below > 0 && r >= 1 && r + 1 < po->reps &&
            all_below(json_object_get(p.out, "ratios"), po->stop_below)) {
            json_object_set_new(p.out, "stopped_after", json_integer(r + 1));
            break;
        }
    }
    if (!st)
        st = summarise(&p, po, seed, err);
    paired_free(&p);
    if (st) {
        json_decref(p.out);
        return st;
    }
    *out = p.out;
    return KH_OK;
}
