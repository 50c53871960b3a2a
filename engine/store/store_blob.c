/* store_blob.c: content-addressed blobs (store.h): the blob header, zstd
 * compression, 1 MiB chunks for large blobs (the blob ops' writers, which
 * the write log applies), reading and streaming them back, the refusal of
 * bytes that carry an API key, and the one-call put and get.  The
 * transaction and its write log are store.c's. */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* ---- blobs -------------------------------------------------------------------------- */
static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int kh_store_blob_head(const MDB_val *v, int *fmt, uint64_t *raw_len, uint64_t *stored_at,
                       uint32_t *nchunks, uint32_t *chunk_size)
{
    const unsigned char *p = v->mv_data;
    if (v->mv_size < KH_BLOB_HDR || p[0] > KH_BLOB_CHUNKED)
        return 0;
    *fmt = p[0];
    *raw_len = get_u64(p + 1);
    *stored_at = get_u64(p + 9);
    *nchunks = 0;
    *chunk_size = 0;
    if (*fmt == KH_BLOB_CHUNKED) {
        if (v->mv_size != KH_BLOB_CHDR)
            return 0;
        *nchunks = get_u32(p + 17);
        *chunk_size = get_u32(p + 21);
        if (!*chunk_size || (uint64_t)*nchunks * *chunk_size < *raw_len ||
            (uint64_t)(*nchunks - 1) * *chunk_size >= *raw_len)
            return 0;
    }
    return 1;
}

static void chunk_key(const kh_hash *h, uint32_t i, unsigned char key[20])
{
    memcpy(key, h->b, 16);
    key[16] = (unsigned char)(i >> 24);
    key[17] = (unsigned char)(i >> 16);
    key[18] = (unsigned char)(i >> 8);
    key[19] = (unsigned char)i;
}

/* Put one value: hdr bytes then data compressed when that helps. */
static int put_compressed(kh_store_txn *tx, MDB_val *key, const unsigned char *hdr, size_t hn,
                          const void *data, size_t len, kh_err *err, int *zerr)
{
    kh_store *s = tx->s;
    size_t cn = ZSTD_compressCCtx(s->cctx, s->cbuf, s->cbuf_cap, data, len, 3);
    *zerr = 0;
    if (ZSTD_isError(cn)) {
        *zerr = 1;
        kh_err_set(err, KH_ESTORE, "zstd: %s", ZSTD_getErrorName(cn));
        return 0;
    }
    int raw = cn >= len;
    MDB_val v = {hn + (raw ? len : cn), NULL};
    int rc = mdb_put(tx->txn, tx->s->blobs, key, &v, MDB_RESERVE);
    if (rc)
        return rc;
    unsigned char *p = v.mv_data;
    memcpy(p, hdr, hn);
    p[0] = raw ? KH_BLOB_RAW : KH_BLOB_ZSTD;
    memcpy(p + hn, raw ? data : s->cbuf, raw ? len : cn);
    return 0;
}

/* The KH_OP_BLOB op's writer (kh_store_op.write): the blob's head and
 * chunks, unless it is there already. */
static kh_status blob_write(kh_store_txn *tx, const kh_store_op *op, int *full, kh_err *err)
{
    const kh_hash *h = &op->h;
    const void *data = op->data;
    size_t len = op->len;
    kh_store *s = tx->s;
    MDB_val key = {16, (void *)h->b}, v;
    int rc = mdb_get(tx->txn, s->blobs, &key, &v);
    if (rc == 0)
        return KH_OK; /* content-addressed: already there */
    if (rc != MDB_NOTFOUND)
        return kh_store_mdb_err(err, rc, "reading the blob table");
    unsigned char hdr[KH_BLOB_CHDR];
    hdr[0] = KH_BLOB_RAW;
    put_u64(hdr + 1, len);
    put_u64(hdr + 9, (uint64_t)kh_wall_now());
    int zerr;
    if (len <= KH_BLOB_CHUNK) {
        rc = put_compressed(tx, &key, hdr, KH_BLOB_HDR, data, len, err, &zerr);
        if (zerr)
            return KH_ESTORE;
    } else {
        uint32_t n = (uint32_t)((len + KH_BLOB_CHUNK - 1) / KH_BLOB_CHUNK);
        hdr[0] = KH_BLOB_CHUNKED;
        put_u32(hdr + 17, n);
        put_u32(hdr + 21, KH_BLOB_CHUNK);
        MDB_val hv = {KH_BLOB_CHDR, hdr};
        rc = mdb_put(tx->txn, s->blobs, &key, &hv, 0);
        for (uint32_t i = 0; rc == 0 && i < n; i++) {
            unsigned char ck[20], ch[1] = {0};
            chunk_key(h, i, ck);
            MDB_val cv = {20, ck};
            size_t off = (size_t)i * KH_BLOB_CHUNK;
            size_t cl = len - off < KH_BLOB_CHUNK ? len - off : KH_BLOB_CHUNK;
            rc = put_compressed(tx, &cv, ch, 1, (const char *)data + off, cl, err, &zerr);
            if (zerr)
                return KH_ESTORE;
        }
    }
    if (rc == MDB_MAP_FULL) {
        *full = 1;
        return KH_ESTORE;
    }
    if (rc)
        return kh_store_mdb_err(err, rc, "writing a blob");
    return KH_OK;
}

