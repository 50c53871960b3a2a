/* gpu_eval.c: `evaluate` in the gpu worker (see gpu_eval.h and
 * docs/evaluation.md).  Owns the per-call checks and the timed-output
 * sampling; the evaluation's buffers (generation, fills, copies, guard bands,
 * checksums) are gpu_eval_buf.c's, the timing loop itself is bench.c's and
 * the comparison with the reference is the coordinator's.  Besides cubins run
 * through launch lists, it calls the C entry of a trusted nvcc-built shared
 * object (backend cuda_so: a package's own solution such as a cuBLAS anchor,
 * never a candidate; the coordinator refuses those), in gpu_eval_so.c. */
#include "gpu/gpu_eval.h"
#include "gpu/gpu_eval_int.h"

#include "gpu/bench.h"
#include "gpu/gpu_check.h"
#include "gpu/launch.h"
#include "task/rng.h"
#include "worker/worker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 4096

kh_gpu_eval *kh_gpu_eval_new(kh_engine *e, kh_gpu *g, kh_cupti *c, kh_err *err)
{
    kh_gpu_eval *ev = calloc(1, sizeof *ev);
    if (!ev) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    ev->e = e;
    ev->g = g;
    ev->c = c;
    return ev;
}

kh_status kh_gpu_eval_warm(kh_gpu_eval *ev, kh_err *err)
{
    kh_status st = gev_ensure_utils(ev, err);
    return st ? st : gev_ensure_cmp(ev, err);
}

void kh_gpu_eval_free(kh_gpu_eval *ev)
{
    if (!ev)
        return;
    if (!kh_gpu_poisoned(ev->g)) {
        const kh_cuda_api *cu = kh_gpu_api(ev->g);
        if (ev->sum_buf)
            cu->cuMemFree(ev->sum_buf);
        if (ev->watch)
            cu->cuMemFree(ev->watch);
        if (ev->rng_mod)
            cu->cuModuleUnload(ev->rng_mod);
        if (ev->util_mod)
            cu->cuModuleUnload(ev->util_mod);
        kh_gpu_cmp_free(ev->cmp);
        if (ev->busy_a)
            cu->cuEventDestroy(ev->busy_a);
        if (ev->busy_b)
            cu->cuEventDestroy(ev->busy_b);
    }
    free(ev);
}

/* ---- the GPU's busy time ------------------------------------------------------
 * The request's kernel time ("gpu_kernel_s" in its result): each call of the
 * candidate or the reference outside the timing phase between two events,
 * read once the call has finished (at the next call or the request's end);
 * the timing phase adds its own measured calls (CUPTI's spans, or its events),
 * so nothing is added inside a timing window.  The active time
 * ("gpu_active_s") adds to those calls the timing phase's batches whole:
 * every kernel, copy and memset CUPTI recorded in them, the evaluator's
 * input refills, L2 flushes and kept outputs too (with events, the timed
 * calls alone).  The evaluator's work outside the timing phase (the
 * trials' inputs and comparisons) is in neither: both are lower bounds of
 * what the GPU did. */
static kh_status busy_take(kh_gpu_eval *ev, kh_err *err)
{
    if (!ev->busy_pending)
        return KH_OK;
    ev->busy_pending = 0;
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    float ms = 0;
    kh_status st = kh_gpu_check(ev->g, cu->cuEventSynchronize(ev->busy_b), "cuEventSynchronize",
                                err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuEventElapsedTime(&ms, ev->busy_a, ev->busy_b),
                          "cuEventElapsedTime", err);
    if (!st) {
        ev->busy_s += (double)ms * 1e-3;
        ev->active_s += (double)ms * 1e-3;
    }
    return st;
}

static kh_status busy_mark(kh_gpu_eval *ev, CUevent *e, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(ev->g);
    kh_status st = KH_OK;
    if (!*e)
        st = kh_gpu_check(ev->g, cu->cuEventCreate(e, CU_EVENT_DEFAULT), "cuEventCreate", err);
    if (!st)
        st = kh_gpu_check(ev->g, cu->cuEventRecord(*e, kh_gpu_stream(ev->g)), "cuEventRecord",
                          err);
    return st;
}

/* A launch list, or for cuda_so the entry on the list's view. */
static kh_status enqueue(ev_run *r, kh_launch_list *l, const kh_launch_buf *view_bufs,
                         kh_err *err)
{
    kh_gpu_eval *ev = r->ev;
    kh_status st = r->in_bench ? KH_OK : busy_take(ev, err);
    if (!st && !r->in_bench)
        st = busy_mark(ev, &ev->busy_a, err);
    if (!st)
        st = r->so ? gev_so_call(r, view_bufs, err) : kh_launch_enqueue(l, err);
    if (!st && !r->in_bench && !(st = busy_mark(ev, &ev->busy_b, err)))
        ev->busy_pending = 1;
    return st;
}

