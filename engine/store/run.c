/* run.c: the writers of a policy run's records (run.h): the run, its rounds
 * and its promotions, each built from a policy's facts checked field by
 * field against a list, plus what the engine knows itself (ids, the
 * liveness mark, the blobs of texts).  Evaluations and the task are
 * evaluation.c's, candidates candidate.c's, model calls llm_store.c's; how a
 * record is stored and indexed is the store's. */
#include "store/run.h"

#include "core/proc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* What a field holds.  F_TEXT: a string stored as a blob (the record gets
 * NAME_blob); F_ID / F_IDS: the id(s) of records of one type, which exist. */
enum { F_STR = 1, F_INT, F_NUM, F_BOOL, F_OBJ, F_ARR, F_ANY, F_STRS, F_ID, F_IDS, F_TEXT };

typedef struct field {
    const char *name;
    int kind;
    const char *type; /* F_ID, F_IDS: the type the ids name */
    int required;
} field;

static const char *const KIND_NAMES[] = {
    "", "a string", "an integer", "a number", "true or false", "an object", "an array",
    "any value", "an array of strings", "an id", "an array of ids", "a string",
};

/* Refuse the write: a sticky EINVAL (nothing of the update is written). */
__attribute__((format(printf, 3, 4))) static kh_status refuse(kh_store_txn *tx, kh_err *err,
                                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kh_err_setv(err, KH_EINVAL, fmt, ap);
    va_end(ap);
    return kh_store_txn_fail(tx, KH_EINVAL, err);
}

static kh_status no_memory(kh_store_txn *tx, kh_err *err)
{
    kh_err_set(err, KH_ENOMEM, "out of memory");
    return kh_store_txn_fail(tx, KH_ENOMEM, err);
}

static const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* v must be the id of a stored record of type; *rec (when rec is given)
 * gets that record (caller decrefs). */
static kh_status check_ref(kh_store_txn *tx, const char *what, const char *name,
                           const json_t *v, const char *type, json_t **rec, kh_err *err)
{
    const char *id = json_string_value(v);
    size_t tn = strlen(type);
    if (!id || strncmp(id, type, tn) || id[tn] != '-')
        return refuse(tx, err, "%s: '%s' must be a%s %s id (%s-...)", what, name,
                      strchr("aeiou", type[0]) ? "n" : "", type, type);
    json_t *r = NULL;
    kh_status st = kh_store_txn_get(tx, id, &r, err);
    if (st == KH_ENOTFOUND)
        return refuse(tx, err, "%s: '%s' names %s, which is not in the store (write it first)",
                      what, name, id);
    if (st)
        return kh_store_txn_fail(tx, st, err);
    if (rec)
        *rec = r;
    else
        json_decref(r);
    return KH_OK;
}

static kh_status check_kind(kh_store_txn *tx, const char *what, const field *f, const json_t *v,
                            kh_err *err)
{
    size_t i;
    json_t *x;
    int ok = 1;
    switch (f->kind) {
    case F_STR:
    case F_TEXT: ok = json_is_string(v); break;
    case F_INT: ok = json_is_integer(v); break;
    case F_NUM: ok = json_is_number(v); break;
    case F_BOOL: ok = json_is_boolean(v); break;
    /* an empty Lua table arrives as [] (kh.json's default): an empty object too */
    case F_OBJ: ok = json_is_object(v) || (json_is_array(v) && !json_array_size(v)); break;
    case F_ARR: ok = json_is_array(v) || (json_is_object(v) && !json_object_size(v)); break;
    case F_STRS:
        ok = json_is_array(v);
        json_array_foreach(v, i, x) ok = ok && json_is_string(x);
        break;
    case F_ID: return check_ref(tx, what, f->name, v, f->type, NULL, err);
    case F_IDS:
        if (!json_is_array(v) && !(json_is_object(v) && !json_object_size(v)))
            break;
        json_array_foreach(v, i, x) {
            char name[96];
            snprintf(name, sizeof name, "%s[%zu]", f->name, i + 1);
            kh_status st = check_ref(tx, what, name, x, f->type, NULL, err);
            if (st)
                return st;
        }
        return KH_OK;
    default: break;
    }
    if (f->kind == F_IDS)
        ok = 0;
    return ok ? KH_OK
              : refuse(tx, err, "%s: '%s' must be %s%s%s", what, f->name, KIND_NAMES[f->kind],
                       f->type ? " of " : "", f->type ? f->type : "");
}

