/* test_sse.c: the SSE decoder against the framing rules, with every stream
 * split at every byte boundary (and at every pair of boundaries), in the LF,
 * CRLF and CR line-ending variants. */
#include "kh_test.h"

#include "llm/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct log {
    char buf[8192];
    size_t len;
    int stop_after; /* stop when this many events were seen (0: never) */
    int n;
} log_t;

static int on_event(void *ud, const char *ev, const char *data, size_t dlen, const char *id)
{
    log_t *l = ud;
    assert_int_equal(strlen(data), dlen);
    int w = snprintf(l->buf + l->len, sizeof l->buf - l->len, "[%s|%s|%s]", ev, data, id);
    assert_true(w > 0 && (size_t)w < sizeof l->buf - l->len);
    l->len += (size_t)w;
    l->n++;
    return l->stop_after && l->n >= l->stop_after;
}

/* The stream, written with '\n' for "a line end"; variants replace it. */
static const char *stream_lf =
    ": keep-alive comment\n"
    "event: message_start\n"
    "data: {\"a\":1}\n"
    "\n"
    "data: first line\n"
    "data: second line\n"
    "id: 7\n"
    "\n"
    ":another comment\n"
    "data:no-space\n"
    "retry: 100\n"
    "unknown: field\n"
    "\n"
    "event: empty-no-data\n"
    "\n"
    "data\n"
    "\n"
    "event: error\n"
    "data: {\"type\":\"error\",\"error\":{\"message\":\"colon: inside\"}}\n"
    "\n"
    "data: [DONE]\n"
    "\n";

static const char *expected =
    "[message_start|{\"a\":1}|]"
    "[message|first line\nsecond line|7]"
    "[message|no-space|7]"
    "[message||7]"
    "[error|{\"type\":\"error\",\"error\":{\"message\":\"colon: inside\"}}|7]"
    "[message|[DONE]|7]";

/* Rewrite LF line ends as `eol`; caller frees. */
static char *with_eol(const char *s, const char *eol)
{
    size_t n = strlen(s), el = strlen(eol);
    char *out = malloc(n * el + 1);
    assert_non_null(out);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') {
            memcpy(out + k, eol, el);
            k += el;
        } else {
            out[k++] = s[i];
        }
    }
    out[k] = '\0';
    return out;
}

static void feed_split(const char *s, size_t n, const size_t *cuts, int ncuts, log_t *l)
{
    kh_err err;
    kh_sse *p = kh_sse_new(on_event, l, 0);
    assert_non_null(p);
    size_t prev = 0;
    for (int c = 0; c <= ncuts; c++) {
        size_t end = c < ncuts ? cuts[c] : n;
        assert_int_equal(kh_sse_feed(p, s + prev, end - prev, &err), KH_OK);
        prev = end;
    }
    assert_int_equal(kh_sse_finish(p), 0);
    assert_int_equal(kh_sse_comments(p), 2);
    kh_sse_free(p);
}

static void check_variant(const char *eol)
{
    char *s = with_eol(stream_lf, eol);
    size_t n = strlen(s);
    /* one cut at every position */
    for (size_t a = 0; a <= n; a++) {
        log_t l = {0};
        size_t cuts[1] = {a};
        feed_split(s, n, cuts, 1, &l);
        if (strcmp(l.buf, expected)) {
            fail_msg("eol %d bytes, cut at %zu: got %s", (int)strlen(eol), a, l.buf);
        }
    }
    /* two cuts at every pair of positions */
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            log_t l = {0};
            size_t cuts[2] = {a, b};
            feed_split(s, n, cuts, 2, &l);
            if (strcmp(l.buf, expected))
                fail_msg("cuts %zu,%zu: got %s", a, b, l.buf);
        }
    /* one byte at a time */
    {
        log_t l = {0};
        size_t *cuts = malloc(n * sizeof *cuts);
        assert_non_null(cuts);
        for (size_t i = 0; i < n; i++)
            cuts[i] = i;
        feed_split(s, n, cuts, (int)n, &l);
        assert_string_equal(l.buf, expected);
        free(cuts);
    }
    free(s);
}

static void test_lf(void **state) { (void)state; check_variant("\n"); }
static void test_crlf(void **state) { (void)state; check_variant("\r\n"); }
static void test_cr(void **state) { (void)state; check_variant("\r"); }

