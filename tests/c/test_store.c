/* test_store.c: the artifact store engine (store.h) alone: blobs, records,
 * indices and queries, the sticky transaction error, map growth, corruption
 * and foreign files, API-key refusal, verify, gc, backup, export/import. */
#include "kh_test.h"

#include "store/store.h"
#include "store/store_int.h" /* the record JSON writer and reader, tested against jansson */

#include <lmdb.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(rnd() >> 24);
}
/* Compressible but not constant: words drawn from a small random vocabulary. */
static void fill_text(unsigned char *p, size_t n)
{
    static const char *w[] = {"__global__ ", "float ", "threadIdx.x ", "blockDim ", "+= ",
                              "shared ", "acc ", "; \n"};
    size_t i = 0;
    while (i < n) {
        const char *s = w[rnd() % 8];
        while (*s && i < n)
            p[i++] = (unsigned char)*s++;
    }
}

typedef struct fixture {
    char *dir;
    char path[600];
    kh_store *s;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = kh_test_tmpdir();
    snprintf(f->path, sizeof f->path, "%s/store", f->dir);
    kh_err err;
    kh_store_opts o = {0};
    if (kh_store_open(f->path, &o, &f->s, &err))
        fail_msg("open: %s", err.msg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kh_store_close(f->s);
    kh_test_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static json_t *verify_ok(kh_store *s)
{
    json_t *r;
    kh_err err;
    assert_int_equal(kh_store_verify(s, &r, &err), KH_OK);
    json_t *p = json_object_get(r, "problems");
    if (json_array_size(p)) {
        char *t = json_dumps(p, JSON_INDENT(1));
        fail_msg("verify found problems: %s", t);
    }
    return r;
}

/* ---- blobs ---------------------------------------------------------------------- */
static void test_blob_roundtrip(void **state)
{
    fixture *f = *state;
    size_t sizes[] = {0, 1, 1000, 65536, (1u << 20) - 1, 1u << 20, (1u << 20) + 1,
                      3 * (1u << 20) + 12345};
    /* distinct contents put: the empty blob twice, and a 1-byte random blob
     * may draw the 1-byte text's byte (1 in 256) */
    kh_hash seen[2 * KH_ARRAY_LEN(sizes)];
    size_t distinct = 0;
    for (size_t i = 0; i < KH_ARRAY_LEN(sizes); i++) {
        for (int kind = 0; kind < 2; kind++) {
            size_t n = sizes[i];
            unsigned char *buf = malloc(n + 1);
            kind ? fill_text(buf, n) : fill_random(buf, n);
            kh_hash h, h2;
            kh_err err;
            assert_int_equal(kh_store_put_blob(f->s, buf, n, &h, &err), KH_OK);
            kh_hash_bytes(buf, n, &h2);
            assert_memory_equal(h.b, h2.b, 16);
            size_t k = 0;
            while (k < distinct && memcmp(seen[k].b, h.b, 16))
                k++;
            if (k == distinct)
                seen[distinct++] = h;
            void *got;
            size_t gn;
            assert_int_equal(kh_store_get_blob(f->s, &h, &got, &gn, &err), KH_OK);
            assert_int_equal(gn, n);
            if (n)
                assert_memory_equal(got, buf, n);
            free(got);
            /* a second put of the same bytes is a no-op with the same hash */
            assert_int_equal(kh_store_put_blob(f->s, buf, n, &h2, &err), KH_OK);
            assert_memory_equal(h.b, h2.b, 16);
            free(buf);
        }
    }
    json_t *st;
    kh_err err;
    assert_int_equal(kh_store_stats(f->s, &st, &err), KH_OK);
    assert_int_equal(json_integer_value(json_object_get(st, "blobs")), distinct);
    /* text compresses, so fewer bytes are stored than raw */
    assert_true(json_integer_value(json_object_get(st, "blob_bytes_stored")) <
                json_integer_value(json_object_get(st, "blob_bytes_raw")));
    json_decref(st);
    json_decref(verify_ok(f->s));
    kh_hash missing;
    fill_random(missing.b, 16);
    void *got;
    size_t gn;
    assert_int_equal(kh_store_get_blob(f->s, &missing, &got, &gn, &err), KH_ENOTFOUND);
    assert_int_equal(kh_hash_parse("xyz", &missing, &err), KH_EINVAL);
    char hx[33];
    kh_hash_hex(&missing, hx);
    kh_hash back;
    assert_int_equal(kh_hash_parse(hx, &back, &err), KH_OK);
    assert_memory_equal(back.b, missing.b, 16);
}

/* ---- records -------------------------------------------------------------------- */
static char task_id[KH_STORE_ID_MAX], cand_id[KH_STORE_ID_MAX];

/* The provenance the store requires of an evaluation (solution hash, host,
 * seeds) or a model call (prompt hash), added to a test record; returns it. */
static json_t *prov(json_t *r)
{
    const char *type = json_string_value(json_object_get(r, "type"));
    char hx[33];
    snprintf(hx, sizeof hx, "%016llx%016llx", (unsigned long long)rnd(),
             (unsigned long long)rnd());
    if (!strcmp(type, "evaluation"))
        json_object_set_new(r, "provenance",
                            json_pack("{s:{s:s}, s:s, s:[I]}", "hashes", "source", hx, "host",
                                      "test-host", "seeds", (json_int_t)(rnd() % 100000)));
    else if (!strcmp(type, "llm_call"))
        json_object_set_new(r, "fingerprint", json_string(hx + 16));
    return r;
}

static void put_base(kh_store *s)
{
    kh_err err;
    char src[64];
    snprintf(src, sizeof src, "kernel %llu", (unsigned long long)rnd());
    kh_hash h;
    assert_int_equal(kh_store_put_blob(s, src, strlen(src), &h, &err), KH_OK);
    char hx[33];
    kh_hash_hex(&h, hx);
    json_t *t = json_pack("{s:s, s:s}", "type", "task", "name", "gdn_decode_qk4");
    assert_int_equal(kh_store_put(s, t, 0, task_id, &err), KH_OK);
    assert_string_equal(task_id, "task-gdn_decode_qk4");
    json_decref(t);
    json_t *c = json_pack("{s:s, s:s, s:s, s:{s:s, s:s}}", "type", "candidate", "task", task_id,
                          "source_blob", hx, "provenance", "source_hash", hx, "compiler",
                          "nvrtc 13.0");
    if (kh_store_put(s, c, 0, cand_id, &err))
        fail_msg("%s", err.msg);
    json_decref(c);
}

static void test_records(void **state)
{
    fixture *f = *state;
    kh_err err;
    put_base(f->s);
    assert_true(!strncmp(cand_id, "candidate-", 10));
    json_t *got;
    assert_int_equal(kh_store_get(f->s, cand_id, &got, &err), KH_OK);
    assert_string_equal(json_string_value(json_object_get(got, "id")), cand_id);
    int64_t us;
    assert_int_equal(
        kh_store_parse_time(json_string_value(json_object_get(got, "created_at")), &us, &err),
        KH_OK);
    assert_true(llabs(us - (int64_t)(kh_wall_now() * 1e6)) < 60 * 1000000LL);
    json_decref(got);

    /* evaluations with random statuses; ids sort by creation time */
    const char *statuses[] = {"PASSED", "INCORRECT_NUMERICAL", "RUNTIME_ERROR"};
    int counts[3] = {0};
    char ids[60][KH_STORE_ID_MAX];
    for (int i = 0; i < 60; i++) {
        int k = (int)(rnd() % 3);
        counts[k]++;
        json_t *e = prov(json_pack("{s:s, s:s, s:s, s:s, s:f}", "type", "evaluation", "task",
                                   task_id, "candidate", cand_id, "status", statuses[k],
                                   "latency_ms", (double)(rnd() % 1000) / 7.0));
        assert_int_equal(kh_store_put(f->s, e, 0, ids[i], &err), KH_OK);
        json_decref(e);
        if (i)
            assert_true(strcmp(ids[i], ids[i - 1]) > 0);
    }
    json_t *arr;
    kh_store_filter q = {.type = "evaluation"};
    assert_int_equal(kh_store_query(f->s, &q, 1, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), 60);
    assert_string_equal(json_string_value(json_array_get(arr, 0)), ids[59]); /* newest first */
    json_decref(arr);
    for (int k = 0; k < 3; k++) {
        kh_store_filter qs = {.type = "evaluation", .status = statuses[k]};
        assert_int_equal(kh_store_query(f->s, &qs, 0, &arr, &err), KH_OK);
        assert_int_equal(json_array_size(arr), counts[k]);
        size_t i;
        json_t *r;
        json_array_foreach(arr, i, r)
            assert_string_equal(json_string_value(json_object_get(r, "status")), statuses[k]);
        json_decref(arr);
        kh_store_filter qc = {.candidate = cand_id, .status = statuses[k], .limit = 2};
        assert_int_equal(kh_store_query(f->s, &qc, 1, &arr, &err), KH_OK);
        assert_int_equal(json_array_size(arr), counts[k] < 2 ? counts[k] : 2);
        json_decref(arr);
    }
    /* no type: the per-type indices merge, newest first across types */
    kh_store_filter qall = {0};
    assert_int_equal(kh_store_query(f->s, &qall, 0, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), 62);
    assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 0), "id")), ids[59]);
    assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 60), "id")), cand_id);
    assert_string_equal(json_string_value(json_object_get(json_array_get(arr, 61), "id")), task_id);
    for (size_t i = 1; i < 62; i++) {
        int64_t t0, t1;
        kh_store_parse_time(json_string_value(json_object_get(json_array_get(arr, i - 1),
                                                              "created_at")),
                            &t0, &err);
        kh_store_parse_time(
            json_string_value(json_object_get(json_array_get(arr, i), "created_at")), &t1, &err);
        assert_true(t0 >= t1);
    }
    json_decref(arr);
    kh_store_filter qst = {.status = "PASSED"};
    assert_int_equal(kh_store_query(f->s, &qst, 1, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), counts[0]);
    json_decref(arr);
    kh_store_filter qnone = {.type = "nosuchtype"};
    assert_int_equal(kh_store_query(f->s, &qnone, 1, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), 0);
    json_decref(arr);
    kh_store_filter qt = {.task = task_id, .limit = 7};
    assert_int_equal(kh_store_query(f->s, &qt, 1, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), 7);
    assert_string_equal(json_string_value(json_array_get(arr, 6)), ids[53]);
    json_decref(arr);
    /* since: only what was written after a point in time */
    json_t *mid;
    assert_int_equal(kh_store_get(f->s, ids[40], &mid, &err), KH_OK);
    kh_store_filter qsince = {.type = "evaluation"};
    kh_store_parse_time(json_string_value(json_object_get(mid, "created_at")), &qsince.since_us,
                        &err);
    json_decref(mid);
    assert_int_equal(kh_store_query(f->s, &qsince, 1, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), 20);
    json_decref(arr);

    /* immutable unless replaced; a replace moves the status index */
    json_t *again = prov(json_pack("{s:s, s:s, s:s, s:s, s:s}", "id", ids[0], "type",
                                   "evaluation", "task", task_id, "candidate", cand_id, "status",
                                   "TIMEOUT"));
    assert_int_equal(kh_store_put(f->s, again, 0, NULL, &err), KH_ESTATE);
    assert_int_equal(kh_store_put(f->s, again, KH_STORE_REPLACE, NULL, &err), KH_OK);
    json_decref(again);
    kh_store_filter qto = {.type = "evaluation", .status = "TIMEOUT"};
    assert_int_equal(kh_store_query(f->s, &qto, 1, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), 1);
    assert_string_equal(json_string_value(json_array_get(arr, 0)), ids[0]);
    json_decref(arr);
    json_decref(verify_ok(f->s));

    /* validation: unknown type, missing field, wrong id prefix, dangling refs */
    const char *bad[] = {
        "{\"type\":\"nope\"}",
        "{\"type\":\"evaluation\",\"task\":\"task-gdn_decode_qk4\",\"status\":\"PASSED\"}",
        "{\"type\":\"round\",\"run\":\"candidate-X\"}",
        "{\"type\":\"round\",\"run\":\"run-doesnotexist\"}",
        "{\"type\":\"candidate\",\"task\":\"task-gdn_decode_qk4\",\"source_blob\":"
        "\"0123456789abcdef0123456789abcdef\"}",
        "{\"type\":\"candidate\",\"task\":\"task-gdn_decode_qk4\",\"source_blob\":\"zz\"}",
        "{\"type\":\"run\",\"policy\":\"p\",\"id\":\"run-has space\"}",
        "{\"type\":\"run\",\"policy\":\"p\",\"created_at\":\"yesterday\"}",
    };
    for (size_t i = 0; i < KH_ARRAY_LEN(bad); i++) {
        json_t *r = json_loads(bad[i], 0, NULL);
        assert_non_null(r);
        kh_status st = kh_store_put(f->s, r, 0, NULL, &err);
        if (st != KH_EINVAL)
            fail_msg("record %s: got %s (%s)", bad[i], kh_status_name(st), err.msg);
        json_decref(r);
    }
    assert_int_equal(kh_store_get(f->s, "evaluation-none", &got, &err), KH_ENOTFOUND);
}

