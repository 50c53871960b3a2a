/* evaluation.h: the records an evaluation writes, each by the engine alone
 * (one writer per record type, docs/store.md "Records"): the task it ran,
 * named by its definition, and the verdict on one workload.  kh.eval's
 * recorder (engine/eval/eval_record.c) writes them; so do tx:put_task and
 * tx:put_evaluation in Lua (a stand-in evaluator in the tests, a task a run
 * works on).  The candidate record is candidate.h's. */
#ifndef KH_EVALUATION_H
#define KH_EVALUATION_H

#include "store/store.h"

#include <jansson.h>

/* The task record task-<name>, put unless it is there (a task is its
 * definition: a later put changes nothing): {name, definition (its
 * FlashInfer-Bench Definition JSON, NULL: not known), path (the package it
 * was loaded from, NULL: not known)}.  id gets task-<name>.  A name that
 * does not make an id ([A-Za-z0-9._:-], at most 123 bytes) is refused. */
kh_status kh_task_record_put(kh_store_txn *tx, const char *name, const json_t *definition,
                             const char *path, char id[KH_STORE_ID_MAX], kh_err *err);

/* A verdict to record. */
typedef struct kh_evaluation_facts {
    const char *task;         /* the task's id (kh_task_record_put) */
    const char *candidate;    /* the candidate's id (kh_candidate_put) */
    const char *definition;   /* the definition's name */
    const char *solution;     /* the Solution's name; NULL: none */
    /* the FlashInfer-Bench trace: {workload, evaluation {status, ..., khlua
     * {hashes, seeds, host, gpu_uuid, worker, protocol}}} (borrowed) */
    const json_t *trace;
    const char *samples_blob; /* the raw timings' blob (hex); NULL: none */
    int timing;               /* 0: correctness only (protocol "none") */
    const char *run;          /* a run's evaluation: its id; NULL: none */
    long long round_index;    /* with run: its round (0 the seed's); < 0: none */
    const char *purpose;      /* what the run measured it for; NULL: none */
} kh_evaluation_facts;

/* Write the evaluation record of f: {task, candidate, status (the verdict's),
 * definition, solution, workload, evaluation (the verdict), samples_blob,
 * protocol, provenance {hashes, seeds, worker, host, gpu_uuid} (from
 * evaluation.khlua), run, round_index, purpose}.  id gets its id.  A trace
 * without a status, without its provenance (the solution hash, the host or
 * GPU, the seeds) or naming records that are not there is refused. */
kh_status kh_evaluation_put(kh_store_txn *tx, const kh_evaluation_facts *f,
                            char id[KH_STORE_ID_MAX], kh_err *err);

#endif
