/* hostbench.h: the timing protocols of bench.h for host-backend candidates
 * (issue 7, host part), run inside the host worker.
 *
 * Same protocols, same options (kh_bench_opts) and the same result
 * (kh_bench_result, timer = "monotonic"); the clock is CLOCK_MONOTONIC read
 * right around each call, and the "cold cache" flush writes a buffer larger
 * than the last-level cache (5/4 of its size, at least 8 MiB) before each
 * flushed call, outside the timed window:
 *
 *   official  per trial: call; 5 x (flush; call); warmup x (flush; call);
 *             then iters x (flush; t0; call; t1); median per trial, mean of
 *             the trial medians (latency_ns).
 *   screen    one trial: warmup, then batches of 10 timed calls until the
 *             relative 95% half-width of the mean is under rel_ci, or
 *             max_iters.
 *   precise   >= 10 samples and >= min_gpu_s of measured time (here: time
 *             inside the calls) and relative standard deviation under
 *             max_rel_stdev; capped at max_iters samples and timeout_s.
 *
 * Every timed call's sample is kept (r->samples_ns, in call order), but for
 * calls that waited on the run queue and were taken again (waited_ns
 * below: r->contended). */
#ifndef KH_HOSTBENCH_H
#define KH_HOSTBENCH_H

#include "gpu/bench.h"
#include "core/engine.h"

typedef struct kh_hostbench_target {
    /* One call of the candidate: the only thing inside the timed window. */
    kh_status (*call)(void *ctx, kh_err *err);
    /* Optional, outside the window.  pre runs before the flush of each call
     * (rotate inputs, poison outputs); post after t1.  timed_i is the index
     * of the call among the timed calls (the index of its sample), or -1 for
     * an untimed call (warm-up). */
    kh_status (*pre)(void *ctx, long timed_i, kh_err *err);
    kh_status (*post)(void *ctx, long timed_i, kh_err *err);
    /* Optional: trial t starts (official). */
    kh_status (*trial)(void *ctx, int t, kh_err *err);
    void *ctx;
    /* Optional, outside the window: after the flush, right before t0 (and
     * before an untimed call).  What the call may see only from here on
     * (its inputs, its poisoned outputs) is written here, so nothing that
     * runs beside the warden can start on it during the flush. */
    kh_status (*publish)(void *ctx, long timed_i, kh_err *err);
    /* Optional, outside the window: how long everything a call depends on
     * (the warden's thread, the candidate's threads) has waited on the run
     * queue so far, in ns (schedstat's run_delay, summed); UINT64_MAX when
     * unknown.  Read after the flush, before publish, and again after t1: a
     * timed call that waited more than KH_HOSTBENCH_WAIT_NS plus
     * KH_HOSTBENCH_WAIT_SHARE of its sample (a core taken by another
     * process: on a loaded machine a scheduler tick, 4 ms, lands in a 50 us
     * call) is taken again, up to one retake per timed call of the run;
     * past that its sample is kept and counted (r->contended_kept). */
    uint64_t (*waited_ns)(void *ctx);
} kh_hostbench_target;

#define KH_HOSTBENCH_WAIT_NS 20000.0
#define KH_HOSTBENCH_WAIT_SHARE 0.02

/* Run protocol o->protocol on t.  KH_OK when it ran (r->status "OK"); a
 * failing callback's status otherwise (r still freed by the caller).  Polls
 * the engine's stop request when e is non-NULL (KH_EINTR). */
kh_status kh_hostbench_run(kh_engine *e, const kh_hostbench_target *t, const kh_bench_opts *o,
                           kh_bench_result *r, kh_err *err);

/* The last-level cache size in bytes (sysconf, else sysfs, else 32 MiB). */
size_t kh_hostbench_llc_bytes(void);
/* Write the flush buffer once (allocated on first use; 5/4 x LLC, >= 8 MiB). */
kh_status kh_hostbench_flush(kh_err *err);
/* Best memcpy bandwidth in bytes/s for a block of `bytes` copied reps times
 * (a cache-resident block gives the fastest the host can move data: the
 * conservative bound for the speed-of-light check). */
double kh_hostbench_copy_bandwidth(size_t bytes, int reps);

#endif
