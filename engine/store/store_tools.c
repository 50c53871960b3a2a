/* store_tools.c: whole-store walks over the artifact store (see store.h):
 * stats, verify (hashes, references, indices), gc of unreferenced blobs and
 * a compacted backup.  Export and import are store_export.c's.  Every walk
 * runs inside one scoped transaction of store.c, so it sees one consistent
 * snapshot. */
#include "store/store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

/* ---- stats ------------------------------------------------------------------------ */
struct stats_ctx {
    json_t *out;
};

static kh_status do_stats(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct stats_ctx *c = arg;
    kh_store *s = tx->s;
    json_t *types = json_object();
    json_int_t total = 0, blobs = 0, raw = 0, stored = 0;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(tx->txn, s->index, &cur);
    if (rc)
        goto fail;
    /* count per type from the 'T' index: no record needs parsing */
    MDB_val k = {1, "T"}, v;
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    while (rc == 0 && k.mv_size > 1 && ((char *)k.mv_data)[0] == 'T') {
        const char *type = (const char *)k.mv_data + 1;
        const char *z = memchr(type, 0, k.mv_size - 1);
        if (z) {
            json_t *n = json_object_get(types, type);
            json_object_set_new(types, type, json_integer(n ? json_integer_value(n) + 1 : 1));
            total++;
        }
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        goto fail;
    rc = mdb_cursor_open(tx->txn, s->blobs, &cur);
    if (rc)
        goto fail;
    rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    while (rc == 0) {
        stored += (json_int_t)v.mv_size;
        int fmt;
        uint64_t rl, at;
        uint32_t n, cs;
        if (k.mv_size == 16 && kh_store_blob_head(&v, &fmt, &rl, &at, &n, &cs)) {
            blobs++;
            raw += (json_int_t)rl;
        }
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND)
        goto fail;
    MDB_envinfo info;
    MDB_stat st;
    if ((rc = mdb_env_info(s->env, &info)) || (rc = mdb_env_stat(s->env, &st)))
        goto fail;
    c->out = json_pack("{s:s, s:i, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "path", s->path,
                       "schema", KH_STORE_SCHEMA, "records", types, "records_total", total,
                       "blobs", blobs, "blob_bytes_raw", raw, "blob_bytes_stored", stored,
                       "map_size", (json_int_t)info.me_mapsize, "map_used",
                       (json_int_t)((info.me_last_pgno + 1) * st.ms_psize), "page_size",
                       (json_int_t)st.ms_psize);
    return c->out ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
fail:
    json_decref(types);
    return kh_store_mdb_err(err, rc, "walking the store");
}

kh_status kh_store_stats(kh_store *s, json_t **out, kh_err *err)
{
    struct stats_ctx c = {NULL};
    kh_status st = kh_store_view(s, do_stats, &c, err);
    *out = c.out;
    return st;
}

/* ---- verify ------------------------------------------------------------------------ */
#define MAX_PROBLEMS 1000

struct verify_ctx {
    kh_store_txn *tx;
    json_t *problems;
    json_int_t nproblems, records, blobs, index_entries, expected_index;
    const char *rec_id;
};

static void problem(struct verify_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void problem(struct verify_ctx *c, const char *fmt, ...)
{
    c->nproblems++;
    if (json_array_size(c->problems) >= MAX_PROBLEMS)
        return;
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_array_append_new(c->problems, json_string(buf));
}

static kh_status verify_blob_ref(void *arg, const char *field, const char *value, kh_err *err)
{
    struct verify_ctx *c = arg;
    kh_hash h;
    kh_err e;
    if (!value || kh_hash_parse(value, &h, &e)) {
        problem(c, "record %s: field '%s' is not a blob hash", c->rec_id, field);
        return KH_OK;
    }
    MDB_val k = {16, h.b}, v;
    int rc = mdb_get(c->tx->txn, c->tx->s->blobs, &k, &v);
    if (rc == MDB_NOTFOUND)
        problem(c, "record %s: field '%s' names blob %s, which is not stored", c->rec_id, field,
                value);
    else if (rc)
        return kh_store_mdb_err(err, rc, "reading a blob");
    return KH_OK;
}

static kh_status verify_record_ref(void *arg, const char *field, const char *value, kh_err *err)
{
    struct verify_ctx *c = arg;
    if (!value) {
        problem(c, "record %s: field '%s' is not a record id", c->rec_id, field);
        return KH_OK;
    }
    MDB_val k = {strlen(value), (void *)value}, v;
    int rc = strlen(value) >= KH_STORE_ID_MAX ? MDB_NOTFOUND
                                               : mdb_get(c->tx->txn, c->tx->s->records, &k, &v);
    if (rc == MDB_NOTFOUND)
        problem(c, "record %s: field '%s' names record %s, which is not stored", c->rec_id,
                field, value);
    else if (rc)
        return kh_store_mdb_err(err, rc, "reading a record");
    return KH_OK;
}

static kh_status verify_records(struct verify_ctx *c, kh_err *err)
{
    kh_store *s = c->tx->s;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(c->tx->txn, s->records, &cur);
    if (rc)
        return kh_store_mdb_err(err, rc, "opening a cursor");
    MDB_val k, v;
    kh_status st = KH_OK;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        c->records++;
        char id[KH_STORE_ID_MAX + 8];
        snprintf(id, sizeof id, "%.*s", (int)(k.mv_size < KH_STORE_ID_MAX ? k.mv_size : 128),
                 (const char *)k.mv_data);
        c->rec_id = id;
        kh_err e;
        json_t *rec = kh_store_decode_record(s, &v, &e);
        if (!rec) {
            problem(c, "record %s: %s", id, e.msg);
            continue;
        }
        const char *rid = json_string_value(json_object_get(rec, "id"));
        if (!rid || strlen(rid) != k.mv_size || memcmp(rid, k.mv_data, k.mv_size))
            problem(c, "record %s: its id field says '%s'", id, rid ? rid : "(none)");
        kh_rec_keys rk;
        if (kh_store_rec_keys(rec, &rk, &e)) {
            problem(c, "record %s: %s", id, e.msg);
            json_decref(rec);
            continue;
        }
        unsigned char keys[KH_IDX_MAX][KH_IDX_KEY_MAX];
        size_t lens[KH_IDX_MAX];
        size_t n = kh_store_index_keys(&rk, id, keys, lens);
        c->expected_index += (json_int_t)n;
        for (size_t i = 0; i < n; i++) {
            MDB_val ik = {lens[i], keys[i]}, iv;
            int r2 = mdb_get(c->tx->txn, s->index, &ik, &iv);
            if (r2 == MDB_NOTFOUND)
                problem(c, "record %s: index entry '%c' is missing", id, keys[i][0]);
            else if (r2) {
                st = kh_store_mdb_err(err, r2, "reading the index");
                break;
            }
        }
        if (!st)
            st = kh_store_each_record_ref(rec, verify_record_ref, c, err);
        if (!st)
            st = kh_store_each_blob_ref(rec, verify_blob_ref, c, err);
        json_decref(rec);
        if (st)
            break;
    }
    mdb_cursor_close(cur);
    if (!st && rc != MDB_NOTFOUND)
        st = kh_store_mdb_err(err, rc, "walking the records");
    return st;
}

/* Every index entry must belong to a stored record that produces it. */
static kh_status verify_index(struct verify_ctx *c, kh_err *err)
{
    kh_store *s = c->tx->s;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(c->tx->txn, s->index, &cur);
    if (rc)
        return kh_store_mdb_err(err, rc, "opening a cursor");
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        c->index_entries++;
    int detail = rc == MDB_NOTFOUND && c->index_entries != c->expected_index;
    kh_status st = KH_OK;
    /* Pass 1 found every expected entry present; equal counts then mean no
     * extra ones.  Only on a mismatch look at each entry. */
    if (detail) {
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            const char *id;
            size_t idlen;
            int64_t t;
            if (!kh_store_index_parse(k.mv_data, k.mv_size, &id, &idlen, &t) || !idlen ||
                idlen >= KH_STORE_ID_MAX) {
                problem(c, "malformed index key of %zu bytes (kind '%c')", k.mv_size,
                        k.mv_size ? ((char *)k.mv_data)[0] : '?');
                continue;
            }
            char idb[KH_STORE_ID_MAX];
            memcpy(idb, id, idlen);
            idb[idlen] = '\0';
            MDB_val rk = {idlen, idb}, rv;
            int r2 = mdb_get(c->tx->txn, s->records, &rk, &rv);
            if (r2 == MDB_NOTFOUND) {
                problem(c, "index entry '%c' names record %s, which is not stored",
                        ((char *)k.mv_data)[0], idb);
                continue;
            }
            if (r2) {
                st = kh_store_mdb_err(err, r2, "reading a record");
                break;
            }
            kh_err e;
            json_t *rec = kh_store_decode_record(s, &rv, &e);
            kh_rec_keys rkeys;
            int match = 0;
            if (rec && !kh_store_rec_keys(rec, &rkeys, &e)) {
                unsigned char keys[KH_IDX_MAX][KH_IDX_KEY_MAX];
                size_t lens[KH_IDX_MAX];
                size_t n = kh_store_index_keys(&rkeys, idb, keys, lens);
                for (size_t i = 0; i < n; i++)
                    if (lens[i] == k.mv_size && !memcmp(keys[i], k.mv_data, k.mv_size))
                        match = 1;
            }
            json_decref(rec);
            if (!match)
                problem(c, "index entry '%c' for record %s does not match the record",
                        ((char *)k.mv_data)[0], idb);
        }
    }
    mdb_cursor_close(cur);
    if (!st && rc != MDB_NOTFOUND)
        st = kh_store_mdb_err(err, rc, "walking the index");
    return st;
}

