/* gpu_eval_int.h: what gpu_eval.c (the request, the artifact, the checks
 * and the timing target) shares with gpu_eval_buf.c (the buffers: the
 * generator and the checksum, request parsing, allocation, filling, the
 * copies into the reply payload, guard bands and input sums), and nobody
 * outside engine/gpu/ sees.  gpu_eval.c calls gpu_eval_buf.c, never the
 * other way. */
#ifndef KH_GPU_EVAL_INT_H
#define KH_GPU_EVAL_INT_H

#include "eval/check.h"
#include "gpu/gpu_check.h"
#include "gpu/gpu_eval.h"
#include "gpu/launch.h"
#include "task/dtype.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_TENSORS 64
#define MAX_SETS 8
#define MAX_RANGES 256

enum { ROLE_IN, ROLE_OUT, ROLE_WS };
enum { GEN_NONE, GEN_RANDOM, GEN_SCALAR, GEN_BYTES, GEN_DSA_KCACHE };

typedef struct ev_tensor {
    char name[64];
    int role;
    kh_dtype dtype;
    int has_dtype;
    uint64_t numel;
    size_t bytes;
    int gen;
    uint32_t stream;
    double scalar;
    size_t pay_off, pay_len;
    int zero;
    uint64_t dims[4]; /* GEN_DSA_KCACHE: [num_pages, page_size, 1, head_dim + 4] */
} ev_tensor;

/* Kept across evaluations: the generator and checksum modules (gpu_eval.h). */
struct kh_gpu_eval {
    kh_engine *e;
    kh_gpu *g;
    kh_cupti *c;
    CUmodule rng_mod, util_mod;
    CUfunction rng_fill, rng_kcache, checksum, sum_tab, guard_tab, sums_tab, gather_tab;
    int utils_ready; /* gev_ensure_utils has made all of the above */
    CUdeviceptr sum_buf;
    CUdeviceptr watch; /* WATCH_WORDS words: the timing phase's watch (gev_watch_call) */
    kh_gpu_cmp *cmp; /* the device comparison (gpu_check.h), made on first use */
    /* the request's kernel time (gpu_eval.c, "the GPU's busy time"): events
     * around the last call outside the timing phase, read when pending */
    CUevent busy_a, busy_b;
    int busy_pending;
    double busy_s;
    /* the GPU's active time (the reply's gpu_active_s): busy_s's calls
     * outside the timing phase, and the timing phase's batches whole (every
     * activity CUPTI recorded there, the evaluator's own included) */
    double active_s;
};

/* The reply payload, grown as outputs are copied in. */
typedef struct obuf {
    unsigned char *p;
    size_t n, cap;
} obuf;

/* Where one input set's entries lie in the timing watch's table
 * (gev_watch_setup): guard bands, then inputs (those drawn each call first). */
typedef struct ev_watch_set {
    size_t guards, nguards, inputs, ninputs, ndrawn;
} ev_watch_set;

/* The timing watch's sizes (gev_watch_call): the blocks of a sum, the
 * device words, the table's words, the entries one launch takes. */
#define WATCH_BLOCKS 264
#define WATCH_WORDS (2 + (1 + MAX_SETS) * MAX_TENSORS * WATCH_BLOCKS)
#define WATCH_TAB (MAX_SETS * 3 * MAX_TENSORS * 3)
#define WATCH_CHUNK 24