/* ---- the sticky error: a failed step aborts the whole transaction ------------- */
struct sticky_arg {
    int puts_after_failure;
    kh_status second;
};

static kh_status sticky_fn(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct sticky_arg *a = arg;
    json_t *ok = json_pack("{s:s, s:s}", "type", "run", "policy", "plateau");
    kh_store_txn_put(tx, ok, 0, NULL, err);
    json_decref(ok);
    json_t *bad = json_pack("{s:s}", "type", "round"); /* no run: invalid */
    kh_store_txn_put(tx, bad, 0, NULL, err);
    json_decref(bad);
    json_t *ok2 = json_pack("{s:s, s:s}", "type", "run", "policy", "other");
    a->second = kh_store_txn_put(tx, ok2, 0, NULL, err);
    json_decref(ok2);
    return KH_OK; /* the caller "forgot" to check: the sticky error still aborts */
}

static void test_sticky(void **state)
{
    fixture *f = *state;
    struct sticky_arg a = {0};
    kh_err err;
    assert_int_equal(kh_store_update(f->s, sticky_fn, &a, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "'run'"));
    assert_int_equal(a.second, KH_EINVAL);
    json_t *arr;
    kh_store_filter q = {.type = "run"};
    assert_int_equal(kh_store_query(f->s, &q, 1, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), 0); /* the first, valid put was rolled back too */
    json_decref(arr);
}

