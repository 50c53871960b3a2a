/* store.c: the artifact store's core (see store.h): content hashes and
 * times, opening the LMDB environment and checking what is at the path, bulk
 * mode, and scoped transactions with a sticky error and a write log replayed
 * after the map grows, and the index entries a write queued, written in key
 * order.  The log applies each op through the writer its file gave
 * (kh_store_op.write), so this file calls none of the others below.  Blobs
 * are store_blob.c's, records store_record.c's, index keys store_index.c's,
 * queries store_query.c's, whole-store walks (stats, verify, gc, backup)
 * store_tools.c's, export and import store_export.c's. */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define DEFAULT_MAP_SIZE ((size_t)1 << 30)
#define MAX_MAP_SIZE ((size_t)1 << 40)
#define FORMAT_MARK "khlua-store"

static const char *const SECRET_VARS[3] = {"ANTHROPIC_API_KEY", "OPENAI_API_KEY",
                                           "KHLUA_API_KEY"};
#define SECRET_MIN 8

/* ---- hashes -------------------------------------------------------------------- */
void kh_hash_bytes(const void *data, size_t len, kh_hash *out)
{
    XXH128_hash_t h = XXH3_128bits(data, len);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(out->b, c.digest, 16);
}

void kh_hash_hex(const kh_hash *h, char out[33])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hx[h->b[i] >> 4];
        out[2 * i + 1] = hx[h->b[i] & 15];
    }
    out[32] = '\0';
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

kh_status kh_hash_parse(const char *hex, kh_hash *out, kh_err *err)
{
    if (!hex || strlen(hex) != 32)
        return kh_err_set(err, KH_EINVAL, "'%s' is not a blob hash (32 hex digits)",
                          hex ? hex : "(null)");
    for (int i = 0; i < 16; i++) {
        int a = hexval((unsigned char)hex[2 * i]), b = hexval((unsigned char)hex[2 * i + 1]);
        if (a < 0 || b < 0)
            return kh_err_set(err, KH_EINVAL, "'%s' is not a blob hash (32 hex digits)", hex);
        out->b[i] = (unsigned char)(a << 4 | b);
    }
    return KH_OK;
}

/* ---- time ----------------------------------------------------------------------- */
void kh_store_format_time(int64_t us, char out[40])
{
    time_t sec = (time_t)(us / 1000000);
    long frac = (long)(us % 1000000);
    if (frac < 0) {
        frac += 1000000;
        sec--;
    }
    struct tm tm;
    if (!gmtime_r(&sec, &tm))
        memset(&tm, 0, sizeof tm);
    if (tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) {
        char buf[128]; /* wide enough for any int fields */
        snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
        snprintf(out, 40, "%.39s", buf);
        return;
    }
    /* by hand: every record write formats one, and snprintf was visible */
    int f[7] = {tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                (int)frac};
    static const int width[7] = {4, 2, 2, 2, 2, 2, 6};
    static const char sep[7] = {'-', '-', 'T', ':', ':', '.', 'Z'};
    char *p = out;
    for (int i = 0; i < 7; i++) {
        for (int d = width[i] - 1; d >= 0; d--) {
            p[d] = (char)('0' + f[i] % 10);
            f[i] /= 10;
        }
        p += width[i];
        *p++ = sep[i];
    }
    *p = '\0';
}

/* n decimal digits at p, or -1.  Hand-rolled: every record write parses its
 * created_at, and sscanf was a visible share of the write path. */
