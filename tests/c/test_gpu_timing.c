/* test_gpu_timing.c: the gpu worker and the timing protocols on a real GPU
 * (skipped without one).  Asserts what a user relies on: CUPTI spans match
 * kernels of known length, the official protocol is repeatable, the window and
 * external-id attributions agree, events read higher than CUPTI and say so,
 * paired calls a 3% difference right and identical kernels a tie, launches
 * over the limits are refused clearly, writes past a buffer are caught, and an
 * illegal address or a hang costs one worker, not the coordinator.  Prints the
 * measured figures as a table. */
#include "kh_test.h"

#include "worker/supervisor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kernels =
    "__device__ unsigned long long gtimer() {\n"
    "  unsigned long long t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n"
    "extern \"C\" __global__ void copy_f4(const float4* __restrict__ a, float4* __restrict__ b,\n"
    "                                     unsigned long long n4) {\n"
    "  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "       i < n4; i += (unsigned long long)gridDim.x * blockDim.x) b[i] = a[i]; }\n"
    "extern \"C\" __global__ void spin(unsigned long long ns, int *sink) {\n"
    "  unsigned long long t0 = gtimer(); while (gtimer() - t0 < ns) {}\n"
    "  if (threadIdx.x == 0) sink[blockIdx.x] = 1; }\n"
    "extern \"C\" __global__ void illegal(int *p) { *(volatile int *)0x8 = p[0]; }\n"
    "extern \"C\" __global__ void forever(volatile int *p) { while (p[0] != 12345678) {} }\n"
    "extern \"C\" __global__ void overrun(float *out, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i <= n) out[i] = 1.0f; }\n";

static kh_pool *pool;
static char table[8192];

static void row(const char *fmt, ...)
{
    size_t l = strlen(table);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(table + l, sizeof table - l, fmt, ap);
    va_end(ap);
    fputs(table + l, stdout); /* as it comes, in case a later test crashes */
    fflush(stdout);
}

static kh_status load_module(kh_err *err)
{
    size_t n;
    unsigned char *cubin = kh_test_nvrtc_cubin(kernels, "sm_90a", &n);
    json_t *p = json_pack("{s:s}", "module", "test");
    kh_msg reply;
    kh_status st = kh_pool_call(pool, "load", p, cubin, n, 60, &reply, err);
    kh_msg_free(&reply);
    json_decref(p);
    free(cubin);
    return st;
}

/* Run method with params on the pool; returns the result (new ref) or NULL
 * with *st set. */
static json_t *call(const char *method, json_t *params, double timeout, kh_status *st,
                    kh_err *err)
{
    kh_msg reply;
    *st = kh_pool_call(pool, method, params, NULL, 0, timeout, &reply, err);
    json_decref(params);
    json_t *res = NULL;
    if (*st == KH_OK)
        res = json_incref(json_object_get(reply.head, "result"));
    kh_msg_free(&reply);
    return res;
}

static json_t *spin_spec(double ns)
{
    return json_pack("{s:[{s:s, s:I, s:s}], s:[{s:s, s:[i], s:[i], s:[{s:I}, {s:s}]}]}",
                     "buffers", "name", "sink", "bytes", (json_int_t)4096, "init", "zero",
                     "launches", "kernel", "spin", "grid", 1, "block", 32, "args", "u64",
                     (json_int_t)ns, "buf", "sink");
}

static json_t *time_spec(json_t *spec, const char *protocol, kh_status *st, kh_err *err)
{
    return call("time", json_pack("{s:s, s:o, s:s}", "module", "test", "spec", spec,
                                  "protocol", protocol), 300, st, err);
}

static double num(json_t *j, const char *k) { return json_number_value(json_object_get(j, k)); }

