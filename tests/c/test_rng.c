/* test_rng.c: the input generator.  Philox4x32-10 against the Random123
 * known-answer vectors; determinism and independence of seeds and streams;
 * the transcendental core against libm; FlashInfer-Bench's distributions
 * (moments of randn, clamping of fp8/fp4, integer ranges, bool balance); and
 * the device source compiling with NVRTC for sm_90.  The bit-for-bit match
 * with the GPU is test_gpu_rng.c. */
#include "kh_test.h"

#include "task/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t base_seed;

static void test_philox_known_answers(void **state)
{
    /* Random123 kat_vectors, philox4x32 10 */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        kh_rng_philox(kat[i], kat[i] + 4, out);
        for (int k = 0; k < 4; k++)
            assert_int_equal(out[k], kat[i][6 + k]);
    }
}

static kh_tensor *gen(kh_dtype t, int64_t n, uint64_t seed, uint32_t stream)
{
    kh_tensor *x;
    kh_err err;
    assert_int_equal(kh_tensor_new(&x, t, 1, &n, &err), KH_OK);
    assert_int_equal(kh_rng_fill(NULL, x, seed, stream, &err), KH_OK);
    return x;
}

static void test_determinism_and_streams(void **state)
{
    for (int t = 0; t < KH_DTYPE_COUNT; t++) {
        kh_tensor *a = gen((kh_dtype)t, 4097, base_seed, 3);
        kh_tensor *b = gen((kh_dtype)t, 4097, base_seed, 3);
        kh_tensor *c = gen((kh_dtype)t, 4097, base_seed + 1, 3);
        kh_tensor *d = gen((kh_dtype)t, 4097, base_seed, 4);
        assert_memory_equal(a->data, b->data, a->nbytes);
        /* another seed or stream: most elements differ (bool and fp4 have
         * few values, so only "not all equal" is asserted) */
        assert_memory_not_equal(a->data, c->data, a->nbytes);
        assert_memory_not_equal(a->data, d->data, a->nbytes);
        /* counter-based: element i alone, in any order, gives the same code */
        for (uint64_t i = 0; i < a->numel; i += 97)
            assert_int_equal(kh_dtype_get_code(a->dtype, a->data, i),
                             kh_rng_code_at(a->dtype, base_seed, 3, i));
        kh_tensor_free(a);
        kh_tensor_free(b);
        kh_tensor_free(c);
        kh_tensor_free(d);
    }
}

/* Large fills are split over threads: every element still equals its
 * counter's draw, including float4 nibbles at the split points. */
static void test_threaded_fill(void **state)
{
    kh_dtype types[2] = {KH_DTYPE_F4E2M1, KH_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        kh_tensor *x = gen(types[k], (1 << 20) + 3, base_seed, 11);
        for (uint64_t i = 0; i < x->numel; i++)
            if (kh_dtype_get_code(x->dtype, x->data, i) !=
                kh_rng_code_at(x->dtype, base_seed, 11, i))
                fail_msg("%s element %llu differs from its counter's draw",
                         kh_dtype_name(x->dtype), (unsigned long long)i);
        kh_tensor_free(x);
    }
}

/* The core's own float32 log and cos against libm in double: Box-Muller
 * on the same 24-bit uniforms (element i: the Philox block i / 2, its first
 * or second pair of words) agrees within a few float32 ulps. */
static void test_normal_matches_libm(void **state)
{
    double worst = 0;
    for (uint64_t i = 0; i < 400000; i++) {
        uint32_t ctr[4] = {(uint32_t)(i >> 1), (uint32_t)(i >> 33), 9, 0}, out[4];
        uint32_t key[2] = {(uint32_t)base_seed, (uint32_t)(base_seed >> 32)};
        kh_rng_philox(ctr, key, out);
        uint32_t a = out[(i & 1) * 2], b = out[(i & 1) * 2 + 1];
        double u1 = (double)((a >> 8) + 1) * 0x1p-24, u2 = (double)(b >> 8) * 0x1p-24;
        double want = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        double got = kh_rng_normal_at(base_seed, 9, i);
        double err = fabs(got - want) / fmax(fabs(want), 1e-3);
        if (err > worst)
            worst = err;
    }
    printf("# worst relative difference to libm Box-Muller: %.3g\n", worst);
    assert_true(worst < 2e-6);
}