static int digits(const char *p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

kh_status kh_store_parse_time(const char *s, int64_t *us, kh_err *err)
{
    if (!s || strnlen(s, 20) < 19 || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
        s[13] != ':' || s[16] != ':')
        goto bad;
    int Y = digits(s, 4), M = digits(s + 5, 2), D = digits(s + 8, 2), h = digits(s + 11, 2),
        m = digits(s + 14, 2), sec = digits(s + 17, 2);
    if (Y < 0 || M < 1 || M > 12 || D < 1 || D > 31 || h < 0 || h > 23 || m < 0 || m > 59 ||
        sec < 0 || sec > 60)
        goto bad;
    const char *p = s + 19;
    long frac = 0;
    if (*p == '.') {
        int nd = 0;
        p++;
        while (*p >= '0' && *p <= '9') {
            if (nd < 6) {
                frac = frac * 10 + (*p - '0');
                nd++;
            }
            p++;
        }
        if (!nd)
            goto bad;
        while (nd++ < 6)
            frac *= 10;
    }
    long off = 0;
    if (*p == 'Z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh = digits(p + 1, 2), om = p[1] && p[2] && p[3] == ':' ? digits(p + 4, 2) : -1;
        if (oh < 0 || om < 0 || oh > 23 || om > 59)
            goto bad;
        off = (oh * 3600L + om * 60L) * (*p == '-' ? -1 : 1);
        p += 6;
    }
    if (*p)
        goto bad;
    /* days from the civil date (proleptic Gregorian), no timegm/TZ lookups */
    int y = Y - (M <= 2);
    int era = (y >= 0 ? y : y - 399) / 400;
    int yoe = y - era * 400;
    int doy = (153 * (M + (M > 2 ? -3 : 9)) + 2) / 5 + D - 1;
    int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = (int64_t)era * 146097 + doe - 719468;
    int64_t t = days * 86400 + h * 3600 + m * 60 + sec;
    *us = (t - off) * 1000000 + frac;
    return KH_OK;
bad:
    return kh_err_set(err, KH_EINVAL, "'%s' is not an ISO 8601 time (2026-12-02T15:04:05Z)",
                      s ? s : "(null)");
}

/* ---- errors ---------------------------------------------------------------------- */
kh_status kh_store_mdb_err(kh_err *err, int rc, const char *what)
{
    kh_status code = KH_ESTORE;
    if (rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND)
        code = KH_ECORRUPT;
    else if (rc == ENOMEM)
        code = KH_ENOMEM;
    else if (rc == ENOENT)
        code = KH_ENOTFOUND;
    else if (rc == EACCES || rc == EIO || rc == ENOSPC)
        code = KH_EIO;
    return kh_err_set(err, code, "%s: %s", what, mdb_strerror(rc));
}

/* ---- opening ------------------------------------------------------------------------ */
static kh_status mkdir_p(const char *path, kh_err *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return kh_err_set(err, KH_EINVAL, "store path too long");
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return kh_err_set(err, KH_EIO, "cannot create directory %s: %s", buf,
                              strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return kh_err_set(err, KH_EIO, "cannot create directory %s: %s", buf, strerror(errno));
    return KH_OK;
}

int kh_store_begin_read(kh_store *s, MDB_txn **txn)
{
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
    if (rc == MDB_MAP_RESIZED) {
        /* Another process grew the map: adopt its size and retry. */
        rc = mdb_env_set_mapsize(s->env, 0);
        if (rc == 0)
            rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
    }
    return rc;
}

/* Check that data.mdb is at least as long as its last committed page: a
 * truncated file would make LMDB read past the end of its mapping (SIGBUS). */
static kh_status check_length(kh_store *s, kh_err *err)
{
    MDB_envinfo info;
    MDB_stat st;
    int rc = mdb_env_info(s->env, &info);
    if (rc == 0)
        rc = mdb_env_stat(s->env, &st);
    if (rc)
        return kh_store_mdb_err(err, rc, "reading the store's header");
    char file[4200];
    snprintf(file, sizeof file, "%s/data.mdb", s->path);
    struct stat sb;
    if (stat(file, &sb) != 0)
        return kh_err_set(err, KH_EIO, "cannot stat %s: %s", file, strerror(errno));
    uint64_t need = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
    if ((uint64_t)sb.st_size < need)
        return kh_err_set(err, KH_ECORRUPT,
                          "%s is truncated: %lld bytes, but its last committed page ends at "
                          "byte %llu (restore it from a backup: khlua store backup)",
                          file, (long long)sb.st_size, (unsigned long long)need);
    s->map_size = info.me_mapsize;
    return KH_OK;
}

static kh_status open_dbs(kh_store *s, kh_err *err)
{
    MDB_txn *txn;
    int rc = s->readonly ? kh_store_begin_read(s, &txn) : mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc)
        return kh_store_mdb_err(err, rc, "opening the store");
    MDB_dbi main;
    MDB_stat st;
    rc = mdb_dbi_open(txn, NULL, 0, &main);
    if (rc == 0)
        rc = mdb_stat(txn, main, &st);
    if (rc) {
        mdb_txn_abort(txn);
        return kh_store_mdb_err(err, rc, "opening the store");
    }
    int fresh = st.ms_entries == 0;
    if (fresh && s->readonly) {
        mdb_txn_abort(txn);
        return kh_err_set(err, KH_ENOTFOUND, "%s is an empty store (nothing written yet)",
                          s->path);
    }
    unsigned flags = fresh ? MDB_CREATE : 0;
    rc = mdb_dbi_open(txn, "meta", flags, &s->meta);
    if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) {
        mdb_txn_abort(txn);
        return kh_err_set(err, KH_ECORRUPT,
                          "%s is an LMDB environment but not a khlua store (no meta database)",
                          s->path);
    }
    const char *names[3] = {"blobs", "records", "index"};
    MDB_dbi *dbis[3] = {&s->blobs, &s->records, &s->index};
    for (int i = 0; rc == 0 && i < 3; i++)
        rc = mdb_dbi_open(txn, names[i], flags, dbis[i]);
    if (rc) {
        mdb_txn_abort(txn);
        if (rc == MDB_NOTFOUND)
            return kh_err_set(err, KH_ECORRUPT, "%s: the store lacks a database (damaged)",
                              s->path);
        return kh_store_mdb_err(err, rc, "opening the store's databases");
    }
    MDB_val k = {6, "schema"}, v;
    if (fresh) {
        char ver[16];
        int n = snprintf(ver, sizeof ver, "%d", KH_STORE_SCHEMA);
        MDB_val fk = {6, "format"}, fv = {strlen(FORMAT_MARK), FORMAT_MARK};
        v.mv_size = (size_t)n;
        v.mv_data = ver;
        rc = mdb_put(txn, s->meta, &k, &v, 0);
        if (rc == 0)
            rc = mdb_put(txn, s->meta, &fk, &fv, 0);
        if (rc == 0)
            rc = mdb_txn_commit(txn);
        else
            mdb_txn_abort(txn);
        if (rc)
            return kh_store_mdb_err(err, rc, "initialising the store");
        return KH_OK;
    }
    rc = mdb_get(txn, s->meta, &k, &v);
    if (rc) {
        mdb_txn_abort(txn);
        return kh_err_set(err, KH_ECORRUPT, "%s has no schema record: not a khlua store",
                          s->path);
    }
    char ver[16] = {0};
    memcpy(ver, v.mv_data, v.mv_size < 15 ? v.mv_size : 15);
    /* The dbi handles outlive the txn only if it commits (read-only too). */
    rc = mdb_txn_commit(txn);
    if (rc)
        return kh_store_mdb_err(err, rc, "opening the store");
    if (atoi(ver) != KH_STORE_SCHEMA)
        return kh_err_set(err, KH_EUNSUPPORTED,
                          "%s has schema version %s; this khlua reads version %d (use the "
                          "khlua that wrote it, or export and re-import)",
                          s->path, ver, KH_STORE_SCHEMA);
    return KH_OK;
}

