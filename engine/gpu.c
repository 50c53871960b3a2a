/* gpu.c: the GPU context of a worker process (see gpu.h).  Owns the driver
 * handle, context, stream, guard-banded buffers and the L2 flush buffer; what
 * runs on them belongs to the gpu role and the timing protocols. */
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTE 0xA5

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
        if (g->stream)
            g->cu.cuStreamDestroy(g->stream);
        if (g->ctx)
            g->cu.cuDevicePrimaryCtxRelease(g->dev);
    }
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

kh_status kh_gpu_buf_alloc(kh_gpu *g, size_t bytes, size_t guard, kh_gpu_buf *b, kh_err *err)
{
    memset(b, 0, sizeof *b);
    guard = (guard + 255) & ~(size_t)255;
    size_t total = bytes + 2 * guard;
    if (total < bytes)
        return kh_err_set(err, KH_EINVAL, "buffer of %zu bytes is too large", bytes);
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

void kh_gpu_buf_free(kh_gpu *g, kh_gpu_buf *b)
{
    if (b->base && !g->poisoned)
        g->cu.cuMemFree(b->base);
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
