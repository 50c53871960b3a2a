/* role_echo.c: the "echo" worker role, a diagnostic and the supervisor's
 * test subject: it echoes, sleeps, and fails on request in every way a real
 * worker can (segfault, abort, exit, stack overflow, hang, junk on stderr),
 * and names the environment variables it was given.  Its start can be slow
 * (KHLUA_ECHO_INIT_S seconds, as a GPU worker's CUDA context) or fail
 * (KHLUA_ECHO_INIT_FAIL: the message), and so can its exit
 * (KHLUA_ECHO_FINI_S seconds, as a tool writing its report). */
#include "worker/worker.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static kh_status m_echo(kh_worker *w, const json_t *params, const unsigned char *payload,
                        size_t n, json_t **result, unsigned char **out, size_t *out_n,
                        kh_err *err)
{
    (void)w;
    *result = json_pack("{s:O, s:I}", "params", params ? (json_t *)params : json_null(),
                        "payload_len", (json_int_t)n);
    if (n) {
        *out = malloc(n);
        if (!*out)
            return kh_err_set(err, KH_ENOMEM, "out of memory echoing %zu bytes", n);
        memcpy(*out, payload, n);
        *out_n = n;
    }
    return KH_OK;
}

static kh_status m_sleep(kh_worker *w, const json_t *params, const unsigned char *payload,
                         size_t n, json_t **result, unsigned char **out, size_t *out_n,
                         kh_err *err)
{
    (void)w; (void)payload; (void)n; (void)out; (void)out_n; (void)err;
    double s = json_number_value(json_object_get(params, "seconds"));
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    *result = json_pack("{s:f}", "slept", s);
    return KH_OK;
}

static int recurse(volatile int depth)
{
    volatile char pad[4096];
    pad[0] = (char)depth;
    if (depth > (1 << 30)) /* never: the stack runs out long before */
        return 0;
    return recurse(depth + 1) + pad[0];
}

static kh_status m_fail(kh_worker *w, const json_t *params, const unsigned char *payload,
                        size_t n, json_t **result, unsigned char **out, size_t *out_n,
                        kh_err *err)
{
    (void)payload; (void)n; (void)result; (void)out; (void)out_n;
    const char *how = json_string_value(json_object_get(params, "how"));
    if (!how)
        return kh_err_set(err, KH_EINVAL, "fail: params.how is required");
    /* what a candidate would print before it crashes */
    const char *say = json_string_value(json_object_get(params, "say"));
    if (say)
        fprintf(stderr, "%s\n", say);
    fprintf(stderr, "echo worker: failing by %s\n", how);
    fflush(stderr);
    if (!strcmp(how, "segv"))
        raise(SIGSEGV);
    else if (!strcmp(how, "abort"))
        abort();
    else if (!strcmp(how, "exit"))
        _exit(3);
    else if (!strcmp(how, "stack"))
        return (kh_status)recurse(0);
    else if (!strcmp(how, "hang"))
        for (;;)
            pause();
    else if (!strcmp(how, "error"))
        return kh_err_set(err, KH_ECUDA, "a reported, non-fatal error");
    else if (!strcmp(how, "sticky")) {
        kh_worker_exit_after_reply(w, 2);
        return kh_err_set(err, KH_ECUDA, "a sticky error: this worker exits after replying");
    }
    return kh_err_set(err, KH_EINVAL, "fail: unknown way '%s'", how);
}

/* The names of the worker's environment variables, never their values. */
static kh_status m_environ(kh_worker *w, const json_t *params, const unsigned char *payload,
                           size_t n, json_t **result, unsigned char **out, size_t *out_n,
                           kh_err *err)
{
    (void)w; (void)params; (void)payload; (void)n; (void)out; (void)out_n;
    json_t *names = json_array();
    for (size_t i = 0; names && environ && environ[i]; i++) {
        const char *eq = strchr(environ[i], '=');
        json_array_append_new(names, json_stringn(environ[i], eq ? (size_t)(eq - environ[i])
                                                                 : strlen(environ[i])));
    }
    if (!names || !(*result = json_pack("{s:o}", "names", names)))
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    return KH_OK;
}

/* Sleep for the seconds the environment variable var names, if any. */
static void env_sleep(const char *var)
{
    const char *s = getenv(var);
    double secs = s ? atof(s) : 0;
    if (secs > 0) {
        struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
    }
}

static kh_status echo_init(kh_worker *w, kh_err *err)
{
    (void)w;
    const char *fail = getenv("KHLUA_ECHO_INIT_FAIL");
    env_sleep("KHLUA_ECHO_INIT_S");
    if (fail && *fail)
        return kh_err_set(err, KH_EINVAL, "echo init: %s", fail);
    return KH_OK;
}

static void echo_fini(kh_worker *w)
{
    (void)w;
    env_sleep("KHLUA_ECHO_FINI_S");
}

static const kh_worker_method_entry echo_methods[] = {
    {"echo", m_echo},       {"sleep", m_sleep}, {"fail", m_fail},
    {"environ", m_environ}, {NULL, NULL},
};

const kh_worker_role kh_role_echo = {
    .name = "echo",
    .summary = "diagnostics: echo, sleep, fail on request, name the environment",
    .init = echo_init,
    .fini = echo_fini,
    .methods = echo_methods,
};
