/* gpu.c: the GPU context of a worker process (see gpu.h).  Owns the driver
 * handle, context, stream, guard-banded buffers and the L2 flush buffer; what
 * runs on them belongs to the gpu role and the timing protocols. */
#include "gpu/gpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTE KH_GPU_GUARD_BYTE

struct kh_gpu {
    kh_cuda_api cu;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    int ordinal;
    int poisoned;
    char name[256];
    char uuid[64];
    int cc_major, cc_minor, sms, l2, max_smem_optin, clock_khz;
    size_t mem;
    CUdeviceptr flush;
    size_t flush_bytes;
    /* islands (gpu.h): the reserved range, its granule, the chunks mapped in
     * it (granule index and count, unsorted), the placement generator */
    int islands; /* -1: not decided yet, 0: off, 1: on */
    CUdeviceptr va;
    size_t va_bytes, gran;
    struct { size_t at, n; } *chunks;
    size_t nchunks, chunks_cap;
    uint64_t place;
    kh_nvml_api nvml;
    void *nvml_dev;
};

int kh_gpu_is_sticky(CUresult r)
{
    switch ((int)r) {
    case 700: /* ILLEGAL_ADDRESS */
    case 702: /* LAUNCH_TIMEOUT */
    case 709: /* CONTEXT_IS_DESTROYED */
    case 710: /* ASSERT */
    case 714: /* HARDWARE_STACK_ERROR */
    case 715: /* ILLEGAL_INSTRUCTION */
    case 716: /* MISALIGNED_ADDRESS */
    case 717: /* INVALID_ADDRESS_SPACE */
    case 718: /* INVALID_PC */
    case 719: /* LAUNCH_FAILED */
    case 999: /* UNKNOWN: never trust the context afterwards */
        return 1;
    default:
        return 0;
    }
}

kh_status kh_gpu_check(kh_gpu *g, CUresult r, const char *what, kh_err *err)
{
    if (r == CUDA_SUCCESS)
        return KH_OK;
    char why[256];
    kh_cuda_describe(g ? &g->cu : NULL, r, why, sizeof why);
    int sticky = kh_gpu_is_sticky(r);
    if (sticky && g)
        g->poisoned = 1;
    return kh_err_set(err, KH_ECUDA, "%s: %s%s", what, why,
                      sticky ? " (sticky: the GPU context is lost)" : "");
}

int kh_gpu_poisoned(const kh_gpu *g) { return g->poisoned; }
const kh_cuda_api *kh_gpu_api(const kh_gpu *g) { return &g->cu; }
CUstream kh_gpu_stream(const kh_gpu *g) { return g->stream; }
size_t kh_gpu_l2_bytes(const kh_gpu *g) { return (size_t)g->l2; }

kh_gpu *kh_gpu_open(int ordinal, kh_err *err)
{
    kh_gpu *g = calloc(1, sizeof *g);
    if (!g) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    if (kh_cuda_load(&g->cu, err)) {
        free(g);
        return NULL;
    }
    const kh_cuda_api *cu = &g->cu;
    CUresult r = cu->cuInit(0);
    if (r != CUDA_SUCCESS) {
        kh_gpu_check(g, r, "cuInit", err);
        if (r == CUDA_ERROR_NO_DEVICE)
            err->code = KH_ENODEV;
        free(g);
        return NULL;
    }
    int n = 0;
    cu->cuDeviceGetCount(&n);
    if (ordinal < 0 || ordinal >= n) {
        kh_err_set(err, KH_ENODEV, "no GPU %d (this machine has %d)", ordinal, n);
        free(g);
        return NULL;
    }
    g->ordinal = ordinal;
    g->islands = -1;
    if (kh_gpu_check(g, cu->cuDeviceGet(&g->dev, ordinal), "cuDeviceGet", err) ||
        kh_gpu_check(g, cu->cuDevicePrimaryCtxRetain(&g->ctx, g->dev), "cuDevicePrimaryCtxRetain",
                     err) ||
        kh_gpu_check(g, cu->cuCtxSetCurrent(g->ctx), "cuCtxSetCurrent", err) ||
        kh_gpu_check(g, cu->cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate",
                     err)) {
        kh_gpu_close(g);
        return NULL;
    }
    cu->cuDeviceGetName(g->name, sizeof g->name, g->dev);
    cu->cuDeviceGetAttribute(&g->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev);
    cu->cuDeviceGetAttribute(&g->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev);
    cu->cuDeviceGetAttribute(&g->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev);
    cu->cuDeviceGetAttribute(&g->l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, g->dev);
    cu->cuDeviceGetAttribute(&g->clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, g->dev);
    cu->cuDeviceGetAttribute(&g->max_smem_optin,
                             CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, g->dev);
    cu->cuDeviceTotalMem(&g->mem, g->dev);
    CUuuid u;
    if (cu->cuDeviceGetUuid(&u, g->dev) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)u.bytes;
        snprintf(g->uuid, sizeof g->uuid,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                 b[14], b[15]);
    }
    /* NVML is optional: without it clocks are simply not recorded. */
    if (kh_nvml_load(&g->nvml, NULL) == KH_OK && g->nvml.nvmlInit_v2() == 0 &&
        g->nvml.nvmlDeviceGetHandleByUUID &&
        g->nvml.nvmlDeviceGetHandleByUUID(g->uuid, &g->nvml_dev) != 0)
        g->nvml_dev = NULL;
    return g;
}

