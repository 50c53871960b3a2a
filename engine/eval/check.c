/* check.c: comparison of outputs with references (check.h): FlashInfer-
 * Bench's default rule with its float32 arithmetic, khlua's extra figures,
 * aggregation over outputs and trials and the DSA top-k indexer evaluator;
 * the sampling evaluator's range and total-variation checks are
 * check_sampling.c's.
 * Where the tensors come from (device copies, the store) is not its concern;
 * it reads host tensors in place. */
#include "eval/check.h"
#include "eval/check_int.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>

/* FIB's float32 arithmetic is reproduced with C float operations, which
 * must round to float each time. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "check.c needs FLT_EVAL_METHOD == 0"
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *kh_check_status_name(kh_check_status s)
{
    switch (s) {
    case KH_CHECK_PASSED: return "PASSED";
    case KH_CHECK_INCORRECT_SHAPE: return "INCORRECT_SHAPE";
    case KH_CHECK_INCORRECT_DTYPE: return "INCORRECT_DTYPE";
    case KH_CHECK_INCORRECT_NUMERICAL: return "INCORRECT_NUMERICAL";
    }
    return "?";
}

const char *kh_check_evaluator_name(kh_check_evaluator ev)
{
    switch (ev) {
    case KH_EVAL_DEFAULT: return "default";
    case KH_EVAL_LOWBIT: return "lowbit";
    case KH_EVAL_DSA_ATTENTION: return "dsa_sparse_attention";
    case KH_EVAL_DSA_TOPK: return "dsa_topk_indexer";
    case KH_EVAL_SAMPLING: return "sampling";
    }
    return "?";
}

void kh_check_opts_default(kh_check_opts *o)
{
    o->atol = 1e-2;
    o->rtol = 1e-2;
    o->required_ratio = 1.0;
    o->precision = KH_CHECK_FIB_F32;
}

kh_check_evaluator kh_check_evaluator_for(const char *name, const char *op_type,
                                          kh_check_opts *o)
{
    if (o)
        kh_check_opts_default(o);
    /* registry.py: at most one special evaluator matches */
    if (name && strstr(name, "moe_fp8_block_scale")) {
        if (o)
            o->required_ratio = 0.95;
        return KH_EVAL_LOWBIT;
    }
    if (name && (strcmp(name, "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1") == 0 ||
                 strcmp(name, "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64") == 0))
        return KH_EVAL_DSA_ATTENTION;
    if (name && strncmp(name, "dsa_topk_indexer", 16) == 0)
        return KH_EVAL_DSA_TOPK;
    if (op_type && strcmp(op_type, "sampling") == 0)
        return KH_EVAL_SAMPLING;
    return KH_EVAL_DEFAULT;
}

void kh_check_result_init(kh_check_result *r)
{
    memset(r, 0, sizeof *r);
    r->status = KH_CHECK_PASSED;
    r->matched_ratio = 1.0;
    r->worst_index = -1;
    r->first_fail = -1;
}

void fail_status(kh_check_result *r, kh_check_status s, const char *fmt, ...)
{
    r->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
}

