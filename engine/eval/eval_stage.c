/* eval_stage.c: one workload's evaluation, in explicit stages (wl_stage,
 * eval_int.h; docs/evaluation.md, "The coordinator").  Owns the order of
 * the checks and what each outcome means for the verdict: the build, the
 * candidate's request and its fate (crash, overrun, refusal), its trials
 * judged in FlashInfer-Bench's order, the checks of the timing phase and
 * its verified outputs, the speed-of-light bound, the speedup and the
 * sanitizer.  A stage that needs workers files its requests and returns;
 * the driver (eval.c) runs every workload's requests together, then takes
 * the stage up again with its replies.  Requests, comparisons and the
 * verdict's shape are the other eval_*.c units'. */
#include "eval/eval_int.h"

#include "eval/sanitizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The `result` of the candidate's reply. */
static json_t *result_of(const wstate *s)
{
    return json_object_get(s->cand->res.reply.head, "result");
}

static int passed(const wstate *s) { return !strcmp(s->v.status, "PASSED"); }

/* ---- WL_BUILD ------------------------------------------------------------- */
static kh_status st_build(wctx *c, wstate *s, kh_err *err)
{
    eval_verdict_begin(c, s);
    s->stage = WL_VERDICT;
    if (c->bad_solution[0]) {
        eval_fail(&s->v, "COMPILE_ERROR", NULL, "%s", c->bad_solution);
        json_object_set_new(s->evj, "log", json_string(c->bad_solution));
        return KH_OK;
    }
    kh_timeline("eval build begin");
    kh_status st = eval_build(c->ev, eval_cache_store(c), c->sol, 0, &s->a, err);
    kh_timeline("eval build end");
    if (st)
        return st;
    if (!s->a->ok) {
        eval_fail(&s->v, "COMPILE_ERROR", NULL, "%.600s",
                  s->a->log ? s->a->log : "compile failed");
        json_object_set_new(s->evj, "log", json_string(s->a->log ? s->a->log : ""));
        return KH_OK;
    }
    /* sampling: FIB's baseline is the distribution itself, the reference
     * runs only to be timed */
    s->stage = c->evaluator == KH_EVAL_SAMPLING || eval_fused(c) ? WL_CANDIDATE : WL_REFERENCE;
    return KH_OK;
}

/* ---- WL_REFERENCE --------------------------------------------------------- */
static kh_status st_reference(wctx *c, wstate *s, int resumed, kh_err *err)
{
    kh_status st = KH_OK;
    if (!resumed && ((st = eval_ref_post(c, s, s->ro, err)) || s->nposted))
        return st; /* the trusted reference's request is filed */
    if ((st = eval_ref_take(c, s, s->ro, s->ref_hash, err)))
        return st;
    s->stage = WL_CANDIDATE;
    return KH_OK;
}

/* ---- WL_CANDIDATE --------------------------------------------------------- */
static kh_status candidate_post(wctx *c, wstate *s, kh_err *err)
{
    const kh_eval_opts *o = c->o;
    json_t *p = NULL;
    kh_status st = eval_fused(c) ? eval_request_fused(c, c->sol, s->a, &p, err)
                                 : eval_request(c, c->sol, s->a, 0, &p, err);
    if (st) {
        if (!c->shape_of || st == KH_ENOMEM)
            return st;
        /* the candidate's manifest does not resolve on an admissible shape */
        eval_fail(&s->v, "RUNTIME_ERROR", "shapes", "on shape %s (from workload %s): %s",
                  c->w->uuid, c->shape_of->uuid, err->msg);
        s->stage = WL_VERDICT;
        return KH_OK;
    }
    if (o->timing && !c->shape_of)
        eval_add_timing(c, p, !o->parity);
    st = eval_post(c, s, eval_is_host(c->sol), p, s->a, err);
    json_decref(p);
    return st;
}

/* The request's fate: a reply (judged next), or a worker that overran, died,
 * refused the call (verdicts), or could not be had at all (no verdict: the
 * run fails). */