/* One `evaluate` request: its tensors, buffers, launch lists and timing state. */
typedef struct ev_run {
    kh_gpu_eval *ev;
    const json_t *launches;
    const unsigned char *payload;
    ev_tensor ts[MAX_TENSORS];
    size_t nt;
    /* in[set] holds every input's buffer for that input set; outputs and
     * workspace are one set of buffers that every call writes */
    kh_launch_buf in[MAX_SETS][MAX_TENSORS];
    kh_launch_buf shared[MAX_TENSORS]; /* outputs and workspace */
    int nsets;
    CUmodule mod;
    kh_launch_list lists[MAX_SETS];
    int nlists;
    uint64_t set_seed[MAX_SETS];
    int set_fixed[MAX_SETS]; /* the set's bytes and scalar inputs are in place */
    /* the bits of each one-element input per set, for {"scalar": name}
     * arguments passed by value (read back from the device after a fill) */
    uint64_t scal[MAX_SETS][MAX_TENSORS];
    /* timing state: k (call) counts every call of the timing phase, warm-up
     * included; the call's input set is k mod nsets, refilled before it
     * from the seed derived from (timing_seed, k) */
    int timed, trial, poison;
    int trusted;           /* the reference's latency: its sets are drawn once (before_call) */
    int draw_once;         /* timing.draw_once (the sanitizer's run): the same, asked for */
    int in_bench;          /* inside kh_bench_run: its own timer measures the calls */
    /* the timing phase's host seconds: before each call (inputs refilled,
     * outputs poisoned), after each (a verified call kept), the kept calls
     * judged (the reply's steps refill_s, keep_s, judge_s) */
    double t_refill, t_keep, t_judge;
    long call;
    int cur_set;
    uint64_t timing_seed, sample_seed;
    double verify_p;       /* a timed call is verified with this probability (secret draw) */
    int max_verified, nverified, verify_now;
    int rcount;            /* > 0: a verified call returns rcount ranges of relems elements */
    struct ev_verify *tv;  /* fused: verified calls are kept on the device, judged there */
    uint64_t relems;       /* per output (kh_rng_ranges), not the whole outputs */
    int inputs_check, guards_check;
    ev_watch_set wset[MAX_SETS];
    uint64_t wtab[WATCH_TAB]; /* the watch's table (address, bytes, tag) per buffer */
    json_t *timed_outputs, *failures;
    struct obuf *out;      /* the reply payload */
    size_t guard;    /* guard band bytes per side (GUARD; 0 under compute-sanitizer) */
    /* what the launch lists were bound against */
    kh_launch_buf views[MAX_SETS][MAX_TENSORS];
    /* cuda_so: the loaded object and its entry instead of launch lists */
    struct so_entry *so;
} ev_run;

/* A fused request's verification (gpu_verify.c): the trusted reference's
 * own run (its tensors, artifact and buffers, none shared with the
 * candidate's; a cubin's module is loaded only for its call, after the
 * candidate's), the comparison's options, and the first poison's outputs of
 * the trial under way, copied after its call. */
/* A verified timed call kept on the device: its input seed and set, its
 * number, and each output (whole, or its ranges one after another) at
 * off[i] in the verification's timed stash. */
typedef struct ev_tcall {
    uint64_t seed;
    int set;
    long call;
    size_t off[MAX_TENSORS];
    json_t *ranges; /* {name: [[start, n], ...]}; NULL: whole outputs */
    size_t poff[MAX_TENSORS], pn[MAX_TENSORS]; /* per output: its groups' parts' first
                                                  * slot in v->dparts, its chunks */
} ev_tcall;

typedef struct ev_verify {
    ev_run *ref;
    size_t aoff, alen; /* the reference's artifact in its payload */
    int is_so;
    kh_check_opts copts;
    kh_gpu_buf stash[MAX_TENSORS];
    /* the timing phase's verified calls (gev_verify_keep_timed) */
    kh_gpu_buf tstash, gather; /* their outputs; the reference's ranges gathered */
    size_t tused, per_call;
    ev_tcall *tc;
    size_t ntc;
    CUdeviceptr dparts; /* every kept call's parts (gev_verify_timed_enqueue) */
    size_t dparts_n, pused;
} ev_verify;

/* ---- gpu_verify.c --------------------------------------------------------------- */

/* The device comparison, compiled for this GPU once. */
kh_status gev_ensure_cmp(kh_gpu_eval *ev, kh_err *err);

/* Each output of r (the candidate's) must be one of v->ref's: same name,
 * dtype and size.  An error naming the first that is not. */
