/* store_tools.c: whole-store walks over the artifact store (see store.h):
 * stats, verify (hashes, references, indices), gc of unreferenced blobs, a
 * compacted backup, export (the JSONL import format, FlashInfer-Bench Trace
 * JSONL) and import.  Every walk runs inside one scoped transaction of
 * store.c, so it sees one consistent snapshot. */
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
struct hashset {
    kh_hash *v;
    size_t n, cap;
};

static kh_status collect_ref(void *arg, const char *field, const char *value, kh_err *err)
{
    (void)field;
    struct hashset *hs = arg;
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

static int hash_cmp(const void *a, const void *b) { return memcmp(a, b, 16); }

struct gc_ctx {
    double grace_s;
    json_int_t deleted, bytes, kept;
};

static kh_status do_gc(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct gc_ctx *c = arg;
    kh_store *s = tx->s;
    struct hashset refs = {0}, dead = {0};
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
        st = kh_store_each_blob_ref(rec, collect_ref, &refs, err);
        json_decref(rec);
    }
    mdb_cursor_close(cur);
    if (!st && rc != MDB_NOTFOUND)
        st = kh_store_mdb_err(err, rc, "walking the records");
    if (st)
        goto out;
    qsort(refs.v, refs.n, sizeof *refs.v, hash_cmp);
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
        if (bsearch(k.mv_data, refs.v, refs.n, sizeof *refs.v, hash_cmp) ||
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

/* ---- base64 --------------------------------------------------------------------------------- */
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

struct b64_out {
    FILE *f;
    unsigned char carry[3];
    int nc;
};

static kh_status b64_sink(void *arg, const void *data, size_t len, kh_err *err)
{
    struct b64_out *o = arg;
    const unsigned char *p = data;
    char buf[4096];
    size_t bn = 0;
    for (size_t i = 0; i < len; i++) {
        o->carry[o->nc++] = p[i];
        if (o->nc == 3) {
            buf[bn++] = B64[o->carry[0] >> 2];
            buf[bn++] = B64[(o->carry[0] & 3) << 4 | o->carry[1] >> 4];
            buf[bn++] = B64[(o->carry[1] & 15) << 2 | o->carry[2] >> 6];
            buf[bn++] = B64[o->carry[2] & 63];
            o->nc = 0;
            if (bn > sizeof buf - 4) {
                if (fwrite(buf, 1, bn, o->f) != bn)
                    return kh_err_set(err, KH_EIO, "write failed: %s", strerror(errno));
                bn = 0;
            }
        }
    }
    if (bn && fwrite(buf, 1, bn, o->f) != bn)
        return kh_err_set(err, KH_EIO, "write failed: %s", strerror(errno));
    return KH_OK;
}

static void b64_finish(struct b64_out *o)
{
    if (o->nc == 0)
        return;
    unsigned char a = o->carry[0], b = o->nc > 1 ? o->carry[1] : 0;
    char q[4] = {B64[a >> 2], B64[(a & 3) << 4 | b >> 4], o->nc > 1 ? B64[(b & 15) << 2] : '=',
                 '='};
    fwrite(q, 1, 4, o->f);
    o->nc = 0;
}

static unsigned char *b64_decode(const char *s, size_t n, size_t *out_len)
{
    if (n % 4)
        return NULL;
    unsigned char *out = malloc(n / 4 * 3 + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++) {
            const char *p = s[i + j] == '=' ? NULL : strchr(B64, s[i + j]);
            if (s[i + j] == '=' && i + 4 == n && j >= 2)
                v[j] = -1;
            else if (!p || !s[i + j]) {
                free(out);
                return NULL;
            } else
                v[j] = (int)(p - B64);
        }
        if (v[2] < 0 && v[3] >= 0) {
            free(out);
            return NULL;
        }
        out[o++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
        if (v[2] >= 0)
            out[o++] = (unsigned char)((v[1] & 15) << 4 | v[2] >> 2);
        if (v[3] >= 0)
            out[o++] = (unsigned char)((v[2] & 3) << 6 | v[3]);
    }
    *out_len = o;
    return out;
}

/* ---- export ---------------------------------------------------------------------------------- */
struct export_ctx {
    const kh_store_export_opts *o;
    const char *task;
    FILE *f;
    size_t count, marked;
};

static kh_status write_blob_line(kh_store_txn *tx, const kh_hash *h, FILE *f, kh_err *err)
{
    size_t n;
    kh_status st = kh_store_txn_blob_size(tx, h, &n, err);
    if (st)
        return st;
    char hx[33];
    kh_hash_hex(h, hx);
    fprintf(f, "{\"blob\":\"%s\",\"size\":%zu,\"base64\":\"", hx, n);
    struct b64_out o = {.f = f};
    st = kh_store_txn_stream_blob(tx, h, b64_sink, &o, err);
    if (st)
        return st;
    b64_finish(&o);
    if (fputs("\"}\n", f) == EOF)
        return kh_err_set(err, KH_EIO, "write failed: %s", strerror(errno));
    return KH_OK;
}

static int wanted(const json_t *rec, const char *task)
{
    if (!task)
        return 1;
    const char *id = json_string_value(json_object_get(rec, "id"));
    const char *t = json_string_value(json_object_get(rec, "task"));
    return (id && !strcmp(id, task)) || (t && !strcmp(t, task));
}

static kh_status export_jsonl(kh_store_txn *tx, struct export_ctx *c, kh_err *err)
{
    kh_store *s = tx->s;
    MDB_cursor *cur;
    MDB_val k, v;
    kh_status st = KH_OK;
    int rc;
    struct hashset refs = {0};
    /* blobs first, so an import can check every record's references */
    if (c->task) {
        if ((rc = mdb_cursor_open(tx->txn, s->records, &cur)))
            return kh_store_mdb_err(err, rc, "opening a cursor");
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !st;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            json_t *rec = kh_store_decode_record(s, &v, err);
            if (!rec) {
                st = KH_ECORRUPT;
                break;
            }
            if (wanted(rec, c->task))
                st = kh_store_each_blob_ref(rec, collect_ref, &refs, err);
            json_decref(rec);
        }
        mdb_cursor_close(cur);
        qsort(refs.v, refs.n, sizeof *refs.v, hash_cmp);
        for (size_t i = 0; !st && i < refs.n; i++) {
            if (i && !memcmp(&refs.v[i], &refs.v[i - 1], 16))
                continue;
            st = write_blob_line(tx, &refs.v[i], c->f, err);
        }
        free(refs.v);
    } else {
        if ((rc = mdb_cursor_open(tx->txn, s->blobs, &cur)))
            return kh_store_mdb_err(err, rc, "opening a cursor");
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !st;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            if (k.mv_size != 16)
                continue;
            kh_hash h;
            memcpy(h.b, k.mv_data, 16);
            st = write_blob_line(tx, &h, c->f, err);
        }
        mdb_cursor_close(cur);
    }
    if (st)
        return st;
    if ((rc = mdb_cursor_open(tx->txn, s->records, &cur)))
        return kh_store_mdb_err(err, rc, "opening a cursor");
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && !st;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        json_t *rec = kh_store_decode_record(s, &v, err);
        if (!rec) {
            st = KH_ECORRUPT;
            break;
        }
        if (wanted(rec, c->task)) {
            json_t *line = json_pack("{s:O}", "record", rec);
            if (json_dumpf(line, c->f, JSON_COMPACT) || fputc('\n', c->f) == EOF)
                st = kh_err_set(err, KH_EIO, "write failed: %s", strerror(errno));
            json_decref(line);
            c->count++;
        }
        json_decref(rec);
    }
    mdb_cursor_close(cur);
    return st;
}