static kh_status candidate_take(wctx *c, wstate *s, kh_err *err)
{
    const kh_task_solution *sol = c->sol;
    json_t *kl = s->kl;
    const job *j = s->cand = s->posted[0];
    const wres *r = &j->res;
    json_object_set_new(kl, "worker_seconds", json_real(r->seconds));
    if (j->placement)
        json_object_set(kl, "placement", j->placement);
    s->stage = WL_VERDICT;
    if (r->st && r->not_run)
        return kh_err_set(err, r->st == KH_ECHILD ? KH_ENODEV : r->st, "no %s worker: %s",
                          eval_is_host(sol) ? "host" : "gpu", r->err.msg);
    if (r->st == KH_ETIMEOUT) {
        eval_fail(&s->v, "TIMEOUT", "deadline", "%s", r->err.msg);
        return KH_OK;
    }
    if (r->st == KH_ENODEV && !r->reply.head)
        return kh_err_set(err, KH_ENODEV, "%s", r->err.msg);
    if (r->st == KH_ECHILD && !r->reply.head) {
        const char *k = eval_fault_kind(r->err.msg);
        json_object_set_new(kl, "fault", json_string(k));
        eval_fail(&s->v, "RUNTIME_ERROR",
                  !strcmp(k, "guard_page")          ? "guards"
                  : !strcmp(k, "forbidden_syscall") ? "sandbox"
                                                    : NULL,
                  "%s", r->err.msg);
        /* the candidate broke this worker, not the machine: no backoff */
        if (eval_is_host(sol) && c->ev->host)
            kh_pool_reset(c->ev->host);
        return KH_OK;
    }
    if (r->st == KH_ECOMPILE) {
        eval_fail(&s->v, "COMPILE_ERROR", NULL, "%s", r->err.msg);
        return KH_OK;
    }
    if (r->st == KH_ESTATE || r->st == KH_EIO || (r->st && !r->reply.head))
        return kh_err_set(err, r->st, "%s", r->err.msg);
    if (r->st) { /* the worker refused the call: the candidate cannot be run so */
        eval_fail(&s->v, "RUNTIME_ERROR", NULL, "%s", r->err.msg);
        return KH_OK;
    }
    s->stage = WL_COMPARE;
    return KH_OK;
}

/* ---- WL_COMPARE ----------------------------------------------------------- */
/* The worker's failures of trial t (inputs_unchanged, guards, late_write). */
static void trial_failures(wstate *s, const json_t *failures, size_t t)
{
    verdict *v = &s->v;
    size_t fi;
    json_t *f;
    json_array_foreach(failures, fi, f) {
        json_t *ft = json_object_get(f, "trial");
        if (!ft || json_integer_value(ft) < 0 || (size_t)json_integer_value(ft) != t)
            continue;
        const char *ck = json_string_value(json_object_get(f, "check"));
        const char *d = json_string_value(json_object_get(f, "detail"));
        if (ck && !strcmp(ck, "inputs_unchanged")) {
            s->inputs_ok = 0;
            eval_fail(v, "RUNTIME_ERROR", "inputs_unchanged", "trial %zu: %s", t, d ? d : "");
        } else if (ck && !strcmp(ck, "guards")) {
            s->guards_ok = 0;
            eval_fail(v, "RUNTIME_ERROR", "guards", "trial %zu: %s", t, d ? d : "");
        } else if (ck && !strcmp(ck, "late_write")) {
            json_object_set_new(v->checks, "late_write", json_string("failed"));
            eval_fail(v, "RUNTIME_ERROR", "late_write", "trial %zu: %s", t, d ? d : "");
        }
    }
}

/* Sampling: every call in range and in the valid mask (the second poison's
 * call, same seed, too).  *stop: the trial failed. */
static kh_status trial_sampling(wctx *c, wstate *s, const json_t *tr, size_t t, int *stop,
                                kh_err *err)
{
    verdict *v = &s->v;
    const kh_msg *m = &s->cand->res.reply;
    int hard = !c->o->parity;
    kh_check_result ra;
    int ua = 0, ub = 0;
    kh_status st;
    if ((st = eval_sampling_call(c, m, json_object_get(tr, "outputs"), NULL, hard ? 0xFF : 0,
                                 &ra, &ua, err)))
        return st;
    if (ra.status == KH_CHECK_PASSED && hard && json_object_get(tr, "outputs_b") &&
        !json_is_true(json_object_get(tr, "outputs_b_same")) &&
        (st = eval_sampling_call(c, m, json_object_get(tr, "outputs_b"), NULL, 0x7F, &ra, &ub,
                                 err)))
        return st;
    if (ra.status != KH_CHECK_PASSED) {
        kh_check_merge(&v->acc, &ra);
        v->has_correctness = 1;
        if (ua || ub)
            s->poison_ok = 0;
        eval_fail(v, kh_check_status_name(ra.status), ua || ub ? "poison" : "correctness",
                  "trial %zu (seed %llu)%s: %s", t, (unsigned long long)c->seeds[t],
                  ua || ub ? ", ids left as the poison" : "", ra.reason);
        *stop = 1;
    }
    return KH_OK;
}