static void moments(const kh_tensor *x, double *mean, double *sd, double *k4, double *in1)
{
    double s = 0, s2 = 0, s4 = 0, c1 = 0;
    for (uint64_t i = 0; i < x->numel; i++) {
        double v = kh_tensor_get(x, i);
        s += v;
        c1 += fabs(v) < 1.0;
    }
    double m = s / (double)x->numel;
    for (uint64_t i = 0; i < x->numel; i++) {
        double d = kh_tensor_get(x, i) - m;
        s2 += d * d;
        s4 += d * d * d * d;
    }
    double var = s2 / (double)x->numel;
    *mean = m;
    *sd = sqrt(var);
    *k4 = s4 / (double)x->numel / (var * var);
    *in1 = c1 / (double)x->numel;
}

static void test_randn_distribution(void **state)
{
    const int64_t n = 400000;
    kh_dtype floats[] = {KH_DTYPE_F32, KH_DTYPE_F16, KH_DTYPE_BF16};
    for (size_t k = 0; k < KH_ARRAY_LEN(floats); k++) {
        kh_tensor *x = gen(floats[k], n, base_seed + k, 0);
        double mean, sd, k4, in1;
        moments(x, &mean, &sd, &k4, &in1);
        printf("# %s: mean %.4f sd %.4f kurtosis %.3f P(|x|<1) %.4f\n",
               kh_dtype_name(floats[k]), mean, sd, k4, in1);
        /* standard errors: mean 0.0016, sd 0.0011, kurtosis ~0.008, P 0.0007 */
        assert_true(fabs(mean) < 0.01);
        assert_true(fabs(sd - 1) < 0.008);
        assert_true(fabs(k4 - 3) < 0.06);
        /* bf16 rounds values near 1 by up to 2^-9: P(|x|<1) shifts a little */
        assert_true(fabs(in1 - 0.6827) < 0.006);
        kh_tensor_free(x);
    }
}

static void test_low_bit_clamped(void **state)
{
    kh_dtype lows[] = {KH_DTYPE_F8E4M3, KH_DTYPE_F8E5M2, KH_DTYPE_F4E2M1};
    for (size_t k = 0; k < KH_ARRAY_LEN(lows); k++) {
        kh_tensor *x = gen(lows[k], 100001, base_seed ^ (k << 40), 1);
        double lo = 0, hi = 0, s = 0;
        long at2 = 0;
        for (uint64_t i = 0; i < x->numel; i++) {
            double v = kh_tensor_get(x, i);
            assert_false(isnan(v));
            lo = fmin(lo, v);
            hi = fmax(hi, v);
            s += v;
            at2 += fabs(v) == 2.0;
        }
        /* randn clamped to [-2, 2]: both ends reached, never passed; about
         * 4.6% of |z| > 2 plus what rounds up to 2 */
        assert_true(lo == -2.0 && hi == 2.0);
        double frac = (double)at2 / (double)x->numel;
        printf("# %s: fraction at +-2: %.4f, mean %.4f\n", kh_dtype_name(lows[k]), frac,
               s / (double)x->numel);
        assert_true(frac > 0.04 && frac < 0.16);
        assert_true(fabs(s / (double)x->numel) < 0.02);
        kh_tensor_free(x);
    }
}