static kh_status bind_lists(ev_run *r, kh_err *err)
{
    if (r->so) { /* no launch lists: the entry takes the views' buffers */
        for (int k = 0; k < r->nsets; k++)
            gev_view(r, k, r->views[k]);
        return KH_OK;
    }
    for (int k = 0; k < r->nlists; k++)
        kh_launch_free(&r->lists[k]);
    r->nlists = 0;
    for (int k = 0; k < r->nsets; k++) {
        gev_view(r, k, r->views[k]);
        kh_status st = kh_launch_bind(r->ev->g, r->mod, r->launches, r->views[k], r->nt,
                                      &r->lists[k], err);
        if (st)
            return st;
        r->nlists++;
    }
    /* {"scalar": name} must name a one-element input */
    for (size_t l = 0; r->nlists && l < r->lists[0].nlaunches; l++) {
        const kh_launch_one *o = &r->lists[0].launches[l];
        for (int i = 0; i < o->nargs; i++)
            if (o->scalar_of[i] && !gev_is_scalar_input(&r->ts[o->scalar_of[i] - 1]))
                return kh_err_set(err, KH_EINVAL, "launches[%zu].args[%d]: '%s' is not a "
                                  "one-element input; only those pass by value", l, i,
                                  r->ts[o->scalar_of[i] - 1].name);
    }
    for (int k = 0; k < r->nsets; k++)
        gev_apply_scalars(r, k);
    return KH_OK;
}

static void add_failure(json_t *failures, const char *check, int trial, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_failure(json_t *failures, const char *check, int trial, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_array_append_new(failures, json_pack("{s:s, s:i, s:s}", "check", check, "trial", trial,
                                              "detail", buf));
}

/* ---- the timing target -----------------------------------------------------------
 * Every call of the timing phase looks the same to the kernel: before it
 * (outside any timing window) its input set is refilled with inputs no call
 * has seen, from a seed derived from the secret timing seed and the call's
 * number, its outputs are poisoned and its workspace zeroed; every call
 * writes the same output buffers.  Which timed calls are verified is drawn
 * from the secret sample seed; a verified call's outputs are copied back
 * after it has finished (its window closed), so nothing a kernel can see
 * while it runs tells it apart. */
static uint64_t call_seed(const ev_run *r, long k)
{
    return kh_rng_derive_seed(r->timing_seed, 0x7F, (uint64_t)k) & INT64_MAX;
}

static int verify_draw(const ev_run *r, long k)
{
    if (r->verify_p <= 0 || r->nverified >= r->max_verified)
        return 0;
    if (r->verify_p >= 1)
        return 1;
    uint64_t h = kh_rng_derive_seed(r->sample_seed, 0x5E, (uint64_t)k);
    return (double)(h >> 11) * 0x1p-53 < r->verify_p;
}

static kh_status before_call(void *ctx, kh_err *err)
{
    ev_run *r = ctx;
    long k = r->call;
    int set = (int)(k % r->nsets);
    /* the trusted reference's sets are drawn once (the L2 is flushed
     * before each call, so a set used again costs it nothing), and so are
     * those of a request that asks for it (the sanitizer's, where nothing
     * is timed or judged and every store of the generator is instrumented) */
    int fixed = r->set_fixed[set], draw = !((r->trusted || r->draw_once) && fixed);
    kh_status st = draw ? gev_fill_inputs(r, set, call_seed(r, k), 1, err) : KH_OK;
    if (!st && draw && r->inputs_check)
        st = gev_watch_want(r, set, !fixed, err);
    if (st)
        return kh_err_prefix(err, "timing call %ld", k);
    r->cur_set = set;
    r->verify_now = r->timed && verify_draw(r, k);
    unsigned char pat = (k & 1) ? 0x7F : 0xFF;
    for (size_t i = 0; i < r->nt && r->poison; i++)
        if (r->ts[i].role == ROLE_OUT && r->ts[i].bytes &&
            (st = kh_gpu_memset8(r->ev->g, r->shared[i].buf.ptr, pat, r->ts[i].bytes, err)))
            return st;
    return gev_zero_workspace(r, err);
}

static kh_status tgt_call(void *ctx, kh_err *err)
{
    ev_run *r = ctx;
    r->call++;
    return enqueue(r, &r->lists[r->cur_set], r->views[r->cur_set], err);
}

/* After a timed call has finished: its inputs and guard bands are checked
 * (every call alike, on the device), and a verified one's outputs are kept
 * or go back with the seed of its inputs. */
static kh_status after_call(void *ctx, kh_err *err)
{
    ev_run *r = ctx;
    long k = r->call - 1;
    int set = r->cur_set;
    kh_status kst = gev_watch_call(r, set, k, r->guards_check, r->inputs_check, err);
    if (kst || !r->verify_now)
        return kst;
    r->verify_now = 0;
    r->nverified++;
    if (r->tv) /* fused: kept on the device, judged after the timing phase */
        return gev_verify_keep_timed(r, r->tv, k, set, err);
    json_t *ranges = NULL;
    json_t *outs = r->rcount > 0 ? gev_copy_ranged(r, r->shared, NULL, k, r->out, &ranges, err)
                                 : gev_copy_outputs(r, r->shared, r->out, err);
    if (!outs)
        return err->code;
    json_t *to = json_pack("{s:I, s:i, s:I, s:o}", "seed", (json_int_t)r->set_seed[set], "set",
                           set, "call", (json_int_t)k, "outputs", outs);
    if (ranges)
        json_object_set_new(to, "ranges", ranges);
    json_array_append_new(r->timed_outputs, to);
    return KH_OK;
}

static kh_status tgt_trial(void *ctx, int t, kh_err *err)
{
    (void)err;
    ((ev_run *)ctx)->trial = t;
    return KH_OK;
}

static void tgt_phase(void *ctx, int timed) { ((ev_run *)ctx)->timed = timed; }

static json_t *bench_json(const kh_bench_result *b)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:I}",
                          "status", b->status, "why", b->why, "timer", b->timer, "latency_ns",
                          b->latency_ns, "window_latency_ns", b->window_latency_ns, "median_ns",
                          b->median_ns, "mean_ns", b->mean_ns, "stdev_ns", b->stdev_ns,
                          "min_ns", b->min_ns, "sum_kernel_ns", b->sum_kernel_ns,
                          "kernels_per_call", b->kernels_per_call, "trials", b->trials, "n",
                          (json_int_t)b->n);
    json_object_set_new(j, "gap_ns", json_real(b->gap_ns));
    json_t *s = json_array();
    for (size_t i = 0; i < b->n; i++)
        json_array_append_new(s, json_real(b->samples_ns[i]));
    json_object_set_new(j, "samples_ns", s);
    json_t *tm = json_array();
    for (int i = 0; i < b->trials; i++)
        json_array_append_new(tm, json_real(b->trial_median_ns[i]));
    json_object_set_new(j, "trial_median_ns", tm);
    return j;
}