static kh_status hash_sink(void *arg, const void *data, size_t len, kh_err *err)
{
    (void)err;
    XXH3_128bits_update(arg, data, len);
    return KH_OK;
}

static kh_status verify_blobs(struct verify_ctx *c, kh_err *err)
{
    kh_store *s = c->tx->s;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(c->tx->txn, s->blobs, &cur);
    if (rc)
        return kh_store_mdb_err(err, rc, "opening a cursor");
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) {
        mdb_cursor_close(cur);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    MDB_val k, v;
    kh_status st = KH_OK;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        kh_hash h;
        char hx[33];
        if (k.mv_size != 16 && k.mv_size != 20) {
            problem(c, "blob table: key of %zu bytes is neither a blob nor a chunk", k.mv_size);
            continue;
        }
        memcpy(h.b, k.mv_data, 16);
        kh_hash_hex(&h, hx);
        int fmt;
        uint64_t raw, at;
        uint32_t n, cs;
        if (k.mv_size == 20) {
            const unsigned char *kp = k.mv_data;
            uint32_t idx = (uint32_t)kp[16] << 24 | (uint32_t)kp[17] << 16 |
                           (uint32_t)kp[18] << 8 | kp[19];
            MDB_val hk = {16, h.b}, hv;
            if (mdb_get(c->tx->txn, s->blobs, &hk, &hv) != 0 ||
                !kh_store_blob_head(&hv, &fmt, &raw, &at, &n, &cs) || fmt != KH_BLOB_CHUNKED ||
                idx >= n)
                problem(c, "blob %s: chunk %u belongs to no stored blob", hx, idx);
            continue;
        }
        c->blobs++;
        if (!kh_store_blob_head(&v, &fmt, &raw, &at, &n, &cs)) {
            problem(c, "blob %s: malformed header", hx);
            continue;
        }
        /* stream_blob positions its own lookups: keep our cursor's place */
        XXH3_128bits_reset(hs);
        kh_err e;
        kh_status bs = kh_store_txn_stream_blob(c->tx, &h, hash_sink, hs, &e);
        if (bs == KH_ECORRUPT || bs == KH_ENOTFOUND) {
            problem(c, "%s", e.msg);
            continue;
        }
        if (bs) {
            st = bs;
            *err = e;
            break;
        }
        XXH128_canonical_t cn;
        XXH128_canonicalFromHash(&cn, XXH3_128bits_digest(hs));
        if (memcmp(cn.digest, h.b, 16)) {
            kh_hash got;
            char ghx[33];
            memcpy(got.b, cn.digest, 16);
            kh_hash_hex(&got, ghx);
            problem(c, "blob %s: its bytes hash to %s (the content was altered)", hx, ghx);
        }
    }
    XXH3_freeState(hs);
    mdb_cursor_close(cur);
    if (!st && rc != MDB_NOTFOUND)
        st = kh_store_mdb_err(err, rc, "walking the blobs");
    return st;
}

