/* store_export.c: the artifact store out and in (see store.h): export as
 * the JSONL import format (base64 blobs, then records) or as
 * FlashInfer-Bench Trace JSONL, and import of the former.  An export runs in
 * one read transaction (one snapshot); an import writes in batches.  The
 * whole-store walks (stats, verify, gc, backup) are store_tools.c's. */
#include "store/store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    struct kh_store_hashset refs = {0};
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
                st = kh_store_each_blob_ref(rec, kh_store_collect_hash, &refs, err);
            json_decref(rec);
        }
        mdb_cursor_close(cur);
        qsort(refs.v, refs.n, sizeof *refs.v, kh_store_hash_cmp);
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
