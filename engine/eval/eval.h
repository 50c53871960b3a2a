/* eval.h: evaluation, the coordinator's side (issue 6; docs/evaluation.md).
 *
 * kh_eval_run takes a task (package or dataset), a solution (a name in it, or
 * a Solution JSON file) and a selection of workloads, and returns one
 * FlashInfer-Bench Trace per workload: {"definition", "workload", "solution",
 * "evaluation": {status, correctness, performance, ..., "khlua": {...}}}.
 * For each workload it resolves the candidate's manifest, builds the
 * artifact (cc for the host backend, NVRTC for cuda), obtains the reference
 * outputs (cached per (definition, workload uuid, seed); else computed by the
 * definition's trusted reference through the same `evaluate` request with
 * timing null, or, for a definition with no trusted reference, by its Python
 * `run` through python3 + torch (pyref.h), cached in the store too), sends
 * the candidate's `evaluate` request to a worker pool
 * ("host" or "gpu"), compares every returned output with engine/check, and
 * applies the hardened checks and the speed-of-light bound.
 *
 * The coordinator never runs candidate code: worker crashes and overruns
 * become RUNTIME_ERROR / TIMEOUT verdicts, and the next candidate gets a
 * fresh worker.  A kh_eval keeps its worker pools, built artifacts and
 * reference outputs between calls; it is not thread-safe.
 *
 * Every verdict is recorded in the store (unless opts.record = 0): the task,
 * the candidate (content-addressed by its Solution JSON), the raw timing
 * samples as a blob (float64 LE per timed call) and an `evaluation` record;
 * the trace then carries khlua.record (its id) and khlua.samples_blob.  When
 * it cannot be stored (the store refused, or is open elsewhere in this
 * process) the trace says why in khlua.stored and keeps the samples inline
 * (khlua.samples_ns). */
#ifndef KH_EVAL_H
#define KH_EVAL_H

#include "core/engine.h"

#include <jansson.h>
#include <stdint.h>

typedef struct kh_eval kh_eval;

struct kh_store;

typedef struct kh_eval_config {
    struct kh_store *store;    /* borrowed, outlives the evaluator; NULL: the engine's
                                  store path, opened on the first verdict recorded */
    const char *exe;           /* worker executable (NULL: this one; tests pass khlua) */
    const char *launch;        /* worker launch template (NULL: local) */
    uint64_t host_as_bytes;    /* host worker address-space limit; 0: 8 GiB */
} kh_eval_config;

/* cfg may be NULL.  NULL with err when out of memory. */
kh_eval *kh_eval_new(kh_engine *e, const kh_eval_config *cfg, kh_err *err);
void kh_eval_free(kh_eval *ev);

typedef struct kh_eval_opts {
    const char *workloads;     /* NULL or "all"; "N" (the first N); "uuid,uuid,..." */
    const char *protocol;      /* "official" (default), "screen", "precise" */
    int timing;                /* 1 (default through kh_eval_opts_default): time PASSED ones */
    int parity;                /* FlashInfer-Bench's checks alone: no hardened checks */
    int trials;                /* correctness trials (input sets); 3 */
    int shapes;                /* also check correctness (no timing) on this many admissible
                                  shapes not in the workload list (engine/eval/shapes.h: drawn
                                  from the base seed); their traces carry khlua.shape_of */
    uint64_t seed;             /* base seed: every seed of the run (correctness trials, timing
                                  inputs, which timed calls are verified) derives from it and
                                  the workload; KH_EVAL_SEED_RANDOM (the default): drawn from
                                  the OS CSPRNG per run.  Recorded (khlua.base_seed), so
                                  passing it back reproduces the run's inputs exactly */
    int warmup, iters;         /* -1: the protocol's */
    int timing_trials;         /* official: -1: 3 */
    int max_iters;             /* screen / precise cap on timed calls; 0: the protocol's */
    double timing_timeout_s;   /* precise: stop after this long; 0: the protocol's (15 s) */
    int rotate_inputs;         /* timing input sets (values and addresses); 3, at most trials */
    double verify_timed_fraction; /* share of timed calls whose outputs are verified (1: every
                                     one, the default), lowered per workload so the verified
                                     outputs fit verify_bytes; a secret random schedule */
    double verify_bytes;       /* output bytes the verified timed calls of one workload may
                                  return in all; 0: 256 MiB */
    int cold;                  /* flush caches before each timed call; 1 */
    int deterministic;         /* -1: host on, cuda off (atomics reorder float sums); 0/1 */
    double deadline_s;         /* per workload and per worker request; 300 */
    double atol, rtol, required_matched_ratio; /* < 0: the definition's */
    int time_reference;        /* time the reference too (reference_latency_ms); 1 */
    /* 1: a gpu candidate whose trusted reference also runs on the GPU is
     * compared on the device, in its own request (docs/evaluation.md,
     * "Verification on the device"); 0 (default until that path has run on a
     * GPU in full): the outputs come back and the coordinator compares them */
    int device_compare;
    int record;                /* store every verdict (1, the default) */
    /* What a policy run records with each verdict (the engine is the one
     * writer of evaluation records): its run id, round (-1: none; 0 the
     * seed) and what the measurement was for ("sweep", "official", ...);
     * NULL: a plain `khlua eval`. */
    const char *run;
    int64_t round_index;
    const char *purpose;
    struct kh_store *store;    /* record into this open store (borrowed, this call only);
                                  NULL: the evaluator's (cfg.store, else the engine's) */
    uint64_t host_memory_bytes; /* host worker memory limit; 0: the evaluator's (8 GiB);
                                   a change restarts the host worker */
    /* compute-sanitizer tools run on a cuda candidate that PASSED, one
     * correctness call each in a gpu worker started under the tool
     * ("memcheck,racecheck,initcheck"; synccheck too); NULL or "": none.
     * Errors in the candidate's kernels make the verdict RUNTIME_ERROR with
     * failed_check "sanitizer:<tool>"; khlua.sanitizer keeps each tool's
     * findings.  No compute-sanitizer installed: kh_eval_run fails. */
    const char *sanitize;
    double sanitize_deadline_s; /* per tool; 0: 4 x deadline_s (the tools slow kernels down) */
    /* Placement (docs/scale-out.md).  Independent requests (workloads) run in
     * parallel on the pool's workers; all requests of one workload (the
     * reference's, the candidate's, the reference timing the speedup is
     * measured against) run on one GPU.  A change restarts the workers. */
    const char *gpus;          /* NULL: one gpu worker on the default device; "all" (the
                                  visible GPUs, probed in a child process), "N" (the first
                                  N), or a list of indices or UUIDs "0,2" */
    int workers_per_gpu;       /* workers sharing each GPU; 0: 1 */
    int host_workers;          /* host workers (per host); 0: 1 */
    const char *launch;        /* NULL: the evaluator's (cfg.launch, else "local"); "local",
                                  "srun", "ssh", or a template (supervisor.h) */
    const char *hosts;         /* "a,b": {host} of the workers' slots, round robin ("ssh") */
    /* Called as each workload's verdict is made (done of total; trace: its
     * Trace object, borrowed for the call), for progress displays; NULL:
     * none.  Runs on the caller's thread, between worker requests. */
    void (*progress)(void *ud, size_t done, size_t total, const json_t *trace);
    void *progress_ud;
} kh_eval_opts;

