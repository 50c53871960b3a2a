/* llm_store.h: model calls in the artifact store.  Every finished call of a
 * kh_llm becomes one `llm_call` record, its raw response stream and its wire
 * request blobs (the store compresses them); the replay provider reads them
 * back (request.replay = {store = true, run = RUN}, kh_llm_set_store).
 *
 * The stored record is the client's record (llm.h) with these changes:
 *   type = "llm_call"; id = the store's id (the client's ticket moves to
 *   "ticket"); status = "ok", or error.kind when the call failed;
 *   request (the wire body) -> request_blob (its compact JSON);
 *   the raw stream -> response_blob (absent when the call got no bytes);
 *   files[i].content (an agent's files) -> files[i].content_blob;
 *   model = the request's, else "command:<argv[0]>" or "replay";
 *   run / round = the request's, else the recorder's defaults;
 *   round_index, family, cost_usd = the caller's (kh_llm_call_links).
 * Keys never reach the store: the client redacts the record and the raw
 * bytes before the sink runs, and the store refuses any write holding the
 * value of a key variable (docs/store.md, "Secrets"). */
#ifndef KH_LLM_STORE_H
#define KH_LLM_STORE_H

#include "llm/llm.h"
#include "store/store.h"

/* The state behind kh_llm_store_sink.  The caller owns it and keeps it
 * alive (and store open, or NULL) while it is registered as the sink. */
typedef struct kh_llm_recorder {
    kh_store *store;           /* NULL: nothing is written; records get store_error */
    char run[KH_STORE_ID_MAX]; /* default run of the records; "" none */
    char round[KH_STORE_ID_MAX];
    size_t written, failed;    /* counters, for reports */
} kh_llm_recorder;

/* What a caller knows of a call that the client does not. */
typedef struct kh_llm_call_links {
    const char *run, *round; /* defaults for a record without its own; NULL or "": none */
    long long round_index;   /* with a run: the round that made the call; < 0: none */
    const char *family;      /* the caller's name for the model family asked (a model
                              * spec, which may differ from the provider and model that
                              * answered: a replay); NULL: none */
    double cost_usd;         /* what the call cost, priced by the caller; < 0: unknown */
} kh_llm_call_links;

/* The one writer of llm_call records: write one finished call (its record
 * as the client made it, or as kh.llm returns it to Lua, and its raw bytes)
 * inside tx, with the blobs (copied: nothing given must outlive the call).
 * A record that is not a client's (no provider, no fingerprint, no ok) is
 * refused, as a sticky error of tx.  id gets the llm_call record's id. */
kh_status kh_llm_call_put(kh_store_txn *tx, const json_t *record, const char *raw,
                          size_t raw_len, const kh_llm_call_links *links,
                          char id[KH_STORE_ID_MAX], kh_err *err);

/* kh_llm_call_put in a transaction of its own, with run / round as the only
 * links.  id gets the llm_call record's id. */
kh_status kh_llm_store_put(kh_store *s, const json_t *record, const char *raw, size_t raw_len,
                           const char *run, const char *round, char id[KH_STORE_ID_MAX],
                           kh_err *err);

/* A kh_llm_sink_fn; ud is a kh_llm_recorder.  Writes the call and marks the
 * client's record with "store_id" (the llm_call id) or, when the write
 * failed, "store_error" (the message): a call is never lost silently, and
 * the caller still gets its result. */
void kh_llm_store_sink(void *ud, json_t *record, const char *raw, size_t raw_len);

#endif