static kh_status load_module(ev_run *r, const unsigned char *img, size_t n, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(r->ev->g);
    if (r->mod) {
        cu->cuModuleUnload(r->mod);
        r->mod = NULL;
    }
    unsigned char *copy = malloc(n + 1);
    if (!copy)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    memcpy(copy, img, n);
    copy[n] = 0;
    kh_status st = kh_gpu_check(r->ev->g, cu->cuModuleLoadData(&r->mod, copy),
                                "cuModuleLoadData", err);
    free(copy);
    return st;
}

/* ---- the request's stages ------------------------------------------------------- */

/* What kh_gpu_evaluate's stages share besides ev_run: the per-call checks the
 * request asks for, the failures they find, and where the artifact lies in
 * the payload (reload_before_timing loads it again). */
typedef struct ev_checks {
    int poison, inputs_check, guards_check, det_check, reload;
    json_t *failures;
    size_t aoff, alen;
    int is_so;
    ev_verify *verify; /* a fused request: the trusted reference runs here */
} ev_checks;

/* After call pi of a trial: the guard bands, and whether the inputs are
 * still the seed's (refilled for the next call when not). */
static void trial_checks(ev_run *r, const ev_checks *ck, size_t ti, int pi, int npat,
                         uint64_t seed, const uint64_t *before, uint64_t *after, json_t *tchecks,
                         kh_status *stp, kh_err *err)
{
    kh_status st = KH_OK;
    if (ck->guards_check) {
        kh_launch_buf all[MAX_TENSORS];
        gev_view(r, 0, all);
        char why[600];
        if (!gev_guards_ok(r, all, why, sizeof why)) {
            json_object_set_new(tchecks, "guards", json_string(why));
            add_failure(ck->failures, "guards", (int)ti, "%s", why);
        } else if (!json_object_get(tchecks, "guards")) {
            json_object_set_new(tchecks, "guards", json_string("ok"));
        }
    }
    if (ck->inputs_check) {
        st = gev_input_sums(r, 0, after, err);
        for (size_t i = 0; i < r->nt && !st; i++)
            if (r->ts[i].role == ROLE_IN && before[i] != after[i] &&
                !json_object_get(tchecks, "inputs_unchanged")) {
                char why[160];
                snprintf(why, sizeof why, "input '%s' changed during the call", r->ts[i].name);
                json_object_set_new(tchecks, "inputs_unchanged", json_string(why));
                add_failure(ck->failures, "inputs_unchanged", (int)ti, "%s", why);
            }
        /* The next pattern starts from the true inputs again. */
        if (!st && pi + 1 < npat && json_object_get(tchecks, "inputs_unchanged"))
            st = gev_fill_inputs(r, 0, seed, 0, err);
    }
    *stp = st;
}

/* The trusted reference's call on seed's inputs, in its own buffers. */
static void unload_module(ev_run *q)
{
    for (int k = 0; k < q->nlists; k++)
        kh_launch_free(&q->lists[k]);
    q->nlists = 0;
    if (q->mod)
        kh_gpu_api(q->ev->g)->cuModuleUnload(q->mod);
    q->mod = NULL;
}

/* The trusted reference's call on seed's inputs, in its own buffers,
 * enqueued (wait: and waited for); fresh_only: the random inputs alone are
 * drawn again (gev_fill_inputs), for buffers no candidate's call has seen.
 * A cubin's module is loaded for the call and unloaded after it: no
 * candidate's call runs while it is there (its globals, its code). */
static kh_status ref_call(ev_run *q, uint64_t seed, int wait, int fresh_only, kh_err *err)
{
    kh_status st = gev_fill_inputs(q, 0, seed, fresh_only, err);
    if (!st)
        st = gev_zero_workspace(q, err);
    if (!st)
        st = enqueue(q, &q->lists[0], q->views[0], err);
    if (!st && wait)
        st = kh_gpu_sync(q->ev->g, err);
    return st;
}