static int setup(void **state)
{
    (void)state;
    kh_wproc_opts o = {.role = "gpu", .exe = kh_test_khlua(), .hello_timeout_s = 60};
    kh_err err;
    pool = kh_pool_new(&o, 1, &err);
    if (!pool || load_module(&err) != KH_OK) {
        fprintf(stderr, "cannot start the gpu worker: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kh_pool_free(pool);
    printf("\n== summary\n%s", table);
    return 0;
}

static void test_info_says_cupti(void **state)
{
    (void)state;
    kh_status st;
    kh_err err;
    json_t *r = call("info", NULL, 30, &st, &err);
    assert_int_equal(st, KH_OK);
    assert_string_equal(json_string_value(json_object_get(r, "timer")), "cupti");
    row("gpu: %s, %d SMs, L2 %.0f MiB\n", json_string_value(json_object_get(r, "name")),
        (int)json_integer_value(json_object_get(r, "sms")), num(r, "l2_bytes") / 1048576.0);
    json_decref(r);
}

static void test_spin_kernels_read_their_length(void **state)
{
    (void)state;
    row("%-28s %12s %12s %10s\n", "spin kernel (globaltimer)", "true us", "cupti us", "excess");
    const double lens[] = {5000, 20000, 100000};
    for (int i = 0; i < 3; i++) {
        kh_status st;
        kh_err err;
        json_t *r = time_spec(spin_spec(lens[i]), "official", &st, &err);
        if (st)
            fail_msg("%s", err.msg);
        assert_string_equal(json_string_value(json_object_get(r, "status")), "OK");
        double lat = num(r, "latency_ns");
        row("%-28s %12.2f %12.2f %9.2f%%\n", "official", lens[i] / 1e3, lat / 1e3,
            100 * (lat - lens[i]) / lens[i]);
        /* CUPTI adds ~0.5 us; the spin overshoots by at most a timer tick. */
        assert_true(lat >= lens[i] && lat < lens[i] + 2500);
        /* The window method (FlashInfer-Bench's) agrees with exact attribution. */
        assert_true(fabs(num(r, "window_latency_ns") - lat) < 0.01 * lat + 100);
        assert_int_equal(json_integer_value(json_object_get(r, "n")), 150);
        assert_string_equal(json_string_value(json_object_get(r, "guards")), "ok");
        json_decref(r);
    }
}

static void test_official_is_repeatable(void **state)
{
    (void)state;
    double v[3];
    for (int i = 0; i < 3; i++) {
        kh_status st;
        kh_err err;
        json_t *r = time_spec(spin_spec(20000), "official", &st, &err);
        assert_int_equal(st, KH_OK);
        v[i] = num(r, "latency_ns");
        json_decref(r);
    }
    double lo = fmin(v[0], fmin(v[1], v[2])), hi = fmax(v[0], fmax(v[1], v[2]));
    row("official run-to-run spread, spin 20 us, 3 runs: %.3f%%\n", 100 * (hi - lo) / lo);
    assert_true((hi - lo) / lo < 0.02);
}

static void test_copy_bandwidth_against_the_ceiling(void **state)
{
    (void)state;
    kh_status st;
    kh_err err;
    json_t *peaks = call("peaks", NULL, 120, &st, &err);
    if (st)
        fail_msg("%s", err.msg);
    double ceiling = num(peaks, "copy_bytes_per_s");
    char *pj = json_dumps(peaks, JSON_COMPACT);
    row("peaks: %s\n", pj);
    free(pj);
    json_decref(peaks);
    size_t bytes = 1u << 30;
    json_t *spec = json_pack(
        "{s:[{s:s, s:I}, {s:s, s:I, s:s}], s:[{s:s, s:[i], s:[i], s:[{s:s}, {s:s}, {s:I}]}]}",
        "buffers", "name", "a", "bytes", (json_int_t)bytes, "name", "b", "bytes",
        (json_int_t)bytes, "init", "none", "launches", "kernel", "copy_f4", "grid", 132 * 16,
        "block", 256, "args", "buf", "a", "buf", "b", "u64", (json_int_t)(bytes / 16));
    json_t *r = time_spec(spec, "official", &st, &err);
    if (st)
        fail_msg("%s", err.msg);
    double bw = 2.0 * (double)bytes / (num(r, "latency_ns") * 1e-9);
    row("copy 1 GiB: %.0f GB/s; device-to-device ceiling %.0f GB/s; ratio %.3f\n", bw / 1e9,
        ceiling / 1e9, bw / ceiling);
    assert_true(ceiling > 1e12);
    assert_true(bw > 0.6 * ceiling && bw < 1.2 * ceiling);
    json_decref(r);
}

static void test_screen_and_precise_stop_early(void **state)
{
    (void)state;
    kh_status st;
    kh_err err;
    json_t *r = time_spec(spin_spec(20000), "screen", &st, &err);
    assert_int_equal(st, KH_OK);
    json_int_t n = json_integer_value(json_object_get(r, "n"));
    row("screen, spin 20 us: %lld samples, rel CI %.3f%%, median %.2f us\n", (long long)n,
        100 * num(r, "rel_ci"), num(r, "median_ns") / 1e3);
    assert_true(n >= 10 && n < 200);
    assert_true(num(r, "rel_ci") < 0.02);
    json_decref(r);
    r = time_spec(spin_spec(20000), "precise", &st, &err);
    assert_int_equal(st, KH_OK);
    n = json_integer_value(json_object_get(r, "n"));
    row("precise, spin 20 us: %lld samples, rel stdev %.3f%%, status %s %s\n", (long long)n,
        100 * num(r, "stdev_ns") / num(r, "mean_ns"),
        json_string_value(json_object_get(r, "status")),
        json_string_value(json_object_get(r, "why")));
    /* nvbench's rule: at least 0.5 s of measured GPU time */
    assert_true((double)n * num(r, "median_ns") >= 0.5e9);
    json_decref(r);
}

static void test_events_read_higher_and_say_so(void **state)
{
    (void)state;
    kh_status st;
    kh_err err;
    json_t *c = time_spec(spin_spec(5000), "official", &st, &err);
    json_t *e = call("time", json_pack("{s:s, s:o, s:s, s:b}", "module", "test", "spec",
                                       spin_spec(5000), "protocol", "official", "use_events", 1),
                     300, &st, &err);
    assert_int_equal(st, KH_OK);
    assert_string_equal(json_string_value(json_object_get(e, "timer")), "events");
    row("spin 5 us: cupti %.2f us, events %.2f us\n", num(c, "latency_ns") / 1e3,
        num(e, "latency_ns") / 1e3);
    assert_true(num(e, "latency_ns") > num(c, "latency_ns"));
    json_decref(c);
    json_decref(e);
}

static void test_paired_calls_three_percent(void **state)
{
    (void)state;
    int right = 0, ties = 0;
    for (int rep = 0; rep < 10; rep++) {
        kh_status st;
        kh_err err;
        int b_faster = rep % 2;
        double a_ns = b_faster ? 103000 : 100000, b_ns = b_faster ? 100000 : 103000;
        json_t *r = call("paired",
                         json_pack("{s:{s:s, s:o}, s:{s:s, s:o}, s:i, s:i, s:I}", "a", "module",
                                   "test", "spec", spin_spec(a_ns), "b", "module", "test",
                                   "spec", spin_spec(b_ns), "rounds", 10, "block", 3, "seed",
                                   (json_int_t)rep + 1),
                         120, &st, &err);
        if (st)
            fail_msg("%s", err.msg);
        const char *v = json_string_value(json_object_get(r, "verdict"));
        right += !strcmp(v, b_faster ? "faster" : "slower");
        json_decref(r);
        r = call("paired",
                 json_pack("{s:{s:s, s:o}, s:{s:s, s:o}, s:i, s:i, s:I, s:f}", "a", "module",
                           "test", "spec", spin_spec(50000), "b", "module", "test", "spec",
                           spin_spec(50000), "rounds", 10, "block", 3, "seed",
                           (json_int_t)rep + 100, "margin", 0.002),
                 120, &st, &err);
        assert_int_equal(st, KH_OK);
        ties += !strcmp(json_string_value(json_object_get(r, "verdict")), "tie");
        json_decref(r);
    }
    row("paired: 3%% apart called right %d/10; identical called tie %d/10\n", right, ties);
    assert_int_equal(right, 10);
    assert_true(ties >= 9);
}

static void test_limits_and_guards(void **state)
{
    (void)state;
    kh_status st;
    kh_err err;
    json_t *spec = spin_spec(1000);
    json_object_set_new(json_array_get(json_object_get(spec, "launches"), 0), "block",
                        json_integer(2048));
    json_t *r = time_spec(spec, "screen", &st, &err);
    assert_int_equal(st, KH_EINVAL);
    assert_non_null(strstr(err.msg, "exceeds the kernel's limit"));
    assert_null(r);

    json_t *over = json_pack("{s:[{s:s, s:I}], s:[{s:s, s:[i], s:[i], s:[{s:s}, {s:i}]}]}",
                             "buffers", "name", "out", "bytes", (json_int_t)4096,
                             "launches", "kernel", "overrun", "grid", 5, "block", 256, "args",
                             "buf", "out", "i32", 1024);
    r = time_spec(over, "screen", &st, &err);
    assert_int_equal(st, KH_OK);
    assert_non_null(strstr(json_string_value(json_object_get(r, "guards")), "after"));
    json_decref(r);

    spec = spin_spec(1000);
    json_object_set_new(json_array_get(json_object_get(spec, "launches"), 0), "kernel",
                        json_string("nope"));
    r = time_spec(spec, "screen", &st, &err);
    assert_int_equal(st, KH_EINVAL);
    assert_non_null(strstr(err.msg, "no kernel named 'nope'"));
}

static void test_faults_cost_one_worker(void **state)
{
    (void)state;
    kh_status st;
    kh_err err;
    json_t *bad = json_pack("{s:[{s:s, s:I}], s:[{s:s, s:[i], s:[i], s:[{s:s}]}]}", "buffers",
                            "name", "p", "bytes", (json_int_t)256, "launches", "kernel",
                            "illegal", "grid", 1, "block", 1, "args", "buf", "p");
    double t0 = kh_now();
    json_t *r = time_spec(bad, "screen", &st, &err);
    assert_null(r);
    if (st != KH_ECUDA)
        fail_msg("illegal address: got %s: %s", kh_status_name(st), err.msg);
    assert_non_null(strstr(err.msg, "ILLEGAL_ADDRESS"));
    /* The next honest call runs on a fresh worker. */
    assert_int_equal(load_module(&err), KH_OK);
    r = time_spec(spin_spec(5000), "screen", &st, &err);
    double recovery = kh_now() - t0;
    assert_int_equal(st, KH_OK);
    json_decref(r);
    kh_pool_stats ps;
    kh_pool_stats_get(pool, &ps);
    row("illegal address -> healthy worker timing again: %.2f s (respawn to hello %.2f s)\n",
        recovery, ps.last_restart_s);

    json_t *hang = json_pack("{s:[{s:s, s:I, s:s}], s:[{s:s, s:[i], s:[i], s:[{s:s}]}]}",
                             "buffers", "name", "p", "bytes", (json_int_t)256, "init", "zero",
                             "launches", "kernel", "forever", "grid", 1, "block", 1, "args",
                             "buf", "p");
    t0 = kh_now();
    r = call("time", json_pack("{s:s, s:o, s:s}", "module", "test", "spec", hang, "protocol",
                               "screen"), 3, &st, &err);
    assert_int_equal(st, KH_ETIMEOUT);
    assert_int_equal(load_module(&err), KH_OK);
    r = time_spec(spin_spec(5000), "screen", &st, &err);
    assert_int_equal(st, KH_OK);
    json_decref(r);
    row("hang killed at 3 s deadline -> healthy again after %.2f s total\n", kh_now() - t0);
}

int main(void)
{
    if (!kh_test_have_gpu()) {
        printf("skipped: no GPU on this machine\n");
        return KH_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_says_cupti),
        cmocka_unit_test(test_spin_kernels_read_their_length),
        cmocka_unit_test(test_official_is_repeatable),
        cmocka_unit_test(test_copy_bandwidth_against_the_ceiling),
        cmocka_unit_test(test_screen_and_precise_stop_early),
        cmocka_unit_test(test_events_read_higher_and_say_so),
        cmocka_unit_test(test_paired_calls_three_percent),
        cmocka_unit_test(test_limits_and_guards),
        cmocka_unit_test(test_faults_cost_one_worker),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
