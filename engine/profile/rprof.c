/* rprof.c: CUPTI Range Profiler + Profiler Host API (see rprof.h).  Owns the
 * libcupti handle of a profile worker, the counter-availability, config and
 * counter-data images, and the buffer snapshots user replay needs; what the
 * numbers mean is bottleneck.c's business. */
#include "profile/rprof.h"

/* Specific toolkit headers: engine/gpu/cupti.h shadows <cupti.h>. */
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>

#include "gpu/cupti_host.h"
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KH_RPROF_FUNCS(X)                                                                 \
    X(cuptiGetResultString) X(cuptiProfilerInitialize) X(cuptiProfilerDeInitialize)       \
    X(cuptiDeviceGetChipName) X(cuptiProfilerGetCounterAvailability)                      \
    X(cuptiProfilerHostInitialize) X(cuptiProfilerHostDeinitialize)                       \
    X(cuptiProfilerHostConfigAddMetrics) X(cuptiProfilerHostGetConfigImageSize)           \
    X(cuptiProfilerHostGetConfigImage) X(cuptiProfilerHostGetNumOfPasses)                 \
    X(cuptiProfilerHostEvaluateToGpuValues) X(cuptiProfilerHostGetMetricProperties)       \
    X(cuptiProfilerHostGetRangeName) X(cuptiRangeProfilerEnable)                          \
    X(cuptiRangeProfilerDisable) X(cuptiRangeProfilerSetConfig) X(cuptiRangeProfilerStart) \
    X(cuptiRangeProfilerStop) X(cuptiRangeProfilerPushRange) X(cuptiRangeProfilerPopRange) \
    X(cuptiRangeProfilerDecodeData) X(cuptiRangeProfilerGetCounterDataSize)               \
    X(cuptiRangeProfilerCounterDataImageInitialize) X(cuptiRangeProfilerGetCounterDataInfo)

#define MAX_PASSES 256

struct kh_rprof {
    void *handle, *nvperf;
#define KH_X(fn) __typeof__(fn) *fn;
    KH_RPROF_FUNCS(KH_X)
#undef KH_X
    kh_gpu *g;
    CUdevice dev;
    CUcontext ctx;
    int ctx_retained, initialized;
    char chip[64];
    uint8_t *avail;
    size_t avail_n;
    /* the L2 sweep (see flush_l2) */
    int sweep_tried;
    CUmodule sweep_mod;
    CUfunction sweep_fn;
    CUdeviceptr sweep_buf;
    size_t sweep_words;
};

/* A kernel that reads n 32-bit words (grid-stride) and keeps the loads alive
 * with a store that practically never happens.  Hand-written PTX, JIT-ed by
 * the driver: the worker needs no compiler for it. */
