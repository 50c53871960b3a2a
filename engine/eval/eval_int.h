/* eval_int.h: what the eval_*.c units share and nobody else sees: the
 * evaluator's caches and pools (struct kh_eval), a run's context (wctx), a
 * worker request filed with the scheduler (job), a verdict being made, and
 * one workload's evaluation as explicit stages (wstate, eval_stage.c).
 * Which unit owns what: eval.c the public API and the run's driver;
 * eval_place.c placement and pools; eval_build.c artifacts; eval_request.c
 * the `evaluate` request and the workload's inputs (the sampling
 * evaluator's probs included); eval_jobs.c the scheduler; eval_ref.c
 * reference outputs and latency; eval_compare.c comparisons; eval_sampling.c
 * the sampling evaluator; eval_sanitize.c compute-sanitizer; eval_stage.c
 * the stages; eval_verdict.c the verdict JSON; eval_record.c the store;
 * eval_base.c the options' defaults and the helpers all of them use.  Calls
 * between the units point one way (no call cycle, docs/design.md). */
#ifndef KH_EVAL_INT_H
#define KH_EVAL_INT_H

#include "eval/eval.h"

#include "compile/compile.h"
#include "compile/compile_service.h"
#include "eval/check.h"
#include "store/store.h"
#include "task/task.h"
#include "task/tensor.h"
#include "worker/supervisor.h"

#include <jansson.h>
#include <stdint.h>

#if defined(__SANITIZE_ADDRESS__)
#define KH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KH_ASAN 1
#endif
#endif

/* ---- caches --------------------------------------------------------------- */
typedef struct art {
    struct art *next;
    char key[33];       /* source hash (kind, paths, contents) */
    int host;           /* 1: shared object for the host worker, 0: cubin */
    int so;             /* 1: trusted nvcc shared object for the gpu worker (cuda_so) */
    int ok;
    unsigned char *bytes;
    size_t len;
    char hash[33];      /* of the bytes */
    char *log;
} art;

typedef struct refout {
    struct refout *next;
    char *def, *uuid;
    uint64_t seed;
    size_t n;
    char **names;
    unsigned char **bytes;
    size_t *lens;
    json_t *ranges;     /* NULL: whole outputs; else {name: [[start, n], ...]}: the bytes
                           hold those element ranges only (a verified timed call's) */
} refout;

typedef struct refperf {
    struct refperf *next;
    char *def, *uuid, *protocol;
    double latency_ns;
} refperf;

/* The copy bandwidth of one GPU, by UUID (GPUs differ, even of one model). */
typedef struct peak {
    struct peak *next;
    char uuid[96];
    double bw;          /* bytes/s with the margin; < 0: the worker could not say */
} peak;

struct job;

#define MAX_GPUS 64
/* The gpu worker's reply's "steps", seconds: open, trials, timing; within
 * timing, the refills before calls, the kept calls after them, the kept
 * calls judged. */
#define KH_WORKER_STEPS 6
extern const char *const eval_worker_steps[KH_WORKER_STEPS];
#define KH_MAX_VERIFIED 256 /* verified timed calls per request, at most */
#define KH_VERIFY_RANGES 64  /* a large output's verified call returns 64 runs */
#define KH_VERIFY_ELEMS 512  /* of 512 elements each */
#define MAX_HOSTS 64
#define SAMPLING_CHUNK 256   /* the TVD phase's calls per request, at most */
/* the most requests one stage files: the TVD phase's, one per chunk */
#define EVAL_MAX_POSTED ((KH_SAMPLING_MAX_CALLS + SAMPLING_CHUNK - 1) / SAMPLING_CHUNK)

