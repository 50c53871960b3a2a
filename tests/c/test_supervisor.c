/* test_supervisor.c: workers under supervision, as the coordinator relies on
 * them: replies and payloads arrive intact; every way a worker can fail
 * (segfault, abort, exit, stack overflow, hang, sticky error, not a worker at
 * all) becomes a precise status; a dead worker is replaced and the next call
 * succeeds; a role that keeps dying is given up on; two workers run at once;
 * a worker gets no API key, and what it prints before it dies reaches the
 * error message scrubbed. */
#include "kh_test.h"

#include "worker/supervisor.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Let crashes reach the kernel as signals even in the sanitizer build. */
static const char *const crash_env[] = {
    "ASAN_OPTIONS=handle_segv=0:handle_sigbus=0:handle_abort=0:detect_leaks=0:"
    "detect_stack_use_after_return=0",
    NULL};

static kh_wproc_opts echo_opts(void)
{
    kh_wproc_opts o = {.role = "echo", .exe = kh_test_khlua(), .hello_timeout_s = 30,
                       .env = crash_env};
    return o;
}

static kh_wproc *start_worker(const kh_wproc_opts *o)
{
    kh_err err;
    kh_wproc *w = kh_wproc_start(o, &err);
    if (!w)
        fail_msg("cannot start the echo worker: %s", err.msg);
    return w;
}

static kh_wproc *start_echo(void)
{
    kh_wproc_opts o = echo_opts();
    return start_worker(&o);
}

static void test_ping_and_payload_round_trip(void **state)
{
    (void)state;
    kh_wproc *w = start_echo();
    kh_msg reply;
    kh_err err;
    assert_int_equal(kh_wproc_call(w, "ping", NULL, NULL, 0, 10, &reply, &err), KH_OK);
    json_t *res = json_object_get(reply.head, "result");
    assert_string_equal(json_string_value(json_object_get(res, "role")), "echo");
    assert_int_equal(json_integer_value(json_object_get(res, "pid")), kh_wproc_pid(w));
    kh_msg_free(&reply);

    /* 3 MB of random bytes, larger than any pipe buffer, both ways. */
    size_t n = 3u << 20;
    unsigned char *buf = malloc(n);
    srand((unsigned)time(NULL));
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)rand();
    json_t *params = json_pack("{s:s, s:i}", "text", "h\xc3\xa9llo", "k", 42);
    assert_int_equal(kh_wproc_call(w, "echo", params, buf, n, 30, &reply, &err), KH_OK);
    assert_int_equal(reply.payload_len, n);
    assert_memory_equal(reply.payload, buf, n);
    res = json_object_get(reply.head, "result");
    assert_true(json_equal(json_object_get(res, "params"), params));
    kh_msg_free(&reply);
    json_decref(params);
    free(buf);

    /* An unknown method is the worker's error, and it lives on. */
    assert_int_equal(kh_wproc_call(w, "frobnicate", NULL, NULL, 0, 10, &reply, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "no method 'frobnicate'"));
    kh_msg_free(&reply);
    assert_true(kh_wproc_alive(w));
    kh_wproc_stop(w, 2);
}

static void expect_death(const char *how, kh_status want, const char *needle, double timeout)
{
    kh_wproc *w = start_echo();
    json_t *params = json_pack("{s:s}", "how", how);
    kh_msg reply;
    kh_err err;
    double t0 = kh_now();
    kh_status st = kh_wproc_call(w, "fail", params, NULL, 0, timeout, &reply, &err);
    double dt = kh_now() - t0;
    json_decref(params);
    kh_msg_free(&reply);
    if (st != want || !strstr(err.msg, needle))
        fail_msg("fail(%s): got %s '%s', want %s containing '%s'", how, kh_status_name(st),
                 err.msg, kh_status_name(want), needle);
    assert_false(kh_wproc_alive(w));
    if (want == KH_ETIMEOUT)
        assert_true(dt < timeout + 1.0);
    kh_wproc_stop(w, 0);
}

