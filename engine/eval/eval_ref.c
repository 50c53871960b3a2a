/* eval_ref.c: the reference's side of a verdict (docs/evaluation.md,
 * "The coordinator").  Owns the reference outputs per (definition,
 * workload, seed): the in-memory cache, the trusted reference's request
 * and its reply, the definition's Python run (pyref.h) with its cache in
 * the store, the reference's latency per protocol, and each GPU's copy
 * bandwidth for the speed-of-light bound.  Comparing outputs with them is
 * eval_compare.c's. */
#include "eval/eval_int.h"

#include "eval/pyref.h"
#include "store/store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void eval_refs_free(kh_eval *ev)
{
    for (refout *r = ev->refs, *n; r; r = n) {
        n = r->next;
        for (size_t i = 0; i < r->n; i++) {
            free(r->names[i]);
            free(r->bytes[i]);
        }
        free(r->names);
        free(r->bytes);
        free(r->lens);
        free(r->def);
        free(r->uuid);
        json_decref(r->ranges);
        free(r);
    }
    ev->refs = NULL;
}

/* Reference outputs are kept between runs for the seeds a run shares with
 * an earlier one (a fixed --seed); runs with fresh seeds share none, so
 * past a size the whole cache goes, before a run starts. */
void eval_refs_trim(kh_eval *ev)
{
    size_t total = 0;
    for (refout *r = ev->refs; r; r = r->next)
        for (size_t i = 0; i < r->n; i++)
            total += r->lens[i];
    if (total > (size_t)512 << 20)
        eval_refs_free(ev);
}

/* The outputs of (def, uuid, seed): whole, or, when ranges are asked for,
 * whole or those very ranges. */
static refout *ref_find(kh_eval *ev, const char *def, const char *uuid, uint64_t seed,
                        const json_t *ranges)
{
    for (refout *r = ev->refs; r; r = r->next)
        if (r->seed == seed && !strcmp(r->def, def) && !strcmp(r->uuid, uuid) &&
            (!r->ranges || (ranges && json_equal(r->ranges, (json_t *)ranges))))
            return r;
    return NULL;
}

static kh_status py_ref_outputs(wctx *c, refout **outs, kh_err *err);

/* The outputs a trusted reference's reply holds for the trials whose outs
 * are still missing, kept in the cache. */
static kh_status ref_from_reply(wctx *c, const wres *r, refout **outs, kh_err *err)
{
    const kh_task_solution *ref = c->ref;
    kh_status st = KH_OK;
    if (r->st)
        return kh_err_set(err, r->not_run && r->st == KH_ECHILD ? KH_ENODEV : r->st,
                          "the trusted reference '%s' %s on workload %s: %s", ref->name,
                          r->not_run ? "could not be run" : "failed", c->w->uuid, r->err.msg);
    json_t *res = json_object_get(r->reply.head, "result");
    json_t *trials = json_object_get(res, "trials");
    for (size_t t = 0; t < c->ntrials && !st; t++) {
        if (outs[t])
            continue;
        json_t *o = json_object_get(json_array_get(trials, t), "outputs");
        refout *ro = calloc(1, sizeof *ro);
        if (!ro) {
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            break;
        }
        ro->def = eval_dupstr(c->d->name);
        ro->uuid = eval_dupstr(c->w->uuid);
        ro->seed = c->seeds[t];
        ro->n = c->d->noutputs;
        ro->names = calloc(ro->n, sizeof *ro->names);
        ro->bytes = calloc(ro->n, sizeof *ro->bytes);
        ro->lens = calloc(ro->n, sizeof *ro->lens);
        ro->next = c->ev->refs;
        c->ev->refs = ro;
        if (!ro->def || !ro->uuid || !ro->names || !ro->bytes || !ro->lens) {
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            break;
        }
        /* a reference asked for element ranges returns those (the gpu
         * worker) or the whole outputs (the host worker) */
        const json_t *tr = c->trial_ranges ? c->trial_ranges[t] : NULL;
        for (size_t k = 0; k < ro->n; k++) {
            const kh_task_tensor *ot = &c->d->outputs[k];
            size_t want = eval_out_bytes(c->d, ot, c->w->axes);
            json_t *sl = json_object_get(o, ot->name);
            kh_dtype odt;
            kh_err derr;
            if (tr && !kh_dtype_parse(ot->dtype, &odt, &derr)) {
                size_t rl = eval_ranges_bytes(odt, json_object_get(tr, ot->name));
                if (rl && (size_t)json_integer_value(json_array_get(sl, 1)) == rl) {
                    want = rl;
                    if (!ro->ranges)
                        ro->ranges = json_incref((json_t *)tr);
                }
            }
            const unsigned char *b = eval_reply_bytes(&r->reply, sl, want);
            ro->names[k] = eval_dupstr(ot->name);
            ro->bytes[k] = malloc(want ? want : 1);
            if (!b || !ro->names[k] || !ro->bytes[k]) {
                st = kh_err_set(err, b ? KH_ENOMEM : KH_ECORRUPT,
                                "the reference's reply lacks output '%s'", ot->name);
                break;
            }
            memcpy(ro->bytes[k], b, want);
            ro->lens[k] = want;
        }
        outs[t] = ro;
    }
    return st;
}