static kh_status do_verify(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct verify_ctx *c = arg;
    c->tx = tx;
    MDB_val k = {6, "schema"}, v;
    if (mdb_get(tx->txn, tx->s->meta, &k, &v) != 0)
        problem(c, "meta: the schema record is missing");
    kh_status st = verify_records(c, err);
    if (!st)
        st = verify_index(c, err);
    if (!st)
        st = verify_blobs(c, err);
    return st;
}

kh_status kh_store_verify(kh_store *s, json_t **report, kh_err *err)
{
    *report = NULL;
    struct verify_ctx c = {.problems = json_array()};
    kh_status st = kh_store_view(s, do_verify, &c, err);
    if (st) {
        json_decref(c.problems);
        return st;
    }
    *report = json_pack("{s:I, s:I, s:I, s:I, s:o}", "records", c.records, "blobs", c.blobs,
                        "index_entries", c.index_entries, "problems_total", c.nproblems,
                        "problems", c.problems);
    return *report ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
}

/* ---- gc ------------------------------------------------------------------------------- */
kh_status kh_store_collect_hash(void *arg, const char *field, const char *value, kh_err *err)
{
    (void)field;
    struct kh_store_hashset *hs = arg;
    kh_hash h;
    kh_err e;
    if (!value || kh_hash_parse(value, &h, &e))
        return KH_OK;
    if (hs->n == hs->cap) {
        size_t nc = hs->cap ? hs->cap * 2 : 256;
        kh_hash *n = realloc(hs->v, nc * sizeof *n);
        if (!n)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        hs->v = n;
        hs->cap = nc;
    }
    hs->v[hs->n++] = h;
    return KH_OK;
}