#define FIB_LOG_MAX (5u << 20) /* FlashInfer-Bench truncates logs at 5 MiB */

/* An official-protocol timing: a run's "official" gate step, or `khlua eval
 * --protocol official` (no purpose).  Everything else a run measures
 * (screening, paired comparisons, sweeps, correctness-only seeds) is a
 * gate measurement: a candidate the gate rejected may have PASSED those. */
static int official(const json_t *rec)
{
    const char *purpose = json_string_value(json_object_get(rec, "purpose"));
    if (purpose)
        return !strcmp(purpose, "official");
    const char *proto = json_string_value(json_object_get(rec, "protocol"));
    return proto && !strcmp(proto, "official");
}

/* One FlashInfer-Bench Trace for an evaluation record (reference/fib-harness.md);
 * mark: a gate measurement, said at the head of its log. */
static json_t *fib_trace(kh_store_txn *tx, const json_t *rec, int mark)
{
    const char *def = json_string_value(json_object_get(rec, "definition"));
    const char *task = json_string_value(json_object_get(rec, "task"));
    if (!def && task && !strncmp(task, "task-", 5))
        def = task + 5;
    json_t *workload = json_object_get(rec, "workload");
    json_t *sol = json_object_get(rec, "solution");
    if (!sol)
        sol = json_object_get(rec, "candidate");
    json_t *ev = json_deep_copy(json_object_get(rec, "evaluation"));
    if (!json_is_object(ev)) {
        json_decref(ev);
        ev = json_object();
    }
    if (!json_object_get(ev, "status"))
        json_object_set(ev, "status", json_object_get(rec, "status"));
    if (!json_object_get(ev, "timestamp"))
        json_object_set(ev, "timestamp", json_object_get(rec, "created_at"));
    if (!json_object_get(ev, "environment")) {
        json_t *env = json_object_get(rec, "environment");
        json_object_set_new(ev, "environment",
                            env ? json_incref(env)
                                : json_pack("{s:s, s:{}}", "hardware", "unknown", "libs"));
    }
    if (!json_object_get(ev, "log")) {
        const char *lb = json_string_value(json_object_get(rec, "log_blob"));
        kh_hash h;
        kh_err e;
        size_t n;
        char *text = NULL;
        if (lb && !kh_hash_parse(lb, &h, &e) && !kh_store_txn_blob_size(tx, &h, &n, &e)) {
            char *raw = malloc(n ? n : 1);
            if (raw && !kh_store_txn_read_blob(tx, &h, raw, n, &e))
                text = kh_utf8_sanitize(raw, n < FIB_LOG_MAX ? n : FIB_LOG_MAX, NULL);
            free(raw);
        }
        json_object_set_new(ev, "log", json_string(text ? text : ""));
        free(text);
    }
    if (mark) {
        const char *purpose = json_string_value(json_object_get(rec, "purpose"));
        const char *proto = json_string_value(json_object_get(rec, "protocol"));
        const char *old = json_string_value(json_object_get(ev, "log"));
        static const char head[] = "[khlua gate measurement, not an official-protocol timing: "
                                   "purpose %s, protocol %s]\n%s";
        size_t n = sizeof head + 128 + (old ? strlen(old) : 0);
        char *log = malloc(n);
        if (log)
            snprintf(log, n, head, purpose ? purpose : "-", proto ? proto : "-", old ? old : "");
        json_object_set_new(ev, "log", json_string(log ? log : "[khlua gate measurement]"));
        free(log);
    }
    return json_pack("{s:s?, s:O?, s:O?, s:o}", "definition", def, "workload", workload,
                     "solution", sol, "evaluation", ev);
}