static void test_every_failure_is_classified(void **state)
{
    (void)state;
    expect_death("segv", KH_ECHILD, "killed by SIGSEGV", 20);
    expect_death("abort", KH_ECHILD, "killed by SIGABRT", 20);
    expect_death("exit", KH_ECHILD, "exited with code 3", 20);
    expect_death("stack", KH_ECHILD, "killed by SIGSEGV", 20);
    expect_death("hang", KH_ETIMEOUT, "within 0.5 s and was killed", 0.5);
    /* The worker's last stderr line is part of the story. */
    expect_death("abort", KH_ECHILD, "last stderr: echo worker: failing by abort", 20);
}

static int named(const json_t *names, const char *name)
{
    size_t i;
    const json_t *v;
    json_array_foreach(names, i, v) {
        if (!strcmp(json_string_value(v), name))
            return 1;
    }
    return 0;
}

static void test_no_secrets_reach_or_leave_a_worker(void **state)
{
    (void)state;
    static const char *const canary = "sk-ant-khlua-canary-7f3a9c";
    setenv("ANTHROPIC_API_KEY", canary, 1);
    setenv("KHLUA_REDTEAM_CANARY", "odd-format canary 123", 1);
    setenv("KHLUA_TEST_PLAIN", "passes", 1);
    kh_wproc *w = start_echo();
    kh_msg reply;
    kh_err err;
    assert_int_equal(kh_wproc_call(w, "environ", NULL, NULL, 0, 10, &reply, &err), KH_OK);
    const json_t *names = json_object_get(json_object_get(reply.head, "result"), "names");
    assert_true(json_array_size(names) > 0);
    assert_false(named(names, "ANTHROPIC_API_KEY"));
    assert_false(named(names, "KHLUA_REDTEAM_CANARY"));
    assert_true(named(names, "KHLUA_TEST_PLAIN"));
    assert_true(named(names, "PATH"));
    assert_true(named(names, "ASAN_OPTIONS")); /* the launch's own entries */
    kh_msg_free(&reply);

    /* what it prints before it dies: both keys are redacted, the rest stays */
    json_t *params = json_pack("{s:s, s:s}", "how", "abort", "say",
                               "key sk-ant-khlua-canary-7f3a9c and odd-format canary 123 end");
    kh_status st = kh_wproc_call(w, "fail", params, NULL, 0, 20, &reply, &err);
    json_decref(params);
    kh_msg_free(&reply);
    assert_int_equal(st, KH_ECHILD);
    assert_null(strstr(err.msg, "canary"));
    assert_non_null(strstr(err.msg, "killed by SIGABRT"));
    const char *tail = kh_wproc_stderr_tail(w);
    assert_null(strstr(tail, "canary"));
    assert_non_null(strstr(tail, "key [redacted] and [redacted] end"));
    kh_wproc_stop(w, 0);
    unsetenv("ANTHROPIC_API_KEY");
    unsetenv("KHLUA_REDTEAM_CANARY");
    unsetenv("KHLUA_TEST_PLAIN");
}

