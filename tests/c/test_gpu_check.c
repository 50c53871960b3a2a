/* test_gpu_check.c: the default comparison made on the device
 * (engine/gpu/gpu_check.h) gives the bits the host's gives
 * (kh_check_compare on copies of the same tensors): the whole result, its
 * figures, the sums of norm_error and the reason, for every dtype, across
 * chunk edges, in FIB's float32 arithmetic and in double, with and without
 * NaN, inf and subnormals.  Then one large bfloat16 output (rmsnorm_h4096's
 * largest workload) both ways, with the times printed.  Exits 77 (skipped)
 * without a GPU. */
#include "kh_test.h"

#include "core/engine.h"
#include "core/kh.h"
#include "gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kh_cuda_api cu;
static CUdevice dev;
static CUcontext ctx;
static kh_engine *eng;
static kh_gpu_cmp *gc;
static uint64_t seed;

#define CU_OK(call)                                                                       \
    do {                                                                                  \
        CUresult r_ = (call);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                         \
            char m_[512];                                                                 \
            kh_cuda_describe(&cu, r_, m_, sizeof m_);                                     \
            fail_msg("%s: %s", #call, m_);                                                \
        }                                                                                 \
    } while (0)

static int setup(void **state)
{
    kh_err err;
    int major = 0, minor = 0;
    if (kh_cuda_load(&cu, &err) != KH_OK || cu.cuInit(0) != CUDA_SUCCESS ||
        cu.cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cu.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
        cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ||
        cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) {
        fprintf(stderr, "setup: no usable CUDA context\n");
        return -1;
    }
    char arch[32];
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    if (!(eng = kh_engine_new(NULL, &err)) || !(gc = kh_gpu_cmp_new(eng, &cu, arch, NULL, &err))) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    printf("# device comparison compiled for %s\n", arch);
    return 0;
}

static int teardown(void **state)
{
    kh_gpu_cmp_free(gc);
    if (ctx)
        cu.cuDevicePrimaryCtxRelease(dev);
    kh_engine_free(eng);
    return 0;
}

static CUdeviceptr upload(const kh_tensor *t)
{
    CUdeviceptr d = 0;
    CU_OK(cu.cuMemAlloc(&d, t->nbytes ? t->nbytes : 1));
    if (t->nbytes)
        CU_OK(cu.cuMemcpyHtoD(d, t->data, t->nbytes));
    return d;
}

/* Both ways on one pair; fails naming the first field that differs. */
static void same_both_ways(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o,
                           const char *what)
{
    kh_check_result a, b;
    kh_err err;
    assert_int_equal(kh_check_compare(out, ref, o, &a, &err), KH_OK);
    CUdeviceptr dout = upload(out), dref = upload(ref);
    if (kh_gpu_cmp_run(gc, out->dtype, dout, dref, out->numel, o, &b, &err) != KH_OK)
        fail_msg("%s: %s", what, err.msg);
    CU_OK(cu.cuMemFree(dout));
    CU_OK(cu.cuMemFree(dref));
    if (memcmp(&a, &b, sizeof a) == 0)
        return;
    fail_msg("%s: host and device differ:\n"
             "  status %d/%d fails %llu/%llu max_abs %.17g/%.17g max_rel %.17g/%.17g\n"
             "  norm %.17g/%.17g ulp %llu/%llu worst %lld/%lld first_fail %lld/%lld\n"
             "  nan %llu/%llu inf %llu/%llu ref_nonfinite %llu/%llu\n  '%s'\n  '%s'",
             what, a.status, b.status, (unsigned long long)a.fails, (unsigned long long)b.fails,
             a.max_abs_error, b.max_abs_error, a.max_rel_error, b.max_rel_error, a.norm_error,
             b.norm_error, (unsigned long long)a.max_ulp_error,
             (unsigned long long)b.max_ulp_error, (long long)a.worst_index,
             (long long)b.worst_index, (long long)a.first_fail, (long long)b.first_fail,
             (unsigned long long)a.out_nan, (unsigned long long)b.out_nan,
             (unsigned long long)a.out_inf, (unsigned long long)b.out_inf,
             (unsigned long long)a.ref_nonfinite, (unsigned long long)b.ref_nonfinite, a.reason,
             b.reason);
}