/* The value a record keeps: {} for an empty table where an object goes, []
 * where an array goes. */
static json_t *normal(const field *f, json_t *v)
{
    if (f->kind == F_OBJ && json_is_array(v))
        return json_object();
    if ((f->kind == F_ARR || f->kind == F_IDS) && json_is_object(v))
        return json_array();
    return json_incref(v);
}

/* Copy the fields of facts into rec, each checked against fields; what
 * names the record in messages ("a round record"). */
static kh_status take_facts(kh_store_txn *tx, const char *what, const json_t *facts,
                            const field *fields, json_t *rec, kh_err *err)
{
    if (!json_is_object(facts))
        return refuse(tx, err, "%s: its fields must come as an object", what);
    const char *k;
    json_t *v;
    const field *f;
    json_object_foreach((json_t *)facts, k, v) {
        for (f = fields; f->name && strcmp(f->name, k); f++)
            ;
        if (!f->name) {
            char names[512];
            size_t n = 0;
            names[0] = 0;
            for (f = fields; f->name && n < sizeof names - 64; f++)
                n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "",
                                      f->name);
            return refuse(tx, err, "%s has no field '%s' (its fields: %s)", what, k, names);
        }
        if (json_is_null(v))
            continue;
        kh_status st = check_kind(tx, what, f, v, err);
        if (st)
            return st;
        if (f->kind == F_TEXT) {
            /* the facts are the caller's, freed before the update returns */
            kh_hash h;
            char hx[33], name[96];
            st = kh_store_txn_put_blob_copy(tx, json_string_value(v), json_string_length(v), &h,
                                            err);
            if (st)
                return st;
            kh_hash_hex(&h, hx);
            snprintf(name, sizeof name, "%s_blob", k);
            if (json_object_set_new(rec, name, json_string(hx)))
                return no_memory(tx, err);
        } else if (json_object_set_new(rec, k, normal(f, v))) {
            return no_memory(tx, err);
        }
    }
    for (f = fields; f->name; f++) {
        json_t *x = json_object_get(facts, f->name);
        if (f->required && (!x || json_is_null(x)))
            return refuse(tx, err, "%s needs the field '%s' (%s)", what, f->name,
                          KIND_NAMES[f->kind]);
    }
    return KH_OK;
}

/* This process as a liveness mark: pid, host, its start time (so a reused
 * pid does not pass for it) and the heartbeat (Unix seconds, now). */
static json_t *live_mark(void)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1))
        host[0] = 0;
    long pid = (long)getpid();
    return json_pack("{s:I, s:s, s:I, s:f}", "pid", (json_int_t)pid, "host", host, "start",
                     (json_int_t)kh_proc_start_time(pid), "heartbeat", kh_wall_now());
}

/* Put rec (owned) and give its id. */
static kh_status put_owned(kh_store_txn *tx, json_t *rec, int flags, char *id, kh_err *err)
{
    kh_status st = kh_store_txn_put(tx, rec, flags, id, err);
    json_decref(rec);
    return st;
}

/* ---- the run ------------------------------------------------------------------- */
static const field RUN_BEGIN[] = {
    {"id", F_STR, NULL, 0},      {"policy", F_STR, NULL, 1}, {"task", F_ID, "task", 0},
    {"config", F_OBJ, NULL, 0},  {"seed", F_INT, NULL, 0},   {"models", F_STRS, NULL, 0},
    {"versions", F_OBJ, NULL, 0}, {NULL, 0, NULL, 0},
};

