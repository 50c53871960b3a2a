/* test_bottleneck.c: engine/profile/bottleneck.h and the ncu CSV parser (ncu.h), on
 * recorded metric sets: the H200 range-profiler measurements of gpu-facts.md
 * §3 (copy, FMA loop, one-warp pointer chase), ncu's own 1 GiB copy (§4),
 * synthetic cases at each edge of ncu's rule, the occupancy limiter, the
 * re-read factor and SOL fraction, "no counters", and a hand-written raw CSV
 * in ncu's documented format (tests/fixtures/ncu). */
#include "kh_test.h"

#include "profile/bottleneck.h"
#include "profile/ncu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static kh_bn_metrics mset(double time_ns, double sm, double mem, double dram, double rd,
                          double wr, double warps)
{
    kh_bn_metrics m;
    kh_bn_metrics_init(&m);
    m.time_ns = time_ns;
    m.sm_pct = sm;
    m.mem_pct = mem;
    m.dram_pct = dram;
    m.dram_read_bytes = rd;
    m.dram_write_bytes = wr;
    m.warps_active_pct = warps;
    return m;
}

/* H200 device limits (cuDeviceGetAttribute on sm_90). */
static kh_bn_launch h200_launch(long blocks, int threads, int regs, long smem)
{
    kh_bn_launch l = {0};
    l.blocks = blocks;
    l.threads_per_block = threads;
    l.regs_per_thread = regs;
    l.smem_per_block = smem;
    l.spill_instructions = 0;
    l.sms = 132;
    l.regs_per_sm = 65536;
    l.smem_per_sm = 233472;
    l.reserved_smem_per_block = 1024;
    l.max_threads_per_sm = 2048;
    l.max_blocks_per_sm = 32;
    return l;
}

static void test_recorded_copy_fma_chase(void **state)
{
    (void)state;
    kh_bn_state s;
    /* 4.3 GB copy (range profiler): DRAM 69 %, SM 5 %: memory side, 10+ points
     * higher, not at the roof. */
    kh_bn_metrics copy = mset(1.287e6, 5.0, 69.4, 69.4, 2.148e9, 2.152e9, 97.3);
    kh_bn_launch cl = h200_launch(132 * 16, 256, 16, 0);
    kh_bn_context ctx = {.min_bytes = 4.3e9, .copy_bytes_per_s = 4.25e12};
    kh_bn_classify(&copy, &cl, &ctx, NULL, &s);
    assert_string_equal(s.kind, "memory-bound");
    assert_false(s.at_roof);
    assert_string_equal(s.roof, "dram");
    assert_true(fabs(s.reread - 1.0) < 1e-9);
    /* bound = 4.3e9 / 4.25e12 s = 1.0118 ms of 1.287 ms */
    assert_true(fabs(s.sol_fraction - (4.3e9 / 4.25e12 * 1e9) / 1.287e6) < 1e-9);
    assert_true(fabs(s.dram_bytes_per_s - 4.3e9 / 1.287e-3) < 1e3);
    assert_string_equal(s.limiter, "none");
    assert_string_equal(s.signature, "memory-bound dram 69% sol 79% reread 1.0x");

    /* FMA loop, 132 x 16 blocks: SM 89.6 %. */
    kh_bn_metrics fma = mset(0.791e6, 89.6, 0.008, 0.0002, 4352, 2560, 78.8);
    kh_bn_classify(&fma, &cl, NULL, NULL, &s);
    assert_string_equal(s.kind, "compute-bound");
    assert_true(s.at_roof);
    assert_string_equal(s.roof, "sm");
    assert_string_equal(s.signature, "compute-bound sm 90%");

    /* One-warp pointer chase: both sides idle; one block is far under a wave. */
    kh_bn_metrics chase = mset(11.24e6, 0.0007, 0.096, 0.096, 3.2e7, 2.0e7, 1.56);
    kh_bn_launch one = h200_launch(1, 32, 16, 0);
    kh_bn_classify(&chase, &one, NULL, NULL, &s);
    assert_string_equal(s.kind, "small-grid");
    assert_true(s.waves < 0.001);
    assert_non_null(strstr(s.signature, "small-grid sm 0% mem 0% waves"));
    /* The same numbers with a full grid: latency, not grid size. */
    kh_bn_launch many = h200_launch(132 * 64, 32, 16, 0);
    kh_bn_classify(&chase, &many, NULL, NULL, &s);
    assert_string_equal(s.kind, "latency-bound");
    /* Without launch information the grid cannot be judged: latency-bound. */
    kh_bn_classify(&chase, NULL, NULL, NULL, &s);
    assert_string_equal(s.kind, "latency-bound");
}

