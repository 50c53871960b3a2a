/* gpu_check.c: the default comparison on the device (gpu_check.h).  The
 * kernel's arithmetic follows check.c and dtype.h operation for operation;
 * test_gpu_check.c holds the two to the same bits on every dtype, special
 * values included. */
#include "gpu/gpu_check.h"

#include "compile/compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the device's struct part is this layout, field for field */
_Static_assert(sizeof(kh_check_part) == 144, "kh_check_part: 144 bytes, as the kernel's part");
_Static_assert(KH_DTYPE_F32 == 0 && KH_DTYPE_F16 == 1 && KH_DTYPE_BF16 == 2 &&
                   KH_DTYPE_F8E4M3 == 3 && KH_DTYPE_F8E5M2 == 4 && KH_DTYPE_F4E2M1 == 5 &&
                   KH_DTYPE_I64 == 6 && KH_DTYPE_I32 == 7 && KH_DTYPE_I16 == 8 &&
                   KH_DTYPE_I8 == 9 && KH_DTYPE_BOOL == 10,
               "the kernel's dtype numbers");

/* GROUPS (4) blocks of 256 threads per chunk.  The chunk's elements go in
 * KH_CHECK_LANES (1024) lanes, element lo + j into lane j % 1024 in order;
 * group g's block takes the lanes g, g + 4, ..., one a thread (64 elements
 * of a full chunk, in order).  Each thread keeps the order-free figures
 * (counts, maxima, first indices) and its lane's partial sums of
 * norm_error; the block folds the sums in halves as far as they stay in
 * the group (lane j + 512 into lane j, then 256, ... 4: all its lanes
 * into lane g), the order check.c's scan uses, and writes the group's part;
 * kh_gpu_cmp_fold ends the fold on the host (lanes 2, 3 into 0, 1, then 1
 * into 0) and merges the groups' order-free figures, so the chunk's part is
 * the host's bits.  The products and sums are __dmul_rn / __dadd_rn: never
 * contracted into an FMA the host's loop does not make.  (Earlier on 2026-12-07
 * a block took a chunk, four lanes a thread: 256 dependent steps a thread,
 * about 0.3 ms a chunk however few chunks there were, the most of a timing
 * phase's judging on small outputs; until 2026-12-07 a warp took a
 * 2^18-element chunk in 32 lanes, 10 ms for 700,000 elements on an H100.) */
