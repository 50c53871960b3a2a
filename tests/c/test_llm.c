/* test_llm.c: the model client's engine pieces that need no server: retry
 * classification as the official SDKs do it, retry-after parsing and its cap,
 * full-jitter backoff bounds, key redaction, serializer contracts, candidate
 * extraction, and a replay call driven through submit/poll. */
#include "kh_test.h"

#include "llm/llm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void test_retryable(void **state)
{
    (void)state;
    int q;
    long yes[] = {408, 409, 429, 500, 502, 503, 504, 529, 0};
    long no[] = {400, 401, 403, 404, 413, 422};
    for (size_t i = 0; i < KH_ARRAY_LEN(yes); i++) {
        assert_int_equal(kh_llm_retryable(yes[i], -1, NULL, &q), 1);
        assert_int_equal(q, 0);
    }
    for (size_t i = 0; i < KH_ARRAY_LEN(no); i++)
        assert_int_equal(kh_llm_retryable(no[i], -1, NULL, &q), 0);
    /* x-should-retry wins both ways */
    assert_int_equal(kh_llm_retryable(400, 1, NULL, &q), 1);
    assert_int_equal(kh_llm_retryable(503, 0, NULL, &q), 0);
    /* quota and spend-limit 429s never retry, whatever the header says */
    const char *bodies[] = {
        "{\"error\":{\"message\":\"m\",\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\"}}",
        "{\"error\":{\"message\":\"m\",\"type\":\"requests\",\"code\":\"organization_spend_limit_exceeded\"}}",
        "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"m\","
        "\"details\":{\"error_code\":\"enforced_spend_limit_reached\"}}}",
        "{\"object\":\"error\",\"message\":\"m\",\"type\":\"credit_balance_exhausted\",\"code\":429}",
    };
    for (size_t i = 0; i < KH_ARRAY_LEN(bodies); i++) {
        json_t *b = json_loads(bodies[i], 0, NULL);
        assert_non_null(b);
        assert_int_equal(kh_llm_retryable(429, 1, b, &q), 0);
        assert_int_equal(q, 1);
        json_decref(b);
    }
    json_t *plain = json_loads("{\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}", 0, NULL);
    assert_int_equal(kh_llm_retryable(429, -1, plain, &q), 1);
    assert_int_equal(q, 0);
    json_decref(plain);
}

static void test_retry_after(void **state)
{
    (void)state;
    srand((unsigned)time(NULL));
    int ms = 1 + rand() % 5000;
    char b[32];
    snprintf(b, sizeof b, "%d", ms);
    assert_true(kh_llm_retry_after(b, "30", 60) == ms / 1000.0); /* -ms wins */
    assert_true(kh_llm_retry_after(NULL, "7", 60) == 7.0);
    assert_true(kh_llm_retry_after(NULL, "90", 60) < 0);    /* over the cap: ignored */
    assert_true(kh_llm_retry_after(NULL, "0", 60) < 0);     /* not positive */
    assert_true(kh_llm_retry_after(NULL, "soon", 60) < 0);
    assert_true(kh_llm_retry_after(NULL, NULL, 60) < 0);
    /* HTTP dates: one in the future counts, one in the past (7.88 gives a
     * negative value) is ignored */
    char date[64];
    time_t t = time(NULL) + 20;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    double d = kh_llm_retry_after(NULL, date, 60);
    assert_true(d > 17 && d <= 21);
    t = time(NULL) - 100;
    gmtime_r(&t, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    assert_true(kh_llm_retry_after(NULL, date, 60) < 0);
}

static void test_backoff(void **state)
{
    (void)state;
    for (int k = 0; k < 2000; k++) {
        int attempt = rand() % 20;
        double u = (double)rand() / ((double)RAND_MAX + 1);
        double base = 0.1 + (double)(rand() % 100) / 100, cap = 1 + rand() % 60;
        double v = kh_llm_backoff(attempt, base, cap, u);
        double hi = base * (double)(1u << attempt);
        if (hi > cap)
            hi = cap;
        assert_true(v >= 0 && v <= hi + 1e-9);
        assert_true(v == u * hi);
    }
    assert_true(kh_llm_backoff(30, 0.5, 60, 0.999) <= 60);
}

static void test_redact(void **state)
{
    (void)state;
    char key[40];
    snprintf(key, sizeof key, "sk-%08x%08x", (unsigned)rand(), (unsigned)rand());
    char s[256];
    snprintf(s, sizeof s, "Bearer %s and again %s.", key, key);
    size_t n = strlen(s);
    assert_int_equal(kh_llm_redact(s, n, key), 2);
    assert_null(strstr(s, key));
    assert_int_equal(strlen(s), n);
    assert_int_equal(kh_llm_redact(s, n, "ab"), 0); /* too short to be a key */
}

static json_t *req_with(const char *extra_json)
{
    char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"provider\":\"compat\",\"model\":\"m\",\"messages\":[{\"role\":\"system\","
             "\"content\":\"s\"},{\"role\":\"user\",\"content\":[\"a\",{\"text\":\"b\","
             "\"cache\":true}]}]%s}", extra_json);
    json_error_t je;
    json_t *r = json_loads(buf, 0, &je);
    if (!r)
        fail_msg("bad test JSON: %s", je.text);
    return r;
}