static void test_reported_and_sticky_errors(void **state)
{
    (void)state;
    kh_wproc *w = start_echo();
    json_t *params = json_pack("{s:s}", "how", "error");
    kh_msg reply;
    kh_err err;
    assert_int_equal(kh_wproc_call(w, "fail", params, NULL, 0, 10, &reply, &err), KH_ECUDA);
    assert_non_null(strstr(err.msg, "non-fatal"));
    kh_msg_free(&reply);
    json_decref(params);
    assert_true(kh_wproc_alive(w));
    assert_int_equal(kh_wproc_call(w, "ping", NULL, NULL, 0, 10, &reply, &err), KH_OK);
    kh_msg_free(&reply);

    /* Sticky: the error is reported, then the worker exits by itself. */
    params = json_pack("{s:s}", "how", "sticky");
    assert_int_equal(kh_wproc_call(w, "fail", params, NULL, 0, 10, &reply, &err), KH_ECUDA);
    assert_non_null(strstr(err.msg, "sticky"));
    kh_msg_free(&reply);
    json_decref(params);
    /* The supervisor knows at once: no request goes to the dying worker. */
    assert_false(kh_wproc_alive(w));
    assert_int_equal(kh_wproc_submit(w, "ping", NULL, NULL, 0, 10, &err), KH_ESTATE);
    kh_wproc_stop(w, 2);

    /* A pool moves on to a fresh worker after a sticky error. */
    kh_wproc_opts o = echo_opts();
    kh_pool *p = kh_pool_new(&o, 1, &err);
    params = json_pack("{s:s}", "how", "sticky");
    assert_int_equal(kh_pool_call(p, "fail", params, NULL, 0, 10, &reply, &err), KH_ECUDA);
    kh_msg_free(&reply);
    assert_int_equal(kh_pool_call(p, "ping", NULL, NULL, 0, 10, &reply, &err), KH_OK);
    kh_msg_free(&reply);
    json_decref(params);
    kh_pool_free(p);
}

static void test_bad_launches(void **state)
{
    (void)state;
    kh_err err;
    kh_wproc_opts o = echo_opts();
    o.launch = "/nonexistent/khlua worker --role {role}";
    assert_null(kh_wproc_start(&o, &err));
    assert_int_equal(err.code, KH_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/khlua"));

    o = echo_opts();
    o.launch = "/bin/echo this is not a worker";
    assert_null(kh_wproc_start(&o, &err));
    assert_non_null(strstr(err.msg, "not a khlua worker"));

    o = echo_opts();
    o.role = "no-such-role";
    assert_null(kh_wproc_start(&o, &err));
    assert_non_null(strstr(err.msg, "unknown role 'no-such-role'"));

    o = echo_opts();
    o.launch = "/bin/sleep 30";
    o.hello_timeout_s = 0.3;
    double t0 = kh_now();
    assert_null(kh_wproc_start(&o, &err));
    assert_int_equal(err.code, KH_ETIMEOUT);
    assert_true(kh_now() - t0 < 3);
}

static void test_pool_replaces_dead_workers(void **state)
{
    (void)state;
    kh_wproc_opts o = echo_opts();
    kh_err err;
    kh_pool *p = kh_pool_new(&o, 1, &err);
    assert_non_null(p);
    json_t *segv = json_pack("{s:s}", "how", "segv");
    kh_msg reply;
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kh_pool_call(p, "fail", segv, NULL, 0, 20, &reply, &err), KH_ECHILD);
        kh_msg_free(&reply);
        /* The next honest call succeeds on a fresh worker. */
        assert_int_equal(kh_pool_call(p, "ping", NULL, NULL, 0, 20, &reply, &err), KH_OK);
        kh_msg_free(&reply);
        kh_pool_stats s;
        kh_pool_stats_get(p, &s);
        if (s.last_restart_s > worst)
            worst = s.last_restart_s;
    }
    kh_pool_stats s;
    kh_pool_stats_get(p, &s);
    assert_int_equal(s.deaths, 3);
    assert_int_equal(s.started, 4);
    printf("# worker respawn time (start to hello), worst of 3: %.3f s\n", worst);
    json_decref(segv);
    kh_pool_free(p);
}

static void test_pool_gives_up_on_a_failing_role(void **state)
{
    (void)state;
    kh_wproc_opts o = echo_opts();
    o.launch = "/bin/false";
    kh_err err;
    kh_pool *p = kh_pool_new(&o, 1, &err);
    kh_pool_set_max_deaths(p, 3);
    kh_msg reply;
    for (int i = 0; i < 3; i++)
        assert_int_not_equal(kh_pool_call(p, "ping", NULL, NULL, 0, 5, &reply, &err), KH_OK);
    assert_int_equal(kh_pool_call(p, "ping", NULL, NULL, 0, 5, &reply, &err), KH_ENODEV);
    assert_non_null(strstr(err.msg, "keeps failing"));
    kh_pool_free(p);
}

