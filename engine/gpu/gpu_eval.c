/* gpu_eval.c: `evaluate` in the gpu worker (see gpu_eval.h and
 * docs/evaluation.md).  Owns the evaluation's buffers, the per-call checks and
 * the timed-output sampling; the timing loop itself is bench.c's and the
 * comparison with the reference is the coordinator's.  Besides cubins run
 * through launch lists, it calls the C entry of a trusted nvcc-built shared
 * object (backend cuda_so: a package's own solution such as a cuBLAS anchor,
 * never a candidate; the coordinator refuses those). */
#include "gpu/gpu_eval.h"

#include "gpu/bench.h"
#include "compile/compile.h"
#include "task/dtype.h"
#include "gpu/launch.h"
#include "task/rng.h"
#include "worker/worker.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TENSORS 64
#define MAX_SETS 8
#define GUARD 4096

enum { ROLE_IN, ROLE_OUT, ROLE_WS };
enum { GEN_NONE, GEN_RANDOM, GEN_SCALAR, GEN_BYTES, GEN_DSA_KCACHE };

typedef struct ev_tensor {
    char name[64];
    int role;
    kh_dtype dtype;
    int has_dtype;
    uint64_t numel;
    size_t bytes;
    int gen;
    uint32_t stream;
    double scalar;
    size_t pay_off, pay_len;
    int zero;
    uint64_t dims[4]; /* GEN_DSA_KCACHE: [num_pages, page_size, 1, head_dim + 4] */
} ev_tensor;

struct kh_gpu_eval {
    kh_engine *e;
    kh_gpu *g;
    kh_cupti *c;
    CUmodule rng_mod, util_mod;
    CUfunction rng_fill, rng_kcache, checksum;
    CUdeviceptr sum_buf;
};

static const char *checksum_src =
    "extern \"C\" __global__ void kh_checksum(const unsigned long long *p,\n"
    "    unsigned long long nwords, const unsigned char *tail, unsigned int ntail,\n"
    "    unsigned long long *out) {\n"
    "  unsigned long long acc = 0;\n"
    "  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "       i < nwords; i += (unsigned long long)gridDim.x * blockDim.x) {\n"
    "    unsigned long long x = p[i] ^ (i * 0x9E3779B97F4A7C15ull);\n"
    "    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;\n"
    "    x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33; acc += x; }\n"
    "  if (blockIdx.x == 0 && threadIdx.x == 0)\n"
    "    for (unsigned int j = 0; j < ntail; j++)\n"
    "      acc += ((unsigned long long)tail[j] + 1) * (0x100000001B3ull + j);\n"
    "  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);\n"
    "  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc); }\n";

kh_gpu_eval *kh_gpu_eval_new(kh_engine *e, kh_gpu *g, kh_cupti *c, kh_err *err)
{
    kh_gpu_eval *ev = calloc(1, sizeof *ev);
    if (!ev) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    ev->e = e;
    ev->g = g;
    ev->c = c;
    return ev;
}

void kh_gpu_eval_free(kh_gpu_eval *ev)
{
    if (!ev)
        return;
    if (!kh_gpu_poisoned(ev->g)) {
        const kh_cuda_api *cu = kh_gpu_api(ev->g);
        if (ev->sum_buf)
            cu->cuMemFree(ev->sum_buf);
        if (ev->rng_mod)
            cu->cuModuleUnload(ev->rng_mod);
        if (ev->util_mod)
            cu->cuModuleUnload(ev->util_mod);
    }
    free(ev);
}

/* The generator and the checksum kernel, compiled for this GPU once. */
static kh_status ensure_utils(kh_gpu_eval *ev, kh_err *err)
{
    if (ev->rng_fill)
        return KH_OK;
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    json_t *info = kh_gpu_info(ev->g);
    char arch[16];
    const char *cc = json_string_value(json_object_get(info, "compute_capability"));
    snprintf(arch, sizeof arch, "sm_%c%c", cc[0], cc[2]);
    json_decref(info);
    void *cubin = NULL;
    size_t n = 0;
    kh_status st = kh_rng_compile(ev->e, arch, &cubin, &n, err);
    if (st)
        return kh_err_prefix(err, "compiling the input generator");
    st = kh_gpu_check(ev->g, cu->cuModuleLoadData(&ev->rng_mod, cubin), "cuModuleLoadData", err);
    free(cubin);
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
    kh_compiler *cc_ = kh_compile_new(ev->e, err);
    if (!cc_)
        return err->code;
    const char *kernels[] = {"kh_checksum"};
    kh_compile_req req = {.source = checksum_src, .source_len = strlen(checksum_src),
                          .name = "kh_checksum.cu", .arch = arch, .kernels = kernels,
                          .n_kernels = 1, .trusted = 1, .no_pch = 1, .no_cache = 1};
    kh_artifact *a = NULL;
    st = kh_compile_build(cc_, &req, &a, err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuModuleLoadData(&ev->util_mod, a->cubin),
                          "cuModuleLoadData", err);
    kh_artifact_free(a);
    kh_compile_free(cc_);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuModuleGetFunction(&ev->checksum, ev->util_mod,
                                                         "kh_checksum"),
                          "cuModuleGetFunction", err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuMemAlloc(&ev->sum_buf, 8), "cuMemAlloc", err);
    return st;
}