kh_status kh_run_begin(kh_store_txn *tx, const json_t *facts, char id[KH_STORE_ID_MAX],
                       kh_err *err)
{
    json_t *rec = json_pack("{s:s}", "type", "run");
    if (!rec)
        return no_memory(tx, err);
    kh_status st = take_facts(tx, "a run record", facts, RUN_BEGIN, rec, err);
    if (!st && (json_object_set_new(rec, "status", json_string("running")) ||
                json_object_set_new(rec, "live", live_mark())))
        st = no_memory(tx, err);
    if (st) {
        json_decref(rec);
        return st;
    }
    return put_owned(tx, rec, 0, id, err);
}

static const field RUN_UPDATE[] = {
    {"status", F_STR, NULL, 0},      {"resume", F_BOOL, NULL, 0},
    {"config", F_OBJ, NULL, 0},      {"error", F_STR, NULL, 0},
    {"stop_reason", F_STR, NULL, 0}, {"rounds_done", F_INT, NULL, 0},
    {"incumbent_candidate", F_ID, "candidate", 0}, {"metrics", F_OBJ, NULL, 0},
    {NULL, 0, NULL, 0},
};

static int known_status(const char *s)
{
    return !strcmp(s, "running") || !strcmp(s, "done") || !strcmp(s, "failed") ||
           !strcmp(s, "interrupted");
}

/* Whether upd may apply to a run whose status is was: NULL, or why not. */
static const char *update_rule(const char *was, const json_t *upd, char *why, size_t n)
{
    const char *status = str(upd, "status");
    int resume = json_is_true(json_object_get(upd, "resume"));
    if (status && !known_status(status))
        snprintf(why, n, "status '%s' is not one of running, done, failed, interrupted", status);
    else if (resume && status && strcmp(status, "running"))
        snprintf(why, n, "resume makes it running, not %s", status);
    else if (json_object_get(upd, "config") && !resume)
        snprintf(why, n, "its config changes only when it resumes (resume = true)");
    else if (strcmp(was, "running") && !resume)
        snprintf(why, n, "it has stopped (%s): only resume = true runs it again", was);
    else if (status && !strcmp(status, "failed") && !json_object_get(upd, "error"))
        snprintf(why, n, "a failed run needs its error");
    else if (json_object_get(upd, "error") && (!status || strcmp(status, "failed")))
        snprintf(why, n, "an error goes with status failed");
    else
        return NULL;
    return why;
}

kh_status kh_run_update(kh_store_txn *tx, const char *id, const json_t *facts, kh_err *err)
{
    json_t *run = NULL, *upd = json_object();
    if (!upd)
        return no_memory(tx, err);
    json_t *jid = json_string(id ? id : "");
    kh_status st = jid ? check_ref(tx, "a run update", "id", jid, "run", &run, err)
                       : no_memory(tx, err);
    json_decref(jid);
    if (!st)
        st = take_facts(tx, "a run update", facts, RUN_UPDATE, upd, err);
    char why[200];
    const char *was = run ? str(run, "status") : NULL;
    if (!st && update_rule(was ? was : "running", upd, why, sizeof why))
        st = refuse(tx, err, "run %s: %s", id, why);
    if (st) {
        json_decref(upd);
        json_decref(run);
        return st;
    }
    int resume = json_is_true(json_object_get(upd, "resume"));
    const char *k;
    json_t *v;
    json_object_foreach(upd, k, v) {
        if (strcmp(k, "resume"))
            json_object_set(run, k, v);
    }
    if (resume) {
        json_object_set_new(run, "status", json_string("running"));
        json_object_set_new(run, "resumed",
                            json_integer(json_integer_value(json_object_get(run, "resumed")) + 1));
    }
    const char *now = str(run, "status");
    if (resume || (str(upd, "status") && strcmp(str(upd, "status"), "failed")))
        json_object_del(run, "error"); /* a resumed or stopped run drops an old failure */
    if (!now || !strcmp(now, "running"))
        json_object_set_new(run, "live", live_mark());
    else
        json_object_del(run, "live");
    json_decref(upd);
    return put_owned(tx, run, KH_STORE_REPLACE, NULL, err);
}

