/* gpu_eval_buf.c: the buffers of the gpu worker's `evaluate` (gpu_eval.c):
 * the input generator and the checksum kernel, the request's tensors, their
 * allocation (guard bands around each), filling the input sets, the copies
 * of outputs into the reply payload, and the guard and input checks' reads.
 * It calls nothing of gpu_eval.c (gpu_eval_int.h). */
#include "gpu/gpu_eval_int.h"

#include "compile/compile.h"
#include "task/rng.h"
#include "worker/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *checksum_src =
    /* kh_words_sum: this thread's share of the sum over words i (from i,
     * every s-th) of mix(p[i] ^ i * K), eight loads in flight before they are
     * mixed (one at a time leaves HBM at a fraction of its bandwidth); the
     * same terms in another order, so the same sum */
    "__device__ __forceinline__ unsigned long long kh_mix(unsigned long long w,\n"
    "    unsigned long long i) {\n"
    "  unsigned long long x = w ^ (i * 0x9E3779B97F4A7C15ull);\n"
    "  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;\n"
    "  x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33; return x; }\n"
    "__device__ unsigned long long kh_words_sum(const unsigned long long *p,\n"
    "    unsigned long long n, unsigned long long i, unsigned long long s) {\n"
    "  unsigned long long acc = 0;\n"
    "  for (; i + 7 * s < n; i += 8 * s) {\n"
    "    unsigned long long w[8];\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 8; j++) w[j] = p[i + j * s];\n"
    "#pragma unroll\n"
    "    for (int j = 0; j < 8; j++) acc += kh_mix(w[j], i + j * s); }\n"
    "  for (; i < n; i += s) acc += kh_mix(p[i], i);\n"
    "  return acc; }\n"
    "extern \"C\" __global__ void kh_checksum(const unsigned long long *p,\n"
    "    unsigned long long nwords, const unsigned char *tail, unsigned int ntail,\n"
    "    unsigned long long *out) {\n"
    "  unsigned long long acc = kh_words_sum(p, nwords,\n"
    "      blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x,\n"
    "      (unsigned long long)gridDim.x * blockDim.x);\n"
    "  if (blockIdx.x == 0 && threadIdx.x == 0)\n"
    "    for (unsigned int j = 0; j < ntail; j++)\n"
    "      acc += ((unsigned long long)tail[j] + 1) * (0x100000001B3ull + j);\n"
    "  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);\n"
    "  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc); }\n"
    /* the timing phase's watch (gev_watch_want, gev_watch_call), one
     * launch per step for up to WATCH_CHUNK buffers: tab, passed by value
     * (nothing a candidate could reach), holds (address, bytes, tag) per
     * buffer, blockIdx.y picks the entry.  kh_sum_tab:
     * the same sum as kh_checksum, each block's share into
     * part[tag * gridDim.x + blockIdx.x]; kh_guard_tab: the lowest key |
     * tag | offset of a byte that is not want; kh_sums_tab: per tensor
     * (blockIdx.x), key | tensor where the shares of now and want differ */
    "struct kh_wtab { unsigned long long e[3 * 24]; };\n"
    "__device__ unsigned long long kh_block_sum(unsigned long long acc) {\n"
    "  __shared__ unsigned long long w[32];\n"
    "  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);\n"
    "  if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = acc;\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0)\n"
    "    for (unsigned int j = 1; j < (blockDim.x + 31) / 32; j++) acc += w[j];\n"
    "  __syncthreads();\n"
    "  return acc; }\n"
    "extern \"C\" __global__ void kh_sum_tab(const kh_wtab tab,\n"
    "    unsigned long long *part) {\n"
    "  const unsigned long long *e = tab.e + 3 * blockIdx.y;\n"
    "  const unsigned long long *p = (const unsigned long long *)e[0];\n"
    "  unsigned long long nwords = e[1] / 8;\n"
    "  unsigned long long acc = kh_words_sum(p, nwords,\n"
    "      blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x,\n"
    "      (unsigned long long)gridDim.x * blockDim.x);\n"
    "  if (blockIdx.x == 0 && threadIdx.x == 0) {\n"
    "    const unsigned char *tail = (const unsigned char *)(p + nwords);\n"
    "    for (unsigned int j = 0; j < (unsigned int)(e[1] % 8); j++)\n"
    "      acc += ((unsigned long long)tail[j] + 1) * (0x100000001B3ull + j); }\n"
    "  acc = kh_block_sum(acc);\n"
    "  if (threadIdx.x == 0) part[e[2] * gridDim.x + blockIdx.x] = acc; }\n"
    "extern \"C\" __global__ void kh_guard_tab(const kh_wtab tab,\n"
    "    unsigned int want, unsigned long long key, unsigned long long *first) {\n"
    "  const unsigned long long *e = tab.e + 3 * blockIdx.y;\n"
    "  const unsigned char *p = (const unsigned char *)e[0];\n"
    "  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "       i < e[1]; i += (unsigned long long)gridDim.x * blockDim.x)\n"
    "    if (p[i] != (unsigned char)want) { atomicMin(first, key | e[2] | i); return; }\n"
    "}\n"
    /* kh_gather_tab: range blockIdx.x of tab, (source offset, destination
     * offset, bytes), from src into dst, gridDim.y blocks on each (gev_gather) */
    "struct kh_gtab { unsigned long long e[3 * 64]; };\n"
    "extern \"C\" __global__ void kh_gather_tab(const kh_gtab tab,\n"
    "    const unsigned char *src, unsigned char *dst) {\n"
    "  const unsigned long long *e = tab.e + 3 * blockIdx.x;\n"
    "  for (unsigned long long i = (unsigned long long)blockIdx.y * blockDim.x + threadIdx.x;\n"
    "       i < e[2]; i += (unsigned long long)gridDim.y * blockDim.x)\n"
    "    dst[e[1] + i] = src[e[0] + i];\n"
    "}\n"
    "extern \"C\" __global__ void kh_sums_tab(const unsigned long long *now,\n"
    "    const unsigned long long *want, unsigned int nb, unsigned long long key,\n"
    "    unsigned long long *first) {\n"
    "  unsigned long long a = 0, b = 0;\n"
    "  for (unsigned int j = threadIdx.x; j < nb; j += blockDim.x) {\n"
    "    a += now[blockIdx.x * nb + j]; b += want[blockIdx.x * nb + j]; }\n"
    "  a = kh_block_sum(a);\n"
    "  b = kh_block_sum(b);\n"
    "  if (threadIdx.x == 0 && a != b) atomicMin(first, key | blockIdx.x);\n"
    "}\n";

