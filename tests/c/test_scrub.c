/* test_scrub.c: what must not leave the coordinator (scrub.h).  Secret-named
 * environment variables are dropped from a child's environment and the rest
 * pass; keys of every known shape, "Bearer" tokens, assignments, long
 * hex/base64 runs and the values of secret variables of this process are
 * redacted from text, while the messages khlua itself writes (fault kinds,
 * paths, UUIDs) are left alone; text is cut to its bound, keeping the end or
 * the start, and says how much was cut. */
#include "kh_test.h"

#include "core/scrub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int secret(const char *name)
{
    return kh_scrub_secret_name(name, strlen(name));
}

static void test_secret_names(void **state)
{
    (void)state;
    static const char *const secrets[] = {
        "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_ORG_ID", "GEMINI_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN", "AWS_PROFILE", "AZURE_OPENAI_ENDPOINT", "HF_TOKEN", "HF_HOME",
        "HUGGINGFACE_HUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN", "KHLUA_REDTEAM_CANARY",
        "KHLUA_REDTEAM_CANARY_2", "KHLUA_API_KEY", "my_password", "DB_PASSWD", "SSH_AUTH_SOCK",
        "XAUTHORITY", "SOME_SECRET", "npm_config__authToken", "gh_enterprise_host", "anthropic_api_key",
        "SENTRY_DSN", "GITLAB_PAT", "MY_CANARY", "KRB5CCNAME"};
    static const char *const plain[] = {
        "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
        "LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "KHLUA_STORE", "KHLUA_GPU",
        "KHLUA_WIRE_NEWLINE", "KH_SOURCE_DIR", "PWD", "OLDPWD", "USER", "SHELL", "TERM", "CC",
        "SLURM_JOB_ID", "OMP_NUM_THREADS", "PYTHONPATH"};
    for (size_t i = 0; i < KH_ARRAY_LEN(secrets); i++)
        if (!secret(secrets[i]))
            fail_msg("%s should be secret", secrets[i]);
    for (size_t i = 0; i < KH_ARRAY_LEN(plain); i++)
        if (secret(plain[i]))
            fail_msg("%s should pass", plain[i]);
}

static int has(char *const *env, const char *entry)
{
    for (size_t i = 0; env[i]; i++)
        if (!strcmp(env[i], entry))
            return 1;
    return 0;
}

static void test_child_environment(void **state)
{
    (void)state;
    char *env[] = {"PATH=/usr/bin:/bin",
                   "ANTHROPIC_API_KEY=sk-ant-khlua-canary-7f3a9c",
                   "HOME=/home/k",
                   "OPENAI_API_KEY=sk-0123456789abcdefghij",
                   "CUDA_VISIBLE_DEVICES=0",
                   "KHLUA_REDTEAM_CANARY=canary-value-123",
                   "SSH_AUTH_SOCK=/tmp/ssh-x/agent.1",
                   "ASAN_OPTIONS=detect_leaks=1",
                   "LANG=C.UTF-8",
                   NULL};
    char *extra[] = {"CUDA_VISIBLE_DEVICES=3", "KHLUA_GPU=1", "KHLUA_GPU=2", NULL};
    char **out = kh_scrub_env(env, NULL, extra);
    assert_non_null(out);
    size_t n = 0;
    while (out[n])
        n++;
    assert_int_equal(n, 6);
    assert_true(has(out, "PATH=/usr/bin:/bin"));
    assert_true(has(out, "HOME=/home/k"));
    assert_true(has(out, "ASAN_OPTIONS=detect_leaks=1"));
    assert_true(has(out, "LANG=C.UTF-8"));
    assert_true(has(out, "CUDA_VISIBLE_DEVICES=3")); /* replaced, once */
    assert_false(has(out, "CUDA_VISIBLE_DEVICES=0"));
    assert_true(has(out, "KHLUA_GPU=2")); /* the last of a name wins */
    for (size_t i = 0; out[i]; i++) {
        assert_null(strstr(out[i], "canary"));
        assert_null(strstr(out[i], "sk-"));
        assert_null(strstr(out[i], "SSH_AUTH_SOCK"));
    }
    free(out);

    /* a name the caller keeps passes (ssh needs its agent) */
    const char *keep[] = {"SSH_AUTH_SOCK", NULL};
    out = kh_scrub_env(env, keep, NULL);
    assert_non_null(out);
    assert_true(has(out, "SSH_AUTH_SOCK=/tmp/ssh-x/agent.1"));
    assert_false(has(out, "ANTHROPIC_API_KEY=sk-ant-khlua-canary-7f3a9c"));
    free(out);

    out = kh_scrub_env(NULL, NULL, NULL);
    assert_non_null(out);
    assert_null(out[0]);
    free(out);
}

