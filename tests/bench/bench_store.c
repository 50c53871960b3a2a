/* bench_store.c: throughput and latency of the artifact store (store.h).
 *   bench_store [RECORDS (default 1000000)] [BATCH (default 10000)]
 * Prints batched record writes per second, blob put/get MB/s, and indexed
 * query latency p50/p99 over the records written, each beside an anchor
 * measured in the same run on the same machine (raw LMDB puts and gets of the
 * same bytes without indices or validation; XXH3 + zstd alone for blobs), and
 * the ratio against the targets of issue #3 (>= 100,000 records/s batched,
 * read p99 <= 50 us).  The writes: one transaction per batch, each record
 * built, put and freed in turn, inside bulk mode (kh_store_bulk_begin / end: commits
 * unsynced, one sync at the end, counted in the time); KH_BENCH_DURABLE=1
 * syncs every commit instead.  The anchor follows the same sync protocol,
 * its batches alternating with the store's so both see the same load.
 * Build it without sanitizers for meaningful numbers.  Environment:
 * KH_BENCH_NOSYNC (a no-sync store: nothing synced at all),
 * KH_BENCH_WRITES_ONLY (the write phase alone, to profile
 * it), KH_BENCH_NO_BLOBS (skip blobs), KH_BENCH_QUERIES=N (queries per kind,
 * default 20000). */
#include "store/store.h"

#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#define NTASKS 100
#define NCANDS 2000

static uint64_t rng = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void die(const char *what, const kh_err *err)
{
    fprintf(stderr, "bench_store: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static const char *STATUS[4] = {"PASSED", "INCORRECT_NUMERICAL", "RUNTIME_ERROR", "TIMEOUT"};
static char tasks[NTASKS][KH_STORE_ID_MAX], cands[NCANDS][KH_STORE_ID_MAX];
static char cand_src[NCANDS][33]; /* the candidates' source hashes */
static char (*ids)[KH_STORE_ID_MAX];

static json_t *make_eval(void)
{
    int c = (int)(rnd() % NCANDS);
    char uuid[40];
    snprintf(uuid, sizeof uuid, "%016llx", (unsigned long long)rnd());
    /* with the provenance the store requires: solution hash, GPU UUID, seeds */
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:s, s:{s:i}}, s:{s:f, s:f}, "
                     "s:{s:{s:s}, s:s, s:s, s:[I]}}",
                     "type", "evaluation", "task", tasks[c % NTASKS], "candidate", cands[c],
                     "status", STATUS[rnd() % 4], "protocol", "screen", "workload", "uuid",
                     uuid, "axes", "batch_size", (int)(rnd() % 512), "performance",
                     "latency_ms", (double)(rnd() % 100000) / 1e4, "speedup_factor",
                     (double)(rnd() % 1000) / 10.0, "provenance", "hashes", "source",
                     cand_src[c], "gpu_uuid", "GPU-5e1c7a4e-0000-4000-8000-000000000000",
                     "driver", "580.65.06", "seeds", (json_int_t)(rnd() % 1000000));
}

struct batch {
    size_t from, to;
};

/* one record built, put and freed at a time, as the anchor does */
static kh_status put_batch(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct batch *b = arg;
    for (size_t i = b->from; i < b->to; i++) {
        json_t *r = make_eval();
        kh_status st = kh_store_txn_put(tx, r, 0, ids[i], err);
        json_decref(r);
        if (st)
            return st;
    }
    return KH_OK;
}

/* sync protocol of the write phase, for the store and its anchor alike */
static int bulk_mode(void) { return !getenv("KH_BENCH_DURABLE") && !getenv("KH_BENCH_NOSYNC"); }

/* Bytes this process has handed to write calls so far (/proc/self/io
 * "wchar"): LMDB writes dirty pages with pwrite, so this is the data a
 * commit pushes to the file. */