static kh_status run_reference(ev_verify *v, uint64_t seed, kh_err *err)
{
    ev_run *q = v->ref;
    kh_status st = v->is_so ? KH_OK : load_module(q, q->payload + v->aoff, v->alen, err);
    if (!st && !v->is_so)
        st = bind_lists(q, err);
    if (!st)
        st = ref_call(q, seed, 1, 0, err); /* the trials' candidate calls saw its buffers */
    if (!v->is_so && !kh_gpu_poisoned(q->ev->g))
        unload_module(q);
    return st ? kh_err_prefix(err, "verification: the trusted reference's call") : KH_OK;
}

/* After the timing phase (no candidate's call runs again in this request):
 * the reference's buffers back, its module loaded once, and each kept
 * verified call judged against the reference's call on its seed; the
 * results join timed_outputs with their parts, as the host path's outputs
 * would. */
static kh_status verify_timed(ev_run *r, ev_verify *v, obuf *o, json_t *timed_outputs,
                              kh_err *err)
{
    ev_run *q = v->ref;
    if (!v->ntc)
        return KH_OK;
    kh_status st = gev_alloc_set(q, q->in[0], 1 << ROLE_IN, err);
    if (!st)
        st = gev_alloc_set(q, q->shared, (1 << ROLE_OUT) | (1 << ROLE_WS), err);
    /* new buffers, made after the candidate's last call: the first call
     * fills every input, the others draw the random ones again (bytes and
     * scalars stay, nothing waits between the calls) */
    q->set_fixed[0] = 0;
    if (!st && !v->is_so)
        st = load_module(q, q->payload + v->aoff, v->alen, err);
    if (!st)
        st = bind_lists(q, err);
    /* every kept call's reference call and comparison enqueued, one wait at
     * the end (the reference's buffers and the gather buffer are reused in
     * stream order) */
    if (!st)
        st = gev_verify_timed_begin(r, v, err);
    for (size_t j = 0; j < v->ntc && !st; j++) {
        if (!(st = ref_call(q, v->tc[j].seed, 0, 1, err)))
            st = gev_verify_timed_enqueue(r, v, &v->tc[j], err);
    }
    if (!st)
        st = gev_verify_timed_finish(r, v, o, timed_outputs, err);
    kh_status cst = st ? KH_OK : gev_verify_clear(v, err);
    if (!v->is_so && !kh_gpu_poisoned(q->ev->g))
        unload_module(q);
    st = st ? st : cst;
    return st ? kh_err_prefix(err, "verification of the timed calls") : KH_OK;
}

/* A fused trial, once the candidate's calls are done (so the reference's
 * outputs are never on the device while a candidate's call runs): the two
 * calls' bits compared, the reference run on the trial's seed, each call's
 * outputs compared with its outputs into parts, then those overwritten. */
static kh_status verify_trial(ev_run *r, const ev_checks *ck, uint64_t seed, int npat,
                              json_t *trial, json_t *tchecks, obuf *o, kh_err *err)
{
    ev_verify *v = ck->verify;
    int same = 1;
    kh_status st = npat == 2 ? gev_verify_same(r, v, &same, err) : KH_OK;
    if (!st && ck->det_check && npat == 2)
        json_object_set_new(tchecks, "deterministic", json_string(same ? "ok" : "failed"));
    if (!st)
        st = run_reference(v, seed, err);
    json_t *parts = NULL, *ut = NULL, *sums = NULL;
    if (!st)
        st = gev_verify_sums(v, &sums, err);
    if (!st)
        json_object_set_new(trial, "reference_sums", sums);
    if (!st && !(st = gev_verify_judge(r, v, npat == 2, ck->poison ? 0xFF : 0, o, &parts, &ut,
                                       err))) {
        json_object_set_new(trial, "parts", parts);
        json_object_set_new(trial, "untouched", ut);
    }
    if (!st && npat == 2 && !same &&
        !(st = gev_verify_judge(r, v, 0, 0x7F, o, &parts, &ut, err))) {
        json_object_set_new(trial, "parts_b", parts);
        json_object_set_new(trial, "untouched_b", ut);
    }
    if (!st && npat == 2 && same)
        json_object_set_new(trial, "outputs_b_same", json_true());
    kh_status cst = gev_verify_clear(v, err);
    return st ? st : cst;
}

/* One correctness trial on set 0: its inputs, one call per poison pattern,
 * the outputs into the payload o and the trial's checks.  Its record joins
 * trials_out even when a step fails (the caller then drops them all). */