/* ---- map growth ------------------------------------------------------------------ */
struct grow_arg {
    unsigned char *data[24];
    size_t len[24];
    kh_hash h[24];
    char ids[3000][KH_STORE_ID_MAX];
    int nrec;
};

static kh_status grow_fn(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct grow_arg *a = arg;
    for (int i = 0; i < 24; i++) {
        kh_status st = kh_store_txn_put_blob(tx, a->data[i], a->len[i], &a->h[i], err);
        if (st)
            return st;
        char hx[33];
        kh_hash_hex(&a->h[i], hx);
        for (int k = 0; k < 100; k++) {
            json_t *r = prov(json_pack("{s:s, s:s, s:s, s:i}", "type", "llm_call", "model", "m",
                                       "response_blob", hx, "n", k));
            st = kh_store_txn_put(tx, r, 0, a->ids[a->nrec++], err);
            json_decref(r);
            if (st)
                return st;
        }
    }
    return KH_OK;
}

static void test_map_growth(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/s", dir);
    kh_store *s;
    kh_err err;
    kh_store_opts o = {.map_size = 256 * 1024};
    assert_int_equal(kh_store_open(path, &o, &s, &err), KH_OK);
    /* one transaction ~100x the initial map: it hits MDB_MAP_FULL mid-way
     * and at commit, and must come through whole */
    struct grow_arg *a = calloc(1, sizeof *a);
    for (int i = 0; i < 24; i++) {
        a->len[i] = (1u << 20) + (size_t)(rnd() % 100000);
        a->data[i] = malloc(a->len[i]);
        fill_random(a->data[i], a->len[i]);
    }
    assert_int_equal(kh_store_update(s, grow_fn, a, &err), KH_OK);
    /* many small transactions past it too */
    for (int i = 0; i < 600; i++) {
        json_t *r = json_pack("{s:s, s:s}", "type", "run", "policy", "grow");
        assert_int_equal(kh_store_put(s, r, 0, NULL, &err), KH_OK);
        json_decref(r);
    }
    kh_store_close(s);
    o.map_size = 0;
    o.readonly = 1;
    assert_int_equal(kh_store_open(path, &o, &s, &err), KH_OK);
    for (int i = 0; i < 24; i++) {
        void *got;
        size_t n;
        assert_int_equal(kh_store_get_blob(s, &a->h[i], &got, &n, &err), KH_OK);
        assert_int_equal(n, a->len[i]);
        assert_memory_equal(got, a->data[i], n);
        free(got);
        free(a->data[i]);
    }
    for (int i = 0; i < a->nrec; i++) {
        json_t *r;
        assert_int_equal(kh_store_get(s, a->ids[i], &r, &err), KH_OK);
        json_decref(r);
    }
    json_t *st;
    assert_int_equal(kh_store_stats(s, &st, &err), KH_OK);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "records"), "run")),
                     600);
    assert_true(json_integer_value(json_object_get(st, "map_size")) > 24 * (1 << 20));
    json_decref(st);
    json_decref(verify_ok(s));
    kh_store_close(s);
    free(a);
    kh_test_rmtree(dir);
    free(dir);
}

