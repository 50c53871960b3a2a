/* test_check.c: output comparison.  Every status in FIB's order, the
 * atol-AND-rtol rule exactly at its boundary (in FIB's float32 arithmetic and
 * in double), the matched-ratio rule, the reported figures (max abs/rel,
 * normalized error, ULPs), aggregation over trials, evaluator selection,
 * the DSA top-k indexer evaluator on a small random paged cache, and the
 * sampling evaluator's range check, counting and total-variation test. */
#include "kh_test.h"

#include "eval/check.h"
#include "gpu/gpu_check.h"
#include "task/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t seed;
static uint32_t stream;

static kh_tensor *randt(kh_dtype t, int ndim, const int64_t *shape)
{
    kh_tensor *x;
    kh_err err;
    assert_int_equal(kh_tensor_new(&x, t, ndim, shape, &err), KH_OK);
    assert_int_equal(kh_rng_fill(NULL, x, seed, stream++, &err), KH_OK);
    return x;
}

static kh_tensor *clone(const kh_tensor *a)
{
    kh_tensor *x;
    kh_err err;
    assert_int_equal(kh_tensor_clone(&x, a, &err), KH_OK);
    return x;
}

static kh_check_result cmp(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o)
{
    kh_check_result r;
    kh_err err;
    assert_int_equal(kh_check_compare(out, ref, o, &r, &err), KH_OK);
    return r;
}

static uint64_t rnd(uint64_t n) { return kh_rng_code_at(KH_DTYPE_I64, seed, stream++, 0) % n; }

static void test_status_order(void **state)
{
    int64_t s34[2] = {3, 4}, s43[2] = {4, 3};
    kh_tensor *ref = randt(KH_DTYPE_BF16, 2, s34);
    kh_tensor *good = clone(ref);
    kh_check_result r = cmp(good, ref, NULL);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    assert_string_equal(r.reason, "");
    assert_true(r.max_abs_error == 0 && r.matched_ratio == 1.0);

    /* shape beats dtype beats inf beats NaN beats tolerance */
    kh_tensor *bad = randt(KH_DTYPE_F16, 2, s43);
    kh_tensor_set(bad, 0, NAN);
    r = cmp(bad, ref, NULL);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_SHAPE);
    assert_non_null(strstr(r.reason, "[4, 3]"));
    kh_tensor_free(bad);

    bad = randt(KH_DTYPE_F16, 2, s34);
    kh_tensor_set(bad, 0, NAN);
    r = cmp(bad, ref, NULL);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_DTYPE);
    assert_non_null(strstr(r.reason, "float16"));
    kh_tensor_free(bad);

    bad = clone(ref);
    uint64_t inf_at = 1 + rnd(10);
    kh_tensor_set(bad, 0, NAN);
    kh_tensor_set(bad, inf_at, -INFINITY);
    r = cmp(bad, ref, NULL);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_true(isinf(r.max_abs_error) && isinf(r.max_rel_error));
    char want[64];
    snprintf(want, sizeof want, "inf value(s) (first at element %llu)",
             (unsigned long long)inf_at);
    assert_non_null(strstr(r.reason, want));
    assert_int_equal(r.out_nan, 1);
    assert_int_equal(r.out_inf, 1);

    kh_tensor_set(bad, inf_at, kh_tensor_get(ref, inf_at));
    r = cmp(bad, ref, NULL);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_true(isnan(r.max_abs_error));
    assert_non_null(strstr(r.reason, "NaN"));

    kh_tensor_set(bad, 0, kh_tensor_get(ref, 0) + 1.0);
    r = cmp(bad, ref, NULL);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_int_equal(r.fails, 1);
    assert_non_null(strstr(r.reason, "matched ratio"));
    kh_tensor_free(bad);
    kh_tensor_free(good);
    kh_tensor_free(ref);
}

/* y an integer in [64, 1024], x = y + d: |x-y| = d exactly and |y| + 1e-8 is
 * y in float32, so the thresholds can be set exactly at the boundary. */
static void test_and_rule_boundary(void **state)
{
    for (int prec = 0; prec < 2; prec++) {
        for (int trial = 0; trial < 200; trial++) {
            int64_t one = 1;
            kh_tensor *x, *y;
            kh_err err;
            assert_int_equal(kh_tensor_new(&x, KH_DTYPE_F32, 1, &one, &err), KH_OK);
            assert_int_equal(kh_tensor_new(&y, KH_DTYPE_F32, 1, &one, &err), KH_OK);
            double yv = (double)(64 + rnd(961)), d = (double)(1 + rnd(8));
            kh_tensor_set(y, 0, yv);
            kh_tensor_set(x, 0, yv + d);
            double rel = prec == 0 ? (double)((float)d / (float)yv) : d / (yv + 1e-8);
            kh_check_opts o;
            kh_check_opts_default(&o);
            o.precision = prec ? KH_CHECK_DOUBLE : KH_CHECK_FIB_F32;
            /* abs == atol: passes whatever rtol says */
            o.atol = d;
            o.rtol = 0;
            assert_int_equal(cmp(x, y, &o).status, KH_CHECK_PASSED);
            /* abs > atol, rel == rtol: passes */
            o.atol = d - 0.5;
            o.rtol = rel;
            assert_int_equal(cmp(x, y, &o).status, KH_CHECK_PASSED);
            /* both exceeded by the smallest step: fails */
            o.rtol = prec == 0 ? (double)nextafterf((float)rel, 0) : nextafter(rel, 0);
            kh_check_result r = cmp(x, y, &o);
            assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
            assert_true(r.max_abs_error == d);
            kh_tensor_free(x);
            kh_tensor_free(y);
        }
    }
}

/* FIB compares float32 errors with float32(atol): an error of float32(0.1)
 * is not above atol 0.1 there, though it is above 0.1 in double. */
