/* test_gpu_eval.c: the gpu worker's `evaluate` (docs/evaluation.md) on a real
 * GPU (skipped without one).  Inputs come from the device generator and must
 * be bit-identical to the host generator's; an honest kernel's outputs match
 * the host computation under both poison patterns; a kernel that skips its
 * output, mutates an input, writes past a buffer, or caches its first result
 * across calls is exposed by the check built for it; timed outputs come back
 * for rotated input sets with their seeds. */
#include "kh_test.h"

#include "task/rng.h"
#include "worker/supervisor.h"
#include "task/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 100003 /* not a multiple of anything convenient */

static const char *kernels =
    "extern \"C\" __global__ void add(const float *a, const float *b, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }\n"
    "extern \"C\" __global__ void lazy(const float *a, const float *b, float *c, int n) {}\n"
    "extern \"C\" __global__ void mutate(float *a, const float *b, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) { c[i] = a[i] + b[i]; if (i == 7) a[i] = 0.f; } }\n"
    "extern \"C\" __global__ void overrun(const float *a, const float *b, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i <= n) c[i] = (i < n) ? a[i] + b[i] : 1.f; }\n"
    "__device__ float memo[" "100003" "]; __device__ int have;\n"
    "extern \"C\" __global__ void cache(const float *a, const float *b, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;\n"
    "  if (!have) memo[i] = a[i] + b[i];\n"
    "  c[i] = memo[i];\n"
    "  if (i == 0) have = 1; }\n";

static kh_pool *pool;
static unsigned char *cubin;
static size_t cubin_len;

static int setup(void **state)
{
    (void)state;
    kh_wproc_opts o = {.role = "gpu", .exe = kh_test_khlua(), .hello_timeout_s = 60};
    kh_err err;
    pool = kh_pool_new(&o, 1, &err);
    cubin = kh_test_nvrtc_cubin(kernels, "sm_90a", &cubin_len);
    return pool ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    kh_pool_free(pool);
    free(cubin);
    return 0;
}

/* The expected output for a seed: the host generator's inputs, added. */
static float *expected(uint64_t seed)
{
    int64_t shape[1] = {N};
    kh_tensor *a, *b;
    kh_err err;
    assert_int_equal(kh_tensor_new(&a, KH_DTYPE_F32, 1, shape, &err), KH_OK);
    assert_int_equal(kh_tensor_new(&b, KH_DTYPE_F32, 1, shape, &err), KH_OK);
    assert_int_equal(kh_rng_fill(NULL, a, seed, 0, &err), KH_OK);
    assert_int_equal(kh_rng_fill(NULL, b, seed, 1, &err), KH_OK);
    float *c = malloc(N * sizeof *c);
    for (int i = 0; i < N; i++)
        c[i] = ((float *)a->data)[i] + ((float *)b->data)[i];
    kh_tensor_free(a);
    kh_tensor_free(b);
    return c;
}

static json_t *request(const char *kernel, json_t *timing)
{
    return json_pack(
        "{s:{s:s, s:s, s:[i, I]}, s:[{s:s, s:s, s:s, s:[i], s:{s:s, s:i}},"
        " {s:s, s:s, s:s, s:[i], s:{s:s, s:i}}, {s:s, s:s, s:s, s:[i]}],"
        " s:[{s:s, s:[i], s:[i], s:[{s:s}, {s:s}, {s:s}, {s:i}]}],"
        " s:[{s:i}, {s:i}], s:{s:b, s:b, s:b, s:b, s:b}, s:o}",
        "artifact", "kind", "cubin", "key", "test", "payload", 0, (json_int_t)cubin_len,
        "tensors", "name", "a", "role", "input", "dtype", "float32", "shape", N, "gen", "kind",
        "random", "stream", 0, "name", "b", "role", "input", "dtype", "float32", "shape", N,
        "gen", "kind", "random", "stream", 1, "name", "c", "role", "output", "dtype", "float32",
        "shape", N, "launches", "kernel", kernel, "grid", (N + 255) / 256, "block", 256, "args",
        "tensor", "a", "tensor", "b", "tensor", "c", "i32", N, "trials", "seed", 11, "seed", 12,
        "checks", "poison", 1, "inputs_unchanged", 1, "guards", 1, "deterministic", 1,
        "reload_before_timing", 1, "timing", timing ? timing : json_null());
}

static kh_status evaluate(const char *kernel, json_t *timing, kh_msg *reply, kh_err *err)
{
    json_t *req = request(kernel, timing);
    kh_status st = kh_pool_call(pool, "evaluate", req, cubin, cubin_len, 120, reply, err);
    json_decref(req);
    return st;
}

/* Count elements of output slice `o` (an [off, len] pair) that differ from
 * the expected values beyond float rounding. */
