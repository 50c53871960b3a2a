/* store_index.c: the secondary index (store.h): the key of each entry
 * (kind, strings, creation time, id), queueing entries and writing them in
 * key order, writing a record with its entries, and queries that walk the
 * index newest first.  What a record must carry is store_record.c's. */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

/* key = kind, NUL-terminated strings, 8-byte big-endian time, id */
static size_t build_key(unsigned char *key, char kind, const char *a, const char *b,
                        int64_t t, const char *id)
{
    size_t n = 0;
    key[n++] = (unsigned char)kind;
    if (a) {
        size_t l = strlen(a) + 1;
        memcpy(key + n, a, l);
        n += l;
    }
    if (b) {
        size_t l = strlen(b) + 1;
        memcpy(key + n, b, l);
        n += l;
    }
    uint64_t u = (uint64_t)t;
    for (int i = 7; i >= 0; i--)
        key[n++] = (unsigned char)(u >> (8 * i));
    size_t l = strlen(id);
    memcpy(key + n, id, l);
    return n + l;
}

static int kind_strings(char kind)
{
    switch (kind) {
    case 'T':
        return 1;
    case 'S':
    case 'k':
    case 'r':
    case 'c':
        return 2;
    default:
        return -1;
    }
}

/* Per record: T (type), S (type, status) and, for each link present, a
 * typed entry (task / run / candidate, type).  Queries without a type merge
 * the typed prefixes of every known type, so no untyped copy is kept: fewer
 * B-tree inserts per write. */
size_t kh_store_index_keys(const kh_rec_keys *k, const char *id,
                           unsigned char keys[][KH_IDX_KEY_MAX], size_t lens[])
{
    size_t n = 0;
    lens[n] = build_key(keys[n], 'T', k->type, NULL, k->t_us, id), n++;
    if (k->status)
        lens[n] = build_key(keys[n], 'S', k->type, k->status, k->t_us, id), n++;
    const char *links[3] = {k->task, k->run, k->candidate};
    const char lo[3] = {'k', 'r', 'c'};
    for (int i = 0; i < 3; i++)
        if (links[i])
            lens[n] = build_key(keys[n], lo[i], links[i], k->type, k->t_us, id), n++;
    return n;
}

int kh_store_index_parse(const unsigned char *key, size_t n, const char **id, size_t *idlen,
                         int64_t *t_us)
{
    if (n < 1)
        return 0;
    int ns = kind_strings((char)key[0]);
    if (ns < 0)
        return 0;
    size_t p = 1;
    for (int i = 0; i < ns; i++) {
        const unsigned char *z = memchr(key + p, 0, n - p);
        if (!z)
            return 0;
        p = (size_t)(z - key) + 1;
    }
    if (n < p + 9)
        return 0;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | key[p + i];
    *t_us = (int64_t)u;
    *id = (const char *)key + p + 8;
    *idlen = n - p - 8;
    return 1;
}

/* Index value: type NUL status (status may be empty): the filters a query
 * applies without reading the record. */
static size_t index_value(const kh_rec_keys *k, char *buf)
{
    size_t a = strlen(k->type) + 1, b = k->status ? strlen(k->status) : 0;
    memcpy(buf, k->type, a);
    if (b)
        memcpy(buf + a, k->status, b);
    return a + b;
}

/* ---- records: writing ------------------------------------------------------------------ */
/* The write txn's cursor for slot (see kh_store_txn.wcur). */
static int wcursor(kh_store_txn *tx, int slot, MDB_dbi dbi, MDB_cursor **c)
{
    if (!tx->wcur[slot]) {
        int rc = mdb_cursor_open(tx->txn, dbi, &tx->wcur[slot]);
        if (rc) {
            tx->wcur[slot] = NULL;
            return rc;
        }
    }
    *c = tx->wcur[slot];
    return 0;
}

/* Queue an index entry (see kh_store_txn.pend). */
static kh_status index_queue(kh_store_txn *tx, const unsigned char *key, size_t kn,
                             const char *val, size_t vn, kh_err *err)
{
    if (tx->npend == tx->cappend) {
        size_t nc = tx->cappend ? tx->cappend * 2 : 1024;
        size_t *p = realloc(tx->pofs, nc * sizeof *p);
        if (!p)
            return kh_err_set(err, KH_ENOMEM, "out of memory queueing index entries");
        tx->pofs = p;
        tx->cappend = nc;
    }
    if (kh_sbuf_reserve(&tx->pend, 3 + kn + vn, err))
        return KH_ENOMEM;
    unsigned char *p = (unsigned char *)tx->pend.p + tx->pend.n;
    p[0] = (unsigned char)(kn >> 8);
    p[1] = (unsigned char)kn;
    p[2] = (unsigned char)vn;
    memcpy(p + 3, key, kn);
    memcpy(p + 3 + kn, val, vn);
    tx->pofs[tx->npend++] = tx->pend.n;
    tx->pend.n += 3 + kn + vn;
    return KH_OK;
}

static _Thread_local const char *pend_base; /* for the qsort comparator */

/* LMDB's default order: bytes, then the shorter first. */
static int pend_cmp(const void *a, const void *b)
{
    const unsigned char *x = (const unsigned char *)pend_base + *(const size_t *)a,
                        *y = (const unsigned char *)pend_base + *(const size_t *)b;
    size_t xn = (size_t)x[0] << 8 | x[1], yn = (size_t)y[0] << 8 | y[1];
    int c = memcmp(x + 3, y + 3, xn < yn ? xn : yn);
    return c ? c : (xn > yn) - (xn < yn);
}