_Static_assert(KH_CHECK_LANES == 256 * KH_GPU_CMP_GROUPS, "the kernel's THREADS * GROUPS");
_Static_assert(KH_GPU_CMP_GROUPS == 4, "the kernel's GROUPS");
static const char cmp_src[] =
    "typedef unsigned long long u64;\n"
    "typedef long long i64;\n"
    "typedef unsigned int u32;\n"
    "struct part {\n"
    "  u64 fails, out_inf, out_nan, ref_nonfinite, max_ulp;\n"
    "  i64 first_fail, first_inf, first_nan, worst;\n"
    "  double max_abs, max_rel, sdiff, sref;\n"
    "  int abs_nan, rel_nan;\n"
    "  double worst_out, worst_ref, fail_out, fail_ref;\n"
    "};\n"
    "enum { F32, F16, BF16, E4M3, E5M2, E2M1, I64, I32, I16, I8, BOOL };\n"
    "__device__ __forceinline__ u64 code_at(int t, const unsigned char *p, u64 i) {\n"
    "  switch (t) {\n"
    "  case E2M1: return (p[i >> 1] >> ((i & 1) * 4)) & 0xFu;\n"
    "  case E4M3: case E5M2: case I8: case BOOL: return p[i];\n"
    "  case F16: case BF16: case I16: return ((const unsigned short *)p)[i];\n"
    "  case F32: case I32: return ((const u32 *)p)[i];\n"
    "  case I64: return ((const u64 *)p)[i];\n"
    "  }\n"
    "  return 0;\n"
    "}\n"
    "__device__ __forceinline__ double f32bits(u32 b) { return (double)__uint_as_float(b); }\n"
    "__device__ double f16v(u32 h) {\n"
    "  u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;\n"
    "  if (e == 0x1F) return f32bits(sign | 0x7F800000u | (m << 13));\n"
    "  if (e == 0) { double v = (double)m * 5.9604644775390625e-08; return sign ? -v : v; }\n"
    "  return f32bits(sign | ((e + 112u) << 23) | (m << 13));\n"
    "}\n"
    "__device__ double e4m3v(u32 c) {\n"
    "  u32 sign = (c & 0x80u) << 24, e = (c >> 3) & 0xFu, m = c & 7u;\n"
    "  if (e == 15 && m == 7) return __longlong_as_double(0x7FF8000000000000ll);\n"
    "  if (e == 0) { double v = (double)m * 0.001953125; return sign ? -v : v; }\n"
    "  return f32bits(sign | ((e + 120u) << 23) | (m << 20));\n"
    "}\n"
    "__device__ double decode(int t, u64 c) {\n"
    "  switch (t) {\n"
    "  case F32: return f32bits((u32)c);\n"
    "  case BF16: return f32bits((u32)(c & 0xFFFFu) << 16);\n"
    "  case F16: return f16v((u32)(c & 0xFFFFu));\n"
    "  case E5M2: return f16v((u32)(c & 0xFFu) << 8);\n"
    "  case E4M3: return e4m3v((u32)(c & 0xFFu));\n"
    "  case E2M1: {\n"
    "    double v;\n"
    "    switch (c & 7u) {\n"
    "    case 0: v = 0.0; break; case 1: v = 0.5; break; case 2: v = 1.0; break;\n"
    "    case 3: v = 1.5; break; case 4: v = 2.0; break; case 5: v = 3.0; break;\n"
    "    case 6: v = 4.0; break; default: v = 6.0; break;\n"
    "    }\n"
    "    return (c & 8u) ? -v : v;\n"
    "  }\n"
    "  case I64: return (double)(i64)c;\n"
    "  case I32: return (double)(int)(u32)c;\n"
    "  case I16: return (double)(short)(unsigned short)c;\n"
    "  case I8: return (double)(signed char)(unsigned char)c;\n"
    "  case BOOL: return (c & 0xFF) ? 1.0 : 0.0;\n"
    "  }\n"
    "  return __longlong_as_double(0x7FF8000000000000ll);\n"
    "}\n"
    "__device__ i64 ordinal(int t, u64 code) {\n"
    "  int sb = t == F32 ? 31 : (t == F16 || t == BF16) ? 15 : t == E2M1 ? 3 : 7;\n"
    "  u64 mag = code & ((1ull << sb) - 1u);\n"
    "  return ((code >> sb) & 1u) ? -(i64)mag : (i64)mag;\n"
    "}\n"
    "__device__ int code_nan(int t, u64 c) {\n"
    "  switch (t) {\n"
    "  case F32: return (c & 0x7FFFFFFFu) > 0x7F800000u;\n"
    "  case F16: return (c & 0x7FFFu) > 0x7C00u;\n"
    "  case BF16: return (c & 0x7FFFu) > 0x7F80u;\n"
    "  case E5M2: return (c & 0x7Fu) > 0x7Cu;\n"
    "  case E4M3: return (c & 0x7Fu) == 0x7Fu;\n"
    "  }\n"
    "  return 0;\n"
    "}\n"
    "__device__ u64 ulp(int t, u64 a, u64 b) {\n"
    "  if (t <= E2M1) {\n"
    "    if (code_nan(t, a) || code_nan(t, b)) return ~0ull;\n"
    "    i64 x = ordinal(t, a), y = ordinal(t, b);\n"
    "    return x > y ? (u64)x - (u64)y : (u64)y - (u64)x;\n"
    "  }\n"
    "  i64 x = (i64)decode(t, a), y = (i64)decode(t, b);\n"
    "  if (t == I64) { x = (i64)a; y = (i64)b; }\n"
    "  return x > y ? (u64)x - (u64)y : (u64)y - (u64)x;\n"
    "}\n"
    "__device__ __forceinline__ i64 first_of(i64 a, i64 b) {\n"
    "  return a < 0 ? b : b < 0 ? a : a < b ? a : b;\n"
    "}\n"
    "#define FULL 0xffffffffu\n"
    "#define THREADS 256\n"
    "#define GROUPS 4 /* blocks a chunk: KH_CHECK_LANES = THREADS * GROUPS */\n"
    "/* b's order-free figures into a's: counts added, maxima kept, the first\n"
    "   index kept (the worst: the larger error, then the lower index) */\n"
    "__device__ void merge(struct part *a, const struct part *b) {\n"
    "  a->fails += b->fails; a->out_inf += b->out_inf; a->out_nan += b->out_nan;\n"
    "  a->ref_nonfinite += b->ref_nonfinite;\n"
    "  if (b->max_ulp > a->max_ulp) a->max_ulp = b->max_ulp;\n"
    "  a->first_fail = first_of(a->first_fail, b->first_fail);\n"
    "  a->first_inf = first_of(a->first_inf, b->first_inf);\n"
    "  a->first_nan = first_of(a->first_nan, b->first_nan);\n"
    "  if (b->worst >= 0 && (a->worst < 0 || b->max_abs > a->max_abs ||\n"
    "                        (b->max_abs == a->max_abs && b->worst < a->worst))) {\n"
    "    a->max_abs = b->max_abs; a->worst = b->worst;\n"
    "  }\n"
    "  if (b->max_rel > a->max_rel) a->max_rel = b->max_rel;\n"
    "  a->abs_nan |= b->abs_nan; a->rel_nan |= b->rel_nan;\n"
    "}\n"
    "/* block b takes group g = b % GROUPS of chunks b / GROUPS, then on by\n"
    "   gridDim.x / GROUPS: the lanes g + GROUPS * tid, one a thread, into\n"
    "   parts[chunk * GROUPS + g] */\n"
    "extern \"C\" __global__ void __launch_bounds__(THREADS) kh_cmp_parts(\n"
    "    const unsigned char *out, const unsigned char *ref, u64 n, int t, double atol,\n"
    "    double rtol, int f32, u64 chunk, struct part *parts, u64 nchunks) {\n"
    "  __shared__ double s_sd[THREADS], s_sr[THREADS];\n"
    "  __shared__ struct part s_p[THREADS / 32];\n"
    "  int tid = threadIdx.x, lane = tid & 31;\n"
    "  u64 g = blockIdx.x % GROUPS, step = gridDim.x / GROUPS;\n"
    "  for (u64 c = blockIdx.x / GROUPS; c < nchunks; c += step) {\n"
    "    u64 lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;\n"
    "    struct part p;\n"
    "    p.fails = 0; p.out_inf = 0; p.out_nan = 0; p.ref_nonfinite = 0; p.max_ulp = 0;\n"
    "    p.first_fail = -1; p.first_inf = -1; p.first_nan = -1; p.worst = -1;\n"
    "    p.max_abs = 0; p.max_rel = 0; p.abs_nan = 0; p.rel_nan = 0;\n"
    "    double sd = 0, sr = 0;\n"
    "    /* lane g + GROUPS * tid takes elements lo + lane, lo + lane + 1024, ...\n"
    "       in order */\n"
    "#pragma unroll 4\n"
    "    for (u64 i = lo + g + (u64)GROUPS * tid; i < hi; i += (u64)GROUPS * THREADS) {\n"
    "      u64 cx = code_at(t, out, i), cy = code_at(t, ref, i);\n"
    "      double x = decode(t, cx), y = decode(t, cy);\n"
    "      int xfin = isfinite(x), yfin = isfinite(y);\n"
    "      if (!xfin) {\n"
    "        if (isinf(x) && p.out_inf++ == 0) p.first_inf = (i64)i;\n"
    "        if (isnan(x) && p.out_nan++ == 0) p.first_nan = (i64)i;\n"
    "      }\n"
    "      if (!yfin) p.ref_nonfinite++;\n"
    "      double ea, er;\n"
    "      int ef;\n"
    "      if (f32) {\n"
    "        float xf = (float)x, yf = (float)y;\n"
    "        float a = fabsf(xf - yf);\n"
    "        float rl = a / (fabsf(yf) + 1e-8f);\n"
    "        ea = a; er = rl; ef = a > (float)atol && rl > (float)rtol;\n"
    "      } else {\n"
    "        double a = fabs(x - y);\n"
    "        double rl = a / (fabs(y) + 1e-8);\n"
    "        ea = a; er = rl; ef = a > atol && rl > rtol;\n"
    "      }\n"
    "      if (isnan(ea)) p.abs_nan = 1;\n"
    "      else if (ea > p.max_abs || p.worst < 0) { p.max_abs = ea; p.worst = (i64)i; }\n"
    "      if (isnan(er)) p.rel_nan = 1;\n"
    "      else if (er > p.max_rel) p.max_rel = er;\n"
    "      if (ef && p.fails++ == 0) p.first_fail = (i64)i;\n"
    "      if (xfin && yfin) {\n"
    "        double e = __dadd_rn(x, -y);\n"
    "        sd = __dadd_rn(sd, __dmul_rn(e, e));\n"
    "        sr = __dadd_rn(sr, __dmul_rn(y, y));\n"
    "      }\n"
    "      u64 d = ulp(t, cx, cy);\n"
    "      if (d > p.max_ulp) p.max_ulp = d;\n"
    "    }\n"
    "    /* check.c's fold in halves, as far as it stays in this group: lane\n"
    "       j + 512 into lane j is thread tid + 512 / GROUPS into tid, ... down\n"
    "       to lane g (thread 0); the host folds the groups' lanes 0..3\n"
    "       (kh_gpu_cmp_fold) */\n"
    "    s_sd[tid] = sd;\n"
    "    s_sr[tid] = sr;\n"
    "    __syncthreads();\n"
    "    for (int half = THREADS / 2; half >= 32; half >>= 1) {\n"
    "      if (tid < half) {\n"
    "        s_sd[tid] = __dadd_rn(s_sd[tid], s_sd[tid + half]);\n"
    "        s_sr[tid] = __dadd_rn(s_sr[tid], s_sr[tid + half]);\n"
    "      }\n"
    "      __syncthreads();\n"
    "    }\n"
    "    double fsd = 0, fsr = 0;\n"
    "    if (tid < 32) {\n"
    "      fsd = s_sd[tid]; fsr = s_sr[tid];\n"
    "      for (int off = 16; off; off >>= 1) {\n"
    "        fsd = __dadd_rn(fsd, __shfl_down_sync(FULL, fsd, off));\n"
    "        fsr = __dadd_rn(fsr, __shfl_down_sync(FULL, fsr, off));\n"
    "      }\n"
    "    }\n"
    "    /* the order-free figures: within each warp, then its lane 0's over\n"
    "       the warps */\n"
    "    for (int off = 16; off; off >>= 1) {\n"
    "      struct part o;\n"
    "      o.fails = __shfl_down_sync(FULL, p.fails, off);\n"
    "      o.out_inf = __shfl_down_sync(FULL, p.out_inf, off);\n"
    "      o.out_nan = __shfl_down_sync(FULL, p.out_nan, off);\n"
    "      o.ref_nonfinite = __shfl_down_sync(FULL, p.ref_nonfinite, off);\n"
    "      o.max_ulp = __shfl_down_sync(FULL, p.max_ulp, off);\n"
    "      o.first_fail = __shfl_down_sync(FULL, p.first_fail, off);\n"
    "      o.first_inf = __shfl_down_sync(FULL, p.first_inf, off);\n"
    "      o.first_nan = __shfl_down_sync(FULL, p.first_nan, off);\n"
    "      o.worst = __shfl_down_sync(FULL, p.worst, off);\n"
    "      o.max_abs = __shfl_down_sync(FULL, p.max_abs, off);\n"
    "      o.max_rel = __shfl_down_sync(FULL, p.max_rel, off);\n"
    "      o.abs_nan = __shfl_down_sync(FULL, p.abs_nan, off);\n"
    "      o.rel_nan = __shfl_down_sync(FULL, p.rel_nan, off);\n"
    "      merge(&p, &o);\n"
    "    }\n"
    "    if (lane == 0) s_p[tid >> 5] = p;\n"
    "    __syncthreads();\n"
    "    if (tid == 0) {\n"
    "      for (int k = 1; k < THREADS / 32; k++) merge(&p, &s_p[k]);\n"
    "      p.sdiff = fsd; p.sref = fsr;\n"
    "      p.worst_out = p.worst >= 0 ? decode(t, code_at(t, out, (u64)p.worst)) : 0.0;\n"
    "      p.worst_ref = p.worst >= 0 ? decode(t, code_at(t, ref, (u64)p.worst)) : 0.0;\n"
    "      p.fail_out = p.first_fail >= 0 ? decode(t, code_at(t, out, (u64)p.first_fail)) : 0.0;\n"
    "      p.fail_ref = p.first_fail >= 0 ? decode(t, code_at(t, ref, (u64)p.first_fail)) : 0.0;\n"
    "      parts[c * GROUPS + g] = p;\n"
    "    }\n"
    "    __syncthreads(); /* s_p and s_sd free for the next chunk */\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void kh_cmp_same(const u64 *a, const u64 *b, u64 nwords,\n"
    "    u32 ntail, u32 *differ) {\n"
    "  u64 stride = (u64)gridDim.x * blockDim.x;\n"
    "  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < nwords; i += stride)\n"
    "    if (a[i] != b[i]) { *differ = 1u; return; }\n"
    "  if (blockIdx.x == 0 && threadIdx.x == 0) {\n"
    "    const unsigned char *ta = (const unsigned char *)(a + nwords),\n"
    "                        *tb = (const unsigned char *)(b + nwords);\n"
    "    for (u32 j = 0; j < ntail; j++) if (ta[j] != tb[j]) *differ = 1u;\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void kh_cmp_find(const unsigned char *p, u64 n, int t, u64 code,\n"
    "    u64 *first) {\n"
    "  u64 stride = (u64)gridDim.x * blockDim.x;\n"
    "  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)\n"
    "    if (code_at(t, p, i) == code) { atomicMin(first, i); return; }\n"
    "}\n";

