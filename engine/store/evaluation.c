/* evaluation.c: the writers of an evaluation's records (evaluation.h): the
 * task record and the evaluation record, built from the verdict the
 * evaluator gives.  Running the evaluation is engine/eval's, the candidate
 * record candidate.c's, storing and indexing the store's. */
#include "store/evaluation.h"

#include <stdio.h>
#include <string.h>

kh_status kh_task_record_put(kh_store_txn *tx, const char *name, const json_t *definition,
                             const char *path, char id[KH_STORE_ID_MAX], kh_err *err)
{
    kh_err_clear(err);
    if (!name || !*name)
        kh_err_set(err, KH_EINVAL, "a task record needs the definition's name");
    else if (snprintf(id, KH_STORE_ID_MAX, "task-%s", name) >= KH_STORE_ID_MAX)
        kh_err_set(err, KH_EINVAL, "task name '%.60s...' too long for an id", name);
    else if (definition && !json_is_object(definition))
        kh_err_set(err, KH_EINVAL, "task %s: its definition must be a JSON object", name);
    if (err->code)
        return kh_store_txn_fail(tx, err->code, err);
    json_t *have = NULL;
    kh_status st = kh_store_txn_get(tx, id, &have, err);
    json_decref(have);
    if (st != KH_ENOTFOUND)
        return st ? kh_store_txn_fail(tx, st, err) : KH_OK;
    json_t *rec = json_pack("{s:s, s:s, s:s}", "type", "task", "id", id, "name", name);
    if (rec && definition && json_object_set(rec, "definition", (json_t *)definition))
        json_decref(rec), rec = NULL;
    if (rec && path && json_object_set_new(rec, "path", json_string(path)))
        json_decref(rec), rec = NULL;
    if (!rec) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return kh_store_txn_fail(tx, KH_ENOMEM, err);
    }
    /* the store checks the id's characters (a name outside them is refused) */
    st = kh_store_txn_put(tx, rec, 0, id, err);
    json_decref(rec);
    return st;
}

kh_status kh_evaluation_put(kh_store_txn *tx, const kh_evaluation_facts *f,
                            char id[KH_STORE_ID_MAX], kh_err *err)
{
    json_t *evj = json_object_get(f->trace, "evaluation");
    json_t *kl = json_object_get(evj, "khlua");
    const char *status = json_string_value(json_object_get(evj, "status"));
    kh_err_clear(err);
    if (!f->task || !f->candidate || !f->definition)
        kh_err_set(err, KH_EINVAL, "an evaluation record needs its task, candidate and "
                                   "definition");
    else if (!json_is_object(evj) || !status)
        kh_err_set(err, KH_EINVAL, "an evaluation record needs a verdict: a trace whose "
                                   "evaluation has a status");
    else if (f->round_index >= 0 && !f->run)
        kh_err_set(err, KH_EINVAL, "an evaluation record: a round_index needs its run");
    if (err->code)
        return kh_store_txn_fail(tx, err->code, err);
    json_t *rec = json_pack(
        "{s:s, s:s, s:s, s:s, s:s?, s:s, s:s?, s:O?, s:O, s:{s:O?, s:O?, s:O}}", "type",
        "evaluation", "task", f->task, "candidate", f->candidate, "status", status,
        "samples_blob", f->samples_blob, "definition", f->definition, "solution", f->solution,
        "workload", json_object_get(f->trace, "workload"), "evaluation", evj, "provenance",
        "hashes", json_object_get(kl, "hashes"), "seeds", json_object_get(kl, "seeds"),
        "worker", json_object_get(kl, "worker") ? json_object_get(kl, "worker") : json_null());
    if (!rec) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return kh_store_txn_fail(tx, KH_ENOMEM, err);
    }
    /* the provenance the store requires: the host always, the GPU when one ran */
    json_t *prov = json_object_get(rec, "provenance");
    const char *where[2] = {"host", "gpu_uuid"};
    for (int i = 0; i < 2; i++)
        if (json_object_get(kl, where[i]))
            json_object_set(prov, where[i], json_object_get(kl, where[i]));
    json_t *proto = json_object_get(kl, "protocol");
    if (!f->timing)
        json_object_set_new(rec, "protocol", json_string("none")); /* correctness only */
    else if (proto)
        json_object_set(rec, "protocol", proto);
    if (f->run)
        json_object_set_new(rec, "run", json_string(f->run));
    if (f->run && f->round_index >= 0)
        json_object_set_new(rec, "round_index", json_integer((json_int_t)f->round_index));
    if (f->purpose)
        json_object_set_new(rec, "purpose", json_string(f->purpose));
    kh_status st = kh_store_txn_put(tx, rec, 0, id, err);
    json_decref(rec);
    return st;
}