static void test_ncu_copy_at_the_dram_roof(void **state)
{
    (void)state;
    /* ncu, 1 GiB -> 1 GiB copy: Memory 82.6 %, DRAM 82.6 %, SM 6.0 %. */
    kh_bn_metrics m = mset(534850, 6.0, 82.6, 82.6, 1.0737e9, 1.0737e9, 97);
    kh_bn_state s;
    kh_bn_classify(&m, NULL, NULL, NULL, &s);
    assert_string_equal(s.kind, "memory-bound");
    assert_true(s.at_roof);
    assert_string_equal(s.signature, "memory-bound dram 83%");
}

static void test_rule_edges(void **state)
{
    (void)state;
    kh_bn_state s;
    struct {
        double sm, mem, dram;
        const char *kind;
        int roof;
        const char *unit;
    } cases[] = {
        {80.0, 10, 10, "compute-bound", 1, "sm"},     /* exactly 80: at the roof */
        {79.9, 70.0, 70, "balanced", 0, NULL},        /* under 10 points apart */
        {79.9, 69.9, 69.9, "compute-bound", 0, "sm"}, /* exactly 10 apart */
        {59.9, 59.9, 59.9, "latency-bound", 0, NULL}, /* both under 60 */
        {60.0, 20.0, 20, "compute-bound", 0, "sm"},   /* 60 is not under 60 */
        {85, 90, 88, "memory-bound", 1, "dram"},      /* both at a roof: the higher */
        {90, 85, 85, "compute-bound", 1, "sm"},
        {10, 85, 30, "memory-bound", 1, "cache"},     /* L1/L2 hot, DRAM not */
        {10, 70, 66, "memory-bound", 0, "dram"},      /* DRAM within 5 of memory */
    };
    for (size_t i = 0; i < KH_ARRAY_LEN(cases); i++) {
        kh_bn_metrics m = mset(1e5, cases[i].sm, cases[i].mem, cases[i].dram, 1, 1, 50);
        kh_bn_classify(&m, NULL, NULL, NULL, &s);
        if (strcmp(s.kind, cases[i].kind) || s.at_roof != cases[i].roof)
            fail_msg("case %zu (sm %.1f mem %.1f): got %s roof=%d", i, cases[i].sm,
                     cases[i].mem, s.kind, s.at_roof);
        if (cases[i].unit)
            assert_string_equal(s.roof, cases[i].unit);
        else
            assert_null(s.roof);
    }
    /* A tensor-pipe kernel names the tensor roof. */
    kh_bn_metrics t = mset(1e5, 88, 40, 30, 1, 1, 50);
    t.tensor_pct = 91;
    kh_bn_classify(&t, NULL, NULL, NULL, &s);
    assert_string_equal(s.roof, "tensor");
    assert_string_equal(s.signature, "compute-bound tensor 91%");
}

/* The rule restated independently, checked on random metric sets. */
static void test_rule_on_random_sets(void **state)
{
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
    print_message("# seed %llu\n", (unsigned long long)x);
    for (int i = 0; i < 20000; i++) {
        double v[2];
        for (int j = 0; j < 2; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            v[j] = (double)(x >> 11) / 9007199254740992.0 * 100.0;
        }
        kh_bn_metrics m = mset(1e4, v[0], v[1], v[1], 10, 10, 50);
        kh_bn_state s;
        kh_bn_classify(&m, NULL, NULL, NULL, &s);
        const char *want;
        double hi = fmax(v[0], v[1]);
        if (hi >= 80)
            want = v[1] >= v[0] ? "memory-bound" : "compute-bound";
        else if (v[0] < 60 && v[1] < 60)
            want = "latency-bound";
        else if (fabs(v[0] - v[1]) >= 10)
            want = v[1] > v[0] ? "memory-bound" : "compute-bound";
        else
            want = "balanced";
        if (strcmp(s.kind, want))
            fail_msg("sm %.3f mem %.3f: %s, expected %s", v[0], v[1], s.kind, want);
    }
}