static void test_two_workers_run_concurrently(void **state)
{
    (void)state;
    kh_wproc *w[2] = {start_echo(), start_echo()};
    json_t *params = json_pack("{s:f}", "seconds", 1.0);
    kh_err err;
    double t0 = kh_now();
    for (int i = 0; i < 2; i++)
        assert_int_equal(kh_wproc_submit(w[i], "sleep", params, NULL, 0, 10, &err), KH_OK);
    /* One outstanding request per worker. */
    assert_int_equal(kh_wproc_submit(w[0], "ping", NULL, NULL, 0, 10, &err), KH_ESTATE);
    int finished = 0;
    while (finished < 2) {
        kh_wdone d[2];
        size_t n = kh_wproc_wait(w, 2, 5, d, 2);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(d[i].status, KH_OK);
            kh_msg_free(&d[i].reply);
        }
        finished += (int)n;
    }
    double dt = kh_now() - t0;
    /* one after the other they would take 2 s: the slack is for a loaded machine */
    assert_true(dt >= 0.99 && dt < 1.8);
    json_decref(params);
    kh_wproc_stop(w[0], 2);
    kh_wproc_stop(w[1], 2);
}

/* Workers whose exit takes a while (a CUDA context's teardown, a
 * compute-sanitizer writing its report): asked to exit together
 * (kh_wproc_ask_exit, then kh_wproc_stop each), three exits of 1 s take
 * about 1 s, not 3; kh_pool_free does the same for its workers; and a
 * lone worker stopped still waits for its own exit. */
static void test_exits_overlap(void **state)
{
    (void)state;
    static const char *const slow_env[] = {"KHLUA_ECHO_FINI_S=1", NULL};
    kh_wproc_opts o = echo_opts();
    o.env = slow_env;
    kh_err err;
    kh_wproc *w[3] = {start_worker(&o), start_worker(&o), start_worker(&o)};
    double t0 = kh_now();
    for (int i = 0; i < 3; i++)
        kh_wproc_ask_exit(w[i], 10);
    for (int i = 0; i < 3; i++)
        kh_wproc_stop(w[i], 10);
    double dt = kh_now() - t0;
    /* one after the other they would take 3 s: 1.5 s of slack for a loaded machine */
    assert_true(dt >= 0.99 && dt < 2.5);

    /* stopped one by one, as before: each waits for its own exit */
    kh_wproc *one = start_worker(&o);
    t0 = kh_now();
    kh_wproc_stop(one, 10);
    dt = kh_now() - t0;
    assert_true(dt >= 0.99 && dt < 2.5);

    kh_pool *p = kh_pool_new(&o, 3, &err);
    assert_non_null(p);
    assert_int_equal(kh_pool_prestart(p, SIZE_MAX, &err), KH_OK);
    size_t slot[3];
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(kh_pool_submit(p, "ping", NULL, NULL, 0, 20, i, &slot[i], &err), KH_OK);
    kh_pool_done d[3];
    size_t got = 0;
    while (got < 3)
        got += kh_pool_wait(p, 10, d + got, 3 - got);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(d[i].d.status, KH_OK);
        kh_msg_free(&d[i].d.reply);
    }
    t0 = kh_now();
    kh_pool_free(p);
    dt = kh_now() - t0;
    assert_true(dt >= 0.99 && dt < 2.5);
}

/* kh_pool_prestart: two workers whose start takes 1 s start while the
 * caller works for 1 s, so their first replies come about 1 s after the
 * prestart, not 2 (started on the first request, the start would follow the
 * work); the prestarted workers are the ones that answer.  A worker whose
 * start fails is reported by the first request, with the role's message. */