/* The generator and the checksum kernel, compiled for this GPU once. */
void gev_arch(kh_gpu_eval *ev, char arch[16])
{
    json_t *info = kh_gpu_info(ev->g);
    const char *cc = json_string_value(json_object_get(info, "compute_capability"));
    snprintf(arch, 16, "sm_%c%c", cc[0], cc[2]);
    json_decref(info);
}

/* The utility module's kernels, in the order utils_lookup takes them. */
static const char *const util_kernels[] = {"kh_checksum", "kh_sum_tab", "kh_guard_tab",
                                           "kh_sums_tab", "kh_gather_tab"};

/* The loaded utility module's functions and the words they write: the
 * utilities ready. */
static kh_status utils_lookup(kh_gpu_eval *ev, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    CUfunction *fns[] = {&ev->checksum, &ev->sum_tab, &ev->guard_tab, &ev->sums_tab,
                         &ev->gather_tab};
    kh_status st = KH_OK;
    for (size_t i = 0; i < sizeof fns / sizeof fns[0] && !st; i++)
        st = kh_gpu_check(ev->g, cu->cuModuleGetFunction(fns[i], ev->util_mod, util_kernels[i]),
                          "cuModuleGetFunction", err);
    if (!st && !ev->sum_buf)
        st = kh_gpu_check(ev->g, cu->cuMemAlloc(&ev->sum_buf, 8), "cuMemAlloc", err);
    if (!st && !ev->watch)
        st = kh_gpu_check(ev->g, cu->cuMemAlloc(&ev->watch, WATCH_WORDS * 8), "cuMemAlloc", err);
    ev->utils_ready = !st;
    return st;
}

kh_status gev_ensure_utils(kh_gpu_eval *ev, kh_err *err)
{
    if (ev->utils_ready)
        return KH_OK;
    /* a step that failed before is taken again, the ones done are kept */
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    char arch[16];
    gev_arch(ev, arch);
    kh_status st = KH_OK;
    if (!ev->rng_mod) {
        void *cubin = NULL;
        size_t n = 0;
        if ((st = kh_rng_compile(ev->e, arch, &cubin, &n, err)))
            return kh_err_prefix(err, "compiling the input generator");
        st = kh_gpu_check(ev->g, cu->cuModuleLoadData(&ev->rng_mod, cubin), "cuModuleLoadData",
                          err);
        free(cubin);
    }
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuModuleGetFunction(&ev->rng_fill, ev->rng_mod,
                                                         KH_RNG_KERNEL),
                          "cuModuleGetFunction", err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuModuleGetFunction(&ev->rng_kcache, ev->rng_mod,
                                                         KH_RNG_KCACHE_KERNEL),
                          "cuModuleGetFunction", err);
    if (st)
        return st;
    if (ev->util_mod)
        return utils_lookup(ev, err);
    kh_compiler *cc_ = kh_compile_new(ev->e, err);
    if (!cc_)
        return err->code;
    kh_compile_req req = {.source = checksum_src, .source_len = strlen(checksum_src),
                          .name = "kh_checksum.cu", .arch = arch, .kernels = util_kernels,
                          .n_kernels = sizeof util_kernels / sizeof util_kernels[0],
                          .trusted = 1, .no_pch = 1, .no_cache = 1};
    kh_artifact *a = NULL;
    st = kh_compile_build(cc_, &req, &a, err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuModuleLoadData(&ev->util_mod, a->cubin),
                          "cuModuleLoadData", err);
    kh_artifact_free(a);
    kh_compile_free(cc_);
    return st ? st : utils_lookup(ev, err);
}