/* ---- corruption and foreign files ------------------------------------------------- */
static unsigned char *read_file(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void test_corrupt_blob(void **state)
{
    fixture *f = *state;
    unsigned char data[5000];
    fill_random(data, sizeof data); /* incompressible: stored raw, findable */
    kh_hash h;
    kh_err err;
    assert_int_equal(kh_store_put_blob(f->s, data, sizeof data, &h, &err), KH_OK);
    kh_store_close(f->s);
    f->s = NULL;
    char file[700];
    snprintf(file, sizeof file, "%s/data.mdb", f->path);
    size_t n;
    unsigned char *b = read_file(file, &n);
    unsigned char *at = memmem(b, n, data + 1000, 64);
    assert_non_null(at);
    FILE *w = fopen(file, "r+b");
    fseek(w, (long)(at - b) + 10, SEEK_SET);
    fputc(at[10] ^ 0x5a, w);
    fclose(w);
    free(b);
    kh_store_opts o = {.readonly = 1};
    assert_int_equal(kh_store_open(f->path, &o, &f->s, &err), KH_OK);
    json_t *r;
    assert_int_equal(kh_store_verify(f->s, &r, &err), KH_OK);
    char hx[33];
    kh_hash_hex(&h, hx);
    json_t *p = json_object_get(r, "problems");
    assert_int_equal(json_array_size(p), 1);
    const char *msg = json_string_value(json_array_get(p, 0));
    assert_non_null(strstr(msg, hx));
    assert_non_null(strstr(msg, "altered"));
    json_decref(r);
    /* and the CLI says so with exit 1 */
    kh_child_result res;
    kh_test_run_khlua(&res, 60, "store", "verify", "--store", f->path, NULL);
    assert_true(res.exited && res.exit_code == 1);
    assert_non_null(strstr(res.out, hx));
    kh_child_result_free(&res);
}

static void expect_open_error(const char *path, kh_status want, const char *needle)
{
    kh_store *s = NULL;
    kh_err err;
    kh_store_opts o = {0};
    kh_status st = kh_store_open(path, &o, &s, &err);
    if (st != want || !strstr(err.msg, needle))
        fail_msg("open %s: got %s '%s', wanted %s containing '%s'", path, kh_status_name(st),
                 st ? err.msg : "", kh_status_name(want), needle);
    assert_null(s);
    /* the CLI: a clear message and exit 1, never a signal */
    kh_child_result res;
    kh_test_run_khlua(&res, 60, "store", "verify", "--store", path, NULL);
    assert_true(res.exited);
    assert_int_equal(res.exit_code, 1);
    assert_non_null(strstr(res.out, needle));
    kh_child_result_free(&res);
}

static void test_foreign_and_truncated(void **state)
{
    fixture *f = *state;
    char p[700], file[800];
    unsigned char junk[16384];
    fill_random(junk, sizeof junk);

    /* a plain file where the store should be */
    snprintf(p, sizeof p, "%s/plainfile", f->dir);
    FILE *w = fopen(p, "wb");
    fwrite(junk, 1, 100, w);
    fclose(w);
    expect_open_error(p, KH_ECORRUPT, "is a file, not a store");

    /* a foreign data.mdb */
    snprintf(p, sizeof p, "%s/foreign", f->dir);
    mkdir(p, 0755);
    snprintf(file, sizeof file, "%s/data.mdb", p);
    w = fopen(file, "wb");
    fwrite(junk, 1, sizeof junk, w);
    fclose(w);
    expect_open_error(p, KH_ECORRUPT, "not an LMDB file");

    /* a truncated store: written, then cut in half */
    for (int i = 0; i < 50; i++) {
        unsigned char d[20000];
        fill_random(d, sizeof d);
        kh_err err;
        assert_int_equal(kh_store_put_blob(f->s, d, sizeof d, NULL, &err), KH_OK);
    }
    kh_store_close(f->s);
    f->s = NULL;
    snprintf(file, sizeof file, "%s/data.mdb", f->path);
    struct stat sb;
    assert_int_equal(stat(file, &sb), 0);
    assert_int_equal(truncate(file, sb.st_size / 2), 0);
    expect_open_error(f->path, KH_ECORRUPT, "truncated");
    /* truncated just past the two header pages, and inside them */
    assert_int_equal(truncate(file, 5000), 0);
    expect_open_error(f->path, KH_ECORRUPT, "truncated");
    assert_int_equal(truncate(file, 3000), 0);
    expect_open_error(f->path, KH_ECORRUPT, "not an LMDB file");

    /* another program's LMDB environment */
    snprintf(p, sizeof p, "%s/otherlmdb", f->dir);
    mkdir(p, 0755);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_open(env, p, 0, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
    MDB_val k = {3, "key"}, v = {5, "value"};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    expect_open_error(p, KH_ECORRUPT, "not a khlua store");
}

static void test_schema_mismatch(void **state)
{
    fixture *f = *state;
    kh_store_close(f->s);
    f->s = NULL;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 8);
    assert_int_equal(mdb_env_open(env, f->path, 0, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    MDB_val k = {6, "schema"}, v = {2, "99"};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    kh_err err;
    kh_store_opts o = {0};
    assert_int_equal(kh_store_open(f->path, &o, &f->s, &err), KH_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "schema version 99"));
    assert_null(f->s);
}

/* ---- verify finds broken indices and references --------------------------------- */
static void test_verify_index_and_refs(void **state)
{
    fixture *f = *state;
    put_base(f->s);
    kh_err err;
    char eid[KH_STORE_ID_MAX];
    json_t *e = prov(json_pack("{s:s, s:s, s:s, s:s}", "type", "evaluation", "task", task_id,
                               "candidate", cand_id, "status", "PASSED"));
    assert_int_equal(kh_store_put(f->s, e, 0, eid, &err), KH_OK);
    json_decref(e);
    json_decref(verify_ok(f->s));
    kh_store_close(f->s);
    f->s = NULL;
    /* behind the store's back: drop the candidate record, which leaves the
     * evaluation's reference dangling and the candidate's index entries orphaned */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 8);
    assert_int_equal(mdb_env_open(env, f->path, 0, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "records", 0, &dbi), 0);
    MDB_val k = {strlen(cand_id), cand_id};
    assert_int_equal(mdb_del(txn, dbi, &k, NULL), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    kh_store_opts o = {.readonly = 1};
    assert_int_equal(kh_store_open(f->path, &o, &f->s, &err), KH_OK);
    json_t *r;
    assert_int_equal(kh_store_verify(f->s, &r, &err), KH_OK);
    char *text = json_dumps(json_object_get(r, "problems"), 0);
    assert_non_null(strstr(text, "names record"));
    assert_non_null(strstr(text, cand_id));
    assert_non_null(strstr(text, "which is not stored"));
    assert_true(json_integer_value(json_object_get(r, "problems_total")) >= 3);
    free(text);
    json_decref(r);
}

/* ---- API keys are never archived ------------------------------------------------- */
static void test_secrets(void **state)
{
    fixture *f = *state;
    char key[40];
    snprintf(key, sizeof key, "sk-test-%016llx", (unsigned long long)rnd());
    setenv("KHLUA_API_KEY", key, 1);
    setenv("OPENAI_API_KEY", "short", 1); /* under 8 bytes: ignored */
    kh_store_close(f->s);
    kh_err err;
    kh_store_opts o = {0};
    assert_int_equal(kh_store_open(f->path, &o, &f->s, &err), KH_OK);
    char text[200];
    snprintf(text, sizeof text, "curl -H 'x-api-key: %s' https://api.example", key);
    assert_int_equal(kh_store_put_blob(f->s, text, strlen(text), NULL, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "KHLUA_API_KEY"));
    assert_null(strstr(err.msg, key));
    json_t *r = prov(json_pack("{s:s, s:s, s:{s:s}}", "type", "llm_call", "model", "m",
                               "headers", "authorization", text));
    assert_int_equal(kh_store_put(f->s, r, 0, NULL, &err), KH_EINVAL);
    assert_null(strstr(err.msg, key));
    json_decref(r);
    /* the short value does not block anything */
    assert_int_equal(kh_store_put_blob(f->s, "short and sweet", 15, NULL, &err), KH_OK);
    json_t *st;
    assert_int_equal(kh_store_stats(f->s, &st, &err), KH_OK);
    assert_int_equal(json_integer_value(json_object_get(st, "records_total")), 0);
    assert_int_equal(json_integer_value(json_object_get(st, "blobs")), 1);
    json_decref(st);
    unsetenv("KHLUA_API_KEY");
    unsetenv("OPENAI_API_KEY");
}

/* ---- gc, backup, export/import --------------------------------------------------- */
static void test_gc_backup_export_import(void **state)
{
    fixture *f = *state;
    kh_err err;
    put_base(f->s);
    unsigned char orphan[3000], logb[2000];
    fill_random(orphan, sizeof orphan);
    fill_text(logb, sizeof logb);
    kh_hash ho, hl;
    assert_int_equal(kh_store_put_blob(f->s, orphan, sizeof orphan, &ho, &err), KH_OK);
    assert_int_equal(kh_store_put_blob(f->s, logb, sizeof logb, &hl, &err), KH_OK);
    char hlx[33];
    kh_hash_hex(&hl, hlx);
    char uuid[40];
    snprintf(uuid, sizeof uuid, "%08llx-aaaa-4bbb-8ccc-%012llx",
             (unsigned long long)(rnd() & 0xffffffff),
             (unsigned long long)(rnd() & 0xffffffffffffULL));
    double lat = 0.001 * (double)(rnd() % 1000 + 1);
    json_t *e = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:{s:s, s:{s:i}, s:{}}, s:{s:s, s:{s:s, s:{}}, s:{s:f, "
        "s:f}, s:{s:f, s:f, s:f}}}",
        "type", "evaluation", "task", task_id, "candidate", cand_id, "definition",
        "gdn_decode_qk4", "solution", "cand_v1", "log_blob", hlx, "workload", "uuid", uuid,
        "axes", "batch_size", (int)(rnd() % 64 + 1), "inputs", "evaluation", "status",
        "PASSED", "environment", "hardware", "NVIDIA H200", "libs", "correctness",
        "max_relative_error", 1e-4, "max_absolute_error", 2e-5, "performance", "latency_ms",
        lat, "reference_latency_ms", lat * 40, "speedup_factor", 40.0);
    /* timed under the official protocol by khlua eval (no purpose): exported */
    json_object_set_new(e, "protocol", json_string("official"));
    assert_non_null(prov(e));
    char eid[KH_STORE_ID_MAX];
    assert_int_equal(kh_store_put(f->s, e, 0, eid, &err), KH_OK);
    json_decref(e);

    /* gc with no grace: the orphan goes, referenced blobs stay */
    json_t *r;
    assert_int_equal(kh_store_gc(f->s, 0, &r, &err), KH_OK);
    assert_int_equal(json_integer_value(json_object_get(r, "deleted")), 1);
    assert_int_equal(json_integer_value(json_object_get(r, "bytes")), sizeof orphan);
    json_decref(r);
    void *got;
    size_t gn;
    assert_int_equal(kh_store_get_blob(f->s, &ho, &got, &gn, &err), KH_ENOTFOUND);
    assert_int_equal(kh_store_get_blob(f->s, &hl, &got, &gn, &err), KH_OK);
    free(got);
    json_decref(verify_ok(f->s));

    /* fib-trace export */
    char file[700];
    snprintf(file, sizeof file, "%s/traces.jsonl", f->dir);
    FILE *w = fopen(file, "w");
    size_t n;
    assert_int_equal(kh_store_export(f->s, &(kh_store_export_opts){.format = "fib-trace", .task = task_id}, w, &n, NULL,
                                     &err), KH_OK);
    fclose(w);
    assert_int_equal(n, 1);
    json_t *t = json_load_file(file, JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "definition")), "gdn_decode_qk4");
    assert_string_equal(json_string_value(json_object_get(t, "solution")), "cand_v1");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(t, "workload"), "uuid")), uuid);
    json_t *ev = json_object_get(t, "evaluation");
    assert_string_equal(json_string_value(json_object_get(ev, "status")), "PASSED");
    assert_true(json_real_value(json_object_get(json_object_get(ev, "performance"),
                                                "latency_ms")) == lat);
    assert_int_equal(json_string_length(json_object_get(ev, "log")), sizeof logb);
    assert_non_null(json_string_value(json_object_get(ev, "timestamp")));
    json_decref(t);

    /* jsonl export -> import into a new store -> the same records and blobs */
    snprintf(file, sizeof file, "%s/all.jsonl", f->dir);
    w = fopen(file, "w");
    assert_int_equal(kh_store_export(f->s, &(kh_store_export_opts){.format = "jsonl"}, w, &n, NULL, &err), KH_OK);
    fclose(w);
    assert_int_equal(n, 3);
    char p2[700];
    snprintf(p2, sizeof p2, "%s/imported", f->dir);
    kh_store *s2;
    kh_store_opts o = {0};
    assert_int_equal(kh_store_open(p2, &o, &s2, &err), KH_OK);
    FILE *rf = fopen(file, "r");
    assert_int_equal(kh_store_import(s2, rf, &r, &err), KH_OK);
    assert_int_equal(json_integer_value(json_object_get(r, "records")), 3);
    assert_int_equal(json_integer_value(json_object_get(r, "blobs")), 2);
    json_decref(r);
    rewind(rf);
    assert_int_equal(kh_store_import(s2, rf, &r, &err), KH_OK); /* again: all skipped */
    assert_int_equal(json_integer_value(json_object_get(r, "skipped")), 3);
    json_decref(r);
    fclose(rf);
    json_t *a, *b;
    assert_int_equal(kh_store_get(f->s, eid, &a, &err), KH_OK);
    assert_int_equal(kh_store_get(s2, eid, &b, &err), KH_OK);
    assert_true(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    json_decref(verify_ok(s2));
    kh_store_close(s2);

    /* backup: a store that opens and holds the same */
    snprintf(p2, sizeof p2, "%s/backup", f->dir);
    assert_int_equal(kh_store_backup(f->s, p2, &err), KH_OK);
    assert_int_equal(kh_store_backup(f->s, p2, &err), KH_EINVAL); /* never over a store */
    o.readonly = 1;
    assert_int_equal(kh_store_open(p2, &o, &s2, &err), KH_OK);
    assert_int_equal(kh_store_get(s2, eid, &a, &err), KH_OK);
    json_decref(a);
    json_decref(verify_ok(s2));
    kh_store_close(s2);
}



