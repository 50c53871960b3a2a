/* test_safetensors.c: safetensors files.  Random tensors of every dtype make
 * a round trip through a file; a file assembled byte by byte from the format
 * description parses; and every malformation is rejected with a message
 * naming the problem. */
#include "kh_test.h"

#include "task/rng.h"
#include "task/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t seed;

static kh_tensor *randt(kh_dtype t, int ndim, const int64_t *shape, uint32_t stream)
{
    kh_tensor *x;
    kh_err err;
    assert_int_equal(kh_tensor_new(&x, t, ndim, shape, &err), KH_OK);
    assert_int_equal(kh_rng_fill(NULL, x, seed, stream, &err), KH_OK);
    return x;
}

static void test_round_trip(void **state)
{
    char *dir = kh_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    kh_tensor *ts[KH_DTYPE_COUNT + 2];
    const char *names[KH_DTYPE_COUNT + 2];
    char namebuf[KH_DTYPE_COUNT + 2][32];
    size_t n = 0;
    for (int t = 0; t < KH_DTYPE_COUNT; t++) {
        int64_t shape[3] = {2 + (int64_t)(seed % 3), 3, 2 * (1 + t)};
        ts[n] = randt((kh_dtype)t, 3, shape, (uint32_t)t);
        snprintf(namebuf[n], sizeof namebuf[n], "in_%s", kh_dtype_name((kh_dtype)t));
        names[n] = namebuf[n];
        n++;
    }
    ts[n] = randt(KH_DTYPE_F32, 0, NULL, 50); /* a 0-D scalar */
    names[n++] = "scalar";
    int64_t empty[2] = {0, 7};
    ts[n] = randt(KH_DTYPE_BF16, 2, empty, 51);
    names[n++] = "empty";
    const char *mk[2] = {"seed", "format"}, *mv[2] = {"1234", "pt"};
    kh_err err;
    kh_status st = kh_st_write(path, n, names, (const kh_tensor *const *)ts, 2, mk, mv, &err);
    if (st)
        fail_msg("%s", err.msg);

    kh_st_file *f;
    st = kh_st_open(path, &f, &err);
    if (st)
        fail_msg("%s", err.msg);
    assert_int_equal(kh_st_count(f), n);
    assert_string_equal(kh_st_metadata(f, "seed"), "1234");
    assert_null(kh_st_metadata(f, "absent"));
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(kh_st_name(f, i), names[i]);
        kh_tensor *v, *c;
        assert_int_equal(kh_st_get(f, names[i], &v, &err), KH_OK);
        assert_int_equal(kh_st_get_copy(f, names[i], &c, &err), KH_OK);
        assert_int_equal(v->dtype, ts[i]->dtype);
        assert_int_equal(v->ndim, ts[i]->ndim);
        assert_memory_equal(v->shape, ts[i]->shape, sizeof v->shape[0] * (size_t)v->ndim);
        assert_int_equal(v->nbytes, ts[i]->nbytes);
        assert_memory_equal(v->data, ts[i]->data, v->nbytes);
        assert_memory_equal(c->data, ts[i]->data, c->nbytes);
        kh_tensor_free(v);
        kh_tensor_free(c);
    }
    kh_tensor *none;
    assert_int_equal(kh_st_get(f, "nope", &none, &err), KH_ENOTFOUND);
    assert_non_null(strstr(err.msg, "'nope'"));
    assert_non_null(strstr(err.msg, "'in_float32'"));
    kh_st_close(f);

    /* the data buffer starts 8-byte aligned */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    fclose(fp);
    assert_int_equal(len8[0] % 8, 0);

    /* writer refusals */
    const char *dup[2] = {"a", "a"};
    assert_int_equal(kh_st_write(path, 2, dup, (const kh_tensor *const *)ts, 0, NULL, NULL, &err),
                     KH_EINVAL);
    assert_non_null(strstr(err.msg, "twice"));
    const char *meta[1] = {"__metadata__"};
    assert_int_equal(kh_st_write(path, 1, meta, (const kh_tensor *const *)ts, 0, NULL, NULL, &err),
                     KH_EINVAL);
    int64_t odd = 3;
    kh_tensor *f4 = randt(KH_DTYPE_F4E2M1, 1, &odd, 9);
    const char *f4n[1] = {"f4"};
    assert_int_equal(kh_st_write(path, 1, f4n, (const kh_tensor *const *)&f4, 0, NULL, NULL, &err),
                     KH_EINVAL);
    assert_non_null(strstr(err.msg, "odd element count"));
    kh_tensor_free(f4);
    for (size_t i = 0; i < n; i++)
        kh_tensor_free(ts[i]);
    assert_int_equal(kh_st_open("/nonexistent/x.safetensors", &f, &err), KH_ENOTFOUND);
    assert_int_equal(kh_st_open(dir, &f, &err), KH_EIO);
    kh_test_rmtree(dir);
    free(dir);
}

/* header text + data_len bytes of data (random), as the format lays out */
static uint8_t *build(const char *header, size_t data_len, size_t *len)
{
    size_t hl = strlen(header);
    *len = 8 + hl + data_len;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hl + i] = (uint8_t)kh_rng_code_at(KH_DTYPE_I8, seed, 77, i);
    return b;
}

