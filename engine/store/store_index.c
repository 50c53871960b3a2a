/* store_index.c: the secondary index (store.h): the key of each entry
 * (kind, strings, creation time, id) and its value, queueing a record's
 * entries and deleting them.  Writing the queue in key order is store.c's
 * (the commit's), writing a record store_record.c's, queries
 * store_query.c's. */
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

/* ---- a record's entries ---------------------------------------------------------------- */
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


kh_status kh_store_index_update(kh_store_txn *tx, const kh_rec_keys *k, const char *id, int del,
                                int *full, kh_err *err)
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
    kh_status st = kh_store_index_flush_once(tx, full, err);
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