static void test_fib_float32_thresholds(void **state)
{
    int64_t one = 1;
    kh_tensor *x, *y;
    kh_err err;
    assert_int_equal(kh_tensor_new(&x, KH_DTYPE_F32, 1, &one, &err), KH_OK);
    assert_int_equal(kh_tensor_new(&y, KH_DTYPE_F32, 1, &one, &err), KH_OK);
    kh_tensor_set(x, 0, (double)0.1f);
    kh_check_opts o;
    kh_check_opts_default(&o);
    o.atol = 0.1;
    assert_int_equal(cmp(x, y, &o).status, KH_CHECK_PASSED);
    o.precision = KH_CHECK_DOUBLE;
    assert_int_equal(cmp(x, y, &o).status, KH_CHECK_INCORRECT_NUMERICAL);
    kh_tensor_free(x);
    kh_tensor_free(y);
}

static void test_matched_ratio(void **state)
{
    int64_t n = 1000;
    kh_tensor *ref = randt(KH_DTYPE_F32, 1, &n);
    kh_tensor *out = clone(ref);
    uint64_t k = 5 + rnd(40);
    for (uint64_t i = 0; i < k; i++)
        kh_tensor_set(out, i * 20 + 3, kh_tensor_get(ref, i * 20 + 3) + 0.5 + (double)i);
    kh_check_opts o;
    kh_check_opts_default(&o);
    o.required_ratio = 1.0 - (double)k / 1000.0;
    kh_check_result r = cmp(out, ref, &o);
    assert_int_equal(r.fails, k);
    assert_true(fabs(r.matched_ratio - o.required_ratio) < 1e-15);
    assert_int_equal(r.status, KH_CHECK_PASSED); /* ratio == required passes */
    assert_int_equal(r.first_fail, 3);
    /* the largest error is the last one written */
    assert_int_equal(r.worst_index, (int64_t)((k - 1) * 20 + 3));
    o.required_ratio = 1.0 - (double)(k - 1) / 1000.0;
    r = cmp(out, ref, &o);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    /* low-bit default: 0.95 */
    kh_check_evaluator ev = kh_check_evaluator_for(
        "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048", "moe", &o);
    assert_int_equal(ev, KH_EVAL_LOWBIT);
    assert_true(o.required_ratio == 0.95);
    assert_int_equal(cmp(out, ref, &o).status, KH_CHECK_PASSED);
    kh_tensor_free(out);
    kh_tensor_free(ref);
}

static void test_error_figures(void **state)
{
    int64_t shape[2] = {17, 33};
    kh_tensor *ref = randt(KH_DTYPE_BF16, 2, shape);
    kh_tensor *out = clone(ref);
    /* nudge a few elements by a few ULPs */
    uint64_t at = rnd(ref->numel);
    uint64_t code = kh_dtype_get_code(KH_DTYPE_BF16, ref->data, at);
    uint64_t steps = 1 + rnd(5);
    /* move away from zero in magnitude: same sign, larger mantissa */
    kh_dtype_set_code(KH_DTYPE_BF16, out->data, at, code + steps);
    kh_check_result r = cmp(out, ref, NULL);
    assert_int_equal(r.max_ulp_error, steps);
    double x = kh_tensor_get(out, at), y = kh_tensor_get(ref, at);
    assert_true(r.max_abs_error == (double)fabsf((float)x - (float)y));
    assert_int_equal(r.worst_index, (int64_t)at);
    double norm = 0;
    for (uint64_t i = 0; i < ref->numel; i++)
        norm += kh_tensor_get(ref, i) * kh_tensor_get(ref, i);
    assert_true(fabs(r.norm_error - fabs(x - y) / sqrt(norm)) < 1e-12);
    assert_true(r.max_rel_error > 0);
    kh_tensor_free(out);
    kh_tensor_free(ref);
}

/* A comparison over many chunks: the same figures, bit for bit, on one
 * thread and on several, and each one points at the planted element. */
static void test_threads_same_bits(void **state)
{
    (void)state;
    int64_t shape[1] = {(int64_t)(5u * KH_CHECK_CHUNK) + 1 + (int64_t)rnd(1000)};
    kh_tensor *ref = randt(KH_DTYPE_BF16, 1, shape);
    kh_tensor *out = clone(ref);
    uint64_t n = ref->numel, chunk = KH_CHECK_CHUNK;
    /* two failing elements, in chunks 2 and 4; the worst one in chunk 3 */
    uint64_t f1 = 2 * chunk + rnd(chunk), f2 = 4 * chunk + rnd(n - 4 * chunk);
    uint64_t w = 3 * chunk + rnd(chunk);
    kh_tensor_set(out, f1, kh_tensor_get(ref, f1) + 1.5);
    kh_tensor_set(out, f2, kh_tensor_get(ref, f2) - 1.5);
    kh_tensor_set(out, w, kh_tensor_get(ref, w) + 64.0);
    kh_check_opts o;
    kh_check_opts_default(&o);
    o.required_ratio = 0.5;
    o.threads = 1;
    kh_check_result one = cmp(out, ref, &o);
    assert_int_equal(one.first_fail, (int64_t)f1);
    assert_int_equal(one.fails, 3);
    assert_int_equal(one.worst_index, (int64_t)w);
    int counts[] = {2, 3, 7, 0};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        o.threads = counts[i];
        kh_check_result r = cmp(out, ref, &o);
        assert_int_equal(r.first_fail, one.first_fail);
        assert_int_equal(r.fails, one.fails);
        assert_int_equal(r.worst_index, one.worst_index);
        assert_int_equal(r.max_ulp_error, one.max_ulp_error);
        assert_memory_equal(&r.max_abs_error, &one.max_abs_error, sizeof(double));
        assert_memory_equal(&r.max_rel_error, &one.max_rel_error, sizeof(double));
        assert_memory_equal(&r.norm_error, &one.norm_error, sizeof(double));
        assert_memory_equal(&r.matched_ratio, &one.matched_ratio, sizeof(double));
    }
    /* a NaN in the last chunk is found and named whatever the threads */
    uint64_t at = n - 1 - rnd(100);
    kh_tensor_set(out, at, NAN);
    o.threads = 0;
    kh_check_result r = cmp(out, ref, &o);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_int_equal(r.out_nan, 1);
    char want[64];
    snprintf(want, sizeof want, "first at element %llu", (unsigned long long)at);
    assert_non_null(strstr(r.reason, want));
    kh_tensor_free(out);
    kh_tensor_free(ref);
}