static int mismatches(const kh_msg *reply, json_t *slice, const float *want)
{
    size_t off = (size_t)json_integer_value(json_array_get(slice, 0));
    size_t len = (size_t)json_integer_value(json_array_get(slice, 1));
    assert_int_equal(len, N * sizeof(float));
    assert_true(off + len <= reply->payload_len);
    const float *got = (const float *)(reply->payload + off);
    int bad = 0;
    for (int i = 0; i < N; i++)
        if (!(fabsf(got[i] - want[i]) <= 1e-6f * fabsf(want[i]) + 1e-30f))
            bad++;
    return bad;
}

static json_t *trial(const kh_msg *m, int i)
{
    return json_array_get(json_object_get(json_object_get(m->head, "result"), "trials"), (size_t)i);
}

static const char *check(const kh_msg *m, int t, const char *name)
{
    return json_string_value(json_object_get(json_object_get(trial(m, t), "checks"), name));
}

static void test_honest_kernel_matches_the_host(void **state)
{
    (void)state;
    kh_msg m;
    kh_err err;
    if (evaluate("add", NULL, &m, &err))
        fail_msg("%s", err.msg);
    for (int t = 0; t < 2; t++) {
        float *want = expected(11 + (uint64_t)t);
        /* Device inputs are bit-identical to the host generator's, so the
         * outputs match under both poison patterns. */
        assert_int_equal(mismatches(&m, json_object_get(json_object_get(trial(&m, t), "outputs"),
                                                        "c"), want), 0);
        assert_int_equal(mismatches(&m, json_object_get(json_object_get(trial(&m, t),
                                                                        "outputs_b"), "c"),
                                    want), 0);
        free(want);
        assert_string_equal(check(&m, t, "inputs_unchanged"), "ok");
        assert_string_equal(check(&m, t, "guards"), "ok");
        assert_string_equal(check(&m, t, "deterministic"), "ok");
    }
    kh_msg_free(&m);
}

static void test_skipped_output_is_visible(void **state)
{
    (void)state;
    kh_msg m;
    kh_err err;
    assert_int_equal(evaluate("lazy", NULL, &m, &err), KH_OK);
    float *want = expected(11);
    assert_int_equal(mismatches(&m, json_object_get(json_object_get(trial(&m, 0), "outputs"), "c"),
                                want), N);
    free(want);
    /* The two poison patterns show through: not deterministic either. */
    assert_string_equal(check(&m, 0, "deterministic"), "failed");
    kh_msg_free(&m);
}

static void test_mutated_input_and_overrun_are_caught(void **state)
{
    (void)state;
    kh_msg m;
    kh_err err;
    assert_int_equal(evaluate("mutate", NULL, &m, &err), KH_OK);
    assert_non_null(strstr(check(&m, 0, "inputs_unchanged"), "input 'a' changed"));
    kh_msg_free(&m);
    assert_int_equal(evaluate("overrun", NULL, &m, &err), KH_OK);
    assert_non_null(strstr(check(&m, 0, "guards"), "tensor 'c'"));
    assert_non_null(strstr(check(&m, 0, "guards"), "after"));
    kh_msg_free(&m);
}

/* Timed outputs of rotated input sets: an honest kernel matches for every
 * seed; a kernel that replays its first result does not. */
static int timed_mismatch(const char *kernel, int *nsamples)
{
    kh_msg m;
    kh_err err;
    json_t *timing = json_pack("{s:s, s:i, s:i, s:i, s:i, s:f}", "protocol", "official",
                               "warmup", 2, "iters", 20, "trials", 1, "rotate_inputs", 2,
                               "verify_timed_fraction", 0.2);
    if (evaluate(kernel, timing, &m, &err))
        fail_msg("%s", err.msg);
    json_t *res = json_object_get(m.head, "result");
    json_t *tim = json_object_get(res, "timing");
    assert_string_equal(json_string_value(json_object_get(tim, "status")), "OK");
    assert_true(json_number_value(json_object_get(tim, "latency_ns")) > 0);
    json_t *to = json_object_get(res, "timed_outputs");
    *nsamples = (int)json_array_size(to);
    int bad = 0;
    size_t i;
    json_t *e;
    json_array_foreach(to, i, e) {
        float *want = expected((uint64_t)json_integer_value(json_object_get(e, "seed")));
        bad += mismatches(&m, json_object_get(json_object_get(e, "outputs"), "c"), want) > 0;
        free(want);
    }
    kh_msg_free(&m);
    return bad;
}

static void test_timed_outputs_expose_a_cross_call_cache(void **state)
{
    (void)state;
    int n = 0;
    assert_int_equal(timed_mismatch("add", &n), 0);
    assert_true(n >= 2);
    int bad = timed_mismatch("cache", &n);
    printf("# cross-call cache: %d of %d sampled timed calls wrong\n", bad, n);
    assert_true(bad >= 1);
}

int main(void)
{
    if (!kh_test_have_gpu()) {
        printf("skipped: no GPU on this machine\n");
        return KH_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_honest_kernel_matches_the_host),
        cmocka_unit_test(test_skipped_output_is_visible),
        cmocka_unit_test(test_mutated_input_and_overrun_are_caught),
        cmocka_unit_test(test_timed_outputs_expose_a_cross_call_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