/* LMDB must not be opened twice in one process: closing the second handle
 * would drop the first one's file locks.  The stores open in this process,
 * by directory identity.  Store handles belong to one thread (the Lua VM's). */
static kh_store *open_stores;

static void unregister_open(kh_store *s)
{
    for (kh_store **p = &open_stores; *p; p = &(*p)->next_open) {
        if (*p == s) {
            *p = s->next_open;
            return;
        }
    }
}

kh_status kh_store_open(const char *path, const kh_store_opts *opts, kh_store **out,
                        kh_err *err)
{
    *out = NULL;
    if (!path || !path[0])
        return kh_err_set(err, KH_EINVAL, "empty store path");
    kh_store_opts o = opts ? *opts : (kh_store_opts){0};
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return kh_err_set(err, KH_ECORRUPT,
                              "%s is a file, not a store (a store is a directory holding "
                              "data.mdb and lock.mdb)",
                              path);
    } else if (o.readonly) {
        return kh_err_set(err, KH_ENOTFOUND, "no store at %s", path);
    } else {
        kh_status st = mkdir_p(path, err);
        if (st)
            return st;
    }
    if (stat(path, &sb) != 0)
        return kh_err_set(err, KH_EIO, "cannot stat %s: %s", path, strerror(errno));
    for (kh_store *o2 = open_stores; o2; o2 = o2->next_open)
        if (o2->dev == sb.st_dev && o2->ino == sb.st_ino && o2->pid == getpid())
            return kh_err_set(err, KH_ESTATE,
                              "store %s is already open in this process (as %s): use that "
                              "handle",
                              path, o2->path);
    kh_store *s = calloc(1, sizeof *s);
    if (!s || !(s->path = kh_strdup(path))) {
        free(s);
        return kh_err_set(err, KH_ENOMEM, "out of memory opening the store");
    }
    s->dev = sb.st_dev;
    s->ino = sb.st_ino;
    s->pid = getpid();
    s->readonly = o.readonly;
    s->nosync = o.nosync;
    s->map_size = o.map_size ? o.map_size : DEFAULT_MAP_SIZE;
    kh_status st = KH_OK;
    int rc = mdb_env_create(&s->env);
    if (rc) {
        st = kh_store_mdb_err(err, rc, "creating the LMDB environment");
        goto fail;
    }
    if ((rc = mdb_env_set_maxdbs(s->env, 8)) || (rc = mdb_env_set_mapsize(s->env, s->map_size))) {
        st = kh_store_mdb_err(err, rc, "configuring the LMDB environment");
        goto fail;
    }
    unsigned flags = MDB_NOTLS;
    if (o.readonly)
        flags |= MDB_RDONLY;
    if (o.nosync)
        flags |= MDB_NOSYNC;
    rc = mdb_env_open(s->env, path, flags, 0644);
    if (rc == EACCES && o.readonly) {
        /* a store this user may read but not write (another user's, a
         * read-only mount): read it without the lock file, which needs write
         * access; a writer running meanwhile could make what is read stale */
        mdb_env_close(s->env);
        s->env = NULL;
        if (!(rc = mdb_env_create(&s->env)) && !(rc = mdb_env_set_maxdbs(s->env, 8)) &&
            !(rc = mdb_env_set_mapsize(s->env, s->map_size)))
            rc = mdb_env_open(s->env, path, flags | MDB_NOLOCK, 0644);
    }
    if (rc) {
        if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH)
            st = kh_err_set(err, KH_ECORRUPT,
                            "%s/data.mdb is not an LMDB file this khlua can read (a foreign "
                            "or damaged file: %s)",
                            path, mdb_strerror(rc));
        else if (rc == ENOENT && o.readonly)
            st = kh_err_set(err, KH_ENOTFOUND, "no store at %s (no data.mdb)", path);
        else
            st = kh_store_mdb_err(err, rc, "opening the store");
        kh_err_prefix(err, "opening store %s", path);
        goto fail;
    }
    if ((st = check_length(s, err)))
        goto fail;
    int dead = 0;
    rc = mdb_reader_check(s->env, &dead);
    if (rc) {
        st = kh_store_mdb_err(err, rc, "clearing stale readers");
        goto fail;
    }
    if ((st = open_dbs(s, err)))
        goto fail;
    s->cctx = ZSTD_createCCtx();
    s->dctx = ZSTD_createDCtx();
    s->cbuf_cap = ZSTD_compressBound(KH_BLOB_CHUNK);
    s->cbuf = malloc(s->cbuf_cap);
    s->dbuf = malloc(KH_BLOB_CHUNK);
    if (!s->cctx || !s->dctx || !s->cbuf || !s->dbuf) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory opening the store");
        goto fail;
    }
    ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, 3);
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(SECRET_VARS[i]);
        s->secret_name[i] = SECRET_VARS[i];
        if (v && strlen(v) >= SECRET_MIN) {
            if (!(s->secret[i] = kh_strdup(v))) {
                st = kh_err_set(err, KH_ENOMEM, "out of memory opening the store");
                goto fail;
            }
            s->secret_len[i] = strlen(v);
        }
    }
    s->id_salt = (uint32_t)(getpid() * 2654435761u ^ (uint32_t)(kh_wall_now() * 1e6));
    s->next_open = open_stores;
    open_stores = s;
    *out = s;
    return KH_OK;
