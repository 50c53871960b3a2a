/* test_gpu_rng.c: the device input generator gives the same bits as the host
 * one, for every dtype, with two different launch shapes (so the result does
 * not depend on which thread made which element).  Compiles rng.c's source
 * with NVRTC for this GPU's architecture, runs it through the driver API
 * (cudalib.h) and compares byte for byte.  Exits 77 (skipped) without a GPU. */
#include "kh_test.h"

#include "task/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static kh_cuda_api cu;
static CUdevice dev;
static CUcontext ctx;
static CUmodule mod;
static CUfunction fn, fn_kcache;
static kh_engine *eng;

#define CU_OK(call)                                                                       \
    do {                                                                                  \
        CUresult r_ = (call);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                         \
            char m_[512];                                                                 \
            kh_cuda_describe(&cu, r_, m_, sizeof m_);                                     \
            fail_msg("%s: %s", #call, m_);                                                \
        }                                                                                 \
    } while (0)

/* Each failure says which step failed: on the GPU host this is the message
 * the lead reads. */
#define SETUP_CU(call)                                                                    \
    do {                                                                                  \
        CUresult r_ = (call);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                         \
            char m_[512];                                                                 \
            kh_cuda_describe(&cu, r_, m_, sizeof m_);                                     \
            fprintf(stderr, "setup: %s: %s\n", #call, m_);                               \
            return -1;                                                                    \
        }                                                                                 \
    } while (0)