static kh_status checksum(kh_gpu_eval *ev, CUdeviceptr p, size_t bytes, uint64_t *out,
                          kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    unsigned long long nwords = bytes / 8;
    CUdeviceptr tail = p + nwords * 8;
    unsigned int ntail = (unsigned int)(bytes % 8);
    void *args[] = {&p, &nwords, &tail, &ntail, &ev->sum_buf};
    kh_status st = kh_gpu_check(ev->g, cu->cuMemsetD8Async(ev->sum_buf, 0, 8,
                                                           kh_gpu_stream(ev->g)),
                                "cuMemsetD8Async", err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuLaunchKernel(ev->checksum, 264, 1, 1, 256, 1, 1, 0,
                                                    kh_gpu_stream(ev->g), args, NULL),
                          "cuLaunchKernel (checksum)", err);
    if (!st)
        st = kh_gpu_sync(ev->g, err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuMemcpyDtoH(out, ev->sum_buf, 8), "cuMemcpyDtoH", err);
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
static kh_status parse_tensors(const json_t *arr, size_t payload_len, ev_tensor *ts, size_t *nt,
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
typedef struct ev_run {
    kh_gpu_eval *ev;
    const json_t *launches;
    const unsigned char *payload;
    ev_tensor ts[MAX_TENSORS];
    size_t nt;
    /* in[set] holds every input's buffer for that input set; outputs and
     * workspace are one set of buffers that every call writes */
    kh_launch_buf in[MAX_SETS][MAX_TENSORS];
    kh_launch_buf shared[MAX_TENSORS]; /* outputs and workspace */
    int nsets;
    CUmodule mod;
    kh_launch_list lists[MAX_SETS];
    int nlists;
    uint64_t set_seed[MAX_SETS];
    int set_fixed[MAX_SETS]; /* the set's bytes and scalar inputs are in place */
    /* the bits of each one-element input per set, for {"scalar": name}
     * arguments passed by value (read back from the device after a fill) */
    uint64_t scal[MAX_SETS][MAX_TENSORS];
    /* timing state: k (call) counts every call of the timing phase, warm-up
     * included; the call's input set is k mod nsets, refilled before it
     * from the seed derived from (timing_seed, k) */
    int timed, trial, poison;
    long call;
    int cur_set;
    uint64_t timing_seed, sample_seed;
    double verify_p;       /* a timed call is verified with this probability (secret draw) */
    int max_verified, nverified, verify_now;
    int rcount;            /* > 0: a verified call returns rcount ranges of relems elements */
    uint64_t relems;       /* per output (kh_rng_ranges), not the whole outputs */
    int inputs_check, guards_check;
    json_t *timed_outputs, *failures;
    struct obuf *out;      /* the reply payload */
    size_t guard;    /* guard band bytes per side (GUARD; 0 under compute-sanitizer) */
    /* what the launch lists were bound against */
    kh_launch_buf views[MAX_SETS][MAX_TENSORS];
    /* cuda_so: the loaded object and its entry instead of launch lists */
    struct so_entry *so;
} ev_run;

/* The view of set k that a launch list binds against: the set's inputs, the
 * shared outputs and workspace. */
static void view(ev_run *r, int set, kh_launch_buf *out)
{
    for (size_t i = 0; i < r->nt; i++)
        out[i] = r->ts[i].role == ROLE_IN ? r->in[set][i] : r->shared[i];
}

static kh_status alloc_set(ev_run *r, kh_launch_buf *bufs, int roles_mask, kh_err *err)
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

static void free_set(ev_run *r, kh_launch_buf *bufs)
{
    for (size_t i = 0; i < r->nt; i++)
        if (bufs[i].buf.base)
            kh_gpu_buf_free(r->ev->g, &bufs[i].buf);
}

static int is_scalar_input(const ev_tensor *t)
{
    return t->role == ROLE_IN && t->numel == 1 && t->bytes && t->bytes <= 8;
}

/* Hand set's scalar values to every launch list that reads that set. */
static void apply_scalars(ev_run *r, int set)
{
    for (size_t i = 0; i < r->nt; i++) {
        if (!is_scalar_input(&r->ts[i]))
            continue;
        if (set < r->nlists)
            kh_launch_set_scalar(&r->lists[set], r->ts[i].name, r->scal[set][i]);
    }
}

/* Fill set's inputs for seed; with fresh_only, the random ones alone (bytes
 * and workload scalars do not depend on the seed: they are filled once per
 * set, and again after a check found an input changed). */
static kh_status fill_inputs(ev_run *r, int set, uint64_t seed, int fresh_only, kh_err *err)
{
    r->set_seed[set] = seed;
    if (!r->set_fixed[set])
        fresh_only = 0;
    for (size_t i = 0; i < r->nt; i++) {
        if (r->ts[i].role != ROLE_IN)
            continue;
        if (fresh_only && r->ts[i].gen != GEN_RANDOM && r->ts[i].gen != GEN_DSA_KCACHE)
            continue;
        kh_status st = generate(r->ev, &r->ts[i], r->in[set][i].buf.ptr, seed, r->payload, err);
        if (st)
            return kh_err_prefix(err, "generating input '%s'", r->ts[i].name);
    }
    kh_status st = kh_gpu_sync(r->ev->g, err);
    /* A random scalar passed by value: its bits are whatever the generator
     * wrote, read back rather than recomputed, so they cannot differ. */
    for (size_t i = 0; i < r->nt && !st; i++) {
        if (!is_scalar_input(&r->ts[i]))
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
        apply_scalars(r, set);
    r->set_fixed[set] = !st;
    return st;
}

static kh_status zero_workspace(ev_run *r, kh_err *err)
{
    for (size_t i = 0; i < r->nt; i++)
        if (r->ts[i].role == ROLE_WS && r->ts[i].zero && r->ts[i].bytes) {
            kh_status st = kh_gpu_memset8(r->ev->g, r->shared[i].buf.ptr, 0, r->ts[i].bytes, err);
            if (st)
                return st;
        }
    return KH_OK;
}

/* ---- trusted shared objects (cuda_so) ----------------------------------------
 * The entry is called as if it took 16 integer-class and 8 floating-point
 * arguments: under the x86-64 System V and AArch64 calling conventions the
 * callee's own parameters (at most 15 integers or pointers, then the stream,
 * and 8 floats or doubles) land where it expects them, in order per class;
 * extra integer slots are ignored.  A float travels in the low 32 bits of its
 * register.  The entry returns 0 on success. */
typedef int (*so_fn)(long, long, long, long, long, long, long, long, long, long, long, long,
                     long, long, long, long, double, double, double, double, double, double,
                     double, double);
enum { SA_PTR, SA_INT, SA_F32, SA_F64 };
#define SO_MAX_INT 15 /* the stream takes the next integer slot */
#define SO_MAX_FP 8

typedef struct so_entry {
    void *handle;
    so_fn fn;
    void (*fini)(void);
    char symbol[128];
    int nargs;
    struct {
        int kind;
        size_t tensor;
        long i;
        double f;
    } a[SO_MAX_INT + SO_MAX_FP];
} so_entry;

static void so_unload(so_entry *x)
{
    if (!x)
        return;
    if (x->fini)
        x->fini(); /* e.g. cublasDestroy: the handle and its workspace go now */
    if (x->handle)
        dlclose(x->handle);
    free(x);
}

/* Write the object to a private file, dlopen it, unlink it; find the entry
 * and its optional <symbol>_fini.  Then parse the entry's arguments against
 * the request's tensors. */
static kh_status so_load(ev_run *r, const unsigned char *img, size_t n, const json_t *entry,
                         kh_err *err)
{
    const char *symbol = json_string_value(json_object_get(entry, "symbol"));
    const json_t *args = json_object_get(entry, "args");
    if (!symbol || !*symbol || strlen(symbol) > 100 || !json_is_array(args))
        return kh_err_set(err, KH_EINVAL, "entry: {symbol, args} is required with a shared "
                          "object artifact");
    so_entry *x = calloc(1, sizeof *x);
    if (!x)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    snprintf(x->symbol, sizeof x->symbol, "%s", symbol);
    int ni = 0, nf = 0;
    size_t i;
    json_t *a;
    json_array_foreach(args, i, a) {
        const char *key;
        json_t *val;
        int ok = json_object_size(a) == 1, k = -1;
        if (x->nargs >= SO_MAX_INT + SO_MAX_FP) {
            so_unload(x);
            return kh_err_set(err, KH_EUNSUPPORTED, "entry: more than %d arguments",
                              SO_MAX_INT + SO_MAX_FP);
        }
        json_object_foreach(a, key, val) {
            if (!strcmp(key, "tensor") && json_is_string(val)) {
                for (size_t t = 0; t < r->nt; t++)
                    if (!strcmp(r->ts[t].name, json_string_value(val))) {
                        x->a[x->nargs].tensor = t;
                        k = SA_PTR;
                    }
                if (k < 0) {
                    so_unload(x);
                    return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: no tensor '%s'", i,
                                      json_string_value(val));
                }
            } else if ((!strcmp(key, "i32") || !strcmp(key, "i64")) && json_is_integer(val)) {
                k = SA_INT;
                x->a[x->nargs].i = (long)json_integer_value(val);
            } else if ((!strcmp(key, "u32") || !strcmp(key, "u64")) && json_is_integer(val)) {
                k = SA_INT;
                x->a[x->nargs].i = (long)(uint64_t)json_integer_value(val);
            } else if ((!strcmp(key, "f32") || !strcmp(key, "f64")) && json_is_number(val)) {
                k = !strcmp(key, "f32") ? SA_F32 : SA_F64;
                x->a[x->nargs].f = json_number_value(val);
            } else if (!strcmp(key, "scalar")) {
                so_unload(x);
                return kh_err_set(err, KH_EUNSUPPORTED, "entry.args[%zu]: a random scalar input "
                                  "is not supported by the gpu worker yet; give the workload a "
                                  "scalar value", i);
            } else {
                ok = 0;
            }
        }
        if (!ok || k < 0) {
            so_unload(x);
            return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: expected one of "
                              "{tensor|i32|i64|u32|u64|f32|f64: value}", i);
        }
        if ((k == SA_F32 || k == SA_F64) ? ++nf > SO_MAX_FP : ++ni > SO_MAX_INT) {
            so_unload(x);
            return kh_err_set(err, KH_EUNSUPPORTED, "entry: at most %d integer or pointer and %d "
                              "floating-point arguments (the stream comes last)", SO_MAX_INT,
                              SO_MAX_FP);
        }
        x->a[x->nargs++].kind = k;
    }

    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/khlua-gpu-XXXXXX.so", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemps(path, 3);
    if (fd < 0) {
        so_unload(x);
        return kh_err_set(err, KH_EIO, "cannot create a temporary file for the shared object: %s",
                          strerror(errno));
    }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, img + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(path);
            so_unload(x);
            return kh_err_set(err, KH_EIO, "cannot write the shared object: %s", strerror(e));
        }
        off += (size_t)w;
    }
    close(fd);
    x->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unlink(path);
    if (!x->handle) {
        kh_status st = kh_err_set(err, KH_ECOMPILE, "cannot load the shared object: %s",
                                  dlerror());
        so_unload(x);
        return st;
    }
    dlerror();
    void *f = dlsym(x->handle, symbol);
    if (!f) {
        so_unload(x);
        return kh_err_set(err, KH_ECOMPILE, "entry symbol '%s' not found in the shared object",
                          symbol);
    }
    memcpy(&x->fn, &f, sizeof f); /* object pointer to function pointer (POSIX allows it) */
    char fini[160];
    snprintf(fini, sizeof fini, "%s_fini", symbol);
    void *g = dlsym(x->handle, fini);
    if (g)
        memcpy(&x->fini, &g, sizeof g);
    so_unload(r->so);
    r->so = x;
    return KH_OK;
}

