/* store.h: the artifact store.  One LMDB environment (a directory holding
 * data.mdb and lock.mdb) with four named databases:
 *   meta     schema version and format marker
 *   blobs    content-addressed bytes: key XXH3-128 of the raw bytes, value a
 *            small header + zstd frame (or the raw bytes when zstd does not
 *            help); blobs over 1 MiB are stored as independent 1 MiB chunks
 *   records  typed JSON records (task, candidate, compile, evaluation, ...),
 *            key = record id
 *   index    secondary keys, each ordered by creation time: type, type+status,
 *            task+type, run+type, candidate+type
 * docs/store.md documents the id scheme, the record types and every field
 * the store itself interprets.
 *
 * Concurrency: one process writes (the coordinator); any number may read.
 * Every access goes through a scoped transaction: kh_store_update /
 * kh_store_view call a function with a kh_store_txn that is valid only
 * during that call.  A txn has a sticky error: once a step fails, every later
 * step returns the same error and the update aborts.
 *
 * Map growth: when LMDB reports MDB_MAP_FULL the update aborts, doubles the
 * map and replays the writes it logged, so the write that hit the limit is
 * not lost and the callback never runs twice. */
#ifndef KH_STORE_H
#define KH_STORE_H

#include "core/kh.h"

#include <jansson.h>
#include <stdio.h>

typedef struct kh_store kh_store;
typedef struct kh_store_txn kh_store_txn;

#define KH_STORE_SCHEMA 1
#define KH_STORE_ID_MAX 129 /* ids are at most 128 bytes, plus NUL */

typedef struct kh_store_opts {
    size_t map_size; /* initial map size in bytes; 0: 1 GiB (sparse; grows) */
    int readonly;    /* open read-only: no writes, the store must exist */
    /* Skip fsync at commit (MDB_NOSYNC).  Risk: a machine crash or power cut
     * (not a process crash) may lose the last commits, and on some file
     * systems leave the file inconsistent.  Default off. */
    int nosync;
} kh_store_opts;

/* ---- content hashes --------------------------------------------------------- */
typedef struct kh_hash {
    unsigned char b[16]; /* XXH3-128, canonical (big-endian) byte order */
} kh_hash;

void kh_hash_bytes(const void *data, size_t len, kh_hash *out);
/* 32 lowercase hex digits + NUL. */
void kh_hash_hex(const kh_hash *h, char out[33]);
/* Parse 32 hex digits; KH_EINVAL with a message otherwise. */
kh_status kh_hash_parse(const char *hex, kh_hash *out, kh_err *err);

/* ---- opening ------------------------------------------------------------------ */
/* Open (and, unless readonly, create) the store at path.  Checks the schema
 * version, refuses a foreign or truncated file with a message naming it,
 * clears stale reader slots.  Reads the API-key environment variables
 * (ANTHROPIC_API_KEY, OPENAI_API_KEY, KHLUA_API_KEY) once: any write whose
 * bytes contain one of their values (8 bytes or longer) is refused. */
kh_status kh_store_open(const char *path, const kh_store_opts *opts, kh_store **out,
                        kh_err *err);
/* Close; NULL is fine.  Must not be called inside update/view. */
void kh_store_close(kh_store *s);
/* Valid until close. */
const char *kh_store_path(const kh_store *s);
/* 1 while an update/view scope is open on s. */
int kh_store_in_txn(const kh_store *s);

/* ---- bulk mode ------------------------------------------------------------------ */
/* For loading many records (import, backfills, benchmarks).  Between begin
 * and end, commits skip the fsync (MDB_NOSYNC): a commit that returned
 * survives the process being killed (its pages reach the kernel before the
 * commit returns), but survives a machine crash or power cut only once
 * kh_store_bulk_end has returned, which syncs everything once.  A machine
 * crash inside a bulk may lose the bulk's commits and, as LMDB warns for
 * MDB_NOSYNC, damage the store: use it where the input can be loaded again.
 * Neither may be called inside update/view; no nesting (KH_ESTATE).
 * kh_store_close ends an open bulk (with its sync). */
kh_status kh_store_bulk_begin(kh_store *s, kh_err *err);
kh_status kh_store_bulk_end(kh_store *s, kh_err *err);
int kh_store_in_bulk(const kh_store *s);