static double io_written(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    double v = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "wchar:", 6))
            v = strtod(line + 6, NULL);
    if (f)
        fclose(f);
    return v;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void pct(double *v, size_t n, double *p50, double *p99)
{
    qsort(v, n, sizeof *v, cmp_d);
    *p50 = v[n / 2] * 1e6;
    *p99 = v[(size_t)((double)n * 0.99)] * 1e6;
}

/* The anchor for writes: the same number of JSON texts of the same shape,
 * put straight into an LMDB database (no validation, ids or indices), in
 * the same batches under the same sync protocol.  Its batches alternate with
 * the store's (store batch k, anchor batch k, ...) so both see the same load
 * on a shared machine; each side's clock runs only during its own batches. */
typedef struct anchor {
    MDB_env *env;
    size_t next; /* records written so far (their keys are sequential) */
    double secs, cpu, bytes;
} anchor;

static void anchor_open(anchor *a, const char *dir, size_t n)
{
    char p[600];
    snprintf(p, sizeof p, "%s/anchor", dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    if (system(cmd) != 0)
        die("mkdir", NULL);
    unsigned flags = bulk_mode() || getenv("KH_BENCH_NOSYNC") ? MDB_NOSYNC : 0;
    if (mdb_env_create(&a->env) || mdb_env_set_mapsize(a->env, n * 4096 + ((size_t)1 << 30)) ||
        mdb_env_open(a->env, p, flags, 0644))
        die("anchor env", NULL);
}

static void anchor_batch(anchor *a, size_t m)
{
    double t0 = kh_now(), w0 = io_written();
    clock_t c0 = clock();
    MDB_txn *txn;
    MDB_dbi dbi;
    if (mdb_txn_begin(a->env, NULL, 0, &txn) || mdb_dbi_open(txn, NULL, 0, &dbi))
        die("anchor txn", NULL);
    for (size_t k = 0; k < m; k++, a->next++) {
        json_t *r = make_eval();
        char key[32];
        snprintf(key, sizeof key, "evaluation-%012zu", a->next);
        json_object_set_new(r, "id", json_string(key));
        json_object_set_new(r, "created_at", json_string("2026-12-02T15:04:05.123456Z"));
        char *t = json_dumps(r, JSON_COMPACT);
        MDB_val k1 = {strlen(key), key}, v = {strlen(t), t};
        if (mdb_put(txn, dbi, &k1, &v, 0))
            die("anchor put", NULL);
        free(t);
        json_decref(r);
    }
    if (mdb_txn_commit(txn))
        die("anchor commit", NULL);
    a->secs += kh_now() - t0;
    a->cpu += (double)(clock() - c0) / CLOCKS_PER_SEC;
    a->bytes += io_written() - w0;
}

static void anchor_close(anchor *a)
{
    double t0 = kh_now(), w0 = io_written();
    if (bulk_mode() && mdb_env_sync(a->env, 1)) /* the store's bulk end does the same */
        die("anchor sync", NULL);
    a->secs += kh_now() - t0;
    a->bytes += io_written() - w0;
    mdb_env_close(a->env);
}

static double anchor_read_p99(const char *dir, size_t n, double *p50)
{
    char p[600];
    snprintf(p, sizeof p, "%s/anchor", dir);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    if (mdb_env_create(&env) || mdb_env_set_mapsize(env, n * 4096 + ((size_t)1 << 30)) ||
        mdb_env_open(env, p, MDB_RDONLY, 0644))
        die("anchor env", NULL);
    size_t q = getenv("KH_BENCH_QUERIES") ? strtoull(getenv("KH_BENCH_QUERIES"), NULL, 10) : 20000;
    if (q < 100)
        q = 100;
    double *lat = malloc(q * sizeof *lat);
    for (size_t i = 0; i < q; i++) {
        char key[32];
        snprintf(key, sizeof key, "evaluation-%012zu", (size_t)(rnd() % n));
        double t0 = kh_now();
        MDB_val k1 = {strlen(key), key}, v;
        if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) || mdb_dbi_open(txn, NULL, 0, &dbi) ||
            mdb_get(txn, dbi, &k1, &v))
            die("anchor get", NULL);
        json_t *j = json_loadb(v.mv_data, v.mv_size, 0, NULL);
        mdb_txn_abort(txn);
        lat[i] = kh_now() - t0;
        json_decref(j);
    }
    double p99;
    pct(lat, q, p50, &p99);
    free(lat);
    mdb_env_close(env);
    return p99;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    size_t batch = argc > 2 ? strtoull(argv[2], NULL, 10) : 10000;
    if (n < 1000 || batch < 1) {
        fprintf(stderr, "usage: bench_store [RECORDS>=1000] [BATCH]\n");
        return 2;
    }
    unsetenv("KHLUA_API_KEY");
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/khlua-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir))
        die("mkdtemp", NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/store", dir);
    kh_store *s;
    kh_err err;
    kh_store_opts o = {.nosync = getenv("KH_BENCH_NOSYNC") != NULL};
    if (kh_store_open(path, &o, &s, &err))
        die("open", &err);
    printf("bench_store: %zu records, batches of %zu, %s, store in %s\n", n, batch,
           o.nosync ? "no-sync store, nothing synced (KH_BENCH_NOSYNC)"
           : bulk_mode() ? "bulk mode (commits unsynced, one sync at the end, timed)"
                         : "every commit synced (KH_BENCH_DURABLE)",
           dir);

    /* tasks and candidates the evaluations refer to (untimed; in bulk mode,
     * else 4,100 synced one-record commits take longer than the bench) */
    if (kh_store_bulk_begin(s, &err))
        die("bulk", &err);
    for (int i = 0; i < NTASKS; i++) {
        char name[32];
        snprintf(name, sizeof name, "op_%03d", i);
        json_t *t = json_pack("{s:s, s:s}", "type", "task", "name", name);
        if (kh_store_put(s, t, 0, tasks[i], &err))
            die("task", &err);
        json_decref(t);
    }
    for (int i = 0; i < NCANDS; i++) {
        char src[128];
        snprintf(src, sizeof src, "__global__ void k%d(float *x) { x[%llu] += 1; }", i,
                 (unsigned long long)rnd());
        kh_hash h;
        char hx[33];
        if (kh_store_put_blob(s, src, strlen(src), &h, &err))
            die("blob", &err);
        kh_hash_hex(&h, hx);
        memcpy(cand_src[i], hx, 33);
        json_t *c = json_pack("{s:s, s:s, s:s}", "type", "candidate", "task", tasks[i % NTASKS],
                              "source_blob", hx);
        if (kh_store_put(s, c, 0, cands[i], &err))
            die("candidate", &err);
        json_decref(c);
    }
    if (kh_store_bulk_end(s, &err))
        die("bulk end", &err);

    /* ---- batched record writes (KH_BENCH_WRITES_ONLY: the store alone, to profile it) ---- */
    ids = malloc(n * sizeof *ids);
    int with_anchor = !getenv("KH_BENCH_WRITES_ONLY");
    anchor an = {0};
    if (with_anchor)
        anchor_open(&an, dir, n);
    double wdt = 0, wbytes = 0, wcpu = 0, sync_s = 0;
    if (bulk_mode() && kh_store_bulk_begin(s, &err))
        die("bulk", &err);
    for (size_t i = 0; i < n; i += batch) {
        struct batch b = {i, i + batch < n ? i + batch : n};
        double t0 = kh_now(), w0 = io_written();
        clock_t c0 = clock();
        if (kh_store_update(s, put_batch, &b, &err))
            die("batch", &err);
        wdt += kh_now() - t0;
        wcpu += (double)(clock() - c0) / CLOCKS_PER_SEC;
        wbytes += io_written() - w0;
        if (with_anchor)
            anchor_batch(&an, b.to - b.from);
    }
    double t0 = kh_now(), w0 = io_written();
    if (bulk_mode() && kh_store_bulk_end(s, &err))
        die("bulk end", &err);
    sync_s = kh_now() - t0;
    wdt += sync_s;
    wbytes += io_written() - w0;
    if (with_anchor)
        anchor_close(&an);
    double wps = (double)n / wdt, aps = with_anchor ? (double)n / an.secs : 1, abytes = an.bytes;
    if (!with_anchor)
        printf("\nrecord writes (batched): %10.0f records/s   (no anchor in this mode)   "
               "target 100000/s: %.2fx %s\n",
               wps, wps / 100000.0, wps >= 100000 ? "MET" : "NOT MET");
    else
        printf("\nrecord writes (batched): %10.0f records/s   anchor (raw LMDB put, no index, "
               "same sync, batches interleaved) %10.0f/s   store/anchor %.2f   target "
               "100000/s: %.2fx %s\n",
               wps, aps, wps / aps, wps / 100000.0, wps >= 100000 ? "MET" : "NOT MET");
    /* what building and freeing the records costs the caller (inside both
     * the store's and the anchor's figures): the same loop without a write */
    size_t nb0 = n < 100000 ? n : 100000;
    clock_t b0 = clock();
    for (size_t i = 0; i < nb0; i++)
        json_decref(make_eval());
    double bcpu = (double)(clock() - b0) / CLOCKS_PER_SEC / (double)nb0;
    printf("  (bytes written to the file per record: store %.0f", wbytes / (double)n);
    if (with_anchor)
        printf(", anchor %.0f", abytes / (double)n);
    printf(")\n");
    printf("  (store: %.2f s wall, of which %.2f s the final sync; %.1f us CPU per record, of "
           "which %.1f us build and free the JSON object in the caller",
           wdt, sync_s, wcpu / (double)n * 1e6, bcpu * 1e6);
    if (with_anchor)
        printf("; anchor: %.2f s wall, %.1f us CPU per record", an.secs,
               an.cpu / (double)n * 1e6);
    printf(")\n");

    if (getenv("KH_BENCH_WRITES_ONLY")) {
        kh_store_close(s);
        free(ids);
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        return system(cmd) != 0;
    }
    /* ---- blobs (KH_BENCH_NO_BLOBS: skip them, to profile the queries) ---- */
    size_t nb = getenv("KH_BENCH_NO_BLOBS") ? 0 : 48, bl = (size_t)4 << 20;
    unsigned char *blob = malloc(bl);
    kh_hash *hs = malloc(nb * sizeof *hs);
    double put_t = 0, get_t = 0, anchor_t = 0;
    size_t total = 0;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    unsigned char *cb = malloc(ZSTD_compressBound(1 << 20));
    for (size_t i = 0; i < nb; i++) {
        /* half random, half text-like (compressible) */
        for (size_t k = 0; k < bl; k += 8) {
            uint64_t v = i % 2 ? rnd() : (rnd() % 16) * 0x0101010101010101ULL;
            memcpy(blob + k, &v, 8);
        }
        blob[0] = (unsigned char)i;
        double a = kh_now();
        if (kh_store_put_blob(s, blob, bl, &hs[i], &err))
            die("put_blob", &err);
        put_t += kh_now() - a;
        a = kh_now();
        XXH128_hash_t hh = XXH3_128bits(blob, bl);
        for (size_t off = 0; off < bl; off += 1 << 20)
            ZSTD_compressCCtx(cc, cb, ZSTD_compressBound(1 << 20), blob + off, 1 << 20, 3);
        anchor_t += kh_now() - a;
        (void)hh;
        total += bl;
    }
    for (size_t i = 0; i < nb; i++) {
        void *got;
        size_t gl;
        double a = kh_now();
        if (kh_store_get_blob(s, &hs[i], &got, &gl, &err))
            die("get_blob", &err);
        get_t += kh_now() - a;
        free(got);
    }
    double mb = (double)total / 1e6;
    if (nb) {
        printf("blob put:  %8.0f MB/s   anchor (XXH3-128 + zstd-3 alone) %8.0f MB/s   "
               "put/anchor %.2f\n",
               mb / put_t, mb / anchor_t, anchor_t / put_t);
        printf("blob get:  %8.0f MB/s   (%zu blobs of %zu MiB, half random, half "
               "compressible)\n",
               mb / get_t, nb, bl >> 20);
    }
    free(blob);
    free(cb);
    ZSTD_freeCCtx(cc);

    /* ---- queries ---- */
    /* KH_BENCH_QUERIES: queries per kind (default 20000; fewer to profile) */
    size_t q = getenv("KH_BENCH_QUERIES") ? strtoull(getenv("KH_BENCH_QUERIES"), NULL, 10) : 20000;
    if (q < 100)
        q = 100;
    double *lat = malloc(q * sizeof *lat);
    double p50, p99, a50, a99;
    a99 = anchor_read_p99(dir, n, &a50);
    struct {
        const char *name;
        int kind, ids_only;
    } qs[] = {
        {"get by id", 0, 0},
        {"task+type, newest 10, ids", 1, 1},
        {"task+type, newest 10", 1, 0},
        {"candidate, newest 1", 2, 0},
        {"type+status, newest 10, ids", 3, 1},
        {"type+status, newest 10", 3, 0},
    };
    printf("\nqueries over %zu records (each its own read transaction; \"ids\": the index "
           "walk alone, else the records are read and parsed too):\n",
           n + NTASKS + NCANDS);
    printf("  %-30s %9s %9s   anchor (raw get + parse) p50 %.1f us p99 %.1f us\n", "", "p50 us",
           "p99 us", a50, a99);
    int all_met = 1;
    for (size_t k = 0; k < KH_ARRAY_LEN(qs); k++) {
        size_t found = 0;
        for (size_t i = 0; i < q; i++) {
            json_t *out = NULL;
            double a = kh_now();
            kh_status st;
            if (qs[k].kind == 0) {
                st = kh_store_get(s, ids[rnd() % n], &out, &err);
            } else {
                kh_store_filter f = {0};
                if (qs[k].kind == 1) {
                    f.task = tasks[rnd() % NTASKS];
                    f.type = "evaluation";
                    f.limit = 10;
                } else if (qs[k].kind == 2) {
                    f.candidate = cands[rnd() % NCANDS];
                    f.limit = 1;
                } else {
                    f.type = "evaluation";
                    f.status = STATUS[rnd() % 4];
                    f.limit = 10;
                }
                st = kh_store_query(s, &f, qs[k].ids_only, &out, &err);
            }
            lat[i] = kh_now() - a;
            if (st)
                die("query", &err);
            found += json_is_array(out) ? json_array_size(out) : 1;
            json_decref(out);
        }
        pct(lat, q, &p50, &p99);
        if (p99 > 50) /* the queries that read and parse records count too */
            all_met = 0;
        printf("  %-30s %9.1f %9.1f   p99/anchor %.2f   target p99 <= 50 us: %.2fx %s "
               "(%.1f results/query)\n",
               qs[k].name, p50, p99, p99 / a99, 50.0 / p99, p99 <= 50 ? "MET" : "NOT MET",
               (double)found / (double)q);
    }
    json_t *st;
    if (kh_store_stats(s, &st, &err))
        die("stats", &err);
    printf("\nstore: %lld records, map %lld MB used of %lld MB\n",
           (long long)json_integer_value(json_object_get(st, "records_total")),
           (long long)json_integer_value(json_object_get(st, "map_used")) >> 20,
           (long long)json_integer_value(json_object_get(st, "map_size")) >> 20);
    printf("targets: writes %s, read p99 (get by id, every index query) %s\n",
           wps >= 100000 ? "MET" : "NOT MET", all_met ? "MET" : "NOT MET");
    json_decref(st);
    kh_store_close(s);
    free(lat);
    free(hs);
    free(ids);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_store: could not remove %s\n", dir);
    return 0;
}