static void test_occupancy_limiter(void **state)
{
    (void)state;
    kh_bn_state s;
    kh_bn_metrics m = mset(1e5, 50, 85, 84, 1e6, 1e6, 25);
    /* 128 registers x 256 threads = 32 Ki per block: 2 blocks, 25 %. */
    kh_bn_launch l = h200_launch(1000, 256, 128, 0);
    kh_bn_classify(&m, &l, NULL, NULL, &s);
    assert_string_equal(s.limiter, "registers");
    assert_int_equal(s.blocks_per_sm, 2);
    assert_true(fabs(s.occupancy_pct - 25.0) < 1e-9);
    assert_string_equal(s.signature, "memory-bound dram 84% occupancy:registers");
    /* 100 KiB of shared memory per block: 2 blocks of 256 threads. */
    l = h200_launch(1000, 256, 32, 100 * 1024);
    kh_bn_classify(&m, &l, NULL, NULL, &s);
    assert_string_equal(s.limiter, "shared-memory");
    assert_int_equal(s.blocks_per_sm, 2);
    /* 768 threads: 2 blocks fit (1536 of 2048 threads). */
    l = h200_launch(1000, 768, 32, 0);
    kh_bn_classify(&m, &l, NULL, NULL, &s);
    assert_string_equal(s.limiter, "block-size");
    assert_true(fabs(s.occupancy_pct - 75.0) < 1e-9);
    /* 32-thread blocks: the 32-blocks-per-SM limit caps at 50 %. */
    l = h200_launch(1000, 32, 32, 0);
    kh_bn_classify(&m, &l, NULL, NULL, &s);
    assert_string_equal(s.limiter, "block-size");
    assert_true(fabs(s.occupancy_pct - 50.0) < 1e-9);
    /* 1024 threads at 32 registers: full occupancy, no limiter. */
    l = h200_launch(1000, 1024, 32, 0);
    kh_bn_classify(&m, &l, NULL, NULL, &s);
    assert_string_equal(s.limiter, "none");
    /* The occupancy API's answer wins over the arithmetic for the count. */
    l = h200_launch(1000, 256, 128, 0);
    l.api_blocks_per_sm = 1;
    kh_bn_classify(&m, &l, NULL, NULL, &s);
    assert_int_equal(s.blocks_per_sm, 1);
    assert_true(fabs(s.occupancy_pct - 12.5) < 1e-9);
    /* Spills are named. */
    l.spill_instructions = 12;
    kh_bn_classify(&m, &l, NULL, NULL, &s);
    assert_non_null(strstr(s.signature, " spills:12"));
}