static kh_status run_trial(ev_run *r, const ev_checks *ck, const json_t *tj, size_t ti, obuf *o,
                           json_t *trials_out, kh_err *err)
{
    uint64_t seed = (uint64_t)json_integer_value(json_object_get(tj, "seed"));
    json_t *trial = json_pack("{s:I}", "seed", (json_int_t)seed);
    json_t *tchecks = json_object();
    uint64_t before[MAX_TENSORS], after[MAX_TENSORS];
    kh_status st = gev_fill_inputs(r, 0, seed, 0, err);
    if (!st)
        st = gev_input_sums(r, 0, before, err);
    const unsigned char patterns[2] = {0xFF, 0x7F};
    int npat = ck->poison ? 2 : 1;
    size_t first_off = 0, first_len = 0;
    for (int pi = 0; pi < npat && !st; pi++) {
        /* Poison the outputs (parity runs leave them as they are, like
         * FlashInfer-Bench's torch.empty). */
        for (size_t i = 0; i < r->nt && !st && ck->poison; i++)
            if (r->ts[i].role == ROLE_OUT && r->ts[i].bytes)
                st = kh_gpu_memset8(r->ev->g, r->shared[i].buf.ptr, patterns[pi],
                                    r->ts[i].bytes, err);
        if (!st)
            st = gev_zero_workspace(r, err);
        if (!st)
            st = enqueue(r, &r->lists[0], r->views[0], err);
        if (!st)
            st = kh_gpu_sync(r->ev->g, err);
        if (!st && ck->verify && pi == 0 && npat == 2)
            st = gev_verify_stash(r, ck->verify, err);
        if (st)
            break;
        if (ck->verify) {
            trial_checks(r, ck, ti, pi, npat, seed, before, after, tchecks, &st, err);
            continue;
        }
        size_t start = o->n;
        json_t *want = json_object_get(tj, "ranges"), *got = NULL;
        json_t *outs = want ? gev_copy_ranged(r, r->shared, want, 0, o, &got, err)
                            : gev_copy_outputs(r, r->shared, o, err);
        if (!outs) {
            st = err->code;
            break;
        }
        if (got)
            json_object_set_new(trial, "ranges", got);
        if (pi == 0) {
            first_off = start;
            first_len = o->n - start;
        } else {
            int same = first_len == o->n - start &&
                       (!first_len || !memcmp(o->p + first_off, o->p + start, first_len));
            if (ck->det_check)
                json_object_set_new(tchecks, "deterministic",
                                    json_string(same ? "ok" : "failed"));
            if (same) {
                /* bit-identical under both poisons (so every byte was
                 * written): the second copy is not sent, the
                 * coordinator judges it once */
                o->n = start;
                json_decref(outs);
                outs = json_deep_copy(json_object_get(trial, "outputs"));
                json_object_set_new(trial, "outputs_b_same", json_true());
            }
        }
        json_object_set_new(trial, pi == 0 ? "outputs" : "outputs_b", outs);
        trial_checks(r, ck, ti, pi, npat, seed, before, after, tchecks, &st, err);
    }
    if (!st && ck->verify)
        st = verify_trial(r, ck, seed, npat, trial, tchecks, o, err);
    if (ck->inputs_check && !json_object_get(tchecks, "inputs_unchanged"))
        json_object_set_new(tchecks, "inputs_unchanged", json_string("ok"));
    json_object_set_new(trial, "checks", tchecks);
    json_array_append_new(trials_out, trial);
    return st;
}

/* fn on ctx, its seconds added to *acc (the reply's steps) */
static kh_status counted(kh_status (*fn)(void *, kh_err *), void *ctx, double *acc,
                         kh_err *err)
{
    double t0 = kh_now();
    kh_status st = fn(ctx, err);
    *acc += kh_now() - t0;
    return st;
}

static kh_status tgt_before(void *ctx, kh_err *err)
{
    return counted(before_call, ctx, &((ev_run *)ctx)->t_refill, err);
}

static kh_status tgt_after(void *ctx, kh_err *err)
{
    return counted(after_call, ctx, &((ev_run *)ctx)->t_keep, err);
}

/* What the timing watch found (gev_watch_call), as failures: the first
 * call whose guard bands were written, the first whose inputs changed. */
static kh_status watch_failures(ev_run *r, kh_err *err)
{
    uint64_t first[2];
    kh_status st = gev_watch_read(r->ev, first, err);
    if (st)
        return st;
    if (first[0] != UINT64_MAX) {
        long k = (long)(first[0] >> 32);
        size_t i = (size_t)(first[0] >> 24 & 0xFF), at = (size_t)(first[0] & 0x7FFFFF);
        int after = (int)(first[0] >> 23 & 1);
        kh_launch_buf all[MAX_TENSORS];
        gev_view(r, 0, all);
        size_t guard = i < r->nt ? all[i].buf.guard : 0;
        add_failure(r->failures, "guards", -1,
                    "during timing (call %ld): tensor '%s': a write landed %zu bytes %s the "
                    "buffer",
                    k, i < r->nt ? r->ts[i].name : "?", after ? at + 1 : guard - at,
                    after ? "after" : "before");
    }
    if (first[1] != UINT64_MAX) {
        size_t i = (size_t)(first[1] & 0xFFFFFFFFu);
        add_failure(r->failures, "inputs_unchanged", -1,
                    "during timing (call %ld): input '%s' changed during the call",
                    (long)(first[1] >> 32), i < r->nt ? r->ts[i].name : "?");
    }
    return KH_OK;
}

/* The timing phase: the protocol's options, the rotated input sets, a fresh
 * module when asked, kh_bench_run on the timing target with the outputs of
 * verified calls into the payload o and timed_outputs, then the timing
 * record (*timing_out) and the guard bands of every set. */