/* scrub s with the default bound; the result must not contain any of the
 * NULL-terminated needles and must contain want (may be NULL) */
static void expect(const char *s, const char *want, ...)
{
    char *r = kh_scrub_text(s, strlen(s), 0, KH_SCRUB_TAIL);
    assert_non_null(r);
    va_list ap;
    va_start(ap, want);
    for (const char *bad; (bad = va_arg(ap, const char *));)
        if (strstr(r, bad))
            fail_msg("'%s' left in '%s'", bad, r);
    va_end(ap);
    if (want && !strstr(r, want))
        fail_msg("'%s' not in '%s'", want, r);
    free(r);
}

static void test_key_shapes(void **state)
{
    (void)state;
    expect("key sk-ant-api03-AbCdEf0123456789_-xyz leaked", "key [redacted] leaked",
           "sk-ant", "AbCdEf", NULL);
    expect("sk-ant-khlua-canary-7f3a9c", "[redacted]", "canary", NULL);
    expect("openai=sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX12", "[redacted]", "ABCDEFGHIJ", NULL);
    expect("(sk-0123456789abcdefghijKLM)", "([redacted])", "0123456789", NULL);
    expect("aws AKIAIOSFODNN7EXAMPLE here", "aws [redacted] here", "AKIA", NULL);
    expect("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[redacted]", "ghp_", NULL);
    expect("gho_16C7e42F292c6912E7710c838347Ae178B4a", "[redacted]", "gho_", NULL);
    expect("url github_pat_11ABCDEFG0123456789_abcdefghij", "url [redacted]", "github_pat", NULL);
    expect("slack xoxb-123456789012-abcdefghijkl", "slack [redacted]", "xoxb", NULL);
    expect("Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9.abc", "Bearer [redacted]", "eyJh", NULL);
    expect("api_key=hunter2 next", "api_key=[redacted] next", "hunter2", NULL);
    expect("{\"password\": \"hunter22\"}", "\"password\": \"[redacted]\"", "hunter22", NULL);
    expect("TOKEN: abc.def", "TOKEN: [redacted]", "abc.def", NULL);
    expect("secret='s3'", "secret='[redacted]'", "s3'", NULL);
    expect("hash 0123456789abcdef0123456789ABCDEF!", "hash [redacted]!", "0123456789", NULL);
    expect("b64 QWxhZGRpbjpvcGVuIHNlc2FtZTEyMzQ1Njc4OTA= end", "b64 [redacted] end", "QWxh",
           "=", NULL);
    expect("aws wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY.", "aws [redacted].", "EXAMPLE", NULL);
    expect("url-safe Zm9vYmFy_YmF6cXV4LWtleS0xMjM0NTY3ODkw-abc", "url-safe [redacted]", "Zm9v",
           NULL);
    /* a key cut short by the ring of a crash's stderr is still a long run */
    expect("i03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "[redacted]", "AbCdEf", NULL);
}

static void test_scrubbing_twice_changes_nothing(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "api_key=hunter2 and Bearer abcdefghijkl and sk-ant-api03-AbCdEf0123456789",
        "{\"password\": \"hunter22\"} token: x",
    };
    for (size_t i = 0; i < KH_ARRAY_LEN(texts); i++) {
        char *once = kh_scrub_text(texts[i], strlen(texts[i]), 0, KH_SCRUB_TAIL);
        assert_non_null(once);
        char *twice = kh_scrub_text(once, strlen(once), 0, KH_SCRUB_TAIL);
        assert_non_null(twice);
        assert_string_equal(twice, once);
        free(once);
        free(twice);
    }
}