static void test_hand_built_file(void **state)
{
    size_t len;
    uint8_t *b = build("{\"__metadata__\":{\"k\":\"v\"},"
                       "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[6,14]},"
                       "\"a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}   ",
                       14, &len);
    kh_st_file *f;
    kh_err err;
    kh_status st = kh_st_parse(b, len, &f, &err);
    if (st)
        fail_msg("%s", err.msg);
    kh_tensor *t;
    assert_int_equal(kh_st_get(f, "b", &t, &err), KH_OK);
    assert_int_equal(t->dtype, KH_DTYPE_I32);
    size_t hl = len - 8 - 14;
    assert_ptr_equal(t->data, b + 8 + hl + 6);
    int32_t v;
    memcpy(&v, b + 8 + hl + 10, 4);
    assert_true(kh_tensor_get(t, 1) == (double)v);
    kh_tensor_free(t);
    /* the input-spec check: exact dtype and shape, else a precise refusal */
    int64_t two = 2, three = 3;
    assert_int_equal(kh_st_get_expect(f, "b", "seq_lens", KH_DTYPE_I32, 1, &two, &t, &err), KH_OK);
    kh_tensor_free(t);
    assert_int_equal(kh_st_get_expect(f, "b", "seq_lens", KH_DTYPE_I64, 1, &two, &t, &err),
                     KH_EINVAL);
    assert_null(t);
    assert_non_null(strstr(err.msg, "input 'seq_lens': expected int64 [2], but tensor 'b'"));
    assert_int_equal(kh_st_get_expect(f, "a", NULL, KH_DTYPE_F16, 1, &three, &t, &err), KH_OK);
    kh_tensor_free(t);
    assert_int_equal(kh_st_get_expect(f, "a", NULL, KH_DTYPE_F16, 1, &two, &t, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "is float16 [3]"));
    assert_string_equal(kh_st_metadata(f, "k"), "v");
    kh_st_close(f);
    free(b);
}

/* A file written by the safetensors package itself (gen_fixture.py), with
 * closed-form contents. */
static void test_reference_file(void **state)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/safetensors/reference.safetensors",
             kh_test_source_dir());
    kh_st_file *f;
    kh_err err;
    kh_status st = kh_st_open(path, &f, &err);
    if (st)
        fail_msg("%s", err.msg);
    assert_int_equal(kh_st_count(f), 6);
    assert_string_equal(kh_st_metadata(f, "made_by"), "safetensors.numpy");
    kh_tensor *t;
    int64_t s34[2] = {3, 4}, s12 = 12, s288[3] = {2, 8, 8};
    assert_int_equal(kh_st_get_expect(f, "x_f32", NULL, KH_DTYPE_F32, 2, s34, &t, &err), KH_OK);
    for (uint64_t i = 0; i < 12; i++)
        assert_true(kh_tensor_get(t, i) == ((double)i - 5) / 4);
    kh_tensor_free(t);
    assert_int_equal(kh_st_get_expect(f, "x_f16", NULL, KH_DTYPE_F16, 1, &s12, &t, &err), KH_OK);
    for (uint64_t i = 0; i < 12; i++)
        assert_true(kh_tensor_get(t, i) == ((double)i - 5) / 4);
    kh_tensor_free(t);
    assert_int_equal(kh_st_get_expect(f, "x_i64", NULL, KH_DTYPE_I64, 1, &s12, &t, &err), KH_OK);
    for (uint64_t i = 0; i < 12; i++)
        assert_int_equal((int64_t)kh_dtype_get_code(KH_DTYPE_I64, t->data, i),
                         (int64_t)i * ((int64_t)1 << 40) - 3);
    kh_tensor_free(t);
    assert_int_equal(kh_st_get_expect(f, "x_i8", NULL, KH_DTYPE_I8, 3, s288, &t, &err), KH_OK);
    for (uint64_t i = 0; i < 128; i++)
        assert_true(kh_tensor_get(t, i) == (double)i - 64);
    kh_tensor_free(t);
    assert_int_equal(kh_st_get_expect(f, "x_bool", NULL, KH_DTYPE_BOOL, 1, &s12, &t, &err), KH_OK);
    for (uint64_t i = 0; i < 12; i++)
        assert_true(kh_tensor_get(t, i) == (i % 3 == 0 ? 1.0 : 0.0));
    kh_tensor_free(t);
    assert_int_equal(kh_st_get(f, "empty", &t, &err), KH_OK);
    assert_int_equal(t->numel, 0);
    kh_tensor_free(t);
    kh_st_close(f);
}

static void reject(const char *header, size_t data_len, kh_status code, const char *needle)
{
    size_t len;
    uint8_t *b = build(header, data_len, &len);
    kh_st_file *f = NULL;
    kh_err err;
    kh_status st = kh_st_parse(b, len, &f, &err);
    if (st == KH_OK) {
        kh_st_close(f);
        fail_msg("accepted: %s", header);
    }
    if (st != code || !strstr(err.msg, needle))
        fail_msg("header %s\n  gave %s \"%s\"\n  expected %s containing \"%s\"", header,
                 kh_status_name(st), err.msg, kh_status_name(code), needle);
    assert_null(f);
    free(b);
}

