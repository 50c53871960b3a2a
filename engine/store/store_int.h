/* store_int.h: what the store's own files (store.c, store_blob.c,
 * store_record.c, store_index.c, store_query.c, store_tools.c,
 * store_export.c) share and nothing else: the store and transaction structs, the on-disk encodings
 * (blob header, index keys), the record rules and the steps of a write.  Not
 * for other modules (run.c, evaluation.c, candidate.c included): use store.h. */
#ifndef KH_STORE_INT_H
#define KH_STORE_INT_H

#include "store/store.h"

#include <lmdb.h>
#include <sys/types.h>
#include <zstd.h>

#define KH_BLOB_CHUNK (1u << 20) /* raw bytes per chunk of a large blob */
#define KH_BLOB_HDR 17           /* format(1) raw_len(8) stored_at(8) */
#define KH_BLOB_CHDR 25          /* + nchunks(4) chunk_size(4) */
enum { KH_BLOB_RAW = 0, KH_BLOB_ZSTD = 1, KH_BLOB_CHUNKED = 2 };

/* A put flag beyond store.h's: import skips the reference existence checks
 * (its records may come in any order; verify checks them afterwards). */
#define KH_STORE_NOREFCHECK 0x100

#define KH_IDX_KEY_MAX 511
#define KH_IDX_MAX 5 /* index entries per record at most: T, S, k, r, c */

/* A growable byte buffer. */
typedef struct kh_sbuf {
    char *p;
    size_t n, cap;
} kh_sbuf;
struct kh_store {
    char *path;
    MDB_env *env;
    MDB_dbi meta, blobs, records, index;
    int readonly;
    int nosync; /* opened with MDB_NOSYNC: a bulk's end leaves it on */
    int bulk;   /* kh_store_bulk_begin .. end: MDB_NOSYNC until end */
    size_t map_size;
    int busy; /* a transaction scope is open */
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    unsigned char *cbuf; /* compressBound(KH_BLOB_CHUNK) */
    size_t cbuf_cap;
    unsigned char *dbuf; /* KH_BLOB_CHUNK */
    char *secret[3];
    size_t secret_len[3];
    const char *secret_name[3];
    int64_t last_id_us;
    uint32_t id_salt;
    dev_t dev; /* the directory, for the one-open-per-process registry */
    ino_t ino;
    pid_t pid; /* the process that opened it (a forked child inherits the list) */
    struct kh_store *next_open;
    kh_sbuf log; /* a write txn's record log, kept between txns to reuse it */
    struct kh_refseen *seen; /* KH_REFSEEN slots, allocated on first use */
    uint32_t seen_gen;       /* bumped per write txn: older slots are stale */
};

/* Record ids a write txn has already found in the store (for the reference
 * check of later puts).  Nothing deletes a record inside a txn, so a hit
 * stays true until the txn ends. */
#define KH_REFSEEN 4096
struct kh_refseen {
    uint32_t gen;
    unsigned char len;
    char id[KH_STORE_ID_MAX];
};

kh_status kh_sbuf_reserve(kh_sbuf *b, size_t extra, kh_err *err);
void kh_sbuf_free(kh_sbuf *b);

/* store_json.c: append j's compact JSON to b (KH_EINVAL for NaN, infinity,
 * invalid UTF-8, nesting past 2048; b is left as it was on failure). */
kh_status kh_store_json_dump(const json_t *j, kh_sbuf *b, kh_err *err);
/* Parse one JSON value (a stored record); NULL with KH_ECORRUPT in err. */
json_t *kh_store_json_parse(const void *data, size_t n, kh_err *err);

enum { KH_OP_RECORD = 1, KH_OP_BLOB, KH_OP_DEL_BLOB, KH_OP_DEL_RECORD };
typedef struct kh_store_op {
    int kind;
    int flags;
    /* applies the op to LMDB, first and in a replay (MDB_MAP_FULL sets
     * *full): given by the file that logs the op (store_record.c,
     * store_blob.c), so the log (store.c) calls none of them */
    kh_status (*write)(kh_store_txn *tx, const struct kh_store_op *op, int *full, kh_err *err);
    /* OP_RECORD: "id\0text" at this offset of the txn's log buffer; one
     * buffer for the whole txn, no allocation per record */
    size_t off, idlen, textlen;
    const json_t *live; /* OP_RECORD, first run only: the parsed record (borrowed) */
    const struct kh_rec_keys *keys; /* first run only: live's index fields */
    const void *data; /* OP_BLOB: borrowed, valid until update returns */
    size_t len;
    kh_hash h;
} kh_store_op;

struct kh_store_txn {
    kh_store *s;
    MDB_txn *txn;
    int write;
    kh_status st; /* sticky */
    kh_err err;
    kh_store_op *ops;
    size_t nops, capops;
    kh_sbuf log; /* the record texts of ops */
    /* write txn: cursors reused by puts, 0 records, 1 index.  A positioned
     * cursor lets LMDB skip the descent from the root when the next key falls
     * in the same leaf (ids are time ordered; index entries are written
     * sorted).  Opened on first use; LMDB frees them when the txn ends. */
    MDB_cursor *wcur[2];
    /* write txn: index entries not yet in LMDB, each "klen(2) vlen(1) key
     * value" at an offset of pend; written in key order before a query, an
     * index delete and the commit.  A task's or a candidate's entries are
     * scattered over the index: in key order a batch walks it once, leaf by
     * leaf, instead of a descent into a cold leaf per put. */
    kh_sbuf pend;
    size_t *pofs, npend, cappend;
    int growths;
    /* allocations freed when the scope ends (kh_store_txn_put_blob_copy) */
    void **own;
    size_t nown, capown;
};