#define GATHER_TAB 64 /* kh_gtab's ranges */
kh_status gev_gather(kh_gpu_eval *ev, CUdeviceptr src, const uint64_t (*rg)[2], size_t n,
                     CUdeviceptr dst, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    struct {
        unsigned long long e[3 * GATHER_TAB];
    } tab;
    unsigned long long at = 0;
    for (size_t k0 = 0; k0 < n; k0 += GATHER_TAB) {
        unsigned m = (unsigned)(n - k0 < GATHER_TAB ? n - k0 : GATHER_TAB), ny = 1;
        memset(&tab, 0, sizeof tab);
        for (unsigned k = 0; k < m; k++) {
            uint64_t want = rg[k0 + k][1] / 8192 + 1; /* a block per 8 KiB, at most 32 */
            ny = want > ny ? (want > 32 ? 32 : (unsigned)want) : ny;
            tab.e[3 * k] = rg[k0 + k][0];
            tab.e[3 * k + 1] = at;
            tab.e[3 * k + 2] = rg[k0 + k][1];
            at += rg[k0 + k][1];
        }
        void *args[] = {&tab, &src, &dst};
        kh_status st = kh_gpu_check(ev->g, cu->cuLaunchKernel(ev->gather_tab, m, ny, 1, 256, 1, 1,
                                                              0, kh_gpu_stream(ev->g), args, NULL),
                                    "cuLaunchKernel (gathering ranges)", err);
        if (st)
            return st;
    }
    return KH_OK;
}

/* The checksum of bytes at p into the device word dst, in stream order. */
static kh_status checksum_into(kh_gpu_eval *ev, CUdeviceptr p, size_t bytes, CUdeviceptr dst,
                               kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    unsigned long long nwords = bytes / 8;
    CUdeviceptr tail = p + nwords * 8;
    unsigned int ntail = (unsigned int)(bytes % 8);
    void *args[] = {&p, &nwords, &tail, &ntail, &dst};
    kh_status st = kh_gpu_check(ev->g, cu->cuMemsetD8Async(dst, 0, 8, kh_gpu_stream(ev->g)),
                                "cuMemsetD8Async", err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuLaunchKernel(ev->checksum, 264, 1, 1, 256, 1, 1, 0,
                                                    kh_gpu_stream(ev->g), args, NULL),
                          "cuLaunchKernel (checksum)", err);
    return st;
}

kh_status gev_checksum(kh_gpu_eval *ev, CUdeviceptr p, size_t bytes, uint64_t *out,
                       kh_err *err)
{
    kh_status st = checksum_into(ev, p, bytes, ev->sum_buf, err);
    if (!st)
        st = kh_gpu_sync(ev->g, err);
    if (!st)
        st = kh_gpu_check(ev->g, kh_gpu_api(ev->g)->cuMemcpyDtoH(out, ev->sum_buf, 8), "cuMemcpyDtoH", err);
    return st;
}

