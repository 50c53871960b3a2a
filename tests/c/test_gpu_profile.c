/* test_gpu_profile.c: issue 8's checks on a real GPU (skipped without one):
 * a streaming copy is memory-bound with DRAM >= 70% of peak; an FMA-heavy
 * kernel is compute-bound; a one-block pointer chase is latency-bound or a
 * small grid; ncu's DRAM throughput and the range profiler's agree within 5
 * points on the copy; an unknown metric is dropped and listed while the rest
 * is measured; with counters off the state says "no counters" and timings
 * still come; a profile is recorded in a store, ncu's files as blobs, and
 * the GPU's peaks are measured once and reused by UUID; `khlua profile
 * --json` works end to end.  Prints a table of
 * the measured figures. */
#include "kh_test.h"

#include "profile/profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *kernels =
    "extern \"C\" __global__ void copy_v4(const float4* __restrict__ a,\n"
    "                                     float4* __restrict__ b, unsigned long long n4) {\n"
    "  unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;\n"
    "  float4 v[4];\n"
    "  #pragma unroll\n"
    "  for (int k = 0; k < 4; k++) { unsigned long long i = base + k * blockDim.x;\n"
    "    if (i < n4) v[k] = a[i]; }\n"
    "  #pragma unroll\n"
    "  for (int k = 0; k < 4; k++) { unsigned long long i = base + k * blockDim.x;\n"
    "    if (i < n4) b[i] = v[k]; } }\n"
    "extern \"C\" __global__ void fma_loop(float *out, int iters, float s) {\n"
    "  float a0 = threadIdx.x * 1e-3f, a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f,\n"
    "        a4 = a0 + 4.f, a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f;\n"
    "  for (int i = 0; i < iters; i++) {\n"
    "    a0 = fmaf(a0, s, 0.5f); a1 = fmaf(a1, s, 0.5f); a2 = fmaf(a2, s, 0.5f);\n"
    "    a3 = fmaf(a3, s, 0.5f); a4 = fmaf(a4, s, 0.5f); a5 = fmaf(a5, s, 0.5f);\n"
    "    a6 = fmaf(a6, s, 0.5f); a7 = fmaf(a7, s, 0.5f); }\n"
    "  out[blockIdx.x * blockDim.x + threadIdx.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7; }\n"
    "extern \"C\" __global__ void chase(const unsigned *next, unsigned *out, int steps,\n"
    "                                   unsigned mask) {\n"
    "  unsigned p = threadIdx.x;\n"
    "  for (int i = 0; i < steps; i++) p = next[p] & mask;\n"
    "  out[threadIdx.x] = p; }\n";

static kh_engine *engine;
static unsigned char *cubin;
static size_t cubin_len;
static char table[8192];

__attribute__((format(printf, 1, 2))) static void row(const char *fmt, ...)
{
    size_t l = strlen(table);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(table + l, sizeof table - l, fmt, ap);
    va_end(ap);
    fputs(table + l, stdout);
    fflush(stdout);
}

static const size_t COPY_BYTES = 1u << 30;

static json_t *copy_spec(void)
{
    size_t n4 = COPY_BYTES / 16;
    return json_pack(
        "{s:[{s:s, s:I}, {s:s, s:I, s:s}], s:[{s:s, s:[I], s:[i], s:[{s:s}, {s:s}, {s:I}]}]}",
        "buffers", "name", "a", "bytes", (json_int_t)COPY_BYTES, "name", "b", "bytes",
        (json_int_t)COPY_BYTES, "init", "none", "launches", "kernel", "copy_v4", "grid",
        (json_int_t)((n4 + 1023) / 1024), "block", 256, "args", "buf", "a", "buf", "b", "u64",
        (json_int_t)n4);
}

static json_t *fma_spec(void)
{
    return json_pack("{s:[{s:s, s:I, s:s}], s:[{s:s, s:[i], s:[i], s:[{s:s}, {s:i}, {s:f}]}]}",
                     "buffers", "name", "out", "bytes", (json_int_t)132 * 16 * 256 * 4, "init",
                     "none", "launches", "kernel", "fma_loop", "grid", 132 * 16, "block", 256,
                     "args", "buf", "out", "i32", 4096, "f32", 0.999);
}

