/* profile.h: profiler evidence for one candidate, from the coordinator's
 * side.  kh_profile_run starts a "profile" worker (role_profile.c: range
 * profiler, occupancy, measured peaks), classifies every kernel with
 * bottleneck.h, and optionally runs the rich tier (ncu.h) on the same launch
 * list, comparing the two tiers' DRAM throughput.  The coordinator itself
 * never touches CUDA: the worker and ncu's target are child processes.
 *
 * The metric list is configurable: opts.metrics, else $KHLUA_PROFILE_METRICS
 * (comma-separated), else the default (the classifier's eight metrics and
 * KH_BN_TENSOR_METRIC).  Metrics a chip does not know are dropped and listed
 * in the report, never fatal. */
#ifndef KH_PROFILE_H
#define KH_PROFILE_H

#include "bottleneck.h"
#include "engine.h"

#include <jansson.h>

/* The metric list in force (new array of strings). */
json_t *kh_profile_default_metrics(void);

typedef struct kh_profile_opts {
    const unsigned char *cubin; /* the module (borrowed) */
    size_t cubin_len;
    const json_t *spec;         /* a concrete launch list (launch.h) */
    const json_t *metrics;      /* array of names; NULL: kh_profile_default_metrics */
    int kernel_replay;          /* rprof.h: 0 user replay, 1 kernel replay */
    kh_bn_context ctx;          /* min_bytes, flops, measured_ns (peaks come from the
                                   worker unless set here) */
    int ncu;                    /* also run Nsight Compute */
    const char *ncu_path;       /* NULL: search */
    const char *ncu_sections;   /* NULL: ncu.h's default */
    const char *out_dir;        /* ncu's report folder; NULL: <store>/../profiles/<time-pid> */
    const char *exe;            /* the khlua binary for workers; NULL: this one */
    double timeout_s;           /* per step; 0: 300 */
} kh_profile_opts;

/* Profile.  *report (new):
 *   {"gpu", "peaks", "device", "counters", "why"?, "chip"?, "replay"?, "passes"?,
 *    "metrics": [used], "dropped": [...], "timing": {...},
 *    "kernels": [{"index", "kernel", "launch": {...}, "metrics": {...},
 *                 "state": {...bottleneck table...}}],
 *    "state": {...the candidate's...}, "signature": "...",
 *    "ncu"?: {"report", "csv", "command", "kernels": [{..., "state"}],
 *             "dram_pct_delta": [per kernel: ncu - in-process], "error"?}}
 * Counters refused is not an error: "counters": false, "why", and timings.
 * An ncu failure lands in report.ncu.error (the in-process tier stands). */
kh_status kh_profile_run(kh_engine *e, const kh_profile_opts *o, json_t **report,
                         kh_err *err);

/* The classification step alone, pure: a profile worker's reply (as above,
 * without "kernels"/"state") plus context -> the report.  reply is borrowed;
 * *report is new.  Used by kh_profile_run and the tests. */
kh_status kh_profile_classify(const json_t *reply, const kh_bn_context *ctx, json_t **report,
                              kh_err *err);

/* Fill a kh_bn_launch from a launch record and the device limits (as the
 * worker reports them); either may be NULL. */
void kh_profile_launch_from_json(const json_t *launch, const json_t *device, kh_bn_launch *l);

/* In this process: load cubin, run spec's launches once, synchronise.  The
 * process ncu profiles (`khlua profile --run-only`); never the coordinator. */
kh_status kh_profile_target(const unsigned char *cubin, size_t n, const json_t *spec,
                            kh_err *err);

#endif