static void test_pool_prestart(void **state)
{
    (void)state;
    static const char *const slow_env[] = {"KHLUA_ECHO_INIT_S=1", NULL};
    kh_wproc_opts o = echo_opts();
    o.env = slow_env;
    kh_err err;
    kh_pool *p = kh_pool_new(&o, 2, &err);
    assert_non_null(p);
    double t0 = kh_now();
    assert_int_equal(kh_pool_prestart(p, SIZE_MAX, &err), KH_OK);
    int pid0 = kh_pool_slot_pid(p, 0), pid1 = kh_pool_slot_pid(p, 1);
    assert_true(pid0 > 0 && pid1 > 0 && pid0 != pid1);
    assert_null(kh_pool_slot_worker(p, 0)); /* not ready before its hello */
    struct timespec work = {1, 0};
    nanosleep(&work, NULL);
    size_t slot[2];
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(kh_pool_submit(p, "ping", NULL, NULL, 0, 20, i, &slot[i], &err), KH_OK);
    kh_pool_done d[2];
    size_t got = 0;
    while (got < 2)
        got += kh_pool_wait(p, 10, d + got, 2 - got);
    double dt = kh_now() - t0;
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(d[i].d.status, KH_OK);
        int pid = (int)json_integer_value(
            json_object_get(json_object_get(d[i].d.reply.head, "result"), "pid"));
        assert_true(pid == pid0 || pid == pid1);
        kh_msg_free(&d[i].d.reply);
    }
    kh_pool_stats s;
    kh_pool_stats_get(p, &s);
    assert_int_equal(s.started, 2);
    printf("# two prestarted workers (1 s start each) and 1 s of the caller's work: %.3f s\n",
           dt);
    /* one after the other they would take 2 s: the slack is for a loaded machine */
    assert_true(dt >= 1.0 && dt < 1.8);
    kh_pool_free(p);

    static const char *const bad_env[] = {"KHLUA_ECHO_INIT_FAIL=no device here", NULL};
    o.env = bad_env;
    p = kh_pool_new(&o, 1, &err);
    assert_non_null(p);
    assert_int_equal(kh_pool_prestart(p, SIZE_MAX, &err), KH_OK);
    kh_msg reply;
    assert_int_equal(kh_pool_call(p, "ping", NULL, NULL, 0, 20, &reply, &err), KH_ECHILD);
    assert_non_null(strstr(err.msg, "echo init: no device here"));
    kh_pool_free(p);
}

/* kh_pool_submit / kh_pool_wait: requests in flight on several workers at
 * once, the preferred slot honoured, a worker killed mid-request reported and
 * replaced in its slot. */