static kh_status export_fib(kh_store_txn *tx, struct export_ctx *c, kh_err *err)
{
    kh_store_filter q = {.type = "evaluation", .task = c->task, .run = c->o->run};
    json_t *arr;
    kh_status st = kh_store_txn_query(tx, &q, 0, &arr, err);
    if (st)
        return st;
    /* traces are appended in time order: oldest first */
    for (size_t i = json_array_size(arr); !st && i-- > 0;) {
        const json_t *rec = json_array_get(arr, i);
        int off = !official(rec);
        if (off && !c->o->gate)
            continue;
        json_t *line = fib_trace(tx, rec, off);
        if (!line || json_dumpf(line, c->f, JSON_COMPACT) || fputc('\n', c->f) == EOF)
            st = kh_err_set(err, line ? KH_EIO : KH_ENOMEM, "writing a trace failed");
        json_decref(line);
        c->count++;
        c->marked += off;
    }
    json_decref(arr);
    return st;
}

static kh_status do_export(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct export_ctx *c = arg;
    return !strcmp(c->o->format, "jsonl") ? export_jsonl(tx, c, err) : export_fib(tx, c, err);
}

kh_status kh_store_export(kh_store *s, const kh_store_export_opts *o, FILE *f, size_t *count,
                          size_t *marked, kh_err *err)
{
    const char *format = o->format ? o->format : "jsonl";
    if (strcmp(format, "jsonl") && strcmp(format, "fib-trace"))
        return kh_err_set(err, KH_EINVAL, "unknown export format '%s' (jsonl or fib-trace)",
                          format);
    if (!strcmp(format, "jsonl") && (o->run || o->gate))
        return kh_err_set(err, KH_EINVAL, "--run and --gate select traces: they go with "
                                          "--format fib-trace (jsonl exports whole tasks)");
    kh_store_export_opts oo = *o;
    oo.format = format;
    if (o->run) {
        /* a run that is not there is said, not an empty file */
        json_t *r = NULL;
        kh_status gs = kh_store_get(s, o->run, &r, err);
        const char *t = r ? json_string_value(json_object_get(r, "type")) : NULL;
        char type[64];
        snprintf(type, sizeof type, "%s", t ? t : "typeless");
        json_decref(r);
        if (gs == KH_ENOTFOUND)
            return kh_err_set(err, KH_ENOTFOUND, "no run %s in the store (khlua store ls --type "
                                                 "run lists them)", o->run);
        if (gs)
            return gs;
        if (strcmp(type, "run"))
            return kh_err_set(err, KH_EINVAL, "%s is a %s record, not a run", o->run, type);
    }
    struct export_ctx c = {&oo, o->task, f, 0, 0};
    kh_status st = kh_store_view(s, do_export, &c, err);
    if (!st && fflush(f) != 0)
        st = kh_err_set(err, KH_EIO, "write failed: %s", strerror(errno));
    if (count)
        *count = c.count;
    if (marked)
        *marked = c.marked;
    return st;
}