static const char sweep_ptx[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry kh_l2_sweep(.param .u64 p, .param .u64 n)\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b32 %r<8>;\n"
    "  .reg .b64 %rd<10>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u64 %rd2, [n];\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mov.u32 %r4, %nctaid.x;\n"
    "  mul.wide.u32 %rd3, %r1, %r2;\n"
    "  cvt.u64.u32 %rd4, %r3;\n"
    "  add.u64 %rd3, %rd3, %rd4;\n"
    "  mul.wide.u32 %rd5, %r4, %r2;\n"
    "  mov.u32 %r5, 0;\n"
    "LOOP:\n"
    "  setp.ge.u64 %p1, %rd3, %rd2;\n"
    "  @%p1 bra DONE;\n"
    "  shl.b64 %rd6, %rd3, 2;\n"
    "  add.u64 %rd7, %rd1, %rd6;\n"
    "  ld.global.u32 %r6, [%rd7];\n"
    "  xor.b32 %r5, %r5, %r6;\n"
    "  add.u64 %rd3, %rd3, %rd5;\n"
    "  bra LOOP;\n"
    "DONE:\n"
    "  setp.ne.u32 %p2, %r5, 1234567891;\n"
    "  @%p2 bra END;\n"
    "  st.global.u32 [%rd1], %r5;\n"
    "END:\n"
    "  ret;\n"
    "}\n";

/* Failures that mean "this machine does not let us count", not "bug". */
static int no_counters(CUptiResult r)
{
    switch (r) {
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_DISABLED:
        return 1;
    default:
        return 0;
    }
}

static kh_status fail(kh_rprof *p, CUptiResult r, const char *what, kh_err *err)
{
    const char *s = NULL;
    if (p && p->cuptiGetResultString)
        p->cuptiGetResultString(r, &s);
    if (no_counters(r))
        return kh_err_set(err, KH_EUNSUPPORTED, "no counters: %s: %s (CUPTI %d)", what,
                          s ? s : "?", (int)r);
    return kh_err_set(err, KH_ECUDA, "%s: %s (CUPTI %d)", what, s ? s : "?", (int)r);
}

#define CK(call, what)                                                                    \
    do {                                                                                  \
        CUptiResult r_ = (call);                                                          \
        if (r_ != CUPTI_SUCCESS) {                                                        \
            st = fail(p, r_, what, err);                                                  \
            goto out;                                                                     \
        }                                                                                 \
    } while (0)

static kh_status load(kh_rprof *p, const char *cuda_home, kh_err *err)
{
    char p1[600] = "", p2[600] = "";
    if (cuda_home) {
        snprintf(p1, sizeof p1, "%s/lib64/libcupti.so.13", cuda_home);
        snprintf(p2, sizeof p2, "%s/extras/CUPTI/lib64/libcupti.so.13", cuda_home);
    }
    const char *paths[] = {"libcupti.so.13", p1, p2};
    const char *why = NULL;
    for (size_t i = 0; i < KH_ARRAY_LEN(paths) && !p->handle; i++)
        if (paths[i][0]) {
            p->handle = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
            if (!p->handle)
                why = dlerror();
        }
    if (!p->handle)
        return kh_err_set(err, KH_ENODEV, "libcupti.so.13 not found (%s)", why ? why : "?");
#define KH_X(fn)                                                                          \
    if (!(*(void **)&p->fn = dlsym(p->handle, #fn)))                                      \
        return kh_err_set(err, KH_ENODEV, "libcupti.so.13 lacks %s (CUPTI older than 13?)",  \
                          #fn);
    KH_RPROF_FUNCS(KH_X)
#undef KH_X
    /* libcupti dlopens libnvperf_host.so by name; when libcupti itself came
     * from cuda_home rather than the loader's path, that name would not be
     * found.  Loading it first from libcupti's own folder makes the later
     * by-name lookup find the loaded copy.  Best effort: CUPTI reports its
     * own error if this fails too. */
    Dl_info info;
    if (dladdr(*(void **)&p->cuptiProfilerInitialize, &info) && info.dli_fname) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s", info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = 0;
            char np[700];
            snprintf(np, sizeof np, "%s/libnvperf_host.so", dir);
            p->nvperf = dlopen(np, RTLD_NOW | RTLD_GLOBAL);
        }
    }
    return KH_OK;
}

kh_rprof *kh_rprof_open(kh_gpu *g, const char *cuda_home, kh_err *err)
{
    kh_rprof *p = calloc(1, sizeof *p);
    if (!p) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    p->g = g;
    kh_status st = load(p, cuda_home, err);
    if (st)
        goto out;
    const kh_cuda_api *cu = kh_gpu_api(g);
    json_t *info = kh_gpu_info(g);
    int ordinal = (int)json_integer_value(json_object_get(info, "ordinal"));
    json_decref(info);
    if ((st = kh_gpu_check(g, cu->cuDeviceGet(&p->dev, ordinal), "cuDeviceGet", err)))
        goto out;
    /* The primary context kh_gpu made current; retained once more here so the
     * handle stays valid for as long as the profiler uses it. */
    if ((st = kh_gpu_check(g, cu->cuDevicePrimaryCtxRetain(&p->ctx, p->dev),
                           "cuDevicePrimaryCtxRetain", err)))
        goto out;
    p->ctx_retained = 1;

    CUpti_Profiler_Initialize_Params ip = {.structSize =
                                               CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    CK(p->cuptiProfilerInitialize(&ip), "cuptiProfilerInitialize");
    p->initialized = 1;
    CUpti_Device_GetChipName_Params cp = {.structSize =
                                              CUpti_Device_GetChipName_Params_STRUCT_SIZE};
    cp.deviceIndex = (size_t)ordinal;
    CK(p->cuptiDeviceGetChipName(&cp), "cuptiDeviceGetChipName");
    snprintf(p->chip, sizeof p->chip, "%s", cp.pChipName ? cp.pChipName : "?");
    CUpti_Profiler_GetCounterAvailability_Params ap = {
        .structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
    ap.ctx = p->ctx;
    CK(p->cuptiProfilerGetCounterAvailability(&ap), "cuptiProfilerGetCounterAvailability");
    p->avail_n = ap.counterAvailabilityImageSize;
    p->avail = malloc(p->avail_n ? p->avail_n : 1);
    if (!p->avail) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto out;
    }
    ap.pCounterAvailabilityImage = p->avail;
    CK(p->cuptiProfilerGetCounterAvailability(&ap), "cuptiProfilerGetCounterAvailability");
out:
    if (st) {
        kh_rprof_close(p);
        return NULL;
    }
    return p;
}

void kh_rprof_close(kh_rprof *p)
{
    if (!p)
        return;
    if (p->initialized) {
        CUpti_Profiler_DeInitialize_Params dp = {
            .structSize = CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};
        p->cuptiProfilerDeInitialize(&dp);
    }
    if (!kh_gpu_poisoned(p->g)) {
        if (p->sweep_buf)
            kh_gpu_api(p->g)->cuMemFree(p->sweep_buf);
        if (p->sweep_mod)
            kh_gpu_api(p->g)->cuModuleUnload(p->sweep_mod);
        if (p->ctx_retained)
            kh_gpu_api(p->g)->cuDevicePrimaryCtxRelease(p->dev);
    }
    free(p->avail);
    /* The libraries stay loaded: CUPTI may keep threads and callbacks inside
     * them until the process exits. */
    free(p);
}

const char *kh_rprof_chip(const kh_rprof *p) { return p->chip; }

/* ---- one profiling session --------------------------------------------------- */

typedef struct session {
    CUpti_Profiler_Host_Object *host;
    CUpti_RangeProfiler_Object *rp;
    uint8_t *config, *counter;
    size_t config_n, counter_n;
    CUdeviceptr *snap;
    size_t nsnap;
} session;

static kh_status host_init(kh_rprof *p, session *s, kh_err *err)
{
    kh_status st = KH_OK;
    kh_host_init hp = {.structSize = KH_SZ(kh_host_init, pHostObject)};
    hp.profilerType = KH_CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    hp.pChipName = p->chip;
    hp.pCounterAvailabilityImage = p->avail;
    CK(p->cuptiProfilerHostInitialize(&hp), "cuptiProfilerHostInitialize");
    s->host = hp.pHostObject;
out:
    return st;
}

static void host_fini(kh_rprof *p, session *s)
{
    if (!s->host)
        return;
    kh_host_deinit dp = {.structSize = KH_SZ(kh_host_deinit, pHostObject)};
    dp.pHostObject = s->host;
    p->cuptiProfilerHostDeinitialize(&dp);
    s->host = NULL;
}

static CUptiResult add_metrics(kh_rprof *p, session *s, const char **names, size_t n)
{
    kh_host_add_metrics ap = {.structSize = KH_SZ(kh_host_add_metrics, numMetrics)};
    ap.pHostObject = s->host;
    ap.ppMetricNames = names;
    ap.numMetrics = n;
    return p->cuptiProfilerHostConfigAddMetrics(&ap);
}

/* Add the metrics; if the chip rejects the list, start a fresh host object
 * and keep only the names it knows, listing the others in dropped. */
static kh_status config(kh_rprof *p, session *s, const kh_rprof_opts *o, const char **used,
                        size_t *nused, json_t *dropped, kh_err *err)
{
    kh_status st = KH_OK;
    for (size_t i = 0; i < o->nmetrics; i++)
        used[i] = o->metrics[i];
    *nused = o->nmetrics;
    if ((st = host_init(p, s, err)))
        return st;
    if (add_metrics(p, s, used, *nused) != CUPTI_SUCCESS) {
        host_fini(p, s);
        if ((st = host_init(p, s, err)))
            return st;
        *nused = 0;
        for (size_t i = 0; i < o->nmetrics; i++) {
            kh_host_metric_props mp = {.structSize = KH_SZ(kh_host_metric_props,
                                                              metricType)};
            mp.pHostObject = s->host;
            mp.pMetricName = o->metrics[i];
            CUptiResult r = p->cuptiProfilerHostGetMetricProperties(&mp);
            if (r == CUPTI_SUCCESS) {
                used[(*nused)++] = o->metrics[i];
            } else {
                const char *why = NULL;
                p->cuptiGetResultString(r, &why);
                json_array_append_new(dropped, json_pack("{s:s, s:s}", "metric", o->metrics[i],
                                                         "why", why ? why : "unknown"));
            }
        }
        if (!*nused)
            return kh_err_set(err, KH_EINVAL, "none of the %zu metrics is known on %s",
                              o->nmetrics, p->chip);
        CK(add_metrics(p, s, used, *nused), "cuptiProfilerHostConfigAddMetrics");
    }
    kh_host_config_size zp = {.structSize = KH_SZ(kh_host_config_size, configImageSize)};
    zp.pHostObject = s->host;
    CK(p->cuptiProfilerHostGetConfigImageSize(&zp), "cuptiProfilerHostGetConfigImageSize");
    s->config_n = zp.configImageSize;
    s->config = malloc(s->config_n ? s->config_n : 1);
    if (!s->config)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    kh_host_config_image gp = {.structSize = KH_SZ(kh_host_config_image, pConfigImage)};
    gp.pHostObject = s->host;
    gp.configImageSize = s->config_n;
    gp.pConfigImage = s->config;
    CK(p->cuptiProfilerHostGetConfigImage(&gp), "cuptiProfilerHostGetConfigImage");
out:
    return st;
}

/* Snapshot every buffer (user replay runs the list once per pass). */
static kh_status snapshot(kh_rprof *p, session *s, kh_launch_list *l, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(p->g);
    s->snap = calloc(l->nbufs ? l->nbufs : 1, sizeof *s->snap);
    if (!s->snap)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    s->nsnap = l->nbufs;
    for (size_t i = 0; i < l->nbufs; i++) {
        size_t n = l->bufs[i].buf.bytes;
        if (!n)
            continue;
        kh_status st = kh_gpu_check(p->g, cu->cuMemAlloc(&s->snap[i], n), "cuMemAlloc", err);
        if (st)
            return kh_err_prefix(err, "snapshot of buffer '%s' for user replay (use replay "
                                 "\"kernel\" when memory is short)", l->bufs[i].name);
        st = kh_gpu_check(p->g, cu->cuMemcpyDtoD(s->snap[i], l->bufs[i].buf.ptr, n),
                          "cuMemcpyDtoD", err);
        if (st)
            return st;
    }
    return KH_OK;
}

static kh_status restore(kh_rprof *p, session *s, kh_launch_list *l, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(p->g);
    for (size_t i = 0; i < s->nsnap; i++) {
        if (!s->snap[i])
            continue;
        kh_status st = kh_gpu_check(p->g,
                                    cu->cuMemcpyDtoDAsync(l->bufs[i].buf.ptr, s->snap[i],
                                                          l->bufs[i].buf.bytes,
                                                          kh_gpu_stream(p->g)),
                                    "cuMemcpyDtoDAsync", err);
        if (st)
            return st;
    }
    return KH_OK;
}

static kh_status launch_one(kh_rprof *p, kh_launch_list *l, size_t i, kh_err *err)
{
    kh_launch_one *o = &l->launches[i];
    CUresult r = kh_gpu_api(p->g)->cuLaunchKernel(o->fn, o->grid[0], o->grid[1], o->grid[2],
                                                  o->block[0], o->block[1], o->block[2],
                                                  o->smem, kh_gpu_stream(p->g),
                                                  o->nargs ? o->params : NULL, NULL);
    if (r != CUDA_SUCCESS) {
        kh_gpu_check(p->g, r, "cuLaunchKernel", err);
        return kh_err_prefix(err, "launch %zu (%s)", i, o->kernel);
    }
    return KH_OK;
}

/* Cold L2 before a range, like ncu's --cache-control all.  A write flush
 * (kh_gpu_flush_l2's memset) would leave 2 x L2 of dirty lines whose
 * write-back the next range would count as its own DRAM writes (up to the L2
 * size: a 10 MB kernel would read as several times its traffic).  So: a
 * kernel that reads 2 x L2, leaving clean lines; the memset only when that
 * kernel cannot be loaded.  sweep_init runs before the profiler is enabled
 * (no module load or allocation inside a pass); flush_l2 returns the method
 * used. */
static void sweep_init(kh_rprof *p)
{
    const kh_cuda_api *cu = kh_gpu_api(p->g);
    if (!p->sweep_tried) {
        p->sweep_tried = 1;
        size_t bytes = 2 * kh_gpu_l2_bytes(p->g);
        if (!bytes)
            bytes = 128u << 20;
        CUmodule mod;
        if (cu->cuModuleLoadData(&mod, sweep_ptx) == CUDA_SUCCESS) {
            if (cu->cuModuleGetFunction(&p->sweep_fn, mod, "kh_l2_sweep") == CUDA_SUCCESS &&
                cu->cuMemAlloc(&p->sweep_buf, bytes) == CUDA_SUCCESS &&
                cu->cuMemsetD8(p->sweep_buf, 0x5a, bytes) == CUDA_SUCCESS) {
                p->sweep_mod = mod;
                p->sweep_words = bytes / 4;
            } else {
                if (p->sweep_buf)
                    cu->cuMemFree(p->sweep_buf);
                p->sweep_buf = 0;
                cu->cuModuleUnload(mod);
            }
        }
    }
}

static const char *flush_l2(kh_rprof *p, kh_err *err, kh_status *st)
{
    const kh_cuda_api *cu = kh_gpu_api(p->g);
    if (p->sweep_mod) {
        void *args[] = {&p->sweep_buf, &p->sweep_words};
        json_t *info = kh_gpu_info(p->g);
        unsigned sms = (unsigned)json_integer_value(json_object_get(info, "sms"));
        json_decref(info);
        *st = kh_gpu_check(p->g,
                           cu->cuLaunchKernel(p->sweep_fn, (sms ? sms : 132) * 8, 1, 1, 256, 1,
                                              1, 0, kh_gpu_stream(p->g), args, NULL),
                           "cuLaunchKernel (L2 sweep)", err);
        return "read-sweep";
    }
    *st = kh_gpu_flush_l2(p->g, err);
    return "memset";
}

/* The session's counter-data image, sized for one range per launch, and the
 * range profiler's configuration (after cuptiRangeProfilerEnable). */
static kh_status set_config(kh_rprof *p, session *s, kh_launch_list *l, const kh_rprof_opts *o,
                            const char **used, size_t nused, kh_err *err)
{
    kh_status st = KH_OK;
    CUpti_RangeProfiler_GetCounterDataSize_Params cs = {
        .structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
    cs.pRangeProfilerObject = s->rp;
    cs.pMetricNames = used;
    cs.numMetrics = nused;
    cs.maxNumOfRanges = l->nlaunches;
    cs.maxNumRangeTreeNodes = (uint32_t)l->nlaunches;
    CK(p->cuptiRangeProfilerGetCounterDataSize(&cs), "cuptiRangeProfilerGetCounterDataSize");
    s->counter_n = cs.counterDataSize;
    s->counter = malloc(s->counter_n ? s->counter_n : 1);
    if (!s->counter) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto out;
    }
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params ci = {
        .structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    ci.pRangeProfilerObject = s->rp;
    ci.counterDataSize = s->counter_n;
    ci.pCounterData = s->counter;
    CK(p->cuptiRangeProfilerCounterDataImageInitialize(&ci),
       "cuptiRangeProfilerCounterDataImageInitialize");

    CUpti_RangeProfiler_SetConfig_Params sc = {
        .structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
    sc.pRangeProfilerObject = s->rp;
    sc.configSize = s->config_n;
    sc.pConfig = s->config;
    sc.counterDataImageSize = s->counter_n;
    sc.pCounterDataImage = s->counter;
    sc.range = o->kernel_replay ? CUPTI_AutoRange : CUPTI_UserRange;
    sc.replayMode = o->kernel_replay ? CUPTI_KernelReplay : CUPTI_UserReplay;
    sc.maxRangesPerPass = l->nlaunches;
    sc.numNestingLevels = 1;
    sc.minNestingLevel = 1;
    sc.passIndex = 0;
    sc.targetNestingLevel = 1;
    CK(p->cuptiRangeProfilerSetConfig(&sc), "cuptiRangeProfilerSetConfig");
out:
    return st;
}

/* Run the list once per pass until CUPTI has every pass (user replay: the
 * buffers restored first, each launch its own range after an L2 flush;
 * kernel replay: CUPTI replays each launch itself).  *passes counts them,
 * *flush names the L2 flush used. */
static kh_status run_passes(kh_rprof *p, session *s, kh_launch_list *l, const kh_rprof_opts *o,
                            size_t *passes, const char **flush, kh_err *err)
{
    kh_status st = KH_OK;
    for (;;) {
        if (!o->kernel_replay && (st = restore(p, s, l, err)))
            goto out;
        if ((st = kh_gpu_sync(p->g, err)))
            goto out;
        CUpti_RangeProfiler_Start_Params sp = {
            .structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
        sp.pRangeProfilerObject = s->rp;
        CK(p->cuptiRangeProfilerStart(&sp), "cuptiRangeProfilerStart");
        for (size_t i = 0; i < l->nlaunches; i++) {
            if (o->kernel_replay) {
                if ((st = launch_one(p, l, i, err)))
                    goto out;
                continue;
            }
            /* Cold L2 before each range, like ncu's --cache-control all; the
             * flush lies outside the range, so it is not counted. */
            *flush = flush_l2(p, err, &st);
            if (st)
                goto out;
            char name[160];
            snprintf(name, sizeof name, "%zu:%s", i, l->launches[i].kernel);
            CUpti_RangeProfiler_PushRange_Params pp = {
                .structSize = CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE};
            pp.pRangeProfilerObject = s->rp;
            pp.pRangeName = name;
            CK(p->cuptiRangeProfilerPushRange(&pp), "cuptiRangeProfilerPushRange");
            if ((st = launch_one(p, l, i, err)))
                goto out;
            CUpti_RangeProfiler_PopRange_Params qp = {
                .structSize = CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE};
            qp.pRangeProfilerObject = s->rp;
            CK(p->cuptiRangeProfilerPopRange(&qp), "cuptiRangeProfilerPopRange");
        }
        if ((st = kh_gpu_sync(p->g, err)))
            goto out;
        CUpti_RangeProfiler_Stop_Params tp = {
            .structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
        tp.pRangeProfilerObject = s->rp;
        CK(p->cuptiRangeProfilerStop(&tp), "cuptiRangeProfilerStop");
        (*passes)++;
        if (tp.isAllPassSubmitted)
            break;
        if (*passes >= MAX_PASSES) {
            st = kh_err_set(err, KH_ECUDA, "range profiler: not done after %d passes",
                            MAX_PASSES);
            goto out;
        }
    }
out:
    return st;
}

/* Decode the counter data and evaluate the used metrics of every range
 * (vals: room for them) into ranges, each under its launch index; ranges
 * CUPTI dropped are counted in *dropped_ranges. */
static kh_status decode_ranges(kh_rprof *p, session *s, kh_launch_list *l,
                               const kh_rprof_opts *o, const char **used, size_t nused,
                               double *vals, json_t *ranges, size_t *dropped_ranges, kh_err *err)
{
    kh_status st = KH_OK;
    CUpti_RangeProfiler_DecodeData_Params dd = {
        .structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    dd.pRangeProfilerObject = s->rp;
    CK(p->cuptiRangeProfilerDecodeData(&dd), "cuptiRangeProfilerDecodeData");
    *dropped_ranges = dd.numOfRangeDropped;
    CUpti_RangeProfiler_GetCounterDataInfo_Params di = {
        .structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
    di.pCounterDataImage = s->counter;
    di.counterDataImageSize = s->counter_n;
    CK(p->cuptiRangeProfilerGetCounterDataInfo(&di), "cuptiRangeProfilerGetCounterDataInfo");
    size_t nranges = di.numTotalRanges;
    for (size_t r = 0; r < nranges; r++) {
        kh_host_range_name rn = {.structSize = KH_SZ(kh_host_range_name, pRangeName)};
        rn.pCounterDataImage = s->counter;
        rn.counterDataImageSize = s->counter_n;
        rn.rangeIndex = r;
        rn.delimiter = "/";
        char rname[256] = "";
        if (p->cuptiProfilerHostGetRangeName(&rn) == CUPTI_SUCCESS && rn.pRangeName) {
            snprintf(rname, sizeof rname, "%s", rn.pRangeName);
            free((void *)rn.pRangeName); /* the header: the caller frees it */
        }
        kh_host_evaluate ev = {.structSize = KH_SZ(kh_host_evaluate, pMetricValues)};
        ev.pHostObject = s->host;
        ev.pCounterDataImage = s->counter;
        ev.counterDataImageSize = s->counter_n;
        ev.rangeIndex = r;
        ev.ppMetricNames = used;
        ev.numMetrics = nused;
        ev.pMetricValues = vals;
        CK(p->cuptiProfilerHostEvaluateToGpuValues(&ev),
           "cuptiProfilerHostEvaluateToGpuValues");
        json_t *m = json_object();
        for (size_t k = 0; k < nused; k++)
            json_object_set_new(m, used[k], json_real(vals[k]));
        /* User ranges are named "<launch index>:<kernel>"; auto ranges come in
         * launch order. */
        size_t idx = r;
        if (!o->kernel_replay && rname[0]) {
            char *end;
            unsigned long v = strtoul(rname, &end, 10);
            if (*end == ':')
                idx = v;
        }
        json_array_append_new(ranges, json_pack("{s:I, s:s, s:s, s:o}", "index",
                                                (json_int_t)idx, "kernel",
                                                idx < l->nlaunches ? l->launches[idx].kernel
                                                                   : "?",
                                                "range", rname, "metrics", m));
    }
out:
    return st;
}

kh_status kh_rprof_run(kh_rprof *p, kh_launch_list *l, const kh_rprof_opts *o, json_t **out,
                       kh_err *err)
{
    *out = NULL;
    if (!l->nlaunches)
        return kh_err_set(err, KH_EINVAL, "profile: the launch list has no launches");
    if (!o->nmetrics)
        return kh_err_set(err, KH_EINVAL, "profile: no metrics asked for");
    double t0 = kh_now();
    kh_status st = KH_OK;
    session S = {0}, *s = &S;
    const char **used = calloc(o->nmetrics, sizeof *used);
    double *vals = calloc(o->nmetrics, sizeof *vals);
    json_t *dropped = json_array(), *ranges = json_array();
    size_t nused = 0, passes = 0, dropped_ranges = 0;
    int enabled = 0;
    double t_collect = 0;
    const char *flush = "none";
    if (!used || !vals) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto out;
    }
    if (!o->kernel_replay)
        sweep_init(p);
    if ((st = config(p, s, o, used, &nused, dropped, err)))
        goto out;
    kh_host_num_passes np = {.structSize = KH_SZ(kh_host_num_passes, numOfPasses)};
    np.configImageSize = s->config_n;
    np.pConfigImage = s->config;
    CK(p->cuptiProfilerHostGetNumOfPasses(&np), "cuptiProfilerHostGetNumOfPasses");

    /* Before the profiler is enabled: no allocation inside a session. */
    if (!o->kernel_replay && (st = snapshot(p, s, l, err)))
        goto out;

    CUpti_RangeProfiler_Enable_Params ep = {
        .structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
    ep.ctx = p->ctx;
    CK(p->cuptiRangeProfilerEnable(&ep), "cuptiRangeProfilerEnable");
    s->rp = ep.pRangeProfilerObject;
    enabled = 1;

    if ((st = set_config(p, s, l, o, used, nused, err)))
        goto out;

    if ((st = kh_gpu_sync(p->g, err)))
        goto out;
    double tc = kh_now();
    if ((st = run_passes(p, s, l, o, &passes, &flush, err)))
        goto out;
    if ((st = decode_ranges(p, s, l, o, used, nused, vals, ranges, &dropped_ranges, err)))
        goto out;
    t_collect = kh_now() - tc;
out:
    if (enabled) {
        CUpti_RangeProfiler_Disable_Params xp = {
            .structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
        xp.pRangeProfilerObject = s->rp;
        p->cuptiRangeProfilerDisable(&xp);
    }
    host_fini(p, s);
    for (size_t i = 0; i < s->nsnap; i++)
        if (s->snap[i] && !kh_gpu_poisoned(p->g))
            kh_gpu_api(p->g)->cuMemFree(s->snap[i]);
    free(s->snap);
    free(s->config);
    free(s->counter);
    if (!st) {
        json_t *names = json_array();
        for (size_t k = 0; k < nused; k++)
            json_array_append_new(names, json_string(used[k]));
        *out = json_pack("{s:s, s:s, s:I, s:o, s:O, s:O, s:I, s:s, s:f, s:f}", "chip",
                         p->chip, "replay", o->kernel_replay ? "kernel" : "user", "passes",
                         (json_int_t)passes, "metrics", names, "dropped", dropped, "ranges",
                         ranges, "dropped_ranges", (json_int_t)dropped_ranges, "l2_flush",
                         flush, "setup_s", kh_now() - t0 - t_collect, "collect_s",
                         t_collect);
    }
    json_decref(dropped);
    json_decref(ranges);
    free(used);
    free(vals);
    return st;
}
