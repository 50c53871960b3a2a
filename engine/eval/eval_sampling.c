/* eval_sampling.c: FlashInfer-Bench's sampling evaluator on the
 * coordinator's side (check.h does the counting and the TVD arithmetic).
 * Owns the thresholding mask of a workload's probs (eval_request.c makes
 * them and sends them as bytes, so every call sees one distribution),
 * checking one call's samples, and the TVD phase: its requests (the batch repeated, chunks of calls
 * filed together), the samples counted over them, the test and khlua's
 * fresh-samples check.  The validation calls are judged by the compare
 * stage (eval_stage.c). */
#include "eval/eval_int.h"

#include "task/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sampling parameter (top_k / top_p) per row: the workload's scalar value,
 * or the input made from seeds[0] (a scalar, or one value per row). */
static kh_status sampling_param(wctx *c, const char *name, int64_t rows, double *vals,
                                kh_err *err)
{
    const kh_task_tensor *t = NULL;
    for (size_t i = 0; i < c->d->ninputs && !t; i++)
        if (!strcmp(c->d->inputs[i].name, name))
            t = &c->d->inputs[i];
    if (!t)
        return kh_err_set(err, KH_EINVAL, "definition '%s' (sampling evaluator, %s): an input "
                          "'%s' is required", c->d->name,
                          kh_check_sampling_method_name(c->smethod), name);
    json_t *in = json_object_get(json_object_get(c->w->json, "inputs"), name);
    const char *type = json_string_value(json_object_get(in, "type"));
    if (type && !strcmp(type, "scalar")) {
        json_t *v = json_object_get(in, "value");
        if (!json_is_number(v))
            return kh_err_set(err, KH_EINVAL, "workload %s: input '%s': scalar without a "
                              "numeric value", c->w->uuid, name);
        for (int64_t b = 0; b < rows; b++)
            vals[b] = json_number_value(v);
        return KH_OK;
    }
    kh_status st = eval_host_inputs(c, eval_base_seed(c), err);
    if (st)
        return st;
    const kh_tensor *x = eval_input_named(c, name);
    if (!x || (x->numel != 1 && x->numel != (uint64_t)rows))
        return kh_err_set(err, KH_EINVAL, "workload %s: input '%s' must be a scalar or hold one "
                          "value per batch row (%lld)", c->w->uuid, name, (long long)rows);
    for (int64_t b = 0; b < rows; b++)
        vals[b] = kh_tensor_get(x, x->numel == 1 ? 0 : (uint64_t)b);
    return KH_OK;
}

/* FIB's valid mask for this workload's probs (see wctx). */
static kh_status sampling_mask(wctx *c, const kh_tensor **probs, const unsigned char **mask,
                               kh_err *err)
{
    kh_status st = eval_sampling_probs(c, probs, err);
    if (st)
        return st;
    if (c->smask) {
        *mask = c->smask;
        return KH_OK;
    }
    int64_t B = (*probs)->shape[0];
    double *kv = calloc((size_t)B + 1, sizeof *kv), *pv = calloc((size_t)B + 1, sizeof *pv);
    int64_t *ki = calloc((size_t)B + 1, sizeof *ki);
    unsigned char *m = malloc((*probs)->numel + 1);
    if (!kv || !pv || !ki || !m)
        st = kh_err_set(err, KH_ENOMEM, "out of memory for the sampling mask");
    int use_k = c->smethod == KH_SAMPLING_TOP_K || c->smethod == KH_SAMPLING_TOP_K_TOP_P;
    int use_p = c->smethod == KH_SAMPLING_TOP_P || c->smethod == KH_SAMPLING_TOP_K_TOP_P;
    if (!st && use_k)
        st = sampling_param(c, "top_k", B, kv, err);
    if (!st && use_p)
        st = sampling_param(c, "top_p", B, pv, err);
    for (int64_t b = 0; !st && b < B; b++)
        ki[b] = (int64_t)kv[b];
    if (!st)
        st = kh_check_sampling_mask(*probs, c->smethod, use_k ? ki : NULL, use_p ? pv : NULL, m,
                                    err);
    free(kv);
    free(pv);
    free(ki);
    if (st) {
        free(m);
        return st;
    }
    c->smask = m;
    *mask = m;
    return KH_OK;
}