#define KH_EVAL_SEED_RANDOM UINT64_MAX

void kh_eval_opts_default(kh_eval_opts *o);

/* Evaluate.  *traces: a new JSON array of Trace objects, one per selected
 * workload, in workload order.  Could-not-run problems (task unreadable,
 * solution or reference missing, workload unknown, the reference failing,
 * no GPU for a cuda candidate) return non-OK with err; a candidate's failure
 * (compile error, crash, wrong output, overrun) is a verdict, KH_OK. */
kh_status kh_eval_run(kh_eval *ev, const char *task_path, const char *solution,
                      const kh_eval_opts *o, json_t **traces, kh_err *err);

/* The solution kh_eval_run_task evaluates: either the name of one of the
 * task's solutions, or a Solution JSON held in memory (json, json_len bytes;
 * label names it in messages and records, e.g. its file or "candidate"),
 * parsed against the task's definitions: a candidate from anywhere. */
typedef struct kh_eval_solution {
    const char *name;
    const char *json;
    size_t json_len;
    const char *label;
} kh_eval_solution;

struct kh_task;
/* kh_eval_run on a task already opened (kh_task_open, kh.task.load): no file
 * is read or parsed again; the verdicts carry t's fingerprint, and name a
 * file that changed on disk since it was opened.  kh_eval_run is this with
 * the task opened for the one call, and a solution that names a file read
 * as its JSON. */
kh_status kh_eval_run_task(kh_eval *ev, const struct kh_task *t, const kh_eval_solution *s,
                           const kh_eval_opts *o, json_t **traces, kh_err *err);

/* The paired comparison (docs/evaluation.md, "Paired comparison"): the
 * candidate and the incumbent measured `reps` times, alternately (A B, B A,
 * ...), each repetition on the same workloads and the same inputs (one seed
 * per repetition, derived from o->seed, drawn from the OS when random), with
 * every check of o->protocol (a screen, normally): each measurement is a
 * kh_eval_run_task, recorded like any verdict, purpose "<o->purpose>:candidate"
 * or ":incumbent".  A workload's requests run on one GPU whoever is
 * evaluated (its placement group), so both meet on the same device and
 * worker.  *out: {protocol "paired", measure_protocol, reps, seed, alpha,
 * resamples, workloads [uuids], order ["candidate", "incumbent", ...],
 * ratios [incumbent / candidate latency per (repetition, workload)],
 * candidate_ms and incumbent_ms {uuid: [latency_ms per repetition]},
 * contended (the largest share of host timed calls kept although they
 * waited on the run queue), evidence [record ids], candidate and incumbent
 * [every trace]; and either ratio (geometric mean), lo and hi (the alpha and
 * 1 - alpha quantiles of a percentile bootstrap of it, seeded with seed:
 * policies/lib/stats.lua gives the same figures from the ratios), or failed
 * {who, status, workload, check, log}: the first measurement not PASSED with
 * a latency (the repetition it fell in is completed, so the incumbent's
 * figures come back; none after it runs)}.  Could-not-run problems return
 * non-OK with err, as kh_eval_run_task. */
typedef struct kh_eval_paired_opts {
    int reps;          /* repetitions (each: both measured); 5 */
    double alpha;      /* the interval's quantiles: alpha and 1 - alpha; 0.05 */
    int resamples;     /* bootstrap resamples; 2000 */
    double stop_below; /* in (0, 1): stop after the second repetition or a later one
                        * when every ratio so far is below it (the candidate
                        * that much slower everywhere); 0: every repetition */
} kh_eval_paired_opts;

void kh_eval_paired_opts_default(kh_eval_paired_opts *po);

/* po NULL: the defaults. */
kh_status kh_eval_paired(kh_eval *ev, const struct kh_task *t, const kh_eval_solution *cand,
                         const kh_eval_solution *inc, const kh_eval_opts *o,
                         const kh_eval_paired_opts *po, json_t **out, kh_err *err);

#endif