static int same_shape(const kh_tensor *a, const kh_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

/* Steps 1 and 2 of the rule; 1 if the verdict is already decided. */
static int shape_dtype(const kh_tensor *out, const kh_tensor *ref, kh_check_result *r)
{
    r->final = 1; /* until shown otherwise below */
    if (!same_shape(out, ref)) {
        char a[256], b[256];
        fail_status(r, KH_CHECK_INCORRECT_SHAPE, "output shape %s differs from the reference's %s",
                    kh_tensor_shape_str(out->ndim, out->shape, a, sizeof a),
                    kh_tensor_shape_str(ref->ndim, ref->shape, b, sizeof b));
        return 1;
    }
    if (out->dtype != ref->dtype) {
        fail_status(r, KH_CHECK_INCORRECT_DTYPE, "output dtype %s differs from the reference's %s",
                    kh_dtype_name(out->dtype), kh_dtype_name(ref->dtype));
        return 1;
    }
    r->final = 0;
    return 0;
}

/* One element's errors and verdict under FIB's rule.  Float32 mode repeats
 * compute_error_stats: x.to(float32), y.to(float32), |x-y| and the division
 * in float32, compared with the thresholds as torch promotes a Python float
 * against a float32 tensor (to float32). */
typedef struct elem_err {
    double abs, rel;
    int fail;
} elem_err;

static elem_err element_error(double x, double y, const kh_check_opts *o)
{
    elem_err e;
    if (o->precision == KH_CHECK_FIB_F32) {
        float xf = (float)x, yf = (float)y;
        float a = fabsf(xf - yf);
        float rl = a / (fabsf(yf) + 1e-8f);
        e.abs = a;
        e.rel = rl;
        e.fail = a > (float)o->atol && rl > (float)o->rtol;
    } else {
        double a = fabs(x - y);
        double rl = a / (fabs(y) + 1e-8);
        e.abs = a;
        e.rel = rl;
        e.fail = a > o->atol && rl > o->rtol;
    }
    return e;
}

/* The one pass over a chunk of both tensors.  Accumulators live in locals
 * (stores through r could alias the tensors' bytes and defeat registers),
 * and the function is inlined once per dtype with t constant, so the
 * decoding switch disappears from the loop. */
static inline __attribute__((always_inline)) void scan(kh_dtype t, const kh_tensor *out,
                                                       const kh_tensor *ref,
                                                       const kh_check_opts *o, uint64_t lo,
                                                       uint64_t n, kh_check_part *res)
{
    kh_check_part a = {.first_fail = -1, .first_inf = -1, .first_nan = -1, .worst = -1};
    /* the sums of norm_error in KH_CHECK_LANES partial sums, element i in
     * lane (i - lo) % KH_CHECK_LANES in element order, then folded in halves
     * (lane j + half into lane j): the device's block adds the same numbers
     * in the same order (gpu_check.c), its 1024 lanes at once */
    double sd[KH_CHECK_LANES] = {0}, sr[KH_CHECK_LANES] = {0};
    const void *xp = out->data, *yp = ref->data;
    for (uint64_t i = lo; i < n; i++) {
        uint64_t cx = kh_dtype_get_code(t, xp, i), cy = kh_dtype_get_code(t, yp, i);
        double x = kh_dtype_decode(t, cx), y = kh_dtype_decode(t, cy);
        int xfin = isfinite(x), yfin = isfinite(y);
        if (!xfin) {
            if (isinf(x) && a.out_inf++ == 0)
                a.first_inf = (int64_t)i;
            if (isnan(x) && a.out_nan++ == 0)
                a.first_nan = (int64_t)i;
        }
        if (!yfin)
            a.ref_nonfinite++;
        elem_err e = element_error(x, y, o);
        if (isnan(e.abs))
            a.abs_nan = 1;
        else if (e.abs > a.max_abs || a.worst < 0) {
            a.max_abs = e.abs;
            a.worst = (int64_t)i;
        }
        if (isnan(e.rel))
            a.rel_nan = 1;
        else if (e.rel > a.max_rel)
            a.max_rel = e.rel;
        if (e.fail && a.fails++ == 0)
            a.first_fail = (int64_t)i;
        if (xfin && yfin) {
            unsigned l = (unsigned)((i - lo) % KH_CHECK_LANES);
            double dd = (x - y) * (x - y), yy = y * y;
            sd[l] += dd;
            sr[l] += yy;
        }
        /* for integer dtypes the "ulp" distance is the integer difference */
        uint64_t d = kh_dtype_ulp_distance(t, cx, cy);
        if (d > a.max_ulp)
            a.max_ulp = d;
    }
    for (unsigned half = KH_CHECK_LANES / 2; half; half >>= 1)
        for (unsigned j = 0; j < half; j++) {
            sd[j] += sd[j + half];
            sr[j] += sr[j + half];
        }
    a.sdiff = sd[0];
    a.sref = sr[0];
    if (a.worst >= 0) {
        a.worst_out = kh_dtype_load(t, xp, (uint64_t)a.worst);
        a.worst_ref = kh_dtype_load(t, yp, (uint64_t)a.worst);
    }
    if (a.first_fail >= 0) {
        a.fail_out = kh_dtype_load(t, xp, (uint64_t)a.first_fail);
        a.fail_ref = kh_dtype_load(t, yp, (uint64_t)a.first_fail);
    }
    *res = a;
}

/* One chunk [lo, hi), the dtype's loop chosen once. */
static int scan_range(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o,
                      uint64_t lo, uint64_t hi, kh_check_part *acc)
{
    switch (out->dtype) {
#define KH_SCAN_CASE(T)                                                                   \
    case T:                                                                               \
        scan(T, out, ref, o, lo, hi, acc);                                                \
        return 0;
        KH_SCAN_CASE(KH_DTYPE_F32)
        KH_SCAN_CASE(KH_DTYPE_F16)
        KH_SCAN_CASE(KH_DTYPE_BF16)
        KH_SCAN_CASE(KH_DTYPE_F8E4M3)
        KH_SCAN_CASE(KH_DTYPE_F8E5M2)
        KH_SCAN_CASE(KH_DTYPE_F4E2M1)
        KH_SCAN_CASE(KH_DTYPE_I64)
        KH_SCAN_CASE(KH_DTYPE_I32)
        KH_SCAN_CASE(KH_DTYPE_I16)
        KH_SCAN_CASE(KH_DTYPE_I8)
        KH_SCAN_CASE(KH_DTYPE_BOOL)
#undef KH_SCAN_CASE
    default:
        return -1;
    }
}

void kh_check_part_merge_figures(kh_check_part *a, const kh_check_part *b)
{
    if (b->first_fail >= 0 && (a->first_fail < 0 || b->first_fail < a->first_fail)) {
        a->first_fail = b->first_fail;
        a->fail_out = b->fail_out;
        a->fail_ref = b->fail_ref;
    }
    if (b->first_inf >= 0 && (a->first_inf < 0 || b->first_inf < a->first_inf))
        a->first_inf = b->first_inf;
    if (b->first_nan >= 0 && (a->first_nan < 0 || b->first_nan < a->first_nan))
        a->first_nan = b->first_nan;
    if (b->worst >= 0 && (a->worst < 0 || b->max_abs > a->max_abs ||
                          (b->max_abs == a->max_abs && b->worst < a->worst))) {
        a->max_abs = b->max_abs;
        a->worst = b->worst;
        a->worst_out = b->worst_out;
        a->worst_ref = b->worst_ref;
    }
    if (b->max_rel > a->max_rel)
        a->max_rel = b->max_rel;
    if (b->max_ulp > a->max_ulp)
        a->max_ulp = b->max_ulp;
    a->fails += b->fails;
    a->out_inf += b->out_inf;
    a->out_nan += b->out_nan;
    a->ref_nonfinite += b->ref_nonfinite;
    a->abs_nan |= b->abs_nan;
    a->rel_nan |= b->rel_nan;
}

/* a then b (b's elements come after a's): the sequential loop's result
 * (the lower index is a's, so the figures merge as in any order) */
static void acc_merge(kh_check_part *a, const kh_check_part *b)
{
    kh_check_part_merge_figures(a, b);
    a->sdiff += b->sdiff;
    a->sref += b->sref;
}

/* Chunks of a fixed size (KH_CHECK_CHUNK), whatever the thread count: the
 * sums add in one order, so the figures are the same bits on a laptop, a
 * 16-core host and the GPU. */
#define KH_CHECK_MAX_THREADS 32

typedef struct scan_job {
    const kh_tensor *out, *ref;
    const kh_check_opts *o;
    kh_check_part *parts;
    uint64_t nchunks;
    unsigned first, stride;
} scan_job;

static void *scan_chunks(void *arg)
{
    scan_job *j = arg;
    uint64_t n = j->out->numel;
    for (uint64_t c = j->first; c < j->nchunks; c += j->stride) {
        uint64_t lo = c * KH_CHECK_CHUNK, hi = lo + KH_CHECK_CHUNK < n ? lo + KH_CHECK_CHUNK : n;
        scan_range(j->out, j->ref, j->o, lo, hi, &j->parts[c]);
    }
    return NULL;
}

/* Every chunk's part into parts (nchunks of them), on up to o->threads
 * threads. */
static void scan_parts(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o,
                       kh_check_part *parts, uint64_t nchunks)
{
    long cpus = o->threads > 0 ? o->threads : sysconf(_SC_NPROCESSORS_ONLN);
    unsigned nt = cpus < 1 ? 1 : cpus > KH_CHECK_MAX_THREADS ? KH_CHECK_MAX_THREADS : (unsigned)cpus;
    if (nt > nchunks)
        nt = nchunks ? (unsigned)nchunks : 1;
    scan_job jobs[KH_CHECK_MAX_THREADS];
    pthread_t tid[KH_CHECK_MAX_THREADS];
    int started[KH_CHECK_MAX_THREADS] = {0};
    for (unsigned k = 0; k < nt; k++) {
        jobs[k] = (scan_job){out, ref, o, parts, nchunks, k, nt};
        /* a thread that cannot start: this one does its share below */
        if (k > 0 && pthread_create(&tid[k], NULL, scan_chunks, &jobs[k]) == 0)
            started[k] = 1;
    }
    scan_chunks(&jobs[0]);
    for (unsigned k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            scan_chunks(&jobs[k]);
    }
}

static void scan_all(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o,
                     kh_check_part *acc)
{
    uint64_t n = out->numel, nchunks = kh_check_nchunks(n);
    kh_check_part *parts = nchunks > 1 ? calloc(nchunks, sizeof *parts) : NULL;
    if (!parts) { /* one chunk, or no memory for the parts: the same chunks in turn */
        scan_range(out, ref, o, 0, n < KH_CHECK_CHUNK ? n : KH_CHECK_CHUNK, acc);
        for (uint64_t c = 1; c < nchunks; c++) { /* the same chunks, the same bits */
            kh_check_part p;
            uint64_t lo = c * KH_CHECK_CHUNK;
            scan_range(out, ref, o, lo, lo + KH_CHECK_CHUNK < n ? lo + KH_CHECK_CHUNK : n, &p);
            acc_merge(acc, &p);
        }
        return;
    }
    scan_parts(out, ref, o, parts, nchunks);
    *acc = parts[0];
    for (uint64_t c = 1; c < nchunks; c++)
        acc_merge(acc, &parts[c]);
    free(parts);
}

/* The verdict of numel elements from their merged part. */
static void finish(const kh_check_part *acc, uint64_t numel, const kh_check_opts *o,
                   kh_check_result *r)
{
    r->numel = numel;
    r->fails = acc->fails;
    r->first_fail = acc->first_fail;
    r->out_inf = acc->out_inf;
    r->out_nan = acc->out_nan;
    r->ref_nonfinite = acc->ref_nonfinite;
    r->max_abs_error = acc->max_abs;
    r->max_rel_error = acc->max_rel;
    r->max_ulp_error = acc->max_ulp;
    r->worst_index = acc->worst;
    if (acc->worst >= 0) {
        r->worst_out = acc->worst_out;
        r->worst_ref = acc->worst_ref;
    }
    double sdiff = acc->sdiff, sref = acc->sref;
    /* torch's max() propagates NaN */
    if (acc->abs_nan)
        r->max_abs_error = NAN;
    if (acc->rel_nan)
        r->max_rel_error = NAN;
    r->norm_error = sref > 0 ? sqrt(sdiff) / sqrt(sref) : (sdiff > 0 ? INFINITY : 0.0);

    if (r->out_inf) {
        r->final = 1;
        r->max_abs_error = r->max_rel_error = INFINITY;
        fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                    "output has %llu inf value(s) (first at element %lld)",
                    (unsigned long long)r->out_inf, (long long)acc->first_inf);
        return;
    }
    if (r->out_nan) {
        r->final = 1;
        r->max_abs_error = r->max_rel_error = NAN;
        fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                    "output has %llu NaN value(s) (first at element %lld)",
                    (unsigned long long)r->out_nan, (long long)acc->first_nan);
        return;
    }
    if (r->numel) {
        double m = 1.0 - (double)r->fails / (double)r->numel;
        r->matched_ratio = m < 0 ? 0 : m > 1 ? 1 : m;
    }
    if (r->matched_ratio < o->required_ratio) {
        uint64_t i = (uint64_t)r->first_fail;
        fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                    "%llu of %llu elements exceed atol=%g and rtol=%g: matched ratio %.6f < "
                    "required %g (first at element %llu: output %.9g, reference %.9g)",
                    (unsigned long long)r->fails, (unsigned long long)r->numel, o->atol, o->rtol,
                    r->matched_ratio, o->required_ratio, (unsigned long long)i,
                    acc->fail_out, acc->fail_ref);
    }
}