static kh_status run_timing(ev_run *r, const ev_checks *ck, const json_t *timing,
                            const json_t *trials, obuf *o, json_t *timed_outputs,
                            json_t **timing_out, kh_err *err)
{
    kh_gpu_eval *ev = r->ev;
    kh_status st = KH_OK;
    kh_protocol proto = KH_PROTO_OFFICIAL;
    const char *ps = json_string_value(json_object_get(timing, "protocol"));
    if (ps && !kh_protocol_parse(ps, &proto))
        st = kh_err_set(err, KH_EINVAL, "timing.protocol: official, screen or precise");
    kh_bench_opts bo;
    kh_bench_defaults(proto, &bo);
    json_t *v;
    if ((v = json_object_get(timing, "warmup"))) bo.warmup = (int)json_integer_value(v);
    if ((v = json_object_get(timing, "iters"))) bo.iters = (int)json_integer_value(v);
    if ((v = json_object_get(timing, "trials"))) bo.trials = (int)json_integer_value(v);
    if ((v = json_object_get(timing, "max_iters"))) bo.max_iters = (int)json_integer_value(v);
    if ((v = json_object_get(timing, "use_events"))) bo.use_events = json_is_true(v);
    if ((v = json_object_get(timing, "cold"))) bo.cold_l2 = json_is_true(v);
    r->draw_once = json_is_true(json_object_get(timing, "draw_once"));
    int rot = (v = json_object_get(timing, "rotate_inputs")) ? (int)json_integer_value(v) : 1;
    rot = rot < 1 ? 1 : rot > MAX_SETS ? MAX_SETS : rot;
    /* The timing inputs come from their own seed (never a correctness
     * trial's), as does the schedule of verified calls: the coordinator
     * draws both per evaluation; without them, derived from trial 0. */
    uint64_t seed0 = (uint64_t)json_integer_value(json_object_get(json_array_get(trials, 0),
                                                                  "seed"));
    r->timing_seed = (v = json_object_get(timing, "seed")) ? (uint64_t)json_integer_value(v)
                                                           : kh_rng_derive_seed(seed0, 0x7171, 0);
    r->sample_seed = (v = json_object_get(timing, "sample_seed"))
                         ? (uint64_t)json_integer_value(v)
                         : kh_rng_derive_seed(seed0, 0x5A11, 0);
    r->verify_p = json_number_value(json_object_get(timing, "verify_timed_fraction"));
    r->max_verified = (v = json_object_get(timing, "max_verified")) ? (int)json_integer_value(v)
                                                                    : 256;
    json_t *vr = json_object_get(timing, "verify_ranges");
    r->rcount = (int)json_integer_value(json_object_get(vr, "count"));
    r->relems = (uint64_t)json_integer_value(json_object_get(vr, "elems"));
    if (r->rcount < 0 || r->rcount > MAX_RANGES)
        st = kh_err_set(err, KH_EINVAL, "timing.verify_ranges.count: 0 to %d", MAX_RANGES);
    r->inputs_check = ck->inputs_check;
    r->guards_check = ck->guards_check;
    r->timed_outputs = timed_outputs;
    r->failures = ck->failures;
    r->out = o;
    r->tv = ck->verify;
    for (int k = 1; k < rot && !st; k++, r->nsets++)
        st = gev_alloc_set(r, r->in[k], 1 << ROLE_IN, err);
    /* a fresh module before timing, so no state survives from the checked
     * calls; a trusted shared object keeps its state (a cuBLAS handle) */
    if (!st && ck->reload && !ck->is_so)
        st = load_module(r, r->payload + ck->aoff, ck->alen, err);
    if (!st)
        st = bind_lists(r, err);
    kh_bench_result br;
    memset(&br, 0, sizeof br);
    kh_gpu_clocks cb, ca;
    if (!st) {
        kh_bench_target t = {.call = tgt_call, .trial = tgt_trial, .phase = tgt_phase,
                             .before = tgt_before, .after = tgt_after, .ctx = r};
        r->poison = ck->poison;
        kh_gpu_reset_l2_persisting(ev->g, NULL);
        kh_gpu_read_clocks(ev->g, &cb);
        r->in_bench = 1;
        /* set 0 is drawn whole again at its first call, so every sum the
         * watch holds for its inputs is taken right after they were made */
        r->set_fixed[0] = 0;
        gev_watch_setup(r);
        st = gev_watch_reset(ev, err);
        if (!st)
            st = kh_bench_run(ev->g, ev->c, &t, &bo, &br, err);
        r->in_bench = 0;
        kh_gpu_read_clocks(ev->g, &ca);
        ev->busy_s += br.gpu_time_s;
        ev->active_s += br.active_s;
    }
    if (!st)
        st = watch_failures(r, err);
    double tj = kh_now();
    if (!st && ck->verify)
        st = verify_timed(r, ck->verify, o, timed_outputs, err);
    r->t_judge += kh_now() - tj;
    if (!st) {
        json_t *tout = bench_json(&br);
        *timing_out = tout;
        json_object_set_new(tout, "protocol", json_string(kh_protocol_name(proto)));
        json_object_set_new(tout, "rotate_inputs", json_integer(rot));
        if (r->draw_once)
            json_object_set_new(tout, "draw_once", json_true());
        json_object_set_new(tout, "calls", json_integer(r->call));
        json_object_set_new(tout, "verified_calls", json_integer(r->nverified));
        json_object_set_new(tout, "clocks_before", kh_gpu_clocks_json(&cb));
        json_object_set_new(tout, "clocks_after", kh_gpu_clocks_json(&ca));
        if (ck->guards_check && !st) {
            char why[600];
            for (int k = 0; k < r->nsets; k++) {
                kh_launch_buf all[MAX_TENSORS];
                gev_view(r, k, all);
                if (!gev_guards_ok(r, all, why, sizeof why)) {
                    add_failure(ck->failures, "guards", -1, "during timing: %s", why);
                    break;
                }
            }
        }
    }
    kh_bench_result_free(&br);
    return st;
}