/* ---- import ---------------------------------------------------------------------------------- */
#define IMPORT_BATCH 2000
#define IMPORT_BATCH_BYTES (64u << 20)

struct import_item {
    json_t *rec;          /* a record, or NULL for a blob */
    unsigned char *data;  /* a blob's bytes (kept until the batch commits) */
    size_t len;
};

struct import_ctx {
    struct import_item *items;
    size_t n;
    json_int_t records, blobs, skipped;
};

static kh_status do_import(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct import_ctx *c = arg;
    for (size_t i = 0; i < c->n; i++) {
        struct import_item *it = &c->items[i];
        kh_status st;
        if (!it->rec) {
            st = kh_store_txn_put_blob(tx, it->data, it->len, NULL, err);
            if (st)
                return st;
            c->blobs++;
            continue;
        }
        const char *id = json_string_value(json_object_get(it->rec, "id"));
        json_t *old = NULL;
        kh_err e;
        if (id && kh_store_txn_get(tx, id, &old, &e) == KH_OK) {
            int same = json_equal(old, it->rec);
            json_decref(old);
            if (!same)
                return kh_err_set(err, KH_ESTATE,
                                  "record %s is already in the store with different content",
                                  id);
            c->skipped++;
            continue;
        }
        st = kh_store_txn_put(tx, it->rec, KH_STORE_NOREFCHECK, NULL, err);
        if (st)
            return st;
        c->records++;
    }
    return KH_OK;
}