fail:
    kh_store_close(s);
    return st;
}

void kh_store_close(kh_store *s)
{
    if (!s)
        return;
    if (s->bulk) { /* the bulk's commits become durable, as its end would make them */
        kh_err e;
        (void)kh_store_bulk_end(s, &e);
    }
    unregister_open(s);
    if (s->env)
        mdb_env_close(s->env);
    ZSTD_freeCCtx(s->cctx);
    ZSTD_freeDCtx(s->dctx);
    free(s->cbuf);
    free(s->dbuf);
    kh_sbuf_free(&s->log);
    free(s->seen);
    for (int i = 0; i < 3; i++) {
        if (s->secret[i]) {
            memset(s->secret[i], 0, s->secret_len[i]);
            free(s->secret[i]);
        }
    }
    free(s->path);
    free(s);
}

const char *kh_store_path(const kh_store *s) { return s->path; }
int kh_store_in_txn(const kh_store *s) { return s->busy; }
int kh_store_in_bulk(const kh_store *s) { return s->bulk; }

/* ---- bulk mode ------------------------------------------------------------------- */
/* LMDB lets MDB_NOSYNC change at run time between transactions.  Without it a
 * commit writes its pages, fdatasyncs the file, then writes the meta page
 * through an O_DSYNC descriptor: two waits for the disk per commit.  With it
 * the pages still reach the kernel before the commit returns (so a killed
 * process loses nothing), and one sync at the end makes them durable. */