static int setup(void **state)
{
    kh_err err;
    if (kh_cuda_load(&cu, &err) != KH_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    SETUP_CU(cu.cuInit(0));
    SETUP_CU(cu.cuDeviceGet(&dev, 0));
    SETUP_CU(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
    SETUP_CU(cu.cuCtxSetCurrent(ctx));
    int major = 0, minor = 0;
    SETUP_CU(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    SETUP_CU(cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    char arch[32];
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    eng = kh_engine_new(NULL, &err);
    if (!eng) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    void *cubin;
    size_t n;
    if (kh_rng_compile(eng, arch, &cubin, &n, &err) != KH_OK) {
        fprintf(stderr, "setup: compiling the generator for %s: %s\n", arch, err.msg);
        return -1;
    }
    CUresult r = cu.cuModuleLoadData(&mod, cubin);
    free(cubin);
    SETUP_CU(r);
    SETUP_CU(cu.cuModuleGetFunction(&fn, mod, KH_RNG_KERNEL));
    SETUP_CU(cu.cuModuleGetFunction(&fn_kcache, mod, KH_RNG_KCACHE_KERNEL));
    printf("# generator loaded for %s\n", arch);
    return 0;
}

static int teardown(void **state)
{
    if (mod)
        cu.cuModuleUnload(mod);
    if (ctx)
        cu.cuDevicePrimaryCtxRelease(dev);
    kh_engine_free(eng);
    kh_lib_close(cu.handle);
    return 0;
}

/* Generate n elements on the device with the given grid and block; the
 * buffer is poisoned first so unwritten bytes cannot pass as zeros. */
static void *device_generate(kh_dtype t, uint64_t n, uint64_t seed, uint32_t stream,
                             unsigned grid, unsigned block)
{
    size_t bytes = kh_dtype_nbytes(t, n);
    CUdeviceptr d;
    CU_OK(cu.cuMemAlloc(&d, bytes));
    CU_OK(cu.cuMemsetD8(d, 0xA5, bytes));
    unsigned long long nn = n, s = seed;
    unsigned int st = stream;
    int kind = kh_rng_kind(t);
    void *args[] = {&d, &nn, &s, &st, &kind};
    CU_OK(cu.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL));
    CU_OK(cu.cuCtxSynchronize());
    void *host = malloc(bytes);
    assert_non_null(host);
    CU_OK(cu.cuMemcpyDtoH(host, d, bytes));
    CU_OK(cu.cuMemFree(d));
    return host;
}

static void test_bit_for_bit(void **state)
{
    uint64_t seed = 0x5DEECE66Dull * 0x9E3779B97F4A7C15ull; /* fixed */
    printf("# seed %llu\n", (unsigned long long)seed);
    const int64_t n = (1 << 20) + 3; /* odd: the last fp4 byte has one element */
    for (int ti = 0; ti < KH_DTYPE_COUNT; ti++) {
        kh_dtype t = (kh_dtype)ti;
        kh_tensor *h;
        kh_err err;
        assert_int_equal(kh_tensor_new(&h, t, 1, &n, &err), KH_OK);
        assert_int_equal(kh_rng_fill(NULL, h, seed, (uint32_t)ti, &err), KH_OK);
        unsigned shapes[2][2] = {{132, 256}, {7, 96}};
        for (int k = 0; k < 2; k++) {
            uint8_t *dv = device_generate(t, (uint64_t)n, seed, (uint32_t)ti, shapes[k][0],
                                          shapes[k][1]);
            if (memcmp(dv, h->data, h->nbytes) != 0) {
                size_t i = 0;
                while (dv[i] == ((uint8_t *)h->data)[i])
                    i++;
                fail_msg("%s (grid %u, block %u): byte %zu differs: device 0x%02x, host "
                         "0x%02x", kh_dtype_name(t), shapes[k][0], shapes[k][1], i, dv[i],
                         ((uint8_t *)h->data)[i]);
            }
            free(dv);
        }
        printf("# %s: %lld elements identical on host and device\n", kh_dtype_name(t),
               (long long)n);
        kh_tensor_free(h);
    }
}

/* The DSA indexer k cache, packed on the device, equals the host's. */
static void test_dsa_kcache_bit_for_bit(void **state)
{
    uint64_t seed = 0xDEADBEEFull << 12 | 0x123; /* fixed */
    int64_t shape[4] = {301, 64, 1, 132}; /* pages, page_size, 1, head_dim + 4 */
    kh_tensor *h;
    kh_err err;
    assert_int_equal(kh_tensor_new(&h, KH_DTYPE_I8, 4, shape, &err), KH_OK);
    assert_int_equal(kh_rng_fill_dsa_kcache(NULL, h, seed, 1, &err), KH_OK);
    CUdeviceptr d;
    CU_OK(cu.cuMemAlloc(&d, h->nbytes));
    CU_OK(cu.cuMemsetD8(d, 0xA5, h->nbytes));
    unsigned long long tokens = 301 * 64, s = seed;
    unsigned int st = 1, ps = 64, hd = 128;
    void *args[] = {&d, &tokens, &s, &st, &ps, &hd};
    CU_OK(cu.cuLaunchKernel(fn_kcache, 80, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CU_OK(cu.cuCtxSynchronize());
    uint8_t *dv = malloc(h->nbytes);
    assert_non_null(dv);
    CU_OK(cu.cuMemcpyDtoH(dv, d, h->nbytes));
    CU_OK(cu.cuMemFree(d));
    if (memcmp(dv, h->data, h->nbytes) != 0) {
        size_t i = 0;
        while (dv[i] == ((uint8_t *)h->data)[i])
            i++;
        fail_msg("k cache byte %zu differs: device 0x%02x, host 0x%02x", i, dv[i],
                 ((uint8_t *)h->data)[i]);
    }
    printf("# DSA k cache: %zu bytes identical on host and device\n", h->nbytes);
    free(dv);
    kh_tensor_free(h);
}

/* The generator's rate on a large input (rmsnorm_h4096's largest, 14,509 x
 * 4,096 bfloat16, and the same count of float32) at the gpu worker's launch
 * shape and at more blocks: ms per fill, the median of 9 after a warm-up.
 * A figure for tests/bench/bench_rng.sh (its anchor is torch.randn there),
 * not a check. */
static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void test_rate(void **state)
{
    (void)state;
    const uint64_t n = 14509ull * 4096;
    kh_dtype types[2] = {KH_DTYPE_BF16, KH_DTYPE_F32};
    unsigned grids[3] = {528, 1056, 2112};
    CUdeviceptr d;
    CU_OK(cu.cuMemAlloc(&d, kh_dtype_nbytes(KH_DTYPE_F32, n)));
    CUevent a, b;
    CU_OK(cu.cuEventCreate(&a, 0));
    CU_OK(cu.cuEventCreate(&b, 0));
    for (int ti = 0; ti < 2; ti++)
        for (int g = 0; g < 3; g++) {
            unsigned long long nn = n, s = 0x1234567ull + (unsigned)g;
            unsigned int st = 3;
            int kind = kh_rng_kind(types[ti]);
            void *args[] = {&d, &nn, &s, &st, &kind};
            float ms[10];
            for (int k = 0; k < 10; k++) {
                CU_OK(cu.cuEventRecord(a, NULL));
                CU_OK(cu.cuLaunchKernel(fn, grids[g], 1, 1, 256, 1, 1, 0, NULL, args, NULL));
                CU_OK(cu.cuEventRecord(b, NULL));
                CU_OK(cu.cuEventSynchronize(b));
                CU_OK(cu.cuEventElapsedTime(&ms[k], a, b));
            }
            qsort(ms + 1, 9, sizeof ms[0], cmp_float);
            printf("# rate: %s %llu elements, grid %u x 256: %.3f ms per fill\n",
                   kh_dtype_name(types[ti]), (unsigned long long)n, grids[g], ms[5]);
        }
    CU_OK(cu.cuEventDestroy(a));
    CU_OK(cu.cuEventDestroy(b));
    CU_OK(cu.cuMemFree(d));
}

int main(void)
{
    if (!kh_test_have_gpu()) {
        printf("# no GPU: skipped\n");
        return KH_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bit_for_bit),
                                       cmocka_unit_test(test_dsa_kcache_bit_for_bit),
                                       cmocka_unit_test(test_rate)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