/* What the sampling evaluator needs of a definition: FIB's
 * SamplingEvaluator calls the candidate on one probs with fresh seeds
 * (opts.trials does not apply), then runs the TVD test. */
const char *eval_sampling_unsupported(const kh_task_def *d, kh_sampling_method m)
{
    const kh_task_tensor *pin = eval_find_input(d, "probs", NULL);
    const char *why = NULL;
    int use_k = m == KH_SAMPLING_TOP_K || m == KH_SAMPLING_TOP_K_TOP_P;
    int use_p = m == KH_SAMPLING_TOP_P || m == KH_SAMPLING_TOP_K_TOP_P;
    if (!pin || pin->is_scalar || pin->rank != 2 || strcmp(pin->dtype, "float32"))
        why = "it needs an input 'probs', float32 [batch_size, vocab_size]";
    else if (d->noutputs < 1 || d->outputs[0].is_scalar || d->outputs[0].rank != 1 ||
             (strcmp(d->outputs[0].dtype, "int32") && strcmp(d->outputs[0].dtype, "int64")))
        why = "its first output must be the samples, int32 or int64 [batch_size]";
    else if (d->outputs[0].dims[0] != pin->dims[0])
        why = "the samples' axis must be the first axis of probs";
    else if (use_k && !eval_find_input(d, "top_k", NULL))
        why = "its name asks for top-k sampling (FIB's thresholding), but it has no input "
              "'top_k'";
    else if (use_p && !eval_find_input(d, "top_p", NULL))
        why = "its name asks for top-p sampling (FIB's thresholding), but it has no input "
              "'top_p'";
    for (size_t i = 0; !why && i < d->ninputs; i++)
        if (!d->inputs[i].is_scalar && d->inputs[i].dims[0] != pin->dims[0])
            why = "the TVD test repeats every tensor input along the batch axis (the first "
                  "of probs), and an input does not start with it";
    return why;
}

/* Sampling: one call's samples (the first output, at slice `outs` of the
 * reply; tile copies of the batch in the TVD phase) checked against [0,
 * vocab_size) and the valid mask and, when counts is not NULL, counted per
 * row.  *untouched_fail: the first bad id still holds the poison. */
kh_status eval_sampling_call(wctx *c, const kh_msg *m, const json_t *outs, uint64_t *counts,
                             unsigned poison, kh_check_result *r, int *untouched_fail,
                             kh_err *err)
{
    *untouched_fail = 0;
    const kh_task_tensor *ot = &c->d->outputs[0];
    kh_dtype dt;
    kh_status st = kh_dtype_parse(ot->dtype, &dt, err);
    if (st)
        return st;
    const kh_tensor *probs = NULL;
    const unsigned char *mask = NULL;
    if ((st = sampling_mask(c, &probs, &mask, err)))
        return st;
    int64_t shape[1] = {probs->shape[0] * (c->tile > 1 ? c->tile : 1)};
    size_t want = eval_out_bytes(c->d, ot, c->axes_over ? c->axes_over : c->w->axes);
    if (want != kh_dtype_nbytes(dt, (uint64_t)shape[0]))
        return kh_err_set(err, KH_EINVAL, "sampling: output '%s' holds %zu bytes, not one id per "
                          "batch row", ot->name, want);
    const unsigned char *b = eval_reply_bytes(m, json_object_get(outs, ot->name), want);
    if (!b)
        return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks output '%s'", ot->name);
    kh_tensor *tx = NULL;
    /* the zero-probability check is khlua's: off in parity runs */
    if ((st = kh_tensor_borrow(&tx, dt, 1, shape, (void *)b, want, err)) ||
        (st = kh_check_sampling_count(tx, probs->shape[0], probs->shape[1],
                                      c->smethod == KH_SAMPLING_NONE ? NULL : mask,
                                      kh_check_sampling_method_name(c->smethod),
                                      c->o->parity ? NULL : probs, counts, r, err))) {
        kh_tensor_free(tx);
        return st;
    }
    if (r->status != KH_CHECK_PASSED) {
        if (poison)
            *untouched_fail = eval_untouched(tx, r->first_fail, poison);
        size_t l = strlen(r->reason);
        snprintf(r->reason + l, sizeof r->reason - l, " (output '%s')", ot->name);
    }
    kh_tensor_free(tx);
    return KH_OK;
}