void kh_gpu_close(kh_gpu *g)
{
    if (!g)
        return;
    if (!g->poisoned) {
        if (g->flush)
            g->cu.cuMemFree(g->flush);
        if (g->va)
            g->cu.cuMemAddressFree(g->va, g->va_bytes);
        if (g->stream)
            g->cu.cuStreamDestroy(g->stream);
        if (g->ctx)
            g->cu.cuDevicePrimaryCtxRelease(g->dev);
    }
    free(g->chunks);
    free(g);
}

json_t *kh_gpu_info(const kh_gpu *g)
{
    char cc[16], driver[96] = "";
    snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
    int ver = 0;
    g->cu.cuDriverGetVersion(&ver);
    if (g->nvml_dev)
        g->nvml.nvmlSystemGetDriverVersion(driver, sizeof driver);
    return json_pack("{s:i, s:s, s:s, s:s, s:i, s:i, s:I, s:i, s:i, s:i, s:s}", "ordinal",
                     g->ordinal, "name", g->name, "uuid", g->uuid, "compute_capability", cc,
                     "sms", g->sms, "l2_bytes", g->l2, "memory_bytes", (json_int_t)g->mem,
                     "max_shared_per_block_optin", g->max_smem_optin, "sm_clock_khz",
                     g->clock_khz, "cuda_driver_api", ver, "driver_version", driver);
}

/* ---- islands ------------------------------------------------------------------ */
static uint64_t place_next(kh_gpu *g)
{
    /* splitmix64 over a secret start: where the next island goes */
    uint64_t z = (g->place += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static CUmemAllocationProp island_prop(const kh_gpu *g)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = g->dev;
    return p;
}

/* Decide once: the device supports virtual memory management and a range of
 * at least 8 x its memory (1 TiB at most tried first) can be reserved. */
int kh_gpu_islands(kh_gpu *g)
{
    if (g->islands >= 0)
        return g->islands;
    g->islands = 0;
    const char *off = getenv("KHLUA_NO_ISLANDS");
    if (off && *off && strcmp(off, "0"))
        return 0;
    int vmm = 0;
    kh_err e;
    CUmemAllocationProp p = island_prop(g);
    if (g->cu.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                   g->dev) != CUDA_SUCCESS || !vmm ||
        g->cu.cuMemGetAllocationGranularity(&g->gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS || !g->gran || kh_secure_seed(&g->place, &e))
        return 0;
    size_t want = (size_t)1 << 42, least = g->mem * 8;
    if (least < want)
        least = (size_t)1 << 38;
    for (size_t n = want > least ? want : least; n >= least; n /= 2)
        if (g->cu.cuMemAddressReserve(&g->va, n, g->gran, 0, 0) == CUDA_SUCCESS) {
            g->va_bytes = n;
            g->islands = 1;
            break;
        }
    return g->islands;
}

/* The chunk that a run of n granules at s (with one free granule on each
 * side) would touch, or -1. */
static long island_clash(const kh_gpu *g, size_t s, size_t n)
{
    for (size_t i = 0; i < g->nchunks; i++)
        if (s < g->chunks[i].at + g->chunks[i].n + 1 && g->chunks[i].at < s + n + 1)
            return (long)i;
    return -1;
}

/* A free run of n granules with one unmapped granule on each side, at a
 * random place: up to 64 random starts, then the first fit. */
static int island_place(kh_gpu *g, size_t n, size_t *at)
{
    size_t slots = g->va_bytes / g->gran;
    if (n + 2 > slots)
        return 0;
    for (int tries = 0; tries < 64; tries++) {
        size_t s = 1 + place_next(g) % (slots - n - 1);
        if (island_clash(g, s, n) < 0) {
            *at = s;
            return 1;
        }
    }
    for (size_t s = 1; s + n + 1 <= slots;) {
        long c = island_clash(g, s, n);
        if (c < 0) {
            *at = s;
            return 1;
        }
        s = g->chunks[c].at + g->chunks[c].n + 1;
    }
    return 0;
}

static kh_status island_alloc(kh_gpu *g, size_t bytes, size_t guard, kh_gpu_buf *b, kh_err *err)
{
    const kh_cuda_api *cu = &g->cu;
    size_t span = ((bytes + 255) & ~(size_t)255) + 2 * guard;
    size_t n = (span + g->gran - 1) / g->gran, at = 0;
    if (g->nchunks == g->chunks_cap) {
        size_t nc = g->chunks_cap ? 2 * g->chunks_cap : 64;
        void *np = realloc(g->chunks, nc * sizeof *g->chunks);
        if (!np)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        g->chunks = np;
        g->chunks_cap = nc;
    }
    CUmemAllocationProp p = island_prop(g);
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof ad);
    ad.location = p.location;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t len = n * g->gran;
    /* the memory first: a size the GPU cannot hold is its out-of-memory */
    kh_status st = kh_gpu_check(g, cu->cuMemCreate(&b->mh, len, &p, 0), "cuMemCreate", err);
    if (st)
        return kh_err_prefix(err, "allocating %zu bytes", bytes);
    if (!island_place(g, n, &at)) {
        cu->cuMemRelease(b->mh);
        b->mh = 0;
        return kh_err_set(err, KH_ENOMEM, "allocating %zu bytes: out of memory (no room left in "
                          "the %zu GiB of address space reserved for the evaluation's buffers)",
                          bytes, g->va_bytes >> 30);
    }
    CUdeviceptr map = g->va + at * g->gran;
    if ((st = kh_gpu_check(g, cu->cuMemMap(map, len, 0, b->mh, 0), "cuMemMap", err))) {
        cu->cuMemRelease(b->mh);
        b->mh = 0;
        return st;
    }
    b->map = map;
    b->map_bytes = len;
    g->chunks[g->nchunks].at = at;
    g->chunks[g->nchunks++].n = n;
    b->base = map + len - span;
    b->ptr = b->base + guard;
    b->bytes = bytes;
    b->guard = guard;
    /* the whole island holds the guard pattern: nothing an earlier buffer
     * left is readable, an unwritten workspace included */
    if ((st = kh_gpu_check(g, cu->cuMemSetAccess(map, len, &ad, 1), "cuMemSetAccess", err)) ||
        (st = kh_gpu_check(g, cu->cuMemsetD8(map, GUARD_BYTE, len), "cuMemsetD8", err)) ||
        (st = kh_gpu_check(g, cu->cuCtxSynchronize(), "cuCtxSynchronize", err)))
        kh_gpu_buf_free(g, b);
    return st;
}