static json_t *chase_spec(void)
{
    /* random words masked to 16 Mi entries: a random walk over 64 MiB */
    return json_pack("{s:[{s:s, s:I, s:s, s:i}, {s:s, s:I, s:s}], "
                     "s:[{s:s, s:[i], s:[i], s:[{s:s}, {s:s}, {s:i}, {s:I}]}]}",
                     "buffers", "name", "next", "bytes", (json_int_t)(64u << 20), "init",
                     "random", "seed", 7, "name", "out", "bytes", (json_int_t)4096, "init",
                     "zero", "launches", "kernel", "chase", "grid", 1, "block", 32, "args",
                     "buf", "next", "buf", "out", "i32", 2000, "u32", (json_int_t)0xFFFFFF);
}

static json_t *profile(json_t *spec, const json_t *metrics, int ncu, double min_bytes)
{
    kh_profile_opts o = {.cubin = cubin,
                         .cubin_len = cubin_len,
                         .spec = spec,
                         .metrics = metrics,
                         .exe = kh_test_khlua(),
                         .ncu = ncu,
                         .ctx = {.min_bytes = min_bytes}};
    char *dir = ncu ? kh_test_tmpdir() : NULL;
    o.out_dir = dir;
    json_t *rep = NULL;
    kh_err err;
    kh_status st = kh_profile_run(engine, &o, &rep, &err);
    json_decref(spec);
    if (dir) {
        kh_test_rmtree(dir);
        free(dir);
    }
    if (st)
        fail_msg("profile: %s", err.msg);
    return rep;
}

static double num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const json_t *kstate(const json_t *rep, size_t i)
{
    return json_object_get(json_array_get(json_object_get(rep, "kernels"), i), "state");
}

static void row_state(const char *what, const json_t *rep)
{
    const json_t *s = kstate(rep, 0);
    row("%-14s %9.1f us  sm %5.1f%%  mem %5.1f%%  dram %5.1f%%  occ %5.1f%%  %s\n", what,
        num(s, "time_ns") / 1e3, num(s, "sm_pct"), num(s, "mem_pct"), num(s, "dram_pct"),
        num(s, "occupancy_pct"), json_string_value(json_object_get(s, "signature")));
}

static int setup(void **state)
{
    (void)state;
    kh_err err;
    engine = kh_engine_new(&(kh_engine_config){0}, &err);
    if (!engine)
        return -1;
    cubin = kh_test_nvrtc_cubin(kernels, "sm_90a", &cubin_len);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(cubin);
    kh_engine_free(engine);
    printf("\n== summary\n%s", table);
    return 0;
}

