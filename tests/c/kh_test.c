/* kh_test.c: the helpers of kh_test.h. */
#include "kh_test.h"

#include "core/doctor.h"
#include "task/dtype.h"
#include "task/rng.h"
#include "task/tensor.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kh_test_khlua(void)
{
    const char *b = getenv("KHLUA_BIN");
    return b && b[0] ? b : "./khlua";
}

const char *kh_test_source_dir(void)
{
    const char *s = getenv("KH_SOURCE_DIR");
    return s && s[0] ? s : KH_SOURCE_DIR;
}

void kh_test_run_khlua(kh_child_result *res, double timeout_s, ...)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)kh_test_khlua();
    va_list ap;
    va_start(ap, timeout_s);
    char *a;
    while ((a = va_arg(ap, char *)) && n < 63)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    kh_err err;
    if (kh_proc_run(argv, timeout_s, 1 << 22, res, &err) != KH_OK)
        fail_msg("cannot run %s: %s", argv[0], err.msg);
}

char *kh_test_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/khlua-test-XXXXXX", base && base[0] ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    if (!d)
        fail_msg("mkdtemp failed");
    return kh_strdup(d);
}

void kh_test_rmtree(const char *path)
{
    char *argv[] = {"rm", "-rf", (char *)path, NULL};
    kh_child_result r;
    if (kh_proc_run(argv, 60, 4096, &r, NULL) == KH_OK)
        kh_child_result_free(&r);
}

int kh_test_have_gpu(void)
{
    json_t *j = NULL;
    if (kh_doctor_probe_gpus(60, &j, NULL) != KH_OK)
        return 0;
    int have = json_array_size(json_object_get(j, "gpus")) > 0;
    json_decref(j);
    return have;
}

void kh_test_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

unsigned char *kh_test_nvrtc_cubin(const char *src, const char *arch, size_t *len)
{
    kh_err err;
    kh_nvrtc_api nv;
    if (kh_nvrtc_load(&nv, getenv("CUDA_HOME") ? getenv("CUDA_HOME") : KH_DEFAULT_CUDA_HOME,
                      &err) != KH_OK)
        fail_msg("%s", err.msg);
    nvrtcProgram p;
    if (nv.nvrtcCreateProgram(&p, src, "test.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        fail_msg("nvrtcCreateProgram failed");
    char archopt[64];
    snprintf(archopt, sizeof archopt, "-arch=%s", arch);
    const char *opts[] = {archopt, "-std=c++17", "-lineinfo"};
    nvrtcResult r = nv.nvrtcCompileProgram(p, 3, opts);
    if (r != NVRTC_SUCCESS) {
        size_t ln = 0;
        nv.nvrtcGetProgramLogSize(p, &ln);
        char *log = malloc(ln + 1);
        nv.nvrtcGetProgramLog(p, log);
        fail_msg("NVRTC failed: %s", log);
    }
    nv.nvrtcGetCUBINSize(p, len);
    unsigned char *cubin = malloc(*len);
    nv.nvrtcGetCUBIN(p, (char *)cubin);
    nv.nvrtcDestroyProgram(&p);
    return cubin;
}

void kh_test_compare_pair(int t, uint64_t n, uint64_t seed, int finite_only,
                          struct kh_tensor **out, struct kh_tensor **ref)
{
    kh_err err;
    int64_t shape[1] = {(int64_t)n};
    kh_dtype dt = (kh_dtype)t;
    if (kh_tensor_new(ref, dt, 1, shape, &err) || kh_tensor_new(out, dt, 1, shape, &err))
        fail_msg("%s", err.msg);
    if (finite_only) {
        if (kh_rng_fill(NULL, *ref, seed, 1, &err))
            fail_msg("%s", err.msg);
    } else {
        for (uint64_t i = 0; i < n; i++)
            kh_dtype_set_code(dt, (*ref)->data, i, kh_rng_code_at(KH_DTYPE_I64, seed, 1, i));
    }
    memcpy((*out)->data, (*ref)->data, kh_dtype_nbytes(dt, n));
    int bits = (int)kh_dtype_nbytes(dt, 8); /* the bytes of 8 elements: bits of one */
    uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t h = kh_rng_code_at(KH_DTYPE_I64, seed, 2, i);
        uint64_t c = kh_dtype_get_code(dt, (*ref)->data, i);
        if (h % 100 == 0 && !finite_only) {
            c = kh_rng_code_at(KH_DTYPE_I64, seed, 3, i) & mask;
        } else if (h % 10 == 1) {
            /* a few codes up or down: close, but maybe not close enough */
            uint64_t d = 1 + (h >> 8) % 3;
            c = ((h >> 4) & 1 ? c + d : c - d) & mask;
            if (finite_only && !isfinite(kh_dtype_decode(dt, c)))
                c = kh_dtype_get_code(dt, (*ref)->data, i);
        }
        kh_dtype_set_code(dt, (*out)->data, i, c);
    }
}
