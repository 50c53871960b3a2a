/* rprof.h: the in-process profiler tier: CUDA 13's Range Profiler and
 * Profiler Host API (both exported by libcupti.so.13, which loads
 * libnvperf_host.so itself), in a "profile" worker.  It never shares a process
 * with activity tracing (cupti.h): the gpu worker times, the profile worker
 * counts, so neither perturbs the other and a tool like ncu stays CUPTI's only
 * subscriber wherever it runs.
 *
 * Each launch of a launch list gets its own range, so metrics come per kernel.
 * Two replay modes:
 *   user    (default) user range + user replay: the list runs once per pass;
 *           every buffer is snapshotted first and restored before each pass
 *           (so in-place kernels are safe), and L2 is made cold before each
 *           range by a kernel that reads 2 x L2 (rprof.c says why not a
 *           memset), as ncu's --cache-control all does;
 *   kernel  auto range + kernel replay: CUPTI replays each kernel, saving and
 *           restoring memory itself; no snapshot, no flush.
 * Sequence (gpu-facts.md §3): ProfilerInitialize, DeviceGetChipName,
 * GetCounterAvailability, HostInitialize, ConfigAddMetrics, GetConfigImage,
 * GetNumOfPasses, RangeProfilerEnable, GetCounterDataSize,
 * CounterDataImageInitialize, SetConfig, Start/Push/launch/Pop/Stop until all
 * passes are submitted, DecodeData, GetCounterDataInfo, EvaluateToGpuValues,
 * Disable, HostDeinitialize. */
#ifndef KH_RPROF_H
#define KH_RPROF_H

#include "gpu/launch.h"

#include <jansson.h>

typedef struct kh_rprof kh_rprof;

/* Load CUPTI, initialise the profiler for g's device, read the chip name and
 * the counter availability image.  KH_EUNSUPPORTED ("no counters: ...") when
 * counters are not permitted or not supported here (insufficient privileges,
 * another CUPTI subscriber such as ncu, virtualised device, ...); KH_ENODEV
 * when libcupti is missing. */
kh_rprof *kh_rprof_open(kh_gpu *g, const char *cuda_home, kh_err *err);
void kh_rprof_close(kh_rprof *p);
/* "GH100"; valid while p lives. */
const char *kh_rprof_chip(const kh_rprof *p);

typedef struct kh_rprof_opts {
    const char *const *metrics; /* metric names */
    size_t nmetrics;
    int kernel_replay;          /* 0: user replay (snapshot + restore + flush) */
} kh_rprof_opts;

/* Profile every launch of l.  *out (new):
 *   {"chip", "replay", "passes", "metrics": [names used],
 *    "dropped": [{"metric", "why"}],   metrics this chip does not know
 *    "ranges": [{"index", "kernel", "range", "metrics": {name: value}}],
 *    "dropped_ranges", "l2_flush": "read-sweep" | "memset" | "none",
 *    "setup_s", "collect_s"}
 * Unknown metric names are dropped and listed, not fatal (the list is
 * configurable and names drift between versions).  The device must be idle
 * of other work of this process. */
kh_status kh_rprof_run(kh_rprof *p, kh_launch_list *l, const kh_rprof_opts *o, json_t **out,
                       kh_err *err);

#endif