/* Trial t's outputs under the first poison, then the second, then
 * determinism.  *stop: the trial failed (FlashInfer-Bench returns at the
 * first failing trial). */
static kh_status trial_compare(wctx *c, wstate *s, const json_t *tr, size_t t, int *stop,
                               kh_err *err)
{
    verdict *v = &s->v;
    const kh_msg *m = &s->cand->res.reply;
    int hard = !c->o->parity;
    kh_check_result ra, rb;
    int ua = 0, ub = 0;
    int fused = eval_fused(c);
    kh_status st;
    if (fused && !json_object_get(tr, "parts"))
        return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks trial %zu's comparison", t);
    if ((st = fused ? eval_compare_parts(c, m, json_object_get(tr, "parts"),
                                         json_object_get(tr, "untouched"), NULL, &ra, &ua, err)
                    : eval_compare_set(c, m, json_object_get(tr, "outputs"), s->ro[t], &ra,
                                       hard ? 0xFF : 0, &ua, err)))
        return st;
    kh_check_merge(&v->acc, &ra);
    v->has_correctness = 1;
    if (ra.status != KH_CHECK_PASSED) {
        if (ua)
            s->poison_ok = 0;
        eval_fail(v, kh_check_status_name(ra.status), ua ? "poison" : "correctness",
                  "trial %zu (seed %llu)%s: %s", t, (unsigned long long)c->seeds[t],
                  ua ? ", elements left as the poison 0xFF" : "", ra.reason);
        *stop = 1;
        return KH_OK;
    }
    /* outputs_b_same: the worker found the second poison's outputs
     * bit-identical to the first's, judged above */
    if (hard && json_object_get(tr, fused ? "parts_b" : "outputs_b") &&
        !json_is_true(json_object_get(tr, "outputs_b_same"))) {
        if ((st = fused ? eval_compare_parts(c, m, json_object_get(tr, "parts_b"),
                                             json_object_get(tr, "untouched_b"), NULL, &rb, &ub,
                                             err)
                        : eval_compare_set(c, m, json_object_get(tr, "outputs_b"), s->ro[t],
                                           &rb, 0x7F, &ub, err)))
            return st;
        kh_check_merge(&v->acc, &rb);
        if (rb.status != KH_CHECK_PASSED) {
            s->poison_ok = 0;
            eval_fail(v, kh_check_status_name(rb.status), "poison",
                      "trial %zu (seed %llu): the output passed under poison 0xFF but not "
                      "under 0x7F%s: %s", t, (unsigned long long)c->seeds[t],
                      ub ? " (elements left unwritten)" : "", rb.reason);
            *stop = 1;
            return KH_OK;
        }
    }
    const char *dc = json_string_value(json_object_get(json_object_get(tr, "checks"),
                                                       "deterministic"));
    if (dc && !strcmp(dc, "failed")) {
        s->det_ok = 0;
        eval_fail(v, "RUNTIME_ERROR", "deterministic",
                  "trial %zu: two calls on the same inputs gave different bits", t);
        *stop = 1;
    }
    return KH_OK;
}

/* The correctness checks' summary, once every correctness call is judged
 * (the TVD phase's too). */
static void checks_summary(wctx *c, wstate *s)
{
    const kh_eval_opts *o = c->o;
    verdict *v = &s->v;
    if (!o->parity) {
        json_object_set_new(v->checks, "poison", json_string(s->poison_ok ? "ok" : "failed"));
        json_object_set_new(v->checks, "inputs_unchanged",
                            json_string(s->inputs_ok ? "ok" : "failed"));
        json_object_set_new(v->checks, "guards", json_string(s->guards_ok ? "ok" : "failed"));
        int det = (o->deterministic >= 0 ? o->deterministic : eval_is_host(c->sol)) &&
                  c->evaluator != KH_EVAL_SAMPLING;
        json_object_set_new(v->checks, "deterministic",
                            json_string(!det ? "off" : s->det_ok ? "ok" : "failed"));
    }
    json_object_set_new(v->checks, "correctness",
                        json_string(v->failed && !strcmp(v->failed, "correctness") ? "failed"
                                                                                     : "ok"));
}