kh_status kh_check_compare(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o,
                           kh_check_result *r, kh_err *err)
{
    kh_check_result_init(r);
    if (!out || !ref)
        return kh_err_set(err, KH_EINVAL, "compare: output and reference are required");
    kh_check_opts def;
    if (!o) {
        kh_check_opts_default(&def);
        o = &def;
    }
    if (shape_dtype(out, ref, r))
        return KH_OK;

    kh_check_part acc;
    if (out->dtype < 0 || out->dtype > KH_DTYPE_BOOL)
        return kh_err_set(err, KH_EINVAL, "compare: invalid dtype %d", (int)out->dtype);
    scan_all(out, ref, o, &acc);
    finish(&acc, out->numel, o, r);
    return KH_OK;
}

kh_status kh_check_parts(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o,
                         kh_check_part *parts, kh_err *err)
{
    kh_check_opts def;
    if (!o) {
        kh_check_opts_default(&def);
        o = &def;
    }
    kh_check_result r;
    kh_check_result_init(&r);
    if (!out || !ref || shape_dtype(out, ref, &r) || out->dtype < 0 ||
        out->dtype > KH_DTYPE_BOOL)
        return kh_err_set(err, KH_EINVAL, "compare: two tensors of one shape and dtype are "
                          "required%s%s", r.reason[0] ? ": " : "", r.reason);
    scan_parts(out, ref, o, parts, kh_check_nchunks(out->numel));
    return KH_OK;
}