/* The KH_OP_DEL_BLOB op's writer: the head and every chunk. */
static kh_status blob_delete(kh_store_txn *tx, const kh_store_op *op, int *full, kh_err *err)
{
    const kh_hash *h = &op->h;
    MDB_val key = {16, (void *)h->b}, v;
    int rc = mdb_get(tx->txn, tx->s->blobs, &key, &v);
    if (rc == MDB_NOTFOUND)
        return KH_OK;
    if (rc)
        return kh_store_mdb_err(err, rc, "reading a blob");
    int fmt;
    uint64_t raw, at;
    uint32_t n = 0, cs;
    if (!kh_store_blob_head(&v, &fmt, &raw, &at, &n, &cs))
        n = 0;
    rc = mdb_del(tx->txn, tx->s->blobs, &key, NULL);
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        unsigned char ck[20];
        chunk_key(h, i, ck);
        MDB_val cv = {20, ck};
        rc = mdb_del(tx->txn, tx->s->blobs, &cv, NULL);
        if (rc == MDB_NOTFOUND)
            rc = 0;
    }
    if (rc == MDB_MAP_FULL) {
        *full = 1;
        return KH_ESTORE;
    }
    return rc ? kh_store_mdb_err(err, rc, "deleting a blob") : KH_OK;
}

kh_status kh_store_txn_put_blob(kh_store_txn *tx, const void *data, size_t len, kh_hash *out,
                                kh_err *err)
{
    kh_status st = kh_store_need_write(tx, err);
    if (st)
        return st;
    if (!data && len)
        return kh_err_set(err, KH_EINVAL, "put_blob: NULL data");
    kh_hash h;
    kh_hash_bytes(data ? data : "", len, &h);
    if (out)
        *out = h;
    const char *sec = kh_store_find_secret(tx->s, data ? data : "", len);
    if (sec) {
        kh_err_set(err, KH_EINVAL,
                   "refusing to store a blob that contains the value of $%s (an API key "
                   "must never be archived)",
                   sec);
        return kh_store_tx_fail(tx, KH_EINVAL, err);
    }
    kh_store_op op = {
        .kind = KH_OP_BLOB, .write = blob_write, .data = data ? data : "", .len = len, .h = h};
    return kh_store_exec_op(tx, &op, err);
}

kh_status kh_store_txn_put_blob_copy(kh_store_txn *tx, const void *data, size_t len,
                                     kh_hash *out, kh_err *err)
{
    kh_status st = kh_store_need_write(tx, err);
    if (st)
        return st;
    if (!data && len)
        return kh_err_set(err, KH_EINVAL, "put_blob: NULL data");
    if (tx->nown == tx->capown) {
        size_t nc = tx->capown ? tx->capown * 2 : 16;
        void **n = realloc(tx->own, nc * sizeof *n);
        if (!n)
            return kh_store_tx_fail(tx, kh_err_set(err, KH_ENOMEM, "out of memory"), err);
        tx->own = n;
        tx->capown = nc;
    }
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return kh_store_tx_fail(
            tx, kh_err_set(err, KH_ENOMEM, "out of memory copying a blob of %zu bytes", len),
            err);
    if (len)
        memcpy(copy, data, len);
    tx->own[tx->nown++] = copy; /* freed when the scope ends, whatever happens */
    return kh_store_txn_put_blob(tx, copy, len, out, err);
}

