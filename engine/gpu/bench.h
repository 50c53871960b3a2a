/* bench.h: the timing protocols, run inside a gpu worker on one kh_gpu.
 *
 *   official  FlashInfer-Bench exactly (fib-harness.md §Timing): per trial
 *             sync; call; sync; 5 x (flush; call); warmup x (flush; call); sync;
 *             then iters x (flush; sync; t0; call; t1; sync) with CUPTI on for
 *             the timed loop only; span per iteration; median per trial; mean
 *             over trials.  An iteration with no records, or a kernel set that
 *             differs from the first iteration's, is RUNTIME_ERROR.
 *   screen    cold L2, batches of 10, stop once the relative 95% confidence
 *             half-width of the mean is under rel_ci (or at max_iters).
 *   precise   nvbench's rule: >= 10 samples and >= min_gpu_s of GPU time, and
 *             relative standard deviation under max_rel_stdev; timeout_s cap.
 *   paired    A and B interleaved in ABBA blocks on the same inputs; a
 *             bootstrap confidence interval on median(A) / median(B).
 *
 * Without CUPTI (another profiler attached, or no libcupti) CUDA events time
 * each call and the result says timer = "events": never silently. */
#ifndef KH_BENCH_H
#define KH_BENCH_H

#include "gpu/cupti.h"
#include "gpu/gpu.h"

typedef struct kh_bench_target {
    /* Enqueue one call on kh_gpu_stream(g).  Must not synchronize. */
    kh_status (*call)(void *ctx, kh_err *err);
    /* Optional: prepare trial t (fresh inputs) before its calls. */
    kh_status (*trial)(void *ctx, int t, kh_err *err);
    /* Optional: told when the timed calls start (1) and end (0), so a target
     * can tell timed calls from warm-up ones (to verify their outputs). */
    void (*phase)(void *ctx, int timed);
    /* Optional: work before EVERY call, warm-up ones included, ahead of its
     * L2 flush and outside any timing window (the gpu worker refills the
     * call's inputs and poisons its outputs here), so a kernel cannot tell
     * warm-up calls from timed ones by what it is given. */
    kh_status (*before)(void *ctx, kh_err *err);
    /* Optional: after each timed call has finished (synchronised, its window
     * closed): the gpu worker copies a verified call's outputs back here. */
    kh_status (*after)(void *ctx, kh_err *err);
    void *ctx;
} kh_bench_target;

typedef enum kh_protocol {
    KH_PROTO_OFFICIAL,
    KH_PROTO_SCREEN,
    KH_PROTO_PRECISE,
} kh_protocol;

typedef struct kh_bench_opts {
    kh_protocol protocol;
    int warmup, iters, trials; /* official: 10 / 50 / 3 */
    int cold_l2;               /* flush before every timed call (1 unless told) */
    double rel_ci;             /* screen: 0.02 */
    int max_iters;             /* screen and precise cap: 200 / 100000 */
    double min_gpu_s;          /* precise: 0.5 */
    double max_rel_stdev;      /* precise: 0.005 */
    double timeout_s;          /* precise: 15 */
    int use_events;            /* time with CUDA events even if CUPTI is there */
} kh_bench_opts;

/* The contest's per-definition flags (fib-harness.md §3): GDN prefill runs
 * with warmup 1, iters 5, trials 3.  Tolerances are the comparison's. */
void kh_bench_definition_flags(const char *definition, kh_bench_opts *o);

/* Defaults for a protocol. */
void kh_bench_defaults(kh_protocol p, kh_bench_opts *o);
const char *kh_protocol_name(kh_protocol p);
int kh_protocol_parse(const char *s, kh_protocol *p);

typedef struct kh_bench_result {
    char status[32];        /* "OK" or "RUNTIME_ERROR" (a verdict, with why) */
    char why[512];
    const char *timer;      /* "cupti" or "events" */
    double latency_ns;      /* the protocol's number */
    double window_latency_ns; /* official: the same by FlashInfer-Bench's window method */
    double median_ns, mean_ns, stdev_ns, min_ns, max_ns;
    double rel_ci;          /* relative 95% half-width of the mean */
    double sum_kernel_ns;   /* median over calls of the summed record durations */
    double gap_ns;          /* median over calls of span - sum: launch gaps inside a call */
    double gpu_time_s;      /* total measured */
    /* the GPU's active time over the timed batches: with CUPTI the union of
     * every activity record of each batch (every kernel, copy and memset,
     * the evaluator's input refills, L2 flushes and kept outputs as well as
     * the timed calls); with events, the timed calls' own time */
    double active_s;
    int kernels_per_call;
    int trials;
    double trial_median_ns[16];
    size_t n;
    double *samples_ns;     /* n samples, malloc'ed; freed by kh_bench_result_free */
    int nnames;
    char names[4][128];     /* kernel names of the first call */
    /* host timing (hostbench.h): timed calls that waited on the run queue
     * (another process had the core) and were taken again, and those kept
     * because the retakes ran out (their samples include the wait) */
    size_t contended, contended_kept;
} kh_bench_result;

/* c may be NULL (events).  KH_OK when it ran, even if the verdict is
 * RUNTIME_ERROR; a CUDA failure in a call returns KH_ECUDA. */
kh_status kh_bench_run(kh_gpu *g, kh_cupti *c, const kh_bench_target *t,
                       const kh_bench_opts *o, kh_bench_result *r, kh_err *err);
void kh_bench_result_free(kh_bench_result *r);

typedef struct kh_paired_result {
    const char *timer;
    double median_a_ns, median_b_ns;
    double ratio;           /* median(A) / median(B): > 1 means B is faster */
    double ci_lo, ci_hi;    /* 95% bootstrap interval of the ratio */
    const char *verdict;    /* "faster" (B), "slower" (B), "tie" */
    size_t n_a, n_b;
    uint64_t seed;
} kh_paired_result;

/* Interleave A and B (blocks of `block` calls, ABBA order) for `rounds`
 * rounds, cold L2; margin widens the tie band (e.g. 0.005). */
kh_status kh_bench_paired(kh_gpu *g, kh_cupti *c, const kh_bench_target *a,
                          const kh_bench_target *b, int rounds, int block, double margin,
                          uint64_t seed, kh_paired_result *r, kh_err *err);

/* Fill r's median, mean, stdev, min, max, measured time and relative 95%
 * half-width from r->samples_ns[0..n) (the GPU and host loops share it). */
void kh_bench_summarize(kh_bench_result *r);

/* Statistics helpers (exposed for tests): median of n values (copies). */
double kh_stat_median(const double *x, size_t n);
void kh_stat_mean_sd(const double *x, size_t n, double *mean, double *sd);

#endif
