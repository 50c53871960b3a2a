/* store_query.c: queries (store.h): the most selective index prefix for a
 * filter, walked newest first (merged over every type's prefix when the
 * filter names none), the filters the index value answers without reading
 * the record, and the records or ids found.  The index's keys are
 * store_index.c's, reading a record store_record.c's. */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

static int value_matches(const MDB_val *v, const char *type, const char *status)
{
    const char *p = v->mv_data;
    size_t n = v->mv_size;
    const char *z = memchr(p, 0, n);
    if (!z)
        return 0;
    size_t tl = (size_t)(z - p);
    if (type && (strlen(type) != tl || memcmp(p, type, tl)))
        return 0;
    if (status) {
        size_t sl = n - tl - 1;
        if (strlen(status) != sl || memcmp(z + 1, status, sl))
            return 0;
    }
    return 1;
}

static int field_is(const json_t *rec, const char *f, const char *want)
{
    const char *v = json_string_value(json_object_get(rec, f));
    return v && !strcmp(v, want);
}

/* One index prefix walked newest first. */
typedef struct qcur {
    MDB_cursor *c;
    unsigned char prefix[KH_IDX_KEY_MAX];
    size_t pn;
    MDB_val k, v;
    int live; /* positioned on a key of its prefix */
    int64_t t;
    const char *id;
    size_t idlen;
} qcur;

/* Step (or first position) a cursor; parse where it landed.  0 or an LMDB
 * error; a malformed key is reported as MDB_CORRUPTED. */
static int qcur_step(qcur *c, int first, int64_t until)
{
    int rc;
    if (first) {
        /* just past the newest key the prefix can hold, then one back */
        unsigned char probe[KH_IDX_KEY_MAX];
        memcpy(probe, c->prefix, c->pn);
        uint64_t u = (uint64_t)until;
        for (int i = 0; i < 8; i++)
            probe[c->pn + i] = (unsigned char)(u >> (8 * (7 - i)));
        probe[c->pn + 8] = 0xff;
        c->k.mv_size = c->pn + 9;
        c->k.mv_data = probe;
        rc = mdb_cursor_get(c->c, &c->k, &c->v, MDB_SET_RANGE);
        if (rc == MDB_NOTFOUND)
            rc = mdb_cursor_get(c->c, &c->k, &c->v, MDB_LAST);
        else if (rc == 0)
            rc = mdb_cursor_get(c->c, &c->k, &c->v, MDB_PREV);
    } else {
        rc = mdb_cursor_get(c->c, &c->k, &c->v, MDB_PREV);
    }
    c->live = 0;
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (c->k.mv_size < c->pn || memcmp(c->k.mv_data, c->prefix, c->pn))
        return 0;
    if (!kh_store_index_parse(c->k.mv_data, c->k.mv_size, &c->id, &c->idlen, &c->t) ||
        c->idlen == 0 || c->idlen >= KH_STORE_ID_MAX)
        return MDB_CORRUPTED;
    c->live = 1;
    return 0;
}

/* Newer first: time, then id (ids of one type sort by time too). */
static int qcur_newer(const qcur *a, const qcur *b)
{
    if (a->t != b->t)
        return a->t > b->t;
    size_t n = a->idlen < b->idlen ? a->idlen : b->idlen;
    int c = memcmp(a->id, b->id, n);
    return c ? c > 0 : a->idlen > b->idlen;
}

static size_t put_str(unsigned char *p, size_t n, const char *s)
{
    size_t l = strlen(s) + 1;
    memcpy(p + n, s, l);
    return n + l;
}

