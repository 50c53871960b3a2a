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

#include "profile/bottleneck.h"
#include "core/engine.h"
#include "store/store.h"

#include <jansson.h>
#include <stdint.h>

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
    /* Recording (profile_store.c).  store NULL: nothing is read or written,
     * the worker measures peaks afresh. */
    kh_store *store;            /* borrowed; must not be inside update/view */
    const char *task, *candidate, *evaluation; /* the record's links, when known */
    const json_t *context;      /* extra provenance for the record (e.g. the
                                   workload), copied as "context"; may be NULL */
    double peaks_max_age_s;     /* stored peaks younger than this are reused;
                                   0: KH_PROFILE_PEAKS_MAX_AGE; < 0: any age */
    int remeasure_peaks;        /* measure now, whatever is stored (and keep it) */
} kh_profile_opts;

#define KH_PROFILE_PEAKS_MAX_AGE (7 * 86400.0)

/* Profile.  *report (new):
 *   {"gpu", "peaks", "device", "counters", "why"?, "chip"?, "replay"?, "passes"?,
 *    "metrics": [used], "dropped": [...], "timing": {...},
 *    "kernels": [{"index", "kernel", "launch": {...}, "metrics": {...},
 *                 "state": {...bottleneck table...}}],
 *    "state": {...the candidate's...}, "signature": "...",
 *    "ncu"?: {"report", "csv", "command", "kernels": [{..., "state"}],
 *             "dram_pct_delta": [per kernel: ncu - in-process], "error"?},
 *    "store_id"? | "store_error"?}
 * "peaks" are the peaks used, with "source" ("store" | "measured"),
 * "measured_at" and, when kept, "record" (the device record).  With a store,
 * the run ends by writing the report there (kh_profile_store); a failed write
 * is not a failed profile: it lands in "store_error".
 * Counters refused is not an error: "counters": false, "why", and timings.
 * An ncu failure lands in report.ncu.error (the in-process tier stands). */
kh_status kh_profile_run(kh_engine *e, const kh_profile_opts *o, json_t **report,
                         kh_err *err);

/* ---- the store (profile_store.c) ------------------------------------------------- */

/* "device-<uuid>" (the id of a GPU's peaks record).  KH_EINVAL for a UUID
 * an id cannot hold. */
kh_status kh_profile_device_id(const char *uuid, char id[KH_STORE_ID_MAX], kh_err *err);

/* The peaks kept for the GPU gpu describes (kh_gpu_info's object: uuid,
 * driver_version, ...).  When a "device" record exists, holds a copy
 * bandwidth, was measured under the same driver and less than max_age_s ago
 * (max_age_s < 0: any age): *peaks = a new copy of its peaks plus "source":
 * "store", "measured_at", "record": id.  Otherwise *peaks = NULL and *why (a
 * static string) says why; that is KH_OK too.  Errors: the store's. */
kh_status kh_profile_peaks_lookup(kh_store *s, const json_t *gpu, double max_age_s,
                                  json_t **peaks, const char **why, kh_err *err);

/* Keep peaks just measured for gpu: the "device" record device-<uuid>
 * {gpu_uuid, name, driver_version, ..., peaks {copy_bytes_per_s, copy_median_ns,
 * copy_bytes, timer, method}, measured_at (peaks' own measured_at when
 * given, else now), measured_by}, replacing an older one.  KH_EINVAL when peaks hold no copy bandwidth (a failed measurement is
 * never kept). */
kh_status kh_profile_peaks_save(kh_store *s, const json_t *gpu, const json_t *peaks,
                                char id_out[KH_STORE_ID_MAX], kh_err *err);

typedef struct kh_profile_store_opts {
    const unsigned char *cubin; /* stored as cubin_blob (= cubin_hash); may be NULL */
    size_t cubin_len;
    const json_t *spec;         /* the launch list profiled, kept as launch_list */
    const char *task, *candidate, *evaluation; /* links (must exist in s) */
    const json_t *context;      /* kept as "context" */
} kh_profile_store_opts;