static void test_pool_async(void **state)
{
    (void)state;
    kh_wproc_opts o = echo_opts();
    kh_err err;
    kh_pool *p = kh_pool_new(&o, 2, &err);
    assert_non_null(p);
    assert_int_equal(kh_pool_size(p), 2);
    assert_int_equal(kh_pool_wait(p, 0.1, NULL, 0), 0); /* nothing in flight */
    double secs = 0.8 + (rand() % 100) / 1000.0;
    json_t *params = json_pack("{s:f}", "seconds", secs);
    size_t slot[3];
    double t0 = kh_now();
    assert_int_equal(kh_pool_submit(p, "sleep", params, NULL, 0, 10, (size_t)-1, &slot[0], &err),
                     KH_OK);
    assert_int_equal(kh_pool_submit(p, "sleep", params, NULL, 0, 10, slot[0], &slot[1], &err),
                     KH_OK);
    assert_int_not_equal(slot[0], slot[1]); /* the preferred one was busy */
    assert_int_equal(kh_pool_in_flight(p), 2);
    assert_int_equal(kh_pool_submit(p, "ping", NULL, NULL, 0, 10, (size_t)-1, &slot[2], &err),
                     KH_ESTATE);
    int seen[2] = {0, 0};
    for (int got = 0; got < 2;) {
        kh_pool_done d[2];
        size_t n = kh_pool_wait(p, 5, d, 2);
        assert_true(n > 0);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(d[i].d.status, KH_OK);
            assert_true(d[i].pid > 0);
            seen[d[i].slot]++;
            kh_msg_free(&d[i].d.reply);
        }
        got += (int)n;
    }
    double dt = kh_now() - t0;
    assert_int_equal(seen[0], 1);
    assert_int_equal(seen[1], 1);
    assert_true(dt >= secs - 0.01 && dt < 1.8 * secs); /* overlapped (serial: 2x) */

    /* the preferred idle slot is taken */
    size_t s1;
    assert_int_equal(kh_pool_submit(p, "ping", NULL, NULL, 0, 10, 1, &s1, &err), KH_OK);
    assert_int_equal(s1, 1);
    kh_pool_done d;
    assert_int_equal(kh_pool_wait(p, 5, &d, 1), 1);
    kh_msg_free(&d.d.reply);

    /* kill -9 a worker mid-request: ECHILD naming the signal, then a fresh
     * worker in that slot answers */
    int pid0 = kh_pool_slot_pid(p, 0);
    assert_true(pid0 > 0);
    assert_int_equal(kh_pool_submit(p, "sleep", params, NULL, 0, 10, 0, &s1, &err), KH_OK);
    assert_int_equal(s1, 0);
    assert_true(kh_pool_slot_busy(p, 0));
    kill(pid0, SIGKILL);
    assert_int_equal(kh_pool_wait(p, 5, &d, 1), 1);
    assert_int_equal(d.d.status, KH_ECHILD);
    assert_true(d.d.worker_died);
    assert_int_equal(d.pid, pid0);
    assert_non_null(strstr(d.d.err.msg, "killed by SIGKILL"));
    assert_int_equal(kh_pool_slot_pid(p, 0), 0);
    /* a live idle worker is used before a dead slot is refilled; a second
     * request in flight refills it with a fresh process */
    size_t s2;
    assert_int_equal(kh_pool_submit(p, "ping", NULL, NULL, 0, 10, 0, &s1, &err), KH_OK);
    assert_int_equal(s1, 1);
    assert_int_equal(kh_pool_submit(p, "ping", NULL, NULL, 0, 10, 0, &s2, &err), KH_OK);
    assert_int_equal(s2, 0);
    for (int got = 0; got < 2;) {
        size_t n = kh_pool_wait(p, 5, &d, 1);
        assert_int_equal(n, 1);
        assert_int_equal(d.d.status, KH_OK);
        kh_msg_free(&d.d.reply);
        got++;
    }
    assert_true(kh_pool_slot_pid(p, 0) > 0 && kh_pool_slot_pid(p, 0) != pid0);
    kh_pool_stats st;
    kh_pool_stats_get(p, &st);
    assert_int_equal(st.deaths, 1);
    assert_int_equal(st.started, 3);
    json_decref(params);
    kh_pool_free(p);
}


/* ---- launch templates (issue 13) ------------------------------------------ */
static void test_launch_presets(void **state)
{
    (void)state;
    const char *t;
    kh_err err;
    assert_int_equal(kh_launch_template(NULL, "host", &t, &err), KH_OK);
    assert_string_equal(t, KH_LAUNCH_LOCAL);
    assert_int_equal(kh_launch_template("srun", "gpu", &t, &err), KH_OK);
    assert_non_null(strstr(t, "srun "));
    assert_non_null(strstr(t, "--gres=gpu:1"));
    assert_int_equal(kh_launch_template("srun", "host", &t, &err), KH_OK);
    assert_null(strstr(t, "--gres")); /* a host worker needs no GPU */
    assert_int_equal(kh_launch_template("ssh", "host", &t, &err), KH_OK);
    assert_non_null(strstr(t, "{host} env {env} {exe}"));
    const char *free_tpl = "mpirun -n 1 {exe} worker --role {role}";
    assert_int_equal(kh_launch_template(free_tpl, "gpu", &t, &err), KH_OK);
    assert_ptr_equal(t, free_tpl);
    assert_string_equal(kh_launch_kind(free_tpl), "template");
    assert_int_equal(kh_launch_template("slurm", "gpu", &t, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "local, srun, ssh"));
}