static void test_copy_is_memory_bound_and_ncu_agrees(void **state)
{
    (void)state;
    char extra[600];
    snprintf(extra, sizeof extra, "%s/bin", kh_engine_cuda_home(engine));
    char *ncu = kh_which("ncu", extra);
    json_t *rep = profile(copy_spec(), NULL, ncu != NULL, 2.0 * COPY_BYTES);
    if (!json_is_true(json_object_get(rep, "counters")))
        fail_msg("no counters: %s", json_string_value(json_object_get(rep, "why")));
    const json_t *s = kstate(rep, 0);
    row("chip %s, %lld passes, setup %.2f s, collect %.2f s; peaks: copy %.0f GB/s\n",
        json_string_value(json_object_get(rep, "chip")),
        (long long)json_integer_value(json_object_get(rep, "passes")), num(rep, "setup_s"),
        num(rep, "collect_s"),
        num(json_object_get(rep, "peaks"), "copy_bytes_per_s") / 1e9);
    size_t i;
    const json_t *d;
    json_array_foreach(json_object_get(rep, "dropped"), i, d)
        row("DROPPED metric %s: %s  <- correct the metric list\n",
            json_string_value(json_object_get(d, "metric")),
            json_string_value(json_object_get(d, "why")));
    row_state("copy 1 GiB", rep);
    assert_string_equal(json_string_value(json_object_get(s, "kind")), "memory-bound");
    assert_true(num(s, "dram_pct") >= 70.0);
    /* both directions were counted: about 2 GiB moved */
    double reread = num(s, "reread");
    row("copy: reread %.3fx, %.0f GB/s by counters, sol %.0f%%\n", reread,
        num(s, "dram_bytes_per_s") / 1e9, 100 * num(s, "sol_fraction"));
    assert_true(reread > 0.95 && reread < 1.1);
    if (!ncu) {
        row("ncu: not found on PATH or in %s; the tier comparison did not run\n", extra);
        json_decref(rep);
        skip();
    }
    free(ncu);
    const json_t *n = json_object_get(rep, "ncu");
    if (json_object_get(n, "error"))
        fail_msg("ncu: %s", json_string_value(json_object_get(n, "error")));
    const json_t *nk = json_array_get(json_object_get(n, "kernels"), 0);
    double delta = json_number_value(json_array_get(json_object_get(n, "dram_pct_delta"), 0));
    const json_t *ns = json_object_get(nk, "state");
    row("ncu copy: dram %.1f%% (%+.1f points vs in-process), %.1f us (in-process %.1f us), %s\n",
        num(ns, "dram_pct"), delta, num(ns, "time_ns") / 1e3, num(s, "time_ns") / 1e3,
        json_string_value(json_object_get(ns, "signature")));
    assert_true(fabs(delta) <= 5.0);
    /* the same kernel: ncu's time and the speed-of-light fraction agree
     * with the in-process tier's (units normalized right) */
    assert_true(num(ns, "time_ns") > 0.8 * num(s, "time_ns") &&
                num(ns, "time_ns") < 1.25 * num(s, "time_ns"));
    assert_true(fabs(num(ns, "sol_fraction") - num(s, "sol_fraction")) < 0.2);
    json_decref(rep);
}

static void test_fma_is_compute_bound(void **state)
{
    (void)state;
    json_t *rep = profile(fma_spec(), NULL, 0, 0);
    row_state("fma loop", rep);
    const json_t *s = kstate(rep, 0);
    assert_string_equal(json_string_value(json_object_get(s, "kind")), "compute-bound");
    json_decref(rep);
}

static void test_one_block_is_latency_or_small_grid(void **state)
{
    (void)state;
    json_t *rep = profile(chase_spec(), NULL, 0, 0);
    row_state("chase 1 warp", rep);
    const char *kind = json_string_value(json_object_get(kstate(rep, 0), "kind"));
    assert_true(!strcmp(kind, "small-grid") || !strcmp(kind, "latency-bound"));
    json_decref(rep);
}

static void test_kernel_replay_matches_user_replay(void **state)
{
    (void)state;
    kh_profile_opts o = {.cubin = cubin, .cubin_len = cubin_len, .exe = kh_test_khlua(),
                         .kernel_replay = 1};
    json_t *spec = copy_spec();
    o.spec = spec;
    json_t *rep = NULL;
    kh_err err;
    if (kh_profile_run(engine, &o, &rep, &err))
        fail_msg("kernel replay: %s", err.msg);
    json_decref(spec);
    row_state("copy (kernel)", rep);
    assert_string_equal(json_string_value(json_object_get(kstate(rep, 0), "kind")),
                        "memory-bound");
    json_decref(rep);
}

static void test_unknown_metric_dropped(void **state)
{
    (void)state;
    json_t *m = kh_profile_default_metrics();
    json_array_append_new(m, json_string("khlua__no_such_metric.sum"));
    json_t *rep = profile(fma_spec(), m, 0, 0);
    json_decref(m);
    const json_t *dropped = json_object_get(rep, "dropped");
    int found = 0;
    size_t i;
    const json_t *d;
    json_array_foreach(dropped, i, d)
        found |= !strcmp(json_string_value(json_object_get(d, "metric")),
                         "khlua__no_such_metric.sum");
    assert_true(found);
    assert_string_equal(json_string_value(json_object_get(kstate(rep, 0), "kind")),
                        "compute-bound");
    json_decref(rep);
}