kh_status kh_store_bulk_begin(kh_store *s, kh_err *err)
{
    if (s->readonly)
        return kh_err_set(err, KH_ESTATE, "store %s is open read-only", s->path);
    if (s->busy)
        return kh_err_set(err, KH_ESTATE, "bulk mode cannot begin inside update/view");
    if (s->bulk)
        return kh_err_set(err, KH_ESTATE, "the store is already in bulk mode (no nesting)");
    int rc = s->nosync ? 0 : mdb_env_set_flags(s->env, MDB_NOSYNC, 1);
    if (rc)
        return kh_store_mdb_err(err, rc, "entering bulk mode");
    s->bulk = 1;
    return KH_OK;
}

kh_status kh_store_bulk_end(kh_store *s, kh_err *err)
{
    if (!s->bulk)
        return kh_err_set(err, KH_ESTATE, "the store is not in bulk mode");
    if (s->busy)
        return kh_err_set(err, KH_ESTATE, "bulk mode cannot end inside update/view");
    s->bulk = 0;
    int rc = s->nosync ? 0 : mdb_env_set_flags(s->env, MDB_NOSYNC, 0);
    /* force: a store opened nosync still gets its bulk synced, as documented */
    int rs = mdb_env_sync(s->env, 1);
    if (rs)
        return kh_store_mdb_err(err, rs, "syncing the store at the end of bulk mode");
    if (rc)
        return kh_store_mdb_err(err, rc, "leaving bulk mode");
    return KH_OK;
}

/* ---- transactions ------------------------------------------------------------------ */
kh_status kh_store_tx_fail(kh_store_txn *tx, kh_status st, const kh_err *e)
{
    if (tx->st == KH_OK) {
        tx->st = st;
        tx->err = *e;
    }
    return st;
}

kh_status kh_store_tx_sticky(kh_store_txn *tx, kh_err *err)
{
    if (err)
        *err = tx->err;
    return tx->st;
}

kh_status kh_store_txn_status(const kh_store_txn *tx, kh_err *err)
{
    if (tx->st && err)
        *err = tx->err;
    return tx->st;
}

kh_status kh_store_txn_fail(kh_store_txn *tx, kh_status st, kh_err *err)
{
    kh_store_tx_fail(tx, st, err);
    return kh_store_tx_sticky(tx, err);
}

static void ops_free(kh_store_txn *tx)
{
    for (size_t i = 0; i < tx->nown; i++)
        free(tx->own[i]);
    free(tx->own);
    tx->own = NULL;
    tx->nown = tx->capown = 0;
    kh_sbuf_free(&tx->pend);
    free(tx->pofs);
    tx->pofs = NULL;
    tx->npend = tx->cappend = 0;
    free(tx->ops);
    tx->ops = NULL;
    tx->nops = tx->capops = 0;
    /* keep the log's memory for the next write txn, unless it grew large */
    tx->log.n = 0;
    if (tx->log.cap > ((size_t)64 << 20))
        kh_sbuf_free(&tx->log);
    if (tx->write)
        tx->s->log = tx->log;
    tx->log = (kh_sbuf){0};
}

static kh_status log_op(kh_store_txn *tx, const kh_store_op *op, kh_err *err)
{
    if (tx->nops == tx->capops) {
        size_t nc = tx->capops ? tx->capops * 2 : 64;
        kh_store_op *n = realloc(tx->ops, nc * sizeof *n);
        if (!n)
            return kh_err_set(err, KH_ENOMEM, "out of memory logging a store write");
        tx->ops = n;
        tx->capops = nc;
    }
    tx->ops[tx->nops++] = *op;
    return KH_OK;
}