static void test_same_bits(void **state)
{
    /* around a warp, a block's 256 threads, its 1024 lanes and a chunk */
    const uint64_t sizes[] = {0,    1,    31,   33,   255,  257, 1000, 1023,
                              1025, 5 * KH_CHECK_LANES + 300, KH_CHECK_CHUNK - 1,
                              KH_CHECK_CHUNK + 13, 3 * KH_CHECK_CHUNK + 77};
    size_t cases = 0;
    for (int t = 0; t < KH_DTYPE_COUNT; t++) {
        for (size_t si = 0; si < KH_ARRAY_LEN(sizes); si++) {
            for (int v = 0; v < 4; v++) {
                kh_tensor *out, *ref;
                kh_test_compare_pair(t, sizes[si], seed + (uint64_t)(t * 64 + si * 4 + v), v & 1,
                                     &out, &ref);
                kh_check_opts o;
                kh_check_opts_default(&o);
                o.precision = v & 2 ? KH_CHECK_DOUBLE : KH_CHECK_FIB_F32;
                o.required_ratio = 0.9;
                char what[128];
                snprintf(what, sizeof what, "%s, %llu elements, %s%s", kh_dtype_name(t),
                         (unsigned long long)sizes[si], v & 1 ? "finite" : "any bits",
                         v & 2 ? ", double" : "");
                same_both_ways(out, ref, &o, what);
                kh_tensor_free(out);
                kh_tensor_free(ref);
                cases++;
            }
        }
        printf("# %s: host and device agree\n", kh_dtype_name((kh_dtype)t));
    }
    assert_int_equal(cases, KH_DTYPE_COUNT * KH_ARRAY_LEN(sizes) * 4);
}

/* A passing and a failing output of rmsnorm_h4096's largest workload
 * (14509 x 4096 bfloat16), and a failing int8 one of more chunks than the
 * kernel's grid (its blocks take a second chunk each): the same verdicts,
 * and the two times. */
static void test_large(void **state)
{
    const struct {
        kh_dtype t;
        uint64_t n;
        int pass;
    } cases[] = {{KH_DTYPE_BF16, 14509ull * 4096, 1},
                 {KH_DTYPE_BF16, 14509ull * 4096, 0},
                 {KH_DTYPE_I8, 4100ull * KH_CHECK_CHUNK + 777, 0}};
    for (size_t v = 0; v < KH_ARRAY_LEN(cases); v++) {
        kh_dtype t = cases[v].t;
        uint64_t n = cases[v].n;
        kh_tensor *out, *ref;
        kh_test_compare_pair(t, n, seed ^ 0x1A26E, 1, &out, &ref);
        if (cases[v].pass) /* the output within tolerance: a copy */
            memcpy(out->data, ref->data, out->nbytes);
        kh_check_opts o;
        kh_check_opts_default(&o);
        kh_check_result a, b;
        kh_err err;
        double t0 = kh_now();
        assert_int_equal(kh_check_compare(out, ref, &o, &a, &err), KH_OK);
        double t1 = kh_now();
        CUdeviceptr dout = upload(out), dref = upload(ref);
        double t2 = kh_now();
        if (kh_gpu_cmp_run(gc, t, dout, dref, n, &o, &b, &err) != KH_OK)
            fail_msg("%s", err.msg);
        double t3 = kh_now();
        CU_OK(cu.cuMemFree(dout));
        CU_OK(cu.cuMemFree(dref));
        if (memcmp(&a, &b, sizeof a))
            fail_msg("large %s %s output: host '%s', device '%s'", kh_dtype_name(t),
                     cases[v].pass ? "passing" : "failing", a.reason, b.reason);
        assert_int_equal(a.status, cases[v].pass ? KH_CHECK_PASSED : KH_CHECK_INCORRECT_NUMERICAL);
        printf("# %llu %s elements, %s: host %.1f ms, device %.2f ms (parts %llu)\n",
               (unsigned long long)n, kh_dtype_name(t), cases[v].pass ? "passing" : "failing",
               (t1 - t0) * 1e3, (t3 - t2) * 1e3, (unsigned long long)kh_check_nchunks(n));
        kh_tensor_free(out);
        kh_tensor_free(ref);
    }
}