/* ---- rounds ---------------------------------------------------------------------- */
static const field ROUND[] = {
    {"run", F_ID, "run", 1},           {"index", F_INT, NULL, 1},
    {"model", F_STR, NULL, 0},         {"direction", F_ANY, NULL, 0},
    {"prompt", F_TEXT, NULL, 0},       {"llm_calls", F_IDS, "llm_call", 0},
    {"candidates", F_IDS, "candidate", 0}, {"verdicts", F_ARR, NULL, 0},
    {"decision", F_OBJ, NULL, 0},      {"events", F_OBJ, NULL, 0},
    {"actions", F_ARR, NULL, 0},       {"state_in", F_OBJ, NULL, 0},
    {"state_out", F_OBJ, NULL, 0},     {NULL, 0, NULL, 0},
};

/* The ids o names under these fields exist, of the type each field says;
 * a promotion must be of run. */
static kh_status check_links(kh_store_txn *tx, const char *what, const json_t *o,
                             const char *run, kh_err *err)
{
    static const char *const links[][2] = {{"candidate", "candidate"},
                                           {"promoted", "candidate"},
                                           {"llm_call", "llm_call"},
                                           {"promotion", "promotion"}};
    for (size_t i = 0; i < KH_ARRAY_LEN(links); i++) {
        const json_t *v = json_object_get(o, links[i][0]);
        if (!v || json_is_null(v))
            continue;
        json_t *r = NULL;
        kh_status st = check_ref(tx, what, links[i][0], v, links[i][1], &r, err);
        if (st)
            return st;
        const char *rr = str(r, "run");
        int other = !strcmp(links[i][1], "promotion") && (!rr || strcmp(rr, run));
        json_decref(r);
        if (other)
            return refuse(tx, err, "%s: promotion %s is not of run %s", what,
                          json_string_value(v), run);
    }
    return KH_OK;
}

/* What a round names: its model calls are the run's; its verdicts and its
 * decision name records that exist. */
static kh_status round_links(kh_store_txn *tx, const json_t *rec, const char *run, kh_err *err)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(rec, "llm_calls"), i, v) {
        json_t *c = NULL;
        kh_status st = kh_store_txn_get(tx, json_string_value(v), &c, err);
        const char *cr = st ? NULL : str(c, "run");
        int other = !st && (!cr || strcmp(cr, run));
        json_decref(c);
        if (st)
            return kh_store_txn_fail(tx, st, err);
        if (other)
            return refuse(tx, err, "a round record: llm_calls[%zu] (%s) is not a call of run %s",
                          i + 1, json_string_value(v), run);
    }
    json_array_foreach(json_object_get(rec, "verdicts"), i, v) {
        char what[64];
        snprintf(what, sizeof what, "a round record: verdicts[%zu]", i + 1);
        if (!json_is_object(v))
            return refuse(tx, err, "%s must be an object", what);
        kh_status st = check_links(tx, what, v, run, err);
        if (st)
            return st;
    }
    const json_t *d = json_object_get(rec, "decision");
    return d ? check_links(tx, "a round record: decision", d, run, err) : KH_OK;
}