/* Write the queued index entries in key order.  MDB_MAP_FULL sets *full
 * (the caller grows the map and replays, which queues them again). */
static kh_status index_flush_once(kh_store_txn *tx, int *full, kh_err *err)
{
    if (!tx->npend)
        return KH_OK;
    pend_base = tx->pend.p;
    qsort(tx->pofs, tx->npend, sizeof *tx->pofs, pend_cmp);
    pend_base = NULL;
    MDB_cursor *c;
    int rc = wcursor(tx, 1, tx->s->index, &c);
    for (size_t i = 0; !rc && i < tx->npend; i++) {
        unsigned char *p = (unsigned char *)tx->pend.p + tx->pofs[i];
        size_t kn = (size_t)p[0] << 8 | p[1];
        MDB_val key = {kn, p + 3}, v = {p[2], p + 3 + kn};
        rc = mdb_cursor_put(c, &key, &v, 0);
    }
    if (rc == MDB_MAP_FULL) {
        *full = 1;
        return KH_ESTORE;
    }
    if (rc)
        return kh_store_mdb_err(err, rc, "writing the index");
    tx->npend = 0;
    tx->pend.n = 0;
    return KH_OK;
}

/* index_flush_once, growing the map when it fills. */
kh_status kh_store_index_flush(kh_store_txn *tx, kh_err *err)
{
    for (;;) {
        int full = 0;
        kh_status st = index_flush_once(tx, &full, err);
        if (!full)
            return st;
        if ((st = kh_store_tx_recover(tx, err)))
            return st;
    }
}


static kh_status index_update(kh_store_txn *tx, const kh_rec_keys *k, const char *id,
                              int del, int *full, kh_err *err)
{
    unsigned char keys[KH_IDX_MAX][KH_IDX_KEY_MAX];
    size_t lens[KH_IDX_MAX];
    char val[128];
    size_t n = kh_store_index_keys(k, id, keys, lens);
    MDB_val v = {index_value(k, val), val};
    if (!del) {
        for (size_t i = 0; i < n; i++)
            if (index_queue(tx, keys[i], lens[i], val, v.mv_size, err))
                return KH_ENOMEM;
        return KH_OK;
    }
    /* the entries to delete may still be queued */
    kh_status st = index_flush_once(tx, full, err);
    if (st)
        return st;
    for (size_t i = 0; i < n; i++) {
        MDB_val key = {lens[i], keys[i]};
        int rc = mdb_del(tx->txn, tx->s->index, &key, NULL);
        if (rc == MDB_NOTFOUND && del)
            continue;
        if (rc == MDB_MAP_FULL) {
            *full = 1;
            return KH_ESTORE;
        }
        if (rc)
            return kh_store_mdb_err(err, rc, "writing the index");
    }
    return KH_OK;
}

/* Write (or replace) a serialized record and its index entries.  The first
 * run has the record's index fields from the put; a replay parses the text
 * again. */
kh_status kh_store_record_write(kh_store_txn *tx, const kh_store_op *op, int *full, kh_err *err)
{
    kh_store *s = tx->s;
    const char *id = tx->log.p + op->off, *text = id + op->idlen + 1;
    int flags = op->flags;
    json_t *rec = NULL;
    kh_rec_keys rk;
    const kh_rec_keys *keys = op->keys;
    if (!keys) {
        rec = kh_store_json_parse(text, op->textlen, err);
        if (!rec)
            return kh_err_prefix(err, "record %s", id), KH_EINVAL;
        if (kh_store_rec_keys(rec, &rk, err)) {
            json_decref(rec);
            return KH_EINVAL;
        }
        keys = &rk;
    }
    MDB_val key = {op->idlen, (void *)id}, old;
    kh_status st = KH_OK;
    int rc = MDB_NOTFOUND;
    /* a plain put lets LMDB refuse an existing key (one B-tree descent);
     * only a replace looks up the old record to drop its index entries */
    if (flags & KH_STORE_REPLACE) {
        rc = mdb_get(tx->txn, s->records, &key, &old);
        if (rc == 0) {
            json_t *o = kh_store_decode_record(s, &old, err);
            if (!o) {
                st = KH_ECORRUPT;
                goto out;
            }
            kh_rec_keys ok;
            st = kh_store_rec_keys(o, &ok, err);
            if (!st)
                st = index_update(tx, &ok, id, 1, full, err);
            json_decref(o);
            if (st)
                goto out;
        } else if (rc != MDB_NOTFOUND) {
            st = kh_store_mdb_err(err, rc, "reading the records");
            goto out;
        }
    }
    MDB_val v = {op->textlen, (void *)text};
    MDB_cursor *c;
    rc = wcursor(tx, 0, s->records, &c);
    if (!rc)
        rc = mdb_cursor_put(c, &key, &v, (flags & KH_STORE_REPLACE) ? 0 : MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
        st = kh_err_set(err, KH_ESTATE,
                        "record %s already exists (records are immutable; pass replace to "
                        "overwrite)",
                        id);
        goto out;
    }
    if (rc == MDB_MAP_FULL) {
        *full = 1;
        st = KH_ESTORE;
        goto out;
    }
    if (rc) {
        st = kh_store_mdb_err(err, rc, "writing a record");
        goto out;
    }
    st = index_update(tx, keys, id, 0, full, err);
out:
    json_decref(rec);
    return st;
}

/* ---- queries ------------------------------------------------------------------------------ */
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
