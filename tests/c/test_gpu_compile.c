/* test_gpu_compile.c: what the cubin reader says equals what the driver says.
 * Kernels with randomly drawn shared arrays, local arrays and launch bounds
 * (and one register-capped spiller, one register-heavy kernel) are compiled
 * by NVRTC for this GPU's architecture, loaded with cuModuleLoadData, and
 * every kernel's NUM_REGS, SHARED_SIZE_BYTES, LOCAL_SIZE_BYTES and
 * MAX_THREADS_PER_BLOCK from cuFuncGetAttribute must equal the parsed
 * registers, shared_static, local_bytes and max_threads_per_block.  Skips
 * (77) without a GPU.  The driver is opened here directly: this test process
 * may initialise CUDA, the coordinator never does. */
#include "kh_test.h"

#include "compile/compile.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned g_seed;

static struct {
    CUresult (*init)(unsigned);
    CUresult (*dev_get)(CUdevice *, int);
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*get_fn)(CUfunction *, CUmodule, const char *);
    CUresult (*fn_attr)(int *, CUfunction_attribute, CUfunction);
    CUresult (*unload)(CUmodule);
} cu;

static int load_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 0;
    cu.init = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    cu.dev_get = (CUresult(*)(CUdevice *, int))dlsym(h, "cuDeviceGet");
    cu.attr = (CUresult(*)(int *, CUdevice_attribute, CUdevice))dlsym(h, "cuDeviceGetAttribute");
    cu.retain = (CUresult(*)(CUcontext *, CUdevice))dlsym(h, "cuDevicePrimaryCtxRetain");
    cu.set_current = (CUresult(*)(CUcontext))dlsym(h, "cuCtxSetCurrent");
    cu.load = (CUresult(*)(CUmodule *, const void *))dlsym(h, "cuModuleLoadData");
    cu.get_fn = (CUresult(*)(CUfunction *, CUmodule, const char *))dlsym(h, "cuModuleGetFunction");
    cu.fn_attr = (CUresult(*)(int *, CUfunction_attribute, CUfunction))dlsym(h, "cuFuncGetAttribute");
    cu.unload = (CUresult(*)(CUmodule))dlsym(h, "cuModuleUnload");
    return cu.init && cu.dev_get && cu.attr && cu.retain && cu.set_current && cu.load &&
           cu.get_fn && cu.fn_attr && cu.unload;
}

static void append_kernels(char *body, size_t n, int idx)
{
    int smem = 1 + rand() % 3000, loc = 8 + rand() % 120, bounds = 32 * (1 + rand() % 32);
    size_t l = strlen(body);
    snprintf(body + l, n - l,
             "extern \"C\" __global__ void __launch_bounds__(%d) k%d(float *a, int n) {\n"
             "  __shared__ float s[%d];\n  float loc[%d];\n  int i = threadIdx.x;\n"
             "  for (int j = 0; j < %d; j++) loc[j] = a[j * n + i];\n"
             "  s[i %% %d] = loc[(i * 7) %% %d];\n  __syncthreads();\n"
             "  a[i] = s[(i + 1) %% %d] + loc[(n + i) %% %d];\n}\n",
             bounds, idx, smem, loc, loc, smem, loc, smem, loc);
}

static void test_resources_match_driver(void **state)
{
    (void)state;
    assert_true(load_driver());
    CUdevice dev;
    CUcontext ctx;
    int major, minor;
    assert_int_equal(cu.init(0), CUDA_SUCCESS);
    assert_int_equal(cu.dev_get(&dev, 0), CUDA_SUCCESS);
    assert_int_equal(cu.attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), 0);
    assert_int_equal(cu.attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), 0);
    assert_int_equal(cu.retain(&ctx, dev), CUDA_SUCCESS);
    assert_int_equal(cu.set_current(ctx), CUDA_SUCCESS);
    char arch[32];
    snprintf(arch, sizeof arch, "sm_%d%d%s", major, minor, major >= 9 ? "a" : "");

    char body[16384] = "";
    for (int i = 0; i < 5; i++)
        append_kernels(body, sizeof body, i);
    size_t l = strlen(body);
    snprintf(body + l, sizeof body - l,
             "extern \"C\" __global__ void __maxnreg__(24) spill(float *a, int n) {\n"
             "  float v[48];\n  #pragma unroll\n"
             "  for (int j = 0; j < 48; j++) v[j] = a[j * n + threadIdx.x];\n"
             "  #pragma unroll\n  for (int r = 0; r < 48; r++) { float acc = 0;\n"
             "    #pragma unroll\n    for (int q = 0; q < 48; q++) acc += v[q] * v[(q + r) %% 48];\n"
             "    a[r * n + threadIdx.x] = acc; }\n}\n"
             "extern \"C\" __global__ void heavy(float *a, int n) {\n"
             "  float v[%d];\n  #pragma unroll\n"
             "  for (int j = 0; j < %d; j++) v[j] = a[j * n + threadIdx.x];\n"
             "  float acc = 0;\n  #pragma unroll\n"
             "  for (int j = 0; j < %d; j++) acc += v[j] * v[(j * 5 + 1) %% %d];\n"
             "  a[threadIdx.x] = acc;\n}\n",
             96 + rand() % 64, 96 + 0, 96 + 0, 96);
    kh_err err;
    kh_engine *e = kh_engine_new(NULL, &err);
    kh_compiler *c = kh_compile_new(e, &err);
    kh_compile_req req = {.source = body, .source_len = strlen(body), .arch = arch,
                          .trusted = 1, .no_cache = 1};
    kh_artifact *a = NULL;
    if (kh_compile_build(c, &req, &a, &err) != KH_OK)
        fail_msg("%s\n%s", err.msg, a ? a->log : "");
    CUmodule mod;
    assert_int_equal(cu.load(&mod, a->cubin), CUDA_SUCCESS);
    for (size_t i = 0; i < a->res.n_kernels; i++) {
        const kh_kernel_res *k = &a->res.kernels[i];
        CUfunction fn;
        assert_int_equal(cu.get_fn(&fn, mod, k->name), CUDA_SUCCESS);
        int regs, smem, local, maxt;
        cu.fn_attr(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
        cu.fn_attr(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
        cu.fn_attr(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
        cu.fn_attr(&maxt, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
        printf("# %s: driver regs %d smem %d local %d maxthreads %d | cubin %d %ld %ld %d\n",
               k->name, regs, smem, local, maxt, k->registers, k->shared_static, k->local_bytes,
               k->max_threads_per_block);
        if (regs != k->registers || smem != k->shared_static || local != k->local_bytes ||
            maxt != k->max_threads_per_block)
            fail_msg("%s (%s, seed %u): driver and cubin reader disagree (see above)", k->name,
                     arch, g_seed);
    }
    cu.unload(mod);
    kh_artifact_free(a);
    kh_compile_free(c);
    kh_engine_free(e);
}

int main(void)
{
    if (!kh_test_have_gpu()) {
        printf("# no GPU: skipped\n");
        return KH_TEST_SKIP;
    }
    const char *s = getenv("KH_TEST_SEED");
    g_seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
    srand(g_seed);
    printf("# seed %u (KH_TEST_SEED to repeat)\n", g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resources_match_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