/* Grow the map when it is three quarters full, before a write begins: it
 * keeps MDB_MAP_FULL (and its replay) rare. */
int kh_store_grow_map(kh_store *s, size_t extra)
{
    MDB_envinfo info;
    MDB_stat st;
    if (mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &st))
        return 0;
    size_t used = ((size_t)info.me_last_pgno + 1) * st.ms_psize;
    s->map_size = info.me_mapsize;
    size_t want = s->map_size;
    while (want < MAX_MAP_SIZE && (used + extra) > want / 4 * 3)
        want *= 2;
    if (want == s->map_size)
        return 0;
    int rc = mdb_env_set_mapsize(s->env, want);
    if (rc == 0)
        s->map_size = want;
    return rc;
}

static int begin_write(kh_store *s, MDB_txn **txn)
{
    int rc = mdb_txn_begin(s->env, NULL, 0, txn);
    if (rc == MDB_MAP_RESIZED) {
        rc = mdb_env_set_mapsize(s->env, 0);
        if (rc == 0)
            rc = mdb_txn_begin(s->env, NULL, 0, txn);
    }
    return rc;
}

static kh_status apply_op(kh_store_txn *tx, const kh_store_op *op, int *full, kh_err *err);

/* After MDB_MAP_FULL: abort, double the map, begin again and replay every
 * logged write.  The txn's callback does not run again. */
kh_status kh_store_tx_recover(kh_store_txn *tx, kh_err *err)
{
    kh_store *s = tx->s;
    for (;;) {
        if (tx->txn)
            mdb_txn_abort(tx->txn);
        tx->txn = NULL;
        memset(tx->wcur, 0, sizeof tx->wcur); /* freed by the abort */
        tx->npend = 0; /* the replay queues the index entries again */
        tx->pend.n = 0;
        if (s->map_size >= MAX_MAP_SIZE || ++tx->growths > 40)
            return kh_err_set(err, KH_ESTORE, "store map full at %zu bytes and cannot grow",
                              s->map_size);
        MDB_envinfo info;
        if (mdb_env_info(s->env, &info) == 0 && info.me_mapsize > s->map_size)
            s->map_size = info.me_mapsize;
        int rc = mdb_env_set_mapsize(s->env, s->map_size * 2);
        if (rc)
            return kh_store_mdb_err(err, rc, "growing the store map");
        s->map_size *= 2;
        rc = begin_write(s, &tx->txn);
        if (rc) {
            tx->txn = NULL;
            return kh_store_mdb_err(err, rc, "beginning a write transaction");
        }
        int again = 0;
        for (size_t i = 0; i < tx->nops && !again; i++) {
            kh_status st = apply_op(tx, &tx->ops[i], &again, err);
            if (st && !again)
                return st;
        }
        if (!again)
            return KH_OK;
    }
}

/* Run op now; on MAP_FULL recover and retry.  On success the op joins the
 * log (ownership of its strings moves there); on failure they are freed. */
kh_status kh_store_exec_op(kh_store_txn *tx, kh_store_op *op, kh_err *err)
{
    kh_status st;
    for (;;) {
        int full = 0;
        st = apply_op(tx, op, &full, err);
        if (!full)
            break;
        st = kh_store_tx_recover(tx, err);
        if (st)
            break;
    }
    op->live = NULL; /* a replay must not see the caller's object */
    op->keys = NULL;
    if (st == KH_OK)
        st = log_op(tx, op, err);
    if (st) {
        if (op->kind == KH_OP_RECORD)
            tx->log.n = op->off; /* drop its text from the log */
        return kh_store_tx_fail(tx, st, err);
    }
    return KH_OK;
}