static void import_clear(struct import_ctx *c)
{
    for (size_t i = 0; i < c->n; i++) {
        json_decref(c->items[i].rec);
        free(c->items[i].data);
    }
    c->n = 0;
}

kh_status kh_store_import(kh_store *s, FILE *f, json_t **report, kh_err *err)
{
    *report = NULL;
    struct import_ctx c = {0};
    c.items = calloc(IMPORT_BATCH, sizeof *c.items);
    if (!c.items)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    char *line = NULL;
    size_t cap = 0, bytes = 0;
    ssize_t len;
    long lineno = 0;
    /* one sync at the end instead of one per batch (the file can be imported
     * again: what a machine crash in the middle loses is recoverable) */
    int own_bulk = !kh_store_in_bulk(s);
    kh_status st = own_bulk ? kh_store_bulk_begin(s, err) : KH_OK;
    if (st) {
        free(c.items);
        return st;
    }
    while (!st && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len == 0 || line[0] == '\n')
            continue;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)len, 0, &je);
        if (!json_is_object(j)) {
            st = kh_err_set(err, KH_EPARSE, "line %ld: %s", lineno,
                            j ? "not a JSON object" : je.text);
            json_decref(j);
            break;
        }
        struct import_item it = {0};
        json_t *rec = json_object_get(j, "record");
        const char *bh = json_string_value(json_object_get(j, "blob"));
        if (json_is_object(rec)) {
            it.rec = json_incref(rec);
        } else if (bh) {
            json_t *b64 = json_object_get(j, "base64");
            kh_hash want, got;
            if (!json_is_string(b64) || kh_hash_parse(bh, &want, err)) {
                st = kh_err_set(err, KH_EPARSE, "line %ld: a blob line needs 'blob' (hash) and "
                                                "'base64'",
                                lineno);
            } else if (!(it.data = b64_decode(json_string_value(b64), json_string_length(b64),
                                               &it.len))) {
                st = kh_err_set(err, KH_EPARSE, "line %ld: invalid base64", lineno);
            } else {
                kh_hash_bytes(it.data, it.len, &got);
                if (memcmp(got.b, want.b, 16)) {
                    st = kh_err_set(err, KH_ECORRUPT,
                                    "line %ld: blob %s: the bytes do not match the hash",
                                    lineno, bh);
                    free(it.data);
                    it.data = NULL;
                }
            }
            bytes += it.len;
        } else {
            st = kh_err_set(err, KH_EPARSE, "line %ld: neither a 'record' nor a 'blob' line",
                            lineno);
        }
        json_decref(j);
        if (st)
            break;
        c.items[c.n++] = it;
        if (c.n == IMPORT_BATCH || bytes >= IMPORT_BATCH_BYTES) {
            st = kh_store_update(s, do_import, &c, err);
            import_clear(&c);
            bytes = 0;
        }
    }
    free(line);
    if (!st && ferror(f))
        st = kh_err_set(err, KH_EIO, "reading the import file: %s", strerror(errno));
    if (!st && c.n)
        st = kh_store_update(s, do_import, &c, err);
    import_clear(&c);
    free(c.items);
    if (own_bulk) { /* the sync runs whether or not a batch failed */
        kh_err e2;
        kh_status se = kh_store_bulk_end(s, &e2);
        if (!st && se) {
            *err = e2;
            st = se;
        }
    }
    if (st)
        return st;
    *report = json_pack("{s:I, s:I, s:I}", "records", c.records, "blobs", c.blobs, "skipped",
                        c.skipped);
    return KH_OK;
}