/* A fused request's reference outputs never leave the device: the
 * verdict's reference hash is over the checksums the worker took of them,
 * trial by trial (the hash of the outputs themselves is the host
 * comparison's). */
static void fused_ref_hash(const wctx *c, wstate *s, const json_t *trials)
{
    XXH3_state_t *hs = XXH3_createState();
    if (!hs)
        return;
    XXH3_128bits_reset(hs);
    for (size_t t = 0; t < c->ntrials; t++) {
        size_t k;
        json_t *x;
        json_array_foreach(json_object_get(json_array_get(trials, t), "reference_sums"), k, x) {
            const char *hx = json_string_value(x);
            if (hx)
                XXH3_128bits_update(hs, hx, strlen(hx));
        }
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(hs));
    XXH3_freeState(hs);
    for (int k = 0; k < 16; k++)
        snprintf(s->ref_hash + 2 * k, 3, "%02x", canon.digest[k]);
}

static kh_status st_compare(wctx *c, wstate *s, kh_err *err)
{
    json_t *kl = s->kl, *res = result_of(s);
    json_t *trials = json_object_get(res, "trials"), *failures = json_object_get(res, "failures");
    json_object_set(kl, "worker", json_object_get(res, "worker"));
    const char *gu = json_string_value(json_object_get(json_object_get(res, "gpu"), "uuid"));
    if (gu && *gu)
        json_object_set_new(kl, "gpu_uuid", json_string(gu));
    if (json_object_get(res, "gpu"))
        json_object_set(kl, "gpu", json_object_get(res, "gpu"));
    s->poison_ok = s->inputs_ok = s->guards_ok = s->det_ok = 1;
    json_object_set_new(kl, "compare", json_string(eval_fused(c) ? "device" : "host"));
    if (eval_fused(c))
        fused_ref_hash(c, s, trials);
    /* FlashInfer-Bench evaluates trial by trial, output by output. */
    for (size_t t = 0; t < c->ntrials; t++) {
        json_t *tr = json_array_get(trials, t);
        trial_failures(s, failures, t);
        if (!passed(s))
            break;
        int stop = 0;
        kh_status st = c->evaluator == KH_EVAL_SAMPLING ? trial_sampling(c, s, tr, t, &stop, err)
                                                        : trial_compare(c, s, tr, t, &stop, err);
        if (st)
            return st;
        if (stop)
            break;
    }
    if (c->evaluator == KH_EVAL_SAMPLING && passed(s)) {
        s->stage = WL_TVD;
        return KH_OK;
    }
    checks_summary(c, s);
    s->stage = WL_TIMED_REFS;
    return KH_OK;
}

/* ---- WL_TVD --------------------------------------------------------------- */
static kh_status st_tvd(wctx *c, wstate *s, int resumed, kh_err *err)
{
    kh_status st = KH_OK;
    if (!resumed && ((st = eval_tvd_post(c, s, err)) || s->nposted))
        return st; /* its chunks of calls are filed */
    if (resumed && (st = eval_tvd_take(c, s, err)))
        return st;
    checks_summary(c, s);
    s->stage = WL_TIMED_REFS;
    return KH_OK;
}

/* ---- WL_TIMED_REFS -------------------------------------------------------- */
/* The timing reply's own verdicts: a kernel set other than the manifest's
 * (gpu), then failures during timing (no trial): inputs changed, guards, a
 * write after the call returned. */