struct kh_eval {
    kh_engine *e;
    char *exe, *launch;
    uint64_t host_as;
    kh_pool *host, *gpu;
    kh_compile_service *cs; /* every CUDA compile: its servers, not this process */
    art *arts;
    refout *refs;
    refperf *perfs;
    char as_env[64], asan_env[1024];
    const char *env[3];
    kh_store *store;        /* borrowed (cfg) or opened here on first record */
    int own_store;
    /* placement (kh_eval_opts.gpus ...); place_key says what the pools were
     * built for */
    char place_key[2048];
    char gpus_spec[512];
    const char *place_launch;           /* the opts' or cfg's launch spec (borrowed: key) */
    char launch_buf[1024];
    int per_gpu, host_workers;
    char gpu_ids[MAX_GPUS][128];
    size_t ngpus;                       /* 0: the default device, not pinned */
    int gpus_resolved;
    char hosts[MAX_HOSTS][256];
    size_t nhosts;
    char tpl_host[1024], tpl_gpu[1024];
    const char *genv[3];
    peak *peaks;
    struct job *jobs;                   /* this run's worker requests (the scheduler) */
};

/* ---- a run's context ------------------------------------------------------- */
/* Where a workload's Python reference outputs came from, and the
 * coordinator's own seconds on it (coord_s), across its stages. */
typedef struct pyref_stat {
    const char *source;
    double seconds;
    int runs, cached;
    double coord_s;
} pyref_stat;

/* One run (kh_eval_run_task): what every workload shares, and the fields of
 * the workload being advanced, which the driver sets before each advance
 * (w, wl, shape_of, the seeds, pyref_*, coord_s). */
typedef struct wctx {
    char task_hash[17]; /* the package as loaded (kh_task_fingerprint) */
    /* the solution's file holds an error (kh_task_solution_errors): every
     * workload's verdict is COMPILE_ERROR with it; empty when none */
    char bad_solution[1024];
    kh_eval *ev;
    const kh_eval_opts *o;
    const kh_task_def *d;
    const kh_task_solution *sol; /* the candidate */
    const kh_task_solution *ref; /* the trusted reference; NULL: the Python one */
    char sol_hash[33];           /* of the candidate's sources */
    const kh_task_workload *w;
    const char *base;        /* safetensors paths are relative to this */
    char base_dir[4096];     /* a dataset file's directory (base points here) */
    uint64_t seeds[KH_TASK_MAX_SAMPLING_TRIALS]; /* 64 at most, but for sampling */
    size_t ntrials;
    /* the run's base seed (opts.seed, else drawn from the OS CSPRNG) and,
     * derived from it per workload, the seed of the timing inputs and of
     * the schedule of verified timed calls: secret to the candidate */
    uint64_t base_seed, timing_seed, sample_seed;
    int timed_refs; /* eval_timed_refs_* are fetching verified timed calls' references */
    json_t **trial_ranges; /* per seed, NULL or the element ranges to return (borrowed) */
    int ref_gpu;           /* the trusted reference runs in the gpu worker */
    /* a drawn shape (opts.shapes): the listed workload it came from; its
     * check is correctness alone */
    const kh_task_workload *shape_of;
    json_t *shapes_info; /* {asked, drawn, note} when shapes were asked for */
    kh_check_evaluator evaluator;
    kh_check_opts copts;
    /* payload under construction: artifact first, then safetensors bytes */
    unsigned char *pl;
    size_t pl_len;
    /* reference outputs from the definition's Python run (no trusted
     * reference): where this workload's came from, and the Python time */
    const char *pyref_source; /* "memory", "store", "python" (the last one used) */
    double pyref_seconds;
    int pyref_runs, pyref_cached;
    /* seconds this workload's earlier advances took, and when this one
     * began: the coordinator's own work on it (its requests wait between
     * advances, outside), khlua.coordinator_seconds */
    double coord_s, call_t0;
    /* the inputs of (in_w, in_seed) regenerated here, for evaluators that
     * need them (DSA top-k: reachability and scores); freed by eval_in_free */
    kh_tensor *ins[64];
    const kh_task_workload *in_w;
    uint64_t in_seed;
    int in_ok;
    /* the scheduler: the index of the workload being advanced (its jobs) */
    size_t wl;
    /* sampling: this workload's probs (softmax of randn from seeds[0] and the
     * input's stream, or the workload's safetensors), made here and sent as
     * bytes so every validation call gets the same distribution; freed by
     * eval_probs_free */
    kh_tensor *probs;
    const kh_task_workload *probs_w;
    uint64_t probs_seed;
    double tvd_threshold;
    /* sampling: FIB's thresholding method and valid mask [batch * vocab]
     * (made with probs, freed by eval_probs_free); tile > 1: the TVD phase's
     * requests, every tensor input repeated tile times along its first axis
     * and the axes those requests use (axes_over); light: inputs_unchanged
     * and guards alone (no poison runs) */
    kh_sampling_method smethod;
    unsigned char *smask;
    int64_t tile;
    const int64_t *axes_over;
    int light;
    uint64_t tile_seed; /* seeds[0] of the workload while the TVD phase's own seeds are set */
} wctx;