const char *kh_gpu_cmp_source(void) { return cmp_src; }

struct kh_gpu_cmp {
    const kh_cuda_api *cu;
    CUstream stream;
    CUmodule mod;
    CUfunction fn, same_fn, find_fn;
    CUdeviceptr parts; /* the groups' parts on the device, cap of them */
    CUdeviceptr scratch; /* 8 bytes: kh_cmp_same's flag, kh_cmp_find's index */
    size_t cap;
};

static kh_status cu_ok(const kh_cuda_api *cu, CUresult r, const char *what, kh_err *err)
{
    if (r == CUDA_SUCCESS)
        return KH_OK;
    char m[400];
    kh_cuda_describe(cu, r, m, sizeof m);
    return kh_err_set(err, KH_ECUDA, "%s (the device comparison): %s", what, m);
}

kh_gpu_cmp *kh_gpu_cmp_new(kh_engine *e, const kh_cuda_api *cu, const char *arch, CUstream s,
                           kh_err *err)
{
    kh_gpu_cmp *c = calloc(1, sizeof *c);
    if (!c) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    c->cu = cu;
    c->stream = s;
    kh_compiler *cc = kh_compile_new(e, err);
    if (!cc) {
        free(c);
        return NULL;
    }
    /* the host rounds every operation: no contraction into FMAs */
    const char *opts[] = {"--fmad=false"};
    const char *kernels[] = {"kh_cmp_parts", "kh_cmp_same", "kh_cmp_find"};
    kh_compile_req req = {.source = cmp_src, .source_len = strlen(cmp_src),
                          .name = "kh_cmp_parts.cu", .arch = arch, .options = opts,
                          .n_options = 1, .kernels = kernels, .n_kernels = 3, .trusted = 1,
                          .no_pch = 1, .no_cache = 1};
    kh_artifact *a = NULL;
    kh_status st = kh_compile_build(cc, &req, &a, err);
    if (st && a && a->log)
        kh_err_set(err, st, "compiling the device comparison for %s: %.300s", arch ? arch : "",
                   a->log);
    if (!st)
        st = cu_ok(cu, cu->cuModuleLoadData(&c->mod, a->cubin), "cuModuleLoadData", err);
    kh_artifact_free(a);
    kh_compile_free(cc);
    if (!st)
        st = cu_ok(cu, cu->cuModuleGetFunction(&c->fn, c->mod, "kh_cmp_parts"),
                   "cuModuleGetFunction", err);
    if (!st)
        st = cu_ok(cu, cu->cuModuleGetFunction(&c->same_fn, c->mod, "kh_cmp_same"),
                   "cuModuleGetFunction", err);
    if (!st)
        st = cu_ok(cu, cu->cuModuleGetFunction(&c->find_fn, c->mod, "kh_cmp_find"),
                   "cuModuleGetFunction", err);
    if (!st)
        st = cu_ok(cu, cu->cuMemAlloc(&c->scratch, 8), "cuMemAlloc", err);
    if (st) {
        kh_gpu_cmp_free(c);
        return NULL;
    }
    return c;
}