/* Whether part p could come from a scan of [lo, hi): each index it names
 * lies in the chunk, is -1 exactly when its count is 0 (the worst element:
 * when every error was NaN), and no count exceeds the chunk.  A part the
 * scan did not write (memory left as it was: zeros, or another call's)
 * fails this: an all-zero part names element 0 as its first failure with
 * no failures. */
static int part_sane(const kh_check_part *p, uint64_t lo, uint64_t hi)
{
    uint64_t len = hi - lo;
#define KH_IN(i) ((i) >= 0 && (uint64_t)(i) >= lo && (uint64_t)(i) < hi)
    return p->fails <= len && p->out_inf <= len && p->out_nan <= len &&
           p->ref_nonfinite <= len && (p->fails ? KH_IN(p->first_fail) : p->first_fail == -1) &&
           (p->out_inf ? KH_IN(p->first_inf) : p->first_inf == -1) &&
           (p->out_nan ? KH_IN(p->first_nan) : p->first_nan == -1) &&
           (p->worst == -1 ? p->abs_nan != 0 : KH_IN(p->worst));
#undef KH_IN
}

kh_status kh_check_from_parts(const kh_check_part *parts, size_t nparts, uint64_t numel,
                              const kh_check_opts *o, kh_check_result *r, kh_err *err)
{
    kh_check_result_init(r);
    kh_check_opts def;
    if (!o) {
        kh_check_opts_default(&def);
        o = &def;
    }
    if (nparts != kh_check_nchunks(numel) || (nparts && !parts))
        return kh_err_set(err, KH_EINVAL, "compare: %zu parts for %llu elements (%llu expected)",
                          nparts, (unsigned long long)numel,
                          (unsigned long long)kh_check_nchunks(numel));
    for (size_t c = 0; c < nparts; c++) {
        uint64_t lo = (uint64_t)c * KH_CHECK_CHUNK,
                 hi = lo + KH_CHECK_CHUNK < numel ? lo + KH_CHECK_CHUNK : numel;
        if (!part_sane(&parts[c], lo, hi))
            return kh_err_set(err, KH_EINVAL,
                              "compare: part %zu of %zu (elements %llu to %llu) cannot come from "
                              "a scan of its chunk (fails %llu, first %lld, worst %lld)",
                              c, nparts, (unsigned long long)lo, (unsigned long long)hi,
                              (unsigned long long)parts[c].fails, (long long)parts[c].first_fail,
                              (long long)parts[c].worst);
    }
    kh_check_part acc = {.first_fail = -1, .first_inf = -1, .first_nan = -1, .worst = -1};
    if (nparts)
        acc = parts[0];
    for (size_t c = 1; c < nparts; c++)
        acc_merge(&acc, &parts[c]);
    finish(&acc, numel, o, r);
    return KH_OK;
}

