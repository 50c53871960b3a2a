/* rng.c: the input generator (rng.h): host filling of tensors and the device
 * source handed to NVRTC.  Both sides run rng_core.h; this file only loops,
 * packs and wraps.  Allocation and launch on the GPU belong to the gpu worker. */
#include "task/rng.h"

#include "task/rng_core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kh_rng_philox(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4])
{
    memcpy(out, counter, 4 * sizeof *out);
    kh_philox4x32_10(out, key[0], key[1]);
}

double kh_rng_normal_at(uint64_t seed, uint32_t stream, uint64_t idx)
{
    return (double)kh_rng_normal_idx(seed, stream, idx);
}

int kh_rng_kind(kh_dtype t)
{
    switch (t) {
    case KH_DTYPE_F32: return KH_RK_F32;
    case KH_DTYPE_F16: return KH_RK_F16;
    case KH_DTYPE_BF16: return KH_RK_BF16;
    case KH_DTYPE_F8E4M3: return KH_RK_F8E4M3;
    case KH_DTYPE_F8E5M2: return KH_RK_F8E5M2;
    case KH_DTYPE_F4E2M1: return KH_RK_F4E2M1;
    case KH_DTYPE_I64: return KH_RK_I64;
    case KH_DTYPE_I32: return KH_RK_I32;
    case KH_DTYPE_I16: return KH_RK_I16;
    case KH_DTYPE_I8: return KH_RK_I8;
    case KH_DTYPE_BOOL: return KH_RK_BOOL;
    default: return -1;
    }
}

uint64_t kh_rng_code_at(kh_dtype t, uint64_t seed, uint32_t stream, uint64_t idx)
{
    uint64_t c = kh_rng_code(kh_rng_kind(t), seed, stream, idx);
    int bits = kh_dtype_bits(t);
    return bits == 64 ? c : c & ((1ull << bits) - 1u);
}

typedef struct fill_ctx {
    kh_engine *e;
    kh_tensor *t;
    uint64_t seed;
    uint32_t stream;
    const int64_t *pages; /* DSA k cache: the pages to fill, or NULL: every token */
} fill_ctx;

static int fill_elems(void *arg, uint64_t lo, uint64_t hi)
{
    fill_ctx *f = arg;
    kh_dtype t = f->t->dtype;
    int kind = kh_rng_kind(t), bits = kh_dtype_bits(t);
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1u;
    for (uint64_t i = lo; i < hi; i++) {
        if (f->e && ((i >> 1) & 0x7FFFF) == 0x7FFFF && kh_engine_stop_requested(f->e))
            return 1;
        if (kind > KH_RK_F4E2M1 || (i & 1u) || i + 1 >= hi) {
            kh_dtype_set_code(t, f->t->data, i, kh_rng_code_at(t, f->seed, f->stream, i));
            continue;
        }
        /* a float pair from one Philox block */
        uint32_t w[4];
        kh_rng_words(f->seed, f->stream, i >> 1, w);
        kh_dtype_set_code(t, f->t->data, i,
                          kh_rng_float_code(kind, kh_rng_normal2(w[0], w[1])) & mask);
        kh_dtype_set_code(t, f->t->data, i + 1,
                          kh_rng_float_code(kind, kh_rng_normal2(w[2], w[3])) & mask);
        i++;
    }
    return 0;
}

kh_status kh_rng_fill(kh_engine *e, kh_tensor *t, uint64_t seed, uint32_t stream,
                      kh_err *err)
{
    if (kh_rng_kind(t->dtype) < 0)
        return kh_err_set(err, KH_EINVAL, "cannot generate dtype %d", (int)t->dtype);
    /* counter-based: any split gives the same bits; shares of 2^18 elements
     * at least, with even boundaries so that two threads never write the two
     * nibbles of one float4 byte */
    fill_ctx f = {e, t, seed, stream, NULL};
    if (kh_parallel_for(t->numel, 1u << 14, 2, fill_elems, &f))
        return kh_err_set(err, KH_EINTR, "input generation interrupted");
    return KH_OK;
}