static void timing_checks(wstate *s, const json_t *failures)
{
    verdict *v = &s->v;
    const char *ts = json_string_value(json_object_get(s->timing, "status"));
    if (ts && strcmp(ts, "OK")) {
        const char *why = json_string_value(json_object_get(s->timing, "why"));
        eval_fail(v, "RUNTIME_ERROR", "kernel_set", "timing: %s", why ? why : ts);
    }
    size_t fi;
    json_t *f;
    json_array_foreach(failures, fi, f) {
        json_t *ft = json_object_get(f, "trial"); /* absent or -1: timing */
        if (ft && json_integer_value(ft) >= 0)
            continue;
        const char *ck = json_string_value(json_object_get(f, "check"));
        const char *d = json_string_value(json_object_get(f, "detail"));
        if (ck && (!strcmp(ck, "inputs_unchanged") || !strcmp(ck, "guards") ||
                   !strcmp(ck, "late_write"))) {
            json_object_set_new(v->checks, ck, json_string("failed"));
            eval_fail(v, "RUNTIME_ERROR",
                      !strcmp(ck, "guards")       ? "guards"
                      : !strcmp(ck, "late_write") ? "late_write"
                                                  : "inputs_unchanged",
                      "%s", d ? d : "");
        }
    }
}

/* A timed output names the seed of its input set ("seed"), or the trial
 * whose inputs it used ("set" alone, the host worker's sets are the
 * trials' inputs). */
static uint64_t timed_seed(const wctx *c, const json_t *to)
{
    json_t *sj = json_object_get(to, "seed");
    json_int_t set = json_integer_value(json_object_get(to, "set"));
    return sj ? (uint64_t)json_integer_value(sj)
              : set >= 0 && (size_t)set < c->ntrials ? c->seeds[set] : 0;
}

/* The distinct seeds of the timed outputs, with the element ranges the
 * first of each returned.  Seeds not seen in correctness (the gpu worker's
 * timing sets) get reference outputs in this stage. */
static void timed_seeds(const wctx *c, wstate *s, const json_t *tos)
{
    size_t ti;
    json_t *to;
    json_array_foreach(tos, ti, to) {
        uint64_t sd = timed_seed(c, to);
        int have = 0;
        for (size_t k = 0; k < s->ntseeds; k++)
            have |= s->tseeds[k] == sd;
        if (!have && s->ntseeds < KH_MAX_VERIFIED) {
            s->tranges[s->ntseeds] = json_object_get(to, "ranges");
            s->any_ranges |= s->tranges[s->ntseeds] != NULL;
            s->tseeds[s->ntseeds++] = sd;
        }
    }
}

/* Sampling: a sample has no reference to match: in range is the check. */
static kh_status timed_sampling(wctx *c, wstate *s, const json_t *tos, kh_err *err)
{
    verdict *v = &s->v;
    size_t ti;
    json_t *to;
    s->ntseeds = 0;
    json_array_foreach(tos, ti, to) {
        kh_check_result rt;
        int ut = 0;
        kh_status st = eval_sampling_call(c, &s->cand->res.reply, json_object_get(to, "outputs"),
                                          NULL, 0xFF, &rt, &ut, err);
        if (st)
            return st;
        s->nverified++;
        if (rt.status != KH_CHECK_PASSED) {
            s->nbad++;
            eval_fail(v, "INCORRECT_NUMERICAL", "timed_outputs", "timed call %lld: %s",
                      (long long)json_integer_value(json_object_get(to, "call")), rt.reason);
            v->acc.max_abs_error = v->acc.max_rel_error = INFINITY;
        }
    }
    return KH_OK;
}

/* Timing: only for outputs that passed. */
static kh_status st_timed_refs(wctx *c, wstate *s, int resumed, kh_err *err)
{
    kh_status st = KH_OK;
    if (resumed) {
        if ((st = eval_timed_refs_take(c, s, err)))
            return st;
        s->stage = WL_TIMING;
        return KH_OK;
    }
    json_t *res = result_of(s);
    s->timing = json_object_get(res, "timing");
    if (!passed(s) || !json_is_object(s->timing)) {
        s->stage = WL_SANITIZE;
        return KH_OK;
    }
    timing_checks(s, json_object_get(res, "failures"));
    json_t *tos = json_object_get(res, "timed_outputs");
    s->nverified = s->nbad = s->ntseeds = 0;
    s->any_ranges = 0;
    timed_seeds(c, s, tos);
    if (c->evaluator == KH_EVAL_SAMPLING && (st = timed_sampling(c, s, tos, err)))
        return st;
    /* fused: the worker judged the verified calls itself */
    if (s->ntseeds && !eval_fused(c) &&
        (((st = eval_timed_refs_post(c, s, err)) || s->nposted) ||
                       (st = eval_timed_refs_take(c, s, err))))
        return st; /* an error, or the reference's request filed */
    s->stage = WL_TIMING;
    return KH_OK;
}