static kh_status generate(kh_gpu_eval *ev, const ev_tensor *t, CUdeviceptr p, uint64_t seed,
                          const unsigned char *payload, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    switch (t->gen) {
    case GEN_RANDOM: {
        unsigned long long n = t->numel, s = seed;
        unsigned int stream = t->stream;
        int kind = kh_rng_kind(t->dtype);
        void *args[] = {&p, &n, &s, &stream, &kind};
        return kh_gpu_check(ev->g, cu->cuLaunchKernel(ev->rng_fill, 528, 1, 1, 256, 1, 1, 0,
                                                      kh_gpu_stream(ev->g), args, NULL),
                            "cuLaunchKernel (input generator)", err);
    }
    case GEN_DSA_KCACHE: {
        /* FlashInfer-Bench's DSA top-k k cache (rng.h), as the host makes it */
        unsigned long long tokens = t->dims[0] * t->dims[1], s = seed;
        unsigned int stream = t->stream, ps = (unsigned int)t->dims[1],
                     hd = (unsigned int)(t->dims[3] - 4);
        void *args[] = {&p, &tokens, &s, &stream, &ps, &hd};
        return kh_gpu_check(ev->g, cu->cuLaunchKernel(ev->rng_kcache, 528, 1, 1, 256, 1, 1, 0,
                                                      kh_gpu_stream(ev->g), args, NULL),
                            "cuLaunchKernel (k cache generator)", err);
    }
    case GEN_SCALAR: {
        unsigned char buf[8] = {0};
        kh_dtype_store(t->dtype, buf, 0, t->scalar);
        return kh_gpu_htod(ev->g, p, buf, t->bytes, err);
    }
    case GEN_BYTES: {
        /* the first copy from the host (landed before the stream's work:
         * kh_gpu_htod), the others doubling on the device */
        if (!t->pay_len)
            return KH_OK;
        kh_status st = kh_gpu_htod(ev->g, p, payload + t->pay_off, t->pay_len, err);
        for (size_t have = t->pay_len; !st && have < t->bytes;) {
            size_t n = have < t->bytes - have ? have : t->bytes - have;
            st = kh_gpu_check(ev->g, cu->cuMemcpyDtoDAsync(p + have, p, n, kh_gpu_stream(ev->g)),
                              "cuMemcpyDtoDAsync", err);
            have += n;
        }
        return st;
    }
    default:
        return KH_OK;
    }
}

/* ---- request parsing -------------------------------------------------------- */
kh_status gev_parse_tensors(const json_t *arr, size_t payload_len, ev_tensor *ts, size_t *nt,
                            kh_err *err)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0 ||
        json_array_size(arr) > MAX_TENSORS)
        return kh_err_set(err, KH_EINVAL, "tensors: 1 to %d entries required", MAX_TENSORS);
    size_t i;
    json_t *j;
    json_array_foreach(arr, i, j) {
        ev_tensor *t = &ts[i];
        memset(t, 0, sizeof *t);
        const char *name = json_string_value(json_object_get(j, "name"));
        const char *role = json_string_value(json_object_get(j, "role"));
        if (!name || !role)
            return kh_err_set(err, KH_EINVAL, "tensors[%zu]: name and role required", i);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->role = !strcmp(role, "input") ? ROLE_IN : !strcmp(role, "output") ? ROLE_OUT
                  : !strcmp(role, "workspace")                       ? ROLE_WS
                                                                     : -1;
        if (t->role < 0)
            return kh_err_set(err, KH_EINVAL, "tensors[%zu].role: input, output or workspace", i);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(ts[k].name, name))
                return kh_err_set(err, KH_EINVAL, "tensors[%zu]: duplicate name '%s'", i, name);
        if (t->role == ROLE_WS) {
            json_t *b = json_object_get(j, "bytes");
            if (!json_is_integer(b) || json_integer_value(b) < 0)
                return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s): bytes required", i, name);
            t->bytes = (size_t)json_integer_value(b);
            t->zero = json_is_true(json_object_get(j, "zero"));
            continue;
        }
        const char *dt = json_string_value(json_object_get(j, "dtype"));
        if (!dt || kh_dtype_parse(dt, &t->dtype, err))
            return kh_err_prefix(err, "tensors[%zu] (%s).dtype", i, name);
        t->has_dtype = 1;
        json_t *shape = json_object_get(j, "shape");
        if (!json_is_array(shape))
            return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s).shape: an array", i, name);
        t->numel = 1;
        size_t k;
        json_t *d;
        json_array_foreach(shape, k, d) {
            if (!json_is_integer(d) || json_integer_value(d) < 0)
                return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s).shape[%zu]: a size >= 0",
                                  i, name, k);
            uint64_t v = (uint64_t)json_integer_value(d);
            if (v && t->numel > UINT64_MAX / v)
                return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s): shape overflows", i, name);
            t->numel *= v;
        }
        t->bytes = kh_dtype_nbytes(t->dtype, t->numel);
        if (t->role == ROLE_IN) {
            json_t *gen = json_object_get(j, "gen");
            const char *kind = json_string_value(json_object_get(gen, "kind"));
            if (!kind)
                return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s).gen.kind required", i, name);
            if (!strcmp(kind, "random")) {
                t->gen = GEN_RANDOM;
                t->stream = (uint32_t)json_integer_value(json_object_get(gen, "stream"));
            } else if (!strcmp(kind, "dsa_kcache")) {
                t->gen = GEN_DSA_KCACHE;
                t->stream = (uint32_t)json_integer_value(json_object_get(gen, "stream"));
                if (json_array_size(shape) != 4 || t->dtype != KH_DTYPE_I8)
                    return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s): a dsa_kcache is int8 "
                                      "[num_pages, page_size, 1, head_dim + 4]", i, name);
                for (size_t q = 0; q < 4; q++)
                    t->dims[q] = (uint64_t)json_integer_value(json_array_get(shape, q));
                if (t->dims[2] != 1 || t->dims[3] <= 4)
                    return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s): a dsa_kcache is int8 "
                                      "[num_pages, page_size, 1, head_dim + 4]", i, name);
            } else if (!strcmp(kind, "scalar")) {
                t->gen = GEN_SCALAR;
                t->scalar = json_number_value(json_object_get(gen, "value"));
                if (t->bytes > 8)
                    return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s): a scalar has one "
                                      "element", i, name);
            } else if (!strcmp(kind, "bytes")) {
                t->gen = GEN_BYTES;
                char what[160];
                snprintf(what, sizeof what, "tensors[%zu] (%s)", i, name);
                kh_status st = kh_worker_gen_bytes(gen, payload_len, t->bytes, &t->pay_off,
                                                   &t->pay_len, what, err);
                if (st)
                    return st;
            } else {
                return kh_err_set(err, KH_EINVAL, "tensors[%zu] (%s).gen.kind: random, "
                                  "dsa_kcache, scalar or bytes", i, name);
            }
        }
    }
    *nt = json_array_size(arr);
    return KH_OK;
}