/* Line endings mixed line by line, at random, in random chunks. */
static void test_mixed_random(void **state)
{
    (void)state;
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    static const char *eols[] = {"\n", "\r\n", "\r"};
    for (int round = 0; round < 300; round++) {
        size_t n = strlen(stream_lf);
        char *s = malloc(n * 2 + 1);
        assert_non_null(s);
        size_t k = 0;
        const char *prev = "";
        for (size_t i = 0; i < n; i++) {
            if (stream_lf[i] == '\n') {
                const char *e = eols[rand() % 3];
                /* CR then LF would be one line end, eating a blank line */
                while (!strcmp(prev, "\r") && i > 0 && stream_lf[i - 1] == '\n' && e[0] == '\n')
                    e = eols[rand() % 3];
                prev = e;
                memcpy(s + k, e, strlen(e));
                k += strlen(e);
            } else {
                s[k++] = stream_lf[i];
            }
        }
        size_t cuts[16];
        int nc = rand() % 16;
        for (int c = 0; c < nc; c++)
            cuts[c] = (size_t)rand() % (k + 1);
        for (int a = 1; a < nc; a++) /* sort */
            for (int b = a; b > 0 && cuts[b - 1] > cuts[b]; b--) {
                size_t t = cuts[b];
                cuts[b] = cuts[b - 1];
                cuts[b - 1] = t;
            }
        log_t l = {0};
        feed_split(s, k, cuts, nc, &l);
        if (strcmp(l.buf, expected))
            fail_msg("seed %u round %d: got %s", seed, round, l.buf);
        free(s);
    }
}

/* A stream cut before the blank line: the event is not dispatched, and
 * finish reports the cut. */
static void test_truncated(void **state)
{
    (void)state;
    const char *s = "data: whole\n\ndata: half";
    log_t l = {0};
    kh_err err;
    kh_sse *p = kh_sse_new(on_event, &l, 0);
    assert_int_equal(kh_sse_feed(p, s, strlen(s), &err), KH_OK);
    assert_string_equal(l.buf, "[message|whole|]");
    assert_int_equal(kh_sse_finish(p), 1);
    assert_string_equal(l.buf, "[message|whole|]");
    /* data line complete but no blank line: still partial */
    assert_int_equal(kh_sse_feed(p, "data: x\n", 8, &err), KH_OK);
    assert_int_equal(kh_sse_finish(p), 1);
    assert_int_equal(kh_sse_events(p), 1);
    kh_sse_free(p);
}

static void test_bom_split(void **state)
{
    (void)state;
    const char *s = "\xEF\xBB\xBF" "data: after bom\n\n";
    size_t n = strlen(s);
    for (size_t a = 0; a <= n; a++) {
        log_t l = {0};
        size_t cuts[1] = {a};
        kh_err err;
        kh_sse *p = kh_sse_new(on_event, &l, 0);
        assert_int_equal(kh_sse_feed(p, s, a, &err), KH_OK);
        assert_int_equal(kh_sse_feed(p, s + a, n - a, &err), KH_OK);
        (void)cuts;
        assert_string_equal(l.buf, "[message|after bom|]");
        kh_sse_free(p);
    }
}

static void test_limits_and_stop(void **state)
{
    (void)state;
    kh_err err;
    log_t l = {0};
    kh_sse *p = kh_sse_new(on_event, &l, 32);
    char big[100];
    memset(big, 'x', sizeof big);
    assert_int_equal(kh_sse_feed(p, "data: ", 6, &err), KH_OK);
    assert_int_equal(kh_sse_feed(p, big, sizeof big, &err), KH_EPARSE);
    assert_non_null(strstr(err.msg, "longer than 32"));
    kh_sse_free(p);

    log_t l2 = {.stop_after = 1};
    p = kh_sse_new(on_event, &l2, 0);
    const char *s = "data: a\n\ndata: b\n\n";
    assert_int_equal(kh_sse_feed(p, s, strlen(s), &err), KH_ESTATE);
    assert_string_equal(l2.buf, "[message|a|]");
    kh_sse_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lf),          cmocka_unit_test(test_crlf),
        cmocka_unit_test(test_cr),          cmocka_unit_test(test_mixed_random),
        cmocka_unit_test(test_truncated),   cmocka_unit_test(test_bom_split),
        cmocka_unit_test(test_limits_and_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