static void test_reread_sol_and_no_counters(void **state)
{
    (void)state;
    kh_bn_state s;
    /* A kernel that reads its input twice: reread 2.0, at half of SOL. */
    kh_bn_metrics m = mset(2e6, 5, 81, 81, 6e9, 2e9, 90);
    kh_bn_context c = {.min_bytes = 4e9, .copy_bytes_per_s = 4e12};
    kh_bn_classify(&m, NULL, &c, NULL, &s);
    assert_true(fabs(s.reread - 2.0) < 1e-12);
    assert_true(fabs(s.sol_fraction - 0.5) < 1e-12);
    assert_string_equal(s.signature, "memory-bound dram 81% sol 50% reread 2.0x");
    /* The timing protocol's latency, when given, is the measured time. */
    c.measured_ns = 4e6;
    kh_bn_classify(&m, NULL, &c, NULL, &s);
    assert_true(fabs(s.sol_fraction - 0.25) < 1e-12);
    /* A FLOP bound larger than the byte bound decides. */
    kh_bn_context cf = {.min_bytes = 1e6, .copy_bytes_per_s = 4e12, .flops = 8e11,
                        .matrix_flops_per_s = 8e14};
    kh_bn_classify(&m, NULL, &cf, NULL, &s);
    assert_true(fabs(s.sol_ns - 1e6) < 1e-3);

    /* No counters: says so and why; the bound still comes from timing. */
    kh_bn_context ct = {.min_bytes = 4e9, .copy_bytes_per_s = 4e12, .measured_ns = 2e6};
    kh_bn_classify(NULL, NULL, &ct, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", &s);
    assert_false(s.counters);
    assert_string_equal(s.kind, "no-counters");
    assert_string_equal(s.why, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES");
    assert_string_equal(s.signature, "no-counters sol 50%");
    json_t *j = kh_bn_state_json(&s);
    assert_string_equal(json_string_value(json_object_get(j, "why")),
                        "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES");
    assert_true(json_is_null(json_object_get(j, "reread")));
    json_decref(j);
    /* Metrics without the two throughputs are "no counters" too. */
    kh_bn_metrics partial;
    kh_bn_metrics_init(&partial);
    partial.time_ns = 1000;
    kh_bn_classify(&partial, NULL, NULL, NULL, &s);
    assert_false(s.counters);
    assert_non_null(strstr(s.why, "missing"));
}

static void test_combine_kernels(void **state)
{
    (void)state;
    kh_bn_state k[2], out;
    kh_bn_metrics a = mset(3e5, 6, 82, 82, 1e9, 1e9, 90);  /* long, memory */
    kh_bn_metrics b = mset(1e5, 85, 10, 5, 1e6, 1e6, 50);  /* short, compute */
    kh_bn_launch l = h200_launch(1000, 256, 32, 0);
    l.spill_instructions = 3;
    kh_bn_context c = {.min_bytes = 1e9, .copy_bytes_per_s = 4e12};
    kh_bn_classify(&a, NULL, &c, NULL, &k[0]);
    kh_bn_classify(&b, &l, &c, NULL, &k[1]);
    kh_bn_combine(k, 2, &c, &out);
    assert_string_equal(out.kind, "memory-bound");
    assert_true(fabs(out.time_ns - 4e5) < 1e-6);
    assert_true(fabs(out.reread - (2e9 + 2e6) / 1e9) < 1e-12);
    assert_true(fabs(out.sol_fraction - 2.5e5 / 4e5) < 1e-12);
    assert_int_equal(out.spills, 3);
    assert_non_null(strstr(out.signature, "kernels:2"));
}

static void test_metrics_from_json(void **state)
{
    (void)state;
    json_t *o = json_pack("{s:s, s:f, s:f, s:s, s:s, s:f}", KH_BN_TIME, "534,848", KH_BN_SM,
                          6.02, KH_BN_MEM, 82.64, KH_BN_DRAM, "82.61",
                          "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                          "n/a", "sm__inst_executed_pipe_tensor.sum", 7.0);
    kh_bn_metrics m;
    kh_bn_metrics_from_json(o, &m);
    assert_true(m.time_ns == 534848.0);
    assert_true(m.dram_pct == 82.61);
    assert_true(isnan(m.tensor_pct)); /* "n/a" is not a number */
    assert_true(isnan(m.dram_read_bytes));
    json_decref(o);
    double v;
    assert_true(kh_bn_parse_number(" 1,980,000 ", &v) && v == 1980000.0);
    assert_false(kh_bn_parse_number("", &v));
    assert_false(kh_bn_parse_number("12abc", &v));
    assert_false(kh_bn_parse_number("inf", &v));
}

static char *slurp(const char *rel, size_t *n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/ncu/%s", kh_test_source_dir(), rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char *buf = malloc(1 << 20);
    *n = fread(buf, 1, (1 << 20) - 1, f);
    buf[*n] = 0;
    fclose(f);
    return buf;
}

static void test_ncu_csv(void **state)
{
    (void)state;
    size_t n;
    char *text = slurp("raw_copy_fma.csv", &n);
    json_t *ks;
    kh_err err;
    if (kh_ncu_parse_csv(text, n, &ks, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(json_array_size(ks), 2);
    json_t *copy = json_array_get(ks, 0), *fma = json_array_get(ks, 1);
    assert_string_equal(json_string_value(json_object_get(copy, "kernel")), "copy_f4");
    /* a quoted name with a comma inside stays one field */
    assert_string_equal(json_string_value(json_object_get(fma, "kernel")), "fma_loop<float, 4>");
    assert_string_equal(json_string_value(json_object_get(copy, "grid")), "(2112, 1, 1)");
    json_t *cm = json_object_get(copy, "metrics");
    assert_true(json_real_value(json_object_get(cm, KH_BN_TIME)) == 534848.0);
    assert_true(json_real_value(json_object_get(cm, KH_BN_DRAM_READ)) == 1073747712.0);
    assert_string_equal(json_string_value(json_object_get(cm, "device__attribute_display_name")),
                        "NVIDIA H200");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(copy, "units"), KH_BN_TIME)),
        "nsecond");
    /* and the parsed sets classify as the kernels they are */
    kh_bn_metrics m;
    kh_bn_state s;
    kh_bn_metrics_from_json(cm, &m);
    kh_bn_classify(&m, NULL, NULL, NULL, &s);
    assert_string_equal(s.signature, "memory-bound dram 83%");
    kh_bn_metrics_from_json(json_object_get(fma, "metrics"), &m);
    kh_bn_classify(&m, NULL, NULL, NULL, &s);
    assert_string_equal(s.kind, "compute-bound");
    json_decref(ks);

    /* the long form (details page: a row per metric) reads the same */
    free(text);
    text = slurp("details_copy.csv", &n);
    if (kh_ncu_parse_csv(text, n, &ks, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(json_array_size(ks), 2);
    kh_bn_metrics_from_json(json_object_get(json_array_get(ks, 0), "metrics"), &m);
    kh_bn_classify(&m, NULL, NULL, NULL, &s);
    assert_string_equal(s.signature, "memory-bound dram 83%");
    assert_true(m.time_ns == 534848.0);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ks, 1), "kernel")),
                        "chase");
    /* ncu's waves decide "small grid" without launch context */
    kh_bn_metrics_from_json(json_object_get(json_array_get(ks, 1), "metrics"), &m);
    kh_bn_classify(&m, NULL, NULL, NULL, &s);
    assert_string_equal(s.kind, "small-grid");
    json_decref(ks);

    /* malformed input: named, never a crash */
    const char *bad[] = {
        "==PROF== nothing profiled\n",
        "\"ID\",\"Kernel Name\",\"a__b\"\n\"0\",\"k\"\n",
        "\"ID\",\"Kernel Name\",\"a__b\"\n\"0\",\"k,\"1\n",
        "\"ID\",\"Kernel Name\",\"a__b\"\n\"0\",\"k\",\"1\n",
        "\"ID\",\"Process ID\"\n\"0\",\"1\"\n",
    };
    const char *want[] = {"no header row", "has 2 fields", "fields", "unterminated",
                          "Kernel Name"};
    for (size_t i = 0; i < KH_ARRAY_LEN(bad); i++) {
        kh_status st = kh_ncu_parse_csv(bad[i], strlen(bad[i]), &ks, &err);
        if (st != KH_EPARSE || !strstr(err.msg, want[i]))
            fail_msg("bad CSV %zu: %s %s", i, kh_status_name(st), st ? err.msg : "");
        assert_null(ks);
    }
    /* truncation at every byte never crashes and never invents kernels */
    for (size_t cut = 0; cut < n; cut += 7) {
        if (kh_ncu_parse_csv(text, cut, &ks, &err) == KH_OK) {
            assert_true(json_array_size(ks) <= 2);
            json_decref(ks);
        }
    }
    free(text);
}