static kh_status kcache_shape_ok(const kh_tensor *t, kh_err *err)
{
    if (t->dtype != KH_DTYPE_I8 || t->ndim != 4 || t->shape[2] != 1 || t->shape[3] < 5 ||
        t->shape[1] < 1 || t->shape[1] > 0xFFFFFFFF || t->shape[3] > 0xFFFFFFFF)
        return kh_err_set(err, KH_EINVAL,
                          "a DSA k cache is int8 [num_pages, page_size, 1, head_dim + 4], "
                          "not %s with %d dimensions", kh_dtype_name(t->dtype), t->ndim);
    return KH_OK;
}

/* Items are pages (f->pages[lo..hi), or page numbers lo..hi when NULL). */
static int fill_kcache_pages(void *arg, uint64_t lo, uint64_t hi)
{
    fill_ctx *f = arg;
    uint64_t ps = (uint64_t)f->t->shape[1];
    uint32_t D = (uint32_t)f->t->shape[3] - 4;
    for (uint64_t i = lo; i < hi; i++) {
        if (f->e && (i & 0xFF) == 0xFF && kh_engine_stop_requested(f->e))
            return 1;
        uint64_t pg = f->pages ? (uint64_t)f->pages[i] : i;
        for (uint64_t k = pg * ps; k < (pg + 1) * ps; k++)
            kh_rng_dsa_kcache_token(f->seed, f->stream, k, (uint32_t)ps, D, f->t->data);
    }
    return 0;
}

kh_status kh_rng_fill_dsa_kcache(kh_engine *e, kh_tensor *t, uint64_t seed, uint32_t stream,
                                 kh_err *err)
{
    kh_status st = kcache_shape_ok(t, err);
    if (st)
        return st;
    fill_ctx f = {e, t, seed, stream, NULL};
    if (kh_parallel_for((uint64_t)t->shape[0], 16, 1, fill_kcache_pages, &f))
        return kh_err_set(err, KH_EINTR, "k cache generation interrupted");
    return KH_OK;
}

kh_status kh_rng_fill_dsa_kcache_pages(kh_engine *e, kh_tensor *t, uint64_t seed,
                                       uint32_t stream, const int64_t *pages, size_t npages,
                                       kh_err *err)
{
    kh_status st = kcache_shape_ok(t, err);
    if (st)
        return st;
    /* checked before any thread starts; a page listed twice would be written
     * by two threads at once (same bytes, still a race) */
    unsigned char *seen = calloc((size_t)t->shape[0], 1);
    if (!seen)
        return kh_err_set(err, KH_ENOMEM, "out of memory for the k cache's page list");
    for (size_t i = 0; i < npages; i++) {
        if (pages[i] < 0 || pages[i] >= t->shape[0]) {
            free(seen);
            return kh_err_set(err, KH_EINVAL, "k cache page %lld is outside [0, %lld)",
                              (long long)pages[i], (long long)t->shape[0]);
        }
        if (seen[pages[i]]++) {
            free(seen);
            return kh_err_set(err, KH_EINVAL, "k cache page %lld is listed twice",
                              (long long)pages[i]);
        }
    }
    free(seen);
    fill_ctx f = {e, t, seed, stream, pages};
    if (kh_parallel_for(npages, 4, 1, fill_kcache_pages, &f))
        return kh_err_set(err, KH_EINTR, "k cache generation interrupted");
    return KH_OK;
}

kh_status kh_rng_fill_softmax(kh_engine *e, kh_tensor *t, uint64_t seed, uint32_t stream,
                              kh_err *err)
{
    if (t->dtype != KH_DTYPE_F32 || t->ndim < 1)
        return kh_err_set(err, KH_EINVAL, "a softmax input (sampling probs) must be a float32 "
                          "tensor with at least one dimension, not %d-D %s", t->ndim,
                          kh_dtype_name(t->dtype));
    kh_status st = kh_rng_fill(e, t, seed, stream, err);
    int64_t V = t->shape[t->ndim - 1];
    if (st || V <= 0)
        return st;
    /* per row: exp(x - max) / sum, in double, rounded once to float32 */
    float *p = t->data;
    for (uint64_t r = 0; r < t->numel / (uint64_t)V; r++, p += V) {
        double m = p[0], s = 0;
        for (int64_t i = 1; i < V; i++)
            m = p[i] > m ? p[i] : m;
        for (int64_t i = 0; i < V; i++)
            s += exp((double)p[i] - m);
        for (int64_t i = 0; i < V; i++)
            p[i] = (float)(exp((double)p[i] - m) / s);
    }
    return KH_OK;
}