/* ---- the scheduler (eval_jobs.c) -------------------------------------------
 * A stage that needs a worker files its request as a job (eval_post) and
 * waits; eval_run_jobs runs every filed job of every workload in parallel
 * on the pools' workers; the stage then takes its replies up.  Every
 * request of one workload runs on one GPU (group), so a speedup compares
 * two timings of one device. */
typedef struct wres {
    kh_status st;     /* KH_OK: reply; else the failure */
    kh_err err;
    kh_msg reply;     /* owned by the job that ran it: never freed by the caller */
    double seconds;
    int not_run;
} wres;

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

typedef struct job {
    struct job *next;
    int host;
    size_t wl;
    json_t *params;
    unsigned char *pl;
    size_t pl_len;
    int state;
    size_t slot;
    wres res;
    json_t *placement;  /* where it ran: slot, gpu, host, pids, slurm job */
    int stage;          /* the wl_stage that filed it (khlua.phases) */
    double t_post, t_done; /* kh_now() when filed and when its reply was in */
} job;

/* ---- a verdict being made --------------------------------------------------- */
typedef struct verdict {
    const char *status;      /* FlashInfer-Bench's */
    const char *failed;      /* failed check, or NULL */
    char detail[700];
    int has_correctness;
    kh_check_result acc;
    json_t *checks;          /* khlua.checks */
} verdict;

/* ---- one workload, in stages (eval_stage.c) ---------------------------------
 * In order; a stage either completes, naming a later one, or files worker
 * requests (posted) and waits, to be taken up with their replies once the
 * scheduler has run them.  A stage never runs twice. */
typedef enum wl_stage {
    WL_BUILD,      /* the verdict's header; the candidate's artifact */
    WL_REFERENCE,  /* reference outputs of the trial seeds: memory, store, Python, or a request */
    WL_CANDIDATE,  /* the candidate's request (its inputs, trials, timing plan) and its fate */
    WL_COMPARE,    /* its trials judged, in FlashInfer-Bench's order */
    WL_TVD,        /* sampling: the TVD phase's requests, checked and counted */
    WL_TIMED_REFS, /* the timing reply's own checks; references of verified timed calls */
    WL_TIMING,     /* the timed outputs compared; the speed-of-light bound */
    WL_REF_TIMING, /* the reference timed by the same protocol: the speedup */
    WL_SANITIZE,   /* compute-sanitizer tools (cuda, PASSED) */
    WL_VERDICT,    /* the Trace, recorded */
    WL_DONE
} wl_stage;

/* What one stage of a workload cost (khlua.phases): the coordinator's own
 * seconds in it, and its worker requests: how many, the workers' seconds,
 * the seconds from filing to reply (queue, start, transfer, run), and the
 * bytes sent with them and sent back. */
