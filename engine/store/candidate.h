/* candidate.h: one identity for a candidate, whoever evaluates it (issue 20).
 *
 * A candidate is content: the definition it is for, the file its entry
 * point compiles, its launch manifest (spec.khlua) and its sources (path and
 * content).  Its id is "candidate-" followed by the content hash of that
 * canonical form (kh_hash_bytes over the JSON below, keys sorted, compact):
 *
 *   {"definition": D, "entry_file": F, "khlua": MANIFEST,
 *    "sources": [{"content": C, "path": P}, ...]}   sources sorted by path
 *
 * The name, author and description of the Solution that carried it are not
 * part of it, nor the run, round or model that proposed it: those are facts
 * of a run or of an evaluation (round records, evaluation records), so the
 * same kernel gets one id from `khlua eval`, from a policy run and from any
 * later run, and its record says nothing about who proposed it.  One writer:
 * the evaluation's recorder and the controller (through
 * tx:put_candidate) both put candidate records with kh_candidate_put. */
#ifndef KH_CANDIDATE_H
#define KH_CANDIDATE_H

#include "store/store.h"

#include <jansson.h>

typedef struct kh_candidate {
    char id[KH_STORE_ID_MAX];
    char *canonical;      /* the canonical JSON above */
    size_t canonical_len;
    char *entry_source;   /* the entry file's content (what `khlua best` writes out) */
    size_t entry_len;
    char *definition;
    json_t *manifest;     /* spec.khlua, or JSON null for a Solution without one */
} kh_candidate;

/* The candidate a Solution JSON carries.  KH_EINVAL naming what is missing
 * (a definition, sources with a path and string content, an entry point
 * naming one of them).  Free with kh_candidate_free. */
kh_status kh_candidate_of(const json_t *solution, kh_candidate *c, kh_err *err);
void kh_candidate_free(kh_candidate *c);

/* Put c into tx under task_id: its entry source and canonical form as
 * blobs, and the record {type "candidate", id, task, definition, manifest,
 * source_blob (the entry source), solution_blob (the canonical form),
 * provenance.source_hash}, unless a record with that id is there already.
 * c must stay valid until the update returns (a map growth replays the blob
 * writes from its bytes). */
kh_status kh_candidate_put(kh_store_txn *tx, const kh_candidate *c, const char *task_id,
                           kh_err *err);

#endif