static void test_integer_ranges(void **state)
{
    static const struct {
        kh_dtype t;
        int64_t lo, hi; /* [lo, hi) */
    } want[] = {{KH_DTYPE_I8, -128, 128},    {KH_DTYPE_I16, -1024, 1024},
                {KH_DTYPE_I32, -1024, 1024}, {KH_DTYPE_I64, -1024, 1024},
                {KH_DTYPE_BOOL, 0, 2}};
    for (size_t k = 0; k < KH_ARRAY_LEN(want); k++) {
        const int64_t n = 200000;
        kh_tensor *x = gen(want[k].t, n, base_seed * 7 + k, 2);
        int64_t span = want[k].hi - want[k].lo;
        long *seen = calloc((size_t)span, sizeof *seen);
        assert_non_null(seen);
        double s = 0;
        for (uint64_t i = 0; i < x->numel; i++) {
            double v = kh_tensor_get(x, i);
            assert_true(v >= (double)want[k].lo && v < (double)want[k].hi);
            assert_true(v == floor(v));
            seen[(int64_t)v - want[k].lo]++;
            s += v;
        }
        /* every value occurs, none far from n / span (uniform) */
        double expect = (double)n / (double)span;
        for (int64_t v = 0; v < span; v++)
            assert_true(fabs((double)seen[v] - expect) < 6 * sqrt(expect) + 1);
        double mean = s / (double)n, mid = (double)(want[k].lo + want[k].hi - 1) / 2;
        assert_true(fabs(mean - mid) < 6 * (double)span / sqrt(12.0 * (double)n));
        free(seen);
        kh_tensor_free(x);
    }
}

static void test_fp4_packing_and_scalar(void **state)
{
    kh_tensor *x = gen(KH_DTYPE_F4E2M1, 9, base_seed, 5);
    assert_int_equal(x->nbytes, 5);
    const uint8_t *p = x->data;
    for (uint64_t i = 0; i < 9; i++)
        assert_int_equal((p[i / 2] >> (4 * (i & 1))) & 0xF,
                         kh_rng_code_at(KH_DTYPE_F4E2M1, base_seed, 5, i));
    assert_int_equal(p[4] >> 4, 0);
    kh_tensor_free(x);

    /* a random scalar is a 0-D tensor holding element 0 of its stream */
    kh_tensor *s;
    kh_err err;
    assert_int_equal(kh_tensor_new(&s, KH_DTYPE_F32, 0, NULL, &err), KH_OK);
    assert_int_equal(s->numel, 1);
    assert_int_equal(kh_rng_fill(NULL, s, base_seed, 6, &err), KH_OK);
    assert_int_equal(kh_dtype_get_code(KH_DTYPE_F32, s->data, 0),
                     kh_rng_code_at(KH_DTYPE_F32, base_seed, 6, 0));
    kh_tensor_free(s);

    /* a workload scalar: a 0-D tensor of the definition's dtype */
    assert_int_equal(kh_tensor_new_scalar(&s, KH_DTYPE_I32, 192.0, &err), KH_OK);
    assert_int_equal(s->ndim, 0);
    assert_true(kh_tensor_get(s, 0) == 192.0);
    kh_tensor_free(s);
    assert_int_equal(kh_tensor_new_scalar(&s, KH_DTYPE_BF16, 0.1352337788608801, &err), KH_OK);
    assert_int_equal(kh_dtype_get_code(KH_DTYPE_BF16, s->data, 0),
                     kh_dtype_encode(KH_DTYPE_BF16, 0.1352337788608801));
    kh_tensor_free(s);
}

/* The DSA indexer k cache: each token's fp8 bytes times its scale give back
 * its bf16 randn values to fp8 precision, the largest maps to +-448, and the
 * scale is amax / 448 in float32. */