/* ---- the TVD phase ----------------------------------------------------------
 * FIB's TVD test (check.h): skipped when the nucleus is too large for
 * 500000 samples to tell; else the candidate is called on the batch
 * repeated `tile` times, in requests of at most SAMPLING_CHUNK calls filed
 * together (they run in parallel), and every call's samples are checked and
 * counted.  Fills s->samp_extra (FIB's Correctness.extra) and s->v. */

/* While the phase's requests are made or read, c holds a chunk's seeds, the
 * repeated batch and its axes; *saved keeps the workload's seeds. */
static kh_status tvd_enter(wctx *c, const wstate *s, uint64_t **saved, size_t *saved_n,
                           kh_err *err)
{
    if (!(*saved = malloc(sizeof c->seeds)))
        return kh_err_set(err, KH_ENOMEM, "out of memory for the TVD test");
    memcpy(*saved, c->seeds, sizeof c->seeds);
    *saved_n = c->ntrials;
    c->tile_seed = (*saved)[0];
    c->tile = s->tvd_tile;
    c->axes_over = s->tvd_axes;
    c->light = 1;
    return KH_OK;
}

static void tvd_leave(wctx *c, uint64_t *saved, size_t saved_n)
{
    memcpy(c->seeds, saved, sizeof c->seeds);
    c->ntrials = saved_n;
    c->tile = 0;
    c->axes_over = NULL;
    c->light = 0;
    free(saved);
}

/* Chunk k's calls into c (their seeds derive from the workload's first);
 * returns how many. */
static size_t tvd_chunk(wctx *c, const wstate *s, const uint64_t *saved, size_t k)
{
    uint64_t calls = s->tvd_calls;
    size_t n = (size_t)(calls - k * SAMPLING_CHUNK < SAMPLING_CHUNK ? calls - k * SAMPLING_CHUNK
                                                                   : SAMPLING_CHUNK);
    for (size_t i = 0; i < n; i++)
        c->seeds[i] = kh_rng_derive_seed(saved[0], 0x7D, k * SAMPLING_CHUNK + i) & INT64_MAX;
    c->ntrials = n;
    return n;
}

/* The plan (FIB's calls, capped for batches so large that a call holds few
 * copies of the batch: FIB divides by zero past 10000 rows; the skip rule
 * then uses the samples actually drawn), and the skip: the noise of 500000
 * samples alone would exceed the bound, so the mask check is the test
 * (FIB's tvd_skipped).  *skip: nothing to request. */