/* ---- index entries queued within a write txn ------------------------------------ */
struct pend_arg {
    int n;
    char ids[300][KH_STORE_ID_MAX];
    int status[300];
};

static kh_status pend_fn(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct pend_arg *a = arg;
    static const char *ST[3] = {"PASSED", "RUNTIME_ERROR", "TIMEOUT"};
    for (int i = 0; i < a->n; i++) {
        a->status[i] = (int)(rnd() % 3);
        json_t *r = json_pack("{s:s, s:s, s:s}", "type", "run", "policy", "p", "status",
                              ST[a->status[i]]);
        kh_status st = kh_store_txn_put(tx, r, 0, a->ids[i], err);
        json_decref(r);
        if (st)
            return st;
    }
    /* the txn's own puts are in its query answers, newest first */
    for (int k = 0; k < 3; k++) {
        kh_store_filter f = {.type = "run", .status = ST[k]};
        json_t *out;
        kh_status st = kh_store_txn_query(tx, &f, 1, &out, err);
        if (st)
            return st;
        size_t j = 0;
        for (int i = a->n - 1; i >= 0; i--)
            if (a->status[i] == k) {
                assert_true(j < json_array_size(out));
                assert_string_equal(json_string_value(json_array_get(out, j)), a->ids[i]);
                j++;
            }
        assert_int_equal(j, json_array_size(out));
        json_decref(out);
    }
    /* a replace in the same txn moves its index entry to the new status */
    int v = (int)(rnd() % (unsigned)a->n);
    a->status[v] = (a->status[v] + 1) % 3;
    json_t *r = json_pack("{s:s, s:s, s:s, s:s}", "type", "run", "id", a->ids[v], "policy", "q",
                          "status", ST[a->status[v]]);
    kh_status st = kh_store_txn_put(tx, r, KH_STORE_REPLACE, NULL, err);
    json_decref(r);
    return st;
}

static void test_txn_index_order(void **state)
{
    fixture *f = *state;
    kh_err err;
    struct pend_arg *a = calloc(1, sizeof *a);
    a->n = 100 + (int)(rnd() % 200);
    assert_int_equal(kh_store_update(f->s, pend_fn, a, &err), KH_OK);
    static const char *ST[3] = {"PASSED", "RUNTIME_ERROR", "TIMEOUT"};
    for (int k = 0; k < 3; k++) {
        kh_store_filter q = {.type = "run", .status = ST[k]};
        json_t *out;
        assert_int_equal(kh_store_query(f->s, &q, 1, &out, &err), KH_OK);
        size_t want = 0;
        for (int i = 0; i < a->n; i++)
            want += a->status[i] == k;
        assert_int_equal(json_array_size(out), want);
        json_decref(out);
    }
    json_decref(verify_ok(f->s));
    free(a);
}

