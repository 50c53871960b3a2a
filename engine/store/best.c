/* best.c: a stored candidate, or a run's incumbent, as a Solution JSON with
 * its figures (best.h).  The store is read, never written; how the result
 * is printed or written to disk is left to the commands (cmd_best.c,
 * cmd_export.c). */
#include "store/best.h"

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

/* A stored blob as a NUL-terminated string (new, caller frees). */
static kh_status blob_text(kh_store *s, const char *hex, char **out, size_t *len, kh_err *err)
{
    kh_hash h;
    void *d = NULL;
    kh_status st = kh_hash_parse(hex, &h, err);
    if (!st)
        st = kh_store_get_blob(s, &h, &d, len, err);
    if (st)
        return st;
    char *t = realloc(d, *len + 1);
    if (!t) {
        free(d);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    t[*len] = 0;
    *out = t;
    return KH_OK;
}

/* The Solution of candidate record cand (id cid), named name, by author;
 * desc describes where it comes from.  A record with its canonical form
 * (solution_blob, candidate.h) gives every source under its own path; an
 * older one its entry source as kernel.cu / kernel.c. */
static kh_status solution_of(kh_store *s, const char *cid, const json_t *cand, const char *name,
                             const char *author, const char *desc, json_t **out, kh_err *err)
{
    *out = NULL;
    const json_t *man = json_object_get(cand, "manifest");
    int host = !strcmp(str(man, "backend", "cuda"), "host");
    const char *fn = host ? str(man, "function", "run")
                          : str(json_array_get(json_object_get(man, "launches"), 0), "kernel",
                                "kernel");
    json_t *task = NULL;
    kh_err terr;
    kh_store_get(s, str(cand, "task", ""), &task, &terr); /* optional: the definition's name */
    const char *def = str(cand, "definition", str(task, "name", str(cand, "task", "")));
    json_t *sources = NULL;
    char entry[300];
    char *text = NULL;
    size_t len = 0;
    kh_status st;
    if (json_object_get(cand, "solution_blob")) {
        st = blob_text(s, str(cand, "solution_blob", ""), &text, &len, err);
        json_t *canon = st ? NULL : json_loadb(text, len, 0, NULL);
        if (!st && !json_is_array(json_object_get(canon, "sources")))
            st = kh_err_set(err, KH_ECORRUPT, "its canonical form is not JSON with sources");
        if (!st) {
            sources = json_incref(json_object_get(canon, "sources"));
            snprintf(entry, sizeof entry, "%s::%s", str(canon, "entry_file", "kernel.cu"), fn);
        }
        json_decref(canon);
    } else {
        const char *file = host ? "kernel.c" : "kernel.cu";
        st = blob_text(s, str(cand, "source_blob", ""), &text, &len, err);
        if (!st && !(sources = json_pack("[{s:s, s:s%}]", "path", file, "content", text, len)))
            st = kh_err_set(err, KH_EINVAL, "its source is not UTF-8 text (or out of memory)");
        snprintf(entry, sizeof entry, "%s::%s", file, fn);
    }
    free(text);
    if (st) {
        json_decref(task);
        return kh_err_prefix(err, "%s: its source", cid);
    }
    *out = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:[s], s:s, s:b, s:O}, s:o}", "name", name,
                     "definition", def, "author", author, "description", desc, "spec",
                     "language", host ? "cpp" : "cuda", "target_hardware", host ? "cpu" : "cuda",
                     "entry_point", entry, "destination_passing_style", 1, "khlua",
                     man ? man : json_null(), "sources", sources);
    json_decref(task);
    if (!*out)
        return kh_err_set(err, KH_ENOMEM, "%s: out of memory", cid);
    return KH_OK;
}

/* Who proposed cid in run's round round_index, and as which of the round's
 * candidates (1-based: the controller names it RUN_rR_K): the round record
 * keeps both; the candidate record does not, since one candidate may come
 * from several runs.  *who NULL and *k 0 when not found. */
static void proposer(kh_store *s, const char *run, json_int_t round_index, const char *cid,
                     char **who, size_t *k)
{
    kh_store_filter q = {.type = "round", .run = run, .limit = 100000};
    json_t *arr = NULL;
    kh_err err;
    *who = NULL;
    *k = 0;
    if (kh_store_query(s, &q, 0, &arr, &err))
        return;
    size_t i, j;
    json_t *r, *v;
    json_array_foreach(arr, i, r) {
        if (json_integer_value(json_object_get(r, "index")) != round_index)
            continue;
        json_array_foreach(json_object_get(r, "verdicts"), j, v) {
            if (!*k && !strcmp(str(v, "candidate", ""), cid)) {
                *k = j + 1;
                *who = str(v, "model", NULL) ? kh_strdup(str(v, "model", NULL)) : NULL;
            }
        }
    }
    json_decref(arr);
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
    snprintf(desc, sizeof desc, "khlua candidate %s", cid);
    snprintf(out->candidate, sizeof out->candidate, "%s", cid);
    /* a record from before candidates had one identity may carry a name */
    st = solution_of(s, cid, cand, str(cand, "solution_name", cid), str(cand, "model", "khlua"),
                     desc, &out->solution, err);
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
    /* the run's facts from the run's records: promoted in a round of this
     * run (its promotion record), else the seed it started from */
    json_t *promo = promotion_of(s, rid, cid);
    json_int_t round = promo ? json_integer_value(json_object_get(promo, "round_index")) : 0;
    char *who = NULL;
    size_t k = 0;
    if (promo)
        proposer(s, rid, round, cid, &who, &k);
    /* a candidate record from before candidate.h carries its first run's
     * name, model and origin: used only when this run's records say nothing */
    const char *origin = promo ? "model" : str(cand, "origin", "seed");
    char desc[600], name[KH_STORE_ID_MAX + 48];
    snprintf(desc, sizeof desc, "%s of khlua run %s (candidate %s)",
             !strcmp(origin, "seed") ? "the seed (nothing was promoted)" : "the best kernel", rid,
             cid);
    if (promo && k)
        snprintf(name, sizeof name, "%s_r%lld_%zu", rid, (long long)round, k);
    else if (promo)
        snprintf(name, sizeof name, "%s_r%lld", rid, (long long)round);
    else
        snprintf(name, sizeof name, "%s", str(cand, "solution_name", ""));
    if (!name[0])
        snprintf(name, sizeof name, "%s_seed", rid);
    snprintf(out->run, sizeof out->run, "%s", rid);
    snprintf(out->candidate, sizeof out->candidate, "%s", cid);
    st = solution_of(s, cid, cand, name, who ? who : str(cand, "model", "khlua"), desc,
                     &out->solution, err);
    free(who);
    if (!st) {
        json_t *metrics = json_object_get(run, "metrics");
        json_t *score = json_object_get(metrics, "incumbent_score");
        out->figures = json_pack("{s:s, s:s, s:s, s:O, s:O, s:O}", "run", rid, "candidate", cid,
                                 "origin", origin, "score", score ? score : json_null(),
                                 "metrics", metrics ? metrics : json_null(), "promotion",
                                 promo ? promo : json_null());
        if (!out->figures)
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    json_decref(promo);
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