static kh_status tvd_plan(wctx *c, wstate *s, const kh_tensor *probs, const unsigned char *mask,
                          int *skip, kh_err *err)
{
    int64_t B = probs->shape[0], V = probs->shape[1];
    *skip = 0;
    if (B < 1 || V < 1)
        return kh_err_set(err, KH_EINVAL, "workload %s: probs is [%lld, %lld]: nothing to sample",
                          c->w->uuid, (long long)B, (long long)V);
    int64_t nucleus = kh_check_sampling_nucleus(probs, mask);
    int64_t tile = KH_SAMPLING_TVD_ROWS / B;
    if (tile < 1)
        tile = 1;
    uint64_t calls = (KH_SAMPLING_TVD_SAMPLES + (uint64_t)tile - 1) / (uint64_t)tile;
    if (calls > KH_SAMPLING_MAX_CALLS)
        calls = KH_SAMPLING_MAX_CALLS;
    s->tvd_nucleus = nucleus;
    s->tvd_tile = tile;
    s->tvd_calls = calls;
    s->tvd_nchunks = (size_t)((calls + SAMPLING_CHUNK - 1) / SAMPLING_CHUNK);
    if (sqrt((double)nucleus / (double)(calls * (uint64_t)tile)) > c->tvd_threshold) {
        json_decref(s->samp_extra);
        s->samp_extra = json_pack("{s:b, s:I, s:f, s:I, s:s}", "tvd_skipped", 1,
                                  "max_nucleus_size", (json_int_t)nucleus, "tvd_threshold",
                                  c->tvd_threshold, "validation_trials", (json_int_t)c->ntrials,
                                  "thresholding", kh_check_sampling_method_name(c->smethod));
        kh_check_result_init(&s->v.acc);
        s->v.acc.max_abs_error = s->v.acc.max_rel_error = 0;
        s->v.has_correctness = 1;
        *skip = 1;
        return KH_OK;
    }
    /* every tensor input is repeated along its first axis, that of probs */
    size_t bax = 0;
    for (size_t i = 0; i < c->d->ninputs; i++) {
        const kh_task_tensor *t = &c->d->inputs[i];
        if (!strcmp(t->name, "probs"))
            bax = t->dims[0];
    }
    for (size_t i = 0; i < c->d->ninputs; i++) {
        const kh_task_tensor *t = &c->d->inputs[i];
        if (!t->is_scalar && t->dims[0] != bax)
            return kh_err_set(err, KH_EUNSUPPORTED, "definition '%s' (sampling evaluator): the "
                              "TVD test repeats every tensor input along the batch axis, but "
                              "input '%s' does not start with it", c->d->name, t->name);
    }
    s->tvd_axes = malloc((c->d->naxes + 1) * sizeof *s->tvd_axes);
    s->tvd_counts = calloc((size_t)(B * V), sizeof *s->tvd_counts);
    if (!s->tvd_axes || !s->tvd_counts)
        return kh_err_set(err, KH_ENOMEM, "out of memory for the TVD test");
    memcpy(s->tvd_axes, c->w->axes, c->d->naxes * sizeof *s->tvd_axes);
    s->tvd_axes[bax] *= tile;
    return KH_OK;
}

kh_status eval_tvd_post(wctx *c, wstate *s, kh_err *err)
{
    const kh_tensor *probs = NULL;
    const unsigned char *mask = NULL;
    int skip = 0;
    kh_status st = sampling_mask(c, &probs, &mask, err);
    if (st || (st = tvd_plan(c, s, probs, mask, &skip, err)) || skip)
        return st;
    uint64_t *saved = NULL;
    size_t saved_n = 0;
    if ((st = tvd_enter(c, s, &saved, &saved_n, err)))
        return st;
    const kh_task_tensor *ot = &c->d->outputs[0];
    kh_dtype odt;
    st = kh_dtype_parse(ot->dtype, &odt, err);
    for (size_t k = 0; k < s->tvd_nchunks && !st; k++) {
        tvd_chunk(c, s, saved, k);
        json_t *p = NULL;
        if ((st = eval_request(c, c->sol, s->a, 0, &p, err)))
            break;
        st = eval_post(c, s, eval_is_host(c->sol), p, s->a, err);
        json_decref(p);
    }
    tvd_leave(c, saved, saved_n);
    return st;
}

/* Chunk k's reply (n calls; c holds its seeds): a failed request, a
 * worker's check, or a call's samples out of range or mask fail it
 * (*bad); else every call's samples are counted, and consecutive calls'
 * ids compared position by position (same of pairs). */