/* FIB's quirks, reproduced: a NaN reference element never fails; an empty
 * tensor passes with ratio 1. */
static void test_fib_quirks(void **state)
{
    int64_t n = 64;
    kh_tensor *ref = randt(KH_DTYPE_F32, 1, &n);
    kh_tensor *out = clone(ref);
    kh_tensor_set(ref, 7, NAN);
    kh_tensor_set(ref, 9, INFINITY);
    kh_check_result r = cmp(out, ref, NULL);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    assert_int_equal(r.ref_nonfinite, 2);
    assert_true(isnan(r.max_abs_error)); /* torch's max propagates NaN */
    kh_tensor_free(out);
    kh_tensor_free(ref);

    int64_t z[2] = {0, 5};
    kh_tensor *a = randt(KH_DTYPE_F16, 2, z), *b = randt(KH_DTYPE_F16, 2, z);
    r = cmp(a, b, NULL);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    assert_true(r.matched_ratio == 1.0 && r.numel == 0);
    kh_tensor_free(a);
    kh_tensor_free(b);
}

static void test_merge_and_evaluators(void **state)
{
    /* three trials of one output: a tolerance failure in trial 2 keeps the
     * aggregation going; a NaN maximum never replaces a number (Python's
     * max); the minimum ratio is kept */
    int64_t n = 100;
    kh_tensor *ref = randt(KH_DTYPE_F32, 1, &n);
    kh_tensor *t1 = clone(ref), *t2 = clone(ref), *t3 = clone(ref);
    kh_tensor_set(t1, 3, kh_tensor_get(ref, 3) + 0.5);
    for (uint64_t i = 0; i < 9; i++)
        kh_tensor_set(t2, 10 + i, kh_tensor_get(ref, 10 + i) + 2.0);
    kh_tensor *ref3 = clone(ref);
    kh_tensor_set(ref3, 50, NAN); /* FIB: max over this output is NaN */
    kh_check_opts o;
    kh_check_opts_default(&o);
    o.required_ratio = 0.95;
    kh_check_result acc, r;
    kh_check_result_init(&acc);
    r = cmp(t1, ref, &o);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    kh_check_merge(&acc, &r);
    r = cmp(t2, ref, &o);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    kh_check_merge(&acc, &r);
    r = cmp(t3, ref3, &o);
    assert_true(isnan(r.max_abs_error));
    kh_check_merge(&acc, &r);
    assert_int_equal(acc.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_non_null(strstr(acc.reason, "9 of 100"));
    assert_true(fabs(acc.max_abs_error - 2.0) < 1e-6);
    assert_true(fabs(acc.matched_ratio - 0.91) < 1e-12);
    assert_int_equal(acc.numel, 300);
    assert_int_equal(acc.fails, 10);

    /* a final verdict (here an inf in the output) replaces and freezes it */
    kh_tensor_set(t3, 7, INFINITY);
    r = cmp(t3, ref, &o);
    assert_true(r.final);
    kh_check_merge(&acc, &r);
    assert_true(isinf(acc.max_abs_error));
    assert_non_null(strstr(acc.reason, "inf"));
    r = cmp(t2, ref, &o);
    kh_check_merge(&acc, &r);
    assert_true(isinf(acc.max_abs_error));
    assert_int_equal(acc.numel, 100);
    kh_tensor_free(t1);
    kh_tensor_free(t2);
    kh_tensor_free(t3);
    kh_tensor_free(ref);
    kh_tensor_free(ref3);

    assert_int_equal(kh_check_evaluator_for("dsa_topk_indexer_fp8_h64_d128_topk2048_ps64",
                                            "dsa_paged", &o),
                     KH_EVAL_DSA_TOPK);
    assert_true(o.required_ratio == 1.0);
    assert_int_equal(kh_check_evaluator_for("dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64",
                                            "dsa_paged", &o),
                     KH_EVAL_DSA_ATTENTION);
    assert_int_equal(kh_check_evaluator_for("gdn_decode_qk4_v8_d128_k_last", "gdn", &o),
                     KH_EVAL_DEFAULT);
    assert_int_equal(kh_check_evaluator_for("top_k_sampling", "sampling", &o), KH_EVAL_SAMPLING);
    assert_string_equal(kh_check_status_name(KH_CHECK_INCORRECT_DTYPE), "INCORRECT_DTYPE");
}

/* ---- DSA top-k ---------------------------------------------------------- */

enum { B = 3, H = 4, D = 8, PS = 4, P = 12, M = 3, K = 6 };

typedef struct topk_case {
    kh_tensor *q, *kc, *w, *sl, *bt, *ref;
    double score[B][M * PS]; /* by position in the row's sequence */
    int64_t token[B][M * PS];
} topk_case;

static void make_case(topk_case *c)
{
    int64_t sq[3] = {B, H, D}, sk[4] = {P, PS, 1, D + 4}, sw[2] = {B, H}, sb[1] = {B},
            sbt[2] = {B, M}, so[2] = {B, K};
    kh_err err;
    c->q = randt(KH_DTYPE_F8E4M3, 3, sq);
    c->kc = randt(KH_DTYPE_I8, 4, sk);
    c->w = randt(KH_DTYPE_F32, 2, sw);
    assert_int_equal(kh_tensor_new(&c->sl, KH_DTYPE_I32, 1, sb, &err), KH_OK);
    assert_int_equal(kh_tensor_new(&c->bt, KH_DTYPE_I32, 2, sbt, &err), KH_OK);
    assert_int_equal(kh_tensor_new(&c->ref, KH_DTYPE_I32, 2, so, &err), KH_OK);
    /* fp8 bytes must not be NaN codes; scales positive, around 1 */
    uint8_t *kb = c->kc->data;
    for (int64_t p = 0; p < P; p++) {
        uint8_t *pg = kb + p * PS * (D + 4);
        for (int i = 0; i < PS * D; i++)
            if ((pg[i] & 0x7F) == 0x7F)
                pg[i] = 0x38;
        for (int o = 0; o < PS; o++) {
            float s = 0.5f + (float)rnd(100) / 100.0f;
            memcpy(pg + PS * D + o * 4, &s, 4);
        }
    }
    for (int b = 0; b < B; b++) {
        /* distinct pages per row; row 1 is short (fewer tokens than K) */
        int64_t base = (int64_t)rnd(4);
        for (int m = 0; m < M; m++)
            kh_tensor_set(c->bt, (uint64_t)(b * M + m), (double)((base + m * 3 + b) % P));
        int64_t len = b == 1 ? 4 : 7 + (int64_t)rnd(5);
        kh_tensor_set(c->sl, (uint64_t)b, (double)len);
        for (int64_t pos = 0; pos < len; pos++) {
            int64_t page = (int64_t)kh_tensor_get(c->bt, (uint64_t)(b * M + pos / PS));
            int64_t t = page * PS + pos % PS;
            c->token[b][pos] = t;
            /* independent score: dequantise and sum in double */
            const uint8_t *pg = kb + page * PS * (D + 4);
            float scale;
            memcpy(&scale, pg + PS * D + (pos % PS) * 4, 4);
            double tot = 0;
            for (int h = 0; h < H; h++) {
                double dot = 0;
                for (int d = 0; d < D; d++)
                    dot += kh_tensor_get(c->q, (uint64_t)((b * H + h) * D + d)) *
                           (double)(float)(kh_dtype_decode(KH_DTYPE_F8E4M3,
                                                           pg[(pos % PS) * D + d]) *
                                           scale);
                tot += fmax(dot, 0) * kh_tensor_get(c->w, (uint64_t)(b * H + h));
            }
            c->score[b][pos] = tot;
        }
        /* reference: the K best positions (selection sort), -1 padded */
        int used[M * PS] = {0};
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int pos = 0; pos < len; pos++)
                if (!used[pos] && (best < 0 || c->score[b][pos] > c->score[b][best]))
                    best = pos;
            if (best >= 0)
                used[best] = 1;
            kh_tensor_set(c->ref, (uint64_t)(b * K + k),
                          best < 0 ? -1.0 : (double)c->token[b][best]);
        }
    }
}