/* Found in memory, else made at once (Python), else asked of the trusted
 * reference: a request filed for every trial seed, whose reply fills the
 * missing ones (eval_ref_take). */
kh_status eval_ref_post(wctx *c, wstate *s, refout **outs, kh_err *err)
{
    const kh_task_solution *ref = c->ref;
    size_t missing = 0;
    for (size_t t = 0; t < c->ntrials; t++)
        if (!(outs[t] = ref_find(c->ev, c->d->name, c->w->uuid, c->seeds[t],
                                 c->trial_ranges ? c->trial_ranges[t] : NULL)))
            missing++;
    if (missing < c->ntrials && !ref && !c->pyref_source) /* not one of an earlier stage */
        c->pyref_source = "memory";
    if (!missing)
        return KH_OK;
    if (!ref)
        return py_ref_outputs(c, outs, err);
    art *a = NULL;
    kh_status st = eval_build_reference(c, &a, err);
    if (st)
        return st;
    json_t *p = NULL;
    if ((st = eval_request(c, ref, a, 1, &p, err)))
        return st;
    st = eval_post(c, s, eval_is_host(ref), p, a, err);
    json_decref(p);
    return st;
}

kh_status eval_ref_take(wctx *c, wstate *s, refout **outs, char hash[33], kh_err *err)
{
    kh_status st = s->nposted ? ref_from_reply(c, &s->posted[0]->res, outs, err) : KH_OK;
    if (st)
        return st;
    XXH3_state_t *hs = XXH3_createState();
    if (!hs)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    XXH3_128bits_reset(hs);
    for (size_t t = 0; t < c->ntrials; t++)
        for (size_t k = 0; k < outs[t]->n; k++)
            XXH3_128bits_update(hs, outs[t]->bytes[k], outs[t]->lens[k]);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(hs));
    XXH3_freeState(hs);
    for (int k = 0; k < 16; k++)
        snprintf(hash + 2 * k, 3, "%02x", canon.digest[k]);
    return KH_OK;
}

/* The verified timed calls' seeds (and ranges) stand in for the trials'
 * while their reference outputs are found or asked for. */
typedef struct trials_saved {
    uint64_t seeds[KH_TASK_MAX_SAMPLING_TRIALS];
    size_t n;
} trials_saved;

static void timed_enter(wctx *c, const wstate *s, trials_saved *sv)
{
    memcpy(sv->seeds, c->seeds, sizeof sv->seeds);
    sv->n = c->ntrials;
    memcpy(c->seeds, s->tseeds, s->ntseeds * sizeof *s->tseeds);
    c->ntrials = s->ntseeds;
    c->timed_refs = 1;
    c->trial_ranges = s->any_ranges ? (json_t **)s->tranges : NULL;
}

static void timed_leave(wctx *c, const trials_saved *sv)
{
    c->trial_ranges = NULL;
    c->timed_refs = 0;
    memcpy(c->seeds, sv->seeds, sizeof sv->seeds);
    c->ntrials = sv->n;
}

kh_status eval_timed_refs_post(wctx *c, wstate *s, kh_err *err)
{
    trials_saved sv;
    timed_enter(c, s, &sv);
    kh_status st = eval_ref_post(c, s, s->tro, err);
    timed_leave(c, &sv);
    return st;
}