/* ---- buffers ------------------------------------------------------------------ */
/* The view of set k that a launch list binds against: the set's inputs, the
 * shared outputs and workspace. */
void gev_view(ev_run *r, int set, kh_launch_buf *out)
{
    for (size_t i = 0; i < r->nt; i++)
        out[i] = r->ts[i].role == ROLE_IN ? r->in[set][i] : r->shared[i];
}

kh_status gev_alloc_set(ev_run *r, kh_launch_buf *bufs, int roles_mask, kh_err *err)
{
    for (size_t i = 0; i < r->nt; i++) {
        if (!(roles_mask & (1 << r->ts[i].role)))
            continue;
        snprintf(bufs[i].name, sizeof bufs[i].name, "%s", r->ts[i].name);
        kh_status st = kh_gpu_buf_alloc(r->ev->g, r->ts[i].bytes, r->guard, &bufs[i].buf, err);
        if (st)
            return kh_err_prefix(err, "tensor '%s' (%zu bytes)", r->ts[i].name, r->ts[i].bytes);
    }
    return KH_OK;
}

void gev_free_set(ev_run *r, kh_launch_buf *bufs)
{
    for (size_t i = 0; i < r->nt; i++)
        if (bufs[i].buf.base)
            kh_gpu_buf_free(r->ev->g, &bufs[i].buf);
}

int gev_is_scalar_input(const ev_tensor *t)
{
    return t->role == ROLE_IN && t->numel == 1 && t->bytes && t->bytes <= 8;
}

/* Hand set's scalar values to every launch list that reads that set. */
void gev_apply_scalars(ev_run *r, int set)
{
    for (size_t i = 0; i < r->nt; i++) {
        if (!gev_is_scalar_input(&r->ts[i]))
            continue;
        if (set < r->nlists)
            kh_launch_set_scalar(&r->lists[set], r->ts[i].name, r->scal[set][i]);
    }
}

/* Fill set's inputs for seed; with fresh_only, the random ones alone (bytes
 * and workload scalars do not depend on the seed: they are filled once per
 * set, and again after a check found an input changed). */
kh_status gev_fill_inputs(ev_run *r, int set, uint64_t seed, int fresh_only, kh_err *err)
{
    r->set_seed[set] = seed;
    if (!r->set_fixed[set])
        fresh_only = 0;
    int made[MAX_TENSORS] = {0}, scalars = 0;
    for (size_t i = 0; i < r->nt; i++) {
        if (r->ts[i].role != ROLE_IN)
            continue;
        if (fresh_only && r->ts[i].gen != GEN_RANDOM && r->ts[i].gen != GEN_DSA_KCACHE)
            continue;
        kh_status st = generate(r->ev, &r->ts[i], r->in[set][i].buf.ptr, seed, r->payload, err);
        if (st)
            return kh_err_prefix(err, "generating input '%s'", r->ts[i].name);
        made[i] = 1;
        scalars |= gev_is_scalar_input(&r->ts[i]);
    }
    /* the generators run in stream order before whatever comes next; only
     * a scalar made in this fill, read back, waits for them (one that was
     * not keeps the value read when it was made: a workload's scalar, or
     * an input the set's last call may have written, which the watch
     * reports, is never read from the device again) */
    kh_status st = scalars ? kh_gpu_sync(r->ev->g, err) : KH_OK;
    /* A random scalar passed by value: its bits are whatever the generator
     * wrote, read back rather than recomputed, so they cannot differ. */
    for (size_t i = 0; i < r->nt && !st; i++) {
        if (!made[i] || !gev_is_scalar_input(&r->ts[i]))
            continue;
        unsigned char b[8] = {0};
        st = kh_gpu_check(r->ev->g, kh_gpu_api(r->ev->g)->cuMemcpyDtoH(b, r->in[set][i].buf.ptr,
                                                                        r->ts[i].bytes),
                          "cuMemcpyDtoH (scalar input)", err);
        uint64_t code = 0;
        for (int k = 7; k >= 0; k--)
            code = code << 8 | b[k];
        r->scal[set][i] = code;
    }
    if (!st)
        gev_apply_scalars(r, set);
    r->set_fixed[set] = !st;
    return st;
}

