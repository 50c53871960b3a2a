/* test_cli.c: the khlua binary as a user meets it: script errors with
 * file:line and a traceback, exit codes, -e, --version, --help, unknown
 * commands, doctor, and Ctrl-C (exit 130) in a busy loop, through a script's
 * own pcall, and inside a blocking C call. */
#include "kh_test.h"

#include "core/doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

static char *tmp;

static int setup(void **state)
{
    (void)state;
    tmp = kh_test_tmpdir();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kh_test_rmtree(tmp);
    free(tmp);
    return 0;
}

static char *script(const char *name, const char *text)
{
    char *p = malloc(strlen(tmp) + strlen(name) + 2);
    sprintf(p, "%s/%s", tmp, name);
    kh_test_write_file(p, text);
    return p;
}

static void test_script_error_has_location_and_traceback(void **state)
{
    (void)state;
    char *s = script("bad.lua", "local function inner()\n  error('boom here')\nend\n"
                                "local function outer() inner() end\nouter()\n");
    kh_child_result r;
    kh_test_run_khlua(&r, 30, s, NULL);
    assert_true(r.exited);
    assert_int_equal(r.exit_code, 1);
    assert_non_null(strstr(r.out, "bad.lua:2: boom here"));
    assert_non_null(strstr(r.out, "stack traceback"));
    assert_non_null(strstr(r.out, "in local 'inner'") ? r.out : strstr(r.out, "inner"));
    kh_child_result_free(&r);
    free(s);
}

static void test_syntax_error_and_missing_file(void **state)
{
    (void)state;
    char *s = script("syntax.lua", "local x = = 1\n");
    kh_child_result r;
    kh_test_run_khlua(&r, 30, s, NULL);
    assert_int_equal(r.exit_code, 1);
    assert_non_null(strstr(r.out, "syntax.lua:1:"));
    kh_child_result_free(&r);
    free(s);

    kh_test_run_khlua(&r, 30, "/nonexistent/dir/x.lua", NULL);
    assert_int_equal(r.exit_code, 1);
    assert_non_null(strstr(r.out, "cannot open /nonexistent/dir/x.lua"));
    kh_child_result_free(&r);
}

static void test_arg_table_and_varargs(void **state)
{
    (void)state;
    char *s = script("args.lua", "local a, b = ...\n"
                                 "print(arg[0]:match('args.lua$') and 'ok0', arg[1], arg[2], a, b, #arg)\n");
    kh_child_result r;
    kh_test_run_khlua(&r, 30, s, "x", "y z", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.out, "ok0\tx\ty z\tx\ty z\t2\n");
    kh_child_result_free(&r);
    free(s);
}

static void test_dash_e_and_require_kh(void **state)
{
    (void)state;
    kh_child_result r;
    kh_test_run_khlua(&r, 30, "-e", "local kh = require 'kh'; print(kh.version.khlua ~= nil, "
                                     "kh.json.encode({1,2}))", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.out, "true\t[1,2]\n");
    kh_child_result_free(&r);

    kh_test_run_khlua(&r, 30, "-e", "error({code = 1})", NULL);
    assert_int_equal(r.exit_code, 1);
    assert_non_null(strstr(r.out, "error object is a table value"));
    kh_child_result_free(&r);
}

static void test_version_help_and_usage_errors(void **state)
{
    (void)state;
    kh_child_result r;
    kh_test_run_khlua(&r, 30, "--version", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "khlua "));
    assert_non_null(strstr(r.out, "Lua 5.4"));
    assert_non_null(strstr(r.out, "LMDB"));
    assert_non_null(strstr(r.out, "libcurl"));
    assert_non_null(strstr(r.out, "jansson"));
    assert_non_null(strstr(r.out, "NVRTC"));
    kh_child_result_free(&r);

    kh_test_run_khlua(&r, 30, "--help", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "usage: khlua"));
    assert_non_null(strstr(r.out, "doctor"));
    kh_child_result_free(&r);

    kh_test_run_khlua(&r, 30, "frobnicate", NULL);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.out, "'frobnicate' is neither a command nor a Lua script"));
    kh_child_result_free(&r);

    kh_test_run_khlua(&r, 30, "--bogus-flag", NULL);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.out, "unknown option '--bogus-flag'"));
    kh_child_result_free(&r);

    kh_test_run_khlua(&r, 30, NULL);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.out, "usage: khlua"));
    kh_child_result_free(&r);
}

static void test_doctor(void **state)
{
    (void)state;
    kh_child_result r;
    kh_test_run_khlua(&r, 120, "doctor", "--json", NULL);
    assert_int_equal(r.exit_code, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    assert_non_null(j);
    json_t *checks = json_object_get(j, "checks");
    assert_true(json_array_size(checks) >= 10);
    size_t i;
    json_t *c;
    int saw_driver = 0, saw_nvrtc = 0, saw_keys = 0;
    json_array_foreach(checks, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *status = json_string_value(json_object_get(c, "status"));
        assert_true(!strcmp(status, "ok") || !strcmp(status, "missing") ||
                    !strcmp(status, "warn"));
        if (!strcmp(name, "cuda driver")) {
            saw_driver = 1;
            /* Agrees with an independent probe: missing exactly when no GPU. */
            assert_int_equal(!strcmp(status, "ok"), kh_test_have_gpu());
        }
        saw_nvrtc |= !strcmp(name, "nvrtc");
        saw_keys |= !strcmp(name, "model keys");
    }
    assert_true(saw_driver && saw_nvrtc && saw_keys);
    json_decref(j);
    kh_child_result_free(&r);

    /* Key values never appear, only names. */
    setenv("ANTHROPIC_API_KEY", "sk-test-secret-value-123456", 1);
    kh_test_run_khlua(&r, 120, "doctor", NULL);
    unsetenv("ANTHROPIC_API_KEY");
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "ANTHROPIC_API_KEY"));
    assert_null(strstr(r.out, "sk-test-secret-value"));
    if (!kh_test_have_gpu())
        assert_non_null(strstr(r.out, "no CUDA driver") ? r.out : strstr(r.out, "cuInit"));
    kh_child_result_free(&r);

    kh_test_run_khlua(&r, 30, "doctor", "--help", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "usage: khlua doctor"));
    kh_child_result_free(&r);

    kh_test_run_khlua(&r, 30, "doctor", "--nope", NULL);
    assert_int_equal(r.exit_code, 2);
    kh_child_result_free(&r);
}