/* ---- the store's JSON writer and reader ------------------------------------------ */
static json_t *rand_string(int key)
{
    char buf[96];
    size_t n = 0, want = rnd() % 40;
    while (n < want) {
        unsigned pick = (unsigned)(rnd() % 8), cp = 1;
        if (pick < 3)
            cp = 0x20 + (unsigned)(rnd() % 95); /* printable ASCII, '"' and '\\' too */
        else if (pick == 3)
            cp = (unsigned)(rnd() % 0x20); /* control characters, NUL (not in keys) too */
        if (cp == 0 && key)
            cp = 1;
        else if (pick == 4)
            cp = 0x80 + (unsigned)(rnd() % 0x780);
        else if (pick == 5)
            cp = 0xe000 + (unsigned)(rnd() % 0x2000);
        else if (pick == 6)
            cp = 0x10000 + (unsigned)(rnd() % 0x100000);
        else
            cp = "\"\\/\b\f\n\r\t"[rnd() % 8];
        if (cp < 0x80) {
            buf[n++] = (char)cp;
        } else if (cp < 0x800) {
            buf[n++] = (char)(0xc0 | cp >> 6);
            buf[n++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            buf[n++] = (char)(0xe0 | cp >> 12);
            buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            buf[n++] = (char)(0x80 | (cp & 0x3f));
        } else {
            buf[n++] = (char)(0xf0 | cp >> 18);
            buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            buf[n++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    return json_stringn(buf, n);
}

static double rand_real(void)
{
    double d;
    switch (rnd() % 5) {
    case 0: /* a measurement with a few decimals */
        d = (double)(rnd() % 10000000) / (double)(1ULL << (rnd() % 4)) / 1e4;
        break;
    case 1: /* any bit pattern that is a finite number */
        do {
            uint64_t u = rnd();
            memcpy(&d, &u, 8);
        } while (!isfinite(d));
        break;
    case 2:
        d = (double)(rnd() % 1000) * 1e-7;
        break;
    case 3:
        d = (double)rnd() * 1e3;
        break;
    default:
        d = (double)(int64_t)(rnd() % 100000) - 50000.0;
    }
    return rnd() % 2 ? -d : d;
}

static json_t *rand_value(int depth)
{
    switch (rnd() % (depth > 3 ? 6 : 8)) {
    case 0: return rand_string(0);
    case 1: return json_integer((json_int_t)rnd());
    case 2: return json_real(rand_real());
    case 3: return rnd() % 2 ? json_true() : json_false();
    case 4: return json_null();
    case 5: return json_integer(rnd() % 2 ? INT64_MIN : INT64_MAX);
    case 6: {
        json_t *a = json_array();
        for (size_t i = rnd() % 5; i > 0; i--)
            json_array_append_new(a, rand_value(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (size_t i = rnd() % 6; i > 0; i--) {
            json_t *k = rand_string(1);
            json_object_setn_new(o, json_string_value(k), json_string_length(k),
                                 rand_value(depth + 1));
            json_decref(k);
        }
        return o;
    }
    }
}

/* json_equal, and reals bit for bit (json_equal has -0.0 == 0.0) */
static int same_json(const json_t *a, const json_t *b)
{
    if (json_is_real(a) && json_is_real(b)) {
        double x = json_real_value(a), y = json_real_value(b);
        return memcmp(&x, &y, 8) == 0;
    }
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same_json(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    }
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b))
            return 0;
        for (void *it = json_object_iter((json_t *)a); it;
             it = json_object_iter_next((json_t *)a, it)) {
            json_t *o = json_object_getn(b, json_object_iter_key(it), json_object_iter_key_len(it));
            if (!o || !same_json(json_object_iter_value(it), o))
                return 0;
        }
        return 1;
    }
    return json_equal(a, b);
}


/* ---- provenance ------------------------------------------------------------------ */
/* put rec (stolen) and expect a refusal naming what is missing, or success */
static void expect_refused(kh_store *s, json_t *rec, const char *needle)
{
    kh_err err;
    kh_status st = kh_store_put(s, rec, 0, NULL, &err);
    json_decref(rec);
    if (!needle) {
        if (st)
            fail_msg("refused: %s", err.msg);
        return;
    }
    assert_int_equal(st, KH_EINVAL);
    if (!strstr(err.msg, needle))
        fail_msg("'%s' does not name '%s'", err.msg, needle);
    assert_non_null(strstr(err.msg, "provenance"));
}

static void test_provenance(void **state)
{
    fixture *f = *state;
    put_base(f->s);
    char hx[33], opt[40];
    snprintf(hx, sizeof hx, "%016llx%016llx", (unsigned long long)rnd(),
             (unsigned long long)rnd());
    snprintf(opt, sizeof opt, "-O%d", (int)(rnd() % 4));
    /* compile: source hash, compiler, options */
    expect_refused(f->s,
                   json_pack("{s:s, s:s, s:{s:s, s:[s]}}", "type", "compile", "status", "ok",
                             "provenance", "compiler", "nvrtc", "options", opt),
                   "the source hash ('source_blob' or 'provenance.source_hash')");
    expect_refused(f->s,
                   json_pack("{s:s, s:s, s:{s:s, s:[s]}}", "type", "compile", "status", "ok",
                             "provenance", "source_hash", hx, "options", opt),
                   "the compiler ('provenance.compiler')");
    expect_refused(f->s,
                   json_pack("{s:s, s:s, s:{s:s, s:s}}", "type", "compile", "status", "ok",
                             "provenance", "source_hash", hx, "compiler", "nvrtc"),
                   "the compiler options ('provenance.options')");
    expect_refused(f->s,
                   json_pack("{s:s, s:s, s:{s:s, s:s, s:[s]}}", "type", "compile", "status",
                             "compile_error", "provenance", "source_hash", hx, "compiler",
                             "nvrtc", "options", opt),
                   NULL);
    /* evaluation: solution hash, GPU UUID or host, seeds; "" and null do not count */
    expect_refused(f->s,
                   json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:[i]}}", "type", "evaluation",
                             "task", task_id, "candidate", cand_id, "status", "PASSED",
                             "provenance", "host", "h1", "seeds", (int)(rnd() % 1000)),
                   "the solution hash");
    expect_refused(f->s,
                   json_pack("{s:s, s:s, s:s, s:s, s:{s:{s:s}, s:s, s:[i]}}", "type",
                             "evaluation", "task", task_id, "candidate", cand_id, "status",
                             "PASSED", "provenance", "hashes", "source", hx, "host", "", "seeds",
                             (int)(rnd() % 1000)),
                   "the GPU UUID or host ('provenance.gpu_uuid' or 'provenance.host')");
    expect_refused(f->s,
                   json_pack("{s:s, s:s, s:s, s:s, s:{s:{s:s}, s:s, s:n}}", "type",
                             "evaluation", "task", task_id, "candidate", cand_id, "status",
                             "PASSED", "provenance", "hashes", "source", hx, "gpu_uuid",
                             "GPU-1234", "seeds"),
                   "the seeds");
    expect_refused(f->s,
                   json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:I}}", "type", "evaluation",
                             "task", task_id, "candidate", cand_id, "status", "TIMEOUT",
                             "provenance", "solution_hash", hx, "gpu_uuid", "GPU-1234", "seed",
                             (json_int_t)(rnd() % 1000)),
                   NULL);
    /* a model call: its prompt's fingerprint (the one writer, llm_store.h, always gives it) */
    expect_refused(f->s, json_pack("{s:s, s:s, s:s}", "type", "llm_call", "model", "m", "status",
                                   "ok"),
                   "the prompt's fingerprint ('fingerprint')");
    expect_refused(f->s, json_pack("{s:s, s:s, s:s}", "type", "llm_call", "model", "m",
                                   "fingerprint", hx + 16),
                   NULL);
    /* a candidate: its source hash */
    expect_refused(f->s, json_pack("{s:s, s:s}", "type", "candidate", "task", task_id),
                   "the source hash");
    /* other types carry none beyond their required fields */
    expect_refused(f->s, json_pack("{s:s, s:s}", "type", "run", "policy", "p"), NULL);
    /* a refused record inside a transaction aborts the whole transaction */
    kh_err err;
    json_t *ok = prov(json_pack("{s:s, s:s, s:s, s:s}", "type", "evaluation", "task", task_id,
                                "candidate", cand_id, "status", "PASSED"));
    json_t *bad = json_pack("{s:s, s:s, s:s, s:s}", "type", "evaluation", "task", task_id,
                            "candidate", cand_id, "status", "PASSED");
    json_t *both[2] = {ok, bad};
    assert_int_equal(kh_store_put_records(f->s, both, 2, 0, NULL, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "solution hash"));
    json_t *arr;
    kh_store_filter q = {.type = "evaluation"};
    assert_int_equal(kh_store_query(f->s, &q, 1, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), 1); /* the TIMEOUT above, not ok */
    json_decref(arr);
    json_decref(ok);
    json_decref(bad);
    /* an import is exempt: records written before the rule stay importable */
    FILE *tf = tmpfile();
    assert_non_null(tf);
    fprintf(tf,
            "{\"record\": {\"type\": \"evaluation\", \"id\": \"evaluation-old%04d\", "
            "\"created_at\": \"2026-01-02T03:04:05.000006Z\", \"task\": \"%s\", "
            "\"candidate\": \"%s\", \"status\": \"PASSED\"}}\n",
            (int)(rnd() % 10000), task_id, cand_id);
    rewind(tf);
    json_t *rep;
    if (kh_store_import(f->s, tf, &rep, &err))
        fail_msg("import: %s", err.msg);
    assert_int_equal(json_integer_value(json_object_get(rep, "records")), 1);
    json_decref(rep);
    fclose(tf);
    json_decref(verify_ok(f->s));
}