typedef struct phase_cost {
    double coord_s, worker_s, wait_s;
    double kernel_s;    /* the GPU's kernel time in its requests (their gpu_kernel_s) */
    double active_s;    /* the GPU's active time in them (their gpu_active_s) */
    double steps[KH_WORKER_STEPS]; /* the gpu worker's "steps" (eval_worker_steps) */
    size_t requests;
    uint64_t bytes_sent, bytes_back;
} phase_cost;

typedef struct wstate {
    wl_stage stage;
    phase_cost ph[WL_DONE];
    size_t wl;                   /* its index in the run */
    const kh_task_workload *w, *shape_of;
    job *posted[EVAL_MAX_POSTED]; /* the stage's filed requests, in filing order */
    size_t nposted;
    pyref_stat py;               /* c's pyref_* and coord_s between advances */
    verdict v;
    json_t *kl, *evj;            /* khlua's fields; the Trace's evaluation */
    json_t *perf, *samples, *samp_extra;
    json_t *trace;               /* the verdict, once WL_DONE */
    art *a;                      /* the candidate's artifact */
    refout *ro[64];              /* the trials' reference outputs */
    char ref_hash[33];
    const job *cand;             /* the candidate's request (its reply stays the job's) */
    int poison_ok, inputs_ok, guards_ok, det_ok;
    const json_t *timing;        /* the reply's timing object (borrowed) */
    /* the verified timed calls' input seeds (and element ranges), and
     * their reference outputs */
    uint64_t tseeds[KH_MAX_VERIFIED];
    json_t *tranges[KH_MAX_VERIFIED];
    size_t ntseeds;
    int any_ranges;
    refout *tro[KH_MAX_VERIFIED];
    size_t nverified, nbad;
    double lat;
    const job *ref_timing;       /* the request that timed the reference (this run) */
    double ref_ns;
    /* the TVD phase (sampling): its plan and the samples counted */
    int64_t tvd_tile, tvd_nucleus;
    uint64_t tvd_calls;
    size_t tvd_nchunks;
    int64_t *tvd_axes;
    uint64_t *tvd_counts;
} wstate;

static inline int eval_is_host(const kh_task_solution *sol)
{
    return sol->manifest && sol->manifest->host;
}
static inline int eval_is_so(const kh_task_solution *sol)
{
    return sol->manifest && sol->manifest->so;
}
/* The candidate's request verifies on the device (docs/evaluation.md,
 * "Verification on the device"): a gpu candidate, a trusted reference in
 * the gpu worker too, a comparison the device makes (not the DSA top-k or
 * sampling rules), whole outputs, and not turned off. */
static inline int eval_fused(const wctx *c)
{
    return c->o->device_compare && c->ref_gpu && !eval_is_host(c->sol) &&
           (c->evaluator == KH_EVAL_DEFAULT || c->evaluator == KH_EVAL_LOWBIT ||
            c->evaluator == KH_EVAL_DSA_ATTENTION) &&
           !c->trial_ranges && !c->light && c->tile <= 1;
}

/* eval_base.c ------------------------------------------------------------- */
char *eval_dupstr(const char *s);                              /* NULL: s NULL or no memory */
void eval_hex128(const void *data, size_t len, char out[33]); /* XXH3-128, hex */

/* eval_record.c ----------------------------------------------------------- */
/* Record a verdict (task, candidate, samples blob, evaluation record), or
 * not (record = false); the trace says which in khlua.stored, with
 * khlua.record and samples_blob when stored, the samples inline when not. */
void eval_record_trace(kh_eval *ev, const kh_eval_opts *o, const kh_task_def *d,
                       const kh_task_solution *sol, json_t *trace, json_t *samples);
/* The store reference outputs are cached in (record = true), opened on
 * first use; NULL when none. */
kh_store *eval_cache_store(wctx *c);

/* eval_place.c ------------------------------------------------------------ */
kh_status eval_place(kh_eval *ev, const kh_eval_opts *o, kh_err *err);
void eval_free_pools(kh_eval *ev);
size_t eval_group_size(const kh_eval *ev, int host); /* slots per GPU group */
/* The pool of host or gpu workers, started with the placement on first
 * use; NULL with err when it cannot be made. */
