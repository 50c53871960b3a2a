/* llm_store.c: the model client's transcripts into the artifact store: one
 * llm_call record per finished call plus its request and raw-stream blobs,
 * written by the one writer of llm_call records (kh_llm_call_put), from the
 * client's sink or from a policy (tx:put_llm_call).  Reading them back for
 * replay is the replay provider's business (llm_offline.c); redaction is the
 * client's (llm_job.c), done before anything reaches this file. */
#include "llm/llm_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model name a record is filed under (llm_call requires one). */
static json_t *model_of(const json_t *r)
{
    const char *m = json_string_value(json_object_get(r, "model"));
    if (m && *m)
        return json_string(m);
    const char *argv0 = json_string_value(
        json_array_get(json_object_get(json_object_get(r, "command"), "argv"), 0));
    if (argv0) {
        char b[300];
        snprintf(b, sizeof b, "command:%.250s", argv0);
        return json_string(b);
    }
    const char *p = json_string_value(json_object_get(r, "provider"));
    return json_string(p ? p : "unknown");
}

/* Store bytes as a blob (a copy: see kh_llm_call_put) under rec[field]. */
static kh_status blob_field(kh_store_txn *tx, json_t *rec, const char *field, const char *data,
                            size_t len, kh_err *err)
{
    kh_hash h;
    char hx[33];
    kh_status st = kh_store_txn_put_blob_copy(tx, data, len, &h, err);
    if (st)
        return st;
    kh_hash_hex(&h, hx);
    if (json_object_set_new(rec, field, json_string(hx)))
        return kh_store_txn_fail(tx, kh_err_set(err, KH_ENOMEM, "out of memory"), err);
    return KH_OK;
}

/* rec (the copy being written) as a record: the client's id becomes the
 * ticket, type, status and model are set, the caller's links added. */
static kh_status shape(json_t *rec, const kh_llm_call_links *l, kh_err *err)
{
    json_t *ticket = json_object_get(rec, "id");
    if (json_is_integer(ticket))
        json_object_set(rec, "ticket", ticket);
    static const char *const drop[] = {"id", "store_id", "store_error", "raw"};
    for (size_t i = 0; i < KH_ARRAY_LEN(drop); i++)
        json_object_del(rec, drop[i]);
    const char *status = "ok";
    if (!json_is_true(json_object_get(rec, "ok"))) {
        status = json_string_value(json_object_get(json_object_get(rec, "error"), "kind"));
        if (!status)
            status = "failed";
    }
    int bad = json_object_set_new(rec, "type", json_string("llm_call")) ||
              json_object_set_new(rec, "status", json_string(status)) ||
              json_object_set_new(rec, "model", model_of(rec));
    if (!json_is_string(json_object_get(rec, "run")) && l->run && *l->run)
        bad = bad || json_object_set_new(rec, "run", json_string(l->run));
    if (!json_is_string(json_object_get(rec, "round")) && l->round && *l->round)
        bad = bad || json_object_set_new(rec, "round", json_string(l->round));
    if (l->round_index >= 0 && !json_is_string(json_object_get(rec, "run")))
        return kh_err_set(err, KH_EINVAL, "a model call's round_index needs its run");
    if (l->round_index >= 0)
        bad = bad || json_object_set_new(rec, "round_index", json_integer(l->round_index));
    if (l->family)
        bad = bad || json_object_set_new(rec, "family", json_string(l->family));
    if (l->cost_usd >= 0)
        bad = bad || json_object_set_new(rec, "cost_usd", json_real(l->cost_usd));
    return bad ? kh_err_set(err, KH_ENOMEM, "out of memory") : KH_OK;
}

/* Not a client's record: the reason, or NULL. */
static const char *not_a_call(const json_t *r)
{
    if (!json_is_object(r))
        return "it is not an object";
    if (!json_is_string(json_object_get(r, "provider")))
        return "it has no provider";
    if (!json_is_string(json_object_get(r, "fingerprint")))
        return "it has no prompt fingerprint";
    if (!json_is_boolean(json_object_get(r, "ok")))
        return "it does not say whether the call succeeded (ok)";
    return NULL;
}

kh_status kh_llm_call_put(kh_store_txn *tx, const json_t *record, const char *raw,
                          size_t raw_len, const kh_llm_call_links *links,
                          char id[KH_STORE_ID_MAX], kh_err *err)
{
    static const kh_llm_call_links none = {NULL, NULL, -1, NULL, -1};
    const kh_llm_call_links *l = links ? links : &none;
    const char *why = not_a_call(record);
    if (why) {
        kh_err_set(err, KH_EINVAL, "an llm_call record is a model call's result as the client "
                   "gives it (kh.llm.chat, kh.llm.poll): %s", why);
        return kh_store_txn_fail(tx, KH_EINVAL, err);
    }
    json_t *rec = json_deep_copy(record);
    kh_status st = rec ? shape(rec, l, err) : kh_err_set(err, KH_ENOMEM, "out of memory");
    if (st) {
        json_decref(rec);
        return kh_store_txn_fail(tx, st, err);
    }
    /* The wire body goes to a blob: prompts repeat across calls (the same
     * spec, n samples), and a blob is stored once and compressed. */
    json_t *body = json_object_get(rec, "request");
    if (body) {
        char *req = json_dumps(body, JSON_COMPACT);
        st = req ? blob_field(tx, rec, "request_blob", req, strlen(req), err)
                 : kh_store_txn_fail(tx, kh_err_set(err, KH_ENOMEM, "out of memory"), err);
        free(req);
        json_object_del(rec, "request");
    }
    if (!st && raw && raw_len)
        st = blob_field(tx, rec, "response_blob", raw, raw_len, err);
    /* An agent's files (up to 1 MiB each) go to blobs too: the record stays
     * small, and a file the next call leaves unchanged is stored once. */
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(rec, "files"), i, f) {
        json_t *c = json_object_get(f, "content");
        if (st || !json_is_string(c))
            continue;
        st = blob_field(tx, f, "content_blob", json_string_value(c), json_string_length(c), err);
        json_object_del(f, "content");
    }
    if (!st)
        st = kh_store_txn_put(tx, rec, 0, id, err);
    json_decref(rec);
    return st;
}

struct put_arg {
    const json_t *record;
    const char *raw;
    size_t raw_len;
    const kh_llm_call_links *links;
    char *id;
};

static kh_status put_cb(kh_store_txn *tx, void *p, kh_err *err)
{
    struct put_arg *a = p;
    return kh_llm_call_put(tx, a->record, a->raw, a->raw_len, a->links, a->id, err);
}

kh_status kh_llm_store_put(kh_store *s, const json_t *record, const char *raw, size_t raw_len,
                           const char *run, const char *round, char id[KH_STORE_ID_MAX],
                           kh_err *err)
{
    if (!s)
        return kh_err_set(err, KH_ESTATE, "no store to record the model call in");
    kh_llm_call_links l = {run, round, -1, NULL, -1};
    struct put_arg a = {record, raw, raw_len, &l, id};
    return kh_store_update(s, put_cb, &a, err);
}

void kh_llm_store_sink(void *ud, json_t *record, const char *raw, size_t raw_len)
{
    kh_llm_recorder *r = ud;
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st;
    if (!r->store)
        st = kh_err_set(&err, KH_ESTATE, "the store to record model calls in is closed");
    else
        st = kh_llm_store_put(r->store, record, raw, raw_len, r->run, r->round, id, &err);
    if (st == KH_OK) {
        r->written++;
        json_object_set_new(record, "store_id", json_string(id));
    } else {
        r->failed++;
        json_object_set_new(record, "store_error", json_string(err.msg));
    }
}