kh_status gev_zero_workspace(ev_run *r, kh_err *err)
{
    for (size_t i = 0; i < r->nt; i++)
        if (r->ts[i].role == ROLE_WS && r->ts[i].zero && r->ts[i].bytes) {
            kh_status st = kh_gpu_memset8(r->ev->g, r->shared[i].buf.ptr, 0, r->ts[i].bytes, err);
            if (st)
                return st;
        }
    return KH_OK;
}

/* ---- the reply payload ------------------------------------------------------- */
static kh_status obuf_reserve(obuf *o, size_t add, kh_err *err)
{
    if (o->n + add <= o->cap)
        return KH_OK;
    size_t nc = o->cap ? o->cap : 65536;
    while (nc < o->n + add)
        nc *= 2;
    unsigned char *np = realloc(o->p, nc);
    if (!np)
        return kh_err_set(err, KH_ENOMEM, "out of memory for %zu bytes of outputs", o->n + add);
    o->p = np;
    o->cap = nc;
    return KH_OK;
}

kh_status gev_obuf_add(obuf *o, const void *d, size_t n, size_t *off, kh_err *err)
{
    kh_status st = obuf_reserve(o, n, err);
    if (st)
        return st;
    if (n)
        memcpy(o->p + o->n, d, n);
    *off = o->n;
    o->n += n;
    return KH_OK;
}

/* Copy every output in bufs to the payload; returns {name: [off, len]}. */
json_t *gev_copy_outputs(ev_run *r, const kh_launch_buf *bufs, obuf *o, kh_err *err)
{
    json_t *m = json_object();
    for (size_t i = 0; i < r->nt; i++) {
        if (r->ts[i].role != ROLE_OUT)
            continue;
        size_t n = r->ts[i].bytes;
        if (obuf_reserve(o, n, err) ||
            kh_gpu_check(r->ev->g, kh_gpu_api(r->ev->g)->cuMemcpyDtoH(o->p + o->n, bufs[i].buf.ptr,
                                                                        n),
                         "cuMemcpyDtoH", err)) {
            json_decref(m);
            return NULL;
        }
        json_object_set_new(m, r->ts[i].name, json_pack("[I, I]", (json_int_t)o->n,
                                                        (json_int_t)n));
        o->n += n;
    }
    return m;
}

/* Copy element ranges of every output in bufs to the payload: the ranges
 * `want` names per output ({name: [[start, n], ...]}, a reference asked for
 * the ranges a candidate's call returned), else those kh_rng_ranges draws
 * for timed call `call`.  Returns {name: [off, len]} (the ranges' bytes one
 * after another) and sets *ranges_out to {name: [[start, n], ...]}. */
json_t *gev_copy_ranged(ev_run *r, const kh_launch_buf *bufs, const json_t *want, long call,
                        obuf *o, json_t **ranges_out, kh_err *err)
{
    json_t *m = json_object(), *rj = json_object();
    const kh_cuda_api *cu = kh_gpu_api(r->ev->g);
    for (size_t i = 0; i < r->nt; i++) {
        if (r->ts[i].role != ROLE_OUT)
            continue;
        uint64_t rg[MAX_RANGES][2];
        size_t n = 0;
        const json_t *wl = json_object_get(want, r->ts[i].name);
        if (want) {
            size_t k;
            json_t *e;
            if (!json_is_array(wl) || json_array_size(wl) > MAX_RANGES) {
                kh_err_set(err, KH_EINVAL, "ranges.%s: at most %d [start, n] pairs",
                           r->ts[i].name, MAX_RANGES);
                goto fail;
            }
            json_array_foreach(wl, k, e) {
                json_int_t a = json_integer_value(json_array_get(e, 0)),
                           b = json_integer_value(json_array_get(e, 1));
                if (a < 0 || b <= 0 || (a & 7) || (uint64_t)a + (uint64_t)b > r->ts[i].numel) {
                    kh_err_set(err, KH_EINVAL, "ranges.%s[%zu]: [start, n] within %llu elements, "
                               "start a multiple of 8", r->ts[i].name, k,
                               (unsigned long long)r->ts[i].numel);
                    goto fail;
                }
                rg[n][0] = (uint64_t)a;
                rg[n++][1] = (uint64_t)b;
            }
        } else {
            n = kh_rng_ranges(r->sample_seed, (uint64_t)call, i, r->ts[i].numel,
                              (size_t)r->rcount, r->relems, rg);
        }
        size_t start = o->n;
        json_t *list = json_array();
        json_object_set_new(rj, r->ts[i].name, list);
        for (size_t k = 0; k < n; k++) {
            size_t boff = kh_dtype_nbytes(r->ts[i].dtype, rg[k][0]);
            size_t blen = kh_dtype_nbytes(r->ts[i].dtype, rg[k][0] + rg[k][1]) - boff;
            if (obuf_reserve(o, blen, err) ||
                kh_gpu_check(r->ev->g, cu->cuMemcpyDtoH(o->p + o->n, bufs[i].buf.ptr + boff, blen),
                             "cuMemcpyDtoH", err))
                goto fail;
            o->n += blen;
            json_array_append_new(list, json_pack("[I, I]", (json_int_t)rg[k][0],
                                                  (json_int_t)rg[k][1]));
        }
        json_object_set_new(m, r->ts[i].name, json_pack("[I, I]", (json_int_t)start,
                                                        (json_int_t)(o->n - start)));
    }
    *ranges_out = rj;
    return m;
fail:
    json_decref(m);
    json_decref(rj);
    return NULL;
}