kh_pool *eval_pool_for(kh_eval *ev, int host, uint64_t mem, kh_err *err);
/* ev->cs made if it is not yet (eval_build.c). */
kh_status eval_compile_service(kh_eval *ev, kh_err *err);
json_t *eval_placement_json(kh_eval *ev, kh_pool *p, size_t slot, const kh_wproc *w);

/* eval_build.c ------------------------------------------------------------ */
/* sol's artifact, built or cached (*out belongs to ev); a compile failure
 * is an artifact with ok = 0 and its log, KH_OK.  A CUDA source compiles in
 * the compile service's servers (compile_service.h), never in this
 * process: NVRTC loads and initialises the CUDA driver where it compiles,
 * and the coordinator stays CUDA-free; cache (may be NULL) is the store its
 * verdicts are kept in and answered from. */
kh_status eval_build(kh_eval *ev, kh_store *cache, const kh_task_solution *sol, int trusted,
                     art **out, kh_err *err);
/* The trusted reference c->ref's artifact (eval_build, trusted); one that
 * does not build is KH_ECOMPILE with its log. */
kh_status eval_build_reference(wctx *c, art **out, kh_err *err);
/* A file's bytes (room for a NUL after them); free() them. */
kh_status eval_read_whole(const char *path, unsigned char **d, size_t *n, kh_err *err);

/* eval_request.c ---------------------------------------------------------- */
/* The `evaluate` request of sol on the workload: c->pl holds the artifact,
 * then the inputs' bytes; timing null (eval_add_timing adds it). */
kh_status eval_request(wctx *c, const kh_task_solution *sol, const art *a, int reference,
                       json_t **params, kh_err *err);
/* The candidate's request with the trusted reference's run appended
 * ("verify", its payload after the candidate's): eval_fused's. */
kh_status eval_request_fused(wctx *c, const kh_task_solution *sol, const art *a,
                             json_t **params, kh_err *err);
void eval_add_timing(wctx *c, json_t *p, int verify);
/* The workload's inputs for seed, as the workers make them (c->ins). */
kh_status eval_host_inputs(wctx *c, uint64_t seed, kh_err *err);
const kh_tensor *eval_input_named(wctx *c, const char *name);
void eval_in_free(wctx *c);
const kh_task_tensor *eval_find_input(const kh_task_def *d, const char *name, size_t *idx);
size_t eval_out_bytes(const kh_task_def *d, const kh_task_tensor *t, const int64_t *axes);
/* The sampling evaluator's probs for the workload (see wctx), made once
 * per input seed; eval_probs_free drops them and the mask made with them. */
kh_status eval_sampling_probs(wctx *c, const kh_tensor **out, kh_err *err);
void eval_probs_free(wctx *c);

/* eval_jobs.c ------------------------------------------------------------- */
/* File params (payload c->pl, the artifact a first) as a job of workload
 * c->wl, appended to s->posted. */
kh_status eval_post(wctx *c, wstate *s, int host, const json_t *params, const art *a,
                    kh_err *err);
/* Run every queued job, in parallel across the workers; returns when all are
 * done (KH_EINTR on Ctrl-C). */
kh_status eval_run_jobs(kh_eval *ev, const kh_eval_opts *o, int *wl_group, kh_err *err);
void eval_drop_jobs(kh_eval *ev, size_t wl); /* wl SIZE_MAX: all */

/* eval_ref.c -------------------------------------------------------------- */
void eval_refs_free(kh_eval *ev);
void eval_refs_trim(kh_eval *ev);
/* Reference outputs of c->seeds into outs: found (memory, store) or made
 * at once (Python); the trusted reference's request for the others is
 * filed (s->posted).  _take fills the rest from its reply and hashes them. */