/* ---- bulk mode and many records per call ------------------------------------------- */
static kh_status bulk_in_update(kh_store_txn *tx, void *arg, kh_err *err)
{
    (void)tx;
    kh_store *s = arg;
    kh_status st = kh_store_bulk_begin(s, err);
    return st == KH_ESTATE ? KH_OK : kh_err_set(err, KH_ESTATE, "bulk began inside update");
}

static void test_bulk_and_many(void **state)
{
    fixture *f = *state;
    kh_err err;
    assert_int_equal(kh_store_bulk_end(f->s, &err), KH_ESTATE); /* not in bulk */
    assert_int_equal(kh_store_update(f->s, bulk_in_update, f->s, &err), KH_OK);
    assert_int_equal(kh_store_bulk_begin(f->s, &err), KH_OK);
    assert_int_equal(kh_store_in_bulk(f->s), 1);
    assert_int_equal(kh_store_bulk_begin(f->s, &err), KH_ESTATE); /* no nesting */
    /* a run, then its rounds in the same call: a later record may name an earlier one */
    size_t n = 2 + rnd() % 300;
    json_t **recs = calloc(n, sizeof *recs);
    char(*ids)[KH_STORE_ID_MAX] = calloc(n, sizeof *ids);
    char run_id[KH_STORE_ID_MAX];
    json_t *run = json_pack("{s:s, s:s}", "type", "run", "policy", "bulk");
    assert_int_equal(kh_store_put(f->s, run, 0, run_id, &err), KH_OK);
    json_decref(run);
    int idx0 = (int)(rnd() % 1000);
    for (size_t i = 0; i < n; i++)
        recs[i] = json_pack("{s:s, s:s, s:i}", "type", "round", "run", run_id, "index",
                            idx0 + (int)i);
    if (kh_store_put_records(f->s, recs, n, 0, ids, &err))
        fail_msg("%s", err.msg);
    for (size_t i = 1; i < n; i++)
        assert_true(strcmp(ids[i], ids[i - 1]) > 0);
    /* all or none: a bad record at a random place writes nothing, and says which */
    json_t *more[3];
    size_t badk = rnd() % 3;
    for (size_t i = 0; i < 3; i++)
        more[i] = i == badk ? json_pack("{s:s}", "type", "round")
                            : json_pack("{s:s, s:s, s:i}", "type", "round", "run", run_id,
                                        "index", -1);
    assert_int_equal(kh_store_put_records(f->s, more, 3, 0, NULL, &err), KH_EINVAL);
    char want[40];
    snprintf(want, sizeof want, "record %zu of 3", badk + 1);
    if (!strstr(err.msg, want))
        fail_msg("'%s' does not say '%s'", err.msg, want);
    for (size_t i = 0; i < 3; i++)
        json_decref(more[i]);
    assert_int_equal(kh_store_bulk_end(f->s, &err), KH_OK);
    assert_int_equal(kh_store_in_bulk(f->s), 0);
    json_t *arr;
    kh_store_filter q = {.run = run_id, .type = "round"};
    assert_int_equal(kh_store_query(f->s, &q, 0, &arr, &err), KH_OK);
    assert_int_equal(json_array_size(arr), n);
    /* newest first: the last written has the highest index */
    assert_int_equal(json_integer_value(json_object_get(json_array_get(arr, 0), "index")),
                     idx0 + (int)n - 1);
    json_decref(arr);
    json_decref(verify_ok(f->s));
    for (size_t i = 0; i < n; i++)
        json_decref(recs[i]);
    free(recs);
    free(ids);
    /* close inside a bulk ends it (and syncs): what it wrote is there after reopening */
    assert_int_equal(kh_store_bulk_begin(f->s, &err), KH_OK);
    json_t *r2 = json_pack("{s:s, s:s}", "type", "run", "policy", "closing");
    char id2[KH_STORE_ID_MAX];
    assert_int_equal(kh_store_put(f->s, r2, 0, id2, &err), KH_OK);
    json_decref(r2);
    kh_store_close(f->s);
    kh_store_opts o = {.readonly = 1};
    assert_int_equal(kh_store_open(f->path, &o, &f->s, &err), KH_OK);
    assert_int_equal(kh_store_bulk_begin(f->s, &err), KH_ESTATE); /* read-only */
    json_t *got;
    assert_int_equal(kh_store_get(f->s, id2, &got, &err), KH_OK);
    json_decref(got);
}