/* ---- WL_TIMING ------------------------------------------------------------ */
/* Every verified timed output against the reference outputs of its seed
 * (whole, or the element ranges it returned). */
static kh_status timed_compare(wctx *c, wstate *s, kh_err *err)
{
    verdict *v = &s->v;
    const kh_msg *m = &s->cand->res.reply;
    int fused = eval_fused(c);
    size_t ti;
    json_t *to;
    json_array_foreach(json_object_get(result_of(s), "timed_outputs"), ti, to) {
        json_int_t set = json_integer_value(json_object_get(to, "set"));
        uint64_t sd = timed_seed(c, to);
        refout *rref = NULL;
        for (size_t k = 0; k < s->ntseeds && !fused; k++)
            if (s->tseeds[k] == sd)
                rref = s->tro[k];
        if (fused && !json_object_get(to, "parts"))
            return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks timed call %lld's "
                              "comparison", (long long)json_integer_value(json_object_get(to,
                                                                                         "call")));
        if (!rref && !fused)
            continue;
        kh_check_result rt;
        int ut = 0;
        const json_t *rgs = json_object_get(to, "ranges");
        kh_status st = fused ? eval_compare_parts(c, m, json_object_get(to, "parts"), NULL, rgs,
                                                  &rt, &ut, err)
                       : rgs ? eval_compare_ranged(c, m, json_object_get(to, "outputs"), rgs,
                                                   rref, &rt, 0xFF, &ut, err)
                             : eval_compare_set(c, m, json_object_get(to, "outputs"), rref, &rt,
                                                0xFF, &ut, err);
        if (st)
            return st;
        s->nverified++;
        if (rt.status != KH_CHECK_PASSED) {
            s->nbad++;
            eval_fail(v, "INCORRECT_NUMERICAL", "timed_outputs",
                      "timed call %lld (input set %lld, seed %llu): %s",
                      (long long)json_integer_value(json_object_get(to, "call")),
                      (long long)set, (unsigned long long)sd, rt.reason);
            if (!v->has_correctness || v->acc.max_abs_error < rt.max_abs_error)
                v->acc.max_abs_error = rt.max_abs_error;
            if (v->acc.max_rel_error < rt.max_rel_error)
                v->acc.max_rel_error = rt.max_rel_error;
        }
    }
    return KH_OK;
}

/* Speed of light: nothing moves the task's minimum bytes faster than the
 * fastest measured copy, nor does its FLOPs faster than the peak. */
static void speed_of_light(wctx *c, wstate *s)
{
    verdict *v = &s->v;
    json_t *kl = s->kl;
    const json_t *timing = s->timing;
    int hard = !c->o->parity;
    double lat = s->lat;
    int64_t sb = 0, sf = -1;
    kh_err serr;
    if (kh_task_speed_of_light(c->d, c->w->axes, &sb, &sf, &serr) != KH_OK)
        return;
    double bw = json_number_value(json_object_get(timing, "copy_bandwidth_Bps"));
    /* The GPU's bound is the task's bytes at the measured DRAM copy rate
     * (what a SoL fraction is read against); a call is only rejected below
     * bound / 1.5, since inputs that fit in the 60 MiB L2 can beat a DRAM
     * copy.  The host worker's bandwidth is measured in cache already. */
    double margin = 1.0;
    if (bw <= 0 && !eval_is_host(c->sol)) {
        bw = eval_gpu_bandwidth(c, json_string_value(json_object_get(
                                       json_object_get(result_of(s), "gpu"), "uuid")),
                                s->cand ? s->cand->slot : 0);
        margin = 1.5;
    }
    double pk = json_number_value(json_object_get(timing, "peak_flops"));
    double bound = 0;
    if (bw > 0)
        bound = (double)sb / bw * 1e9;
    if (pk > 0 && sf > 0 && (double)sf / pk * 1e9 > bound)
        bound = (double)sf / pk * 1e9;
    json_object_set_new(kl, "speed_of_light",
                        json_pack("{s:I, s:I, s:f, s:f, s:f, s:f}", "bytes", (json_int_t)sb,
                                  "flops", (json_int_t)sf, "copy_bandwidth_Bps", bw,
                                  "peak_flops", pk, "bound_ns", bound, "reject_below_ns",
                                  bound / margin));
    if (!hard)
        return;
    if (bound <= 0) {
        json_object_set_new(v->checks, "speed_of_light", json_string("unknown"));
    } else if (lat < bound / margin) {
        json_object_set_new(v->checks, "speed_of_light", json_string("failed"));
        eval_fail(v, "RUNTIME_ERROR", "speed_of_light",
                  "latency %.1f ns is below the speed-of-light bound %.1f ns "
                  "(%lld bytes at %.3g B/s%s%s): impossible", lat, bound / margin,
                  (long long)sb, bw, sf > 0 && pk > 0 ? ", or the FLOPs at the peak" : "",
                  margin > 1 ? ", over 1.5 for the L2" : "");
    } else {
        json_object_set_new(v->checks, "speed_of_light", json_string("ok"));
    }
}

