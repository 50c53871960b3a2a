/* test_profile.c: engine/profile/profile.h without a GPU: a profile worker's reply
 * (in the format role_profile.c sends, with the H200 copy and FMA metrics of
 * gpu-facts.md §3) becomes per-kernel states and a candidate state; a reply
 * without counters keeps its timing and says why; the metric list follows
 * $KHLUA_PROFILE_METRICS; kh_profile_run fails clearly where no GPU is.
 * The store: a report with ncu's recorded output becomes one complete
 * "profile" record whose blobs hold exactly the files' bytes; a GPU's peaks
 * are kept per UUID and reused only for that UUID, under the same driver,
 * while fresh; a task's candidate becomes the launch list the worker gets;
 * kh_profile_run records end to end through a recorded worker session. */
#include "kh_test.h"

#include "store/candidate.h"
#include "profile/ncu.h"
#include "profile/profile.h"
#include "store/store.h"
#include "task/task.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

/* Whether a library whose path contains name is mapped in this process. */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
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

/* ---- the store ------------------------------------------------------------------ */

static unsigned char *file_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void assert_blob_is(kh_store *s, const char *hex, const unsigned char *bytes, size_t n)
{
    assert_non_null(hex);
    kh_hash h;
    kh_err err;
    assert_int_equal(kh_hash_parse(hex, &h, &err), KH_OK);
    void *got = NULL;
    size_t len = 0;
    if (kh_store_get_blob(s, &h, &got, &len, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(len, n);
    assert_memory_equal(got, bytes, n);
    free(got);
}

static json_t *gpu_info(const char *uuid, const char *driver)
{
    return json_pack("{s:s, s:s, s:s, s:i}", "uuid", uuid, "name", "NVIDIA H200",
                     "driver_version", driver, "sms", 132);
}

static kh_store *open_store(char **dir)
{
    *dir = kh_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/store", *dir);
    kh_store *s = NULL;
    kh_err err;
    kh_store_opts so = {.nosync = 1};
    if (kh_store_open(path, &so, &s, &err))
        fail_msg("%s", err.msg);
    return s;
}

static void test_store_report_with_ncu(void **state)
{
    (void)state;
    char *dir;
    kh_store *s = open_store(&dir);
    kh_err err;
    /* the peaks the run used, kept for this GPU first */
    double bw = 4.0e12 + (double)(rand() % 1000) * 1e9;
    json_t *gpu = gpu_info("GPU-5e1f0a3c-0000-4b2d-9c1e-123456789abc", "580.82.07");
    json_t *peaks = json_pack("{s:f, s:f, s:i, s:s}", "copy_bytes_per_s", bw, "copy_median_ns",
                              2.0 * (1 << 30) / bw * 1e9, "copy_bytes", 1 << 30, "timer",
                              "events");
    char dev_id[KH_STORE_ID_MAX];
    if (kh_profile_peaks_save(s, gpu, peaks, dev_id, &err))
        fail_msg("%s", err.msg);
    const char *why;
    json_t *used;
    assert_int_equal(kh_profile_peaks_lookup(s, gpu, 3600, &used, &why, &err), KH_OK);
    assert_non_null(used);

    /* a recorded worker reply (the H200 copy and FMA of gpu-facts.md §3) */
    json_t *reply = json_pack(
        "{s:O, s:O, s:o, s:[o, o], s:{s:s, s:s, s:i, s:[s], s:[], s:[o, o]}, "
        "s:{s:s, s:f}}",
        "gpu", gpu, "peaks", used, "device", device(), "launches",
        launch(0, "copy_f4", 2112, 256, 16), launch(1, "fma_loop", 2112, 256, 40), "profiler",
        "chip", "GH100", "replay", "user", "passes", 9, "metrics", KH_BN_DRAM, "dropped",
        "ranges", range(0, "copy_f4", 1.287e6, 5.0, 69.4, 69.4, 2.148e9, 2.152e9),
        range(1, "fma_loop", 0.791e6, 89.6, 0.008, 0.0002, 4352, 2560), "timing", "timer",
        "events", "latency_ns", 2.2e6);
    kh_bn_context ctx = {.min_bytes = 4.3e9};
    json_t *rep;
    if (kh_profile_classify(reply, &ctx, &rep, &err))
        fail_msg("%s", err.msg);

    /* ncu's recorded output: the fixture CSV, and a report file of random bytes */
    char csv[1200], ncurep[1200];
    snprintf(csv, sizeof csv, "%s/tests/fixtures/ncu/raw_copy_fma.csv", kh_test_source_dir());
    snprintf(ncurep, sizeof ncurep, "%s/report.ncu-rep", dir);
    size_t rep_len = 100000 + (size_t)(rand() % 50000);
    unsigned char *rep_bytes = malloc(rep_len);
    assert_non_null(rep_bytes);
    for (size_t i = 0; i < rep_len; i++)
        rep_bytes[i] = (unsigned char)rand();
    FILE *f = fopen(ncurep, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(rep_bytes, 1, rep_len, f), rep_len);
    assert_int_equal(fclose(f), 0);
    size_t csv_len;
    unsigned char *csv_bytes = file_bytes(csv, &csv_len);
    json_t *ks;
    if (kh_ncu_parse_csv((const char *)csv_bytes, csv_len, &ks, &err))
        fail_msg("%s", err.msg);
    json_object_set_new(rep, "ncu", json_pack("{s:s, s:s, s:o, s:s, s:f}", "report", ncurep,
                                              "csv", csv, "kernels", ks, "command",
                                              "ncu --clock-control none ...", "seconds", 3.5));

    /* links: a task and a candidate that exist */
    char tid[KH_STORE_ID_MAX], cid[KH_STORE_ID_MAX], pid[KH_STORE_ID_MAX];
    json_t *t = json_pack("{s:s, s:s}", "type", "task", "name", "copy_task");
    if (kh_store_put(s, t, 0, tid, &err))
        fail_msg("%s", err.msg);
    char srch[33];
    snprintf(srch, sizeof srch, "%08x%08x%08x%08x", (unsigned)rand(), (unsigned)rand(),
             (unsigned)rand(), (unsigned)rand());
    json_t *c = json_pack("{s:s, s:s, s:{s:s}}", "type", "candidate", "task", tid, "provenance",
                          "source_hash", srch);
    if (kh_store_put(s, c, 0, cid, &err))
        fail_msg("%s", err.msg);
    json_decref(t);
    json_decref(c);

    unsigned char cubin[4096];
    for (size_t i = 0; i < sizeof cubin; i++)
        cubin[i] = (unsigned char)rand();
    json_t *spec = json_pack("{s:[{s:s}], s:[{s:s}, {s:s}]}", "buffers", "name", "a",
                             "launches", "kernel", "copy_f4", "kernel", "fma_loop");
    json_t *wl = json_pack("{s:s}", "workload", "w-1");
    kh_profile_store_opts so = {.cubin = cubin, .cubin_len = sizeof cubin, .spec = spec,
                                .task = tid, .candidate = cid, .context = wl};
    if (kh_profile_store(s, rep, &so, pid, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(strncmp(pid, "profile-", 8), 0);

    json_t *rec;
    assert_int_equal(kh_store_get(s, pid, &rec, &err), KH_OK);
    assert_string_equal(json_string_value(json_object_get(rec, "tool")), "cupti+ncu");
    assert_string_equal(json_string_value(json_object_get(rec, "status")), "memory-bound");
    assert_string_equal(json_string_value(json_object_get(rec, "task")), tid);
    assert_string_equal(json_string_value(json_object_get(rec, "candidate")), cid);
    assert_string_equal(json_string_value(json_object_get(rec, "gpu_uuid")),
                        json_string_value(json_object_get(gpu, "uuid")));
    assert_string_equal(json_string_value(json_object_get(rec, "device")), dev_id);
    assert_true(json_equal(json_object_get(rec, "launch_list"), spec));
    assert_true(json_equal(json_object_get(rec, "context"), wl));
    assert_true(json_number_value(json_object_get(json_object_get(rec, "peaks"),
                                                  "copy_bytes_per_s")) == bw);
    assert_true(json_is_object(json_object_get(rec, "device_limits")));
    assert_string_equal(json_string_value(json_object_get(rec, "signature")),
                        json_string_value(json_object_get(rep, "signature")));
    /* per kernel: resources, metrics, state */
    json_t *k0 = json_array_get(json_object_get(rec, "kernels"), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(k0, "launch"),
                                                        "regs_per_thread")), 16);
    assert_true(json_number_value(json_object_get(json_object_get(k0, "metrics"),
                                                  KH_BN_DRAM_READ)) == 2.148e9);
    assert_string_equal(json_string_value(json_object_get(json_object_get(k0, "state"),
                                                          "kind")), "memory-bound");
    /* ncu: parsed metrics kept, the two files' bytes as blobs */
    json_t *n = json_object_get(rec, "ncu");
    assert_int_equal(json_array_size(json_object_get(n, "kernels")), 2);
    assert_true(json_number_value(json_object_get(
                    json_object_get(json_array_get(json_object_get(n, "kernels"), 0), "metrics"),
                    "gpu__time_duration.sum")) == 534848);
    assert_blob_is(s, json_string_value(json_object_get(n, "report_blob")), rep_bytes, rep_len);
    assert_blob_is(s, json_string_value(json_object_get(n, "csv_blob")), csv_bytes, csv_len);
    assert_blob_is(s, json_string_value(json_object_get(rec, "cubin_blob")), cubin,
                   sizeof cubin);
    kh_hash h;
    char hex[33];
    kh_hash_bytes(cubin, sizeof cubin, &h);
    kh_hash_hex(&h, hex);
    assert_string_equal(json_string_value(json_object_get(rec, "cubin_hash")), hex);
    /* the candidate finds its profile; the store is consistent */
    json_t *q;
    kh_store_filter flt = {.candidate = cid, .type = "profile"};
    assert_int_equal(kh_store_query(s, &flt, 1, &q, &err), KH_OK);
    assert_int_equal(json_array_size(q), 1);
    json_t *ver;
    assert_int_equal(kh_store_verify(s, &ver, &err), KH_OK);
    assert_int_equal(json_array_size(json_object_get(ver, "problems")), 0);

    /* an ncu that failed: the in-process tier is recorded alone */
    json_object_set_new(rep, "ncu", json_pack("{s:s}", "error", "ncu not found"));
    char pid2[KH_STORE_ID_MAX];
    if (kh_profile_store(s, rep, NULL, pid2, &err))
        fail_msg("%s", err.msg);
    json_t *rec2;
    assert_int_equal(kh_store_get(s, pid2, &rec2, &err), KH_OK);
    assert_string_equal(json_string_value(json_object_get(rec2, "tool")), "cupti");
    assert_null(json_object_get(json_object_get(rec2, "ncu"), "report_blob"));
    /* an ncu report file gone: the store refuses, naming it, and writes nothing */
    json_object_set_new(rep, "ncu", json_pack("{s:s, s:s}", "report", "/nonexistent/r.ncu-rep",
                                              "csv", csv));
    assert_int_not_equal(kh_profile_store(s, rep, NULL, pid2, &err), KH_OK);
    assert_non_null(strstr(err.msg, "/nonexistent/r.ncu-rep"));
    flt = (kh_store_filter){.type = "profile"};
    json_decref(q);
    assert_int_equal(kh_store_query(s, &flt, 1, &q, &err), KH_OK);
    assert_int_equal(json_array_size(q), 2);

    json_decref(q);
    json_decref(ver);
    json_decref(rec2);
    json_decref(rec);
    json_decref(spec);
    json_decref(wl);
    json_decref(rep);
    json_decref(reply);
    json_decref(used);
    json_decref(peaks);
    json_decref(gpu);
    free(rep_bytes);
    free(csv_bytes);
    kh_store_close(s);
    kh_test_rmtree(dir);
    free(dir);
}

static void test_peaks_kept_per_uuid(void **state)
{
    (void)state;
    char *dir;
    kh_store *s = open_store(&dir);
    kh_err err;
    const char *why;
    json_t *got;
    json_t *a = gpu_info("GPU-aaaaaaaa-1111-2222-3333-444444444444", "580.82.07");
    json_t *b = gpu_info("GPU-bbbbbbbb-1111-2222-3333-444444444444", "580.82.07");
    /* nothing kept yet */
    assert_int_equal(kh_profile_peaks_lookup(s, a, 3600, &got, &why, &err), KH_OK);
    assert_null(got);
    assert_non_null(strstr(why, "never measured"));

    double bw_a = 3.5e12 + (double)(rand() % 1000) * 1e9;
    json_t *pa = json_pack("{s:f, s:s, s:s}", "copy_bytes_per_s", bw_a, "method", "memcpy",
                           "source", "measured");
    char id[KH_STORE_ID_MAX];
    assert_int_equal(kh_profile_peaks_save(s, a, pa, id, &err), KH_OK);
    assert_string_equal(id, "device-GPU-aaaaaaaa-1111-2222-3333-444444444444");
    /* the same UUID: reused, saying from where and when */
    assert_int_equal(kh_profile_peaks_lookup(s, a, 3600, &got, &why, &err), KH_OK);
    assert_non_null(got);
    assert_true(json_number_value(json_object_get(got, "copy_bytes_per_s")) == bw_a);
    assert_string_equal(json_string_value(json_object_get(got, "source")), "store");
    assert_string_equal(json_string_value(json_object_get(got, "record")), id);
    assert_non_null(json_string_value(json_object_get(got, "measured_at")));
    json_decref(got);
    /* another GPU: not A's peaks */
    assert_int_equal(kh_profile_peaks_lookup(s, b, 3600, &got, &why, &err), KH_OK);
    assert_null(got);
    /* the same GPU under another driver: measured again */
    json_t *a2 = gpu_info("GPU-aaaaaaaa-1111-2222-3333-444444444444", "590.10.01");
    assert_int_equal(kh_profile_peaks_lookup(s, a2, 3600, &got, &why, &err), KH_OK);
    assert_null(got);
    assert_non_null(strstr(why, "driver"));
    /* re-measured: the record is replaced, still one per UUID */
    double bw_a2 = bw_a * 1.01;
    json_t *pa2 = json_pack("{s:f}", "copy_bytes_per_s", bw_a2);
    assert_int_equal(kh_profile_peaks_save(s, a, pa2, id, &err), KH_OK);
    assert_int_equal(kh_profile_peaks_lookup(s, a, 3600, &got, &why, &err), KH_OK);
    assert_true(json_number_value(json_object_get(got, "copy_bytes_per_s")) == bw_a2);
    json_decref(got);
    json_t *q;
    kh_store_filter flt = {.type = "device"};
    assert_int_equal(kh_store_query(s, &flt, 0, &q, &err), KH_OK);
    assert_int_equal(json_array_size(q), 1);
    json_t *rec = json_array_get(q, 0);
    assert_string_equal(json_string_value(json_object_get(rec, "driver_version")), "580.82.07");
    assert_non_null(json_string_value(json_object_get(rec, "measured_by")));
    assert_null(json_object_get(json_object_get(rec, "peaks"), "source"));
    json_decref(q);
    /* too old: a record measured two days ago is stale for a one-day limit,
     * fine when any age is accepted */
    char old[40];
    kh_store_format_time((int64_t)((kh_wall_now() - 2 * 86400) * 1e6), old);
    json_t *stale = json_pack("{s:s, s:s, s:s, s:s, s:{s:f}, s:s}", "type", "device", "id",
                              "device-GPU-b", "gpu_uuid", "GPU-b", "driver_version", "580.82.07",
                              "peaks", "copy_bytes_per_s", 4e12, "measured_at", old);
    assert_int_equal(kh_store_put(s, stale, 0, id, &err), KH_OK);
    json_t *gb = gpu_info("GPU-b", "580.82.07");
    assert_int_equal(kh_profile_peaks_lookup(s, gb, 86400, &got, &why, &err), KH_OK);
    assert_null(got);
    assert_non_null(strstr(why, "older"));
    assert_int_equal(kh_profile_peaks_lookup(s, gb, -1, &got, &why, &err), KH_OK);
    assert_non_null(got);
    json_decref(got);
    /* a failed measurement is never kept; a UUID an id cannot hold is named */
    json_t *bad = json_pack("{s:s}", "error", "cuMemAlloc: out of memory");
    assert_int_equal(kh_profile_peaks_save(s, b, bad, id, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "out of memory"));
    json_t *weird = gpu_info("GPU a/b", "1");
    assert_int_equal(kh_profile_peaks_save(s, weird, pa, id, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "GPU a/b"));

    json_decref(weird);
    json_decref(bad);
    json_decref(gb);
    json_decref(stale);
    json_decref(pa2);
    json_decref(a2);
    json_decref(pa);
    json_decref(a);
    json_decref(b);
    kh_store_close(s);
    kh_test_rmtree(dir);
    free(dir);
}

/* A task's candidate: the launch list the profile worker would get, built
 * from a workload drawn at random among the fixture's, checked against the
 * definition and the manifest by hand; the cubin compiled; the ids the
 * evaluation records under. */
static void test_task_candidate_launch_list(void **state)
{
    (void)state;
    char task[1100];
    snprintf(task, sizeof task, "%s/tests/fixtures/task/rmsnorm", kh_test_source_dir());
    kh_task_set *set;
    kh_err err;
    assert_int_equal(kh_task_load(task, &(kh_task_opts){0}, &set, &err), KH_OK);
    const kh_task_workload *ws[64];
    size_t nw = 0;
    for (size_t i = 0; i < kh_task_nworkloads(set) && nw < 64; i++)
        if (kh_task_workload_at(set, i)->axes_ok)
            ws[nw++] = kh_task_workload_at(set, i);
    assert_true(nw >= 2);
    const kh_task_workload *w = ws[(size_t)rand() % nw];
    const kh_task_def *d = w->def;
    int64_t batch = w->axes[kh_task_axis_index(d, "batch_size")];
    char wl[128];
    snprintf(wl, sizeof wl, "%s", w->uuid);

    kh_engine *e = kh_engine_new(&(kh_engine_config){0}, &err);
    assert_non_null(e);
    uint64_t seed = 100 + (uint64_t)(rand() % 1000);
    kh_profile_task_opts o = {.task_path = task, .solution = "rmsnorm_h512_cuda_v1",
                              .workload = wl, .seed = seed, .exe = kh_test_khlua()};
    kh_profile_task t;
    if (kh_profile_task_prepare(e, &o, &t, &err))
        fail_msg("%s", err.msg);
    /* buffers: inputs random with distinct seeds, the output unfilled, the
     * workspace zeroed; bf16 is two bytes; eps (a scalar) has no buffer */
    json_t *bufs = json_object_get(t.spec, "buffers");
    assert_int_equal(json_array_size(bufs), 4);
    const char *names[] = {"hidden_states", "weight", "output", "row_sumsq"};
    const char *inits[] = {"random", "random", "none", "zero"};
    int64_t bytes[] = {batch * 512 * 2, 512 * 2, batch * 512 * 2, 4 * batch};
    for (size_t i = 0; i < 4; i++) {
        json_t *b = json_array_get(bufs, i);
        assert_string_equal(json_string_value(json_object_get(b, "name")), names[i]);
        assert_string_equal(json_string_value(json_object_get(b, "init")), inits[i]);
        assert_int_equal(json_integer_value(json_object_get(b, "bytes")), bytes[i]);
    }
    assert_int_equal(json_integer_value(json_object_get(json_array_get(bufs, 0), "seed")),
                     (json_int_t)seed);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(bufs, 1), "seed")),
                     (json_int_t)seed + 1);
    /* launches: dimensions and arguments resolved for this workload */
    json_t *l0 = json_array_get(json_object_get(t.spec, "launches"), 0);
    json_t *l1 = json_array_get(json_object_get(t.spec, "launches"), 1);
    assert_string_equal(json_string_value(json_object_get(l0, "kernel")), "rms_partial");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(l0, "grid"), 0)), batch);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(l0, "grid"), 1)), 2);
    assert_int_equal(json_integer_value(json_object_get(l0, "smem")), 32);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(l1, "grid"), 0)),
                     (batch * 512 + 1023) / 1024);
    json_t *a1 = json_object_get(l1, "args");
    assert_string_equal(json_string_value(json_object_get(json_array_get(a1, 1), "buf")),
                        "weight");
    /* eps by value: the workload's own, else 1 */
    const json_t *eps = json_object_get(
        json_object_get(json_object_get(w->json, "inputs"), "eps"), "value");
    double want_eps = json_is_number(eps) ? json_number_value(eps) : 1.0;
    assert_true(json_number_value(json_object_get(json_array_get(a1, 2), "f32")) == want_eps);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(a1, 5), "i64")),
                     batch * 512);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(a1, 6), "i32")), 512);
    /* the speed-of-light context: every input and output once; FLOPs from the
     * definition's expression */
    assert_true(t.ctx.min_bytes == (double)(2 * batch * 512 * 2 + 512 * 2 + 4));
    assert_true(t.ctx.flops == (double)(4 * batch * 512));
    assert_string_equal(json_string_value(json_object_get(t.context, "workload")), wl);
    /* a cubin, and the ids eval records under */
    assert_true(t.cubin_len > 4 && !memcmp(t.cubin, "\177ELF", 4));
    /* compiled by a compile server: NVRTC never compiled in this process
     * (where it would load the CUDA driver; on a GPU machine
     * gpu_coordinator_maps found libcuda in a policy's coordinator after the
     * seed's profile) */
    assert_false(mapped("libnvrtc-builtins"));
    assert_string_equal(t.task_id, "task-rmsnorm_h512");
    /* the one identity (candidate.h): the hash of the canonical form, not
     * of the Solution file (its name and author are not part of it) */
    const kh_task_solution *sol = kh_task_find_solution(set, "rmsnorm_h512_cuda_v1");
    kh_candidate cand;
    assert_int_equal(kh_candidate_of(sol->json, &cand, &err), KH_OK);
    assert_string_equal(t.candidate_id, cand.id);
    json_t *renamed = json_deep_copy(sol->json);
    json_object_set_new(renamed, "name", json_string("another_name"));
    json_object_set_new(renamed, "author", json_string("someone else"));
    kh_candidate c2;
    assert_int_equal(kh_candidate_of(renamed, &c2, &err), KH_OK);
    assert_string_equal(c2.id, cand.id);
    kh_candidate_free(&c2);
    json_decref(renamed);
    kh_candidate_free(&cand);
    kh_profile_task_free(&t);

    /* could-not-run cases, named */
    o.workload = "no-such-workload";
    assert_int_equal(kh_profile_task_prepare(e, &o, &t, &err), KH_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no-such-workload"));
    o.workload = NULL;
    o.solution = "rmsnorm_h512_ref_c";
    assert_int_equal(kh_profile_task_prepare(e, &o, &t, &err), KH_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "host"));
    o.solution = "nobody";
    assert_int_equal(kh_profile_task_prepare(e, &o, &t, &err), KH_ENOTFOUND);
    assert_non_null(strstr(err.msg, "nobody"));
    kh_task_set_free(set);
    kh_engine_free(e);
}