kh_status kh_gpu_buf_alloc(kh_gpu *g, size_t bytes, size_t guard, kh_gpu_buf *b, kh_err *err)
{
    memset(b, 0, sizeof *b);
    guard = (guard + 255) & ~(size_t)255;
    size_t total = bytes + 2 * guard;
    if (total < bytes || bytes > SIZE_MAX / 4)
        return kh_err_set(err, KH_EINVAL, "buffer of %zu bytes is too large", bytes);
    if (guard && kh_gpu_islands(g))
        return island_alloc(g, bytes, guard, b, err);
    kh_status st = kh_gpu_check(g, g->cu.cuMemAlloc(&b->base, total ? total : 256), "cuMemAlloc",
                                err);
    if (st)
        return kh_err_prefix(err, "allocating %zu bytes", bytes);
    b->ptr = b->base + guard;
    b->bytes = bytes;
    b->guard = guard;
    if (guard) {
        st = kh_gpu_check(g, g->cu.cuMemsetD8(b->base, GUARD_BYTE, guard), "cuMemsetD8", err);
        if (!st)
            st = kh_gpu_check(g, g->cu.cuMemsetD8(b->ptr + bytes, GUARD_BYTE, guard),
                              "cuMemsetD8", err);
        if (st) {
            kh_gpu_buf_free(g, b);
            return st;
        }
    }
    return KH_OK;
}

/* Zeroed before it goes (the next allocation, in this process, may be given
 * the same memory), then unmapped or freed. */
void kh_gpu_buf_free(kh_gpu *g, kh_gpu_buf *b)
{
    const kh_cuda_api *cu = &g->cu;
    if (b->base && !g->poisoned) {
        CUdeviceptr at = b->mh ? b->map : b->base;
        size_t len = b->mh ? b->map_bytes : b->bytes + 2 * b->guard;
        if (len && cu->cuMemsetD8(at, 0, len) == CUDA_SUCCESS)
            cu->cuCtxSynchronize();
        if (b->mh) {
            cu->cuMemUnmap(b->map, b->map_bytes);
            cu->cuMemRelease(b->mh);
        } else {
            cu->cuMemFree(b->base);
        }
    }
    if (b->mh)
        for (size_t i = 0; i < g->nchunks; i++)
            if (g->va + g->chunks[i].at * g->gran == b->map) {
                g->chunks[i] = g->chunks[--g->nchunks];
                break;
            }
    memset(b, 0, sizeof *b);
}