static void test_json_codec(void **state)
{
    (void)state;
    kh_err err;
    for (int i = 0; i < 3000; i++) {
        json_t *v = json_object();
        for (size_t k = 1 + rnd() % 8; k > 0; k--) {
            char key[16];
            snprintf(key, sizeof key, "k%u", (unsigned)(rnd() % 50));
            json_object_set_new(v, key, rand_value(0));
        }
        kh_sbuf b = {0};
        assert_int_equal(kh_store_json_dump(v, &b, &err), KH_OK);
        /* jansson reads what we write, to the same values */
        json_error_t je;
        json_t *j = json_loadb(b.p, b.n, JSON_ALLOW_NUL, &je);
        if (!j)
            fail_msg("jansson cannot read %.*s: %s", (int)b.n, b.p, je.text);
        assert_true(same_json(v, j));
        /* our reader reads it, and what jansson writes */
        json_t *o = kh_store_json_parse(b.p, b.n, &err);
        if (!o)
            fail_msg("cannot read back %.*s: %s", (int)b.n, b.p, err.msg);
        assert_true(same_json(v, o));
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ESCAPE_SLASH);
        json_t *o2 = kh_store_json_parse(t, strlen(t), &err);
        assert_non_null(o2);
        assert_true(same_json(v, o2));
        /* damaged text is an error, never a crash: cut it short */
        size_t cut = b.n > 1 ? (size_t)(rnd() % (b.n - 1)) + 1 : 1;
        json_t *bad = kh_store_json_parse(b.p, b.n - cut, &err);
        assert_null(bad);
        assert_int_equal(err.code, KH_ECORRUPT);
        free(t);
        json_decref(o2);
        json_decref(o);
        json_decref(j);
        json_decref(v);
        kh_sbuf_free(&b);
    }
    /* strings mixing plain runs, escapes and multi-byte UTF-8 at every offset
     * (the writer copies 8 plain bytes at a time): the same bytes as jansson */
    static const char *const parts[] = {"a", "Zq7", "\"", "\\", "\n", "\x01", "\x1f", "\x7f",
                                        "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "/",
                                        "longer plain run 0123456789"};
    for (int i = 0; i < 2000; i++) {
        char str[400];
        size_t sn = 0;
        for (size_t k = rnd() % 24; k > 0; k--) {
            const char *p = parts[rnd() % KH_ARRAY_LEN(parts)];
            memcpy(str + sn, p, strlen(p));
            sn += strlen(p);
        }
        str[sn] = 0;
        json_t *o = json_pack("{s:s%}", "s", str, sn);
        assert_non_null(o);
        kh_sbuf b = {0};
        assert_int_equal(kh_store_json_dump(o, &b, &err), KH_OK);
        char *t = json_dumps(o, JSON_COMPACT);
        if (b.n != strlen(t) || memcmp(b.p, t, b.n))
            fail_msg("ours %.*s, jansson %s", (int)b.n, b.p, t);
        /* one invalid byte anywhere is refused */
        if (sn) {
            str[rnd() % sn] = (char)0xff;
            json_t *bad = json_pack("{s:o}", "s", json_stringn_nocheck(str, sn));
            b.n = 0;
            assert_int_equal(kh_store_json_dump(bad, &b, &err), KH_EINVAL);
            json_decref(bad);
        }
        free(t);
        json_decref(o);
        kh_sbuf_free(&b);
    }
    /* a short real stays short: 0.1 is written as 0.1 */
    json_t *r = json_pack("{s:f, s:f, s:f}", "a", 0.1, "b", -2.0, "c", -0.0);
    kh_sbuf b = {0};
    assert_int_equal(kh_store_json_dump(r, &b, &err), KH_OK);
    assert_int_equal(b.n, strlen("{\"a\":0.1,\"b\":-2.0,\"c\":-0.0}"));
    assert_memory_equal(b.p, "{\"a\":0.1,\"b\":-2.0,\"c\":-0.0}", b.n);
    json_decref(r);
    /* a NUL in a key (jansson could not read it back) is refused */
    b.n = 0;
    r = json_object();
    json_object_setn_new(r, "a\0b", 3, json_true());
    assert_int_equal(kh_store_json_dump(r, &b, &err), KH_EINVAL);
    assert_int_equal(b.n, 0);
    json_decref(r);
    /* invalid UTF-8 (possible through the unchecked jansson calls) is refused */
    b.n = 0;
    r = json_pack("{s:o}", "x", json_stringn_nocheck("ok\xff", 3));
    assert_int_equal(kh_store_json_dump(r, &b, &err), KH_EINVAL);
    assert_int_equal(b.n, 0);
    json_decref(r);
    kh_sbuf_free(&b);
    const char *bad[] = {"{\"a\":01}", "{\"a\":1e}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\xc0\xaf\"}",
                         "{\"a\":[1,]}", "{\"a\":1} x", "{\"a\":99999999999999999999}",
                         "{\"a\":tru}", "{\"a\":1e999}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *x = kh_store_json_parse(bad[i], strlen(bad[i]), &err);
        if (x)
            fail_msg("accepted %s", bad[i]);
        assert_int_equal(err.code, KH_ECORRUPT);
    }
}

static void test_time_format(void **state)
{
    (void)state;
    for (int i = 0; i < 200; i++) {
        int64_t us = (int64_t)(rnd() % 4000000000ULL) * 1000000 + (int64_t)(rnd() % 1000000);
        char buf[40];
        kh_store_format_time(us, buf);
        int64_t back;
        kh_err err;
        assert_int_equal(kh_store_parse_time(buf, &back, &err), KH_OK);
        assert_int_equal(back, us);
    }
    int64_t a, b;
    kh_err err;
    assert_int_equal(kh_store_parse_time("2026-03-01T10:00:00+02:00", &a, &err), KH_OK);
    assert_int_equal(kh_store_parse_time("2026-03-01T08:00:00Z", &b, &err), KH_OK);
    assert_int_equal(a, b);
    assert_int_equal(kh_store_parse_time("2026-13-01T08:00:00Z", &b, &err), KH_EINVAL);
    assert_int_equal(kh_store_parse_time("2026-03-01T08:00:00Zjunk", &b, &err), KH_EINVAL);
}

int main(void)
{
    rng_state = (uint64_t)time(NULL) * 2654435761u + (uint64_t)getpid();
    printf("# seed %llu\n", (unsigned long long)rng_state);
    unsetenv("KHLUA_API_KEY");
    unsetenv("OPENAI_API_KEY");
    unsetenv("ANTHROPIC_API_KEY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_blob_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sticky, setup, teardown),
        cmocka_unit_test(test_map_growth),
        cmocka_unit_test_setup_teardown(test_corrupt_blob, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_and_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_index_and_refs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secrets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc_backup_export_import, setup, teardown),
        cmocka_unit_test(test_time_format),
        cmocka_unit_test(test_json_codec),
        cmocka_unit_test_setup_teardown(test_txn_index_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_provenance, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bulk_and_many, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