static void test_dsa_kcache(void **state)
{
    enum { P = 5, PS = 4, D = 16 };
    int64_t shape[4] = {P, PS, 1, D + 4};
    kh_tensor *k;
    kh_err err;
    assert_int_equal(kh_tensor_new(&k, KH_DTYPE_I8, 4, shape, &err), KH_OK);
    assert_int_equal(kh_rng_fill_dsa_kcache(NULL, k, base_seed, 3, &err), KH_OK);
    const uint8_t *b = k->data;
    for (int t = 0; t < P * PS; t++) {
        const uint8_t *pg = b + (t / PS) * PS * (D + 4);
        float scale;
        memcpy(&scale, pg + PS * D + (t % PS) * 4, 4);
        double amax = 0;
        for (int d = 0; d < D; d++)
            amax = fmax(amax, fabs(kh_dtype_decode(
                                  KH_DTYPE_BF16, kh_rng_code_at(KH_DTYPE_BF16, base_seed, 3,
                                                                (uint64_t)(t * D + d)))));
        assert_true(scale == (float)(amax / 448.0));
        int at448 = 0;
        for (int d = 0; d < D; d++) {
            double want = kh_dtype_decode(
                KH_DTYPE_BF16, kh_rng_code_at(KH_DTYPE_BF16, base_seed, 3, (uint64_t)(t * D + d)));
            double q = kh_dtype_decode(KH_DTYPE_F8E4M3, pg[(t % PS) * D + d]);
            at448 += fabs(q) == 448.0;
            /* e4m3 keeps 4 significant bits: relative error <= 2^-4, plus
             * subnormal steps of 2^-9 * scale */
            assert_true(fabs(q * scale - want) <= fabs(want) / 16 + 0.002 * scale);
        }
        assert_true(at448 >= 1);
    }
    /* the listed pages alone: the same bytes as the whole cache's there,
     * the other pages untouched; a page out of range is refused */
    kh_tensor *part;
    assert_int_equal(kh_tensor_new(&part, KH_DTYPE_I8, 4, shape, &err), KH_OK);
    int64_t pages[2] = {3, 1};
    assert_int_equal(kh_rng_fill_dsa_kcache_pages(NULL, part, base_seed, 3, pages, 2, &err),
                     KH_OK);
    size_t page_bytes = (size_t)PS * (D + 4);
    for (int pg = 0; pg < P; pg++) {
        const uint8_t *x = (const uint8_t *)part->data + pg * page_bytes;
        if (pg == 3 || pg == 1) {
            assert_memory_equal(x, b + pg * page_bytes, page_bytes);
        } else {
            for (size_t i = 0; i < page_bytes; i++)
                assert_int_equal(x[i], 0);
        }
    }
    int64_t twice[3] = {0, 2, 0};
    assert_int_equal(kh_rng_fill_dsa_kcache_pages(NULL, part, base_seed, 3, twice, 3, &err),
                     KH_EINVAL);
    assert_non_null(strstr(err.msg, "page 0 is listed twice"));
    int64_t outside[1] = {P};
    assert_int_equal(kh_rng_fill_dsa_kcache_pages(NULL, part, base_seed, 3, outside, 1, &err),
                     KH_EINVAL);
    assert_non_null(strstr(err.msg, "outside [0, 5)"));
    kh_tensor_free(part);
    kh_tensor_free(k);
    int64_t bad[3] = {2, 4, 20};
    assert_int_equal(kh_tensor_new(&k, KH_DTYPE_I8, 3, bad, &err), KH_OK);
    assert_int_equal(kh_rng_fill_dsa_kcache(NULL, k, base_seed, 3, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "int8 [num_pages, page_size, 1, head_dim + 4]"));
    kh_tensor_free(k);
    /* derived seeds: deterministic, distinct across trials and workloads */
    assert_true(kh_rng_derive_seed(base_seed, 1, 2) == kh_rng_derive_seed(base_seed, 1, 2));
    assert_true(kh_rng_derive_seed(base_seed, 1, 2) != kh_rng_derive_seed(base_seed, 1, 3));
    assert_true(kh_rng_derive_seed(base_seed, 1, 2) != kh_rng_derive_seed(base_seed, 2, 2));
    assert_true(kh_rng_derive_seed(base_seed, 1, 2) != kh_rng_derive_seed(base_seed + 1, 1, 2));
}