/* Python's max(a, b) as FIB aggregates: b only if b > a, so NaN never wins. */
static double pymax(double a, double b) { return b > a ? b : a; }

void kh_check_merge(kh_check_result *acc, const kh_check_result *r)
{
    if (acc->final)
        return;
    if (r->final) {
        *acc = *r;
        return;
    }
    if (acc->status == KH_CHECK_PASSED && r->status != KH_CHECK_PASSED) {
        acc->status = r->status;
        memcpy(acc->reason, r->reason, sizeof acc->reason);
        acc->first_fail = r->first_fail;
    }
    if (r->worst_index >= 0 && (acc->worst_index < 0 || r->max_abs_error > acc->max_abs_error)) {
        acc->worst_index = r->worst_index;
        acc->worst_out = r->worst_out;
        acc->worst_ref = r->worst_ref;
    }
    acc->max_abs_error = pymax(acc->max_abs_error, r->max_abs_error);
    acc->max_rel_error = pymax(acc->max_rel_error, r->max_rel_error);
    acc->norm_error = pymax(acc->norm_error, r->norm_error);
    if (r->max_ulp_error > acc->max_ulp_error)
        acc->max_ulp_error = r->max_ulp_error;
    if (r->matched_ratio < acc->matched_ratio)
        acc->matched_ratio = r->matched_ratio;
    acc->numel += r->numel;
    acc->fails += r->fails;
    acc->out_nan += r->out_nan;
    acc->out_inf += r->out_inf;
    acc->ref_nonfinite += r->ref_nonfinite;
}

/* ---- DSA top-k indexer ---------------------------------------------------- */

