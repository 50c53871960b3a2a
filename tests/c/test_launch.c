/* test_launch.c: the CUDA-free half of binding a launch list (engine/gpu/launch.h):
 * argument forms, buffer names, and random scalars passed by value
 * ({"scalar": name}: the value set after each fill reaches every launch that
 * names it, in the parameter's own width).  The launches themselves run in
 * the gpu tests. */
#include "kh_test.h"

#include "gpu/launch.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned seed;

/* A list over three fake buffers: x (4096 bytes), eps (4 bytes), n (8 bytes). */
static void make_list(kh_launch_list *l, kh_launch_buf *bufs, size_t nlaunches)
{
    memset(l, 0, sizeof *l);
    memset(bufs, 0, 3 * sizeof *bufs);
    const char *names[] = {"x", "eps", "n"};
    size_t bytes[] = {4096, 4, 8};
    for (int i = 0; i < 3; i++) {
        snprintf(bufs[i].name, sizeof bufs[i].name, "%s", names[i]);
        bufs[i].buf.ptr = 0x7f0000100000ull + (CUdeviceptr)rand() * 256u;
        bufs[i].buf.bytes = bytes[i];
    }
    l->bufs = bufs;
    l->nbufs = 3;
    l->borrowed = 1;
    l->launches = calloc(nlaunches, sizeof *l->launches);
    assert_non_null(l->launches);
    l->nlaunches = nlaunches;
}

static void parse(kh_launch_list *l, size_t k, const char *args_json)
{
    json_error_t je;
    json_t *a = json_loads(args_json, 0, &je);
    assert_non_null(a);
    kh_err err;
    kh_status st = kh_launch_parse_args(l, k, a, &l->launches[k], &err);
    if (st)
        fail_msg("%s: %s", args_json, err.msg);
    json_decref(a);
}

static void test_value_forms(void **state)
{
    (void)state;
    kh_launch_list l;
    kh_launch_buf bufs[3];
    make_list(&l, bufs, 1);
    int32_t i32 = (int32_t)(rand() % 200000) - 100000;
    float f = (float)rand() / (float)RAND_MAX * 3.0f - 1.5f;
    char js[512];
    snprintf(js, sizeof js, "[{\"tensor\": \"x\"}, {\"i32\": %d}, {\"f32\": %.9g}, {\"buf\": \"n\"}]",
             i32, (double)f);
    parse(&l, 0, js);
    kh_launch_one *o = &l.launches[0];
    assert_int_equal(o->nargs, 4);
    assert_true(o->vals[0].ptr == bufs[0].buf.ptr);
    assert_int_equal(o->vals[1].i32, i32);
    assert_true(o->vals[2].f32 == f);
    assert_true(o->vals[3].ptr == bufs[2].buf.ptr);
    for (int i = 0; i < 4; i++) {
        assert_ptr_equal(o->params[i], &o->vals[i]);
        assert_int_equal(o->scalar_of[i], 0);
    }
    free(l.launches);
}

/* A random scalar's bits reach every launch that passes it, in each
 * parameter's width, and a new fill replaces them. */
static void test_scalar_by_value(void **state)
{
    (void)state;
    kh_launch_list l;
    kh_launch_buf bufs[3];
    make_list(&l, bufs, 2);
    parse(&l, 0, "[{\"tensor\": \"x\"}, {\"scalar\": \"eps\"}, {\"scalar\": \"n\"}]");
    parse(&l, 1, "[{\"scalar\": \"n\"}, {\"i32\": 3}]");
    assert_int_equal(l.launches[0].scalar_of[1], 2);
    assert_int_equal(l.launches[0].scalar_of[2], 3);
    assert_int_equal(l.launches[1].scalar_of[0], 3);
    /* unset: zero, not stale stack bytes */
    assert_true(l.launches[0].vals[1].u64 == 0);
    for (int round = 0; round < 20; round++) {
        float eps = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
        uint32_t ebits;
        memcpy(&ebits, &eps, 4);
        int64_t n = ((int64_t)rand() << 20) - ((int64_t)rand() << 10);
        assert_int_equal(kh_launch_set_scalar(&l, "eps", ebits), 1);
        assert_int_equal(kh_launch_set_scalar(&l, "n", (uint64_t)n), 2);
        /* the kernel reads the parameter through its pointer, in its width */
        float got_eps;
        memcpy(&got_eps, l.launches[0].params[1], 4);
        assert_true(got_eps == eps);
        int64_t got_n;
        memcpy(&got_n, l.launches[0].params[2], 8);
        assert_true(got_n == n);
        memcpy(&got_n, l.launches[1].params[0], 8);
        assert_true(got_n == n);
        /* a narrower parameter (int32 scalar) reads the low bytes */
        int32_t lo;
        memcpy(&lo, l.launches[1].params[0], 4);
        assert_int_equal(lo, (int32_t)(uint32_t)(uint64_t)n);
        /* the other arguments are untouched */
        assert_true(l.launches[0].vals[0].ptr == bufs[0].buf.ptr);
        assert_int_equal(l.launches[1].vals[1].i32, 3);
    }
    assert_int_equal(kh_launch_set_scalar(&l, "x", 5), 0); /* x is passed by address only */
    free(l.launches);
}

static void expect_error(const char *args_json, const char *want)
{
    kh_launch_list l;
    kh_launch_buf bufs[3];
    make_list(&l, bufs, 1);
    json_error_t je;
    json_t *a = json_loads(args_json, 0, &je);
    assert_non_null(a);
    kh_err err;
    kh_status st = kh_launch_parse_args(&l, 0, a, &l.launches[0], &err);
    assert_int_not_equal(st, KH_OK);
    if (!strstr(err.msg, want))
        fail_msg("%s: expected '%s' in: %s", args_json, want, err.msg);
    json_decref(a);
    free(l.launches);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("[{\"scalar\": \"nope\"}]", "no scalar input named 'nope'");
    expect_error("[{\"scalar\": \"x\"}]", "only a one-element input of at most 8 bytes");
    expect_error("[{\"tensor\": \"y\"}]", "no buffer named 'y'");
    expect_error("[{\"i32\": 1.5}]", "args[0]: expected one of");
    expect_error("[{\"i32\": 1, \"f32\": 2}]", "args[0]: expected one of");
    expect_error("{\"i32\": 1}", "an array is required");
}

int main(void)
{
    seed = (unsigned)time(NULL);
    srand(seed);
    printf("# seed %u\n", seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_forms),
        cmocka_unit_test(test_scalar_by_value),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