static void free_case(topk_case *c)
{
    kh_tensor_free(c->q);
    kh_tensor_free(c->kc);
    kh_tensor_free(c->w);
    kh_tensor_free(c->sl);
    kh_tensor_free(c->bt);
    kh_tensor_free(c->ref);
}

static kh_check_result topk(topk_case *c, const kh_tensor *out)
{
    kh_check_topk_inputs in = {c->q, c->kc, c->w, c->sl, c->bt};
    kh_check_result r;
    kh_err err;
    kh_status st = kh_check_dsa_topk(out, c->ref, &in, NULL, &r, &err);
    if (st)
        fail_msg("%s", err.msg);
    return r;
}

static void test_dsa_topk(void **state)
{
    topk_case c;
    make_case(&c);
    kh_check_result r = topk(&c, c.ref);
    assert_int_equal(r.status, KH_CHECK_PASSED);

    /* any order within a row passes, padding included */
    kh_tensor *sol = clone(c.ref);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K / 2; k++) {
            uint64_t i = (uint64_t)(b * K + k), j = (uint64_t)(b * K + K - 1 - k);
            double t = kh_tensor_get(sol, i);
            kh_tensor_set(sol, i, kh_tensor_get(sol, j));
            kh_tensor_set(sol, j, t);
        }
    r = topk(&c, sol);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    assert_true(r.matched_ratio == 1.0);

    /* a duplicate */
    kh_tensor *dup = clone(c.ref);
    kh_tensor_set(dup, 1, kh_tensor_get(dup, 0));
    r = topk(&c, dup);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_non_null(strstr(r.reason, "duplicate index"));
    assert_true(isinf(r.max_abs_error));

    /* a page outside the row's block table */
    kh_tensor *far = clone(c.ref);
    int64_t foreign = -1;
    for (int64_t p = 0; p < P && foreign < 0; p++) {
        int inrow = 0;
        for (int m = 0; m < M; m++)
            inrow |= kh_tensor_get(c.bt, (uint64_t)(2 * M + m)) == (double)p;
        if (!inrow)
            foreign = p;
    }
    kh_tensor_set(far, 2 * K + 3, (double)(foreign * PS));
    r = topk(&c, far);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_non_null(strstr(r.reason, "not in the row's block_table"));

    /* a token of the row's last page past its seq_len (row 1 holds 4 tokens:
     * position 5 lives on its second page) */
    kh_tensor *past = clone(c.ref);
    int64_t page1 = (int64_t)kh_tensor_get(c.bt, (uint64_t)(1 * M + 1));
    kh_tensor_set(past, 1 * K + 5, (double)(page1 * PS + 1));
    r = topk(&c, past);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_non_null(strstr(r.reason, "past the row's seq_len"));

    /* swap row 0's best token for its worst unselected one: a score mismatch
     * (skipped in the rare draw where the two scores are within tolerance) */
    kh_tensor *worse = clone(c.ref);
    int64_t len0 = (int64_t)kh_tensor_get(c.sl, 0);
    int worst = -1;
    for (int pos = 0; pos < len0; pos++) {
        int sel = 0;
        for (int k = 0; k < K; k++)
            sel |= kh_tensor_get(c.ref, (uint64_t)k) == (double)c.token[0][pos];
        if (!sel && (worst < 0 || c.score[0][pos] < c.score[0][worst]))
            worst = pos;
    }
    int best = -1;
    for (int pos = 0; pos < len0; pos++)
        if (c.token[0][pos] == (int64_t)kh_tensor_get(c.ref, 0))
            best = pos;
    assert_true(worst >= 0 && best >= 0);
    kh_tensor_set(worse, 0, (double)c.token[0][worst]);
    r = topk(&c, worse);
    double gap = c.score[0][best] - c.score[0][worst];
    printf("# swapped scores %.4f -> %.4f\n", c.score[0][best], c.score[0][worst]);
    if (gap > 0.05 * fabs(c.score[0][best]) + 0.05) {
        assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
        assert_non_null(strstr(r.reason, "score mismatch"));
        assert_true(r.matched_ratio < 1.0);
    }

    /* shape and dtype come first, as in the default rule */
    int64_t s2[2] = {B, K - 1};
    kh_tensor *shp = randt(KH_DTYPE_I32, 2, s2);
    assert_int_equal(topk(&c, shp).status, KH_CHECK_INCORRECT_SHAPE);

    kh_tensor_free(sol);
    kh_tensor_free(dup);
    kh_tensor_free(far);
    kh_tensor_free(past);
    kh_tensor_free(worse);
    kh_tensor_free(shp);
    free_case(&c);
}