void kh_gpu_cmp_free(kh_gpu_cmp *c)
{
    if (!c)
        return;
    if (c->parts)
        c->cu->cuMemFree(c->parts);
    if (c->scratch)
        c->cu->cuMemFree(c->scratch);
    if (c->mod)
        c->cu->cuModuleUnload(c->mod);
    free(c);
}

kh_status kh_gpu_cmp_parts_async(kh_gpu_cmp *c, kh_dtype t, CUdeviceptr out, CUdeviceptr ref,
                                 uint64_t numel, const kh_check_opts *o, CUdeviceptr dparts,
                                 kh_err *err)
{
    kh_check_opts def;
    if (!o) {
        kh_check_opts_default(&def);
        o = &def;
    }
    if ((int)t < 0 || t > KH_DTYPE_BOOL)
        return kh_err_set(err, KH_EINVAL, "device comparison: invalid dtype %d", (int)t);
    unsigned long long n = numel, nchunks = kh_check_nchunks(numel), chunk = KH_CHECK_CHUNK;
    if (!nchunks)
        return KH_OK;
    int ti = (int)t, f32 = o->precision == KH_CHECK_FIB_F32;
    double atol = o->atol, rtol = o->rtol;
    void *args[] = {&out, &ref, &n, &ti, &atol, &rtol, &f32, &chunk, &dparts, &nchunks};
    /* GROUPS blocks (256 threads) per chunk, at most 1024 chunks at once */
    unsigned grid = (unsigned)(nchunks < 1024 ? nchunks : 1024) * KH_GPU_CMP_GROUPS;
    return cu_ok(c->cu,
                 c->cu->cuLaunchKernel(c->fn, grid, 1, 1, 256, 1, 1, 0, c->stream, args, NULL),
                 "cuLaunchKernel", err);
}

