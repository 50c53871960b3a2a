/* test_profile.c: engine/profile.h without a GPU: a profile worker's reply
 * (in the format role_profile.c sends, with the H200 copy and FMA metrics of
 * gpu-facts.md §3) becomes per-kernel states and a candidate state; a reply
 * without counters keeps its timing and says why; the metric list follows
 * $KHLUA_PROFILE_METRICS; kh_profile_run fails clearly where no GPU is. */
#include "kh_test.h"

#include "profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *device(void)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "sms", 132, "regs_per_sm", 65536,
                     "smem_per_sm", 233472, "reserved_smem_per_block", 1024,
                     "max_threads_per_sm", 2048, "max_blocks_per_sm", 32);
}

static json_t *launch(int i, const char *k, int blocks, int threads, int regs)
{
    return json_pack("{s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "index", i, "kernel", k,
                     "blocks", blocks, "threads_per_block", threads, "regs_per_thread", regs,
                     "smem_per_block", 0, "local_bytes", 0, "spill_instructions", 0,
                     "api_blocks_per_sm", 0);
}

static json_t *range(int i, const char *k, double t, double sm, double mem, double dram,
                     double rd, double wr)
{
    return json_pack("{s:i, s:s, s:s, s:{s:f, s:f, s:f, s:f, s:f, s:f}}", "index", i, "kernel",
                     k, "range", "x", "metrics", "gpu__time_duration.sum", t,
                     "sm__throughput.avg.pct_of_peak_sustained_elapsed", sm,
                     "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", mem,
                     "dram__throughput.avg.pct_of_peak_sustained_elapsed", dram,
                     "dram__bytes_read.sum", rd, "dram__bytes_write.sum", wr);
}

static void test_reply_with_counters(void **state)
{
    (void)state;
    /* launches in one order, ranges in another: joined by index */
    json_t *reply = json_pack(
        "{s:{s:s}, s:{s:f}, s:o, s:[o, o], s:{s:s, s:s, s:i, s:[], s:[], s:[o, o]}, "
        "s:{s:s, s:f}}",
        "gpu", "uuid", "GPU-test", "peaks", "copy_bytes_per_s", 4.25e12, "device", device(),
        "launches", launch(0, "copy_f4", 2112, 256, 16), launch(1, "fma_loop", 2112, 256, 40),
        "profiler", "chip", "GH100", "replay", "user", "passes", 9, "metrics", "dropped",
        "ranges", range(1, "fma_loop", 0.791e6, 89.6, 0.008, 0.0002, 4352, 2560),
        range(0, "copy_f4", 1.287e6, 5.0, 69.4, 69.4, 2.148e9, 2.152e9), "timing", "timer",
        "events", "latency_ns", 2.2e6);
    kh_bn_context ctx = {.min_bytes = 4.3e9};
    json_t *rep;
    kh_err err;
    if (kh_profile_classify(reply, &ctx, &rep, &err))
        fail_msg("%s", err.msg);
    json_t *ks = json_object_get(rep, "kernels");
    assert_int_equal(json_array_size(ks), 2);
    json_t *s0 = json_object_get(json_array_get(ks, 0), "state");
    json_t *s1 = json_object_get(json_array_get(ks, 1), "state");
    assert_string_equal(json_string_value(json_object_get(s0, "kind")), "memory-bound");
    assert_string_equal(json_string_value(json_object_get(s1, "kind")), "compute-bound");
    /* two kernels: the task's bytes belong to the candidate, not to a kernel */
    assert_true(json_is_null(json_object_get(s0, "reread")));
    /* the candidate: the longer kernel's kind, bytes and time over both, the
     * worker's measured copy bandwidth as the ceiling */
    json_t *all = json_object_get(rep, "state");
    assert_string_equal(json_string_value(json_object_get(all, "kind")), "memory-bound");
    double reread = json_number_value(json_object_get(all, "reread"));
    assert_true(fabs(reread - (2.148e9 + 2.152e9 + 4352 + 2560) / 4.3e9) < 1e-9);
    double sol = json_number_value(json_object_get(all, "sol_fraction"));
    assert_true(fabs(sol - (4.3e9 / 4.25e12 * 1e9) / (1.287e6 + 0.791e6)) < 1e-9);
    assert_string_equal(json_string_value(json_object_get(rep, "chip")), "GH100");
    assert_true(json_is_true(json_object_get(rep, "counters")));
    assert_non_null(strstr(json_string_value(json_object_get(rep, "signature")), "kernels:2"));
    json_decref(rep);
    json_decref(reply);
}