/* The fields of a record the indices use (pointers into its JSON). */
typedef struct kh_rec_keys {
    const char *type, *status, *task, *run, *candidate;
    int64_t t_us;
} kh_rec_keys;

/* Fill k from rec; KH_EINVAL with a message when a field is malformed. */
kh_status kh_store_rec_keys(const json_t *rec, kh_rec_keys *k, kh_err *err);
/* The index keys of one record: returns their number (<= KH_IDX_MAX). */
size_t kh_store_index_keys(const kh_rec_keys *k, const char *id,
                           unsigned char keys[][KH_IDX_KEY_MAX], size_t lens[]);
/* Parse an index key: *id points into key (not NUL-terminated, idlen bytes).
 * Returns 0 if the key is malformed. */
int kh_store_index_parse(const unsigned char *key, size_t n, const char **id, size_t *idlen,
                         int64_t *t_us);
/* Is name one of the record types? */
int kh_store_known_type(const char *name);
/* Call fn for every blob reference (a "*_blob" string or a "blobs" array
 * entry) anywhere in rec; stops at the first non-OK status. */
typedef kh_status (*kh_store_ref_fn)(void *arg, const char *field, const char *value,
                                     kh_err *err);
kh_status kh_store_each_blob_ref(const json_t *rec, kh_store_ref_fn fn, void *arg, kh_err *err);
/* Call fn for every record reference (a top-level field named after a type,
 * or "parent" / "incumbent"); value is the referenced id. */
kh_status kh_store_each_record_ref(const json_t *rec, kh_store_ref_fn fn, void *arg,
                                   kh_err *err);
/* Parse a stored record value (compact JSON text); NULL with err if it is not a JSON object. */
json_t *kh_store_decode_record(kh_store *s, const MDB_val *v, kh_err *err);

/* Map an LMDB error to a status, with a message naming what failed. */
kh_status kh_store_mdb_err(kh_err *err, int rc, const char *what);
/* Begin a read transaction, handling a map grown by another process. */
int kh_store_begin_read(kh_store *s, MDB_txn **txn);

/* Delete a blob (head and chunks) inside a write txn (logged for replay). */
kh_status kh_store_txn_del_blob(kh_store_txn *tx, const kh_hash *h, kh_err *err);
/* Parse a blob head value. */
int kh_store_blob_head(const MDB_val *v, int *fmt, uint64_t *raw_len, uint64_t *stored_at,
                       uint32_t *nchunks, uint32_t *chunk_size);

/* ---- the steps of a write, shared by the store's files -------------------------- */
/* Make st the txn's sticky error (the first one wins); returns st. */
kh_status kh_store_tx_fail(kh_store_txn *tx, kh_status st, const kh_err *e);
/* The sticky error, copied to err. */
kh_status kh_store_tx_sticky(kh_store_txn *tx, kh_err *err);
/* KH_OK when tx may write (healthy, an update). */
kh_status kh_store_need_write(kh_store_txn *tx, kh_err *err);
/* The name of the API-key variable whose value is in bytes, or NULL. */
const char *kh_store_find_secret(const kh_store *s, const void *data, size_t len);
/* Apply op now (growing the map and replaying on MDB_MAP_FULL) and log it
 * for a later replay; a failure becomes the txn's sticky error. */
kh_status kh_store_exec_op(kh_store_txn *tx, kh_store_op *op, kh_err *err);
/* After MDB_MAP_FULL: abort, double the map, replay every logged write. */
kh_status kh_store_tx_recover(kh_store_txn *tx, kh_err *err);
/* Grow the map when it is three quarters full with extra bytes to come,
 * before a write txn begins; an LMDB error code or 0. */
int kh_store_grow_map(kh_store *s, size_t extra);
/* The write txn's cursor for slot (see kh_store_txn.wcur); an LMDB error
 * code or 0. */
int kh_store_wcursor(kh_store_txn *tx, int slot, MDB_dbi dbi, MDB_cursor **c);
/* Write the queued index entries in key order (store.c); _once leaves
 * MDB_MAP_FULL to its caller (*full), the other grows the map and replays. */
kh_status kh_store_index_flush_once(kh_store_txn *tx, int *full, kh_err *err);
kh_status kh_store_index_flush(kh_store_txn *tx, kh_err *err);
/* Queue a record's index entries, or delete them (del; queued ones are
 * written first) (store_index.c).  MDB_MAP_FULL sets *full. */
kh_status kh_store_index_update(kh_store_txn *tx, const kh_rec_keys *k, const char *id, int del,
                                int *full, kh_err *err);
/* A growable list of blob hashes (gc, export: store_tools.c). */
struct kh_store_hashset {
    kh_hash *v;
    size_t n, cap;
};
/* A kh_store_ref_fn adding each parsable hash to the kh_store_hashset arg. */
kh_status kh_store_collect_hash(void *arg, const char *field, const char *value, kh_err *err);
/* qsort order of kh_hash values (bytes). */
int kh_store_hash_cmp(const void *a, const void *b);
/* The i-th record type's name (store_record.c), NULL past the last. */
#define KH_STORE_NTYPES 11
const char *kh_store_type_at(size_t i);

#endif