/* One "profile" record from a report of kh_profile_run, in one transaction:
 *   status = the candidate state's kind, tool = "cupti" | "cupti+ncu",
 *   gpu_uuid, gpu, peaks (the peaks used; device = their record when stored),
 *   device_limits, counters, why, chip, replay, passes, metric_names, dropped,
 *   timing, kernels [{index, kernel, launch (resources), metrics, state}],
 *   state, signature, launch_list, cubin_blob, cubin_hash, context, links,
 *   ncu {command, seconds, kernels [{metrics, units, state}], dram_pct_delta,
 *        report_blob, report_bytes, csv_blob, report/csv (the paths) | error}.
 * The ncu files are read from report.ncu.report / .csv: their bytes are the
 * blobs.  id_out receives the record's id. */
kh_status kh_profile_store(kh_store *s, const json_t *report, const kh_profile_store_opts *o,
                           char id_out[KH_STORE_ID_MAX], kh_err *err);

/* ---- a task's candidate (profile_task.c) ------------------------------------------- */

struct kh_task_def;
struct kh_task_solution;
struct kh_task_workload;

/* The concrete launch list for one workload of a candidate, as the profile
 * worker takes it (launch.h): one buffer per non-scalar input (init
 * "random", seeds seed, seed+1, ...), per output (init "none") and per
 * workspace buffer (init "zero"), sized from the workload's axes; launches
 * with the manifest's grid / block / shared bytes resolved and its arguments
 * as {"buf": name}, axis and value expressions as {"i32"|"i64"|"u32"|"u64":
 * v}, scalar inputs by value (the workload's value, else 1).  ctx (may be
 * NULL) gets the task's minimum bytes and FLOPs (0 when the definition gives
 * none).  *spec new.  KH_EUNSUPPORTED for a host candidate or a scalar dtype
 * that cannot be passed by value. */
kh_status kh_profile_task_spec(const struct kh_task_def *d, const struct kh_task_solution *sol,
                               const struct kh_task_workload *w, uint64_t seed, json_t **spec,
                               kh_bn_context *ctx, kh_err *err);

typedef struct kh_profile_task_opts {
    const char *task_path;  /* a task package or dataset (task.h) */
    /* the task already loaded (kh_task_open; task_path then only names it):
     * nothing is read or parsed again */
    const struct kh_task_set *task_set;
    const char *solution;   /* a Solution JSON file, or a solution's name in the task */
    const char *solution_json; /* or a Solution JSON in memory (solution: its label) */
    size_t solution_json_len;
    const char *workload;   /* a workload uuid; NULL: the definition's first */
    uint64_t seed;          /* input fill; 0: 1 */
    int trusted;            /* compile as trusted (no static checks) */
    const char *exe;        /* the compile server's executable; NULL: this one */
    kh_store *cache;        /* compile records and cache (compile_service.h); may be NULL */
} kh_profile_task_opts;

typedef struct kh_profile_task {
    unsigned char *cubin;   /* the compiled module */
    size_t cubin_len;
    json_t *spec;           /* the launch list (kh_profile_task_spec) */
    kh_bn_context ctx;      /* min_bytes, flops */
    json_t *context;        /* {task_path, definition, solution, workload, axes,
                               min_bytes, flops}: the profile record's "context" */
    json_t *compile;        /* {key, arch, nvrtc} */
    char task_id[KH_STORE_ID_MAX];      /* the ids the evaluation records them under */
    char candidate_id[KH_STORE_ID_MAX];
} kh_profile_task;

/* Load the task and the solution as the evaluation does, choose the
 * workload, build the launch list and compile the source (by a compile
 * server of kh_compile_service, as eval compiles: never NVRTC in this
 * process).  On success fill *t (free with kh_profile_task_free); a compile
 * error is KH_ECOMPILE (KH_ETIMEOUT past the deadline) with the log in err. */
kh_status kh_profile_task_prepare(kh_engine *e, const kh_profile_task_opts *o,
                                  kh_profile_task *t, kh_err *err);
void kh_profile_task_free(kh_profile_task *t);

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