kh_status kh_store_txn_del_blob(kh_store_txn *tx, const kh_hash *h, kh_err *err)
{
    kh_status st = kh_store_need_write(tx, err);
    if (st)
        return st;
    kh_store_op op = {.kind = KH_OP_DEL_BLOB, .write = blob_delete, .h = *h};
    return kh_store_exec_op(tx, &op, err);
}

static kh_status blob_head(kh_store_txn *tx, const kh_hash *h, MDB_val *v, int *fmt,
                           uint64_t *raw, uint32_t *n, uint32_t *cs, kh_err *err)
{
    if (tx->st)
        return kh_store_tx_sticky(tx, err);
    MDB_val key = {16, (void *)h->b};
    int rc = mdb_get(tx->txn, tx->s->blobs, &key, v);
    char hx[33];
    kh_hash_hex(h, hx);
    if (rc == MDB_NOTFOUND)
        return kh_err_set(err, KH_ENOTFOUND, "no blob %s", hx);
    if (rc)
        return kh_store_mdb_err(err, rc, "reading a blob");
    uint64_t at;
    if (!kh_store_blob_head(v, fmt, raw, &at, n, cs))
        return kh_err_set(err, KH_ECORRUPT, "blob %s: malformed header", hx);
    return KH_OK;
}

kh_status kh_store_txn_has_blob(kh_store_txn *tx, const kh_hash *h, int *has, kh_err *err)
{
    if (tx->st)
        return kh_store_tx_sticky(tx, err);
    MDB_val key = {16, (void *)h->b}, v;
    int rc = mdb_get(tx->txn, tx->s->blobs, &key, &v);
    if (rc && rc != MDB_NOTFOUND)
        return kh_store_mdb_err(err, rc, "reading a blob");
    *has = rc == 0;
    return KH_OK;
}

kh_status kh_store_txn_blob_size(kh_store_txn *tx, const kh_hash *h, size_t *len, kh_err *err)
{
    MDB_val v;
    int fmt;
    uint64_t raw;
    uint32_t n, cs;
    kh_status st = blob_head(tx, h, &v, &fmt, &raw, &n, &cs, err);
    if (st)
        return st;
    if (raw > SIZE_MAX)
        return kh_err_set(err, KH_ECORRUPT, "blob size out of range");
    *len = (size_t)raw;
    return KH_OK;
}

/* Decode one stored piece (format byte + payload) of raw size want into dst. */
static kh_status decode_piece(kh_store *s, int fmt, const unsigned char *p, size_t n, void *dst,
                              size_t want, const char *hx, kh_err *err)
{
    if (fmt == KH_BLOB_RAW) {
        if (n != want)
            return kh_err_set(err, KH_ECORRUPT, "blob %s: stored %zu bytes, header says %zu",
                              hx, n, want);
        memcpy(dst, p, n);
        return KH_OK;
    }
    if (fmt != KH_BLOB_ZSTD)
        return kh_err_set(err, KH_ECORRUPT, "blob %s: unknown piece format %d", hx, fmt);
    size_t r = ZSTD_decompressDCtx(s->dctx, dst, want, p, n);
    if (ZSTD_isError(r) || r != want)
        return kh_err_set(err, KH_ECORRUPT, "blob %s: does not decompress (%s)", hx,
                          ZSTD_isError(r) ? ZSTD_getErrorName(r) : "wrong size");
    return KH_OK;
}

/* Walk the pieces of a blob: each decoded into dst+off when dst, else into
 * the scratch buffer and handed to fn. */
