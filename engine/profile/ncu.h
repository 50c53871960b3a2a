/* ncu.h: the rich profiler tier: Nsight Compute run as a child process on a
 * `khlua profile --run-only` target (a process that runs one launch list once,
 * with no CUPTI of its own: ncu is CUPTI's one subscriber there), its report
 * kept, and its raw page parsed.
 *
 * CSV (`ncu --csv --page raw`, gpu-facts.md §4): tool lines ("==PROF==",
 * "==WARNING==") may come first; then a header row ("ID","Process ID",...,
 * "Kernel Name",...,metric names), a units row, and one row per profiled
 * kernel.  Numbers may carry quoted thousands separators ("1,980,000"). */
#ifndef KH_NCU_H
#define KH_NCU_H

#include "core/kh.h"

#include <jansson.h>

/* Parse ncu's raw CSV.  *kernels: a new array of
 *   {"id": n, "kernel": "...", "grid": "...", "block": "...",
 *    "metrics": {name: number | string}, "units": {name: unit}}
 * (metrics are the columns whose name holds "__"; a value that is not a
 * number stays a string).  KH_EPARSE when no header row is found. */
kh_status kh_ncu_parse_csv(const char *text, size_t len, json_t **kernels, kh_err *err);

typedef struct kh_ncu_opts {
    const char *ncu;         /* NULL: `ncu` on PATH or in cuda_home/bin */
    const char *cuda_home;
    const char *exe;         /* the khlua binary to run as the target */
    const char *cubin_path;  /* the target's inputs */
    const char *spec_path;
    const char *const *kernels; /* kernel names to profile (-k regex:^(a|b)$) */
    size_t nkernels;
    size_t launches;         /* launch count (-c) */
    const char *metrics;     /* comma-separated, added with --metrics; may be NULL */
    const char *sections;    /* comma-separated --section identifiers; NULL: SpeedOfLight,
                                LaunchStats, Occupancy, MemoryWorkloadAnalysis */
    const char *out_dir;     /* report.ncu-rep and raw.csv are written here */
    double timeout_s;        /* per ncu run; 0: 300 */
} kh_ncu_opts;

/* Profile, export the raw page, parse it.  *result (new):
 *   {"report": path, "csv": path, "kernels": [...as above...],
 *    "command": "...", "seconds": s}
 * KH_ENOTFOUND without ncu; KH_EUNSUPPORTED when counters are not permitted
 * (ERR_NVGPUCTRPERM), with ncu's words; KH_ECHILD when ncu fails otherwise
 * (the message ends with the tail of its output). */
kh_status kh_ncu_run(const kh_ncu_opts *o, json_t **result, kh_err *err);

#endif