/* One call of the entry against the buffers of a view, on the GPU's stream. */
static kh_status so_call(ev_run *r, const kh_launch_buf *bufs, kh_err *err)
{
    const so_entry *x = r->so;
    long iv[16] = {0};
    double fv[SO_MAX_FP] = {0};
    int ni = 0, nf = 0;
    for (int k = 0; k < x->nargs; k++) {
        switch (x->a[k].kind) {
        case SA_PTR: iv[ni++] = (long)bufs[x->a[k].tensor].buf.ptr; break;
        case SA_INT: iv[ni++] = x->a[k].i; break;
        case SA_F32: {
            float f = (float)x->a[k].f;
            uint64_t bits = 0;
            memcpy(&bits, &f, sizeof f);
            memcpy(&fv[nf++], &bits, sizeof bits);
            break;
        }
        default: fv[nf++] = x->a[k].f; break;
        }
    }
    iv[ni] = (long)(uintptr_t)kh_gpu_stream(r->ev->g);
    int rc = x->fn(iv[0], iv[1], iv[2], iv[3], iv[4], iv[5], iv[6], iv[7], iv[8], iv[9], iv[10],
                   iv[11], iv[12], iv[13], iv[14], iv[15], fv[0], fv[1], fv[2], fv[3], fv[4],
                   fv[5], fv[6], fv[7]);
    if (rc)
        return kh_err_set(err, KH_ECUDA, "the trusted entry '%s' returned %d", x->symbol, rc);
    return KH_OK;
}

