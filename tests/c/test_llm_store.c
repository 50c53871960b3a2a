/* test_llm_store.c: model-call transcripts into the store (llm_store.h)
 * alone: the record's shape (ticket, status, model, run default, request and
 * raw stream and agent files as blobs), the sink's store_id / store_error,
 * and that a record holding a key value is refused without the value ever
 * appearing in a message. */
#include "kh_test.h"

#include "llm/llm_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

typedef struct fixture {
    char *dir;
    char path[600];
    kh_store *s;
    char run[KH_STORE_ID_MAX];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = kh_test_tmpdir();
    snprintf(f->path, sizeof f->path, "%s/store", f->dir);
    kh_err err;
    kh_store_opts o = {.nosync = 1};
    if (kh_store_open(f->path, &o, &f->s, &err))
        fail_msg("open: %s", err.msg);
    json_t *run = json_pack("{s:s, s:s}", "type", "run", "policy", "test");
    if (kh_store_put(f->s, run, 0, f->run, &err))
        fail_msg("put run: %s", err.msg);
    json_decref(run);
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

static char *blob(kh_store *s, const json_t *rec, const char *field, size_t *n)
{
    const char *hx = json_string_value(json_object_get(rec, field));
    assert_non_null(hx);
    kh_hash h;
    kh_err err;
    assert_int_equal(kh_hash_parse(hx, &h, &err), KH_OK);
    void *d;
    assert_int_equal(kh_store_get_blob(s, &h, &d, n, &err), KH_OK);
    return d;
}

static void random_text(char *b, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        b[i] = (char)('a' + rnd() % 26);
    b[n - 1] = '\0';
}

static void test_http_record(void **state)
{
    fixture *f = *state;
    char text[200], raw[3000];
    random_text(text, sizeof text);
    random_text(raw, sizeof raw);
    json_int_t ticket = (json_int_t)(rnd() % 100000);
    json_t *rec = json_pack("{s:I, s:b, s:s, s:s, s:s, s:s, s:{s:b, s:[{s:s, s:s}]}, s:{s:s},"
                            " s:s, s:f, s:f}",
                            "id", ticket, "ok", 1, "model", "m1", "provider", "anthropic",
                            "fingerprint", "5eed0000c0ffee00", "text", text, "request", "stream",
                            1, "messages", "role", "user", "content", text, "response_headers", "request-id", "req_1",
                            "request_id", "req_1", "latency_s", 1.5, "first_token_s", 0.25);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    assert_int_equal(kh_llm_store_put(f->s, rec, raw, strlen(raw), f->run, NULL, id, &err),
                     KH_OK);
    json_t *got;
    assert_int_equal(kh_store_get(f->s, id, &got, &err), KH_OK);
    assert_string_equal(json_string_value(json_object_get(got, "type")), "llm_call");
    assert_string_equal(json_string_value(json_object_get(got, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(got, "run")), f->run);
    assert_int_equal(json_integer_value(json_object_get(got, "ticket")), ticket);
    assert_string_equal(json_string_value(json_object_get(got, "text")), text);
    assert_string_equal(json_string_value(json_object_get(got, "request_id")), "req_1");
    assert_null(json_object_get(got, "request"));
    size_t n;
    char *b = blob(f->s, got, "response_blob", &n);
    assert_int_equal(n, strlen(raw));
    assert_memory_equal(b, raw, n);
    free(b);
    b = blob(f->s, got, "request_blob", &n);
    json_t *body = json_loadb(b, n, 0, NULL);
    assert_true(json_equal(body, json_object_get(rec, "request")));
    json_decref(body);
    free(b);
    /* the caller's record is untouched */
    assert_int_equal(json_integer_value(json_object_get(rec, "id")), ticket);
    assert_non_null(json_object_get(rec, "request"));
    json_decref(got);
    json_decref(rec);
}

static void test_failed_command_record(void **state)
{
    fixture *f = *state;
    char content[500];
    random_text(content, sizeof content);
    /* the client's record always carries the prompt's fingerprint */
    json_t *rec = json_pack("{s:I, s:b, s:s, s:s, s:{s:s}, s:{s:[s]}, s:[{s:s, s:s}], s:s}",
                            "id", (json_int_t)3, "ok", 0, "fingerprint", "5eed0000c0ffee03",
                            "provider", "command", "error",
                            "kind", "timeout", "command", "argv", "claude", "files", "path",
                            "k.cu", "content", content, "run", f->run);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    /* the record's own run wins over the default, which need not exist then */
    assert_int_equal(kh_llm_store_put(f->s, rec, "", 0, "run-NOSUCH", NULL, id, &err), KH_OK);
    json_t *got;
    assert_int_equal(kh_store_get(f->s, id, &got, &err), KH_OK);
    assert_string_equal(json_string_value(json_object_get(got, "status")), "timeout");
    assert_string_equal(json_string_value(json_object_get(got, "model")), "command:claude");
    assert_string_equal(json_string_value(json_object_get(got, "run")), f->run);
    assert_null(json_object_get(got, "response_blob")); /* no bytes, no blob */
    json_t *file = json_array_get(json_object_get(got, "files"), 0);
    assert_null(json_object_get(file, "content"));
    size_t n;
    char *b = blob(f->s, file, "content_blob", &n);
    assert_int_equal(n, strlen(content));
    assert_memory_equal(b, content, n);
    free(b);
    json_decref(got);
    /* a default run that is not in the store: refused, nothing written */
    json_object_del(rec, "run");
    assert_int_not_equal(kh_llm_store_put(f->s, rec, "x", 1, "run-NOSUCH", NULL, id, &err), KH_OK);
    assert_non_null(strstr(err.msg, "run-NOSUCH"));
    kh_store_filter q = {.type = "llm_call"};
    json_t *all;
    assert_int_equal(kh_store_query(f->s, &q, 1, &all, &err), KH_OK);
    assert_int_equal(json_array_size(all), 1);
    json_decref(all);
    json_decref(rec);
}

static void test_sink(void **state)
{
    fixture *f = *state;
    kh_llm_recorder r;
    memset(&r, 0, sizeof r);
    snprintf(r.run, sizeof r.run, "%s", f->run);
    json_t *rec = json_pack("{s:I, s:b, s:s, s:s, s:s}", "id", (json_int_t)1, "ok", 1, "model",
                            "m", "provider", "replay", "fingerprint", "5eed0000c0ffee01");
    kh_llm_store_sink(&r, rec, "abc", 3);
    assert_non_null(strstr(json_string_value(json_object_get(rec, "store_error")), "closed"));
    assert_int_equal(r.failed, 1);
    json_object_del(rec, "store_error");
    r.store = f->s;
    kh_llm_store_sink(&r, rec, "abc", 3);
    const char *id = json_string_value(json_object_get(rec, "store_id"));
    assert_non_null(id);
    assert_null(json_object_get(rec, "store_error"));
    assert_int_equal(r.written, 1);
    json_t *got;
    kh_err err;
    assert_int_equal(kh_store_get(f->s, id, &got, &err), KH_OK);
    assert_string_equal(json_string_value(json_object_get(got, "run")), f->run);
    assert_null(json_object_get(got, "store_id"));
    json_decref(got);
    json_decref(rec);
}

static void test_key_refused(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir();
    char path[600], key[40];
    snprintf(path, sizeof path, "%s/store", dir);
    snprintf(key, sizeof key, "sk-%016llx%08llx", (unsigned long long)rnd(),
             (unsigned long long)(rnd() & 0xffffffff));
    setenv("OPENAI_API_KEY", key, 1);
    kh_store *s;
    kh_err err;
    kh_store_opts o = {.nosync = 1};
    assert_int_equal(kh_store_open(path, &o, &s, &err), KH_OK);
    kh_llm_recorder r;
    memset(&r, 0, sizeof r);
    r.store = s;
    char raw[200];
    snprintf(raw, sizeof raw, "data: {\"echo\": \"Bearer %s\"}\n\n", key);
    json_t *rec = json_pack("{s:I, s:b, s:s, s:s, s:s, s:s}", "id", (json_int_t)1, "ok", 1,
                            "model", "m", "provider", "replay", "text", "fine", "fingerprint",
                            "5eed0000c0ffee02");
    /* in the raw stream only */
    kh_llm_store_sink(&r, rec, raw, strlen(raw));
    const char *msg = json_string_value(json_object_get(rec, "store_error"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "OPENAI_API_KEY"));
    assert_null(strstr(msg, key));
    /* in the record only */
    json_object_del(rec, "store_error");
    json_object_set_new(rec, "text", json_string(key));
    assert_int_not_equal(kh_llm_store_put(s, rec, "ok", 2, NULL, NULL, (char[KH_STORE_ID_MAX]){0},
                                          &err), KH_OK);
    assert_null(strstr(err.msg, key));
    kh_store_filter q = {.type = "llm_call"};
    json_t *all;
    assert_int_equal(kh_store_query(s, &q, 1, &all, &err), KH_OK);
    assert_int_equal(json_array_size(all), 0);
    json_decref(all);
    json_decref(rec);
    kh_store_close(s);
    unsetenv("OPENAI_API_KEY");
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    rng_state = (uint64_t)time(NULL) * 2654435761u | 1;
    unsetenv("KHLUA_API_KEY");
    unsetenv("OPENAI_API_KEY");
    unsetenv("ANTHROPIC_API_KEY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_http_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_command_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink, setup, teardown),
        cmocka_unit_test(test_key_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