static kh_status st_timing(wctx *c, wstate *s, kh_err *err)
{
    verdict *v = &s->v;
    json_t *kl = s->kl;
    int hard = !c->o->parity;
    kh_status st;
    if (c->evaluator != KH_EVAL_SAMPLING && (st = timed_compare(c, s, err)))
        return st;
    if (hard) {
        json_object_set_new(v->checks, "timed_outputs",
                            json_string(s->nbad       ? "failed"
                                        : s->nverified ? "ok"
                                                       : "none sampled"));
        json_object_set_new(kl, "timed_outputs_verified",
                            json_pack("{s:I, s:I}", "calls", (json_int_t)s->nverified, "failed",
                                      (json_int_t)s->nbad));
    }
    s->lat = json_number_value(json_object_get(s->timing, "latency_ns"));
    speed_of_light(c, s);
    if (hard && !json_object_get(v->checks, "kernel_set") &&
        !json_object_get(s->timing, "kernels_per_call") && eval_is_host(c->sol))
        json_object_set_new(v->checks, "kernel_set", json_string("n/a (host)"));
    json_object_set_new(kl, "timer", json_incref(json_object_get(s->timing, "timer")));
    s->samples = json_incref(json_object_get(s->timing, "samples_ns"));
    s->stage = WL_REF_TIMING;
    return KH_OK;
}

/* ---- WL_REF_TIMING -------------------------------------------------------- */
static kh_status st_ref_timing(wctx *c, wstate *s, int resumed, kh_err *err)
{
    json_t *kl = s->kl;
    kh_status st = KH_OK;
    if (resumed) {
        if ((st = eval_ref_latency_take(c, s, err)))
            return st;
    } else {
        s->ref_ns = NAN;
        if (passed(s) && c->o->time_reference &&
            ((st = eval_ref_latency_post(c, s, err)) || s->nposted))
            return st; /* an error, or the reference's timing request filed */
    }
    if (passed(s)) {
        s->perf = json_pack("{s:f}", "latency_ms", s->lat / 1e6);
        /* where the speedup's other side was measured (same GPU) */
        if (s->ref_timing && s->ref_timing->placement)
            json_object_set(kl, "reference_placement", s->ref_timing->placement);
        if (isfinite(s->ref_ns) && s->ref_ns > 0) {
            json_object_set_new(s->perf, "reference_latency_ms", json_real(s->ref_ns / 1e6));
            json_object_set_new(s->perf, "speedup_factor", json_real(s->ref_ns / s->lat));
        }
    }
    json_t *tcopy = json_deep_copy(s->timing);
    json_object_del(tcopy, "samples_ns");
    json_object_set_new(kl, "timing", tcopy);
    s->stage = WL_SANITIZE;
    return KH_OK;
}

/* ---- WL_SANITIZE, WL_VERDICT ---------------------------------------------- */
static kh_status st_sanitize(wctx *c, wstate *s, kh_err *err)
{
    const char *tools = c->o->sanitize;
    s->stage = WL_VERDICT;
    if (!tools || !*tools || !passed(s))
        return KH_OK;
    if (!eval_is_host(c->sol))
        return eval_sanitize(c, c->sol, s->a, &s->v, s->kl, err);
    for (const char *q = tools; *q;) {
        size_t l = strcspn(q, ",");
        char tool[32];
        snprintf(tool, sizeof tool, "%.*s", (int)(l < 31 ? l : 31), q);
        q += l + (q[l] == ',');
        if (kh_san_check_name(tool))
            json_object_set_new(s->v.checks, kh_san_check_name(tool), json_string("n/a (host)"));
    }
    return KH_OK;
}