static kh_status sorted_scores(const float *x, const float *y, uint64_t n,
                               const kh_check_opts *o, kh_check_result *r)
{
    int invalid_any = 0, finite_any = 0;
    r->numel = n;
    double sdiff = 0, sref = 0;
    for (uint64_t i = 0; i < n; i++) {
        float a = x[i], b = y[i];
        int shared = (isnan(a) && isnan(b)) ||
                     (isinf(a) && isinf(b) && signbit(a) == signbit(b));
        int finite = isfinite(a) && isfinite(b);
        int fail;
        if (finite) {
            finite_any = 1;
            elem_err e = element_error(a, b, o);
            fail = e.fail;
            if (e.abs > r->max_abs_error || r->worst_index < 0) {
                r->max_abs_error = e.abs;
                r->worst_index = (int64_t)i;
                r->worst_out = a;
                r->worst_ref = b;
            }
            if (e.rel > r->max_rel_error)
                r->max_rel_error = e.rel;
            sdiff += ((double)a - b) * ((double)a - b);
            sref += (double)b * b;
        } else {
            fail = !shared;
            if (fail)
                invalid_any = 1;
        }
        if (fail && r->fails++ == 0)
            r->first_fail = (int64_t)i;
    }
    if (!finite_any)
        r->max_abs_error = r->max_rel_error = 0;
    if (invalid_any)
        r->max_abs_error = r->max_rel_error = INFINITY;
    r->norm_error = sref > 0 ? sqrt(sdiff) / sqrt(sref) : (sdiff > 0 ? INFINITY : 0.0);
    if (n) {
        double m = 1.0 - (double)r->fails / (double)n;
        r->matched_ratio = m < 0 ? 0 : m > 1 ? 1 : m;
    }
    if (r->matched_ratio < o->required_ratio) {
        uint64_t i = (uint64_t)r->first_fail;
        fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                    "score mismatch: %llu of %llu sorted scores exceed atol=%g and rtol=%g "
                    "(matched ratio %.6f < required %g; first at position %llu: solution %.9g, "
                    "reference %.9g)",
                    (unsigned long long)r->fails, (unsigned long long)n, o->atol, o->rtol,
                    r->matched_ratio, o->required_ratio, (unsigned long long)i, (double)x[i],
                    (double)y[i]);
    }
    return KH_OK;
}

kh_status kh_check_sorted_scores(const kh_tensor *sol, const kh_tensor *ref,
                                 const kh_check_opts *o, kh_check_result *r, kh_err *err)
{
    kh_check_result_init(r);
    kh_check_opts def;
    if (!o) {
        kh_check_opts_default(&def);
        o = &def;
    }
    if (!sol || !ref)
        return kh_err_set(err, KH_EINVAL, "sorted_scores: two score tensors are required");
    if (shape_dtype(sol, ref, r))
        return KH_OK;
    if (sol->dtype != KH_DTYPE_F32)
        return kh_err_set(err, KH_EINVAL, "sorted scores must be float32, not %s",
                          kh_dtype_name(sol->dtype));
    return sorted_scores(sol->data, ref->data, sol->numel, o, r);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Descending, NaN first (torch.sort(descending=True) puts NaN on top). */
static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    if (isnan(x) || isnan(y))
        return isnan(y) - isnan(x);
    return (x < y) - (x > y);
}

static kh_status need(const kh_tensor *t, const char *name, kh_dtype dt, int ndim, kh_err *err)
{
    if (!t)
        return kh_err_set(err, KH_EINVAL, "dsa_topk: input %s is missing", name);
    if (t->dtype != dt || t->ndim != ndim)
        return kh_err_set(err, KH_EINVAL, "dsa_topk: %s must be a %d-D %s tensor, got %d-D %s",
                          name, ndim, kh_dtype_name(dt), t->ndim, kh_dtype_name(t->dtype));
    return KH_OK;
}

/* What token_score needs decoded once per check: q and weights as doubles,
 * the fp8 code book. */
typedef struct topk_scorer {
    const kh_check_topk_inputs *in;
    int64_t ps, D, H;
    double *q, *w; /* q [B, H, D], weights [B, H] */
    double f8[256];
} topk_scorer;

