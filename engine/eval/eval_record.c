/* eval_record.c: the store's side of a verdict (eval_int.h).  Owns the one
 * update per verdict (the task, the candidate, the raw samples as a blob,
 * the evaluation record) and the store reference outputs are cached in.
 * What a verdict says is eval_verdict.c's; the records' shapes and their
 * writers are the store's (store/evaluation.h, store/candidate.h,
 * docs/store.md). */
#include "eval/eval_int.h"

#include "store/candidate.h"
#include "store/evaluation.h"
#include "store/store.h"

#include <stdlib.h>
#include <string.h>

/* One update per verdict: the task (named by its definition) and the candidate
 * (content-addressed by the solution JSON) if not there yet, the raw samples
 * as a blob (float64 little-endian, one per timed call, in call order), and
 * the evaluation record. */
typedef struct rec_ctx {
    const kh_eval_opts *o;    /* protocol, timing, and a run's context */
    const kh_task_def *d;
    const kh_candidate *cand; /* its one identity (candidate.h) */
    const char *sol_name;
    json_t *trace;
    const void *samples;
    size_t samples_len;
    char blob[33];
    char cand_id[KH_STORE_ID_MAX], eval_id[KH_STORE_ID_MAX];
} rec_ctx;

static kh_status rec_fn(kh_store_txn *tx, void *arg, kh_err *err)
{
    rec_ctx *r = arg;
    char task_id[KH_STORE_ID_MAX];
    kh_status st = kh_task_record_put(tx, r->d->name, r->d->json, NULL, task_id, err);
    if (st)
        return st;
    snprintf(r->cand_id, sizeof r->cand_id, "%s", r->cand->id);
    if ((st = kh_candidate_put(tx, r->cand, task_id, err)))
        return st;
    r->blob[0] = 0;
    if (r->samples_len) {
        kh_hash bh;
        if ((st = kh_store_txn_put_blob(tx, r->samples, r->samples_len, &bh, err)))
            return st;
        kh_hash_hex(&bh, r->blob);
    }
    json_t *kl = json_object_get(json_object_get(r->trace, "evaluation"), "khlua");
    if (r->blob[0])
        json_object_set_new(kl, "samples_blob", json_string(r->blob));
    kh_evaluation_facts f = {.task = task_id,
                             .candidate = r->cand_id,
                             .definition = r->d->name,
                             .solution = r->sol_name,
                             .trace = r->trace,
                             .samples_blob = r->blob[0] ? r->blob : NULL,
                             .timing = r->o->timing,
                             .run = r->o->run,
                             .round_index = r->o->run ? r->o->round_index : -1,
                             .purpose = r->o->purpose};
    return kh_evaluation_put(tx, &f, r->eval_id, err);
}

/* Record a verdict; on success the trace carries khlua.record and
 * khlua.samples_blob. */
static kh_status record(kh_eval *ev, const kh_eval_opts *o, const kh_task_def *d,
                        const kh_task_solution *sol, json_t *trace, const double *samples,
                        size_t n, kh_err *err)
{
    kh_store *use = o->store;
    if (!use && !ev->store) {
        kh_status st = kh_store_open(kh_engine_store_path(ev->e), NULL, &ev->store, err);
        if (st)
            return st;
        ev->own_store = 1;
    }
    unsigned char *raw = n ? malloc(n * 8) : NULL;
    if (n && !raw)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &samples[i], 8);
        for (int b = 0; b < 8; b++)
            raw[i * 8 + (size_t)b] = (unsigned char)(u >> (8 * b));
    }
    kh_candidate cand;
    kh_status st = kh_candidate_of(sol->json, &cand, err);
    if (st) {
        free(raw);
        return kh_err_prefix(err, "solution %s", sol->name ? sol->name : "?");
    }
    rec_ctx r = {.o = o, .d = d, .cand = &cand, .sol_name = sol->name, .trace = trace,
                 .samples = raw, .samples_len = n * 8};
    st = kh_store_update(use ? use : ev->store, rec_fn, &r, err);
    kh_candidate_free(&cand); /* its bytes outlived the update (write replay) */
    free(raw);
    if (!st)
        json_object_set_new(json_object_get(json_object_get(trace, "evaluation"), "khlua"),
                            "record", json_string(r.eval_id));
    return st;
}

/* The store of the run's verdicts, where a Python reference's outputs are
 * cached too; none when verdicts are not recorded. */
kh_store *eval_cache_store(wctx *c)
{
    if (!c->o->record)
        return NULL;
    if (c->o->store)
        return c->o->store;
    if (!c->ev->store) {
        kh_err e2;
        if (kh_store_open(kh_engine_store_path(c->ev->e), NULL, &c->ev->store, &e2) != KH_OK)
            return NULL; /* record() will say why when it tries */
        c->ev->own_store = 1;
    }
    return c->ev->store;
}

/* The raw samples: a store blob with the verdict; inline when the verdict is
 * not stored. */
void eval_record_trace(kh_eval *ev, const kh_eval_opts *o, const kh_task_def *d,
                       const kh_task_solution *sol, json_t *trace, json_t *samples)
{
    json_t *evj = json_object_get(trace, "evaluation");
    json_t *kj = json_object_get(evj, "khlua");
    json_object_set_new(kj, "samples_blob", json_null());
    size_t ns = json_array_size(samples);
    double *sv = ns ? malloc(ns * sizeof *sv) : NULL;
    for (size_t i = 0; sv && i < ns; i++)
        sv[i] = json_number_value(json_array_get(samples, i));
    kh_err rerr;
    if (!o->record) {
        json_object_set_new(kj, "stored", json_string("no (record = false)"));
        if (samples)
            json_object_set(kj, "samples_ns", samples);
    } else if (record(ev, o, d, sol, trace, sv, sv ? ns : 0, &rerr) != KH_OK) {
        json_object_set_new(kj, "stored", json_string(rerr.msg));
        if (samples)
            json_object_set(kj, "samples_ns", samples);
    } else {
        json_object_set_new(kj, "stored", json_string("yes"));
    }
    free(sv);
}