static kh_status tvd_chunk_take(wctx *c, wstate *s, size_t k, size_t n, const wres *r, size_t esz,
                                uint64_t *same, uint64_t *pairs, const char **bad, kh_err *err)
{
    verdict *v = &s->v;
    const kh_task_tensor *ot = &c->d->outputs[0];
    kh_status st = KH_OK;
    if (r->st && (r->not_run || r->st == KH_ESTATE || r->st == KH_EIO || r->st == KH_ENODEV))
        return kh_err_set(err, r->st == KH_ECHILD ? KH_ENODEV : r->st, "TVD test: %s",
                          r->err.msg);
    if (r->st) {
        *bad = r->st == KH_ETIMEOUT ? "deadline" : "tvd_calls";
        eval_fail(v, r->st == KH_ETIMEOUT ? "TIMEOUT" : "RUNTIME_ERROR", *bad,
                  "TVD test, calls %zu to %zu: %s", k * SAMPLING_CHUNK,
                  k * SAMPLING_CHUNK + n - 1, r->err.msg);
        return KH_OK;
    }
    json_t *res = json_object_get(r->reply.head, "result"), *f;
    size_t fi;
    json_array_foreach(json_object_get(res, "failures"), fi, f) {
        const char *ck = json_string_value(json_object_get(f, "check"));
        const char *d = json_string_value(json_object_get(f, "detail"));
        if (ck && (!strcmp(ck, "inputs_unchanged") || !strcmp(ck, "guards") ||
                   !strcmp(ck, "late_write"))) {
            *bad = ck;
            json_object_set_new(v->checks, ck, json_string("failed"));
            eval_fail(v, "RUNTIME_ERROR", ck, "TVD test: %s", d ? d : "");
            break;
        }
    }
    json_t *trials = json_object_get(res, "trials");
    for (size_t t = 0; t < n && !*bad && !st; t++) {
        kh_check_result rc;
        int u = 0;
        json_t *tr = json_array_get(trials, t);
        if (!tr) {
            st = kh_err_set(err, KH_ECORRUPT, "TVD test: the worker answered %zu of %zu "
                            "calls", json_array_size(trials), n);
            break;
        }
        if ((st = eval_sampling_call(c, &r->reply, json_object_get(tr, "outputs"), s->tvd_counts,
                                     0, &rc, &u, err)))
            break;
        if (t > 0 && rc.status == KH_CHECK_PASSED) {
            size_t obytes = eval_out_bytes(c->d, ot, s->tvd_axes);
            const unsigned char *x = eval_reply_bytes(&r->reply, json_object_get(json_object_get(
                                                          json_array_get(trials, t - 1),
                                                          "outputs"), ot->name), obytes),
                                *y = eval_reply_bytes(&r->reply, json_object_get(
                                                          json_object_get(tr, "outputs"),
                                                          ot->name), obytes);
            for (size_t q = 0; x && y && q + esz <= obytes; q += esz) {
                *same += !memcmp(x + q, y + q, esz);
                (*pairs)++;
            }
        }
        if (rc.status != KH_CHECK_PASSED) {
            *bad = "correctness";
            kh_check_merge(&v->acc, &rc);
            v->has_correctness = 1;
            eval_fail(v, kh_check_status_name(rc.status), "correctness",
                      "TVD test, call %zu (seed %llu): %s", k * SAMPLING_CHUNK + t,
                      (unsigned long long)c->seeds[t], rc.reason);
        }
    }
    return st;
}

/* The TVD over the counted samples, FIB's extra fields, and khlua's check
 * (not in parity runs): ids of consecutive calls at the same position
 * repeat about as often as independent draws do, so a sampler that
 * ignores its seed (one fixed draw per position: FIB's repeated batch alone
 * would pass it) fails. */