kh_status eval_timed_refs_take(wctx *c, wstate *s, kh_err *err)
{
    trials_saved sv;
    char unused[33];
    timed_enter(c, s, &sv);
    kh_status st = eval_ref_take(c, s, s->tro, unused, err);
    timed_leave(c, &sv);
    return st;
}

/* ---- reference outputs from the definition's Python run ----------------------
 * Memory first (ev->refs), then the store (a `refout` record per (definition,
 * workload, seed), kh_pyref_key), then one run of the interpreter for every
 * seed still missing, whose outputs go to both.  The store is used only when
 * verdicts are recorded (record = true): the same store, so `--no-store`
 * leaves no trace. */
static refout *refout_add(kh_eval *ev, const char *def, const char *uuid, uint64_t seed, size_t n)
{
    refout *ro = calloc(1, sizeof *ro);
    if (!ro)
        return NULL;
    ro->def = eval_dupstr(def);
    ro->uuid = eval_dupstr(uuid);
    ro->seed = seed;
    ro->n = n;
    ro->names = calloc(n ? n : 1, sizeof *ro->names);
    ro->bytes = calloc(n ? n : 1, sizeof *ro->bytes);
    ro->lens = calloc(n ? n : 1, sizeof *ro->lens);
    /* linked in at once, so kh_eval_free frees it whatever happens next */
    ro->next = ev->refs;
    ev->refs = ro;
    if (!ro->def || !ro->uuid || !ro->names || !ro->bytes || !ro->lens) {
        ro->n = 0; /* nothing to free per output */
        return NULL;
    }
    return ro;
}

/* The cached outputs of one seed from the store, or NULL. */
static refout *refout_from_store(wctx *c, kh_store *s, uint64_t seed)
{
    char key[33], id[KH_STORE_ID_MAX];
    kh_pyref_key(c->d, c->w, seed, c->evaluator == KH_EVAL_DSA_TOPK, key);
    snprintf(id, sizeof id, "refout-%s", key);
    json_t *rec = NULL;
    kh_err e2;
    if (kh_store_get(s, id, &rec, &e2) != KH_OK)
        return NULL;
    json_t *outs = json_object_get(rec, "outputs");
    void *data[64] = {0};
    size_t lens[64] = {0};
    int ok = c->d->noutputs <= 64;
    for (size_t k = 0; ok && k < c->d->noutputs; k++) {
        const kh_task_tensor *ot = &c->d->outputs[k];
        json_t *o = json_object_get(outs, ot->name);
        kh_hash h;
        ok = o && kh_hash_parse(json_string_value(json_object_get(o, "data_blob")) ?
                                    json_string_value(json_object_get(o, "data_blob")) : "",
                                &h, &e2) == KH_OK &&
             kh_store_get_blob(s, &h, &data[k], &lens[k], &e2) == KH_OK &&
             lens[k] == eval_out_bytes(c->d, ot, c->w->axes);
    }
    json_decref(rec);
    refout *ro = ok ? refout_add(c->ev, c->d->name, c->w->uuid, seed, c->d->noutputs) : NULL;
    for (size_t k = 0; k < c->d->noutputs && k < 64; k++) {
        if (ro) {
            ro->names[k] = eval_dupstr(c->d->outputs[k].name);
            ro->bytes[k] = data[k];
            ro->lens[k] = lens[k];
        } else {
            free(data[k]);
        }
    }
    return ro;
}

typedef struct pyput {
    wctx *c;
    const kh_pyref_result *res;
    const uint64_t *seeds;
    size_t n;
    const char *python;
} pyput;