/* The GPU probe in a fresh process (what a coordinator whose NVRTC has
 * initialised the driver uses) answers as the forked one does. */
static void test_probe_gpus_exec(void **state)
{
    (void)state;
    json_t *a = NULL, *b = NULL;
    kh_err ea = {0}, eb = {0};
    kh_status sa = kh_doctor_probe_gpus(60, &a, &ea);
    kh_status sb = kh_doctor_probe_gpus_exec(kh_test_khlua(), 60, &b, &eb);
    print_message("# fork: %s | exec: %s\n", sa ? ea.msg : "ok", sb ? eb.msg : "ok");
    assert_int_equal(sa, sb);
    if (sa) {
        assert_string_equal(ea.msg, eb.msg);
    } else {
        json_t *ga = json_object_get(a, "gpus"), *gb = json_object_get(b, "gpus");
        assert_int_equal(json_array_size(ga), json_array_size(gb));
        for (size_t i = 0; i < json_array_size(ga); i++)
            assert_string_equal(json_string_value(json_object_get(json_array_get(ga, i), "uuid")),
                                json_string_value(json_object_get(json_array_get(gb, i), "uuid")));
    }
    json_decref(a);
    json_decref(b);
    /* an executable that is not khlua: a clear error, not a parse of noise */
    sb = kh_doctor_probe_gpus_exec("/bin/false", 30, &b, &eb);
    assert_int_equal(sb, KH_ECHILD);
    assert_non_null(strstr(eb.msg, "GPU probe process failed"));
    assert_null(b);
}

/* Start khlua on a script, wait for it to print "ready", send SIGINT, and
 * return its exit status and output. */
static int interrupt_script(const char *body, char *out, size_t outn)
{
    char *s = script("sigint.lua", body);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        execl(kh_test_khlua(), kh_test_khlua(), s, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    int sent = 0;
    double t0 = kh_now();
    for (;;) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int r = poll(&p, 1, 100);
        if (r > 0) {
            ssize_t n = read(fds[0], out + len, outn - len - 1);
            if (n <= 0)
                break;
            len += (size_t)n;
            out[len] = '\0';
        }
        if (!sent && strstr(out, "ready")) {
            usleep(200 * 1000); /* let it get deep into the loop */
            kill(pid, SIGINT);
            sent = 1;
        }
        if (kh_now() - t0 > 30) {
            kill(pid, SIGKILL);
            break;
        }
    }
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    free(s);
    assert_true(sent);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_ctrl_c(void **state)
{
    (void)state;
    char out[8192] = "";
    /* A busy Lua loop. */
    int rc = interrupt_script("print('ready') io.stdout:flush()\nlocal n = 0\n"
                              "while true do n = n + 1 end\n", out, sizeof out);
    assert_int_equal(rc, 130);
    assert_non_null(strstr(out, "interrupted"));

    /* A script that swallows errors with pcall still stops. */
    out[0] = '\0';
    rc = interrupt_script("print('ready') io.stdout:flush()\n"
                          "while true do pcall(function() while true do end end) end\n", out,
                          sizeof out);
    assert_int_equal(rc, 130);

    /* Inside a blocking engine call: a 60 s sleep ends at once (the helper
     * kills anything still running after 30 s, which would fail WIFEXITED). */
    out[0] = '\0';
    double t0 = kh_now();
    rc = interrupt_script("local kh = require 'kh'\nprint('ready') io.stdout:flush()\n"
                          "kh.time.sleep(60)\nprint('not reached')\n", out, sizeof out);
    assert_int_equal(rc, 130);
    assert_true(kh_now() - t0 < 10);
    assert_null(strstr(out, "not reached"));

    /* __close and __gc still run on the way out. */
    out[0] = '\0';
    rc = interrupt_script("local t <close> = setmetatable({}, {__close = function() "
                          "print('closed') end})\nprint('ready') io.stdout:flush()\n"
                          "while true do end\n", out, sizeof out);
    assert_int_equal(rc, 130);
    assert_non_null(strstr(out, "closed"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_script_error_has_location_and_traceback),
        cmocka_unit_test(test_syntax_error_and_missing_file),
        cmocka_unit_test(test_arg_table_and_varargs),
        cmocka_unit_test(test_dash_e_and_require_kh),
        cmocka_unit_test(test_version_help_and_usage_errors),
        cmocka_unit_test(test_doctor),
        cmocka_unit_test(test_probe_gpus_exec),
        cmocka_unit_test(test_ctrl_c),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