void kh_gpu_cmp_fold(const kh_check_part *groups, uint64_t nchunks, kh_check_part *parts)
{
    for (uint64_t c = 0; c < nchunks; c++) {
        const kh_check_part *g = groups + c * KH_GPU_CMP_GROUPS;
        kh_check_part p = g[0];
        double sd[KH_GPU_CMP_GROUPS], sr[KH_GPU_CMP_GROUPS];
        for (int k = 0; k < KH_GPU_CMP_GROUPS; k++) {
            if (k)
                kh_check_part_merge_figures(&p, &g[k]);
            sd[k] = g[k].sdiff;
            sr[k] = g[k].sref;
        }
        /* the end of check.c's fold in halves: group k holds lane k */
        for (int half = KH_GPU_CMP_GROUPS / 2; half; half >>= 1)
            for (int j = 0; j < half; j++) {
                sd[j] += sd[j + half];
                sr[j] += sr[j + half];
            }
        p.sdiff = sd[0];
        p.sref = sr[0];
        parts[c] = p;
    }
}

kh_status kh_gpu_cmp_parts(kh_gpu_cmp *c, kh_dtype t, CUdeviceptr out, CUdeviceptr ref,
                           uint64_t numel, const kh_check_opts *o, kh_check_part *parts,
                           kh_err *err)
{
    uint64_t nchunks = kh_check_nchunks(numel), slots = kh_gpu_cmp_slots(numel);
    if ((int)t < 0 || t > KH_DTYPE_BOOL)
        return kh_err_set(err, KH_EINVAL, "device comparison: invalid dtype %d", (int)t);
    if (!nchunks)
        return KH_OK;
    const kh_cuda_api *cu = c->cu;
    kh_status st = KH_OK;
    if (c->cap < slots) {
        if (c->parts)
            cu->cuMemFree(c->parts);
        c->parts = 0;
        c->cap = 0;
        if ((st = cu_ok(cu, cu->cuMemAlloc(&c->parts, slots * sizeof *parts), "cuMemAlloc",
                        err)))
            return st;
        c->cap = slots;
    }
    kh_check_part *groups = malloc(slots * sizeof *groups);
    if (!groups)
        return kh_err_set(err, KH_ENOMEM, "out of memory for %llu parts",
                          (unsigned long long)slots);
    st = kh_gpu_cmp_parts_async(c, t, out, ref, numel, o, c->parts, err);
    if (!st)
        st = cu_ok(cu, cu->cuStreamSynchronize(c->stream), "cuStreamSynchronize", err);
    if (!st)
        st = cu_ok(cu, cu->cuMemcpyDtoH(groups, c->parts, slots * sizeof *groups),
                   "cuMemcpyDtoH", err);
    if (!st)
        kh_gpu_cmp_fold(groups, nchunks, parts);
    free(groups);
    return st;
}