/* A launch list, or for cuda_so the entry on the list's view. */
static kh_status enqueue(ev_run *r, kh_launch_list *l, const kh_launch_buf *view_bufs,
                         kh_err *err)
{
    return r->so ? so_call(r, view_bufs, err) : kh_launch_enqueue(l, err);
}

static kh_status bind_lists(ev_run *r, kh_err *err)
{
    if (r->so) { /* no launch lists: the entry takes the views' buffers */
        for (int k = 0; k < r->nsets; k++)
            view(r, k, r->views[k]);
        return KH_OK;
    }
    for (int k = 0; k < r->nlists; k++)
        kh_launch_free(&r->lists[k]);
    r->nlists = 0;
    for (int k = 0; k < r->nsets; k++) {
        view(r, k, r->views[k]);
        kh_status st = kh_launch_bind(r->ev->g, r->mod, r->launches, r->views[k], r->nt,
                                      &r->lists[k], err);
        if (st)
            return st;
        r->nlists++;
    }
    /* {"scalar": name} must name a one-element input */
    for (size_t l = 0; r->nlists && l < r->lists[0].nlaunches; l++) {
        const kh_launch_one *o = &r->lists[0].launches[l];
        for (int i = 0; i < o->nargs; i++)
            if (o->scalar_of[i] && !is_scalar_input(&r->ts[o->scalar_of[i] - 1]))
                return kh_err_set(err, KH_EINVAL, "launches[%zu].args[%d]: '%s' is not a "
                                  "one-element input; only those pass by value", l, i,
                                  r->ts[o->scalar_of[i] - 1].name);
    }
    for (int k = 0; k < r->nsets; k++)
        apply_scalars(r, k);
    return KH_OK;
}

/* ---- the reply payload ------------------------------------------------------- */
typedef struct obuf {
    unsigned char *p;
    size_t n, cap;
} obuf;

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

/* Copy every output in bufs to the payload; returns {name: [off, len]}. */
static json_t *copy_outputs(ev_run *r, const kh_launch_buf *bufs, obuf *o, kh_err *err)
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

#define MAX_RANGES 256