#define E(body) "{\"t\":" body "}"
static void test_malformed_headers(void **state)
{
    reject("{", 0, KH_EINVAL, "too small");
    reject("[1, 2, 3]", 0, KH_EINVAL, "does not start with '{'");
    reject("{\"t\": ", 0, KH_EINVAL, "not valid JSON");
    reject("{\"t\":1,\"t\":2}", 0, KH_EINVAL, "duplicate");
    reject("{\"t\":\"\xff\xfe\"}", 0, KH_EINVAL, "not valid JSON");
    reject("{\"__metadata__\":[]}", 0, KH_EINVAL, "__metadata__ is not an object");
    reject("{\"__metadata__\":{\"a\":1}}", 0, KH_EINVAL, "value of \"a\" is not a string");
    reject(E("[]"), 0, KH_EINVAL, "tensor 't': entry is not an object");
    reject(E("{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],\"x\":1}"), 4, KH_EINVAL,
           "unknown field \"x\"");
    reject(E("{\"shape\":[],\"data_offsets\":[0,4]}"), 4, KH_EINVAL, "dtype is missing");
    reject(E("{\"dtype\":\"F65\",\"shape\":[],\"data_offsets\":[0,4]}"), 4, KH_EINVAL,
           "unknown safetensors dtype \"F65\"");
    reject(E("{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}"), 8, KH_EUNSUPPORTED,
           "F64 is valid but khlua does not hold it");
    reject(E("{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,12]}"), 12, KH_EINVAL,
           "shape is missing or not a list");
    reject(E("{\"dtype\":\"F32\",\"shape\":[-3],\"data_offsets\":[0,12]}"), 12, KH_EINVAL,
           "shape[0] is not a non-negative integer");
    reject(E("{\"dtype\":\"F32\",\"shape\":[1, 3.0],\"data_offsets\":[0,12]}"), 12, KH_EINVAL,
           "shape[1] is not a non-negative integer");
    reject(E("{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
             "\"data_offsets\":[0,4]}"),
           4, KH_EINVAL, "17 dimensions");
    reject(E("{\"dtype\":\"I64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}"), 8,
           KH_EINVAL, "too large");
    reject(E("{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}"), 2, KH_EINVAL,
           "odd element count");
    reject(E("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}"), 4, KH_EINVAL,
           "data_offsets must be [begin, end]");
    reject(E("{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,-4]}"), 4, KH_EINVAL,
           "data_offsets must be [begin, end]");
    reject(E("{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}"), 4, KH_EINVAL,
           "run backwards");
    reject(E("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"), 4, KH_EINVAL,
           "past the 4-byte data buffer");
    reject(E("{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,6]}"), 6, KH_EINVAL,
           "span 6 bytes but BF16 [2, 2] needs 8");
    reject("{\"a\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
           6, KH_EINVAL, "tensors 'a' and 'b' overlap");
    reject("{\"a\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[5,9]}}",
           9, KH_EINVAL, "bytes 4..5 of the data buffer belong to no tensor");
    reject(E("{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}"), 5, KH_EINVAL,
           "cover only 4");
    reject("{\"a\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
           4, KH_EINVAL, "overlap");
}

static void test_malformed_framing(void **state)
{
    kh_st_file *f;
    kh_err err;
    uint8_t shortb[5] = {1, 0, 0, 0, 0};
    assert_int_equal(kh_st_parse(shortb, 5, &f, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "too short"));
    uint8_t huge[16] = {0, 0, 0, 0, 0, 0, 0, 1, '{', '}'};
    assert_int_equal(kh_st_parse(huge, 16, &f, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "exceeds"));
    uint8_t past[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    assert_int_equal(kh_st_parse(past, 16, &f, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "runs past the end of the 16-byte input"));
    const char lfs[] = "version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n";
    assert_int_equal(kh_st_parse(lfs, sizeof lfs - 1, &f, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "Git LFS pointer"));
    /* a header with a NUL inside */
    size_t len;
    uint8_t *b = build("{\"a\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[0,0]}}  ", 0,
                       &len);
    b[len - 1] = 0;
    assert_int_equal(kh_st_parse(b, len, &f, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "not valid JSON"));
    free(b);
    /* every truncation of a valid file is rejected, none crashes */
    b = build("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &len);
    for (size_t cut = 0; cut < len; cut++) {
        kh_status st = kh_st_parse(b, cut, &f, &err);
        assert_int_equal(st, KH_EINVAL);
    }
    assert_int_equal(kh_st_parse(b, len, &f, &err), KH_OK);
    kh_st_close(f);
    free(b);
}

int main(void)
{
    seed = (uint64_t)time(NULL);
    printf("# random seed %llu\n", (unsigned long long)seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_hand_built_file),
        cmocka_unit_test(test_reference_file),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_malformed_framing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