/* Score of token slot t for row b (see check.h), rounded to float32. */
static float token_score(const topk_scorer *s, int64_t b, int64_t t)
{
    int64_t ps = s->ps, D = s->D, H = s->H;
    int64_t page = t / ps, off = t % ps;
    const uint8_t *pg = (const uint8_t *)s->in->k_cache->data + (size_t)page * (size_t)ps *
                                                                    (size_t)(D + 4);
    float scale;
    memcpy(&scale, pg + (size_t)ps * (size_t)D + (size_t)off * 4, 4);
    const uint8_t *kb = pg + (size_t)off * (size_t)D;
    float kv[1024];
    for (int64_t d = 0; d < D; d++) /* fp8 * scale is a float32 product in FIB */
        kv[d] = (float)(s->f8[kb[d]] * (double)scale);
    double total = 0;
    for (int64_t h = 0; h < H; h++) {
        const double *qr = s->q + (size_t)((b * H + h) * D);
        double dot = 0;
        for (int64_t d = 0; d < D; d++)
            dot += qr[d] * (double)kv[d];
        if (dot > 0)
            total += dot * s->w[b * H + h];
    }
    return (float)total;
}

typedef struct tok_score {
    int64_t t;
    float v;
} tok_score;

static int cmp_tok(const void *a, const void *b)
{
    int64_t x = ((const tok_score *)a)->t, y = ((const tok_score *)b)->t;
    return (x > y) - (x < y);
}

/* Rows [lo, hi) of the scores at both index sets, each row sorted
 * descending: out's scores into xs, ref's into ys (a token out names too
 * is looked up, not scored again).  Nonzero when out of memory. */
typedef struct topk_rows {
    const topk_scorer *sc;
    const kh_tensor *out, *ref;
    int64_t K;
    float *xs, *ys;
} topk_rows;

static int score_rows(void *arg, uint64_t lo, uint64_t hi)
{
    const topk_rows *a = arg;
    int64_t K = a->K;
    tok_score *known = malloc((size_t)(K ? K : 1) * sizeof *known);
    if (!known)
        return 1;
    for (int64_t b = (int64_t)lo; b < (int64_t)hi; b++) {
        size_t nk = 0;
        float *xs = a->xs + b * K, *ys = a->ys + b * K;
        for (int64_t k = 0; k < K; k++) {
            int64_t ts = iget(a->out, (uint64_t)(b * K + k));
            xs[k] = ts < 0 ? -INFINITY : token_score(a->sc, b, ts);
            if (ts >= 0)
                known[nk++] = (tok_score){ts, xs[k]};
        }
        qsort(known, nk, sizeof *known, cmp_tok);
        for (int64_t k = 0; k < K; k++) {
            tok_score key = {iget(a->ref, (uint64_t)(b * K + k)), 0}, *hit = NULL;
            if (key.t >= 0)
                hit = bsearch(&key, known, nk, sizeof *known, cmp_tok);
            ys[k] = key.t < 0 ? -INFINITY : hit ? hit->v : token_score(a->sc, b, key.t);
        }
        qsort(xs, (size_t)K, sizeof *xs, cmp_desc);
        qsort(ys, (size_t)K, sizeof *ys, cmp_desc);
    }
    free(known);
    return 0;
}