kh_status eval_ref_post(wctx *c, wstate *s, refout **outs, kh_err *err);
kh_status eval_ref_take(wctx *c, wstate *s, refout **outs, char hash[33], kh_err *err);
/* The same for the verified timed calls' seeds (s->tseeds, s->tro). */
kh_status eval_timed_refs_post(wctx *c, wstate *s, kh_err *err);
kh_status eval_timed_refs_take(wctx *c, wstate *s, kh_err *err);
/* The reference's latency by the run's protocol into s->ref_ns: cached,
 * NAN (a Python reference), or a request filed; _take reads its reply. */
kh_status eval_ref_latency_post(wctx *c, wstate *s, kh_err *err);
kh_status eval_ref_latency_take(wctx *c, wstate *s, kh_err *err);
double eval_gpu_bandwidth(wctx *c, const char *uuid, size_t slot);

/* eval_compare.c ---------------------------------------------------------- */
const unsigned char *eval_reply_bytes(const kh_msg *m, const json_t *sl, size_t want);
/* The bytes of the element ranges [[start, n], ...] of a dtype; 0 when the
 * list is not one. */
size_t eval_ranges_bytes(kh_dtype dt, const json_t *list);
int eval_untouched(const kh_tensor *t, int64_t idx, unsigned pat);
/* A fused trial's outputs judged from the parts the worker made ({name:
 * [off, len]} of the reply) and the outputs it found holding the poison
 * ({name: true}); the same result eval_compare_set gives.  ranges (a
 * verified timed call's, else NULL): the parts cover those elements, as
 * eval_compare_ranged compares them. */
kh_status eval_compare_parts(wctx *c, const kh_msg *m, const json_t *parts,
                             const json_t *untouched, const json_t *ranges,
                             kh_check_result *merged, int *untouched_fail, kh_err *err);
kh_status eval_compare_set(wctx *c, const kh_msg *m, const json_t *outs, const refout *ro,
                           kh_check_result *merged, unsigned poison, int *untouched_fail,
                           kh_err *err);
kh_status eval_compare_ranged(wctx *c, const kh_msg *m, const json_t *outs,
                              const json_t *ranges, const refout *ro, kh_check_result *merged,
                              unsigned poison, int *untouched_fail, kh_err *err);

/* eval_sampling.c --------------------------------------------------------- */
/* The seed of the workload's inputs: seeds[0], or the saved one while the
 * TVD phase's requests hold their own seeds. */
static inline uint64_t eval_base_seed(const wctx *c) { return c->tile ? c->tile_seed : c->seeds[0]; }
/* Why the sampling evaluator cannot take d, or NULL. */
const char *eval_sampling_unsupported(const kh_task_def *d, kh_sampling_method m);
kh_status eval_sampling_call(wctx *c, const kh_msg *m, const json_t *outs, uint64_t *counts,
                             unsigned poison, kh_check_result *r, int *untouched_fail,
                             kh_err *err);
/* The TVD phase: its requests filed (or the test skipped), then judged. */
kh_status eval_tvd_post(wctx *c, wstate *s, kh_err *err);
kh_status eval_tvd_take(wctx *c, wstate *s, kh_err *err);

/* eval_sanitize.c --------------------------------------------------------- */
kh_status eval_sanitize(wctx *c, const kh_task_solution *sol, const art *a, verdict *v,
                        json_t *kl, kh_err *err);

/* eval_stage.c ------------------------------------------------------------ */
/* Run s's stages until it waits on requests or is done (s->trace). */
kh_status eval_advance(wctx *c, wstate *s, kh_err *err);
void eval_wstate_free(wstate *s);

/* eval_verdict.c ---------------------------------------------------------- */
void eval_fail(verdict *v, const char *status, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *eval_fault_kind(const char *msg);
/* The verdict's start (status PASSED, khlua's header fields) and its end:
 * s->trace made and recorded. */
void eval_verdict_begin(wctx *c, wstate *s);
kh_status eval_verdict_end(wctx *c, wstate *s, kh_err *err);

#endif