kh_status gev_verify_match(const ev_run *r, const ev_verify *v, kh_err *err);

/* Copy r's outputs (the first poison's call) to v's stash. */
kh_status gev_verify_stash(ev_run *r, ev_verify *v, kh_err *err);

/* Whether r's outputs are bit for bit the stash's (the two calls). */
kh_status gev_verify_same(ev_run *r, ev_verify *v, int *same, kh_err *err);

/* r's outputs (from_stash: the stash) against the reference's, after the
 * reference's call: each output's comparison parts into the payload o
 * ({name: [off, len]} into *parts), and for each that fails, whether it
 * still holds the poison pat ({name: true} into *untouched; pat 0: no
 * poison), as the coordinator's host comparison decides it. */
kh_status gev_verify_judge(ev_run *r, ev_verify *v, int from_stash, unsigned pat, obuf *o,
                           json_t **parts, json_t **untouched, kh_err *err);

/* The checksum of each of the reference's outputs, as hex strings. */
kh_status gev_verify_sums(ev_verify *v, json_t **sums, kh_err *err);

/* Overwrite the reference's outputs, so no later call finds them. */
kh_status gev_verify_clear(ev_verify *v, kh_err *err);

/* The stash's buffers (the reference's run is the caller's to close). */
void gev_verify_free_stash(ev_run *r, ev_verify *v);

/* Keep verified timed call k's outputs on the device (whole, or the element
 * ranges kh_rng_ranges draws for it when r->rcount > 0), with the seed and
 * set of its inputs: judged after the timing phase. */
kh_status gev_verify_keep_timed(ev_run *r, ev_verify *v, long k, int set, kh_err *err);

/* The kept calls judged in one pass, nothing waiting between them:
 * gev_verify_timed_begin makes room on the device for every kept call's
 * parts; gev_verify_timed_enqueue compares kept call tc's outputs with the
 * reference's (its call on tc's seed enqueued just before) into that room;
 * gev_verify_timed_finish waits once, copies every part back, and appends
 * each call's record ({seed, set, call, parts: {name: [off, len]}, ranges})
 * to timed_outputs, its parts into the payload. */
kh_status gev_verify_timed_begin(ev_run *r, ev_verify *v, kh_err *err);
kh_status gev_verify_timed_enqueue(ev_run *r, ev_verify *v, ev_tcall *tc, kh_err *err);
kh_status gev_verify_timed_finish(ev_run *r, ev_verify *v, obuf *o, json_t *timed_outputs,
                                  kh_err *err);

/* ---- gpu_eval_buf.c ------------------------------------------------------------ */

/* This GPU's architecture for NVRTC ("sm_90"). */
void gev_arch(kh_gpu_eval *ev, char arch[16]);

/* The generator and the checksum kernel, compiled for this GPU once. */
kh_status gev_ensure_utils(kh_gpu_eval *ev, kh_err *err);

/* The request's "tensors" into ts[0..*nt) (a bytes input's slice must lie
 * within the payload's payload_len bytes).  An error naming the entry
 * otherwise. */
kh_status gev_parse_tensors(const json_t *arr, size_t payload_len, ev_tensor *ts, size_t *nt,
                            kh_err *err);

/* The view of set k that a launch list binds against: the set's inputs, the
 * shared outputs and workspace. */
void gev_view(ev_run *r, int set, kh_launch_buf *out);

/* A buffer (with r->guard bytes of guard band) for every tensor whose role
 * is in roles_mask; gev_free_set frees those allocated. */
kh_status gev_alloc_set(ev_run *r, kh_launch_buf *bufs, int roles_mask, kh_err *err);
void gev_free_set(ev_run *r, kh_launch_buf *bufs);

/* A one-element input, which {"scalar": name} may pass by value. */
int gev_is_scalar_input(const ev_tensor *t);

/* Hand set's scalar values to every launch list that reads that set. */
void gev_apply_scalars(ev_run *r, int set);