static uint64_t mix(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The byte comparison (determinism) and the poison search ("untouched"):
 * a buffer against its copy, then one byte changed at each place (every word
 * and the tail); the first element holding a code, for every dtype, found at
 * the place it was planted (a 4-bit element in either nibble), and none
 * where there is none. */
static void test_same_and_find(void **state)
{
    const size_t sizes[] = {1, 7, 8, 9, 4096, 1000003};
    kh_err err;
    for (size_t si = 0; si < KH_ARRAY_LEN(sizes); si++) {
        size_t n = sizes[si];
        unsigned char *h = malloc(n);
        assert_non_null(h);
        for (size_t i = 0; i < n; i++)
            h[i] = (unsigned char)(mix(&seed) | 0x11); /* no zero nibble */
        CUdeviceptr a = 0, b = 0;
        CU_OK(cu.cuMemAlloc(&a, n));
        CU_OK(cu.cuMemAlloc(&b, n));
        CU_OK(cu.cuMemcpyHtoD(a, h, n));
        CU_OK(cu.cuMemcpyHtoD(b, h, n));
        int same = 0;
        assert_int_equal(kh_gpu_cmp_same(gc, a, b, n, &same, &err), KH_OK);
        assert_true(same);
        const size_t at[] = {0, n / 2, n - 1};
        for (size_t k = 0; k < KH_ARRAY_LEN(at); k++) {
            unsigned char z = 0;
            CU_OK(cu.cuMemcpyHtoD(b + at[k], &z, 1));
            assert_int_equal(kh_gpu_cmp_same(gc, a, b, n, &same, &err), KH_OK);
            if (same)
                fail_msg("%zu bytes: byte %zu differs, found the same", n, at[k]);
            CU_OK(cu.cuMemcpyHtoD(b + at[k], h + at[k], 1));
        }
        /* no element of any dtype is all zero bits here (no zero nibble) */
        for (int t = 0; t < KH_DTYPE_COUNT; t++) {
            uint64_t numel = (uint64_t)n * 8 / (uint64_t)kh_dtype_bits((kh_dtype)t);
            int64_t first = 0;
            assert_int_equal(kh_gpu_cmp_find(gc, (kh_dtype)t, a, numel, 0, &first, &err), KH_OK);
            if (first != -1)
                fail_msg("%s: found a zero code at %lld in odd bytes", kh_dtype_name(t),
                         (long long)first);
            if (!numel)
                continue;
            uint64_t want = numel / 3 + (numel > 1), nb = kh_dtype_nbytes((kh_dtype)t, 1);
            size_t byte = (size_t)(kh_dtype_bits((kh_dtype)t) < 8 ? want / 2 : want * nb);
            unsigned char zero[8] = {0}, keep[8];
            size_t len = nb ? nb : 1;
            memcpy(keep, h + byte, len);
            if (kh_dtype_bits((kh_dtype)t) < 8) /* clear the element's nibble alone */
                zero[0] = (unsigned char)(want & 1 ? h[byte] & 0x0F : h[byte] & 0xF0);
            CU_OK(cu.cuMemcpyHtoD(a + byte, zero, len));
            assert_int_equal(kh_gpu_cmp_find(gc, (kh_dtype)t, a, numel, 0, &first, &err), KH_OK);
            if (first != (int64_t)want)
                fail_msg("%s, %llu elements: zero planted at %llu, found at %lld",
                         kh_dtype_name(t), (unsigned long long)numel,
                         (unsigned long long)want, (long long)first);
            CU_OK(cu.cuMemcpyHtoD(a + byte, keep, len));
        }
        CU_OK(cu.cuMemFree(a));
        CU_OK(cu.cuMemFree(b));
        free(h);
    }
    printf("# byte comparison and poison search: every case found\n");
}

int main(void)
{
    if (!kh_test_have_gpu()) {
        printf("# no GPU: skipped\n");
        return KH_TEST_SKIP;
    }
    seed = 0xC0FFEE5EEDull; /* fixed: a failure reruns as it was */
    printf("# seed %llu\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_same_bits),
                                       cmocka_unit_test(test_same_and_find),
                                       cmocka_unit_test(test_large)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