int kh_gpu_buf_guards_ok(kh_gpu *g, const kh_gpu_buf *b, const char **where, kh_err *err)
{
    if (!b->guard)
        return 1;
    unsigned char *h = malloc(b->guard);
    if (!h) {
        kh_err_set(err, KH_ENOMEM, "out of memory checking guards");
        return 0;
    }
    int ok = 1;
    for (int side = 0; side < 2 && ok; side++) {
        CUdeviceptr p = side == 0 ? b->base : b->ptr + b->bytes;
        if (kh_gpu_check(g, g->cu.cuMemcpyDtoH(h, p, b->guard), "cuMemcpyDtoH", err)) {
            ok = 0;
            break;
        }
        for (size_t i = 0; i < b->guard; i++) {
            if (h[i] != GUARD_BYTE) {
                ok = 0;
                if (where)
                    *where = side == 0 ? "before" : "after";
                kh_err_set(err, KH_EINVAL, "a write landed %zu bytes %s the buffer",
                           side == 0 ? b->guard - i : i + 1, side == 0 ? "before" : "after");
                break;
            }
        }
    }
    free(h);
    return ok;
}

kh_status kh_gpu_flush_l2(kh_gpu *g, kh_err *err)
{
    if (!g->flush) {
        /* FlashInfer-Bench: 2 x L2, rounded down to whole MiB. */
        size_t n = ((size_t)g->l2 * 2) & ~(size_t)((1 << 20) - 1);
        if (n == 0)
            n = 1 << 20;
        kh_status st = kh_gpu_check(g, g->cu.cuMemAlloc(&g->flush, n), "cuMemAlloc (L2 flush)",
                                    err);
        if (st)
            return st;
        g->flush_bytes = n;
    }
    return kh_gpu_check(g, g->cu.cuMemsetD32Async(g->flush, 0, g->flush_bytes / 4, g->stream),
                        "L2 flush (cuMemsetD32Async)", err);
}

void kh_gpu_read_clocks(kh_gpu *g, kh_gpu_clocks *c)
{
    memset(c, 0, sizeof *c);
    if (!g->nvml_dev || !g->nvml.nvmlDeviceGetClockInfo)
        return;
    c->valid = g->nvml.nvmlDeviceGetClockInfo(g->nvml_dev, 1 /* SM */, &c->sm_mhz) == 0;
    g->nvml.nvmlDeviceGetClockInfo(g->nvml_dev, 2 /* MEM */, &c->mem_mhz);
    if (g->nvml.nvmlDeviceGetTemperature)
        g->nvml.nvmlDeviceGetTemperature(g->nvml_dev, 0 /* GPU */, &c->temp_c);
    if (g->nvml.nvmlDeviceGetCurrentClocksEventReasons)
        g->nvml.nvmlDeviceGetCurrentClocksEventReasons(g->nvml_dev, &c->reasons);
    c->throttled = (c->reasons & KH_NVML_THROTTLE_MASK) != 0;
}

json_t *kh_gpu_clocks_json(const kh_gpu_clocks *c)
{
    if (!c->valid)
        return json_null();
    return json_pack("{s:i, s:i, s:i, s:I, s:b}", "sm_mhz", c->sm_mhz, "mem_mhz", c->mem_mhz,
                     "temp_c", c->temp_c, "reasons", (json_int_t)c->reasons, "throttled",
                     c->throttled);
}

kh_status kh_gpu_reset_l2_persisting(kh_gpu *g, kh_err *err)
{
    return kh_gpu_check(g, g->cu.cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache",
                        err);
}

kh_status kh_gpu_memset8(kh_gpu *g, CUdeviceptr ptr, unsigned char v, size_t n, kh_err *err)
{
    return kh_gpu_check(g, g->cu.cuMemsetD8Async(ptr, v, n, g->stream), "cuMemsetD8Async", err);
}

kh_status kh_gpu_sync(kh_gpu *g, kh_err *err)
{
    return kh_gpu_check(g, g->cu.cuStreamSynchronize(g->stream), "cuStreamSynchronize", err);
}

kh_status kh_gpu_htod(kh_gpu *g, CUdeviceptr ptr, const void *src, size_t n, kh_err *err)
{
    if (!n)
        return KH_OK;
    kh_status st = kh_gpu_check(g, g->cu.cuMemcpyHtoD(ptr, src, n), "cuMemcpyHtoD", err);
    if (!st)
        st = kh_gpu_check(g, g->cu.cuCtxSynchronize(), "cuCtxSynchronize", err);
    return st;
}