uint64_t kh_rng_derive_seed(uint64_t base, uint64_t a, uint64_t b)
{
    /* counter word 3 has its top bit set, so for b < 2^63 these counters
     * never meet the element counters (word 3 = 0) under the same key */
    uint32_t w[4] = {(uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b,
                     (uint32_t)(b >> 32) ^ 0x80000000u};
    kh_philox4x32_10(w, (uint32_t)base, (uint32_t)(base >> 32));
    return ((uint64_t)w[0] << 32) | w[1];
}

/* The device side of rng_core.h's contract: every double operation is an
 * IEEE round-to-nearest intrinsic the compiler may not fuse or reorder. */
static const char device_prelude[] =
    "typedef unsigned int uint32_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "typedef long long int64_t;\n"
    "#define KH_FN static __device__ __forceinline__\n"
    "KH_FN double kh_dadd(double a, double b) { return __dadd_rn(a, b); }\n"
    "KH_FN double kh_dsub(double a, double b) { return __dsub_rn(a, b); }\n"
    "KH_FN double kh_dmul(double a, double b) { return __dmul_rn(a, b); }\n"
    "KH_FN double kh_ddiv(double a, double b) { return __ddiv_rn(a, b); }\n"
    "KH_FN double kh_dsqrt(double a) { return __dsqrt_rn(a); }\n"
    "KH_FN float kh_fadd(float a, float b) { return __fadd_rn(a, b); }\n"
    "KH_FN float kh_fsub(float a, float b) { return __fsub_rn(a, b); }\n"
    "KH_FN float kh_fmul(float a, float b) { return __fmul_rn(a, b); }\n"
    "KH_FN float kh_fdiv(float a, float b) { return __fdiv_rn(a, b); }\n"
    "KH_FN float kh_fsqrt(float a) { return __fsqrt_rn(a); }\n"
    "KH_FN uint32_t kh_f2u(float f) { return __float_as_uint(f); }\n"
    "KH_FN float kh_u2f(uint32_t u) { return __uint_as_float(u); }\n"
    "KH_FN uint64_t kh_d2u(double d) { return (uint64_t)__double_as_longlong(d); }\n"
    "KH_FN double kh_u2d(uint64_t u) { return __longlong_as_double((long long)u); }\n";

/* The device fill: a thread per Philox block, so each block's two float
 * elements come from one draw; the device's own conversions where the GPU
 * has them (float32 to float16, bfloat16 and the two float8s are single
 * rounding instructions there, round to nearest even as kh_fp_encode: for
 * the values the generator draws, finite and float8 clamped to +-2, the same
 * bits as the encoder the host runs; test_gpu_rng compares every dtype); the
 * rest through kh_rng_float_code. */
static const char device_kernel[] =
    "\nKH_FN unsigned int kh_rng_code_dev(int kind, float z)\n"
    "{\n"
    "    unsigned short h;\n"
    "#if __CUDA_ARCH__ >= 800\n"
    "    if (kind == KH_RK_F16) { asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(z)); return h; }\n"
    "    if (kind == KH_RK_BF16) { asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(z)); return h; }\n"
    "#endif\n"
    "#if __CUDA_ARCH__ >= 890\n"
    "    if (kind == KH_RK_F8E4M3 || kind == KH_RK_F8E5M2) {\n"
    "        if (z > 2.0f) z = 2.0f;\n"
    "        if (z < -2.0f) z = -2.0f;\n"
    "        if (kind == KH_RK_F8E4M3)\n"
    "            asm(\"cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\" : \"=h\"(h) : \"f\"(0.0f), \"f\"(z));\n"
    "        else\n"
    "            asm(\"cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\" : \"=h\"(h) : \"f\"(0.0f), \"f\"(z));\n"
    "        return h & 0xFFu;\n"
    "    }\n"
    "#endif\n"
    "    return (unsigned int)kh_rng_float_code(kind, z);\n"
    "}\n"
    "\nKH_FN void kh_rng_put(unsigned char *out, int kind, unsigned long long i, uint64_t c)\n"
    "{\n"
    "    if (kind == KH_RK_I64) ((uint64_t *)out)[i] = c;\n"
    "    else if (kind == KH_RK_F32 || kind == KH_RK_I32) ((uint32_t *)out)[i] = (uint32_t)c;\n"
    "    else if (kind == KH_RK_F16 || kind == KH_RK_BF16 || kind == KH_RK_I16)\n"
    "        ((unsigned short *)out)[i] = (unsigned short)c;\n"
    "    else out[i] = (unsigned char)c;\n"
    "}\n"
    "\nextern \"C\" __global__ void kh_rng_fill(unsigned char *out, unsigned long long n,\n"
    "    unsigned long long seed, unsigned int stream, int kind)\n"
    "{\n"
    "    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"
    "    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (kind <= KH_RK_F4E2M1) {\n"
    "        for (; i < (n + 1) / 2; i += step) {\n"
    "            uint32_t w[4];\n"
    "            kh_rng_words(seed, stream, i, w);\n"
    "            float z0 = kh_rng_normal2(w[0], w[1]);\n"
    "            float z1 = 2 * i + 1 < n ? kh_rng_normal2(w[2], w[3]) : 0.0f;\n"
    "            if (kind == KH_RK_F4E2M1) {\n"
    "                uint64_t lo = kh_rng_float_code(kind, z0);\n"
    "                uint64_t hi = 2 * i + 1 < n ? kh_rng_float_code(kind, z1) : 0;\n"
    "                out[i] = (unsigned char)((lo & 15u) | ((hi & 15u) << 4));\n"
    "            } else if (kind == KH_RK_F32) {\n"
    "                ((float *)out)[2 * i] = z0;\n"
    "                if (2 * i + 1 < n) ((float *)out)[2 * i + 1] = z1;\n"
    "            } else {\n"
    "                kh_rng_put(out, kind, 2 * i, kh_rng_code_dev(kind, z0));\n"
    "                if (2 * i + 1 < n) kh_rng_put(out, kind, 2 * i + 1, kh_rng_code_dev(kind, z1));\n"
    "            }\n"
    "        }\n"
    "        return;\n"
    "    }\n"
    "    for (; i < n; i += step)\n"
    "        kh_rng_put(out, kind, i, kh_rng_code(kind, seed, stream, i));\n"
    "}\n"
    "\nextern \"C\" __global__ void kh_rng_dsa_kcache(unsigned char *out,\n"
    "    unsigned long long tokens, unsigned long long seed, unsigned int stream,\n"
    "    unsigned int page_size, unsigned int head_dim)\n"
    "{\n"
    "    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"
    "    unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    for (; k < tokens; k += step)\n"
    "        kh_rng_dsa_kcache_token(seed, stream, k, page_size, head_dim, out);\n"
    "}\n";

char *kh_rng_device_source(void)
{
    const char *core = kh_core_source();
    size_t n = sizeof device_prelude + strlen(core) + sizeof device_kernel + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s\n%s", device_prelude, core, device_kernel);
    return s;
}

const char *const *kh_rng_device_options(void)
{
    static const char *const opts[] = {"--fmad=false", "-std=c++17", NULL};
    return opts;
}

static kh_status nvrtc_fail(const kh_nvrtc_api *nv, nvrtcProgram prog, nvrtcResult r,
                            const char *what, kh_err *err)
{
    size_t n = 0;
    char *log = NULL;
    if (prog && nv->nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 1 &&
        (log = malloc(n)) && nv->nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) {
        free(log);
        log = NULL;
    }
    kh_status st = kh_err_set(err, KH_ECOMPILE, "%s: %s%s%s", what, nv->nvrtcGetErrorString(r),
                              log ? "\n" : "", log ? log : "");
    free(log);
    return st;
}

/* Compile the generator; want_ptx selects PTX (NUL-terminated) over a cubin. */
static kh_status compile_generator(kh_engine *e, const char *arch, int want_ptx, void **out,
                                   size_t *size, kh_err *err)
{
    *out = NULL;
    *size = 0;
    const kh_nvrtc_api *nv = kh_engine_nvrtc(e, err);
    if (!nv)
        return err ? err->code : KH_ENODEV;
    char *src = kh_rng_device_source();
    if (!src)
        return kh_err_set(err, KH_ENOMEM, "out of memory assembling the generator source");
    nvrtcProgram prog = NULL;
    nvrtcResult r = nv->nvrtcCreateProgram(&prog, src, "kh_rng.cu", 0, NULL, NULL);
    free(src);
    if (r != NVRTC_SUCCESS)
        return nvrtc_fail(nv, NULL, r, "nvrtcCreateProgram", err);
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    const char *opts[8];
    int nopt = 0;
    opts[nopt++] = archopt;
    for (const char *const *o = kh_rng_device_options(); *o && nopt < 8; o++)
        opts[nopt++] = *o;
    kh_status st = KH_OK;
    char what[128];
    r = nv->nvrtcCompileProgram(prog, nopt, opts);
    if (r != NVRTC_SUCCESS) {
        snprintf(what, sizeof what, "compiling the input generator for %s", arch);
        st = nvrtc_fail(nv, prog, r, what, err);
        goto out;
    }
    size_t n = 0;
    r = want_ptx ? nv->nvrtcGetPTXSize(prog, &n) : nv->nvrtcGetCUBINSize(prog, &n);
    if (r != NVRTC_SUCCESS) {
        st = nvrtc_fail(nv, prog, r, want_ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize", err);
        goto out;
    }
    if (n == 0) {
        st = kh_err_set(err, KH_ECOMPILE,
                        "NVRTC made no %s for %s (a cubin needs a real sm_XX architecture)",
                        want_ptx ? "PTX" : "cubin", arch);
        goto out;
    }
    void *buf = malloc(n);
    if (!buf) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory for %zu bytes of compiled code", n);
        goto out;
    }
    r = want_ptx ? nv->nvrtcGetPTX(prog, buf) : nv->nvrtcGetCUBIN(prog, buf);
    if (r != NVRTC_SUCCESS) {
        free(buf);
        st = nvrtc_fail(nv, prog, r, want_ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", err);
        goto out;
    }
    *out = buf;
    *size = n;
out:
    nv->nvrtcDestroyProgram(&prog);
    return st;
}

kh_status kh_rng_compile(kh_engine *e, const char *arch, void **cubin, size_t *size,
                         kh_err *err)
{
    return compile_generator(e, arch, 0, cubin, size, err);
}

kh_status kh_rng_compile_ptx(kh_engine *e, const char *arch, char **ptx, kh_err *err)
{
    size_t n;
    void *p;
    kh_status st = compile_generator(e, arch, 1, &p, &n, err);
    *ptx = p;
    return st;
}

static int cmp_range(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

size_t kh_rng_ranges(uint64_t seed, uint64_t call, uint64_t tensor, uint64_t numel, size_t count,
                     uint64_t elems, uint64_t (*out)[2])
{
    if (count < 2 || elems < 8)
        count = 2, elems = elems < 8 ? 8 : elems;
    elems &= ~(uint64_t)7;
    if (numel <= (uint64_t)count * elems) {
        out[0][0] = 0;
        out[0][1] = numel;
        return 1;
    }
    /* the last range ends at numel, its start rounded down to 8 elements */
    uint64_t last = (numel - elems) & ~(uint64_t)7;
    out[0][0] = 0;
    out[0][1] = elems;
    out[1][0] = last;
    out[1][1] = numel - last;
    uint64_t slots = last / 8; /* starts on the 8-element grid before the last range */
    for (size_t j = 2; j < count; j++) {
        uint64_t h = kh_rng_derive_seed(kh_rng_derive_seed(seed, call, tensor), 0xC4, j);
        out[j][0] = (h % slots) * 8;
        out[j][1] = elems;
    }
    qsort(out, count, sizeof *out, cmp_range);
    size_t n = 0;
    for (size_t j = 0; j < count; j++) {
        if (n && out[j][0] <= out[n - 1][0] + out[n - 1][1]) {
            uint64_t end = out[j][0] + out[j][1];
            if (end > out[n - 1][0] + out[n - 1][1])
                out[n - 1][1] = end - out[n - 1][0];
            continue;
        }
        out[n][0] = out[j][0];
        out[n][1] = out[j][1];
        n++;
    }
    return n;
}