kh_status kh_check_dsa_topk(const kh_tensor *out, const kh_tensor *ref,
                            const kh_check_topk_inputs *in, const kh_check_opts *o,
                            kh_check_result *r, kh_err *err)
{
    kh_check_result_init(r);
    kh_check_opts def;
    if (!o) {
        kh_check_opts_default(&def);
        o = &def;
    }
    if (!out || !ref || !in)
        return kh_err_set(err, KH_EINVAL, "dsa_topk: output, reference and inputs are required");
    if (shape_dtype(out, ref, r))
        return KH_OK;
    kh_status st;
    if ((st = need(ref, "topk_indices", KH_DTYPE_I32, 2, err)) ||
        (st = need(in->q, "q_index_fp8", KH_DTYPE_F8E4M3, 3, err)) ||
        (st = need(in->k_cache, "k_index_cache_fp8", KH_DTYPE_I8, 4, err)) ||
        (st = need(in->weights, "weights", KH_DTYPE_F32, 2, err)) ||
        (st = need(in->seq_lens, "seq_lens", KH_DTYPE_I32, 1, err)) ||
        (st = need(in->block_table, "block_table", KH_DTYPE_I32, 2, err)))
        return st;
    int64_t B = out->shape[0], K = out->shape[1];
    int64_t H = in->q->shape[1], D = in->q->shape[2];
    int64_t P = in->k_cache->shape[0], ps = in->k_cache->shape[1];
    int64_t M = in->block_table->shape[1];
    if (in->q->shape[0] != B || in->weights->shape[0] != B || in->weights->shape[1] != H ||
        in->seq_lens->shape[0] != B || in->block_table->shape[0] != B ||
        in->k_cache->shape[2] != 1 || in->k_cache->shape[3] != D + 4 || ps <= 0)
        return kh_err_set(err, KH_EINVAL,
                          "dsa_topk: inconsistent inputs (need q [B,H,D], weights [B,H], "
                          "seq_lens [B], block_table [B,M], k cache [P,page_size,1,D+4] with "
                          "B=%lld from the output)", (long long)B);
    r->numel = out->numel;

    /* reachability over every row first, then duplicates (FIB's order) */
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++) {
            int64_t t = iget(out, (uint64_t)(b * K + k));
            if (t < 0)
                continue;
            int64_t page = t / ps, off = t % ps, slot = -1;
            for (int64_t m = 0; m < M && slot < 0; m++)
                if (iget(in->block_table, (uint64_t)(b * M + m)) == page)
                    slot = m;
            if (slot < 0 || slot * ps + off >= iget(in->seq_lens, (uint64_t)b)) {
                r->max_abs_error = r->max_rel_error = INFINITY;
                r->final = 1;
                r->first_fail = b * K + k;
                fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                            "out-of-range index %lld in batch row %lld (position %lld): %s",
                            (long long)t, (long long)b, (long long)k,
                            slot < 0 ? "its page is not in the row's block_table"
                                     : "past the row's seq_len");
                return KH_OK;
            }
        }
    int64_t *row = malloc((size_t)(K ? K : 1) * sizeof *row);
    if (!row)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    for (int64_t b = 0; b < B; b++) {
        int64_t n = 0;
        for (int64_t k = 0; k < K; k++) {
            int64_t t = iget(out, (uint64_t)(b * K + k));
            if (t >= 0)
                row[n++] = t;
        }
        qsort(row, (size_t)n, sizeof *row, cmp_i64);
        for (int64_t i = 1; i < n; i++)
            if (row[i] == row[i - 1]) {
                r->max_abs_error = r->max_rel_error = INFINITY;
                r->final = 1;
                fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                            "duplicate index %lld in batch row %lld", (long long)row[i],
                            (long long)b);
                free(row);
                return KH_OK;
            }
    }
    free(row);

    /* every index names a page the k cache holds (the reference's too) */
    size_t n = (size_t)out->numel;
    for (size_t i = 0; i < n; i++) {
        int64_t ts = iget(out, i), tr = iget(ref, i);
        if ((ts >= 0 && ts / ps >= P) || (tr >= 0 && tr / ps >= P))
            return kh_err_set(err, KH_EINVAL,
                              "dsa_topk: row %lld names token %lld beyond the k cache's %lld "
                              "pages (block_table or reference is inconsistent)",
                              (long long)(i / (size_t)K), (long long)(ts / ps >= P ? ts : tr),
                              (long long)P);
    }
    if (D > 1024)
        return kh_err_set(err, KH_EUNSUPPORTED, "dsa_topk: head dim %lld > 1024", (long long)D);

    /* recompute and sort the scores at both index sets, rows split across
     * the cores; a token both name (every one, for a right answer) is
     * scored once */
    topk_scorer sc = {in, ps, D, H, NULL, NULL, {0}};
    float *xs = malloc((n ? n : 1) * sizeof *xs), *ys = malloc((n ? n : 1) * sizeof *ys);
    sc.q = malloc((size_t)(B * H * D + 1) * sizeof *sc.q);
    sc.w = malloc((size_t)(B * H + 1) * sizeof *sc.w);
    if (!xs || !ys || !sc.q || !sc.w) {
        free(xs);
        free(ys);
        free(sc.q);
        free(sc.w);
        return kh_err_set(err, KH_ENOMEM, "out of memory for %zu scores", n);
    }
    for (uint64_t i = 0; i < (uint64_t)(B * H * D); i++)
        sc.q[i] = kh_tensor_get(in->q, i);
    for (uint64_t i = 0; i < (uint64_t)(B * H); i++)
        sc.w[i] = kh_tensor_get(in->weights, i);
    for (int c = 0; c < 256; c++)
        sc.f8[c] = kh_dtype_decode(KH_DTYPE_F8E4M3, (uint64_t)c);
    topk_rows rows = {&sc, out, ref, K, xs, ys};
    int nomem = kh_parallel_for((uint64_t)B, 2, 1, score_rows, &rows);
    free(sc.q);
    free(sc.w);
    if (nomem) {
        free(xs);
        free(ys);
        return kh_err_set(err, KH_ENOMEM, "out of memory for the scores of %lld rows",
                          (long long)B);
    }
    kh_check_result_init(r);
    sorted_scores(xs, ys, n, o, r);
    free(xs);
    free(ys);
    return KH_OK;
}