static kh_status st_verdict(wctx *c, wstate *s, kh_err *err)
{
    kh_status st = eval_verdict_end(c, s, err);
    if (!st)
        s->stage = WL_DONE;
    return st;
}

/* ---- stepping ------------------------------------------------------------- */
/* Run s's stage once: resumed, it takes up the replies of the requests it
 * filed; else it starts, and either completes or files requests. */
static kh_status step(wctx *c, wstate *s, int resumed, kh_err *err)
{
    switch (s->stage) {
    case WL_BUILD:
        return st_build(c, s, err);
    case WL_REFERENCE:
        return st_reference(c, s, resumed, err);
    case WL_CANDIDATE:
        return resumed ? candidate_take(c, s, err) : candidate_post(c, s, err);
    case WL_COMPARE:
        return st_compare(c, s, err);
    case WL_TVD:
        return st_tvd(c, s, resumed, err);
    case WL_TIMED_REFS:
        return st_timed_refs(c, s, resumed, err);
    case WL_TIMING:
        return st_timing(c, s, err);
    case WL_REF_TIMING:
        return st_ref_timing(c, s, resumed, err);
    case WL_SANITIZE:
        return st_sanitize(c, s, err);
    case WL_VERDICT:
        return st_verdict(c, s, err);
    case WL_DONE:
        break;
    }
    return KH_OK;
}

const char *const eval_worker_steps[KH_WORKER_STEPS] = {"open_s",   "trials_s", "timing_s",
                                                           "refill_s", "keep_s",   "judge_s"};

/* The replies of the requests s's stage filed, counted in its phase. */
static void count_requests(wstate *s)
{
    phase_cost *p = &s->ph[s->stage];
    for (size_t i = 0; i < s->nposted; i++) {
        const job *j = s->posted[i];
        p->requests++;
        p->worker_s += j->res.seconds;
        if (j->t_done > j->t_post)
            p->wait_s += j->t_done - j->t_post;
        p->bytes_sent += j->pl_len;
        p->bytes_back += j->res.reply.payload_len;
        json_t *res = json_object_get(j->res.reply.head, "result");
        json_t *k = json_object_get(res, "gpu_kernel_s");
        if (json_is_number(k) && json_number_value(k) > 0)
            p->kernel_s += json_number_value(k);
        json_t *ac = json_object_get(res, "gpu_active_s");
        if (json_is_number(ac) && json_number_value(ac) > 0)
            p->active_s += json_number_value(ac);
        for (int q = 0; q < KH_WORKER_STEPS; q++) {
            json_t *x = json_object_get(json_object_get(res, "steps"), eval_worker_steps[q]);
            if (json_is_number(x) && json_number_value(x) > 0)
                p->steps[q] += json_number_value(x);
        }
    }
}

kh_status eval_advance(wctx *c, wstate *s, kh_err *err)
{
    while (s->stage != WL_DONE) {
        wl_stage was = s->stage;
        int resumed = s->nposted > 0;
        if (resumed)
            count_requests(s);
        double t0 = kh_now();
        kh_status st = step(c, s, resumed, err);
        s->ph[was].coord_s += kh_now() - t0;
        if (st)
            return st;
        if (resumed)
            s->nposted = 0; /* replies taken; the jobs stay until the workload is done */
        else if (s->nposted)
            return KH_OK;   /* requests filed: the driver runs them, then resumes s */
        if (s->stage <= was) /* stages only go forward, so a workload ends */
            return kh_err_set(err, KH_ESTATE, "evaluation stage %d did not advance", (int)was);
    }
    return KH_OK;
}

void eval_wstate_free(wstate *s)
{
    json_decref(s->v.checks);
    json_decref(s->kl);
    json_decref(s->evj);
    json_decref(s->perf);
    json_decref(s->samples);
    json_decref(s->samp_extra);
    json_decref(s->trace);
    free(s->tvd_axes);
    free(s->tvd_counts);
    s->v.checks = s->kl = s->evj = s->perf = s->samples = s->samp_extra = s->trace = NULL;
    s->tvd_axes = NULL;
    s->tvd_counts = NULL;
}