/* ---- scoped transactions ------------------------------------------------------ */
/* fn runs once, with a txn valid only during the call.  It returns KH_OK to
 * commit; any other status (or a sticky error of the txn) aborts, and that
 * error is what update returns.  Nested update/view on one store -> KH_ESTATE.
 * Bytes given to kh_store_txn_put_blob must stay valid until update returns
 * (a map growth replays the write from them). */
typedef kh_status (*kh_store_fn)(kh_store_txn *tx, void *arg, kh_err *err);
kh_status kh_store_update(kh_store *s, kh_store_fn fn, void *arg, kh_err *err);
kh_status kh_store_view(kh_store *s, kh_store_fn fn, void *arg, kh_err *err);

/* The txn's sticky status (KH_OK while healthy) and its error. */
kh_status kh_store_txn_status(const kh_store_txn *tx, kh_err *err);
/* Make (st, *err) the txn's sticky error unless it has one (then err gets
 * that one); returns the sticky status.  For writers built on the store
 * (run.h, evaluation.h, llm_store.h): a write they refuse aborts the update
 * as a refused put does. */
kh_status kh_store_txn_fail(kh_store_txn *tx, kh_status st, kh_err *err);

/* ---- blobs ---------------------------------------------------------------------- */
/* Store bytes (a no-op if the hash is already there); *out = the hash. */
kh_status kh_store_txn_put_blob(kh_store_txn *tx, const void *data, size_t len, kh_hash *out,
                                kh_err *err);
/* *has = 1 if stored.  Never sticky. */
kh_status kh_store_txn_has_blob(kh_store_txn *tx, const kh_hash *h, int *has, kh_err *err);
/* Raw size of a stored blob; KH_ENOTFOUND if absent (not sticky). */
kh_status kh_store_txn_blob_size(kh_store_txn *tx, const kh_hash *h, size_t *len, kh_err *err);
/* Decompress into dst (cap >= the raw size).  KH_ECORRUPT if the stored
 * bytes do not decompress to the recorded size. */
kh_status kh_store_txn_read_blob(kh_store_txn *tx, const kh_hash *h, void *dst, size_t cap,
                                 kh_err *err);
/* Stream the raw bytes to fn in pieces of at most 1 MiB; fn's non-OK status
 * stops the walk and is returned. */
typedef kh_status (*kh_store_sink)(void *arg, const void *data, size_t len, kh_err *err);
kh_status kh_store_txn_stream_blob(kh_store_txn *tx, const kh_hash *h, kh_store_sink fn,
                                   void *arg, kh_err *err);
/* kh_store_txn_put_blob of a copy the txn keeps until update returns: for
 * bytes the caller frees before then (a text it built, a field of a record
 * it is about to free). */
kh_status kh_store_txn_put_blob_copy(kh_store_txn *tx, const void *data, size_t len,
                                     kh_hash *out, kh_err *err);

/* ---- records -------------------------------------------------------------------- */
enum { KH_STORE_REPLACE = 1 }; /* put: an existing id is replaced, not refused */

/* Validate and write rec (a JSON object with a known "type").  Fills in "id"
 * (when absent) and "created_at" in rec itself; copies the id to id_out.
 * An existing id is refused (KH_ESTATE) unless KH_STORE_REPLACE. */
kh_status kh_store_txn_put(kh_store_txn *tx, json_t *rec, int flags,
                           char id_out[KH_STORE_ID_MAX], kh_err *err);
/* kh_store_txn_put for each of n records, stopping at the first failure
 * (sticky, so the update aborts).  ids: NULL or n slots. */
kh_status kh_store_txn_put_many(kh_store_txn *tx, json_t *const *recs, size_t n, int flags,
                                char (*ids)[KH_STORE_ID_MAX], kh_err *err);
/* A new id of a known type in the store's form (docs/store.md, "Ids"), for a
 * record the caller writes later: a run whose id its guard needs before the
 * record exists.  Ids made here and by puts never repeat within a process. */
kh_status kh_store_new_id(kh_store *s, const char *type, char id[KH_STORE_ID_MAX], kh_err *err);
/* *out = a new reference (caller decrefs); KH_ENOTFOUND if absent (not sticky). */
kh_status kh_store_txn_get(kh_store_txn *tx, const char *id, json_t **out, kh_err *err);