/* A cache large enough to be split across threads: the whole fill, the
 * pages listed in reverse (another split) and the single-token scale rule
 * agree. */
static void test_dsa_kcache_threaded(void **state)
{
    enum { P = 203, PS = 8, D = 32 };
    int64_t shape[4] = {P, PS, 1, D + 4};
    kh_tensor *whole, *listed;
    kh_err err;
    assert_int_equal(kh_tensor_new(&whole, KH_DTYPE_I8, 4, shape, &err), KH_OK);
    assert_int_equal(kh_tensor_new(&listed, KH_DTYPE_I8, 4, shape, &err), KH_OK);
    assert_int_equal(kh_rng_fill_dsa_kcache(NULL, whole, base_seed, 5, &err), KH_OK);
    int64_t pages[P];
    for (int i = 0; i < P; i++)
        pages[i] = P - 1 - i;
    assert_int_equal(kh_rng_fill_dsa_kcache_pages(NULL, listed, base_seed, 5, pages, P, &err),
                     KH_OK);
    assert_memory_equal(whole->data, listed->data, whole->nbytes);
    const uint8_t *b = whole->data;
    for (int t = 0; t < P * PS; t += 97) {
        double amax = 0;
        for (int d = 0; d < D; d++)
            amax = fmax(amax, fabs(kh_dtype_decode(
                                  KH_DTYPE_BF16, kh_rng_code_at(KH_DTYPE_BF16, base_seed, 5,
                                                                (uint64_t)(t * D + d)))));
        float scale;
        memcpy(&scale, b + (t / PS) * PS * (D + 4) + PS * D + (t % PS) * 4, 4);
        assert_true(scale == (float)(amax / 448.0));
    }
    kh_tensor_free(whole);
    kh_tensor_free(listed);
}

/* kh_parallel_for: every item exactly once, shares aligned, a stop reported */
typedef struct par_rec {
    unsigned char *hits;
    uint64_t align, stop_at;
    int misaligned;
} par_rec;

static int par_mark(void *arg, uint64_t lo, uint64_t hi)
{
    par_rec *r = arg;
    if (lo % r->align)
        __atomic_store_n(&r->misaligned, 1, __ATOMIC_RELAXED);
    for (uint64_t i = lo; i < hi; i++)
        __atomic_add_fetch(&r->hits[i], 1, __ATOMIC_RELAXED);
    return lo <= r->stop_at && r->stop_at < hi;
}

static void test_parallel_for(void **state)
{
    const uint64_t ns[] = {0, 1, 7, 1000, 100003};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (uint64_t align = 1; align <= 4; align *= 2) {
            par_rec r = {calloc(ns[k] + 1, 1), align, UINT64_MAX, 0};
            assert_int_equal(kh_parallel_for(ns[k], 3, align, par_mark, &r), 0);
            for (uint64_t i = 0; i < ns[k]; i++)
                assert_int_equal(r.hits[i], 1);
            assert_int_equal(r.misaligned, 0);
            if (ns[k]) {
                memset(r.hits, 0, ns[k]);
                r.stop_at = ns[k] - 1;
                assert_int_not_equal(kh_parallel_for(ns[k], 3, align, par_mark, &r), 0);
            }
            free(r.hits);
        }
}