kh_status kh_store_txn_query(kh_store_txn *tx, const kh_store_filter *q, int ids_only,
                             json_t **out, kh_err *err)
{
    *out = NULL;
    if (tx->st)
        return kh_store_tx_sticky(tx, err);
    if (tx->write && tx->npend) { /* the txn's own puts are part of the answer */
        kh_status st = kh_store_index_flush(tx, err);
        if (st)
            return kh_store_tx_fail(tx, st, err);
    }
    const char *fields[5] = {q->type, q->task, q->run, q->candidate, q->status};
    for (int i = 0; i < 5; i++)
        if (fields[i] && strlen(fields[i]) > 200)
            return kh_err_set(err, KH_EINVAL, "query value too long");
    /* The most selective index: run, task, candidate, then type+status, type.
     * Without a type, the same walk runs over every type's prefix, merged. */
    const char *link = NULL, *rest_task = q->task, *rest_run = q->run, *rest_cand = q->candidate;
    char kind = 0;
    if (q->run)
        kind = 'r', link = q->run, rest_run = NULL;
    else if (q->task)
        kind = 'k', link = q->task, rest_task = NULL;
    else if (q->candidate)
        kind = 'c', link = q->candidate, rest_cand = NULL;
    const char *fstatus = q->status;
    const char *types[KH_STORE_NTYPES];
    size_t ntypes = 0;
    if (q->type) {
        if (!kh_store_known_type(q->type)) {
            *out = json_array();
            return *out ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
        }
        types[ntypes++] = q->type;
    } else {
        for (size_t i = 0; i < KH_STORE_NTYPES; i++)
            types[ntypes++] = kh_store_type_at(i);
    }
    qcur cur[KH_STORE_NTYPES];
    memset(cur, 0, sizeof cur);
    for (size_t i = 0; i < ntypes; i++) {
        size_t pn = 0;
        if (link) {
            cur[i].prefix[pn++] = (unsigned char)kind;
            pn = put_str(cur[i].prefix, pn, link);
            pn = put_str(cur[i].prefix, pn, types[i]);
        } else if (q->status) {
            cur[i].prefix[pn++] = 'S';
            pn = put_str(cur[i].prefix, pn, types[i]);
            pn = put_str(cur[i].prefix, pn, q->status);
        } else {
            cur[i].prefix[pn++] = 'T';
            pn = put_str(cur[i].prefix, pn, types[i]);
        }
        cur[i].pn = pn;
    }
    if (!link)
        fstatus = NULL; /* the S prefix holds it */
    int64_t until = q->until_us > 0 ? q->until_us : INT64_MAX;
    json_t *arr = json_array();
    kh_status st = KH_OK;
    int rc = 0;
    for (size_t i = 0; i < ntypes && !rc; i++) {
        rc = mdb_cursor_open(tx->txn, tx->s->index, &cur[i].c);
        if (!rc)
            rc = qcur_step(&cur[i], 1, until);
    }
    size_t found = 0;
    while (!rc && arr) {
        qcur *best = NULL;
        for (size_t i = 0; i < ntypes; i++)
            if (cur[i].live && (!best || qcur_newer(&cur[i], best)))
                best = &cur[i];
        if (!best || (q->since_us && best->t < q->since_us))
            break;
        if (best->t <= until && value_matches(&best->v, NULL, fstatus)) {
            char idbuf[KH_STORE_ID_MAX];
            memcpy(idbuf, best->id, best->idlen);
            idbuf[best->idlen] = '\0';
            json_t *rec = NULL;
            if (!ids_only || rest_task || rest_run || rest_cand) {
                st = kh_store_txn_get(tx, idbuf, &rec, err);
                if (st) {
                    if (st == KH_ENOTFOUND)
                        st = kh_err_set(err, KH_ECORRUPT,
                                        "index names %s but no such record (run khlua store "
                                        "verify)",
                                        idbuf);
                    break;
                }
            }
            if ((!rest_task || field_is(rec, "task", rest_task)) &&
                (!rest_run || field_is(rec, "run", rest_run)) &&
                (!rest_cand || field_is(rec, "candidate", rest_cand))) {
                if (ids_only) {
                    json_array_append_new(arr, json_stringn(idbuf, best->idlen));
                    json_decref(rec);
                } else {
                    json_array_append_new(arr, rec);
                }
                if (q->limit && ++found >= q->limit)
                    break;
            } else {
                json_decref(rec);
            }
        }
        rc = qcur_step(best, 0, until);
    }
    if (!st && rc == MDB_CORRUPTED)
        st = kh_err_set(err, KH_ECORRUPT, "malformed index key (run khlua store verify)");
    else if (!st && rc)
        st = kh_store_mdb_err(err, rc, "walking the index");
    if (!st && !arr)
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
    for (size_t i = 0; i < ntypes; i++)
        if (cur[i].c)
            mdb_cursor_close(cur[i].c);
    if (st) {
        json_decref(arr);
        return st;
    }
    *out = arr;
    return KH_OK;
}

struct query_arg {
    const kh_store_filter *q;
    int ids_only;
    json_t **out;
};

static kh_status do_query(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct query_arg *a = arg;
    return kh_store_txn_query(tx, a->q, a->ids_only, a->out, err);
}

kh_status kh_store_query(kh_store *s, const kh_store_filter *q, int ids_only, json_t **out,
                         kh_err *err)
{
    *out = NULL;
    struct query_arg a = {q, ids_only, out};
    return kh_store_view(s, do_query, &a, err);
}