static void test_no_counters_still_times(void **state)
{
    (void)state;
    setenv("KHLUA_NO_COUNTERS", "1", 1);
    json_t *rep = profile(fma_spec(), NULL, 0, 0);
    unsetenv("KHLUA_NO_COUNTERS");
    assert_false(json_is_true(json_object_get(rep, "counters")));
    const json_t *s = json_object_get(rep, "state");
    assert_string_equal(json_string_value(json_object_get(s, "kind")), "no-counters");
    assert_non_null(strstr(json_string_value(json_object_get(s, "why")), "KHLUA_NO_COUNTERS"));
    double lat = num(json_object_get(rep, "timing"), "latency_ns");
    row("no counters: %s; timing %.1f us (events)\n",
        json_string_value(json_object_get(rep, "signature")), lat / 1e3);
    assert_true(lat > 0);
    json_decref(rep);
}

/* Recorded: the first run measures the GPU's peaks and keeps them under its
 * UUID, the second reuses them; with ncu its report and raw CSV are blobs
 * holding the files' bytes. */
static void test_store_records_and_reuses_peaks(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir(), path[1024];
    snprintf(path, sizeof path, "%s/store", dir);
    kh_store *s = NULL;
    kh_err err;
    if (kh_store_open(path, &(kh_store_opts){.nosync = 1}, &s, &err))
        fail_msg("%s", err.msg);
    char extra[600];
    snprintf(extra, sizeof extra, "%s/bin", kh_engine_cuda_home(engine));
    char *ncu = kh_which("ncu", extra);
    json_t *rep[2];
    for (int i = 0; i < 2; i++) {
        json_t *spec = fma_spec();
        char out[1100];
        snprintf(out, sizeof out, "%s/ncu%d", dir, i);
        kh_profile_opts o = {.cubin = cubin, .cubin_len = cubin_len, .spec = spec,
                             .exe = kh_test_khlua(), .store = s, .ncu = i == 1 && ncu,
                             .out_dir = out};
        if (kh_profile_run(engine, &o, &rep[i], &err))
            fail_msg("profile: %s", err.msg);
        json_decref(spec);
        if (json_object_get(rep[i], "store_error"))
            fail_msg("store: %s", json_string_value(json_object_get(rep[i], "store_error")));
    }
    const json_t *p0 = json_object_get(rep[0], "peaks"), *p1 = json_object_get(rep[1], "peaks");
    assert_string_equal(json_string_value(json_object_get(p0, "source")), "measured");
    assert_string_equal(json_string_value(json_object_get(p1, "source")), "store");
    assert_true(num(p0, "copy_bytes_per_s") == num(p1, "copy_bytes_per_s"));
    row("peaks: measured %.0f GB/s, kept as %s, reused by the second run\n",
        num(p0, "copy_bytes_per_s") / 1e9, json_string_value(json_object_get(p0, "record")));
    json_t *rec;
    if (kh_store_get(s, json_string_value(json_object_get(rep[1], "store_id")), &rec, &err))
        fail_msg("%s", err.msg);
    assert_string_equal(json_string_value(json_object_get(rec, "gpu_uuid")),
                        json_string_value(json_object_get(json_object_get(rep[1], "gpu"),
                                                          "uuid")));
    assert_string_equal(json_string_value(json_object_get(rec, "device")),
                        json_string_value(json_object_get(p0, "record")));
    if (ncu) {
        const json_t *n = json_object_get(rec, "ncu");
        if (json_object_get(n, "error"))
            fail_msg("ncu: %s", json_string_value(json_object_get(n, "error")));
        assert_string_equal(json_string_value(json_object_get(rec, "tool")), "cupti+ncu");
        const char *keys[][2] = {{"report_blob", "report"}, {"csv_blob", "csv"}};
        for (int k = 0; k < 2; k++) {
            kh_hash h;
            assert_int_equal(kh_hash_parse(json_string_value(json_object_get(n, keys[k][0])),
                                           &h, &err), KH_OK);
            void *b = NULL;
            size_t bl = 0;
            assert_int_equal(kh_store_get_blob(s, &h, &b, &bl, &err), KH_OK);
            FILE *f = fopen(json_string_value(json_object_get(n, keys[k][1])), "rb");
            assert_non_null(f);
            void *fb = malloc(bl + 1);
            assert_int_equal(fread(fb, 1, bl + 1, f), bl);
            fclose(f);
            assert_memory_equal(fb, b, bl);
            free(fb);
            free(b);
        }
        row("stored: %s with ncu report (%lld bytes) and raw CSV\n",
            json_string_value(json_object_get(rec, "id")),
            (long long)json_integer_value(json_object_get(n, "report_bytes")));
    }
    free(ncu);
    json_decref(rec);
    json_decref(rep[0]);
    json_decref(rep[1]);
    kh_store_close(s);
    kh_test_rmtree(dir);
    free(dir);
}