static kh_status pyput_fn(kh_store_txn *tx, void *arg, kh_err *err)
{
    pyput *p = arg;
    wctx *c = p->c;
    for (size_t s = 0; s < p->n; s++) {
        char key[33], id[KH_STORE_ID_MAX];
        kh_pyref_key(c->d, c->w, p->seeds[s], c->evaluator == KH_EVAL_DSA_TOPK, key);
        snprintf(id, sizeof id, "refout-%s", key);
        json_t *outs = json_object();
        for (size_t k = 0; k < c->d->noutputs; k++) {
            const kh_tensor *t = p->res->out[s * p->res->noutputs + k];
            kh_hash h;
            kh_status st = kh_store_txn_put_blob(tx, t->data, t->nbytes, &h, err);
            if (st) {
                json_decref(outs);
                return st;
            }
            char hx[33];
            kh_hash_hex(&h, hx);
            json_t *shape = json_array();
            for (int i = 0; i < t->ndim; i++)
                json_array_append_new(shape, json_integer(t->shape[i]));
            json_object_set_new(outs, c->d->outputs[k].name,
                                json_pack("{s:s, s:o, s:s}", "dtype", c->d->outputs[k].dtype,
                                          "shape", shape, "data_blob", hx));
        }
        json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:I, s:o, s:{s:s, s:s, s:f}}", "type",
                                "refout", "id", id, "definition", c->d->name, "workload",
                                c->w->uuid, "seed", (json_int_t)p->seeds[s], "outputs", outs,
                                "provenance", "source", "python", "python", p->python,
                                "seconds", p->res->seconds);
        char out[KH_STORE_ID_MAX];
        kh_status st = kh_store_txn_put(tx, rec, KH_STORE_REPLACE, out, err);
        json_decref(rec);
        if (st)
            return st;
    }
    return KH_OK;
}

static kh_status py_ref_outputs(wctx *c, refout **outs, kh_err *err)
{
    kh_store *s = eval_cache_store(c);
    uint64_t need[KH_TASK_MAX_SAMPLING_TRIALS];
    size_t idx[KH_TASK_MAX_SAMPLING_TRIALS], nn = 0;
    int dsa = c->evaluator == KH_EVAL_DSA_TOPK;
    for (size_t t = 0; t < c->ntrials; t++) {
        if (outs[t])
            continue;
        if (s && (outs[t] = refout_from_store(c, s, c->seeds[t]))) {
            c->pyref_source = "store";
            c->pyref_cached++;
            continue;
        }
        need[nn] = c->seeds[t];
        idx[nn++] = t;
    }
    if (!nn)
        return KH_OK;
    kh_pyref_result res;
    double budget = c->o->deadline_s * (double)nn + 120;
    kh_status st = kh_pyref_run(c->ev->e, c->d, c->w, c->base, need, nn, dsa, budget, &res, err);
    if (st)
        return st;
    c->pyref_source = "python";
    c->pyref_runs++;
    c->pyref_seconds += res.seconds;
    for (size_t j = 0; j < nn && !st; j++) {
        refout *ro = refout_add(c->ev, c->d->name, c->w->uuid, need[j], c->d->noutputs);
        if (!ro) {
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            break;
        }
        for (size_t k = 0; k < c->d->noutputs; k++) {
            const kh_tensor *t = res.out[j * res.noutputs + k];
            ro->names[k] = eval_dupstr(c->d->outputs[k].name);
            ro->bytes[k] = malloc(t->nbytes ? t->nbytes : 1);
            if (!ro->names[k] || !ro->bytes[k]) {
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
                break;
            }
            memcpy(ro->bytes[k], t->data, t->nbytes);
            ro->lens[k] = t->nbytes;
        }
        outs[idx[j]] = ro;
    }
    if (!st && s && !c->timed_refs) {
        /* a cache: a store that refuses the write costs a rerun, not the
         * verdict.  Timed calls' seeds are not kept: each is used once */
        kh_err e2;
        pyput p = {.c = c, .res = &res, .seeds = need, .n = nn, .python = res.python};
        (void)kh_store_update(s, pyput_fn, &p, &e2);
    }
    kh_pyref_result_free(&res);
    return st;
}

/* ---- the reference's latency ------------------------------------------------
 * Timed by the same protocol as the candidate, on the same GPU group, once
 * per (definition, workload, protocol) in the evaluator's life. */