/* A run's artifact, tensors and launches (or entry) from spec, against a
 * payload of payload_len bytes: the artifact loaded, set 0's inputs and the
 * outputs and workspace allocated, the launch lists bound.  *aoff, *alen:
 * where the artifact lies; *is_so: a trusted shared object. */
static kh_status open_run(ev_run *r, const json_t *spec, size_t payload_len, size_t *aoff,
                          size_t *alen, int *is_so, kh_err *err)
{
    json_t *art = json_object_get(spec, "artifact");
    const char *kind = json_string_value(json_object_get(art, "kind"));
    *is_so = kind && !strcmp(kind, "so");
    kh_status st = KH_OK;
    if (!kind || (strcmp(kind, "cubin") && !*is_so))
        st = kh_err_set(err, KH_EINVAL, "artifact.kind must be \"cubin\" (or \"so\", a trusted "
                        "shared object with an entry) for the gpu worker");
    if (!st)
        st = kh_worker_slice(json_object_get(art, "payload"), payload_len, aoff, alen,
                             "artifact", err);
    if (!st)
        st = gev_parse_tensors(json_object_get(spec, "tensors"), payload_len, r->ts, &r->nt,
                               err);
    r->launches = json_object_get(spec, "launches");
    if (!st && !*is_so && !json_is_array(r->launches))
        st = kh_err_set(err, KH_EINVAL, "launches: an array is required for the gpu worker");
    /* set 0 serves the correctness trials */
    r->nsets = 1;
    if (!st)
        st = *is_so ? gev_so_load(r, r->payload + *aoff, *alen, json_object_get(spec, "entry"), err)
                    : load_module(r, r->payload + *aoff, *alen, err);
    if (!st)
        st = gev_alloc_set(r, r->in[0], 1 << ROLE_IN, err);
    if (!st)
        st = gev_alloc_set(r, r->shared, (1 << ROLE_OUT) | (1 << ROLE_WS), err);
    if (!st)
        st = bind_lists(r, err);
    return st;
}

/* Free what open_run and the timing made (after a sticky error nothing on
 * the device may be touched again). */
static void close_run(ev_run *r)
{
    if (!r)
        return;
    if (!kh_gpu_poisoned(r->ev->g)) {
        for (int k = 0; k < r->nlists; k++)
            kh_launch_free(&r->lists[k]);
        for (int k = 0; k < MAX_SETS; k++)
            gev_free_set(r, r->in[k]);
        gev_free_set(r, r->shared);
        if (r->mod)
            kh_gpu_api(r->ev->g)->cuModuleUnload(r->mod);
        gev_so_free(r->so);
    }
    free(r);
}

/* A fused request's "verify": {reference: {artifact, tensors, launches |
 * entry}, payload: [off, len] (the reference's own payload, its artifact
 * and input bytes), compare: {atol, rtol, precision}}. */