static kh_status tvd_judge(wctx *c, wstate *s, const kh_tensor *probs, const unsigned char *mask,
                           uint64_t same, uint64_t pairs, kh_err *err)
{
    verdict *v = &s->v;
    int64_t B = probs->shape[0], V = probs->shape[1];
    double *tvds = calloc((size_t)B + 1, sizeof *tvds);
    kh_check_result rt;
    uint64_t per_row = s->tvd_calls * (uint64_t)s->tvd_tile;
    kh_status st;
    if (!tvds)
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
    else
        st = kh_check_sampling_tvd(probs, c->smethod == KH_SAMPLING_NONE ? NULL : mask,
                                   s->tvd_counts, per_row, c->tvd_threshold, tvds, &rt, err);
    if (!st) {
        json_t *per = json_array();
        double worst = 0;
        for (int64_t b = 0; b < B; b++) {
            json_array_append_new(per, json_real(tvds[b]));
            worst = tvds[b] > worst ? tvds[b] : worst;
        }
        json_decref(s->samp_extra);
        s->samp_extra = json_pack(
            "{s:f, s:o, s:f, s:I, s:s, s:I, s:I, s:I, s:I}", "tvd", worst, "tvds_per_batch", per,
            "tvd_threshold", c->tvd_threshold, "validation_trials", (json_int_t)c->ntrials,
            "thresholding", kh_check_sampling_method_name(c->smethod), "max_nucleus_size",
            (json_int_t)s->tvd_nucleus, "tvd_samples_per_row", (json_int_t)per_row, "tvd_calls",
            (json_int_t)s->tvd_calls, "tvd_repeat", (json_int_t)s->tvd_tile);
        kh_check_result_init(&v->acc);
        kh_check_merge(&v->acc, &rt);
        v->has_correctness = 1;
        /* independent draws from q repeat with probability sum_v q_v^2
         * per row; the rows weigh equally in the repeated batch */
        double coll = 0;
        const float *pf = probs->data;
        for (int64_t b = 0; b < B; b++) {
            double sum = 0, sq = 0;
            for (int64_t x = 0; x < V; x++)
                sum += mask[b * V + x] ? pf[b * V + x] : 0.0f;
            for (int64_t x = 0; x < V; x++) {
                double q = mask[b * V + x] ? pf[b * V + x] / sum : 0;
                sq += q * q;
            }
            coll += sq / (double)B;
        }
        double seen = pairs ? (double)same / (double)pairs : 0;
        json_object_set_new(s->samp_extra, "repeat_rate", json_real(seen));
        json_object_set_new(s->samp_extra, "repeat_rate_expected", json_real(coll));
        if (rt.status != KH_CHECK_PASSED) {
            eval_fail(v, kh_check_status_name(rt.status), "correctness", "%s", rt.reason);
        } else if (!c->o->parity && pairs && seen > coll + 0.05) {
            /* 0.05 is hundreds of standard errors of the rate over
             * 500000 draws per row: only a sampler that repeats fails */
            json_object_set_new(v->checks, "fresh_samples", json_string("failed"));
            v->acc.max_abs_error = v->acc.max_rel_error = INFINITY;
            eval_fail(v, "INCORRECT_NUMERICAL", "fresh_samples",
                      "consecutive calls gave the same id at %.1f%% of positions, where "
                      "independent draws from probs repeat at %.1f%%: the sampler does not draw "
                      "afresh on each call (does it ignore its seed?)", 100 * seen, 100 * coll);
        } else if (!c->o->parity) {
            json_object_set_new(v->checks, "fresh_samples", json_string("ok"));
        }
    }
    free(tvds);
    return st;
}

kh_status eval_tvd_take(wctx *c, wstate *s, kh_err *err)
{
    const kh_tensor *probs = NULL;
    const unsigned char *mask = NULL;
    kh_status st = sampling_mask(c, &probs, &mask, err);
    if (st)
        return st;
    uint64_t *saved = NULL;
    size_t saved_n = 0;
    if ((st = tvd_enter(c, s, &saved, &saved_n, err)))
        return st;
    const char *bad = NULL; /* a failed call's check, once s->v holds it */
    uint64_t same = 0, pairs = 0;
    const kh_task_tensor *ot = &c->d->outputs[0];
    kh_dtype odt;
    size_t esz = 0;
    if (!(st = kh_dtype_parse(ot->dtype, &odt, err)))
        esz = kh_dtype_nbytes(odt, 1);
    for (size_t k = 0; k < s->tvd_nchunks && !st && !bad; k++) {
        size_t n = tvd_chunk(c, s, saved, k);
        st = tvd_chunk_take(c, s, k, n, &s->posted[k]->res, esz, &same, &pairs, &bad, err);
    }
    tvd_leave(c, saved, saved_n);
    if (!st && !bad)
        st = tvd_judge(c, s, probs, mask, same, pairs, err);
    free(s->tvd_axes);
    free(s->tvd_counts);
    s->tvd_axes = NULL;
    s->tvd_counts = NULL;
    return st;
}