int gev_guards_ok(ev_run *r, const kh_launch_buf *bufs, char *why, size_t whyn)
{
    for (size_t i = 0; i < r->nt; i++) {
        if (!bufs[i].buf.base)
            continue;
        kh_err gerr;
        if (!kh_gpu_buf_guards_ok(r->ev->g, &bufs[i].buf, NULL, &gerr)) {
            snprintf(why, whyn, "tensor '%s': %s", r->ts[i].name, gerr.msg);
            return 0;
        }
    }
    return 1;
}

kh_status gev_input_sums(ev_run *r, int set, uint64_t *sums, kh_err *err)
{
    for (size_t i = 0; i < r->nt; i++) {
        sums[i] = 0;
        if (r->ts[i].role == ROLE_IN && r->ts[i].bytes) {
            kh_status st = gev_checksum(r->ev, r->in[set][i].buf.ptr, r->ts[i].bytes, &sums[i], err);
            if (st)
                return st;
        }
    }
    return KH_OK;
}

/* ---- the timing phase's watch -------------------------------------------------
 * Every call of the timing phase has its inputs and guard bands checked on
 * the device in stream order: the inputs' sums taken right after they are
 * filled (gev_watch_want, before the call) against their sums after the
 * call has finished (gev_watch_call).  Nothing waits for them and nothing
 * comes back until gev_watch_read, and every call gets the same checks, so
 * the gap after a call does not tell a verified one.  Each step is one
 * launch over a table of the set's buffers (gev_watch_setup).  Words: the
 * lowest key found so far, UINT64_MAX when none: guards (call << 32 |
 * tensor << 24 | side << 23 | byte), inputs (call << 32 | tensor); then the
 * blocks' shares of each input's sum after the call; then each set's
 * shares before it. */
#define WATCH_NOW 2
#define WATCH_WANT(set) (WATCH_NOW + ((size_t)(set) + 1) * MAX_TENSORS * WATCH_BLOCKS)

kh_status gev_watch_reset(kh_gpu_eval *ev, kh_err *err)
{
    CUstream s = kh_gpu_stream(ev->g);
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    kh_status st = kh_gpu_check(ev->g, cu->cuMemsetD32Async(ev->watch, 0xFFFFFFFFu, 4, s),
                                "cuMemsetD32Async (the timing watch)", err);
    /* every share 0: a tensor that is not an input sums to 0 both ways */
    return st ? st
              : kh_gpu_check(ev->g, cu->cuMemsetD32Async(ev->watch + 8 * WATCH_NOW, 0,
                                                         2 * (WATCH_WORDS - WATCH_NOW), s),
                             "cuMemsetD32Async (the timing watch)", err);
}

/* Whether a refill draws input t again (gev_fill_inputs' fresh_only). */
static int drawn_each_call(const ev_tensor *t)
{
    return t->gen == GEN_RANDOM || t->gen == GEN_DSA_KCACHE;
}

static void tab_put(uint64_t *tab, size_t *n, uint64_t addr, uint64_t bytes, uint64_t tag)
{
    if (3 * (*n + 1) > WATCH_TAB)
        return; /* not reached: at most 3 entries per tensor and set */
    tab[3 * *n] = addr;
    tab[3 * *n + 1] = bytes;
    tab[3 * *n + 2] = tag;
    (*n)++;
}