static void test_left_alone(void **state)
{
    (void)state;
    static const char *const keep[] = {
        "khlua-fault: kind=guard_page addr=0x7f1234567000 guard=out",
        "worker 'host' died during 'eval': killed by SIGSEGV",
        "on workload 7e0d7a8e-0001-4a57-9a3c-1d2e3f405161",
        "In file included from /usr/lib/gcc/x86_64-linux-gnu/12/include/immintrin.h:107",
        "rmsnorm_h4096_bf16_vectorized_unrolled_x4 was slower",
        "in kernel _Z20rmsnorm_kernel_bf16PK13__nv_bfloat16S1_fPS_ii at 0x10",
        "RmsNormKernel_H4096_v2_Bf16_Vectorized_Unrolled4 launched",
        "/home/User/Projects2024/khlua/build-Test/Testing/Temporary/LastTest.log",
        "candidate.c:3:5: error: 'password' undeclared (first use in this function)",
        "if (key == 3) return",
        "skip-list and sk-short are words",
        "a == b, keyed: the monkey",
    };
    for (size_t i = 0; i < KH_ARRAY_LEN(keep); i++) {
        char *r = kh_scrub_text(keep[i], strlen(keep[i]), 0, KH_SCRUB_TAIL);
        assert_non_null(r);
        assert_string_equal(r, keep[i]);
        free(r);
    }
}

static void test_environment_values(void **state)
{
    (void)state;
    /* a key of no known shape is still caught: it is the value of a secret
     * variable of this process */
    setenv("KHLUA_REDTEAM_CANARY_TEST", "plain words 42", 1);
    setenv("KHLUA_TEST_PLAIN", "plain words 43", 1);
    setenv("SHORT_TOKEN", "abc", 1);
    expect("it said: plain words 42!", "it said: [redacted]!", "words 42", NULL);
    expect("it said: plain words 43", "plain words 43", NULL);
    expect("abc abc", "abc abc", NULL);
    unsetenv("KHLUA_REDTEAM_CANARY_TEST");
    unsetenv("KHLUA_TEST_PLAIN");
    unsetenv("SHORT_TOKEN");
    expect("it said: plain words 42!", "plain words 42", NULL);
}

static void test_cut(void **state)
{
    (void)state;
    size_t n = 10000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(i % 7 == 6 ? '\n' : 'a' + i % 7);
    memcpy(big, "FIRST", 5);
    memcpy(big + n - 4, "LAST", 4);
    big[n] = '\0';

    char *t = kh_scrub_text(big, n, 0, KH_SCRUB_TAIL);
    assert_non_null(t);
    assert_true(strlen(t) <= KH_SCRUB_MAX);
    assert_true(strlen(t) > KH_SCRUB_MAX - 40);
    assert_true(!strncmp(t, "[... ", 5));
    assert_non_null(strstr(t, " bytes cut]\n"));
    assert_string_equal(t + strlen(t) - 4, "LAST");
    assert_null(strstr(t, "FIRST"));
    size_t cut = 0;
    assert_int_equal(sscanf(t, "[... %zu bytes cut]", &cut), 1);
    assert_int_equal(cut + strlen(strchr(t, '\n') + 1), n);
    free(t);

    char *h = kh_scrub_text(big, n, 300, KH_SCRUB_HEAD);
    assert_non_null(h);
    assert_true(strlen(h) <= 300);
    assert_true(!strncmp(h, "FIRST", 5));
    assert_null(strstr(h, "LAST"));
    assert_non_null(strstr(h, " bytes cut]"));
    free(h);

    /* a multi-byte character is never split, and NULs and bad bytes go */
    char utf[121];
    for (int i = 0; i < 60; i++)
        memcpy(utf + 2 * i, "\xc3\xa9", 2);
    utf[120] = '\0';
    for (size_t max = 64; max < 74; max++) {
        char *u = kh_scrub_text(utf, 120, max, KH_SCRUB_TAIL);
        assert_non_null(u);
        assert_true(strlen(u) <= max);
        char *again = kh_utf8_sanitize(u, strlen(u), NULL);
        assert_string_equal(again, u);
        free(again);
        free(u);
    }
    char *z = kh_scrub_text("a\0b\xff", 4, 0, KH_SCRUB_TAIL);
    assert_non_null(z);
    assert_int_equal(strlen(z), strlen("ab\xef\xbf\xbd"));
    free(z);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secret_names),     cmocka_unit_test(test_child_environment),
        cmocka_unit_test(test_key_shapes),       cmocka_unit_test(test_scrubbing_twice_changes_nothing),
        cmocka_unit_test(test_left_alone),
        cmocka_unit_test(test_environment_values), cmocka_unit_test(test_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