/* A fake ssh: drops its options, logs "HOST ARGS..." and runs ARGS here.
 * With drop_after set it runs them in the background and exits 255 after
 * that many seconds, as a connection that breaks does. */
static char *fake_ssh(const char *dir, const char *name, const char *log, double drop_after)
{
    char *path = malloc(4096), body[2048];
    snprintf(path, 4096, "%s/%s", dir, name);
    snprintf(body, sizeof body,
             "#!/bin/sh\n"
             "while [ $# -gt 0 ]; do case \"$1\" in -T) shift;; -o) shift 2;; *) break;; esac; "
             "done\n"
             "host=$1; shift\n"
             "echo \"$host $*\" >> '%s'\n"
             "%s\n",
             log, drop_after > 0 ? "" : "exec \"$@\"");
    if (drop_after > 0) {
        size_t l = strlen(body);
        /* a background job's stdin is /dev/null unless handed over */
        snprintf(body + l, sizeof body - l, "exec 3<&0\n\"$@\" <&3 &\nsleep %.2f\nexit 255\n",
                 drop_after);
    }
    kh_test_write_file(path, body);
    assert_int_equal(chmod(path, 0755), 0);
    return path;
}

static void test_remote_shell_template(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir(), log[4200], tpl[4300];
    snprintf(log, sizeof log, "%s/ssh.log", dir);
    char *ssh = fake_ssh(dir, "ssh", log, 0);
    snprintf(tpl, sizeof tpl, "%s -T -o BatchMode=yes {host} env {env} {exe} worker --role {role}",
             ssh);
    static const char *const env[] = {"KH_T_WHERE={host}-{index}", "CUDA_VISIBLE_DEVICES={gpu}",
                                      "ASAN_OPTIONS=detect_leaks=0", NULL};
    kh_wproc_opts o = {.role = "echo", .exe = kh_test_khlua(), .launch = tpl, .env = env};
    kh_err err;
    kh_pool *p = kh_pool_new(&o, 2, &err);
    assert_non_null(p);
    assert_int_equal(kh_pool_place(p, 0, NULL, "alpha", &err), KH_OK);
    assert_int_equal(kh_pool_place(p, 1, NULL, "beta", &err), KH_OK);
    assert_int_equal(kh_pool_place(p, 2, NULL, "gamma", &err), KH_EINVAL);
    /* both slots at once, each on its own host */
    double secs = 0.8 + (rand() % 100) / 1000.0;
    json_t *params = json_pack("{s:f}", "seconds", secs);
    double t0 = kh_now();
    assert_int_equal(kh_pool_submit_to(p, "sleep", params, NULL, 0, 30, 1, &err), KH_OK);
    assert_int_equal(kh_pool_submit_to(p, "sleep", params, NULL, 0, 30, 0, &err), KH_OK);
    assert_int_equal(kh_pool_submit_to(p, "ping", NULL, NULL, 0, 30, 0, &err), KH_ESTATE);
    for (int got = 0; got < 2;) {
        kh_pool_done d[2];
        size_t n = kh_pool_wait(p, 10, d, 2);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(d[i].d.status, KH_OK);
            kh_msg_free(&d[i].d.reply);
        }
        got += (int)n;
    }
    assert_true(kh_now() - t0 < 2 * secs + 5);
    assert_string_equal(kh_pool_slot_host(p, 1), "beta");
    const kh_wproc *w = kh_pool_slot_worker(p, 1);
    assert_non_null(w);
    assert_true(kh_wproc_worker_pid(w) > 0);
    assert_true(kh_wproc_worker_host(w)[0] != '\0');
    json_decref(params);
    kh_pool_free(p);
    /* the template reached the remote shell: host, env as arguments (empty
     * {gpu} left out), the newline framing switch, the worker command */
    char *text = NULL;
    {
        FILE *f = fopen(log, "r");
        assert_non_null(f);
        text = calloc(1, 8192);
        size_t n = fread(text, 1, 8191, f);
        text[n] = '\0';
        fclose(f);
    }
    char want[5000];
    snprintf(want, sizeof want, "alpha env KH_T_WHERE=alpha-0 ASAN_OPTIONS=detect_leaks=0 "
             "KHLUA_WIRE_NEWLINE=1 %s worker --role echo", kh_test_khlua());
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "beta env KH_T_WHERE=beta-1"));
    assert_null(strstr(text, "CUDA_VISIBLE_DEVICES"));
    free(text);
    free(ssh);
    kh_test_rmtree(dir);
    free(dir);
}