/* Fill set's inputs for seed; with fresh_only, the random ones alone (the
 * others once per set), then read the one-element ones back for
 * gev_apply_scalars. */
kh_status gev_fill_inputs(ev_run *r, int set, uint64_t seed, int fresh_only, kh_err *err);

/* Zero the workspace buffers that ask for it ("zero"). */
kh_status gev_zero_workspace(ev_run *r, kh_err *err);

/* Copy every output in bufs to the payload; returns {name: [off, len]}. */
json_t *gev_copy_outputs(ev_run *r, const kh_launch_buf *bufs, obuf *o, kh_err *err);

/* Copy element ranges of every output in bufs to the payload: those want
 * names, else those kh_rng_ranges draws for timed call `call`; sets
 * *ranges_out to the ranges copied. */
json_t *gev_copy_ranged(ev_run *r, const kh_launch_buf *bufs, const json_t *want, long call,
                        obuf *o, json_t **ranges_out, kh_err *err);

/* Whether every buffer in bufs has its guard bands intact; if not, why
 * names the tensor. */
int gev_guards_ok(ev_run *r, const kh_launch_buf *bufs, char *why, size_t whyn);

/* The n byte ranges rg[k] = (offset, bytes) of src, one after another into
 * dst, in stream order (kh_gather_tab: a launch per 64 ranges). */
kh_status gev_gather(kh_gpu_eval *ev, CUdeviceptr src, const uint64_t (*rg)[2], size_t n,
                     CUdeviceptr dst, kh_err *err);

/* The checksum of bytes bytes at p (the kernel's sum, order-free). */
kh_status gev_checksum(kh_gpu_eval *ev, CUdeviceptr p, size_t bytes, uint64_t *out,
                       kh_err *err);

/* Append n bytes to the payload o at *off. */
kh_status gev_obuf_add(obuf *o, const void *d, size_t n, size_t *off, kh_err *err);

/* The checksum of each input of set into sums (0 for the other tensors). */
kh_status gev_input_sums(ev_run *r, int set, uint64_t *sums, kh_err *err);

/* The timing phase's watch (gpu_eval_buf.c), on the device in stream order,
 * nothing waiting: gev_watch_reset before the phase; gev_watch_want after
 * set's inputs are filled for a call (every input when all, else those each
 * refill draws again), their sums; gev_watch_call after call k, its guard
 * bands (guards) and its inputs' sums against those (inputs).
 * gev_watch_read gives the lowest findings, each UINT64_MAX for none:
 * guards (k << 32 | tensor << 24 | side << 23 | byte in the band, side 0
 * before the buffer), inputs (k << 32 | tensor). */
/* The table of every set's buffers, once the sets are made (before the
 * phase); each launch gets up to WATCH_CHUNK of its entries by value. */
void gev_watch_setup(ev_run *r);
typedef struct wtab_arg {
    uint64_t e[3 * WATCH_CHUNK];
} wtab_arg;
kh_status gev_watch_reset(kh_gpu_eval *ev, kh_err *err);
kh_status gev_watch_want(ev_run *r, int set, int all, kh_err *err);
kh_status gev_watch_call(ev_run *r, int set, long k, int guards, int inputs, kh_err *err);
kh_status gev_watch_read(kh_gpu_eval *ev, uint64_t first[2], kh_err *err);

/* ---- gpu_eval_so.c: a trusted shared object (cuda_so) ----
 * Load the object of n bytes at img, find entry's symbol and parse its args
 * against r's tensors; it becomes r->so (the one before is freed). */
kh_status gev_so_load(ev_run *r, const unsigned char *img, size_t n, const json_t *entry,
                      kh_err *err);
/* One call of r->so's entry on the buffers of a view, on the GPU's stream. */
kh_status gev_so_call(ev_run *r, const kh_launch_buf *bufs, kh_err *err);
/* Its fini (if any) called, the object closed; NULL is nothing. */
void gev_so_free(struct so_entry *x);

#endif