kh_status eval_ref_latency_post(wctx *c, wstate *s, kh_err *err)
{
    const kh_task_solution *ref = c->ref;
    if (!ref) { /* a Python reference: nothing of it runs in a worker to time */
        s->ref_ns = NAN;
        return KH_OK;
    }
    for (refperf *p = c->ev->perfs; p; p = p->next)
        if (!strcmp(p->def, c->d->name) && !strcmp(p->uuid, c->w->uuid) &&
            !strcmp(p->protocol, c->o->protocol)) {
            s->ref_ns = p->latency_ns;
            return KH_OK;
        }
    art *a = NULL;
    kh_status st = eval_build(c->ev, eval_cache_store(c), ref, 1, &a, err);
    if (st || !a->ok)
        return st ? st : kh_err_set(err, KH_ECOMPILE, "the reference does not build");
    json_t *p = NULL;
    if ((st = eval_request(c, ref, a, 1, &p, err)))
        return st;
    eval_add_timing(c, p, 0);
    /* Only its timing is wanted here, not its outputs (the reference stage
     * has them): one trial, and from the gpu worker no output bytes at all
     * (an empty list of element ranges per output), where a whole trial of
     * a large workload's outputs would cross to this process for nothing. */
    json_t *tr = json_object_get(p, "trials");
    while (json_array_size(tr) > 1)
        json_array_remove(tr, json_array_size(tr) - 1);
    if (!eval_is_host(ref) && json_array_size(tr) == 1) {
        json_t *none = json_object();
        for (size_t i = 0; i < c->d->noutputs; i++)
            json_object_set_new(none, c->d->outputs[i].name, json_array());
        json_object_set_new(json_array_get(tr, 0), "ranges", none);
    }
    /* the trusted reference: the host worker may rotate a few input sets
     * instead of generating each timed call's afresh (a 64 MiB input takes
     * longer to draw than to use) */
    json_object_set_new(p, "trusted", json_true());
    /* its deadline is not the candidate's: a short one (a red team's 10 s)
     * must not fail a reference whose timing phase flushes the caches before
     * each of a hundred calls on 64 MiB inputs */
    if (c->o->deadline_s < 120)
        json_object_set_new(p, "deadline_s", json_real(120));
    st = eval_post(c, s, eval_is_host(ref), p, a, err);
    json_decref(p);
    return st;
}

kh_status eval_ref_latency_take(wctx *c, wstate *s, kh_err *err)
{
    const job *j = s->posted[0];
    const wres *r = &j->res;
    if (r->st)
        return kh_err_set(err, r->st, "timing the reference failed: %s", r->err.msg);
    json_t *tm = json_object_get(json_object_get(r->reply.head, "result"), "timing");
    s->ref_ns = json_number_value(json_object_get(tm, "latency_ns"));
    s->ref_timing = j;
    refperf *rp = calloc(1, sizeof *rp);
    if (rp) {
        rp->def = eval_dupstr(c->d->name);
        rp->uuid = eval_dupstr(c->w->uuid);
        rp->protocol = eval_dupstr(c->o->protocol);
        rp->latency_ns = s->ref_ns;
        rp->next = c->ev->perfs;
        c->ev->perfs = rp;
    }
    return KH_OK;
}

/* The gpu worker measures a device-to-device copy ("peaks"): its median
 * bandwidth (the speed-of-light check allows 1.5x that, for inputs the L2
 * holds: a bound that rejects honest work is worse than none).  Asked once per GPU
 * (by UUID), on the worker slot that ran the candidate, so the bound is the
 * one of the device it ran on; 0 when the worker cannot say (the check is
 * then "unknown"). */
double eval_gpu_bandwidth(wctx *c, const char *uuid, size_t slot)
{
    peak *pk = c->ev->peaks;
    while (pk && strcmp(pk->uuid, uuid ? uuid : ""))
        pk = pk->next;
    if (pk)
        return pk->bw > 0 ? pk->bw : 0;
    if (!(pk = calloc(1, sizeof *pk)))
        return 0;
    snprintf(pk->uuid, sizeof pk->uuid, "%s", uuid ? uuid : "");
    pk->bw = -1;
    pk->next = c->ev->peaks;
    c->ev->peaks = pk;
    kh_err err;
    kh_pool *p = eval_pool_for(c->ev, 0, 0, &err);
    json_t *params = json_object();
    if (p && kh_pool_submit_to(p, "peaks", params, NULL, 0, 120, slot, &err) == KH_OK) {
        kh_pool_done d;
        memset(&d, 0, sizeof d);
        d.d.status = KH_ECHILD;
        while (kh_pool_wait(p, 1.0, &d, 1) == 0 && kh_pool_in_flight(p)) {
        }
        if (d.d.status == KH_OK) {
            double bw = json_number_value(
                json_object_get(json_object_get(d.d.reply.head, "result"), "copy_bytes_per_s"));
            if (bw > 0)
                pk->bw = bw;
        }
        kh_msg_free(&d.d.reply);
    }
    json_decref(params);
    return pk->bw > 0 ? pk->bw : 0;
}
