/* best.c: a stored candidate, or a run's incumbent, as a Solution JSON with
 * its figures (best.h).  The store is read, never written; how the result
 * is printed or written to disk is left to the commands (cmd_best.c,
 * cmd_export.c). */
#include "best.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *str(const json_t *o, const char *k, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : dflt;
}

/* The newest promotion record of run for cand, or NULL (new reference). */
static json_t *promotion_of(kh_store *s, const char *run, const char *cand)
{
    kh_store_filter q = {.type = "promotion", .run = run, .limit = 1000};
    json_t *arr = NULL, *best = NULL;
    kh_err err;
    if (kh_store_query(s, &q, 0, &arr, &err))
        return NULL;
    size_t i;
    json_t *r;
    json_array_foreach(arr, i, r) {
        if (!strcmp(str(r, "candidate", ""), cand) &&
            (!best || json_integer_value(json_object_get(r, "round_index")) >
                          json_integer_value(json_object_get(best, "round_index"))))
            best = r;
    }
    json_incref(best);
    json_decref(arr);
    return best;
}

/* The Solution of candidate record cand (id cid); desc describes where it
 * comes from. */
static kh_status solution_of(kh_store *s, const char *cid, const json_t *cand, const char *desc,
                             json_t **out, kh_err *err)
{
    *out = NULL;
    kh_hash h;
    void *src = NULL;
    size_t src_len = 0;
    kh_status st = kh_hash_parse(str(cand, "source_blob", ""), &h, err);
    if (!st)
        st = kh_store_get_blob(s, &h, &src, &src_len, err);
    if (st)
        return kh_err_prefix(err, "%s: its source", cid);
    json_t *task = NULL;
    kh_err terr;
    kh_store_get(s, str(cand, "task", ""), &task, &terr); /* optional: the definition's name */
    const json_t *man = json_object_get(cand, "manifest");
    int host = !strcmp(str(man, "backend", "cuda"), "host");
    const char *file = host ? "kernel.c" : "kernel.cu";
    const char *fn = host ? str(man, "function", "run")
                          : str(json_array_get(json_object_get(man, "launches"), 0), "kernel",
                                "kernel");
    char entry[300];
    snprintf(entry, sizeof entry, "%s::%s", file, fn);
    *out = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:[s], s:s, s:b, s:O}, s:[{s:s, s:s%}]}",
                     "name", str(cand, "solution_name", cid), "definition",
                     str(task, "name", str(cand, "task", "")), "author",
                     str(cand, "model", str(cand, "origin", "model")), "description", desc,
                     "spec", "language", host ? "cpp" : "cuda", "target_hardware",
                     host ? "cpu" : "cuda", "entry_point", entry, "destination_passing_style", 1,
                     "khlua", man ? man : json_null(), "sources", "path", file, "content",
                     (const char *)src, src_len);
    json_decref(task);
    free(src);
    if (!*out)
        return kh_err_set(err, KH_EINVAL, "%s: its source is not UTF-8 text (or out of memory)",
                          cid);
    return KH_OK;
}

/* The candidate record cid, checked to be one. */
static kh_status get_candidate(kh_store *s, const char *cid, json_t **cand, kh_err *err)
{
    kh_status st = kh_store_get(s, cid, cand, err);
    if (st == KH_ENOTFOUND)
        return kh_err_set(err, KH_ENOTFOUND, "%s: no such candidate in the store (khlua store ls "
                          "--type candidate lists them)", cid);
    if (st)
        return kh_err_prefix(err, "%s", cid);
    if (strcmp(str(*cand, "type", ""), "candidate")) {
        st = kh_err_set(err, KH_EINVAL, "%s: expected a candidate record, got a %s record", cid,
                        str(*cand, "type", "typeless"));
        json_decref(*cand);
        *cand = NULL;
    }
    return st;
}

kh_status kh_best_of_candidate(kh_store *s, const char *cid, kh_best *out, kh_err *err)
{
    memset(out, 0, sizeof *out);
    json_t *cand = NULL;
    kh_status st = get_candidate(s, cid, &cand, err);
    if (st)
        return st;
    char desc[600];
    const char *run = str(cand, "run", NULL);
    if (run)
        snprintf(desc, sizeof desc, "candidate %s of khlua run %s", cid, run);
    else
        snprintf(desc, sizeof desc, "khlua candidate %s", cid);
    snprintf(out->candidate, sizeof out->candidate, "%s", cid);
    st = solution_of(s, cid, cand, desc, &out->solution, err);
    json_decref(cand);
    return st;
}

kh_status kh_best_of_run(kh_store *s, const char *run_id, kh_best *out, kh_err *err)
{
    memset(out, 0, sizeof *out);
    char rid[KH_STORE_ID_MAX];
    snprintf(rid, sizeof rid, "%s", run_id);
    if (!strcmp(run_id, "last")) {
        kh_store_filter q = {.type = "run", .limit = 1};
        json_t *arr = NULL;
        kh_status st = kh_store_query(s, &q, 1, &arr, err);
        if (st || json_array_size(arr) == 0) {
            json_decref(arr);
            return st ? kh_err_prefix(err, "last") : kh_err_set(err, KH_ENOTFOUND,
                                                                 "last: the store holds no run");
        }
        snprintf(rid, sizeof rid, "%s", json_string_value(json_array_get(arr, 0)));
        json_decref(arr);
    }
    json_t *run = NULL, *cand = NULL;
    kh_status st = kh_store_get(s, rid, &run, err);
    if (st == KH_ENOTFOUND)
        return kh_err_set(err, KH_ENOTFOUND, "%s: no such run in the store (khlua store ls "
                          "--type run lists them)", rid);
    if (st)
        return kh_err_prefix(err, "%s", rid);
    const char *cid = str(run, "incumbent_candidate", NULL);
    if (strcmp(str(run, "type", ""), "run"))
        st = kh_err_set(err, KH_EINVAL, "%s: expected a run record, got a %s record", rid,
                        str(run, "type", "typeless"));
    else if (!cid)
        st = kh_err_set(err, KH_ENOTFOUND, "%s: the run has no incumbent yet (it stopped before "
                        "its seed was measured)", rid);
    else
        st = get_candidate(s, cid, &cand, err);
    if (st) {
        json_decref(run);
        return st;
    }
    const char *origin = str(cand, "origin", "model");
    char desc[600];
    snprintf(desc, sizeof desc, "%s of khlua run %s (candidate %s)",
             !strcmp(origin, "seed") ? "the seed (nothing was promoted)" : "the best kernel", rid,
             cid);
    snprintf(out->run, sizeof out->run, "%s", rid);
    snprintf(out->candidate, sizeof out->candidate, "%s", cid);
    st = solution_of(s, cid, cand, desc, &out->solution, err);
    if (!st) {
        json_t *metrics = json_object_get(run, "metrics");
        json_t *score = json_object_get(metrics, "incumbent_score");
        json_t *promo = promotion_of(s, rid, cid);
        out->figures = json_pack("{s:s, s:s, s:s, s:O, s:O, s:O}", "run", rid, "candidate", cid,
                                 "origin", origin, "score", score ? score : json_null(),
                                 "metrics", metrics ? metrics : json_null(), "promotion",
                                 promo ? promo : json_null());
        json_decref(promo);
        if (!out->figures)
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    json_decref(cand);
    json_decref(run);
    if (st)
        kh_best_free(out);
    return st;
}

void kh_best_free(kh_best *b)
{
    if (!b)
        return;
    json_decref(b->solution);
    json_decref(b->figures);
    b->solution = b->figures = NULL;
}