typedef struct kh_store_filter {
    const char *type, *task, *run, *candidate, *status; /* NULL: any */
    int64_t since_us, until_us; /* created_at window, µs since the epoch; 0: open */
    size_t limit;               /* 0: no limit */
} kh_store_filter;
/* Matching records, newest first.  With ids_only, *out holds id strings
 * instead of records.  *out is a new JSON array (caller decrefs). */
kh_status kh_store_txn_query(kh_store_txn *tx, const kh_store_filter *q, int ids_only,
                             json_t **out, kh_err *err);

/* ---- one-call wrappers (each its own transaction) ------------------------------ */
kh_status kh_store_put_blob(kh_store *s, const void *data, size_t len, kh_hash *out,
                            kh_err *err);
/* *data malloc'ed (caller frees). */
kh_status kh_store_get_blob(kh_store *s, const kh_hash *h, void **data, size_t *len,
                            kh_err *err);
kh_status kh_store_put(kh_store *s, json_t *rec, int flags, char id_out[KH_STORE_ID_MAX],
                       kh_err *err);
/* n records in one transaction, in order (a later one may reference an
 * earlier one); all or none.  ids: NULL or n slots for the ids. */
kh_status kh_store_put_records(kh_store *s, json_t *const *recs, size_t n, int flags,
                               char (*ids)[KH_STORE_ID_MAX], kh_err *err);
kh_status kh_store_get(kh_store *s, const char *id, json_t **out, kh_err *err);
kh_status kh_store_query(kh_store *s, const kh_store_filter *q, int ids_only, json_t **out,
                         kh_err *err);

/* ---- maintenance (store_tools.c; export and import: store_export.c) ------------ */
/* {"records": {type: n}, "records_total", "blobs", "blob_bytes_raw",
 *  "blob_bytes_stored", "map_size", "map_used", "page_size", "schema"} */
kh_status kh_store_stats(kh_store *s, json_t **out, kh_err *err);
/* Walk everything.  *report = {"records": n, "blobs": n, "index_entries": n,
 * "problems": [strings]}; KH_OK means the walk ran, problems or not. */
kh_status kh_store_verify(kh_store *s, json_t **report, kh_err *err);
/* Delete blobs that no record references and that were stored more than
 * grace_s seconds ago.  *report = {"deleted": n, "bytes": n, "kept": n}. */
kh_status kh_store_gc(kh_store *s, double grace_s, json_t **report, kh_err *err);
/* A consistent compacted copy into dest (a new or empty directory). */
kh_status kh_store_backup(kh_store *s, const char *dest, kh_err *err);
/* What to export: format "jsonl" (blobs then records, the import format) or
 * "fib-trace" (FlashInfer-Bench Trace lines, one per evaluation record).
 * fib-trace writes by default only official-protocol timings: a run's
 * "official" step (the gate's last, on every finalist) and `khlua eval
 * --protocol official`; gate set, also every other measurement (screening,
 * sweeps, correctness-only, seeds), each marked at the head of its log. */
typedef struct kh_store_export_opts {
    const char *format;
    const char *task; /* a task id; NULL: every task */
    const char *run;  /* fib-trace: this run's evaluations only; NULL: all */
    int gate;         /* fib-trace: the gate's measurements too, marked */
} kh_store_export_opts;
/* count: records (jsonl) or traces (fib-trace) written; marked: traces of
 * gate measurements among them (NULL allowed). */
kh_status kh_store_export(kh_store *s, const kh_store_export_opts *o, FILE *f, size_t *count,
                          size_t *marked, kh_err *err);
/* Import what export --format jsonl wrote.  Records already present with the
 * same content are skipped; a different record under an existing id fails. */
kh_status kh_store_import(kh_store *s, FILE *f, json_t **report, kh_err *err);

/* ---- helpers (store.c) used across the store's files --------------------------- */
/* "2026-12-02T15:04:05.123456Z" for µs since the epoch. */
void kh_store_format_time(int64_t us, char out[40]);
/* Parse ISO 8601 (Z, +HH:MM or no zone = UTC); KH_EINVAL on bad text. */
kh_status kh_store_parse_time(const char *s, int64_t *us, kh_err *err);

#endif