int kh_store_hash_cmp(const void *a, const void *b) { return memcmp(a, b, 16); }

struct gc_ctx {
    double grace_s;
    json_int_t deleted, bytes, kept;
};

static kh_status do_gc(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct gc_ctx *c = arg;
    kh_store *s = tx->s;
    struct kh_store_hashset refs = {0}, dead = {0};
    MDB_cursor *cur;
    kh_status st = KH_OK;
    int rc = mdb_cursor_open(tx->txn, s->records, &cur);
    if (rc)
        return kh_store_mdb_err(err, rc, "opening a cursor");
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !st;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        kh_err e;
        json_t *rec = kh_store_decode_record(s, &v, &e);
        if (!rec) {
            st = kh_err_set(err, KH_ECORRUPT,
                            "a record does not parse (%s): run khlua store verify; gc "
                            "refuses to guess what it referenced",
                            e.msg);
            break;
        }
        st = kh_store_each_blob_ref(rec, kh_store_collect_hash, &refs, err);
        json_decref(rec);
    }
    mdb_cursor_close(cur);
    if (!st && rc != MDB_NOTFOUND)
        st = kh_store_mdb_err(err, rc, "walking the records");
    if (st)
        goto out;
    qsort(refs.v, refs.n, sizeof *refs.v, kh_store_hash_cmp);
    if ((rc = mdb_cursor_open(tx->txn, s->blobs, &cur))) {
        st = kh_store_mdb_err(err, rc, "opening a cursor");
        goto out;
    }
    uint64_t now = (uint64_t)kh_wall_now();
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !st;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        int fmt;
        uint64_t raw, at;
        uint32_t n, cs;
        if (k.mv_size != 16 || !kh_store_blob_head(&v, &fmt, &raw, &at, &n, &cs))
            continue;
        if (bsearch(k.mv_data, refs.v, refs.n, sizeof *refs.v, kh_store_hash_cmp) ||
            (double)at + c->grace_s > (double)now) {
            c->kept++;
            continue;
        }
        kh_hash h;
        memcpy(h.b, k.mv_data, 16);
        if (dead.n == dead.cap) {
            size_t nc = dead.cap ? dead.cap * 2 : 256;
            kh_hash *nv = realloc(dead.v, nc * sizeof *nv);
            if (!nv) {
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
                break;
            }
            dead.v = nv;
            dead.cap = nc;
        }
        dead.v[dead.n++] = h;
        c->bytes += (json_int_t)raw;
    }
    mdb_cursor_close(cur);
    if (!st && rc != MDB_NOTFOUND)
        st = kh_store_mdb_err(err, rc, "walking the blobs");
    for (size_t i = 0; !st && i < dead.n; i++)
        st = kh_store_txn_del_blob(tx, &dead.v[i], err);
    if (!st)
        c->deleted = (json_int_t)dead.n;
out:
    free(refs.v);
    free(dead.v);
    return st;
}

kh_status kh_store_gc(kh_store *s, double grace_s, json_t **report, kh_err *err)
{
    *report = NULL;
    struct gc_ctx c = {.grace_s = grace_s};
    kh_status st = kh_store_update(s, do_gc, &c, err);
    if (st)
        return st;
    *report = json_pack("{s:I, s:I, s:I}", "deleted", c.deleted, "bytes", c.bytes, "kept",
                        c.kept);
    return KH_OK;
}

/* ---- backup ------------------------------------------------------------------------------ */
kh_status kh_store_backup(kh_store *s, const char *dest, kh_err *err)
{
    if (s->busy)
        return kh_err_set(err, KH_ESTATE, "backup inside a transaction");
    struct stat sb;
    if (stat(dest, &sb) == 0) {
        char f[4200];
        snprintf(f, sizeof f, "%s/data.mdb", dest);
        if (!S_ISDIR(sb.st_mode))
            return kh_err_set(err, KH_EINVAL, "backup destination %s is a file", dest);
        if (stat(f, &sb) == 0)
            return kh_err_set(err, KH_EINVAL,
                              "backup destination %s already holds a store; choose a new "
                              "directory",
                              dest);
    } else if (mkdir(dest, 0755) != 0) {
        return kh_err_set(err, KH_EIO, "cannot create %s: %s", dest, strerror(errno));
    }
    /* mdb_env_copy2 runs its own read transaction: a consistent snapshot
     * while the writer carries on; compaction drops free pages. */
    int rc = mdb_env_copy2(s->env, dest, MDB_CP_COMPACT);
    if (rc)
        return kh_store_mdb_err(err, rc, "copying the store");
    return KH_OK;
}
