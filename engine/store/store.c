/* store.c: the artifact store's core (see store.h): opening the LMDB
 * environment and checking what is at the path, scoped transactions with a
 * sticky error and a write log replayed after the map grows, content-addressed
 * blobs (zstd, chunked above 1 MiB), records with their indices and queries,
 * and the refusal of writes that carry an API key.  Whole-store walks
 * (stats, verify, gc, backup, export, import) live in store_tools.c. */
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
static kh_status tx_fail(kh_store_txn *tx, kh_status st, const kh_err *e)
{
    if (tx->st == KH_OK) {
        tx->st = st;
        tx->err = *e;
    }
    return st;
}

static kh_status tx_sticky(kh_store_txn *tx, kh_err *err)
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

static void ops_free(kh_store_txn *tx)
{
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
static int grow_if_needed(kh_store *s, size_t extra)
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
static kh_status index_flush(kh_store_txn *tx, kh_err *err);

/* After MDB_MAP_FULL: abort, double the map, begin again and replay every
 * logged write.  The txn's callback does not run again. */
static kh_status tx_recover(kh_store_txn *tx, kh_err *err)
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
static kh_status exec_op(kh_store_txn *tx, kh_store_op *op, kh_err *err)
{
    kh_status st;
    for (;;) {
        int full = 0;
        st = apply_op(tx, op, &full, err);
        if (!full)
            break;
        st = tx_recover(tx, err);
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
        return tx_fail(tx, st, err);
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
        if ((rc = grow_if_needed(s, 0)) != 0)
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
        st = tx_sticky(&tx, &ferr);
    else if (st && tx.st)
        st = tx_sticky(&tx, &ferr); /* the first failure is the cause */
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
        st = index_flush(&tx, &ferr);
        if (st)
            break;
        rc = mdb_txn_commit(tx.txn);
        tx.txn = NULL;
        memset(tx.wcur, 0, sizeof tx.wcur); /* freed by the commit */
        if (rc != MDB_MAP_FULL)
            break;
        st = tx_recover(&tx, &ferr);
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

static kh_status need_write(kh_store_txn *tx, kh_err *err)
{
    if (tx->st)
        return tx_sticky(tx, err);
    if (!tx->write)
        return kh_err_set(err, KH_ESTATE, "write in a read-only transaction (use update)");
    return KH_OK;
}

/* The value of an API key found in bytes, or NULL. */
static const char *find_secret(const kh_store *s, const void *data, size_t len)
{
    for (int i = 0; i < 3; i++)
        if (s->secret[i] && memmem(data, len, s->secret[i], s->secret_len[i]))
            return s->secret_name[i];
    return NULL;
}

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

static kh_status blob_write(kh_store_txn *tx, const kh_hash *h, const void *data, size_t len,
                            int *full, kh_err *err)
{
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

kh_status kh_store_txn_put_blob(kh_store_txn *tx, const void *data, size_t len, kh_hash *out,
                                kh_err *err)
{
    kh_status st = need_write(tx, err);
    if (st)
        return st;
    if (!data && len)
        return kh_err_set(err, KH_EINVAL, "put_blob: NULL data");
    kh_hash h;
    kh_hash_bytes(data ? data : "", len, &h);
    if (out)
        *out = h;
    const char *sec = find_secret(tx->s, data ? data : "", len);
    if (sec) {
        kh_err_set(err, KH_EINVAL,
                   "refusing to store a blob that contains the value of $%s (an API key "
                   "must never be archived)",
                   sec);
        return tx_fail(tx, KH_EINVAL, err);
    }
    kh_store_op op = {.kind = KH_OP_BLOB, .data = data ? data : "", .len = len, .h = h};
    return exec_op(tx, &op, err);
}

kh_status kh_store_txn_del_blob(kh_store_txn *tx, const kh_hash *h, kh_err *err)
{
    kh_status st = need_write(tx, err);
    if (st)
        return st;
    kh_store_op op = {.kind = KH_OP_DEL_BLOB, .h = *h};
    return exec_op(tx, &op, err);
}

static kh_status blob_delete(kh_store_txn *tx, const kh_hash *h, int *full, kh_err *err)
{
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

static kh_status blob_head(kh_store_txn *tx, const kh_hash *h, MDB_val *v, int *fmt,
                           uint64_t *raw, uint32_t *n, uint32_t *cs, kh_err *err)
{
    if (tx->st)
        return tx_sticky(tx, err);
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
        return tx_sticky(tx, err);
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

/* ---- records: rules ------------------------------------------------------------------ */
/* The record types and the fields each must have (docs/store.md).  A later
 * module adds its type here. */
static const struct {
    const char *name;
    const char *required[3];
} TYPES[] = {
    {"task", {"name"}},
    {"candidate", {"task"}},
    {"compile", {"status"}}, /* content-addressed: many candidates may share one */
    {"evaluation", {"task", "candidate", "status"}},
    {"profile", {"tool"}},   /* a bare cubin may be profiled: candidate when known */
    {"run", {"policy"}},
    {"round", {"run"}},
    {"llm_call", {"model"}},
    {"promotion", {"candidate"}},
    {"device", {"gpu_uuid"}}, /* id device-<GPU UUID>: measured peaks, replaced */
    {"refout", {"definition"}}, /* id refout-<key>: a Python reference's outputs (eval.c) */
};
/* a type added to TYPES goes into kh_store_known_type's switch too */
_Static_assert(KH_ARRAY_LEN(TYPES) == 11, "kh_store_known_type lists every type");

/* Provenance a record of these types must carry (docs/store.md, "Records"):
 * per need, the fields that satisfy it ("a|b": either one), dotted paths
 * into objects; a field counts when present and neither null nor "".
 * Imports (KH_STORE_NOREFCHECK) are exempt: records written before this
 * rule must stay importable.  Other types carry their provenance in their
 * required fields or have none to give (docs/store.md says which). */
static const struct {
    const char *type;
    struct {
        const char *paths, *what;
    } need[3];
} PROVENANCE[] = {
    {"candidate", {{"source_blob|provenance.source_hash", "the source hash"}}},
    {"compile",
     {{"source_blob|provenance.source_hash", "the source hash"},
      {"provenance.compiler", "the compiler"},
      {"provenance.options", "the compiler options"}}},
    {"evaluation",
     {{"provenance.solution_hash|provenance.hashes.source", "the solution hash"},
      {"provenance.gpu_uuid|provenance.host", "the GPU UUID or host"},
      {"provenance.seeds|provenance.seed", "the seeds"}}},
    {"llm_call", {{"prompt_hash|fingerprint|prompt_blob|request_blob", "the prompt hash"}}},
};

/* The value at a dotted path of n bytes, or NULL. */
static const json_t *path_get(const json_t *rec, const char *path, size_t n)
{
    const json_t *v = rec;
    while (n && v) {
        const char *dot = memchr(path, '.', n);
        size_t l = dot ? (size_t)(dot - path) : n;
        v = json_is_object(v) ? json_object_getn(v, path, l) : NULL;
        if (!dot)
            break;
        path = dot + 1;
        n -= l + 1;
    }
    if (!v || json_is_null(v) || (json_is_string(v) && !json_string_length(v)))
        return NULL;
    return v;
}

static kh_status check_provenance(const json_t *rec, const char *type, kh_err *err)
{
    for (size_t t = 0; t < KH_ARRAY_LEN(PROVENANCE); t++) {
        if (strcmp(PROVENANCE[t].type, type))
            continue;
        for (int i = 0; i < 3 && PROVENANCE[t].need[i].paths; i++) {
            const char *p = PROVENANCE[t].need[i].paths;
            int found = 0;
            while (!found) {
                const char *bar = strchr(p, '|');
                size_t l = bar ? (size_t)(bar - p) : strlen(p);
                found = path_get(rec, p, l) != NULL;
                if (!bar)
                    break;
                p = bar + 1;
            }
            if (found)
                continue;
            /* 'a', 'b' or 'c' */
            char names[200];
            size_t k = 0;
            const char *q = PROVENANCE[t].need[i].paths;
            for (int alt = 0; *q && k < sizeof names - 8; alt++) {
                const char *bar = strchr(q, '|');
                size_t l = bar ? (size_t)(bar - q) : strlen(q);
                int r = snprintf(names + k, sizeof names - k, "%s'%.*s'",
                                 alt == 0 ? "" : bar ? ", " : " or ", (int)l, q);
                if (r < 0 || (size_t)r >= sizeof names - k)
                    break;
                k += (size_t)r;
                q = bar ? bar + 1 : q + l;
            }
            return kh_err_set(err, KH_EINVAL,
                              "a%s %s record must carry its provenance: %s (%s) is missing "
                              "(docs/store.md, Records)",
                              strchr("aeiou", type[0]) ? "n" : "", type,
                              PROVENANCE[t].need[i].what, names);
        }
    }
    return KH_OK;
}

int kh_store_known_type(const char *name)
{
    /* every top-level key of every record written comes here (is it a
     * reference?): the first letter narrows TYPES to at most two names */
    int a = 0, b = 0, c = 0; /* 1-based indices into TYPES */
    switch (name[0]) {
    case 't': a = 1; break;
    case 'c': a = 2, b = 3; break;
    case 'e': a = 4; break;
    case 'p': a = 5, b = 9; break;
    case 'r': a = 6, b = 7, c = 11; break;
    case 'l': a = 8; break;
    case 'd': a = 10; break;
    default: return 0;
    }
    if (!strcmp(TYPES[a - 1].name, name))
        return a;
    if (b && !strcmp(TYPES[b - 1].name, name))
        return b;
    if (c && !strcmp(TYPES[c - 1].name, name))
        return c;
    return 0;
}

/* Fields whose value is the id of another record: the type names, plus
 * these two aliases for a candidate. */
static const char *ref_type(const char *field)
{
    if (kh_store_known_type(field))
        return field;
    if ((field[0] == 'p' && !strcmp(field, "parent")) ||
        (field[0] == 'i' && !strcmp(field, "incumbent")))
        return "candidate";
    return NULL;
}

static int id_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.' || c == ':';
}

/* check_id's rules without the message (the write path's common case). */
static int id_ok(const char *id, const char *type)
{
    size_t tn = strlen(type), n;
    if (strncmp(id, type, tn) || id[tn] != '-')
        return 0;
    for (n = tn + 1; id[n]; n++)
        if (!id_char((unsigned char)id[n]))
            return 0;
    return n > tn + 1 && n < KH_STORE_ID_MAX;
}

static kh_status check_id(const char *id, const char *type, const char *what, kh_err *err)
{
    size_t n = strlen(id), tn = strlen(type);
    if (n == 0 || n >= KH_STORE_ID_MAX)
        return kh_err_set(err, KH_EINVAL, "%s: id '%.40s' must be 1..%d bytes", what, id,
                          KH_STORE_ID_MAX - 1);
    if (n <= tn + 1 || strncmp(id, type, tn) || id[tn] != '-')
        return kh_err_set(err, KH_EINVAL, "%s: '%s' is not a %s id (%s-...)", what, id, type,
                          type);
    for (size_t i = 0; i < n; i++)
        if (!id_char((unsigned char)id[i]))
            return kh_err_set(err, KH_EINVAL,
                              "%s: id '%s' has a character outside [A-Za-z0-9._:-]", what, id);
    return KH_OK;
}

kh_status kh_store_each_record_ref(const json_t *rec, kh_store_ref_fn fn, void *arg,
                                   kh_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)rec, k, v) {
        /* only a string is a reference: FlashInfer-Bench's "evaluation" object
         * inside an evaluation record is data */
        if (!ref_type(k) || !json_is_string(v))
            continue;
        kh_status st = fn(arg, k, json_string_value(v), err);
        if (st)
            return st;
    }
    return KH_OK;
}

static kh_status walk_blob_refs(const json_t *j, const char *field, kh_store_ref_fn fn,
                                void *arg, int depth, kh_err *err)
{
    if (depth > 64)
        return KH_OK;
    if (json_is_object(j)) {
        for (void *it = json_object_iter((json_t *)j); it;
             it = json_object_iter_next((json_t *)j, it)) {
            const char *k = json_object_iter_key(it);
            json_t *v = json_object_iter_value(it);
            size_t n = json_object_iter_key_len(it);
            int is_ref = n > 5 && !memcmp(k + n - 5, "_blob", 5);
            if (is_ref && !json_is_null(v)) {
                kh_status st = fn(arg, k, json_string_value(v), err);
                if (st)
                    return st;
            } else if (n == 5 && !memcmp(k, "blobs", 5) && json_is_array(v)) {
                size_t i;
                json_t *e;
                json_array_foreach(v, i, e) {
                    kh_status st = fn(arg, k, json_string_value(e), err);
                    if (st)
                        return st;
                }
            } else if (json_is_object(v) || json_is_array(v)) {
                kh_status st = walk_blob_refs(v, k, fn, arg, depth + 1, err);
                if (st)
                    return st;
            }
        }
    } else if (json_is_array(j)) {
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e) {
            if (json_is_object(e) || json_is_array(e)) {
                kh_status st = walk_blob_refs(e, field, fn, arg, depth + 1, err);
                if (st)
                    return st;
            }
        }
    }
    return KH_OK;
}

kh_status kh_store_each_blob_ref(const json_t *rec, kh_store_ref_fn fn, void *arg, kh_err *err)
{
    return walk_blob_refs(rec, "", fn, arg, 0, err);
}

static const char *opt_string(const json_t *rec, const char *field, size_t max, kh_err *err,
                              kh_status *st)
{
    json_t *v = json_object_get(rec, field);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        *st = kh_err_set(err, KH_EINVAL, "field '%s' must be a non-empty string of at most "
                                         "%zu bytes",
                         field, max);
        return NULL;
    }
    return json_string_value(v);
}

kh_status kh_store_rec_keys(const json_t *rec, kh_rec_keys *k, kh_err *err)
{
    kh_status st = KH_OK;
    memset(k, 0, sizeof *k);
    if (!json_is_object(rec))
        return kh_err_set(err, KH_EINVAL, "a record must be a JSON object");
    k->type = opt_string(rec, "type", 32, err, &st);
    if (st)
        return st;
    if (!k->type || !kh_store_known_type(k->type))
        return kh_err_set(err, KH_EINVAL,
                          "record type '%s' is not one of task, candidate, compile, "
                          "evaluation, profile, run, round, llm_call, promotion, device",
                          k->type ? k->type : "(missing)");
    k->status = opt_string(rec, "status", 64, err, &st);
    if (!st)
        k->task = opt_string(rec, "task", KH_STORE_ID_MAX - 1, err, &st);
    if (!st)
        k->run = opt_string(rec, "run", KH_STORE_ID_MAX - 1, err, &st);
    if (!st)
        k->candidate = opt_string(rec, "candidate", KH_STORE_ID_MAX - 1, err, &st);
    if (st)
        return st;
    const char *ca = json_string_value(json_object_get(rec, "created_at"));
    if (!ca)
        return kh_err_set(err, KH_EINVAL, "record has no created_at");
    return kh_store_parse_time(ca, &k->t_us, err);
}

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

json_t *kh_store_decode_record(kh_store *s, const MDB_val *v, kh_err *err)
{
    (void)s;
    json_t *j = kh_store_json_parse(v->mv_data, v->mv_size, err);
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
        kh_err_set(err, KH_ECORRUPT, "stored record is not a JSON object");
    }
    return j;
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
static kh_status index_flush(kh_store_txn *tx, kh_err *err)
{
    for (;;) {
        int full = 0;
        kh_status st = index_flush_once(tx, &full, err);
        if (!full)
            return st;
        if ((st = tx_recover(tx, err)))
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
static kh_status record_write(kh_store_txn *tx, const kh_store_op *op, int *full, kh_err *err)
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

static kh_status apply_op(kh_store_txn *tx, const kh_store_op *op, int *full, kh_err *err)
{
    switch (op->kind) {
    case KH_OP_RECORD:
        return record_write(tx, op, full, err);
    case KH_OP_BLOB:
        return blob_write(tx, &op->h, op->data, op->len, full, err);
    case KH_OP_DEL_BLOB:
        return blob_delete(tx, &op->h, full, err);
    default:
        return kh_err_set(err, KH_ESTORE, "internal: unknown store op %d", op->kind);
    }
}

/* Creation times strictly increase within a process, so newest-first is a
 * total order even for records made in the same microsecond. */
static int64_t next_us(kh_store *s)
{
    int64_t us = (int64_t)(kh_wall_now() * 1e6);
    if (us <= s->last_id_us)
        us = s->last_id_us + 1;
    s->last_id_us = us;
    return us;
}

static void make_id(kh_store *s, const char *type, int64_t *t_us, char out[KH_STORE_ID_MAX])
{
    /* Crockford base32 keeps the lexical order of the numbers. */
    static const char b32[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    int64_t us = next_us(s);
    *t_us = us;
    size_t tn = strlen(type); /* a known type: short */
    memcpy(out, type, tn);
    char *p = out + tn;
    *p++ = '-';
    for (int i = 10; i >= 0; i--)
        *p++ = b32[((uint64_t)us >> (5 * i)) & 31];
    uint32_t salt = s->id_salt;
    for (int i = 0; i < 4; i++)
        *p++ = b32[(salt >> (5 * i)) & 31];
    *p = '\0';
}

struct ref_ctx {
    kh_store_txn *tx;
    int check_exists;
};

static kh_status check_blob_ref(void *arg, const char *field, const char *value, kh_err *err)
{
    struct ref_ctx *c = arg;
    kh_hash h;
    if (!value)
        return kh_err_set(err, KH_EINVAL, "field '%s' must hold a blob hash string", field);
    if (kh_hash_parse(value, &h, err))
        return kh_err_prefix(err, "field '%s'", field), KH_EINVAL;
    if (!c->check_exists)
        return KH_OK;
    MDB_val key = {16, h.b}, v;
    int rc = mdb_get(c->tx->txn, c->tx->s->blobs, &key, &v);
    if (rc == MDB_NOTFOUND)
        return kh_err_set(err, KH_EINVAL, "field '%s': blob %s is not in the store (put the "
                                          "blob first)",
                          field, value);
    return rc ? kh_store_mdb_err(err, rc, "checking a blob reference") : KH_OK;
}

static kh_status check_record_ref(void *arg, const char *field, const char *value, kh_err *err)
{
    struct ref_ctx *c = arg;
    if (!value)
        return kh_err_set(err, KH_EINVAL, "field '%s' must hold a record id string", field);
    const char *type = ref_type(field);
    if (!id_ok(value, type)) {
        char what[64];
        snprintf(what, sizeof what, "field '%s'", field);
        kh_status st = check_id(value, type, what, err);
        return st ? st : kh_err_set(err, KH_EINVAL, "%s: bad id '%s'", what, value);
    }
    if (!c->check_exists)
        return KH_OK;
    kh_store *s = c->tx->s;
    size_t n = strlen(value); /* < KH_STORE_ID_MAX: id_ok */
    struct kh_refseen *e = NULL;
    if (!s->seen)
        s->seen = calloc(KH_REFSEEN, sizeof *s->seen); /* NULL: no memo, still correct */
    if (s->seen) {
        e = &s->seen[XXH3_64bits(value, n) % KH_REFSEEN];
        if (e->gen == s->seen_gen && e->len == n && !memcmp(e->id, value, n))
            return KH_OK;
    }
    MDB_val key = {n, (void *)value}, v;
    int rc = mdb_get(c->tx->txn, s->records, &key, &v);
    if (rc == MDB_NOTFOUND)
        return kh_err_set(err, KH_EINVAL,
                          "field '%s': record %s is not in the store (write it first)", field,
                          value);
    if (rc)
        return kh_store_mdb_err(err, rc, "checking a record reference");
    if (e) {
        e->gen = s->seen_gen;
        e->len = (unsigned char)n;
        memcpy(e->id, value, n);
    }
    return KH_OK;
}

kh_status kh_store_txn_put(kh_store_txn *tx, json_t *rec, int flags,
                           char id_out[KH_STORE_ID_MAX], kh_err *err)
{
    kh_status st = need_write(tx, err);
    if (st)
        return st;
    kh_store *s = tx->s;
    if (!json_is_object(rec))
        return tx_fail(tx, kh_err_set(err, KH_EINVAL, "a record must be a JSON object"), err);
    const char *type = json_string_value(json_object_get(rec, "type"));
    int ti = type ? kh_store_known_type(type) : 0;
    if (!ti)
        return tx_fail(tx,
                       kh_err_set(err, KH_EINVAL,
                                  "record type '%s' is not one of task, candidate, compile, "
                                  "evaluation, profile, run, round, llm_call, promotion, device",
                                  type ? type : "(missing)"),
                       err);
    /* an evaluation's status defaults to its FlashInfer-Bench verdict */
    if (!strcmp(type, "evaluation") && !json_object_get(rec, "status")) {
        json_t *es = json_object_get(json_object_get(rec, "evaluation"), "status");
        if (json_is_string(es))
            json_object_set(rec, "status", es);
    }
    for (int i = 0; i < 3 && TYPES[ti - 1].required[i]; i++) {
        json_t *f = json_object_get(rec, TYPES[ti - 1].required[i]);
        if (!f || json_is_null(f))
            return tx_fail(tx,
                           kh_err_set(err, KH_EINVAL, "a %s record needs the field '%s'", type,
                                      TYPES[ti - 1].required[i]),
                           err);
    }
    if (!(flags & KH_STORE_NOREFCHECK) && (st = check_provenance(rec, type, err)))
        return tx_fail(tx, st, err);
    char id[KH_STORE_ID_MAX];
    json_t *jid = json_object_get(rec, "id");
    json_t *jca = json_object_get(rec, "created_at");
    int64_t t_us = 0;
    if (jid && !json_is_null(jid)) {
        if (!json_is_string(jid))
            return tx_fail(tx, kh_err_set(err, KH_EINVAL, "field 'id' must be a string"), err);
        snprintf(id, sizeof id, "%s", json_string_value(jid));
        if ((st = check_id(json_string_value(jid), type, "field 'id'", err)))
            return tx_fail(tx, st, err);
    } else if (!strcmp(type, "task") && json_is_string(json_object_get(rec, "name"))) {
        /* tasks are named: their id is "task-<name>" */
        int n = snprintf(id, sizeof id, "task-%s",
                         json_string_value(json_object_get(rec, "name")));
        if (n >= (int)sizeof id || (st = check_id(id, type, "task name", err)))
            return tx_fail(tx,
                           n >= (int)sizeof id
                               ? kh_err_set(err, KH_EINVAL, "task name too long")
                               : st,
                           err);
        json_object_set_new(rec, "id", json_string(id));
    } else {
        make_id(s, type, &t_us, id);
        json_object_set_new(rec, "id", json_string(id));
    }
    if (jca && !json_is_null(jca)) {
        if (!json_is_string(jca) ||
            kh_store_parse_time(json_string_value(jca), &t_us, err) != KH_OK)
            return tx_fail(tx,
                           kh_err_set(err, KH_EINVAL,
                                      "field 'created_at' must be an ISO 8601 time"),
                           err);
    } else {
        /* a replaced record keeps its creation time (and its place in the indices) */
        MDB_val key = {strlen(id), id}, old;
        json_t *o = NULL;
        if ((flags & KH_STORE_REPLACE) && mdb_get(tx->txn, s->records, &key, &old) == 0 &&
            (o = kh_store_decode_record(s, &old, err)) &&
            json_is_string(json_object_get(o, "created_at"))) {
            json_object_set(rec, "created_at", json_object_get(o, "created_at"));
        } else {
            char ts[40];
            if (!t_us)
                t_us = next_us(s);
            kh_store_format_time(t_us, ts);
            json_object_set_new(rec, "created_at", json_string(ts));
        }
        json_decref(o);
    }
    kh_rec_keys k;
    if ((st = kh_store_rec_keys(rec, &k, err)))
        return tx_fail(tx, st, err);
    struct ref_ctx rc = {tx, !(flags & KH_STORE_NOREFCHECK)};
    if ((st = kh_store_each_record_ref(rec, check_record_ref, &rc, err)) ||
        (st = kh_store_each_blob_ref(rec, check_blob_ref, &rc, err)))
        return tx_fail(tx, st, err);
    /* "id\0text" into the txn's log, where a replay finds it */
    size_t off = tx->log.n, idlen = strlen(id);
    if ((st = kh_sbuf_reserve(&tx->log, idlen + 1, err)))
        return tx_fail(tx, st, err);
    memcpy(tx->log.p + off, id, idlen + 1);
    tx->log.n += idlen + 1;
    if ((st = kh_store_json_dump(rec, &tx->log, err))) {
        tx->log.n = off;
        kh_err_prefix(err, "cannot serialize record %s", id);
        return tx_fail(tx, st, err);
    }
    size_t textlen = tx->log.n - off - idlen - 1;
    const char *sec = find_secret(s, tx->log.p + off + idlen + 1, textlen);
    if (sec) {
        memset(tx->log.p + off, 0, tx->log.n - off);
        tx->log.n = off;
        return tx_fail(tx,
                       kh_err_set(err, KH_EINVAL,
                                  "refusing to store record %s: it contains the value of $%s "
                                  "(an API key must never be archived)",
                                  id, sec),
                       err);
    }
    kh_store_op op = {.kind = KH_OP_RECORD,
                      .flags = flags & KH_STORE_REPLACE,
                      .off = off,
                      .idlen = idlen,
                      .textlen = textlen,
                      .live = rec,
                      .keys = &k};
    if ((st = exec_op(tx, &op, err)))
        return st;
    if (id_out)
        memcpy(id_out, id, strlen(id) + 1);
    return KH_OK;
}

kh_status kh_store_txn_put_many(kh_store_txn *tx, json_t *const *recs, size_t n, int flags,
                                char (*ids)[KH_STORE_ID_MAX], kh_err *err)
{
    for (size_t i = 0; i < n; i++) {
        kh_status st = kh_store_txn_put(tx, recs[i], flags, ids ? ids[i] : NULL, err);
        if (st) {
            kh_err_prefix(err, "record %zu of %zu", i + 1, n);
            if (tx->st == st) /* the sticky copy, which update reports, says which too */
                tx->err = *err;
            return st;
        }
    }
    return KH_OK;
}

kh_status kh_store_txn_get(kh_store_txn *tx, const char *id, json_t **out, kh_err *err)
{
    *out = NULL;
    if (tx->st)
        return tx_sticky(tx, err);
    if (!id || !id[0] || strlen(id) >= KH_STORE_ID_MAX)
        return kh_err_set(err, KH_ENOTFOUND, "no record '%.80s'", id ? id : "");
    MDB_val key = {strlen(id), (void *)id}, v;
    int rc = mdb_get(tx->txn, tx->s->records, &key, &v);
    if (rc == MDB_NOTFOUND)
        return kh_err_set(err, KH_ENOTFOUND, "no record '%s'", id);
    if (rc)
        return kh_store_mdb_err(err, rc, "reading a record");
    *out = kh_store_decode_record(tx->s, &v, err);
    if (!*out)
        return kh_err_prefix(err, "record %s", id), KH_ECORRUPT;
    return KH_OK;
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
        return tx_sticky(tx, err);
    if (tx->write && tx->npend) { /* the txn's own puts are part of the answer */
        kh_status st = index_flush(tx, err);
        if (st)
            return tx_fail(tx, st, err);
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
    const char *types[KH_ARRAY_LEN(TYPES)];
    size_t ntypes = 0;
    if (q->type) {
        if (!kh_store_known_type(q->type)) {
            *out = json_array();
            return *out ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
        }
        types[ntypes++] = q->type;
    } else {
        for (size_t i = 0; i < KH_ARRAY_LEN(TYPES); i++)
            types[ntypes++] = TYPES[i].name;
    }
    qcur cur[KH_ARRAY_LEN(TYPES)];
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

/* ---- one-call wrappers ---------------------------------------------------------------------- */
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
        int rc = grow_if_needed(s, len + len / 8 + (1u << 20));
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

struct rec_arg {
    json_t *rec;
    int flags;
    char *id;
    const char *get_id;
    json_t **out;
    const kh_store_filter *q;
    int ids_only;
};

static kh_status do_put(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct rec_arg *a = arg;
    return kh_store_txn_put(tx, a->rec, a->flags, a->id, err);
}

kh_status kh_store_put(kh_store *s, json_t *rec, int flags, char id_out[KH_STORE_ID_MAX],
                       kh_err *err)
{
    struct rec_arg a = {.rec = rec, .flags = flags, .id = id_out};
    return kh_store_update(s, do_put, &a, err);
}

struct many_arg {
    json_t *const *recs;
    size_t n;
    int flags;
    char (*ids)[KH_STORE_ID_MAX];
};

static kh_status do_put_many(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct many_arg *a = arg;
    return kh_store_txn_put_many(tx, a->recs, a->n, a->flags, a->ids, err);
}

kh_status kh_store_put_records(kh_store *s, json_t *const *recs, size_t n, int flags,
                               char (*ids)[KH_STORE_ID_MAX], kh_err *err)
{
    struct many_arg a = {recs, n, flags, ids};
    return kh_store_update(s, do_put_many, &a, err);
}

static kh_status do_get(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct rec_arg *a = arg;
    return kh_store_txn_get(tx, a->get_id, a->out, err);
}

kh_status kh_store_get(kh_store *s, const char *id, json_t **out, kh_err *err)
{
    *out = NULL;
    struct rec_arg a = {.get_id = id, .out = out};
    return kh_store_view(s, do_get, &a, err);
}

static kh_status do_query(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct rec_arg *a = arg;
    return kh_store_txn_query(tx, a->q, a->ids_only, a->out, err);
}

kh_status kh_store_query(kh_store *s, const kh_store_filter *q, int ids_only, json_t **out,
                         kh_err *err)
{
    *out = NULL;
    struct rec_arg a = {.q = q, .ids_only = ids_only, .out = out};
    return kh_store_view(s, do_query, &a, err);
}