kh_status kh_gpu_cmp_run(kh_gpu_cmp *c, kh_dtype t, CUdeviceptr out, CUdeviceptr ref,
                         uint64_t numel, const kh_check_opts *o, kh_check_result *r,
                         kh_err *err)
{
    uint64_t np = kh_check_nchunks(numel);
    kh_check_part *parts = np ? calloc(np, sizeof *parts) : NULL;
    if (np && !parts)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    kh_status st = kh_gpu_cmp_parts(c, t, out, ref, numel, o, parts, err);
    if (!st)
        st = kh_check_from_parts(parts, np, numel, o, r, err);
    free(parts);
    return st;
}

/* A grid of 256-thread blocks over n items, at most 2048 blocks. */
static unsigned grid_for(uint64_t n)
{
    uint64_t g = (n + 255) / 256;
    return g < 1 ? 1 : g > 2048 ? 2048 : (unsigned)g;
}

/* Launch fn over n items with args, the scratch word set to init first;
 * then wait and read the scratch word back into *word. */
static kh_status scratch_launch(kh_gpu_cmp *c, CUfunction fn, uint64_t n, void **args,
                                unsigned init, uint64_t *word, kh_err *err)
{
    const kh_cuda_api *cu = c->cu;
    kh_status st = cu_ok(cu, cu->cuMemsetD32Async(c->scratch, init, 2, c->stream),
                         "cuMemsetD32Async", err);
    if (!st)
        st = cu_ok(cu, cu->cuLaunchKernel(fn, grid_for(n), 1, 1, 256, 1, 1, 0, c->stream, args,
                                          NULL),
                   "cuLaunchKernel", err);
    if (!st)
        st = cu_ok(cu, cu->cuStreamSynchronize(c->stream), "cuStreamSynchronize", err);
    if (!st)
        st = cu_ok(cu, cu->cuMemcpyDtoH(word, c->scratch, sizeof *word), "cuMemcpyDtoH", err);
    return st;
}