static void test_serialize(void **state)
{
    (void)state;
    kh_err err;
    json_t *r = req_with("");
    json_t *b = kh_llm_serialize(r, "anthropic", 0, &err);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(b, "system"), 0), "text")), "s");
    json_t *blocks = json_object_get(json_array_get(json_object_get(b, "messages"), 0), "content");
    assert_int_equal(json_array_size(blocks), 2);
    assert_null(json_object_get(json_array_get(blocks, 0), "cache_control"));
    assert_non_null(json_object_get(json_array_get(blocks, 1), "cache_control"));
    assert_null(json_object_get(b, "temperature"));
    json_decref(b);
    b = kh_llm_serialize(r, "chat", 0, &err);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(b, "messages"), 1), "content")), "ab");
    json_decref(b);
    assert_null(kh_llm_serialize(r, "smoke-signals", 0, &err));
    assert_int_equal(err.code, KH_EINVAL);
    json_decref(r);
    r = req_with(",\"thinking_budget\":1000");
    assert_null(kh_llm_serialize(r, "chat", 1, &err));
    assert_non_null(strstr(err.msg, "thinking_budget"));
    b = kh_llm_serialize(r, "anthropic", 0, &err);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "thinking"), "budget_tokens")), 1000);
    json_decref(b);
    json_decref(r);
}

static void test_extract(void **state)
{
    (void)state;
    json_t *v = kh_llm_extract("~~~cuda\nint x;\n~~~\n```json\n{\"a\": 1}\n```", NULL, 1);
    assert_string_equal(json_string_value(json_object_get(v, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(v, "source")), "int x;\n");
    json_decref(v);
    v = kh_llm_extract("```cuda\nint x;\n```\n```json\n[1]\n```", NULL, 1);
    assert_string_equal(json_string_value(json_object_get(v, "status")), "bad_manifest");
    json_decref(v);
    v = kh_llm_extract("", "length", 1);
    assert_string_equal(json_string_value(json_object_get(v, "status")), "truncated");
    json_decref(v);
}

/* A replay call goes through submit and poll like any other. */
static void test_replay_roundtrip(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir();
    char path[4096], text[64];
    snprintf(text, sizeof text, "reply %d", rand());
    snprintf(path, sizeof path, "%s/a.txt", dir);
    kh_test_write_file(path, text);
    kh_err err;
    kh_llm *c = kh_llm_new(NULL, &err);
    assert_non_null(c);
    json_t *req = json_pack("{s:s, s:{s:s}, s:[{s:s, s:s}]}", "provider", "replay", "replay", "dir",
                            dir, "messages", "role", "user", "content", "q");
    int64_t id;
    assert_int_equal(kh_llm_submit(c, req, &id, &err), KH_OK);
    assert_int_equal(kh_llm_pending(c), 1);
    kh_llm_result *rs;
    size_t n;
    assert_int_equal(kh_llm_poll(c, 1, &rs, &n, &err), KH_OK);
    assert_int_equal(n, 1);
    assert_int_equal(rs[0].id, id);
    assert_string_equal(json_string_value(json_object_get(rs[0].record, "text")), text);
    assert_true(json_is_true(json_object_get(rs[0].record, "replay")));
    assert_int_equal(rs[0].raw_len, strlen(text));
    json_decref(rs[0].record);
    free(rs[0].raw);
    free(rs);
    assert_int_equal(kh_llm_pending(c), 0);
    json_decref(req);
    kh_llm_free(c);
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retryable), cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_backoff),   cmocka_unit_test(test_redact),
        cmocka_unit_test(test_serialize), cmocka_unit_test(test_extract),
        cmocka_unit_test(test_replay_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
