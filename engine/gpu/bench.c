/* bench.c: the timing protocols (see bench.h).  Owns call sequencing,
 * sample collection and statistics; the candidate's launches belong to the
 * target callbacks, record attribution to cupti.c. */
#include "gpu/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double kh_stat_median(const double *x, size_t n)
{
    if (n == 0)
        return NAN;
    double *c = malloc(n * sizeof *c);
    if (!c)
        return NAN;
    memcpy(c, x, n * sizeof *c);
    qsort(c, n, sizeof *c, cmp_d);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

void kh_stat_mean_sd(const double *x, size_t n, double *mean, double *sd)
{
    double s = 0, ss = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    double m = n ? s / (double)n : NAN;
    for (size_t i = 0; i < n; i++)
        ss += (x[i] - m) * (x[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
}

void kh_bench_defaults(kh_protocol p, kh_bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->protocol = p;
    o->warmup = 10;
    o->iters = 50;
    o->trials = 3;
    o->cold_l2 = 1;
    o->rel_ci = 0.02;
    o->max_iters = p == KH_PROTO_PRECISE ? 100000 : 200;
    o->min_gpu_s = 0.5;
    o->max_rel_stdev = 0.005;
    o->timeout_s = 15;
}

void kh_bench_definition_flags(const char *definition, kh_bench_opts *o)
{
    if (definition && !strncmp(definition, "gdn_prefill", 11) &&
        o->protocol == KH_PROTO_OFFICIAL) {
        o->warmup = 1;
        o->iters = 5;
        o->trials = 3;
    }
}

const char *kh_protocol_name(kh_protocol p)
{
    return p == KH_PROTO_OFFICIAL ? "official" : p == KH_PROTO_SCREEN ? "screen" : "precise";
}

int kh_protocol_parse(const char *s, kh_protocol *p)
{
    if (!strcmp(s, "official"))
        *p = KH_PROTO_OFFICIAL;
    else if (!strcmp(s, "screen"))
        *p = KH_PROTO_SCREEN;
    else if (!strcmp(s, "precise"))
        *p = KH_PROTO_PRECISE;
    else
        return 0;
    return 1;
}

void kh_bench_result_free(kh_bench_result *r)
{
    free(r->samples_ns);
    r->samples_ns = NULL;
}

/* ---- one timed batch ---------------------------------------------------------
 * Runs n cold calls and appends their times to samples[*ns..].  With CUPTI:
 * exact external-id attribution (and the window method alongside for the
 * official protocol); with events: an event pair per call. */
typedef struct batch_ctx {
    kh_gpu *g;
    kh_cupti *c;
    const kh_bench_target *t;
    int cold;
    uint64_t next_id;
    CUevent e0, e1;
} batch_ctx;

static kh_status timed_batch_inner(batch_ctx *b, size_t n, double *samples,
                                   double *win_samples, double *sums, kh_call_span *first,
                                   kh_bench_result *r, kh_err *err);

static kh_status timed_batch(batch_ctx *b, size_t n, double *samples, double *win_samples,
                             double *sums, kh_call_span *first, kh_bench_result *r, kh_err *err)
{
    kh_status st;
    if (b->t->phase)
        b->t->phase(b->t->ctx, 1);
    st = timed_batch_inner(b, n, samples, win_samples, sums, first, r, err);
    if (b->t->phase)
        b->t->phase(b->t->ctx, 0);
    return st;
}

static kh_status timed_batch_inner(batch_ctx *b, size_t n, double *samples, double *win_samples,
                                   double *sums, kh_call_span *first, kh_bench_result *r,
                                   kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(b->g);
    CUstream s = kh_gpu_stream(b->g);
    kh_status st;
    if (b->c) {
        uint64_t *t0 = malloc(n * sizeof *t0), *t1 = malloc(n * sizeof *t1);
        kh_call_span *sp = malloc(n * sizeof *sp), *wp = malloc(n * sizeof *wp);
        if (!t0 || !t1 || !sp || !wp) {
            free(t0); free(t1); free(sp); free(wp);
            return kh_err_set(err, KH_ENOMEM, "out of memory for %zu samples", n);
        }
        kh_cupti_clear(b->c);
        st = kh_cupti_enable(b->c, err);
        uint64_t id0 = b->next_id;
        for (size_t i = 0; i < n && !st; i++) {
            if (b->t->before)
                st = b->t->before(b->t->ctx, err);
            if (b->cold && !st)
                st = kh_gpu_flush_l2(b->g, err);
            if (!st)
                st = kh_gpu_sync(b->g, err);
            if (st)
                break;
            t0[i] = kh_cupti_timestamp(b->c);
            st = kh_cupti_push(b->c, b->next_id++, err);
            if (!st)
                st = b->t->call(b->t->ctx, err);
            kh_status pst = kh_cupti_pop(b->c, err);
            if (!st)
                st = pst;
            t1[i] = kh_cupti_timestamp(b->c);
            if (!st)
                st = kh_gpu_sync(b->g, err);
            if (!st && b->t->after)
                st = b->t->after(b->t->ctx, err);
        }
        kh_status dst = kh_cupti_disable(b->c, err);
        if (!st)
            st = dst;
        if (!st)
            st = kh_cupti_attribute_ext(b->c, id0, n, sp, err);
        if (!st)
            st = kh_cupti_attribute_window(b->c, t0, t1, n, wp, err);
        if (!st)
            r->active_s += kh_cupti_active_ns(b->c) * 1e-9;
        for (size_t i = 0; i < n && !st; i++) {
            if (sp[i].count == 0 && !strcmp(r->status, "OK")) {
                snprintf(r->status, sizeof r->status, "RUNTIME_ERROR");
                snprintf(r->why, sizeof r->why,
                         "no kernel activities recorded for iteration %zu", i);
            }
            if (first->count == 0 && sp[i].count)
                *first = sp[i];
            if (first->count && sp[i].count && sp[i].set_hash != first->set_hash &&
                !strcmp(r->status, "OK")) {
                snprintf(r->status, sizeof r->status, "RUNTIME_ERROR");
                snprintf(r->why, sizeof r->why,
                         "inconsistent kernel names: iteration %zu ran a different kernel set "
                         "(%d kernels, first '%s') than the first", i, sp[i].kernels,
                         sp[i].nnames ? sp[i].names[0] : "?");
            }
            samples[i] = sp[i].span_ns;
            if (win_samples)
                win_samples[i] = wp[i].span_ns;
            if (sums)
                sums[i] = sp[i].sum_ns;
        }
        free(t0); free(t1); free(sp); free(wp);
        return st;
    }
    /* CUDA events. */
    for (size_t i = 0; i < n; i++) {
        if (b->t->before && (st = b->t->before(b->t->ctx, err)))
            return st;
        if (b->cold && (st = kh_gpu_flush_l2(b->g, err)))
            return st;
        if ((st = kh_gpu_sync(b->g, err)) ||
            (st = kh_gpu_check(b->g, cu->cuEventRecord(b->e0, s), "cuEventRecord", err)) ||
            (st = b->t->call(b->t->ctx, err)) ||
            (st = kh_gpu_check(b->g, cu->cuEventRecord(b->e1, s), "cuEventRecord", err)) ||
            (st = kh_gpu_check(b->g, cu->cuEventSynchronize(b->e1), "cuEventSynchronize", err)) ||
            (b->t->after && (st = b->t->after(b->t->ctx, err))))
            return st;
        float ms = 0;
        if ((st = kh_gpu_check(b->g, cu->cuEventElapsedTime(&ms, b->e0, b->e1),
                               "cuEventElapsedTime", err)))
            return st;
        samples[i] = (double)ms * 1e6;
        r->active_s += (double)ms * 1e-3;
        if (win_samples)
            win_samples[i] = samples[i];
        if (sums)
            sums[i] = samples[i];
    }
    return KH_OK;
}

static kh_status untimed(batch_ctx *b, int n, int flush, kh_err *err)
{
    for (int i = 0; i < n; i++) {
        kh_status st;
        if (b->t->before && (st = b->t->before(b->t->ctx, err)))
            return st;
        if (flush && (st = kh_gpu_flush_l2(b->g, err)))
            return st;
        if ((st = b->t->call(b->t->ctx, err)))
            return st;
    }
    return KH_OK;
}

static kh_status batch_open(batch_ctx *b, kh_gpu *g, kh_cupti *c, const kh_bench_target *t,
                            int cold, kh_err *err)
{
    memset(b, 0, sizeof *b);
    b->g = g;
    b->c = c;
    b->t = t;
    b->cold = cold;
    b->next_id = 1;
    if (!c) {
        const kh_cuda_api *cu = kh_gpu_api(g);
        kh_status st = kh_gpu_check(g, cu->cuEventCreate(&b->e0, CU_EVENT_DEFAULT),
                                    "cuEventCreate", err);
        if (!st)
            st = kh_gpu_check(g, cu->cuEventCreate(&b->e1, CU_EVENT_DEFAULT), "cuEventCreate",
                              err);
        return st;
    }
    return KH_OK;
}

static void batch_close(batch_ctx *b)
{
    if (b->e0)
        kh_gpu_api(b->g)->cuEventDestroy(b->e0);
    if (b->e1)
        kh_gpu_api(b->g)->cuEventDestroy(b->e1);
}

static kh_status append(kh_bench_result *r, size_t *cap, size_t add, kh_err *err)
{
    if (r->n + add > *cap) {
        size_t nc = (*cap ? *cap : 64);
        while (nc < r->n + add)
            nc *= 2;
        double *ns = realloc(r->samples_ns, nc * sizeof *ns);
        if (!ns)
            return kh_err_set(err, KH_ENOMEM, "out of memory for samples");
        r->samples_ns = ns;
        *cap = nc;
    }
    return KH_OK;
}

void kh_bench_summarize(kh_bench_result *r)
{
    if (!r->n)
        return;
    r->median_ns = kh_stat_median(r->samples_ns, r->n);
    kh_stat_mean_sd(r->samples_ns, r->n, &r->mean_ns, &r->stdev_ns);
    r->min_ns = r->max_ns = r->samples_ns[0];
    r->gpu_time_s = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->samples_ns[i] < r->min_ns)
            r->min_ns = r->samples_ns[i];
        if (r->samples_ns[i] > r->max_ns)
            r->max_ns = r->samples_ns[i];
        r->gpu_time_s += r->samples_ns[i] * 1e-9;
    }
    r->rel_ci = r->n > 1 && r->mean_ns > 0
                    ? 1.96 * r->stdev_ns / sqrt((double)r->n) / r->mean_ns
                    : INFINITY;
}

kh_status kh_bench_run(kh_gpu *g, kh_cupti *c, const kh_bench_target *t,
                       const kh_bench_opts *o, kh_bench_result *r, kh_err *err)
{
    memset(r, 0, sizeof *r);
    if (o->use_events)
        c = NULL;
    snprintf(r->status, sizeof r->status, "OK");
    r->timer = c ? "cupti" : "events";
    batch_ctx b;
    kh_status st = batch_open(&b, g, c, t, o->cold_l2, err);
    size_t cap = 0;
    kh_call_span first;
    memset(&first, 0, sizeof first);
    double *sums = NULL;
    if (st)
        goto out;

    if (o->protocol == KH_PROTO_OFFICIAL) {
        int trials = o->trials > 16 ? 16 : (o->trials < 1 ? 1 : o->trials);
        double win_sum = 0, lat_sum = 0;
        size_t per = (size_t)(o->iters > 0 ? o->iters : 1);
        double *win = malloc(per * sizeof *win);
        sums = malloc(per * (size_t)trials * sizeof *sums);
        if (!win || !sums) {
            free(win);
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            goto out;
        }
        for (int tr = 0; tr < trials && !st; tr++) {
            if (t->trial && (st = t->trial(t->ctx, tr, err)))
                break;
            /* sync; call; sync; 5 x (flush; call); warmup x (flush; call); sync */
            if ((st = kh_gpu_sync(g, err)) || (st = untimed(&b, 1, 0, err)) ||
                (st = kh_gpu_sync(g, err)) || (st = untimed(&b, 5, 1, err)) ||
                (st = untimed(&b, o->warmup, 1, err)) || (st = kh_gpu_sync(g, err)))
                break;
            if ((st = append(r, &cap, per, err)))
                break;
            st = timed_batch(&b, per, r->samples_ns + r->n, win, sums + r->n, &first, r, err);
            if (st)
                break;
            double med = kh_stat_median(r->samples_ns + r->n, per);
            r->trial_median_ns[tr] = med;
            lat_sum += med;
            win_sum += kh_stat_median(win, per);
            r->n += per;
            r->trials = tr + 1;
        }
        free(win);
        if (!st && r->trials) {
            r->latency_ns = lat_sum / r->trials;
            r->window_latency_ns = win_sum / r->trials;
        }
    } else {
        /* screen / precise: one input set, warm-up, then batches. */
        size_t scap = 0, batch = 10;
        if ((t->trial && (st = t->trial(t->ctx, 0, err))) || (st = kh_gpu_sync(g, err)) ||
            (st = untimed(&b, 1, 0, err)) || (st = untimed(&b, o->warmup > 0 ? o->warmup : 3,
                                                           o->cold_l2, err)) ||
            (st = kh_gpu_sync(g, err)))
            goto out;
        double t_start = kh_now();
        for (;;) {
            if ((st = append(r, &cap, batch, err)))
                break;
            if (r->n + batch > scap) {
                size_t nc = scap ? scap * 2 : 64;
                while (nc < r->n + batch)
                    nc *= 2;
                double *ns = realloc(sums, nc * sizeof *ns);
                if (!ns) {
                    st = kh_err_set(err, KH_ENOMEM, "out of memory");
                    break;
                }
                sums = ns;
                scap = nc;
            }
            st = timed_batch(&b, batch, r->samples_ns + r->n, NULL, sums + r->n, &first, r,
                             err);
            if (st)
                break;
            r->n += batch;
            kh_bench_summarize(r);
            if (strcmp(r->status, "OK"))
                break;
            if ((size_t)o->max_iters <= r->n)
                break;
            if (o->protocol == KH_PROTO_SCREEN && r->n >= 10 && r->rel_ci < o->rel_ci)
                break;
            if (o->protocol == KH_PROTO_PRECISE) {
                double rsd = r->mean_ns > 0 ? r->stdev_ns / r->mean_ns : INFINITY;
                if (r->n >= 10 && r->gpu_time_s >= o->min_gpu_s && rsd < o->max_rel_stdev)
                    break;
                if (kh_now() - t_start > o->timeout_s)
                    break;
                /* Grow batches so short kernels reach min_gpu_s in few rounds. */
                if (batch < 1000)
                    batch *= 2;
            }
        }
        if (!st)
            r->latency_ns = r->median_ns;
    }
    if (!st) {
        kh_bench_summarize(r);
        if (o->protocol != KH_PROTO_OFFICIAL)
            r->latency_ns = r->median_ns;
        r->sum_kernel_ns = sums ? kh_stat_median(sums, r->n) : 0;
        if (sums) {
            /* per call: the span minus the kernels' own time (gaps, overlap < 0) */
            for (size_t i = 0; i < r->n; i++)
                sums[i] = r->samples_ns[i] - sums[i];
            r->gap_ns = kh_stat_median(sums, r->n);
        }
        r->kernels_per_call = first.kernels;
        r->nnames = first.nnames < 4 ? first.nnames : 4;
        for (int i = 0; i < r->nnames; i++)
            snprintf(r->names[i], sizeof r->names[i], "%s", first.names[i]);
    }
out:
    free(sums);
    batch_close(&b);
    return st;
}

/* ---- paired ----------------------------------------------------------------- */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

kh_status kh_bench_paired(kh_gpu *g, kh_cupti *c, const kh_bench_target *a,
                          const kh_bench_target *bt, int rounds, int block, double margin,
                          uint64_t seed, kh_paired_result *r, kh_err *err)
{
    memset(r, 0, sizeof *r);
    r->timer = c ? "cupti" : "events";
    r->seed = seed;
    if (rounds < 2)
        rounds = 2;
    if (block < 1)
        block = 1;
    size_t per = (size_t)rounds * (size_t)block;
    double *sa = malloc(per * sizeof *sa), *sb = malloc(per * sizeof *sb);
    if (!sa || !sb) {
        free(sa);
        free(sb);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    batch_ctx ba, bb;
    kh_bench_result dummy;
    memset(&dummy, 0, sizeof dummy);
    snprintf(dummy.status, sizeof dummy.status, "OK");
    kh_call_span fa, fb;
    memset(&fa, 0, sizeof fa);
    memset(&fb, 0, sizeof fb);
    kh_status st = batch_open(&ba, g, c, a, 1, err);
    if (!st)
        st = batch_open(&bb, g, c, bt, 1, err);
    /* warm both */
    if (!st)
        st = untimed(&ba, 3, 1, err);
    if (!st)
        st = untimed(&bb, 3, 1, err);
    if (!st)
        st = kh_gpu_sync(g, err);
    bb.next_id = 1u << 30; /* keep the two id ranges apart */
    for (int k = 0; k < rounds && !st; k++) {
        /* ABBA: alternate which goes first, so drift favours neither. */
        batch_ctx *first = k % 2 ? &bb : &ba, *second = k % 2 ? &ba : &bb;
        double *s1 = k % 2 ? sb : sa, *s2 = k % 2 ? sa : sb;
        size_t off = (size_t)k * (size_t)block;
        st = timed_batch(first, (size_t)block, s1 + off, NULL, NULL, k % 2 ? &fb : &fa, &dummy,
                         err);
        if (!st)
            st = timed_batch(second, (size_t)block, s2 + off, NULL, NULL, k % 2 ? &fa : &fb,
                             &dummy, err);
    }
    batch_close(&ba);
    batch_close(&bb);
    if (!st && strcmp(dummy.status, "OK"))
        st = kh_err_set(err, KH_EINVAL, "paired timing: %s", dummy.why);
    if (!st) {
        r->n_a = r->n_b = per;
        r->median_a_ns = kh_stat_median(sa, per);
        r->median_b_ns = kh_stat_median(sb, per);
        r->ratio = r->median_a_ns / r->median_b_ns;
        /* Bootstrap: resample each side, ratio of medians, 2.5/97.5 percentiles. */
        enum { B = 2000 };
        double *ratios = malloc(B * sizeof *ratios);
        double *ra = malloc(per * sizeof *ra), *rb = malloc(per * sizeof *rb);
        if (!ratios || !ra || !rb) {
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
        } else {
            uint64_t s = seed;
            for (int i = 0; i < B; i++) {
                for (size_t j = 0; j < per; j++) {
                    ra[j] = sa[splitmix(&s) % per];
                    rb[j] = sb[splitmix(&s) % per];
                }
                ratios[i] = kh_stat_median(ra, per) / kh_stat_median(rb, per);
            }
            qsort(ratios, B, sizeof *ratios, cmp_d);
            r->ci_lo = ratios[(int)(0.025 * B)];
            r->ci_hi = ratios[(int)(0.975 * B) - 1];
            r->verdict = r->ci_lo > 1 + margin ? "faster" : r->ci_hi < 1 - margin ? "slower"
                                                                                   : "tie";
        }
        free(ratios);
        free(ra);
        free(rb);
    }
    free(sa);
    free(sb);
    return st;
}