static void test_cli_json(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir();
    char cpath[1100], spath[1100];
    snprintf(cpath, sizeof cpath, "%s/k.cubin", dir);
    snprintf(spath, sizeof spath, "%s/spec.json", dir);
    FILE *f = fopen(cpath, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(cubin, 1, cubin_len, f), cubin_len);
    fclose(f);
    json_t *spec = fma_spec();
    assert_int_equal(json_dump_file(spec, spath, 0), 0);
    json_decref(spec);
    kh_child_result r;
    char stpath[1100];
    snprintf(stpath, sizeof stpath, "%s/store", dir);
    kh_test_run_khlua(&r, 300, "profile", "--cubin", cpath, "--spec", spath, "--json",
                      "--store", stpath, NULL);
    if (!r.exited || r.exit_code != 0)
        fail_msg("khlua profile: %s", r.out);
    json_error_t je;
    const char *brace = strchr(r.out, '{'); /* anything a library printed first */
    json_t *rep = brace ? json_loads(brace, 0, &je) : NULL;
    assert_non_null(rep);
    assert_non_null(strstr(json_string_value(json_object_get(rep, "signature")),
                           "compute-bound"));
    assert_non_null(json_string_value(json_object_get(rep, "store_id")));
    json_decref(rep);
    kh_child_result_free(&r);
    kh_test_rmtree(dir);
    free(dir);
}

/* A task's candidate end to end: compiled, resolved for a workload,
 * profiled, recorded with its context. */
static void test_cli_task_solution(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir(), stpath[1100], task[1100];
    snprintf(stpath, sizeof stpath, "%s/store", dir);
    snprintf(task, sizeof task, "%s/tests/fixtures/task/rmsnorm", kh_test_source_dir());
    kh_child_result r;
    kh_test_run_khlua(&r, 300, "profile", "--task", task, "--solution", "rmsnorm_h512_cuda_v1",
                      "--workload", "5b0d7a8e-0002-4a57-9a3c-1d2e3f405161", "--json", "--store",
                      stpath, NULL);
    if (!r.exited || r.exit_code != 0)
        fail_msg("khlua profile --task: %s", r.out);
    json_error_t je;
    const char *brace = strchr(r.out, '{');
    json_t *rep = brace ? json_loads(brace, 0, &je) : NULL;
    assert_non_null(rep);
    assert_int_equal(json_array_size(json_object_get(rep, "kernels")), 2);
    assert_true(num(json_object_get(rep, "sol_inputs"), "min_bytes") == 7 * 512 * 2 * 2 + 1028);
    assert_non_null(json_string_value(json_object_get(rep, "store_id")));
    row("task rmsnorm b=7: %s\n", json_string_value(json_object_get(rep, "signature")));
    json_decref(rep);
    kh_child_result_free(&r);
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    if (!kh_test_have_gpu()) {
        printf("skipped: no GPU on this machine\n");
        return KH_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_is_memory_bound_and_ncu_agrees),
        cmocka_unit_test(test_fma_is_compute_bound),
        cmocka_unit_test(test_one_block_is_latency_or_small_grid),
        cmocka_unit_test(test_kernel_replay_matches_user_replay),
        cmocka_unit_test(test_unknown_metric_dropped),
        cmocka_unit_test(test_no_counters_still_times),
        cmocka_unit_test(test_store_records_and_reuses_peaks),
        cmocka_unit_test(test_cli_json),
        cmocka_unit_test(test_cli_task_solution),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