kh_status kh_round_put(kh_store_txn *tx, const json_t *facts, char id[KH_STORE_ID_MAX],
                       kh_err *err)
{
    json_t *rec = json_pack("{s:s}", "type", "round");
    if (!rec)
        return no_memory(tx, err);
    kh_status st = take_facts(tx, "a round record", facts, ROUND, rec, err);
    const char *run = str(rec, "run");
    json_int_t index = json_integer_value(json_object_get(rec, "index"));
    char rid[KH_STORE_ID_MAX];
    if (!st && index < 1)
        st = refuse(tx, err, "a round record: 'index' must be 1 or more, not %lld",
                    (long long)index);
    if (!st && snprintf(rid, sizeof rid, "round-%s-%04lld", run + 4, (long long)index) >=
                   (int)sizeof rid)
        st = refuse(tx, err, "a round record: run id %s too long for a round id", run);
    if (!st)
        st = round_links(tx, rec, run, err);
    json_t *have = NULL;
    kh_status got = st ? KH_ENOTFOUND : kh_store_txn_get(tx, rid, &have, err);
    json_decref(have);
    if (!st && got == KH_OK) {
        kh_err_set(err, KH_ESTATE, "round %lld of run %s is stored already (%s): a round is "
                   "stored once", (long long)index, run, rid);
        st = kh_store_txn_fail(tx, KH_ESTATE, err);
    } else if (!st && got != KH_ENOTFOUND) {
        st = kh_store_txn_fail(tx, got, err);
    }
    if (!st && json_object_set_new(rec, "id", json_string(rid)))
        st = no_memory(tx, err);
    if (st) {
        json_decref(rec);
        return st;
    }
    return put_owned(tx, rec, 0, id, err);
}

/* ---- promotions ------------------------------------------------------------------ */
static const field PROMOTION[] = {
    {"run", F_ID, "run", 1},          {"candidate", F_ID, "candidate", 1},
    {"incumbent", F_ID, "candidate", 1}, {"round_index", F_INT, NULL, 1},
    {"evidence", F_IDS, "evaluation", 1}, {"gate", F_OBJ, NULL, 0},
    {"score", F_NUM, NULL, 0},        {"reason", F_STR, NULL, 0},
    {NULL, 0, NULL, 0},
};

/* Each piece of evidence is an evaluation of this run, of the candidate or
 * of the incumbent: the measurements the gate decided on. */
static kh_status check_evidence(kh_store_txn *tx, const json_t *rec, kh_err *err)
{
    const char *run = str(rec, "run"), *cand = str(rec, "candidate"),
               *inc = str(rec, "incumbent");
    const json_t *ev = json_object_get(rec, "evidence");
    if (!json_array_size(ev))
        return refuse(tx, err, "a promotion record: 'evidence' names no evaluation: a promotion "
                               "names what the gate decided on");
    size_t i;
    json_t *v;
    json_array_foreach(ev, i, v) {
        json_t *e = NULL;
        kh_status st = kh_store_txn_get(tx, json_string_value(v), &e, err);
        if (st)
            return kh_store_txn_fail(tx, st, err);
        const char *er = str(e, "run"), *ec = str(e, "candidate");
        const char *why = !er || strcmp(er, run) ? "is not an evaluation of run"
                          : !ec || (strcmp(ec, cand) && strcmp(ec, inc))
                              ? "measured neither the candidate nor the incumbent, in run"
                              : NULL;
        json_decref(e);
        if (why)
            return refuse(tx, err, "a promotion record: evidence[%zu] (%s) %s %s", i + 1,
                          json_string_value(v), why, run);
    }
    return KH_OK;
}

kh_status kh_promotion_put(kh_store_txn *tx, const json_t *facts, char id[KH_STORE_ID_MAX],
                           kh_err *err)
{
    json_t *rec = json_pack("{s:s}", "type", "promotion");
    if (!rec)
        return no_memory(tx, err);
    kh_status st = take_facts(tx, "a promotion record", facts, PROMOTION, rec, err);
    json_int_t ri = json_integer_value(json_object_get(rec, "round_index"));
    if (!st && ri < 1)
        st = refuse(tx, err, "a promotion record: 'round_index' must be 1 or more, not %lld",
                    (long long)ri);
    if (!st)
        st = check_evidence(tx, rec, err);
    if (st) {
        json_decref(rec);
        return st;
    }
    return put_owned(tx, rec, 0, id, err);
}