static kh_status blob_walk(kh_store_txn *tx, const kh_hash *h, void *dst, size_t cap,
                           kh_store_sink fn, void *arg, kh_err *err)
{
    kh_store *s = tx->s;
    MDB_val v;
    int fmt;
    uint64_t raw;
    uint32_t n, cs;
    kh_status st = blob_head(tx, h, &v, &fmt, &raw, &n, &cs, err);
    if (st)
        return st;
    char hx[33];
    kh_hash_hex(h, hx);
    if (dst && cap < raw)
        return kh_err_set(err, KH_EINVAL, "blob %s: buffer of %zu bytes for %llu", hx, cap,
                          (unsigned long long)raw);
    if (fmt != KH_BLOB_CHUNKED) {
        const unsigned char *p = v.mv_data;
        if (raw > KH_BLOB_CHUNK)
            return kh_err_set(err, KH_ECORRUPT, "blob %s: unchunked but %llu bytes", hx,
                              (unsigned long long)raw);
        if (!dst && fmt == KH_BLOB_RAW) {
            if (v.mv_size - KH_BLOB_HDR != raw)
                return kh_err_set(err, KH_ECORRUPT, "blob %s: stored size mismatch", hx);
            return fn(arg, p + KH_BLOB_HDR, raw, err);
        }
        st = decode_piece(s, fmt, p + KH_BLOB_HDR, v.mv_size - KH_BLOB_HDR,
                          dst ? dst : s->dbuf, raw, hx, err);
        if (st || dst)
            return st;
        return fn(arg, s->dbuf, raw, err);
    }
    for (uint32_t i = 0; i < n; i++) {
        unsigned char ck[20];
        chunk_key(h, i, ck);
        MDB_val key = {20, ck}, cv;
        int rc = mdb_get(tx->txn, s->blobs, &key, &cv);
        if (rc == MDB_NOTFOUND)
            return kh_err_set(err, KH_ECORRUPT, "blob %s: chunk %u of %u missing", hx, i, n);
        if (rc)
            return kh_store_mdb_err(err, rc, "reading a blob chunk");
        if (cv.mv_size < 1)
            return kh_err_set(err, KH_ECORRUPT, "blob %s: empty chunk %u", hx, i);
        size_t off = (size_t)i * cs;
        size_t want = raw - off < cs ? raw - off : cs;
        if (want > KH_BLOB_CHUNK && !dst)
            return kh_err_set(err, KH_ECORRUPT, "blob %s: chunk size %u too large", hx, cs);
        const unsigned char *p = cv.mv_data;
        void *to = dst ? (void *)((char *)dst + off) : (void *)s->dbuf;
        st = decode_piece(s, p[0], p + 1, cv.mv_size - 1, to, want, hx, err);
        if (!st && !dst)
            st = fn(arg, s->dbuf, want, err);
        if (st)
            return st;
    }
    return KH_OK;
}

kh_status kh_store_txn_read_blob(kh_store_txn *tx, const kh_hash *h, void *dst, size_t cap,
                                 kh_err *err)
{
    return blob_walk(tx, h, dst, cap, NULL, NULL, err);
}

kh_status kh_store_txn_stream_blob(kh_store_txn *tx, const kh_hash *h, kh_store_sink fn,
                                   void *arg, kh_err *err)
{
    return blob_walk(tx, h, NULL, 0, fn, arg, err);
}

/* ---- one-call wrappers --------------------------------------------------------------- */
struct blob_arg {
    const void *data;
    size_t len;
    kh_hash *h;
    void **out;
    size_t *out_len;
};

static kh_status do_put_blob(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct blob_arg *a = arg;
    return kh_store_txn_put_blob(tx, a->data, a->len, a->h, err);
}

kh_status kh_store_put_blob(kh_store *s, const void *data, size_t len, kh_hash *out,
                            kh_err *err)
{
    kh_hash h;
    struct blob_arg a = {data, len, out ? out : &h, NULL, NULL};
    if (!s->readonly && !s->busy) {
        int rc = kh_store_grow_map(s, len + len / 8 + (1u << 20));
        if (rc)
            return kh_store_mdb_err(err, rc, "growing the store map");
    }
    return kh_store_update(s, do_put_blob, &a, err);
}

static kh_status do_get_blob(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct blob_arg *a = arg;
    size_t n;
    kh_status st = kh_store_txn_blob_size(tx, a->h, &n, err);
    if (st)
        return st;
    void *buf = malloc(n ? n : 1);
    if (!buf)
        return kh_err_set(err, KH_ENOMEM, "out of memory reading a blob of %zu bytes", n);
    st = kh_store_txn_read_blob(tx, a->h, buf, n, err);
    if (st) {
        free(buf);
        return st;
    }
    *a->out = buf;
    *a->out_len = n;
    return KH_OK;
}

kh_status kh_store_get_blob(kh_store *s, const kh_hash *h, void **data, size_t *len,
                            kh_err *err)
{
    *data = NULL;
    *len = 0;
    struct blob_arg a = {NULL, 0, (kh_hash *)h, data, len};
    return kh_store_view(s, do_get_blob, &a, err);
}