static void test_reply_without_counters(void **state)
{
    (void)state;
    double lat = 1e6 + (double)(rand() % 100000);
    json_t *reply = json_pack("{s:{s:f}, s:o, s:[o], s:b, s:s, s:{s:s, s:f}}", "peaks",
                              "copy_bytes_per_s", 4e12, "device", device(), "launches",
                              launch(0, "copy_f4", 1, 32, 16), "counters", 0, "why",
                              "no counters: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", "timing",
                              "timer", "events", "latency_ns", lat);
    kh_bn_context ctx = {.min_bytes = 2e9};
    json_t *rep;
    kh_err err;
    if (kh_profile_classify(reply, &ctx, &rep, &err))
        fail_msg("%s", err.msg);
    json_t *all = json_object_get(rep, "state");
    assert_string_equal(json_string_value(json_object_get(all, "kind")), "no-counters");
    assert_non_null(strstr(json_string_value(json_object_get(all, "why")),
                           "INSUFFICIENT_PRIVILEGES"));
    /* timings still flow: the bound against the event latency */
    assert_true(fabs(json_number_value(json_object_get(all, "sol_fraction")) -
                     (2e9 / 4e12 * 1e9) / lat) < 1e-9);
    assert_false(json_is_true(json_object_get(rep, "counters")));
    json_decref(rep);
    json_decref(reply);
    /* a reply with no launches is refused, named */
    json_t *bad = json_pack("{s:[]}", "launches");
    assert_int_equal(kh_profile_classify(bad, NULL, &rep, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "no launches"));
    json_decref(bad);
}

static void test_metric_list_is_configurable(void **state)
{
    (void)state;
    json_t *d = kh_profile_default_metrics();
    assert_int_equal(json_array_size(d), 9);
    json_decref(d);
    setenv("KHLUA_PROFILE_METRICS", "a__b.sum, c__d.pct", 1);
    d = kh_profile_default_metrics();
    assert_int_equal(json_array_size(d), 2);
    assert_string_equal(json_string_value(json_array_get(d, 1)), "c__d.pct");
    json_decref(d);
    unsetenv("KHLUA_PROFILE_METRICS");
}

static void test_run_without_gpu_fails_clearly(void **state)
{
    (void)state;
    if (kh_test_have_gpu())
        skip();
    kh_err err;
    kh_engine *e = kh_engine_new(&(kh_engine_config){0}, &err);
    assert_non_null(e);
    unsigned char cubin[16] = "\177ELF";
    json_t *spec = json_pack("{s:[], s:[]}", "buffers", "launches");
    kh_profile_opts o = {.cubin = cubin, .cubin_len = sizeof cubin, .spec = spec,
                         .exe = kh_test_khlua()};
    json_t *rep = NULL;
    kh_status st = kh_profile_run(e, &o, &rep, &err);
    assert_int_not_equal(st, KH_OK);
    assert_null(rep);
    assert_non_null(strstr(err.msg, "profile"));
    json_decref(spec);
    kh_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_with_counters),
        cmocka_unit_test(test_reply_without_counters),
        cmocka_unit_test(test_metric_list_is_configurable),
        cmocka_unit_test(test_run_without_gpu_fails_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