/* The sorted-score rule: shared -inf (padding) matches, a lone -inf fails. */
static void test_sorted_scores_padding(void **state)
{
    int64_t s[2] = {1, 4};
    kh_tensor *a, *b;
    kh_err err;
    assert_int_equal(kh_tensor_new(&a, KH_DTYPE_F32, 2, s, &err), KH_OK);
    assert_int_equal(kh_tensor_new(&b, KH_DTYPE_F32, 2, s, &err), KH_OK);
    double v = 1.0 + (double)rnd(1000) / 10.0;
    double vals[4] = {v + 2, v + 1, v, -INFINITY};
    for (int i = 0; i < 4; i++) {
        kh_tensor_set(a, (uint64_t)i, vals[i]);
        kh_tensor_set(b, (uint64_t)i, vals[i]);
    }
    kh_check_result r;
    assert_int_equal(kh_check_sorted_scores(a, b, NULL, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    kh_tensor_set(a, 3, v - 1);
    assert_int_equal(kh_check_sorted_scores(a, b, NULL, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_true(isinf(r.max_abs_error));
    assert_int_equal(r.fails, 1);
    kh_tensor_free(a);
    kh_tensor_free(b);
}

/* Sampling: softmax probs, the range check with counting, and the TVD
 * against an independent computation on random counts. */
static void test_sampling(void **state)
{
    (void)state;
    kh_err err;
    int64_t nb = 2 + (int64_t)rnd(4), nv = 3 + (int64_t)rnd(20);
    int64_t ps[2] = {nb, nv};
    kh_tensor *p;
    assert_int_equal(kh_tensor_new(&p, KH_DTYPE_F32, 2, ps, &err), KH_OK);
    assert_int_equal(kh_rng_fill_softmax(NULL, p, seed, stream++, &err), KH_OK);
    const float *pf = p->data;
    for (int64_t b = 0; b < nb; b++) {
        double sum = 0;
        for (int64_t v = 0; v < nv; v++) {
            assert_true(pf[b * nv + v] > 0 && pf[b * nv + v] < 1);
            sum += pf[b * nv + v];
        }
        assert_true(fabs(sum - 1) < 1e-5);
    }

    /* range and counting: N calls of random in-range ids */
    uint64_t *counts = calloc((size_t)(nb * nv), sizeof *counts);
    assert_non_null(counts);
    int64_t ss[1] = {nb};
    kh_tensor *smp;
    assert_int_equal(kh_tensor_new(&smp, KH_DTYPE_I64, 1, ss, &err), KH_OK);
    uint64_t N = 50 + rnd(100);
    kh_check_result r;
    for (uint64_t n = 0; n < N; n++) {
        for (int64_t b = 0; b < nb; b++)
            kh_tensor_set(smp, (uint64_t)b, (double)rnd((unsigned)nv));
        assert_int_equal(kh_check_sampling_count(smp, nb, nv, NULL, NULL, NULL, counts, &r, &err), KH_OK);
        assert_int_equal(r.status, KH_CHECK_PASSED);
    }
    for (int64_t b = 0; b < nb; b++) {
        uint64_t tot = 0;
        for (int64_t v = 0; v < nv; v++)
            tot += counts[b * nv + v];
        assert_int_equal(tot, N);
    }
    /* an id of nv, and one negative: failures that count nothing */
    int64_t row = (int64_t)rnd((unsigned)nb);
    kh_tensor_set(smp, (uint64_t)row, (double)nv);
    uint64_t before = counts[0];
    assert_int_equal(kh_check_sampling_count(smp, nb, nv, NULL, NULL, NULL, counts, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_true(r.final && isinf(r.max_abs_error));
    assert_int_equal(r.first_fail, row);
    char want[64];
    snprintf(want, sizeof want, "samples [%lld] out of vocabulary range [0, %lld)", (long long)nv,
             (long long)nv);
    assert_non_null(strstr(r.reason, want));
    assert_int_equal(counts[0], before);
    kh_tensor_set(smp, (uint64_t)row, -1);
    assert_int_equal(kh_check_sampling_count(smp, nb, nv, NULL, NULL, NULL, NULL, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);

    /* an id of probability 0 fails when probs are given */
    for (int64_t b = 0; b < nb; b++)
        kh_tensor_set(smp, (uint64_t)b, (double)rnd((unsigned)nv));
    assert_int_equal(kh_check_sampling_count(smp, nb, nv, NULL, NULL, p, NULL, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    int64_t zid = (int64_t)kh_tensor_get(smp, (uint64_t)row);
    float keep = pf[row * nv + zid];
    ((float *)p->data)[row * nv + zid] = 0.0f;
    assert_int_equal(kh_check_sampling_count(smp, nb, nv, NULL, NULL, p, NULL, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_non_null(strstr(r.reason, "has probability 0"));
    assert_int_equal(r.first_fail, row);
    ((float *)p->data)[row * nv + zid] = keep;

    /* TVD: the largest row's 0.5 * sum |f - p| decides */
    double *tvds = calloc((size_t)nb, sizeof *tvds), worst = 0;
    assert_non_null(tvds);
    assert_int_equal(kh_check_sampling_tvd(p, NULL, counts, N, 1.0, tvds, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    for (int64_t b = 0; b < nb; b++) {
        double t = 0;
        for (int64_t v = 0; v < nv; v++)
            t += fabs((double)counts[b * nv + v] / (double)N - pf[b * nv + v]);
        assert_true(fabs(tvds[b] - 0.5 * t) < 1e-6);
        worst = tvds[b] > worst ? tvds[b] : worst;
    }
    assert_int_equal(kh_check_sampling_tvd(p, NULL, counts, N, worst + 1e-9, NULL, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    assert_int_equal(kh_check_sampling_tvd(p, NULL, counts, N, worst - 1e-9, NULL, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
    assert_non_null(strstr(r.reason, "total variation distance"));
    assert_true(r.max_abs_error > 0 && r.max_abs_error <= 2 * worst + 1e-6);
    /* misuse: int8 samples, a 1-D probs */
    kh_tensor *bad;
    assert_int_equal(kh_tensor_new(&bad, KH_DTYPE_I8, 1, ss, &err), KH_OK);
    assert_int_equal(kh_check_sampling_count(bad, nb, nv, NULL, NULL, NULL, NULL, &r, &err), KH_EINVAL);
    assert_int_equal(kh_check_sampling_tvd(smp, NULL, counts, N, 0.2, NULL, &r, &err), KH_EINVAL);
    kh_tensor_free(bad);
    free(tvds);
    free(counts);
    kh_tensor_free(smp);
    kh_tensor_free(p);
}

/* FIB's thresholding: the method from the name, the valid mask of top_k
 * (ties valid), top_p (float32 cumsum <= p + 0.05, the top id always) and
 * both; samples of a repeated batch counted by row; the nucleus size; the
 * TVD against the masked, renormalised probs. */
static void test_sampling_mask(void **state)
{
    (void)state;
    kh_err err;
    assert_int_equal(kh_check_sampling_method("sampling_from_probs_v129280"), KH_SAMPLING_NONE);
    assert_int_equal(kh_check_sampling_method("top_k_sampling_from_probs_v1"), KH_SAMPLING_TOP_K);
    assert_int_equal(kh_check_sampling_method("Top_P_sampling"), KH_SAMPLING_TOP_P);
    assert_int_equal(kh_check_sampling_method("top_k_top_p_sampling_from_probs"),
                     KH_SAMPLING_TOP_K_TOP_P);
    assert_string_equal(kh_check_sampling_method_name(KH_SAMPLING_TOP_K_TOP_P), "top_k_top_p");

    /* one hand-made row: sorted 0.3 (0), 0.2 (2), 0.15 (5), 0.1 (1, 3 tied), 0.05 x3 */
    static const float row[8] = {0.3f, 0.1f, 0.2f, 0.1f, 0.05f, 0.15f, 0.05f, 0.05f};
    int64_t sh[2] = {1, 8};
    kh_tensor *p;
    assert_int_equal(kh_tensor_new(&p, KH_DTYPE_F32, 2, sh, &err), KH_OK);
    memcpy(p->data, row, sizeof row);
    unsigned char m[8];
    struct { kh_sampling_method m; int64_t k; double tp; const char *want; } cases[] = {
        {KH_SAMPLING_TOP_K, 3, 0, "10100100"},  {KH_SAMPLING_TOP_K, 4, 0, "11110100"},
        {KH_SAMPLING_TOP_K, 0, 0, "11111111"},  {KH_SAMPLING_TOP_K, 8, 0, "11111111"},
        {KH_SAMPLING_TOP_K, 1, 0, "10000000"},  {KH_SAMPLING_TOP_P, 0, 0.5, "10100000"},
        {KH_SAMPLING_TOP_P, 0, 0.1, "10000000"}, {KH_SAMPLING_TOP_P, 0, 1.0, "11111111"},
        {KH_SAMPLING_TOP_P, 0, 0.62, "10100100"}, {KH_SAMPLING_TOP_K_TOP_P, 3, 0.5, "10100000"},
        {KH_SAMPLING_TOP_K_TOP_P, 1, 0.9, "10000000"}, {KH_SAMPLING_NONE, 0, 0, "11111111"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        assert_int_equal(kh_check_sampling_mask(p, cases[c].m, &cases[c].k, &cases[c].tp, m, &err),
                         KH_OK);
        char got[9];
        for (int v = 0; v < 8; v++)
            got[v] = m[v] ? '1' : '0';
        got[8] = 0;
        if (strcmp(got, cases[c].want))
            fail_msg("case %zu (%s k=%lld p=%g): mask %s, want %s", c,
                     kh_check_sampling_method_name(cases[c].m), (long long)cases[c].k,
                     cases[c].tp, got, cases[c].want);
    }
    assert_int_equal(kh_check_sampling_mask(p, KH_SAMPLING_TOP_K, NULL, NULL, m, &err), KH_EINVAL);
    kh_tensor_free(p);

    /* random rows: a top-k mask holds at least k ids, each at least as
     * likely as every id outside it; a top-p mask is a prefix of the
     * descending order whose mass, less its last id, is <= p + eps */
    int64_t nb = 2 + (int64_t)rnd(4), nv = 5 + (int64_t)rnd(300);
    int64_t ps[2] = {nb, nv};
    assert_int_equal(kh_tensor_new(&p, KH_DTYPE_F32, 2, ps, &err), KH_OK);
    assert_int_equal(kh_rng_fill_softmax(NULL, p, seed, stream++, &err), KH_OK);
    const float *pf = p->data;
    int64_t *ks = calloc((size_t)nb, sizeof *ks);
    double *tps = calloc((size_t)nb, sizeof *tps);
    unsigned char *mk = malloc((size_t)(nb * nv));
    assert_true(ks && tps && mk);
    for (int64_t b = 0; b < nb; b++) {
        ks[b] = 1 + (int64_t)rnd((unsigned)nv - 1);
        tps[b] = 0.05 + 0.9 * rnd(1000) / 1000.0;
    }
    assert_int_equal(kh_check_sampling_mask(p, KH_SAMPLING_TOP_K, ks, NULL, mk, &err), KH_OK);
    for (int64_t b = 0; b < nb; b++) {
        int64_t n = 0;
        float lo_in = 2, hi_out = -1;
        for (int64_t v = 0; v < nv; v++) {
            float x = pf[b * nv + v];
            if (mk[b * nv + v]) {
                n++;
                lo_in = x < lo_in ? x : lo_in;
            } else {
                hi_out = x > hi_out ? x : hi_out;
            }
        }
        assert_true(n >= ks[b]);
        assert_true(lo_in > hi_out);
    }
    assert_int_equal(kh_check_sampling_mask(p, KH_SAMPLING_TOP_P, NULL, tps, mk, &err), KH_OK);
    for (int64_t b = 0; b < nb; b++) {
        double in_mass = 0, lo_in = 2, hi_out = -1;
        for (int64_t v = 0; v < nv; v++) {
            float x = pf[b * nv + v];
            if (mk[b * nv + v]) {
                in_mass += x;
                lo_in = x < lo_in ? x : lo_in;
            } else {
                hi_out = x > hi_out ? x : hi_out;
            }
        }
        assert_true(lo_in >= hi_out);
        assert_true(in_mass - lo_in <= tps[b] + 0.05 + 1e-5);
        if (hi_out >= 0) /* one more id would pass the limit */
            assert_true(in_mass + hi_out > tps[b] + 0.05 - 1e-5);
    }
    int64_t nuc = kh_check_sampling_nucleus(p, mk), want_nuc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int64_t n = 0;
        for (int64_t v = 0; v < nv; v++)
            n += mk[b * nv + v];
        want_nuc = n > want_nuc ? n : want_nuc;
    }
    assert_int_equal(nuc, want_nuc);
    assert_int_equal(kh_check_sampling_nucleus(p, NULL), nv);

    /* a repeated batch (3 copies): id i is row i % nb's; ids in the mask
     * pass and are counted there, one outside fails naming the method */
    int64_t ss[1] = {3 * nb};
    kh_tensor *smp;
    assert_int_equal(kh_tensor_new(&smp, KH_DTYPE_I32, 1, ss, &err), KH_OK);
    uint64_t *counts = calloc((size_t)(nb * nv), sizeof *counts);
    assert_non_null(counts);
    for (int64_t i = 0; i < 3 * nb; i++) {
        int64_t b = i % nb, v = 0;
        while (!mk[b * nv + v])
            v++;
        kh_tensor_set(smp, (uint64_t)i, (double)v);
    }
    kh_check_result r;
    assert_int_equal(kh_check_sampling_count(smp, nb, nv, mk, "top_p", p, counts, &r, &err),
                     KH_OK);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    for (int64_t b = 0; b < nb; b++) {
        uint64_t tot = 0;
        for (int64_t v = 0; v < nv; v++)
            tot += counts[b * nv + v];
        assert_int_equal(tot, 3);
    }
    int64_t brow = (int64_t)rnd((unsigned)nb), out_id = -1;
    for (int64_t v = 0; v < nv && out_id < 0; v++)
        if (!mk[brow * nv + v])
            out_id = v;
    if (out_id >= 0) {
        kh_tensor_set(smp, (uint64_t)(nb + brow), (double)out_id);
        assert_int_equal(kh_check_sampling_count(smp, nb, nv, mk, "top_p", p, NULL, &r, &err),
                         KH_OK);
        assert_int_equal(r.status, KH_CHECK_INCORRECT_NUMERICAL);
        assert_int_equal(r.first_fail, nb + brow);
        char want[128];
        snprintf(want, sizeof want, "sample %lld is outside the valid top_p mask for batch row "
                 "%lld", (long long)out_id, (long long)brow);
        if (!strstr(r.reason, want))
            fail_msg("reason '%s' lacks '%s'", r.reason, want);
    }
    /* not a multiple of the rows: a misuse */
    int64_t odd[1] = {nb + 1};
    kh_tensor *smp2;
    assert_int_equal(kh_tensor_new(&smp2, KH_DTYPE_I32, 1, odd, &err), KH_OK);
    assert_int_equal(kh_check_sampling_count(smp2, nb, nv, NULL, NULL, NULL, NULL, &r, &err),
                     KH_EINVAL);
    kh_tensor_free(smp2);

    /* TVD in the mask: counts exactly proportional to the masked,
     * renormalised probs (rounded) give a TVD near 0, counts of the
     * unmasked probs one near the mass outside the mask */
    uint64_t per_row = 1000000;
    for (int64_t b = 0; b < nb; b++) {
        double mass = 0;
        for (int64_t v = 0; v < nv; v++)
            mass += mk[b * nv + v] ? pf[b * nv + v] : 0;
        uint64_t given = 0;
        int64_t last = -1;
        for (int64_t v = 0; v < nv; v++) {
            counts[b * nv + v] =
                mk[b * nv + v] ? (uint64_t)((double)pf[b * nv + v] / mass * (double)per_row) : 0;
            given += counts[b * nv + v];
            if (mk[b * nv + v])
                last = v;
        }
        counts[b * nv + last] += per_row - given;
    }
    double *tvds = calloc((size_t)nb, sizeof *tvds);
    assert_non_null(tvds);
    assert_int_equal(kh_check_sampling_tvd(p, mk, counts, per_row, 0.01, tvds, &r, &err), KH_OK);
    assert_int_equal(r.status, KH_CHECK_PASSED);
    for (int64_t b = 0; b < nb; b++)
        assert_true(tvds[b] < 1e-3);
    assert_int_equal(kh_check_sampling_tvd(p, NULL, counts, per_row, 0.01, tvds, &r, &err),
                     KH_OK);
    for (int64_t b = 0; b < nb; b++) {
        double outside = 0;
        for (int64_t v = 0; v < nv; v++)
            outside += mk[b * nv + v] ? 0 : pf[b * nv + v];
        assert_true(fabs(tvds[b] - outside) < 2e-3);
    }
    free(tvds);
    free(counts);
    kh_tensor_free(smp);
    free(ks);
    free(tps);
    free(mk);
    kh_tensor_free(p);
}

/* The comparison in parts (check.h), as the gpu worker makes it: parts
 * scanned chunk by chunk and merged give the bits kh_check_compare gives,
 * whole result and reason, for every dtype, across chunk edges, in both
 * precisions, with and without non-finite values. */
static void test_parts_same_bits(void **state)
{
    const uint64_t sizes[] = {0, 1, 37, KH_CHECK_CHUNK + 13, 2 * KH_CHECK_CHUNK + 5};
    size_t cases = 0;
    for (int t = 0; t < KH_DTYPE_COUNT; t++)
        for (size_t si = 0; si < KH_ARRAY_LEN(sizes); si++)
            for (int v = 0; v < 4; v++) {
                kh_tensor *out, *ref;
                /* fixed seeds: a failure reruns as it was */
                kh_test_compare_pair(t, sizes[si], 0x9A27ull + (uint64_t)(t * 64 + si * 4 + v), v & 1,
                                     &out, &ref);
                kh_check_opts o;
                kh_check_opts_default(&o);
                o.precision = v & 2 ? KH_CHECK_DOUBLE : KH_CHECK_FIB_F32;
                o.required_ratio = 0.9;
                kh_check_result a, b;
                kh_err err;
                assert_int_equal(kh_check_compare(out, ref, &o, &a, &err), KH_OK);
                uint64_t np = kh_check_nchunks(sizes[si]);
                kh_check_part *parts = calloc(np ? np : 1, sizeof *parts);
                assert_non_null(parts);
                assert_int_equal(kh_check_parts(out, ref, &o, parts, &err), KH_OK);
                assert_int_equal(kh_check_from_parts(parts, np, sizes[si], &o, &b, &err), KH_OK);
                if (memcmp(&a, &b, sizeof a))
                    fail_msg("dtype %d, %llu elements, case %d: '%s' vs '%s'", t,
                             (unsigned long long)sizes[si], v, a.reason, b.reason);
                /* a wrong count of parts is an error, not a verdict */
                assert_int_equal(kh_check_from_parts(parts, np + 1, sizes[si], &o, &b, &err),
                                 KH_EINVAL);
                free(parts);
                kh_tensor_free(out);
                kh_tensor_free(ref);
                cases++;
            }
    assert_int_equal(cases, KH_DTYPE_COUNT * 5 * 4);
}

/* The device's side of it (engine/gpu/gpu_check.c, run by
 * test_gpu_check.c where there is a GPU) compiles here. */
static void test_device_source_compiles(void **state)
{
    size_t len = 0;
    unsigned char *cubin = kh_test_nvrtc_cubin(kh_gpu_cmp_source(), "sm_90", &len);
    assert_non_null(cubin);
    assert_true(len > 1000);
    free(cubin);
}

/* kh_gpu_cmp_fold: the device's four group parts per chunk into the
 * chunk's part as check.c makes it: the first failure and the worst
 * element (the lower index on a tie) with their values, counts added, and
 * the groups' sums folded in halves (2, 3 into 0, 1, then 1 into 0), an
 * order that rounds differently from adding them in turn. */
static void test_device_groups_fold(void **state)
{
    (void)state;
    kh_check_part g[2 * KH_GPU_CMP_GROUPS], p[2];
    memset(g, 0, sizeof g);
    for (int k = 0; k < 2 * KH_GPU_CMP_GROUPS; k++)
        g[k].first_fail = g[k].first_inf = g[k].first_nan = g[k].worst = -1;
    g[0].fails = 1, g[0].first_fail = 8, g[0].fail_out = 1.5, g[0].fail_ref = 2.5;
    g[0].worst = 4, g[0].max_abs = 3.0, g[0].worst_out = 7, g[0].worst_ref = 4;
    g[0].sdiff = 1e16, g[0].sref = 1e16;
    g[1].fails = 2, g[1].first_fail = 5, g[1].fail_out = 9, g[1].fail_ref = 10;
    g[1].worst = 1, g[1].max_abs = 3.0, g[1].worst_out = 5, g[1].worst_ref = 2;
    g[1].max_rel = 2, g[1].max_ulp = 7, g[1].sdiff = 1, g[1].sref = 1;
    g[2].sdiff = 1, g[2].sref = 1, g[2].ref_nonfinite = 1;
    g[3].abs_nan = 1, g[3].out_nan = 1, g[3].first_nan = 3, g[3].sdiff = 1, g[3].sref = 1;
    g[3].worst = 7, g[3].max_abs = 2.0;
    /* chunk 1: one group holds all */
    g[6].fails = 4, g[6].first_fail = 65538, g[6].worst = 65538, g[6].max_abs = 0.5;
    g[6].sdiff = 0.25;
    kh_gpu_cmp_fold(g, 2, p);
    assert_int_equal(p[0].fails, 3);
    assert_int_equal(p[0].first_fail, 5);
    assert_true(p[0].fail_out == 9 && p[0].fail_ref == 10);
    assert_int_equal(p[0].worst, 1);
    assert_true(p[0].max_abs == 3.0 && p[0].worst_out == 5 && p[0].worst_ref == 2);
    assert_true(p[0].max_rel == 2);
    assert_int_equal(p[0].max_ulp, 7);
    assert_int_equal(p[0].ref_nonfinite, 1);
    assert_int_equal(p[0].abs_nan, 1);
    assert_int_equal(p[0].out_nan, 1);
    assert_int_equal(p[0].first_nan, 3);
    assert_int_equal(p[0].first_inf, -1);
    /* (1e16 + 1) + (1 + 1): 1e16 + 2; in turn the ones are lost (1e16) */
    assert_true(p[0].sdiff == 1e16 + 2 && p[0].sref == 1e16 + 2);
    assert_true(((1e16 + 1) + 1) + 1 != p[0].sdiff);
    assert_int_equal(p[1].fails, 4);
    assert_int_equal(p[1].first_fail, 65538);
    assert_int_equal(p[1].worst, 65538);
    assert_true(p[1].sdiff == 0.25 && p[1].sref == 0);
}

int main(void)
{
    seed = ((uint64_t)time(NULL) << 8) ^ (uint64_t)clock();
    printf("# random seed %llu\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_order),          cmocka_unit_test(test_and_rule_boundary),
        cmocka_unit_test(test_fib_float32_thresholds), cmocka_unit_test(test_matched_ratio),
        cmocka_unit_test(test_error_figures),         cmocka_unit_test(test_fib_quirks),
        cmocka_unit_test(test_merge_and_evaluators),  cmocka_unit_test(test_dsa_topk),
        cmocka_unit_test(test_sorted_scores_padding), cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_sampling), cmocka_unit_test(test_sampling_mask),
        cmocka_unit_test(test_parts_same_bits), cmocka_unit_test(test_device_source_compiles),
        cmocka_unit_test(test_device_groups_fold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