void gev_watch_setup(ev_run *r)
{
    uint64_t *tab = r->wtab;
    size_t n = 0;
    for (int set = 0; set < r->nsets; set++) {
        kh_launch_buf all[MAX_TENSORS];
        gev_view(r, set, all);
        ev_watch_set *w = &r->wset[set];
        w->guards = n;
        for (size_t i = 0; i < r->nt; i++) {
            const kh_gpu_buf *b = &all[i].buf;
            if (b->base && b->guard) {
                tab_put(tab, &n, b->base, b->guard, (uint64_t)i << 24);
                tab_put(tab, &n, b->ptr + b->bytes, b->guard, (uint64_t)i << 24 | 1u << 23);
            }
        }
        w->nguards = n - w->guards;
        /* the inputs each refill draws again, then the others */
        w->inputs = n;
        for (int pass = 0; pass < 2; pass++) {
            for (size_t i = 0; i < r->nt; i++)
                if (r->ts[i].role == ROLE_IN && r->ts[i].bytes &&
                    drawn_each_call(&r->ts[i]) == !pass)
                    tab_put(tab, &n, r->in[set][i].buf.ptr, r->ts[i].bytes, i);
            if (pass == 0)
                w->ndrawn = n - w->inputs;
        }
        w->ninputs = n - w->inputs;
    }
}

static kh_status watch_launch(kh_gpu_eval *ev, CUfunction fn, unsigned gx, unsigned gy,
                              void **args, kh_err *err)
{
    return kh_gpu_check(ev->g, kh_gpu_api(ev->g)->cuLaunchKernel(fn, gx, gy, 1, 256, 1, 1, 0,
                                                                 kh_gpu_stream(ev->g), args,
                                                                 NULL),
                        "cuLaunchKernel (the timing watch)", err);
}

/* A launch's share of the table: up to WATCH_CHUNK entries from `from`. */
static size_t tab_chunk(const ev_run *r, size_t from, size_t end, wtab_arg *t)
{
    size_t n = end - from < WATCH_CHUNK ? end - from : WATCH_CHUNK;
    memset(t, 0, sizeof *t);
    memcpy(t->e, r->wtab + 3 * from, n * 24);
    return n;
}

/* The sums of entries [from, from + n) of the table into the shares at base. */
static kh_status sums_into(ev_run *r, size_t from, size_t n, CUdeviceptr base, kh_err *err)
{
    kh_status st = KH_OK;
    for (size_t at = from, k; at < from + n && !st; at += k) {
        wtab_arg t;
        k = tab_chunk(r, at, from + n, &t);
        void *args[] = {&t, &base};
        st = watch_launch(r->ev, r->ev->sum_tab, WATCH_BLOCKS, (unsigned)k, args, err);
    }
    return st;
}

kh_status gev_watch_want(ev_run *r, int set, int all, kh_err *err)
{
    const ev_watch_set *w = &r->wset[set];
    return sums_into(r, w->inputs, all ? w->ninputs : w->ndrawn,
                     r->ev->watch + 8 * WATCH_WANT(set), err);
}

kh_status gev_watch_call(ev_run *r, int set, long k, int guards, int inputs, kh_err *err)
{
    kh_gpu_eval *ev = r->ev;
    const ev_watch_set *w = &r->wset[set];
    unsigned long long key = (unsigned long long)k << 32;
    CUdeviceptr first = ev->watch;
    kh_status st = KH_OK;
    size_t end = w->guards + (guards ? w->nguards : 0);
    for (size_t at = w->guards, n; at < end && !st; at += n) {
        wtab_arg t;
        n = tab_chunk(r, at, end, &t);
        unsigned int want = KH_GPU_GUARD_BYTE;
        void *args[] = {&t, &want, &key, &first};
        unsigned gx = (unsigned)((r->guard + 255) / 256);
        st = watch_launch(ev, ev->guard_tab, gx ? gx : 1, (unsigned)n, args, err);
    }
    if (!inputs || st || !w->ninputs)
        return st;
    /* the sums after the call against the set's sums before it */
    CUdeviceptr now = ev->watch + 8 * WATCH_NOW, want = ev->watch + 8 * WATCH_WANT(set);
    first = ev->watch + 8;
    st = sums_into(r, w->inputs, w->ninputs, now, err);
    unsigned int nb = WATCH_BLOCKS;
    void *args[] = {&now, &want, &nb, &key, &first};
    return st ? st : watch_launch(ev, ev->sums_tab, (unsigned)r->nt, 1, args, err);
}

kh_status gev_watch_read(kh_gpu_eval *ev, uint64_t first[2], kh_err *err)
{
    kh_status st = kh_gpu_sync(ev->g, err);
    if (!st)
        st = kh_gpu_check(ev->g, kh_gpu_api(ev->g)->cuMemcpyDtoH(first, ev->watch, 16),
                          "cuMemcpyDtoH (the timing watch)", err);
    return st;
}
