/* test_role_host.c: the host worker's `evaluate` method over the real
 * protocol (a `khlua worker --role host` process): outputs under both poison
 * patterns, fresh inputs per trial drawn from the seeds (the same bits as
 * kh_rng_fill here), input changes and canary damage reported as failures,
 * timed outputs carrying their set's seed, payload bytes repeated by
 * gen.tile, and malformed requests refused with an error naming the field. */
#include "kh_test.h"

#include "compile/hostcc.h"
#include "task/rng.h"
#include "worker/supervisor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* out[i] = 2 * x[i] (float32); mode 1 also writes x[0]; mode 2 writes out[n];
 * mode 3 leaves out[0] unwritten. */
static const char *SRC =
    "#include <stdint.h>\n"
    "void k(const float *x, float *out, int64_t n, int mode)\n"
    "{\n"
    "    for (int64_t i = mode == 3; i < n; i++) out[i] = 2.0f * x[i];\n"
    "    if (mode == 1) ((float *)x)[0] = 0;\n"
    "    if (mode == 2) out[n] = 1;\n"
    "}\n";

static unsigned char *so;
static size_t so_len;
static kh_engine *eng;

static int setup(void **state)
{
    (void)state;
    kh_err err;
    eng = kh_engine_new(NULL, &err);
    if (!eng)
        return -1;
    char dir[] = "/tmp/khlua-rh-XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    char src[128], out[128];
    snprintf(src, sizeof src, "%s/k.c", dir);
    snprintf(out, sizeof out, "%s/k.so", dir);
    FILE *f = fopen(src, "w");
    fputs(SRC, f);
    fclose(f);
    kh_hostcc_result res;
    if (kh_hostcc_build(eng, KH_HOSTCC_CC_SO, src, out, NULL, NULL, 0, 60, &res, &err))
        return -1;
    kh_hostcc_result_free(&res);
    f = fopen(out, "rb");
    fseek(f, 0, SEEK_END);
    so_len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    so = malloc(so_len);
    if (fread(so, 1, so_len, f) != so_len)
        return -1;
    fclose(f);
    unlink(src);
    unlink(out);
    rmdir(dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(so);
    kh_engine_free(eng);
    return 0;
}

static json_t *request(int64_t n, int mode, uint64_t s0, uint64_t s1, int timing)
{
    json_t *p = json_pack(
        "{s:{s:s, s:s, s:[I, I]}, s:[{s:s, s:s, s:s, s:[I], s:{s:s, s:I, s:i}},"
        " {s:s, s:s, s:s, s:[I]}], s:{s:s, s:[{s:s}, {s:s}, {s:I}, {s:i}]},"
        " s:[{s:I}, {s:I}], s:{s:b, s:b, s:b, s:b, s:b}, s:o, s:f}",
        "artifact", "kind", "so", "key", "test", "payload", (json_int_t)0, (json_int_t)so_len,
        "tensors", "name", "x", "role", "input", "dtype", "float32", "shape", (json_int_t)n, "gen",
        "kind", "random", "seed", (json_int_t)0, "stream", 3, "name", "out", "role", "output",
        "dtype", "float32", "shape", (json_int_t)n, "entry", "symbol", "k", "args", "tensor", "x",
        "tensor", "out", "i64", (json_int_t)n, "i32", mode, "trials", "seed", (json_int_t)s0,
        "seed", (json_int_t)s1, "checks", "poison", 1, "inputs_unchanged", 1, "guards", 1,
        "deterministic", 1, "reload_before_timing", 1, "timing",
        timing ? json_pack("{s:s, s:i, s:i, s:i, s:b, s:i, s:f, s:I}", "protocol", "official",
                           "warmup", 1, "iters", 4, "trials", 1, "cold", 0, "rotate_inputs", 2,
                           "verify_timed_fraction", 1.0, "seed", (json_int_t)(s0 ^ 0x5eed))
               : json_null(),
        "deadline_s", 20.0);
    assert_non_null(p);
    return p;
}

static const float *slice(const kh_msg *m, const json_t *sl, size_t want)
{
    json_int_t off = json_integer_value(json_array_get(sl, 0));
    json_int_t len = json_integer_value(json_array_get(sl, 1));
    assert_int_equal((size_t)len, want);
    assert_true((size_t)(off + len) <= m->payload_len);
    return (const float *)(const void *)(m->payload + off);
}

static void expect_doubled(const float *out, int64_t n, uint64_t seed)
{
    kh_tensor *t = NULL;
    kh_err err;
    int64_t shape[1] = {n};
    assert_int_equal(kh_tensor_new(&t, KH_DTYPE_F32, 1, shape, &err), KH_OK);
    assert_int_equal(kh_rng_fill(eng, t, seed, 3, &err), KH_OK);
    for (int64_t i = 0; i < n; i++)
        assert_true(out[i] == 2.0f * ((float *)t->data)[i]);
    kh_tensor_free(t);
}

static kh_wproc *start(void)
{
    kh_err err;
    kh_wproc_opts o = {.role = "host", .exe = kh_test_khlua()};
    kh_wproc *w = kh_wproc_start(&o, &err);
    if (!w)
        fail_msg("cannot start a host worker: %s", err.msg);
    return w;
}

static void test_outputs_and_checks(void **state)
{
    (void)state;
    kh_wproc *w = start();
    int64_t n = 100 + rand() % 5000;
    uint64_t s0 = (uint64_t)rand() << 20, s1 = s0 + 1 + (uint64_t)rand();
    json_t *p = request(n, 0, s0, s1, 1);
    kh_msg m;
    kh_err err;
    assert_int_equal(kh_wproc_call(w, "evaluate", p, so, so_len, 30, &m, &err), KH_OK);
    json_t *res = json_object_get(m.head, "result");
    json_t *trials = json_object_get(res, "trials");
    assert_int_equal(json_array_size(trials), 2);
    for (size_t t = 0; t < 2; t++) {
        json_t *tr = json_array_get(trials, t);
        assert_int_equal(json_integer_value(json_object_get(tr, "seed")), t ? s1 : s0);
        expect_doubled(slice(&m, json_object_get(json_object_get(tr, "outputs"), "out"),
                             (size_t)n * 4), n, t ? s1 : s0);
        expect_doubled(slice(&m, json_object_get(json_object_get(tr, "outputs_b"), "out"),
                             (size_t)n * 4), n, t ? s1 : s0);
        /* the same bits under both poisons: one copy in the payload */
        assert_true(json_is_true(json_object_get(tr, "outputs_b_same")));
        assert_true(json_equal(json_object_get(tr, "outputs"), json_object_get(tr, "outputs_b")));
        json_t *ck = json_object_get(tr, "checks");
        assert_string_equal(json_string_value(json_object_get(ck, "inputs_unchanged")), "ok");
        assert_string_equal(json_string_value(json_object_get(ck, "guards")), "ok");
        assert_string_equal(json_string_value(json_object_get(ck, "deterministic")), "ok");
    }
    assert_int_equal(json_array_size(json_object_get(res, "failures")), 0);
    /* every timed call verified, each on inputs of its own: a seed derived
     * from the timing seed and the call's number, never a correctness seed */
    json_t *tos = json_object_get(res, "timed_outputs");
    /* and every call taken again after a run-queue wait (a busy machine):
     * verified too, on inputs of its own */
    json_int_t retaken = json_integer_value(
        json_object_get(json_object_get(json_object_get(res, "timing"), "contended"), "retaken"));
    assert_true(retaken >= 0 && retaken <= 4);
    assert_int_equal(json_array_size(tos), 4 + (size_t)retaken);
    size_t i;
    json_t *to;
    uint64_t seen[8];
    json_array_foreach(tos, i, to) {
        uint64_t seed = (uint64_t)json_integer_value(json_object_get(to, "seed"));
        assert_true(seed != s0 && seed != s1);
        for (size_t k = 0; k < i; k++)
            assert_true(seen[k] != seed);
        seen[i] = seed;
        expect_doubled(slice(&m, json_object_get(json_object_get(to, "outputs"), "out"),
                             (size_t)n * 4), n, seed);
    }
    json_t *tm = json_object_get(res, "timing");
    assert_string_equal(json_string_value(json_object_get(tm, "timer")), "monotonic");
    assert_int_equal(json_array_size(json_object_get(tm, "samples_ns")), 4);
    assert_true(json_number_value(json_object_get(tm, "copy_bandwidth_Bps")) > 0);
    kh_msg_free(&m);
    json_decref(p);

    /* a changed input and a damaged canary are failures, not crashes */
    for (int mode = 1; mode <= 2; mode++) {
        p = request(n, mode, s0, s1, 0);
        assert_int_equal(kh_wproc_call(w, "evaluate", p, so, so_len, 30, &m, &err), KH_OK);
        json_t *f = json_array_get(json_object_get(json_object_get(m.head, "result"), "failures"), 0);
        assert_non_null(f);
        assert_string_equal(json_string_value(json_object_get(f, "check")),
                            mode == 1 ? "inputs_unchanged" : "guards");

        assert_non_null(strstr(json_string_value(json_object_get(f, "detail")),
                               mode == 1 ? "input 'x' changed" : "output 'out'"));
        kh_msg_free(&m);
        json_decref(p);
    }
    /* an element left unwritten differs under the two poisons: both copies
     * are sent, the first holding 0xFF bytes there, the second 0x7F */
    p = request(n, 3, s0, s1, 0);
    assert_int_equal(kh_wproc_call(w, "evaluate", p, so, so_len, 30, &m, &err), KH_OK);
    json_t *tr0 = json_array_get(json_object_get(json_object_get(m.head, "result"), "trials"), 0);
    assert_null(json_object_get(tr0, "outputs_b_same"));
    const float *oa = slice(&m, json_object_get(json_object_get(tr0, "outputs"), "out"),
                            (size_t)n * 4);
    const float *ob = slice(&m, json_object_get(json_object_get(tr0, "outputs_b"), "out"),
                            (size_t)n * 4);
    assert_int_equal(((const unsigned char *)oa)[0], 0xFF);
    assert_int_equal(((const unsigned char *)ob)[0], 0x7F);
    assert_true(oa[1] == ob[1]);
    kh_msg_free(&m);
    json_decref(p);
    kh_wproc_stop(w, 2);
}

static void test_bad_requests(void **state)
{
    (void)state;
    kh_wproc *w = start();
    struct {
        const char *path, *value, *want;
    } cases[] = {
        {"artifact.kind", "\"cubin\"", "artifact.kind"},
        {"launches", "[]", "launches"},
        {"entry.symbol", "\"nope\"", "'nope' not found"},
        {"trials", "[]", "trials"},
        {"tensors.0.gen.kind", "\"magic\"", "gen.kind"},
        {"entry.args.0", "{\"tensor\": \"y\"}", "no tensor 'y'"},
        {"timing", "{\"protocol\": \"fastest\"}", "protocol"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        json_t *p = request(64, 0, 1, 2, 0);
        json_t *v = json_loads(cases[c].value, JSON_DECODE_ANY, NULL);
        /* walk the dotted path to the parent */
        char path[64];
        snprintf(path, sizeof path, "%s", cases[c].path);
        json_t *parent = p;
        char *last = path, *dot;
        while ((dot = strchr(last, '.'))) {
            *dot = 0;
            parent = json_is_array(parent) ? json_array_get(parent, (size_t)atoi(last))
                                           : json_object_get(parent, last);
            last = dot + 1;
        }
        if (json_is_array(parent))
            json_array_set_new(parent, (size_t)atoi(last), v);
        else
            json_object_set_new(parent, last, v);
        kh_msg m;
        kh_err err;
        kh_status st = kh_wproc_call(w, "evaluate", p, so, so_len, 30, &m, &err);
        assert_int_not_equal(st, KH_OK);
        if (!strstr(err.msg, cases[c].want))
            fail_msg("case %s: error '%s' does not name '%s'", cases[c].path, err.msg,
                     cases[c].want);
        assert_true(kh_wproc_alive(w)); /* refused, not crashed */
        kh_msg_free(&m);
        json_decref(p);
    }
    /* the payload slice must lie inside the payload */
    json_t *p = request(64, 0, 1, 2, 0);
    kh_msg m;
    kh_err err;
    assert_int_not_equal(kh_wproc_call(w, "evaluate", p, so, so_len / 2, 30, &m, &err), KH_OK);
    assert_non_null(strstr(err.msg, "outside"));
    kh_msg_free(&m);
    json_decref(p);
    kh_wproc_stop(w, 2);
}

/* gen.kind bytes with tile: the payload slice repeated along the tensor;
 * a tile that is not a positive divisor of the tensor is refused. */
static void test_tiled_bytes(void **state)
{
    (void)state;
    kh_wproc *w = start();
    int64_t base = 1 + rand() % 40, tile = 2 + rand() % 50, n = base * tile;
    size_t pl_len = so_len + (size_t)base * sizeof(float);
    unsigned char *pl = malloc(pl_len);
    assert_non_null(pl);
    memcpy(pl, so, so_len);
    float *b = (float *)(void *)(pl + so_len);
    for (int64_t i = 0; i < base; i++)
        b[i] = (float)(rand() % 1000) / 7.0f + 0.5f;
    for (int variant = 0; variant < 3; variant++) {
        json_t *p = request(n, 0, 1, 2, 0);
        json_t *gen = json_object_get(json_array_get(json_object_get(p, "tensors"), 0), "gen");
        json_object_clear(gen);
        json_object_set_new(gen, "kind", json_string("bytes"));
        json_object_set_new(gen, "payload", json_pack("[I, I]", (json_int_t)so_len,
                                                      (json_int_t)(base * 4)));
        json_object_set_new(gen, "tile", json_integer(variant == 0 ? tile
                                                      : variant == 1 ? 0 : tile + 1));
        kh_msg m;
        kh_err err;
        kh_status st = kh_wproc_call(w, "evaluate", p, pl, pl_len, 30, &m, &err);
        if (variant == 0) {
            if (st != KH_OK)
                fail_msg("tiled request refused: %s", err.msg);
            json_t *tr = json_array_get(json_object_get(json_object_get(m.head, "result"),
                                                        "trials"), 1);
            const float *out = slice(&m, json_object_get(json_object_get(tr, "outputs"), "out"),
                                     (size_t)n * 4);
            for (int64_t i = 0; i < n; i++)
                if (out[i] != 2.0f * b[i % base])
                    fail_msg("out[%lld] = %g, want %g", (long long)i, (double)out[i],
                             2.0 * b[i % base]);
        } else {
            assert_int_not_equal(st, KH_OK);
            if (!strstr(err.msg, variant == 1 ? "gen.tile must be a positive integer"
                                              : "bytes x"))
                fail_msg("variant %d: error '%s'", variant, err.msg);
            assert_true(kh_wproc_alive(w));
        }
        kh_msg_free(&m);
        json_decref(p);
    }
    free(pl);
    kh_wproc_stop(w, 2);
}

int main(void)
{
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    printf("# random seed %u\n", seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs_and_checks),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_tiled_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