/* ncu prints readable units ("usecond", "Mbyte"); values come out in ns and
 * bytes whatever unit it chose (a copy misread as 0.5 ns once gave sol 99815%). */
static void test_ncu_units_normalized(void **state)
{
    (void)state;
    const char *csv =
        "\"ID\",\"Kernel Name\",\"dram__bytes_read.sum\",\"gpu__time_duration.sum\","
        "\"dram__throughput.avg.pct_of_peak_sustained_elapsed\"\n"
        "\"\",\"\",\"Mbyte\",\"usecond\",\"%\"\n"
        "\"0\",\"copy\",\"1,073.75\",\"534.85\",\"82.6\"\n";
    json_t *ks = NULL;
    kh_err err;
    assert_int_equal(kh_ncu_parse_csv(csv, strlen(csv), &ks, &err), KH_OK);
    json_t *m = json_object_get(json_array_get(ks, 0), "metrics");
    json_t *u = json_object_get(json_array_get(ks, 0), "units");
    assert_true(fabs(json_real_value(json_object_get(m, "dram__bytes_read.sum")) - 1.07375e9) < 1);
    assert_true(fabs(json_real_value(json_object_get(m, "gpu__time_duration.sum")) - 534850) < 1e-6);
    assert_true(fabs(json_real_value(json_object_get(
                    m, "dram__throughput.avg.pct_of_peak_sustained_elapsed")) - 82.6) < 1e-9);
    assert_string_equal(json_string_value(json_object_get(u, "gpu__time_duration.sum")),
                        "nsecond");
    assert_string_equal(json_string_value(json_object_get(u, "dram__bytes_read.sum")), "byte");
    json_decref(ks);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ncu_units_normalized),
        cmocka_unit_test(test_recorded_copy_fma_chase),
        cmocka_unit_test(test_ncu_copy_at_the_dram_roof),
        cmocka_unit_test(test_rule_edges),
        cmocka_unit_test(test_rule_on_random_sets),
        cmocka_unit_test(test_occupancy_limiter),
        cmocka_unit_test(test_reread_sol_and_no_counters),
        cmocka_unit_test(test_combine_kernels),
        cmocka_unit_test(test_metrics_from_json),
        cmocka_unit_test(test_ncu_csv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