static kh_status run_scope(kh_store *s, int write, kh_store_fn fn, void *arg, kh_err *err)
{
    if (s->busy)
        return kh_err_set(err, KH_ESTATE,
                          "a transaction is already open on this store (no nested "
                          "update/view: use the transaction you have)");
    if (write && s->readonly)
        return kh_err_set(err, KH_ESTATE, "store %s is open read-only", s->path);
    kh_store_txn tx = {.s = s, .write = write};
    int rc;
    if (write) {
        if ((rc = kh_store_grow_map(s, 0)) != 0)
            return kh_store_mdb_err(err, rc, "growing the store map");
        rc = begin_write(s, &tx.txn);
    } else {
        rc = kh_store_begin_read(s, &tx.txn);
    }
    if (rc)
        return kh_store_mdb_err(err, rc, write ? "beginning a write transaction"
                                               : "beginning a read transaction");
    if (write) { /* borrow the store's log buffer; ops_free gives it back */
        tx.log = s->log;
        s->log = (kh_sbuf){0};
        if (++s->seen_gen == 0 && s->seen) /* wrapped: clear, so no slot looks current */
            memset(s->seen, 0, KH_REFSEEN * sizeof *s->seen);
    }
    s->busy = 1;
    kh_err ferr;
    kh_err_clear(&ferr);
    kh_status st = fn(&tx, arg, &ferr);
    if (st == KH_OK && tx.st)
        st = kh_store_tx_sticky(&tx, &ferr);
    else if (st && tx.st)
        st = kh_store_tx_sticky(&tx, &ferr); /* the first failure is the cause */
    if (st) {
        if (tx.txn)
            mdb_txn_abort(tx.txn);
        s->busy = 0;
        ops_free(&tx);
        if (err)
            *err = ferr;
        return st;
    }
    if (!write) {
        mdb_txn_abort(tx.txn);
        s->busy = 0;
        return KH_OK;
    }
    for (;;) {
        rc = 0;
        st = kh_store_index_flush(&tx, &ferr);
        if (st)
            break;
        rc = mdb_txn_commit(tx.txn);
        tx.txn = NULL;
        memset(tx.wcur, 0, sizeof tx.wcur); /* freed by the commit */
        if (rc != MDB_MAP_FULL)
            break;
        st = kh_store_tx_recover(&tx, &ferr);
        if (st)
            break;
    }
    if (!st && rc)
        st = kh_store_mdb_err(&ferr, rc, "committing");
    if (tx.txn)
        mdb_txn_abort(tx.txn);
    s->busy = 0;
    ops_free(&tx);
    if (st && err)
        *err = ferr;
    return st;
}

kh_status kh_store_update(kh_store *s, kh_store_fn fn, void *arg, kh_err *err)
{
    return run_scope(s, 1, fn, arg, err);
}

kh_status kh_store_view(kh_store *s, kh_store_fn fn, void *arg, kh_err *err)
{
    return run_scope(s, 0, fn, arg, err);
}

kh_status kh_store_need_write(kh_store_txn *tx, kh_err *err)
{
    if (tx->st)
        return kh_store_tx_sticky(tx, err);
    if (!tx->write)
        return kh_err_set(err, KH_ESTATE, "write in a read-only transaction (use update)");
    return KH_OK;
}

/* The value of an API key found in bytes, or NULL. */
const char *kh_store_find_secret(const kh_store *s, const void *data, size_t len)
{
    for (int i = 0; i < 3; i++)
        if (s->secret[i] && memmem(data, len, s->secret[i], s->secret_len[i]))
            return s->secret_name[i];
    return NULL;
}

/* An op is applied, and replayed, by the writer the file that logged it
 * gave (store_record.c for a record, store_blob.c for a blob): the log
 * knows no op's format. */
static kh_status apply_op(kh_store_txn *tx, const kh_store_op *op, int *full, kh_err *err)
{
    if (!op->write)
        return kh_err_set(err, KH_ESTORE, "internal: store op %d without a writer", op->kind);
    return op->write(tx, op, full, err);
}

/* ---- the index entries a write txn queued ------------------------------------------ */
/* The write txn's cursor for slot (see kh_store_txn.wcur). */
int kh_store_wcursor(kh_store_txn *tx, int slot, MDB_dbi dbi, MDB_cursor **c)
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
kh_status kh_store_index_flush_once(kh_store_txn *tx, int *full, kh_err *err)
{
    if (!tx->npend)
        return KH_OK;
    pend_base = tx->pend.p;
    qsort(tx->pofs, tx->npend, sizeof *tx->pofs, pend_cmp);
    pend_base = NULL;
    MDB_cursor *c;
    int rc = kh_store_wcursor(tx, 1, tx->s->index, &c);
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

/* kh_store_index_flush_once, growing the map when it fills. */
kh_status kh_store_index_flush(kh_store_txn *tx, kh_err *err)
{
    for (;;) {
        int full = 0;
        kh_status st = kh_store_index_flush_once(tx, &full, err);
        if (!full)
            return st;
        if ((st = kh_store_tx_recover(tx, err)))
            return st;
    }
}