/* Copy element ranges of every output in bufs to the payload: the ranges
 * `want` names per output ({name: [[start, n], ...]}, a reference asked for
 * the ranges a candidate's call returned), else those kh_rng_ranges draws
 * for timed call `call`.  Returns {name: [off, len]} (the ranges' bytes one
 * after another) and sets *ranges_out to {name: [[start, n], ...]}. */
static json_t *copy_ranged(ev_run *r, const kh_launch_buf *bufs, const json_t *want, long call,
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

static int guards_ok(ev_run *r, const kh_launch_buf *bufs, char *why, size_t whyn)
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

static kh_status input_sums(ev_run *r, int set, uint64_t *sums, kh_err *err)
{
    for (size_t i = 0; i < r->nt; i++) {
        sums[i] = 0;
        if (r->ts[i].role == ROLE_IN && r->ts[i].bytes) {
            kh_status st = checksum(r->ev, r->in[set][i].buf.ptr, r->ts[i].bytes, &sums[i], err);
            if (st)
                return st;
        }
    }
    return KH_OK;
}

static void add_failure(json_t *failures, const char *check, int trial, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_failure(json_t *failures, const char *check, int trial, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_array_append_new(failures, json_pack("{s:s, s:i, s:s}", "check", check, "trial", trial,
                                              "detail", buf));
}

/* ---- the timing target -----------------------------------------------------------
 * Every call of the timing phase looks the same to the kernel: before it
 * (outside any timing window) its input set is refilled with inputs no call
 * has seen, from a seed derived from the secret timing seed and the call's
 * number, its outputs are poisoned and its workspace zeroed; every call
 * writes the same output buffers.  Which timed calls are verified is drawn
 * from the secret sample seed; a verified call's outputs are copied back
 * after it has finished (its window closed), so nothing a kernel can see
 * while it runs tells it apart. */
static uint64_t call_seed(const ev_run *r, long k)
{
    return kh_rng_derive_seed(r->timing_seed, 0x7F, (uint64_t)k) & INT64_MAX;
}

static int verify_draw(const ev_run *r, long k)
{
    if (r->verify_p <= 0 || r->nverified >= r->max_verified)
        return 0;
    if (r->verify_p >= 1)
        return 1;
    uint64_t h = kh_rng_derive_seed(r->sample_seed, 0x5E, (uint64_t)k);
    return (double)(h >> 11) * 0x1p-53 < r->verify_p;
}

static kh_status tgt_before(void *ctx, kh_err *err)
{
    ev_run *r = ctx;
    long k = r->call;
    int set = (int)(k % r->nsets);
    kh_status st = fill_inputs(r, set, call_seed(r, k), 1, err);
    if (st)
        return kh_err_prefix(err, "timing call %ld", k);
    r->cur_set = set;
    r->verify_now = r->timed && verify_draw(r, k);
    unsigned char pat = (k & 1) ? 0x7F : 0xFF;
    for (size_t i = 0; i < r->nt && r->poison; i++)
        if (r->ts[i].role == ROLE_OUT && r->ts[i].bytes &&
            (st = kh_gpu_memset8(r->ev->g, r->shared[i].buf.ptr, pat, r->ts[i].bytes, err)))
            return st;
    return zero_workspace(r, err);
}

static kh_status tgt_call(void *ctx, kh_err *err)
{
    ev_run *r = ctx;
    r->call++;
    return enqueue(r, &r->lists[r->cur_set], r->views[r->cur_set], err);
}

/* After a timed call has finished: a verified one's outputs go back with the
 * seed of its inputs, and its inputs and guard bands are checked. */
static kh_status tgt_after(void *ctx, kh_err *err)
{
    ev_run *r = ctx;
    if (!r->verify_now)
        return KH_OK;
    r->verify_now = 0;
    r->nverified++;
    long k = r->call - 1;
    int set = r->cur_set;
    json_t *ranges = NULL;
    json_t *outs = r->rcount > 0 ? copy_ranged(r, r->shared, NULL, k, r->out, &ranges, err)
                                 : copy_outputs(r, r->shared, r->out, err);
    if (!outs)
        return err->code;
    json_t *to = json_pack("{s:I, s:i, s:I, s:o}", "seed", (json_int_t)r->set_seed[set], "set",
                           set, "call", (json_int_t)k, "outputs", outs);
    if (ranges)
        json_object_set_new(to, "ranges", ranges);
    json_array_append_new(r->timed_outputs, to);
    if (r->guards_check) {
        kh_launch_buf all[MAX_TENSORS];
        view(r, set, all);
        char why[600];
        if (!guards_ok(r, all, why, sizeof why))
            add_failure(r->failures, "guards", -1, "during timing (call %ld): %s", k, why);
    }
    if (r->inputs_check) {
        /* the set's true sums: regenerated into nothing but the checksum */
        uint64_t now[MAX_TENSORS], want[MAX_TENSORS];
        kh_status st = input_sums(r, set, now, err);
        if (!st)
            st = fill_inputs(r, set, r->set_seed[set], 0, err);
        if (!st)
            st = input_sums(r, set, want, err);
        for (size_t i = 0; i < r->nt && !st; i++)
            if (r->ts[i].role == ROLE_IN && now[i] != want[i]) {
                add_failure(r->failures, "inputs_unchanged", -1,
                            "during timing (call %ld): input '%s' changed during the call", k,
                            r->ts[i].name);
                break;
            }
        if (st)
            return st;
    }
    return KH_OK;
}

static kh_status tgt_trial(void *ctx, int t, kh_err *err)
{
    (void)err;
    ((ev_run *)ctx)->trial = t;
    return KH_OK;
}

static void tgt_phase(void *ctx, int timed) { ((ev_run *)ctx)->timed = timed; }

static json_t *bench_json(const kh_bench_result *b)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:I}",
                          "status", b->status, "why", b->why, "timer", b->timer, "latency_ns",
                          b->latency_ns, "window_latency_ns", b->window_latency_ns, "median_ns",
                          b->median_ns, "mean_ns", b->mean_ns, "stdev_ns", b->stdev_ns,
                          "min_ns", b->min_ns, "sum_kernel_ns", b->sum_kernel_ns,
                          "kernels_per_call", b->kernels_per_call, "trials", b->trials, "n",
                          (json_int_t)b->n);
    json_object_set_new(j, "gap_ns", json_real(b->gap_ns));
    json_t *s = json_array();
    for (size_t i = 0; i < b->n; i++)
        json_array_append_new(s, json_real(b->samples_ns[i]));
    json_object_set_new(j, "samples_ns", s);
    json_t *tm = json_array();
    for (int i = 0; i < b->trials; i++)
        json_array_append_new(tm, json_real(b->trial_median_ns[i]));
    json_object_set_new(j, "trial_median_ns", tm);
    return j;
}