kh_status kh_gpu_cmp_same(kh_gpu_cmp *c, CUdeviceptr a, CUdeviceptr b, size_t bytes, int *same,
                          kh_err *err)
{
    *same = 0;
    if ((a | b) & 7)
        return kh_err_set(err, KH_EINVAL, "device byte comparison: buffers not 8-byte aligned");
    if (!bytes) {
        *same = 1;
        return KH_OK;
    }
    unsigned long long nwords = bytes / 8;
    unsigned ntail = (unsigned)(bytes % 8);
    CUdeviceptr scratch = c->scratch;
    void *args[] = {&a, &b, &nwords, &ntail, &scratch};
    uint64_t word = 1;
    kh_status st = scratch_launch(c, c->same_fn, nwords, args, 0, &word, err);
    if (!st)
        *same = (uint32_t)word == 0;
    return st;
}

kh_status kh_gpu_cmp_find(kh_gpu_cmp *c, kh_dtype t, CUdeviceptr p, uint64_t numel,
                          uint64_t code, int64_t *first, kh_err *err)
{
    *first = -1;
    if ((int)t < 0 || t > KH_DTYPE_BOOL)
        return kh_err_set(err, KH_EINVAL, "device code search: invalid dtype %d", (int)t);
    if (!numel)
        return KH_OK;
    unsigned long long n = numel, cd = code;
    int ti = (int)t;
    CUdeviceptr scratch = c->scratch;
    void *args[] = {&p, &n, &ti, &cd, &scratch};
    uint64_t word = 0;
    kh_status st = scratch_launch(c, c->find_fn, numel, args, 0xFFFFFFFFu, &word, err);
    if (!st && word != UINT64_MAX)
        *first = (int64_t)word;
    return st;
}
