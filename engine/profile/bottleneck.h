/* bottleneck.h: the bottleneck state the controller reads, as a pure function
 * of recorded profiler metrics and the launch's context.  No CUDA here: the
 * same code classifies metrics from the in-process range profiler, from an
 * ncu CSV, or from a fixture in a test.
 *
 * The rule is Nsight Compute's SOLBottleneck (gpu-facts.md §4), with
 * sm = sm__throughput.avg.pct_of_peak_sustained_elapsed and
 * mem = gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed:
 *   1. sm >= 80 or mem >= 80        at that roof (the higher side);
 *   2. sm < 60 and mem < 60         "small-grid" when the grid is under one
 *                                   wave, else "latency-bound";
 *   3. |sm - mem| >= 10             the higher side ("compute-bound" /
 *                                   "memory-bound", not at the roof);
 *   4. otherwise                    "balanced".
 * Added to it: the re-read factor (DRAM bytes / the task's minimum bytes),
 * the fraction of speed of light (bound / measured time), the theoretical
 * occupancy and what limits it (registers, shared memory, block size), and
 * spills.  Out: a compact signature such as
 *   "memory-bound dram 82% sol 61% reread 1.9x occupancy:registers"
 * and a JSON table with every field. */
#ifndef KH_BOTTLENECK_H
#define KH_BOTTLENECK_H

#include "core/kh.h"

#include <jansson.h>

/* Metric names the classifier reads (the in-process tier's default list adds
 * the tensor-pipe metric, which is configurable: see KH_BN_TENSOR_METRIC). */
#define KH_BN_TIME "gpu__time_duration.sum"
#define KH_BN_SM "sm__throughput.avg.pct_of_peak_sustained_elapsed"
#define KH_BN_MEM "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
#define KH_BN_DRAM "dram__throughput.avg.pct_of_peak_sustained_elapsed"
#define KH_BN_DRAM_READ "dram__bytes_read.sum"
#define KH_BN_DRAM_WRITE "dram__bytes_write.sum"
#define KH_BN_WARPS "sm__warps_active.avg.pct_of_peak_sustained_active"
#define KH_BN_L2_HIT "lts__t_sector_hit_rate.pct"
/* Hopper: wgmma and mma.sync together (sm90 vocabulary; unverified here, see
 * the report of issue 8: correct after `ncu --query-metrics` on the H200). */
#define KH_BN_TENSOR_METRIC "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
/* Optional, when present (ncu sections give them): launch__waves_per_multiprocessor */
#define KH_BN_WAVES "launch__waves_per_multiprocessor"

/* One kernel's counters; NAN where not measured. */
typedef struct kh_bn_metrics {
    double time_ns;
    double sm_pct, mem_pct, dram_pct;
    double dram_read_bytes, dram_write_bytes;
    double warps_active_pct, l2_hit_pct, tensor_pct;
    double waves; /* ncu's launch__waves_per_multiprocessor, if given */
} kh_bn_metrics;

/* The launch and the device, for waves and occupancy; zeros where unknown. */
typedef struct kh_bn_launch {
    long blocks;              /* grid x*y*z */
    int threads_per_block;
    int regs_per_thread;
    long smem_per_block;      /* static + dynamic bytes */
    long local_bytes;         /* per-thread local memory (stack frame) */
    int spill_instructions;   /* from the cubin; -1 unknown */
    int api_blocks_per_sm;    /* cuOccupancyMaxActiveBlocksPerMultiprocessor */
    /* device limits (cuDeviceGetAttribute) */
    int sms, regs_per_sm, smem_per_sm, reserved_smem_per_block;
    int max_threads_per_sm, max_blocks_per_sm;
} kh_bn_launch;

/* The task's speed-of-light inputs and the device's measured peaks; zero or
 * negative where unknown. */
typedef struct kh_bn_context {
    double min_bytes;          /* the task's minimum bytes moved */
    double flops;              /* the task's FLOPs */
    double copy_bytes_per_s;   /* measured device copy bandwidth (read + write) */
    double matrix_flops_per_s; /* measured matrix rate */
    double measured_ns;        /* the timing protocol's latency; 0: use time_ns */
} kh_bn_context;

typedef struct kh_bn_state {
    int counters;              /* 0: "no counters" (why says why) */
    char why[256];
    const char *kind;          /* "memory-bound", "compute-bound", "latency-bound",
                                  "small-grid", "balanced", "no-counters" */
    int at_roof;               /* rule 1 */
    const char *roof;          /* "dram", "cache" (L1/L2), "sm", "tensor"; NULL */
    double roof_pct;           /* that unit's % of peak */
    double sm_pct, mem_pct, dram_pct;
    double time_ns;            /* measured time used for sol */
    double dram_bytes;         /* read + write; NAN unknown */
    double dram_bytes_per_s;   /* NAN unknown */
    double reread;             /* dram bytes / min bytes; NAN unknown */
    double sol_ns;             /* the bound; NAN unknown */
    double sol_fraction;       /* sol_ns / time_ns; NAN unknown */
    double waves;              /* NAN unknown */
    int blocks_per_sm;         /* 0 unknown */
    double occupancy_pct;      /* theoretical; NAN unknown */
    const char *limiter;       /* "registers", "shared-memory", "block-size", "none"; NULL unknown */
    int spills;                /* spill instructions (>0), 0 none, -1 unknown */
    long local_bytes;
    char signature[256];
} kh_bn_state;

/* Read metrics from a JSON object {name: number}; absent names stay NAN.
 * Numbers may be JSON numbers or strings ("1,980,000"). */
void kh_bn_metrics_from_json(const json_t *obj, kh_bn_metrics *m);
void kh_bn_metrics_init(kh_bn_metrics *m);

/* Per-resource block limits and the limiter.  Fills blocks_per_sm,
 * occupancy_pct and limiter of s; launch fields of 0 are unknown. */
void kh_bn_occupancy(const kh_bn_launch *l, kh_bn_state *s);

/* Classify one kernel.  m may be NULL with why set: "no counters" (timings
 * and the SOL bound still fill in).  l and c may be NULL. */
void kh_bn_classify(const kh_bn_metrics *m, const kh_bn_launch *l, const kh_bn_context *c,
                    const char *why_no_counters, kh_bn_state *s);

/* A candidate of several kernels: the state of the longest kernel, with
 * time, DRAM bytes, re-read factor and SOL over all of them.  n >= 1. */
void kh_bn_combine(const kh_bn_state *per_kernel, size_t n, const kh_bn_context *c,
                   kh_bn_state *out);

/* The structured table (new reference). */
json_t *kh_bn_state_json(const kh_bn_state *s);

/* Parse a number as ncu prints it: "1,980,000", "82.6", "n/a" -> NAN.
 * Returns 1 when a number was read. */
int kh_bn_parse_number(const char *s, double *out);

#endif
