/* run.h: the records of a policy run, each written by the engine alone (one
 * writer per record type, docs/store.md "Records"): the run (begun, its
 * state as it goes, how it ended), its rounds and its promotions.
 *
 * A policy gives the facts as a JSON object.  A writer checks every field
 * against its list: an unknown field, a value of the wrong kind, an id of
 * another type or not in the store is refused (KH_EINVAL, the message names
 * the record and the field); JSON null counts as absent.  It adds what the
 * engine knows itself (ids, the liveness mark, the blobs of texts) and gives
 * back the record id, which the policy passes on: a round names its model
 * calls, candidates and promotion, a promotion its evidence.
 *
 * Every function runs inside a write transaction (kh_store_update); a
 * refusal is the transaction's sticky error, so nothing of it is written. */
#ifndef KH_RUN_H
#define KH_RUN_H

#include "store/store.h"

#include <jansson.h>

/* Begin a run.  facts: policy (string, required); task (a task id); id (a
 * run id from kh_store_new_id, for a caller that needs it before the record
 * exists; default a new one); config (object: the settings it runs with);
 * seed (integer); models (array of strings: the model families it may
 * call); versions (object: what code runs it).  The record gets status
 * "running" and live = {pid, host, start, heartbeat}: this process, so
 * `khlua store ls` can tell a run whose process died. */
kh_status kh_run_begin(kh_store_txn *tx, const json_t *facts, char id[KH_STORE_ID_MAX],
                       kh_err *err);

/* Update run id (replacing its record, which keeps its created_at).  facts:
 * status (running, done, failed or interrupted; a stopped run runs again
 * only by resume); resume (true: status running, resumed + 1; config may
 * come with it, and only with it); error (string: required with status
 * failed, refused with another); stop_reason (string); rounds_done (integer
 * >= 0); incumbent_candidate (a candidate id); metrics (object).  While the
 * run is running every update renews its liveness mark (heartbeat: now);
 * when it stops the mark is removed, and so is an error of an earlier
 * failure. */
kh_status kh_run_update(kh_store_txn *tx, const char *id, const json_t *facts, kh_err *err);

/* A round of a run.  facts: run (required); index (integer >= 1,
 * required); model (string: the family asked); direction (any: the
 * direction the policy chose); prompt (string, stored as a blob: the record
 * keeps prompt_blob); llm_calls (llm_call ids of this run); candidates
 * (candidate ids); verdicts (array of objects, each naming by id, where it
 * has them, its candidate, llm_call and promotion, which must exist);
 * decision (object: promoted, a candidate id; promotion, a promotion of this
 * run); events (object); actions (array); state_in, state_out (objects: the
 * controller's state before and after; a resumed run starts from the last
 * state_out).  Its id is round-<the run id's suffix>-<index, 4 digits>, so
 * a round is stored once (a second put of it: KH_ESTATE). */
kh_status kh_round_put(kh_store_txn *tx, const json_t *facts, char id[KH_STORE_ID_MAX],
                       kh_err *err);

/* A promotion in a run: a candidate replacing the incumbent after the gate.
 * facts, all of the first five required: run; candidate (the promoted);
 * incumbent (the candidate it replaces); round_index (integer >= 1);
 * evidence (evaluation ids, at least one, each an evaluation of this run of
 * the candidate or of the incumbent: what the gate decided on); then gate
 * (object: the gate's figures); score (number); reason (string). */
kh_status kh_promotion_put(kh_store_txn *tx, const json_t *facts, char id[KH_STORE_ID_MAX],
                           kh_err *err);

#endif