static kh_status open_verify(ev_run *r, const json_t *vj, size_t payload_len, ev_verify **out,
                             kh_err *err)
{
    size_t off = 0, len = 0, aoff = 0, alen = 0;
    int is_so = 0;
    kh_status st = kh_worker_slice(json_object_get(vj, "payload"), payload_len, &off, &len,
                                   "verify", err);
    ev_verify *v = st ? NULL : calloc(1, sizeof *v);
    ev_run *q = v ? calloc(1, sizeof *q) : NULL;
    if (!st && !q) {
        free(v);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    if (st)
        return st;
    v->ref = q;
    q->ev = r->ev;
    q->guard = r->guard;
    q->payload = r->payload + off;
    const json_t *cj = json_object_get(vj, "compare");
    const char *prec = json_string_value(json_object_get(cj, "precision"));
    kh_check_opts_default(&v->copts);
    v->copts.atol = json_number_value(json_object_get(cj, "atol"));
    v->copts.rtol = json_number_value(json_object_get(cj, "rtol"));
    v->copts.precision = prec && !strcmp(prec, "double") ? KH_CHECK_DOUBLE : KH_CHECK_FIB_F32;
    if (!json_is_number(json_object_get(cj, "atol")) ||
        !json_is_number(json_object_get(cj, "rtol")) ||
        (prec && strcmp(prec, "double") && strcmp(prec, "f32")))
        st = kh_err_set(err, KH_EINVAL, "verify.compare: {atol, rtol, precision: f32|double}");
    if (!st && (st = open_run(q, json_object_get(vj, "reference"), len, &aoff, &alen, &is_so,
                              err)))
        kh_err_prefix(err, "verify.reference");
    v->aoff = aoff;
    v->alen = alen;
    v->is_so = is_so;
    /* loaded and bound to check it; loaded again for each call */
    if (!st && !is_so)
        unload_module(q);
    if (!st)
        st = gev_verify_match(r, v, err);
    if (!st)
        st = gev_ensure_cmp(r->ev, err);
    *out = v;
    return st;
}

static void close_verify(ev_run *r, ev_verify *v)
{
    if (!v)
        return;
    if (!kh_gpu_poisoned(r->ev->g))
        gev_verify_free_stash(r, v);
    for (size_t j = 0; j < v->ntc; j++)
        json_decref(v->tc[j].ranges);
    free(v->tc);
    close_run(v->ref);
    free(v);
}

kh_status kh_gpu_evaluate(kh_gpu_eval *ev, const json_t *params, const unsigned char *payload,
                          size_t payload_len, json_t **result, unsigned char **out,
                          size_t *out_len, kh_err *err)
{
    ev_run *r = calloc(1, sizeof *r);
    if (!r)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    r->ev = ev;
    r->payload = payload;
    /* "guard_bytes": 0 gives every buffer an allocation of its own exact
     * size, so that compute-sanitizer's memcheck sees a write just past it
     * (a guard band would be inside the allocation, invisible to it) */
    json_t *gb = json_object_get(params, "guard_bytes");
    r->guard = json_is_integer(gb) && json_integer_value(gb) >= 0 &&
                       json_integer_value(gb) <= (1 << 20)
                   ? (size_t)json_integer_value(gb)
                   : GUARD;
    /* the coordinator's reference-latency request (eval_ref.c): its timing
     * may use each input set again */
    r->trusted = json_is_true(json_object_get(params, "trusted"));
    obuf o = {0};
    json_t *res = NULL, *failures = json_array(), *trials_out = json_array();
    ev->busy_pending = 0;
    ev->busy_s = 0;
    ev->active_s = 0;
    /* where the worker's time goes (the reply's "steps", seconds) */
    double t_open = kh_now(), t_trials = 0, t_timing = 0, t_end = 0;
    kh_status st = gev_ensure_utils(ev, err);
    size_t aoff = 0, alen = 0;
    int is_so = 0;
    if (!st)
        st = open_run(r, params, payload_len, &aoff, &alen, &is_so, err);
    json_t *trials = json_object_get(params, "trials");
    if (!st && (!json_is_array(trials) || json_array_size(trials) == 0))
        st = kh_err_set(err, KH_EINVAL, "trials: a non-empty array of {seed} is required");
    json_t *checks = json_object_get(params, "checks");
    ev_checks ck = {
        .poison = json_is_true(json_object_get(checks, "poison")),
        .inputs_check = json_is_true(json_object_get(checks, "inputs_unchanged")),
        .guards_check = json_is_true(json_object_get(checks, "guards")),
        .det_check = json_is_true(json_object_get(checks, "deterministic")),
        .reload = json_is_true(json_object_get(checks, "reload_before_timing")),
        .failures = failures, .aoff = aoff, .alen = alen, .is_so = is_so};
    json_t *timing = json_object_get(params, "timing");
    if (json_is_null(timing))
        timing = NULL;
    json_t *vj = json_object_get(params, "verify");
    if (!st && vj && !json_is_null(vj))
        st = open_verify(r, vj, payload_len, &ck.verify, err);

    size_t ti;
    json_t *tj;
    t_trials = kh_now();
    json_array_foreach(trials, ti, tj) {
        if (st)
            break;
        st = run_trial(r, &ck, tj, ti, &o, trials_out, err);
    }
    /* the trials' stash and the reference's buffers go before the timing
     * phase (its verified calls get them back afterwards) */
    if (ck.verify && !kh_gpu_poisoned(ev->g)) {
        gev_verify_free_stash(r, ck.verify);
        gev_free_set(ck.verify->ref, ck.verify->ref->in[0]);
        gev_free_set(ck.verify->ref, ck.verify->ref->shared);
    }

    json_t *timing_out = NULL, *timed_outputs = json_array();
    t_timing = kh_now();
    if (!st && timing)
        st = run_timing(r, &ck, timing, trials, &o, timed_outputs, &timing_out, err);
    t_end = kh_now();

    if (!st)
        st = busy_take(ev, err);
    if (!st) {
        res = json_pack("{s:o, s:o, s:o}", "trials", trials_out, "timed_outputs", timed_outputs,
                        "failures", failures);
        json_object_set_new(res, "gpu_kernel_s", json_real(ev->busy_s));
        json_object_set_new(res, "gpu_active_s", json_real(ev->active_s));
        /* open: the artifact loaded, buffers made; trials: the correctness
         * trials (their verification included); timing: the timing phase
         * (its verified calls judged included) */
        json_object_set_new(res, "steps",
                            json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "open_s",
                                      t_trials - t_open, "trials_s", t_timing - t_trials,
                                      "timing_s", t_end - t_timing, "refill_s", r->t_refill,
                                      "keep_s", r->t_keep, "judge_s", r->t_judge));
        trials_out = timed_outputs = failures = NULL;
        json_object_set_new(res, "timing", timing_out ? timing_out : json_null());
        timing_out = NULL;
        json_object_set_new(res, "gpu", kh_gpu_info(ev->g));
        /* where the buffers lived: islands (gpu.h) or one shared heap */
        json_object_set_new(res, "worker",
                            json_pack("{s:s}", "buffers",
                                      r->guard && kh_gpu_islands(ev->g) ? "islands" : "shared"));
        if (vj && !json_is_null(vj))
            json_object_set_new(res, "compare", json_string("device"));
        *result = res;
        *out = o.p;
        *out_len = o.n;
        o.p = NULL;
    } else {
        json_decref(timed_outputs);
    }
    json_decref(timing_out);
    json_decref(trials_out);
    json_decref(failures);
    free(o.p);
    close_verify(r, ck.verify);
    close_run(r);
    return st;
}