static void test_device_source_compiles(void **state)
{
    kh_err err;
    kh_engine *e = kh_engine_new(NULL, &err);
    assert_non_null(e);
    if (!kh_engine_nvrtc(e, &err)) {
        kh_engine_free(e);
        printf("# NVRTC not available: %s\n", err.msg);
        skip();
    }
    void *cubin;
    size_t n;
    double t0 = kh_now();
    kh_status st = kh_rng_compile(e, "sm_90", &cubin, &n, &err);
    if (st) {
        kh_engine_free(e);
        fail_msg("%s", err.msg);
    }
    printf("# generator cubin for sm_90: %zu bytes in %.2f s\n", n, kh_now() - t0);
    assert_true(n > 1000);
    assert_memory_equal(cubin, "\x7f" "ELF", 4);
    free(cubin);
    /* the double arithmetic must reach the GPU unfused: an FMA would round
     * once where the host rounds twice.  The PTX has plain mul/add only. */
    char *ptx;
    st = kh_rng_compile_ptx(e, "compute_90", &ptx, &err);
    if (st) {
        kh_engine_free(e);
        fail_msg("%s", err.msg);
    }
    assert_non_null(strstr(ptx, ".entry kh_rng_fill"));
    assert_non_null(strstr(ptx, ".entry kh_rng_dsa_kcache"));
    assert_non_null(strstr(ptx, "mul.rn.f64"));
    assert_null(strstr(ptx, "fma.rn.f"));
    assert_null(strstr(ptx, "mad.rn.f"));
    /* the device's own roundings from float32 (kh_rng_code_dev) */
    assert_non_null(strstr(ptx, "cvt.rn.bf16.f32"));
    assert_non_null(strstr(ptx, "cvt.rn.satfinite.e4m3x2.f32"));
    free(ptx);
    /* a bad architecture is a compile error with NVRTC's message */
    assert_int_equal(kh_rng_compile(e, "sm_1", &cubin, &n, &err), KH_ECOMPILE);
    printf("# bad arch: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "sm_1"));
    kh_engine_free(e);
}


/* The element ranges a verified timed call returns: the ends of the output
 * always, the rest spread by the seed, 8-aligned, sorted, disjoint, inside;
 * the same (seed, call, tensor) draws the same ranges, another call others. */
static void test_verify_ranges(void **state)
{
    (void)state;
    uint64_t a[64][2], b[64][2];
    const uint64_t numel = 59430528 + 5; /* rmsnorm_h4096 batch 14509, odd tail */
    size_t n = kh_rng_ranges(42, 7, 0, numel, 64, 512, a);
    assert_true(n >= 2 && n <= 64);
    assert_int_equal(a[0][0], 0);
    assert_int_equal(a[n - 1][0] + a[n - 1][1], numel);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(a[i][0] % 8, 0);
        assert_true(a[i][1] >= 512);
        if (i)
            assert_true(a[i][0] > a[i - 1][0] + a[i - 1][1]); /* merged when touching */
        total += a[i][1];
    }
    assert_true(total <= 64 * 512 + 8 && total >= 512 * 2);
    /* deterministic in the seed, different per call */
    assert_int_equal(kh_rng_ranges(42, 7, 0, numel, 64, 512, b), n);
    assert_memory_equal(a, b, n * sizeof a[0]);
    size_t m = kh_rng_ranges(42, 8, 0, numel, 64, 512, b);
    assert_true(m != n || memcmp(a, b, n * sizeof a[0]) != 0);
    /* a small tensor is returned whole */
    assert_int_equal(kh_rng_ranges(42, 7, 0, 1000, 64, 512, a), 1);
    assert_int_equal(a[0][0], 0);
    assert_int_equal(a[0][1], 1000);
}

int main(void)
{
    base_seed = ((uint64_t)time(NULL) << 20) ^ (uint64_t)clock();
    printf("# random seed %llu\n", (unsigned long long)base_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_determinism_and_streams),
        cmocka_unit_test(test_threaded_fill),
        cmocka_unit_test(test_normal_matches_libm),
        cmocka_unit_test(test_randn_distribution),
        cmocka_unit_test(test_low_bit_clamped),
        cmocka_unit_test(test_integer_ranges),
        cmocka_unit_test(test_fp4_packing_and_scalar),
        cmocka_unit_test(test_dsa_kcache),
        cmocka_unit_test(test_dsa_kcache_threaded),
        cmocka_unit_test(test_parallel_for),
        cmocka_unit_test(test_verify_ranges),
        cmocka_unit_test(test_device_source_compiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