/* kh_profile_run end to end without a GPU: the profile worker answers from a
 * recorded session (KHLUA_PROFILE_FAKE) and a stand-in ncu writes a report
 * and prints the fixture CSV.  The first run measures the peaks and keeps
 * them under the GPU's UUID, the second reuses them, --remeasure measures
 * again; every run leaves a profile record whose ncu blobs are the files. */
static void test_run_records_through_a_recorded_worker(void **state)
{
    (void)state;
    char *dir;
    kh_store *s = open_store(&dir);
    kh_err err;
    char fake[1100], ncu[1100], csv[1100], out[1100];
    snprintf(fake, sizeof fake, "%s/session.json", dir);
    snprintf(ncu, sizeof ncu, "%s/ncu", dir);
    snprintf(out, sizeof out, "%s/ncu-out", dir);
    snprintf(csv, sizeof csv, "%s/tests/fixtures/ncu/raw_copy_fma.csv", kh_test_source_dir());
    double bw = 3.0e12 + (double)(rand() % 100000) * 1e7;
    char uuid[64];
    snprintf(uuid, sizeof uuid, "GPU-%08x-0000-4000-8000-000000000000", (unsigned)rand());
    json_t *session = json_pack(
        "{s:{s:s, s:s, s:s}, s:{s:s, s:f, s:f, s:s}, "
        "s:{s:{s:s}, s:o, s:[o, o], s:b, s:{s:s, s:s, s:i, s:[], s:[], s:[o, o]}, "
        "s:{s:s, s:f}}}",
        "info", "uuid", uuid, "name", "NVIDIA H200", "driver_version", "580.82.07", "peaks",
        "uuid", uuid, "copy_bytes_per_s", bw, "copy_median_ns", 2.0 * (1 << 30) / bw * 1e9,
        "method", "recorded", "profile", "gpu", "uuid", uuid, "device", device(), "launches",
        launch(0, "copy_f4", 2112, 256, 16), launch(1, "fma_loop", 2112, 256, 40), "counters",
        1, "profiler", "chip", "GH100", "replay", "user", "passes", 9, "metrics", "dropped",
        "ranges", range(0, "copy_f4", 1.287e6, 5.0, 69.4, 69.4, 2.148e9, 2.152e9),
        range(1, "fma_loop", 0.791e6, 89.6, 0.008, 0.0002, 4352, 2560), "timing", "timer",
        "events", "latency_ns", 2.2e6);
    assert_int_equal(json_dump_file(session, fake, 0), 0);
    json_decref(session);
    char script[4096];
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "# ncu's stand-in: --import prints the raw page, else -o BASE gets a report\n"
             "for a; do [ \"$a\" = --import ] && exec cat '%s'; done\n"
             "prev=; for a; do [ \"$prev\" = -o ] && head -c %d /dev/urandom > \"$a.ncu-rep\";"
             " prev=$a; done\n"
             "echo '==PROF== Disconnected'\n",
             csv, 50000 + rand() % 50000);
    kh_test_write_file(ncu, script);
    assert_int_equal(chmod(ncu, 0755), 0);
    setenv("KHLUA_PROFILE_FAKE", fake, 1);

    kh_engine *e = kh_engine_new(&(kh_engine_config){0}, &err);
    assert_non_null(e);
    unsigned char cubin[2048];
    for (size_t i = 0; i < sizeof cubin; i++)
        cubin[i] = (unsigned char)rand();
    json_t *spec = json_pack("{s:[], s:[{s:s}, {s:s}]}", "buffers", "launches", "kernel",
                             "copy_f4", "kernel", "fma_loop");
    json_t *rep[3];
    for (int i = 0; i < 3; i++) {
        kh_profile_opts o = {.cubin = cubin, .cubin_len = sizeof cubin, .spec = spec,
                             .exe = kh_test_khlua(), .store = s, .ncu = i == 0,
                             .ncu_path = ncu, .out_dir = out, .remeasure_peaks = i == 2,
                             .ctx = {.min_bytes = 4.3e9}, .timeout_s = 60};
        if (kh_profile_run(e, &o, &rep[i], &err))
            fail_msg("run %d: %s", i, err.msg);
        if (json_object_get(rep[i], "store_error"))
            fail_msg("run %d: %s", i,
                     json_string_value(json_object_get(rep[i], "store_error")));
    }
    unsetenv("KHLUA_PROFILE_FAKE");
    const char *src[] = {"measured", "store", "measured"};
    for (int i = 0; i < 3; i++) {
        json_t *p = json_object_get(rep[i], "peaks");
        assert_string_equal(json_string_value(json_object_get(p, "source")), src[i]);
        assert_true(json_number_value(json_object_get(p, "copy_bytes_per_s")) == bw);
        assert_string_equal(json_string_value(json_object_get(p, "record")),
                            json_string_value(json_object_get(
                                json_object_get(rep[0], "peaks"), "record")));
    }
    assert_string_equal(json_string_value(json_object_get(json_object_get(rep[1], "peaks"),
                                                           "measured_at")),
                        json_string_value(json_object_get(json_object_get(rep[0], "peaks"),
                                                          "measured_at")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(rep[2], "peaks"),
                                                          "why_measured")),
                        "re-measure asked");
    /* one device record per GPU, three profile records */
    json_t *q;
    kh_store_filter flt = {.type = "device"};
    assert_int_equal(kh_store_query(s, &flt, 1, &q, &err), KH_OK);
    assert_int_equal(json_array_size(q), 1);
    json_decref(q);
    flt.type = "profile";
    assert_int_equal(kh_store_query(s, &flt, 1, &q, &err), KH_OK);
    assert_int_equal(json_array_size(q), 3);
    json_decref(q);
    /* the first run's record: the state, the metrics, ncu's files as blobs */
    json_t *rec;
    assert_int_equal(kh_store_get(s, json_string_value(json_object_get(rep[0], "store_id")),
                                  &rec, &err), KH_OK);
    assert_string_equal(json_string_value(json_object_get(rec, "tool")), "cupti+ncu");
    assert_string_equal(json_string_value(json_object_get(rec, "gpu_uuid")), uuid);
    assert_string_equal(json_string_value(json_object_get(rec, "status")), "memory-bound");
    assert_true(json_number_value(json_object_get(json_object_get(rec, "sol_inputs"),
                                                  "min_bytes")) == 4.3e9);
    const json_t *n = json_object_get(rec, "ncu");
    assert_int_equal(json_array_size(json_object_get(n, "kernels")), 2);
    char rpath[1200];
    snprintf(rpath, sizeof rpath, "%s/report.ncu-rep", out);
    size_t rl, cl;
    unsigned char *rb = file_bytes(rpath, &rl), *cb = file_bytes(csv, &cl);
    assert_true(rl >= 50000);
    assert_blob_is(s, json_string_value(json_object_get(n, "report_blob")), rb, rl);
    assert_blob_is(s, json_string_value(json_object_get(n, "csv_blob")), cb, cl);
    assert_blob_is(s, json_string_value(json_object_get(rec, "cubin_blob")), cubin,
                   sizeof cubin);
    free(rb);
    free(cb);
    json_decref(rec);
    for (int i = 0; i < 3; i++)
        json_decref(rep[i]);
    json_decref(spec);
    kh_engine_free(e);
    kh_store_close(s);
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    srand((unsigned)time(NULL));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_with_counters),
        cmocka_unit_test(test_reply_without_counters),
        cmocka_unit_test(test_metric_list_is_configurable),
        cmocka_unit_test(test_run_without_gpu_fails_clearly),
        cmocka_unit_test(test_store_report_with_ncu),
        cmocka_unit_test(test_peaks_kept_per_uuid),
        cmocka_unit_test(test_task_candidate_launch_list),
        cmocka_unit_test(test_run_records_through_a_recorded_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