static void test_lost_connection_is_a_crash(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir(), log[4200], tpl[4300];
    snprintf(log, sizeof log, "%s/ssh.log", dir);
    char *ssh = fake_ssh(dir, "ssh-drop", log, 0.6);
    snprintf(tpl, sizeof tpl, "%s {host} env {env} {exe} worker --role {role}", ssh);
    kh_wproc_opts o = echo_opts();
    o.launch = tpl;
    kh_err err;
    kh_pool *p = kh_pool_new(&o, 1, &err);
    assert_non_null(p);
    assert_int_equal(kh_pool_place(p, 0, NULL, "flaky", &err), KH_OK);
    /* the connection breaks while the worker sleeps: a crash, well before
     * the request's deadline, naming the cause */
    json_t *params = json_pack("{s:f}", "seconds", 20.0);
    kh_msg reply;
    double t0 = kh_now();
    kh_status st = kh_pool_call(p, "sleep", params, NULL, 0, 30, &reply, &err);
    double dt = kh_now() - t0;
    if (st != KH_ECHILD || !strstr(err.msg, "launcher exited"))
        fail_msg("expected a lost connection, got %s: %s", kh_status_name(st), err.msg);
    assert_true(dt < 5);
    assert_non_null(strstr(err.msg, "exited with code 255"));
    kh_msg_free(&reply);
    /* a fresh connection serves the next request */
    assert_int_equal(kh_pool_call(p, "ping", NULL, NULL, 0, 30, &reply, &err), KH_OK);
    kh_msg_free(&reply);
    kh_pool_stats s;
    kh_pool_stats_get(p, &s);
    assert_int_equal(s.started, 2);
    assert_int_equal(s.deaths, 1);
    /* a host whose connections keep breaking is given up on */
    kh_pool_set_max_deaths(p, 2);
    kh_status last = KH_OK;
    for (int i = 0; i < 4 && last != KH_ENODEV; i++) {
        last = kh_pool_call(p, "sleep", params, NULL, 0, 30, &reply, &err);
        kh_msg_free(&reply);
    }
    assert_int_equal(last, KH_ENODEV);
    assert_non_null(strstr(err.msg, "keeps failing"));
    json_decref(params);
    kh_pool_free(p);
    free(ssh);
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ping_and_payload_round_trip),
        cmocka_unit_test(test_every_failure_is_classified),
        cmocka_unit_test(test_no_secrets_reach_or_leave_a_worker),
        cmocka_unit_test(test_reported_and_sticky_errors),
        cmocka_unit_test(test_bad_launches),
        cmocka_unit_test(test_pool_replaces_dead_workers),
        cmocka_unit_test(test_pool_gives_up_on_a_failing_role),
        cmocka_unit_test(test_two_workers_run_concurrently),
        cmocka_unit_test(test_pool_async),
        cmocka_unit_test(test_pool_prestart),
        cmocka_unit_test(test_exits_overlap),
        cmocka_unit_test(test_launch_presets),
        cmocka_unit_test(test_remote_shell_template),
        cmocka_unit_test(test_lost_connection_is_a_crash),
    };
    srand((unsigned)time(NULL));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
