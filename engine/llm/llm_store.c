/* llm_store.c: the model client's transcripts into the artifact store: one
 * llm_call record per finished call plus its request and raw-stream blobs,
 * written in one transaction by the client's sink.  Reading them back for
 * replay is the replay provider's business (llm_offline.c); redaction is the
 * client's (llm_job.c), done before anything reaches this file. */
#include "llm/llm_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct put_arg {
    json_t *rec; /* the record to write; blob hashes are added in the txn */
    const char *req;
    size_t req_len;
    const char *raw;
    size_t raw_len;
    char *id;
    json_t *keep; /* the files' contents, moved out of rec, alive until update returns */
};

static kh_status put_cb(kh_store_txn *tx, void *p, kh_err *err)
{
    struct put_arg *a = p;
    kh_hash h;
    char hx[33];
    if (a->req) {
        if (kh_store_txn_put_blob(tx, a->req, a->req_len, &h, err))
            return err->code;
        kh_hash_hex(&h, hx);
        json_object_set_new(a->rec, "request_blob", json_string(hx));
    }
    if (a->raw_len) {
        if (kh_store_txn_put_blob(tx, a->raw, a->raw_len, &h, err))
            return err->code;
        kh_hash_hex(&h, hx);
        json_object_set_new(a->rec, "response_blob", json_string(hx));
    }
    /* An agent's files (up to 1 MiB each) go to blobs too: the record stays
     * small, and a file the next call leaves unchanged is stored once.  The
     * strings are the record's own, alive until update returns. */
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(a->rec, "files"), i, f) {
        json_t *c = json_object_get(f, "content");
        if (!json_is_string(c))
            continue;
        if (kh_store_txn_put_blob(tx, json_string_value(c), json_string_length(c), &h, err))
            return err->code;
        kh_hash_hex(&h, hx);
        json_object_set_new(f, "content_blob", json_string(hx));
        json_array_append(a->keep, c);
        json_object_del(f, "content");
    }
    return kh_store_txn_put(tx, a->rec, 0, a->id, err);
}

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

kh_status kh_llm_store_put(kh_store *s, const json_t *record, const char *raw, size_t raw_len,
                           const char *run, const char *round, char id[KH_STORE_ID_MAX],
                           kh_err *err)
{
    if (!s)
        return kh_err_set(err, KH_ESTATE, "no store to record the model call in");
    if (!json_is_object(record))
        return kh_err_set(err, KH_EINVAL, "a model call record must be an object");
    json_t *rec = json_deep_copy(record);
    if (!rec)
        return kh_err_set(err, KH_ENOMEM, "out of memory copying a model call record");
    json_t *ticket = json_object_get(rec, "id");
    if (ticket)
        json_object_set(rec, "ticket", ticket);
    json_object_del(rec, "id");
    json_object_del(rec, "store_id");
    json_object_del(rec, "store_error");
    json_object_set_new(rec, "type", json_string("llm_call"));
    const char *status = "ok";
    if (!json_is_true(json_object_get(rec, "ok"))) {
        status = json_string_value(json_object_get(json_object_get(rec, "error"), "kind"));
        if (!status)
            status = "failed";
    }
    json_object_set_new(rec, "status", json_string(status));
    json_object_set_new(rec, "model", model_of(rec));
    if (!json_is_string(json_object_get(rec, "run")) && run && *run)
        json_object_set_new(rec, "run", json_string(run));
    if (!json_is_string(json_object_get(rec, "round")) && round && *round)
        json_object_set_new(rec, "round", json_string(round));
    /* The wire body goes to a blob: prompts repeat across calls (the same
     * spec, n samples), and a blob is stored once and compressed. */
    char *req = NULL;
    json_t *body = json_object_get(rec, "request");
    if (body) {
        req = json_dumps(body, JSON_COMPACT);
        if (!req) {
            json_decref(rec);
            return kh_err_set(err, KH_ENOMEM, "out of memory serializing a request");
        }
        json_object_del(rec, "request");
    }
    /* req, raw and the files' contents stay valid until update returns (a
     * map growth replays the writes from them) */
    struct put_arg a = {rec, req, req ? strlen(req) : 0, raw, raw ? raw_len : 0, id, json_array()};
    kh_status st = a.keep ? kh_store_update(s, put_cb, &a, err)
                          : kh_err_set(err, KH_ENOMEM, "out of memory");
    free(req);
    json_decref(a.keep);
    json_decref(rec);
    return st;
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