static kh_status load_module(ev_run *r, const unsigned char *img, size_t n, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(r->ev->g);
    if (r->mod) {
        cu->cuModuleUnload(r->mod);
        r->mod = NULL;
    }
    unsigned char *copy = malloc(n + 1);
    if (!copy)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    memcpy(copy, img, n);
    copy[n] = 0;
    kh_status st = kh_gpu_check(r->ev->g, cu->cuModuleLoadData(&r->mod, copy),
                                "cuModuleLoadData", err);
    free(copy);
    return st;
}

kh_status kh_gpu_evaluate(kh_gpu_eval *ev, const json_t *params, const unsigned char *payload,
                          size_t payload_len, json_t **result, unsigned char **out,
                          size_t *out_len, kh_err *err)
{
    ev_run *r = calloc(1, sizeof *r);
    if (!r)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    r->ev = ev;
    r->payload = payload;
    /* "guard_bytes": 0 gives every buffer an allocation of its own exact
     * size, so that compute-sanitizer's memcheck sees a write just past it
     * (a guard band would be inside the allocation, invisible to it) */
    json_t *gb = json_object_get(params, "guard_bytes");
    r->guard = json_is_integer(gb) && json_integer_value(gb) >= 0 &&
                       json_integer_value(gb) <= (1 << 20)
                   ? (size_t)json_integer_value(gb)
                   : GUARD;
    obuf o = {0};
    json_t *res = NULL, *failures = json_array(), *trials_out = json_array();
    kh_status st = ensure_utils(ev, err);
    size_t aoff = 0, alen = 0;
    json_t *art = json_object_get(params, "artifact");
    const char *kind = json_string_value(json_object_get(art, "kind"));
    const int is_so = kind && !strcmp(kind, "so");
    if (!st && (!kind || (strcmp(kind, "cubin") && !is_so)))
        st = kh_err_set(err, KH_EINVAL, "artifact.kind must be \"cubin\" (or \"so\", a trusted "
                        "shared object with an entry) for the gpu worker");
    if (!st)
        st = kh_worker_slice(json_object_get(art, "payload"), payload_len, &aoff, &alen,
                             "artifact", err);
    if (!st)
        st = parse_tensors(json_object_get(params, "tensors"), payload_len, r->ts, &r->nt, err);
    r->launches = json_object_get(params, "launches");
    if (!st && !is_so && !json_is_array(r->launches))
        st = kh_err_set(err, KH_EINVAL, "launches: an array is required for the gpu worker");
    json_t *trials = json_object_get(params, "trials");
    if (!st && (!json_is_array(trials) || json_array_size(trials) == 0))
        st = kh_err_set(err, KH_EINVAL, "trials: a non-empty array of {seed} is required");
    json_t *checks = json_object_get(params, "checks");
    int poison = json_is_true(json_object_get(checks, "poison"));
    int inputs_check = json_is_true(json_object_get(checks, "inputs_unchanged"));
    int guards_check = json_is_true(json_object_get(checks, "guards"));
    int det_check = json_is_true(json_object_get(checks, "deterministic"));
    int reload = json_is_true(json_object_get(checks, "reload_before_timing"));
    json_t *timing = json_object_get(params, "timing");
    if (json_is_null(timing))
        timing = NULL;

    /* set 0 serves the correctness trials */
    r->nsets = 1;
    if (!st)
        st = is_so ? so_load(r, payload + aoff, alen, json_object_get(params, "entry"), err)
                   : load_module(r, payload + aoff, alen, err);
    if (!st)
        st = alloc_set(r, r->in[0], 1 << ROLE_IN, err);
    if (!st)
        st = alloc_set(r, r->shared, (1 << ROLE_OUT) | (1 << ROLE_WS), err);
    if (!st)
        st = bind_lists(r, err);

    /* ---- correctness trials ---- */
    size_t ti;
    json_t *tj;
    json_array_foreach(trials, ti, tj) {
        if (st)
            break;
        uint64_t seed = (uint64_t)json_integer_value(json_object_get(tj, "seed"));
        json_t *trial = json_pack("{s:I}", "seed", (json_int_t)seed);
        json_t *tchecks = json_object();
        uint64_t before[MAX_TENSORS], after[MAX_TENSORS];
        st = fill_inputs(r, 0, seed, 0, err);
        if (!st)
            st = input_sums(r, 0, before, err);
        const unsigned char patterns[2] = {0xFF, 0x7F};
        int npat = poison ? 2 : 1;
        size_t first_off = 0, first_len = 0;
        for (int pi = 0; pi < npat && !st; pi++) {
            /* Poison the outputs (parity runs leave them as they are, like
             * FlashInfer-Bench's torch.empty). */
            for (size_t i = 0; i < r->nt && !st && poison; i++)
                if (r->ts[i].role == ROLE_OUT && r->ts[i].bytes)
                    st = kh_gpu_memset8(ev->g, r->shared[i].buf.ptr, patterns[pi],
                                        r->ts[i].bytes, err);
            if (!st)
                st = zero_workspace(r, err);
            if (!st)
                st = enqueue(r, &r->lists[0], r->views[0], err);
            if (!st)
                st = kh_gpu_sync(ev->g, err);
            if (st)
                break;
            size_t start = o.n;
            json_t *want = json_object_get(tj, "ranges"), *got = NULL;
            json_t *outs = want ? copy_ranged(r, r->shared, want, 0, &o, &got, err)
                                : copy_outputs(r, r->shared, &o, err);
            if (!outs) {
                st = err->code;
                break;
            }
            if (got)
                json_object_set_new(trial, "ranges", got);
            if (pi == 0) {
                first_off = start;
                first_len = o.n - start;
            } else {
                int same = first_len == o.n - start &&
                           (!first_len || !memcmp(o.p + first_off, o.p + start, first_len));
                if (det_check)
                    json_object_set_new(tchecks, "deterministic",
                                        json_string(same ? "ok" : "differs"));
                if (same) {
                    /* bit-identical under both poisons (so every byte was
                     * written): the second copy is not sent, the
                     * coordinator judges it once */
                    o.n = start;
                    json_decref(outs);
                    outs = json_deep_copy(json_object_get(trial, "outputs"));
                    json_object_set_new(trial, "outputs_b_same", json_true());
                }
            }
            json_object_set_new(trial, pi == 0 ? "outputs" : "outputs_b", outs);
            if (guards_check) {
                kh_launch_buf all[MAX_TENSORS];
                view(r, 0, all);
                char why[600];
                if (!guards_ok(r, all, why, sizeof why)) {
                    json_object_set_new(tchecks, "guards", json_string(why));
                    add_failure(failures, "guards", (int)ti, "%s", why);
                } else if (!json_object_get(tchecks, "guards")) {
                    json_object_set_new(tchecks, "guards", json_string("ok"));
                }
            }
            if (inputs_check) {
                st = input_sums(r, 0, after, err);
                for (size_t i = 0; i < r->nt && !st; i++)
                    if (r->ts[i].role == ROLE_IN && before[i] != after[i] &&
                        !json_object_get(tchecks, "inputs_unchanged")) {
                        char why[160];
                        snprintf(why, sizeof why, "input '%s' changed during the call",
                                 r->ts[i].name);
                        json_object_set_new(tchecks, "inputs_unchanged", json_string(why));
                        add_failure(failures, "inputs_unchanged", (int)ti, "%s", why);
                    }
                /* The next pattern starts from the true inputs again. */
                if (!st && pi + 1 < npat && json_object_get(tchecks, "inputs_unchanged"))
                    st = fill_inputs(r, 0, seed, 0, err);
            }
        }
        if (inputs_check && !json_object_get(tchecks, "inputs_unchanged"))
            json_object_set_new(tchecks, "inputs_unchanged", json_string("ok"));
        json_object_set_new(trial, "checks", tchecks);
        json_array_append_new(trials_out, trial);
    }

    /* ---- timing ---- */
    json_t *timing_out = NULL, *timed_outputs = json_array();
    if (!st && timing) {
        kh_protocol proto = KH_PROTO_OFFICIAL;
        const char *ps = json_string_value(json_object_get(timing, "protocol"));
        if (ps && !kh_protocol_parse(ps, &proto))
            st = kh_err_set(err, KH_EINVAL, "timing.protocol: official, screen or precise");
        kh_bench_opts bo;
        kh_bench_defaults(proto, &bo);
        json_t *v;
        if ((v = json_object_get(timing, "warmup"))) bo.warmup = (int)json_integer_value(v);
        if ((v = json_object_get(timing, "iters"))) bo.iters = (int)json_integer_value(v);
        if ((v = json_object_get(timing, "trials"))) bo.trials = (int)json_integer_value(v);
        if ((v = json_object_get(timing, "max_iters"))) bo.max_iters = (int)json_integer_value(v);
        if ((v = json_object_get(timing, "use_events"))) bo.use_events = json_is_true(v);
        if ((v = json_object_get(timing, "cold"))) bo.cold_l2 = json_is_true(v);
        int rot = (v = json_object_get(timing, "rotate_inputs")) ? (int)json_integer_value(v) : 1;
        rot = rot < 1 ? 1 : rot > MAX_SETS ? MAX_SETS : rot;
        /* The timing inputs come from their own seed (never a correctness
         * trial's), as does the schedule of verified calls: the coordinator
         * draws both per evaluation; without them, derived from trial 0. */
        uint64_t seed0 = (uint64_t)json_integer_value(json_object_get(json_array_get(trials, 0),
                                                                      "seed"));
        r->timing_seed = (v = json_object_get(timing, "seed")) ? (uint64_t)json_integer_value(v)
                                                               : kh_rng_derive_seed(seed0, 0x7171, 0);
        r->sample_seed = (v = json_object_get(timing, "sample_seed"))
                             ? (uint64_t)json_integer_value(v)
                             : kh_rng_derive_seed(seed0, 0x5A11, 0);
        r->verify_p = json_number_value(json_object_get(timing, "verify_timed_fraction"));
        r->max_verified = (v = json_object_get(timing, "max_verified")) ? (int)json_integer_value(v)
                                                                        : 256;
        json_t *vr = json_object_get(timing, "verify_ranges");
        r->rcount = (int)json_integer_value(json_object_get(vr, "count"));
        r->relems = (uint64_t)json_integer_value(json_object_get(vr, "elems"));
        if (r->rcount < 0 || r->rcount > MAX_RANGES)
            st = kh_err_set(err, KH_EINVAL, "timing.verify_ranges.count: 0 to %d", MAX_RANGES);
        r->inputs_check = inputs_check;
        r->guards_check = guards_check;
        r->timed_outputs = timed_outputs;
        r->failures = failures;
        r->out = &o;
        for (int k = 1; k < rot && !st; k++, r->nsets++)
            st = alloc_set(r, r->in[k], 1 << ROLE_IN, err);
        /* a fresh module before timing, so no state survives from the checked
         * calls; a trusted shared object keeps its state (a cuBLAS handle) */
        if (!st && reload && !is_so)
            st = load_module(r, payload + aoff, alen, err);
        if (!st)
            st = bind_lists(r, err);
        kh_bench_result br;
        memset(&br, 0, sizeof br);
        kh_gpu_clocks cb, ca;
        if (!st) {
            kh_bench_target t = {.call = tgt_call, .trial = tgt_trial, .phase = tgt_phase,
                                 .before = tgt_before, .after = tgt_after, .ctx = r};
            r->poison = poison;
            kh_gpu_reset_l2_persisting(ev->g, NULL);
            kh_gpu_read_clocks(ev->g, &cb);
            st = kh_bench_run(ev->g, ev->c, &t, &bo, &br, err);
            kh_gpu_read_clocks(ev->g, &ca);
        }
        if (!st) {
            timing_out = bench_json(&br);
            json_object_set_new(timing_out, "protocol", json_string(kh_protocol_name(proto)));
            json_object_set_new(timing_out, "rotate_inputs", json_integer(rot));
            json_object_set_new(timing_out, "calls", json_integer(r->call));
            json_object_set_new(timing_out, "verified_calls", json_integer(r->nverified));
            json_object_set_new(timing_out, "clocks_before", kh_gpu_clocks_json(&cb));
            json_object_set_new(timing_out, "clocks_after", kh_gpu_clocks_json(&ca));
            if (guards_check && !st) {
                char why[600];
                for (int k = 0; k < r->nsets; k++) {
                    kh_launch_buf all[MAX_TENSORS];
                    view(r, k, all);
                    if (!guards_ok(r, all, why, sizeof why)) {
                        add_failure(failures, "guards", -1, "during timing: %s", why);
                        break;
                    }
                }
            }
        }
        kh_bench_result_free(&br);
    }

    if (!st) {
        res = json_pack("{s:o, s:o, s:o}", "trials", trials_out, "timed_outputs", timed_outputs,
                        "failures", failures);
        trials_out = timed_outputs = failures = NULL;
        json_object_set_new(res, "timing", timing_out ? timing_out : json_null());
        timing_out = NULL;
        json_object_set_new(res, "gpu", kh_gpu_info(ev->g));
        /* where the buffers lived: islands (gpu.h) or one shared heap */
        json_object_set_new(res, "worker",
                            json_pack("{s:s}", "buffers",
                                      r->guard && kh_gpu_islands(ev->g) ? "islands" : "shared"));
        *result = res;
        *out = o.p;
        *out_len = o.n;
        o.p = NULL;
    } else {
        json_decref(timed_outputs);
    }
    json_decref(timing_out);
    json_decref(trials_out);
    json_decref(failures);
    free(o.p);
    /* After a sticky error nothing on the device may be touched again. */
    if (!kh_gpu_poisoned(ev->g)) {
        for (int k = 0; k < r->nlists; k++)
            kh_launch_free(&r->lists[k]);
        for (int k = 0; k < MAX_SETS; k++)
            free_set(r, r->in[k]);
        free_set(r, r->shared);
        if (r->mod)
            kh_gpu_api(ev->g)->cuModuleUnload(r->mod);
        so_unload(r->so);
    }
    free(r);
    return st;
}
