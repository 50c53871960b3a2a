/* test_shapes.c: engine/eval/shapes.h on the real packages under kernels/ and on
 * small definitions written here: the drawn shapes are not listed, keep the
 * const axes, satisfy every constraint and the 1.25x size bound, change no
 * axis that an unprovable constraint or an index tensor ties down, are the
 * same for the same seed and differ for another; a package whose workloads
 * all read safetensors yields none and says why. */
#include "kh_test.h"

#include "eval/shapes.h"
#include "task/task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pkg {
    kh_task_set *set;
    const kh_task_def *d;
    const kh_task_workload **listed;
    size_t nlisted;
} pkg;

static void pkg_load(pkg *p, const char *path)
{
    kh_task_opts o = {0};
    kh_err err;
    if (kh_task_load(path, &o, &p->set, &err))
        fail_msg("loading %s: %s", path, err.msg);
    assert_int_equal(kh_task_ndefs(p->set), 1);
    p->d = kh_task_def_at(p->set, 0);
    size_t nw = kh_task_nworkloads(p->set);
    p->listed = calloc(nw + 1, sizeof *p->listed);
    p->nlisted = 0;
    for (size_t i = 0; i < nw; i++)
        p->listed[p->nlisted++] = kh_task_workload_at(p->set, i);
    assert_true(p->nlisted > 0);
}

static void pkg_kernel(pkg *p, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/kernels/%s", kh_test_source_dir(), name);
    pkg_load(p, path);
}

static void pkg_free(pkg *p)
{
    free(p->listed);
    kh_task_set_free(p->set);
}

static void draw(const pkg *p, size_t n, uint64_t seed, kh_shapes *s)
{
    kh_err err;
    if (kh_shapes_draw(p->d, p->listed, p->nlisted, n, seed, s, &err))
        fail_msg("drawing shapes of %s: %s", p->d->name, err.msg);
}

static int64_t max_listed_bytes(const pkg *p)
{
    int64_t m = 0, b;
    kh_err err;
    for (size_t i = 0; i < p->nlisted; i++)
        if (p->listed[i]->axes_ok && !kh_task_io_bytes(p->d, p->listed[i]->axes, &b, &err) && b > m)
            m = b;
    return m;
}

static void print_shapes(const pkg *p, const kh_shapes *s, uint64_t seed)
{
    print_message("# %s, seed %llu: %zu shapes%s%s\n", p->d->name, (unsigned long long)seed, s->n,
                  s->note[0] ? ": " : "", s->note);
    for (size_t i = 0; i < s->n; i++) {
        char buf[256];
        size_t used = 0;
        for (size_t a = 0; a < p->d->naxes; a++)
            if (!p->d->axes[a].is_const)
                used += (size_t)snprintf(buf + used, sizeof buf - used, " %s=%lld",
                                         p->d->axes[a].name, (long long)s->w[i].axes[a]);
        print_message("#   %s%s (from %s)\n", s->w[i].uuid, buf, s->from[i]->uuid);
    }
}

/* What every drawn set must be, whatever the definition: a fresh tuple,
 * const axes as defined, constraints true, within the size bound, a uuid of
 * the documented form that the workload JSON carries too, a listed template. */
static void check_invariants(const pkg *p, const kh_shapes *s)
{
    const kh_task_def *d = p->d;
    int64_t bound = max_listed_bytes(p);
    kh_err err;
    for (size_t i = 0; i < s->n; i++) {
        const kh_task_workload *w = &s->w[i];
        assert_ptr_equal(w->def, d);
        assert_string_equal(w->definition, d->name);
        assert_true(w->axes_ok);
        assert_int_equal(strlen(w->uuid), 22);
        assert_memory_equal(w->uuid, "shape-", 6);
        assert_int_equal(strspn(w->uuid + 6, "0123456789abcdef"), 16);
        assert_string_equal(json_string_value(json_object_get(w->json, "uuid")), w->uuid);
        assert_non_null(json_object_get(w->json, "inputs"));
        for (size_t a = 0; a < d->naxes; a++) {
            json_t *v = json_object_get(json_object_get(w->json, "axes"), d->axes[a].name);
            if (d->axes[a].is_const) {
                assert_int_equal(w->axes[a], d->axes[a].value);
                assert_null(v);
            } else {
                assert_true(w->axes[a] >= 1);
                assert_int_equal(json_integer_value(v), w->axes[a]);
            }
        }
        for (size_t c = 0; c < d->nconstraints; c++) {
            int64_t r = 0;
            if (!d->constraints[c].expr || kh_expr_needs_data(d->constraints[c].expr))
                continue;
            if (kh_task_eval(d, w->axes, d->constraints[c].expr, NULL, NULL, &r, &err))
                fail_msg("%s: constraint '%s': %s", w->uuid, d->constraints[c].text, err.msg);
            if (!r)
                fail_msg("%s violates '%s'", w->uuid, d->constraints[c].text);
        }
        int64_t b;
        assert_int_equal(kh_task_io_bytes(d, w->axes, &b, &err), KH_OK);
        if ((double)b > 1.25 * (double)bound)
            fail_msg("%s needs %lld bytes, more than 1.25 x %lld", w->uuid, (long long)b,
                     (long long)bound);
        for (size_t l = 0; l < p->nlisted; l++)
            if (p->listed[l]->axes_ok &&
                !memcmp(p->listed[l]->axes, w->axes, d->naxes * sizeof *w->axes))
                fail_msg("%s has the axes of listed workload %s", w->uuid, p->listed[l]->uuid);
        for (size_t k = 0; k < i; k++)
            if (!memcmp(s->w[k].axes, w->axes, d->naxes * sizeof *w->axes))
                fail_msg("%s and %s have the same axes", s->w[k].uuid, w->uuid);
        int from_listed = 0;
        for (size_t l = 0; l < p->nlisted; l++)
            from_listed |= s->from[i] == p->listed[l];
        assert_true(from_listed);
        assert_string_equal(json_string_value(json_object_get(
                                json_object_get(w->record, "khlua"), "shape_of")),
                            s->from[i]->uuid);
        /* the template's inputs, unchanged */
        assert_true(json_equal(json_object_get(w->json, "inputs"),
                               json_object_get(s->from[i]->json, "inputs")));
    }
}

/* The values of var axis name among the drawn shapes. */
static int64_t axis_of(const pkg *p, const kh_task_workload *w, const char *name)
{
    int i = kh_task_axis_index(p->d, name);
    assert_true(i >= 0);
    return w->axes[i];
}

static void test_rmsnorm(void **state)
{
    (void)state;
    pkg p;
    pkg_kernel(&p, "rmsnorm_h4096");
    kh_shapes s = KH_SHAPES_INIT;
    draw(&p, 10, 1, &s);
    print_shapes(&p, &s, 1);
    assert_int_equal(s.n, 10);
    assert_string_equal(s.note, "");
    check_invariants(&p, &s);
    /* every listed batch is 1, 7, 15, 16, ..., 14509: a kernel tuned to those
     * meets a batch of 1 or below 7... and ones that break % 8 and % 32 */
    int has_unaligned = 0, has_odd = 0, has_inside = 0;
    for (size_t i = 0; i < s.n; i++) {
        int64_t b = axis_of(&p, &s.w[i], "batch_size");
        has_unaligned |= b % 8 != 0;
        has_odd |= b % 2 != 0;
        has_inside |= b > 1 && b < 14509;
        assert_int_equal(axis_of(&p, &s.w[i], "hidden_size"), 4096);
    }
    assert_true(has_unaligned && has_odd && has_inside);
    kh_shapes_free(&s);
    assert_int_equal(s.n, 0);
    assert_null(s.w);
    kh_shapes_free(&s); /* idempotent */
    pkg_free(&p);
}

static void test_gdn_decode(void **state)
{
    (void)state;
    pkg p;
    pkg_kernel(&p, "gdn_decode_qk4_v8_d128_k_last");
    assert_int_equal(p.d->nconstraints, 3);
    kh_shapes s = KH_SHAPES_INIT;
    draw(&p, 10, 1, &s);
    print_shapes(&p, &s, 1);
    assert_int_equal(s.n, 10);
    check_invariants(&p, &s);
    /* 56 listed workloads over 9 batch sizes (1 ... 256): 1.25x the bytes of
     * batch 256 is batch 320 (every tensor but A_log and dt_bias scales with
     * the batch) */
    for (size_t i = 0; i < s.n; i++) {
        int64_t b = axis_of(&p, &s.w[i], "batch_size");
        assert_true(b >= 2 && b <= 320);
        assert_int_equal(axis_of(&p, &s.w[i], "num_v_heads"), 8);
    }
    kh_shapes_free(&s);
    pkg_free(&p);
}

static void test_gemm(void **state)
{
    (void)state;
    pkg p;
    pkg_kernel(&p, "gemm_n4096_k4096");
    kh_shapes s = KH_SHAPES_INIT;
    draw(&p, 16, 7, &s);
    print_shapes(&p, &s, 7);
    assert_int_equal(s.n, 16);
    check_invariants(&p, &s);
    /* 43 listed M, most of them multiples of 8: some drawn M is not */
    int unaligned = 0;
    for (size_t i = 0; i < s.n; i++)
        unaligned += axis_of(&p, &s.w[i], "M") % 8 != 0;
    assert_true(unaligned >= 4);
    kh_shapes_free(&s);
    pkg_free(&p);
}

/* Every listed workload of these reads an input from safetensors. */
static void test_safetensors_only(void **state)
{
    (void)state;
    const char *names[] = {"moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048",
                           "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"};
    for (size_t k = 0; k < KH_ARRAY_LEN(names); k++) {
        pkg p;
        pkg_kernel(&p, names[k]);
        kh_shapes s = KH_SHAPES_INIT;
        draw(&p, 8, 1, &s);
        print_shapes(&p, &s, 1);
        assert_int_equal(s.n, 0);
        assert_null(s.w);
        assert_non_null(strstr(s.note, "safetensors"));
        assert_non_null(strstr(s.note, "can be reshaped"));
        kh_shapes_free(&s);
        pkg_free(&p);
    }
}

static void test_determinism(void **state)
{
    (void)state;
    pkg p;
    pkg_kernel(&p, "rmsnorm_h4096");
    kh_shapes a = KH_SHAPES_INIT, b = KH_SHAPES_INIT, c = KH_SHAPES_INIT;
    draw(&p, 8, 1, &a);
    draw(&p, 8, 1, &b);
    draw(&p, 8, 2, &c);
    assert_int_equal(a.n, 8);
    assert_int_equal(b.n, 8);
    assert_int_equal(c.n, 8);
    size_t same = 0;
    for (size_t i = 0; i < a.n; i++) {
        assert_string_equal(a.w[i].uuid, b.w[i].uuid);
        assert_int_equal(a.w[i].axes[0], b.w[i].axes[0]);
        assert_ptr_equal(a.from[i], b.from[i]);
        for (size_t k = 0; k < c.n; k++)
            same += a.w[i].axes[0] == c.w[k].axes[0];
    }
    assert_true(same < a.n);
    /* the uuid names the shape, not the draw: a batch drawn under both
     * seeds has one uuid */
    for (size_t i = 0; i < a.n; i++)
        for (size_t k = 0; k < c.n; k++)
            if (a.w[i].axes[0] == c.w[k].axes[0])
                assert_string_equal(a.w[i].uuid, c.w[k].uuid);
            else
                assert_string_not_equal(a.w[i].uuid, c.w[k].uuid);
    kh_shapes_free(&a);
    kh_shapes_free(&b);
    kh_shapes_free(&c);
    pkg_free(&p);
}

/* The size 1 is always the first shape drawn, and the gap below the smallest
 * listed size is drawn log-uniformly: with n listed at 100003 and 2^24 only
 * (the CUDA red team's package), a kernel right only from n = 8192 up
 * (rt_large_n_only) meets n = 1 under every seed, and another size below
 * 8192 under most (a uniform draw in that gap finds one 8% of the time). */
static void test_small_sizes(void **state)
{
    (void)state;
    pkg p;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/redteam/cuda", kh_test_source_dir());
    pkg_load(&p, path);
    int with_small = 0;
    const int seeds = 500;
    for (int seed = 1; seed <= seeds; seed++) {
        kh_shapes s = KH_SHAPES_INIT;
        draw(&p, 8, (uint64_t)seed * 0x9E3779B97F4A7C15ull, &s);
        assert_int_equal(s.n, 8);
        assert_int_equal(axis_of(&p, &s.w[0], "n"), 1);
        int small = 0;
        for (size_t i = 1; i < s.n; i++) {
            int64_t n = axis_of(&p, &s.w[i], "n");
            small |= n > 1 && n < 8192;
        }
        with_small += small;
        kh_shapes_free(&s);
    }
    print_message("# %d of %d seeds draw a size in (1, 8192) besides 1\n", with_small, seeds);
    assert_true(with_small >= seeds * 6 / 10);
    pkg_free(&p);
}

static void test_n0(void **state)
{
    (void)state;
    pkg p;
    pkg_kernel(&p, "rmsnorm_h4096");
    kh_shapes s = KH_SHAPES_INIT;
    draw(&p, 0, 1, &s);
    assert_int_equal(s.n, 0);
    assert_null(s.w);
    assert_null(s.from);
    assert_string_equal(s.note, "");
    kh_shapes_free(&s);
    pkg_free(&p);
}

/* A package of one definition and workloads, written to a temporary folder. */
static char *write_pkg(const char *def, const char *const *wls, size_t n)
{
    char *dir = kh_test_tmpdir(), path[1024];
    snprintf(path, sizeof path, "%s/definition.json", dir);
    kh_test_write_file(path, def);
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(wls[i]) + 1;
    char *text = calloc(len, 1);
    for (size_t i = 0; i < n; i++) {
        strcat(text, wls[i]);
        strcat(text, "\n");
    }
    snprintf(path, sizeof path, "%s/workloads.jsonl", dir);
    kh_test_write_file(path, text);
    free(text);
    return dir;
}

#define TOY_DEF(constraints)                                                                    \
    "{\"name\": \"toy\", \"op_type\": \"toy\","                                                  \
    " \"axes\": {\"m\": {\"type\": \"var\"}, \"n\": {\"type\": \"var\"}, \"k\": {\"type\": \"var\"},"\
    " \"q\": {\"type\": \"var\"}, \"h\": {\"type\": \"const\", \"value\": 16}},"                  \
    " \"constraints\": [" constraints "],"                                                       \
    " \"inputs\": {\"x\": {\"shape\": [\"m\", \"n\", \"h\"], \"dtype\": \"float32\"},"              \
    " \"lens\": {\"shape\": [\"k\"], \"dtype\": \"float32\"},"                                     \
    " \"idx\": {\"shape\": [\"q\"], \"dtype\": \"int32\"}},"                                       \
    " \"outputs\": {\"y\": {\"shape\": [\"m\", \"h\"], \"dtype\": \"float32\"}},"                  \
    " \"reference\": \"def run(x, lens, idx):\\n    return x.sum(1)\\n\"}"

#define TOY_WL(id, m, n, k, q)                                                                  \
    "{\"definition\": \"toy\", \"solution\": null, \"evaluation\": null, \"workload\": {\"uuid\": \"" \
    id "\", \"axes\": {\"m\": " #m ", \"n\": " #n ", \"k\": " #k ", \"q\": " #q "},"              \
    " \"inputs\": {\"x\": {\"type\": \"random\"}, \"lens\": {\"type\": \"random\"},"               \
    " \"idx\": {\"type\": \"random\"}}}}"

static const char *const TOY_WLS[] = {
    TOY_WL("t1", 8, 5, 3, 4),  TOY_WL("t2", 16, 9, 3, 4),  TOY_WL("t3", 24, 13, 3, 4),
    TOY_WL("t4", 32, 17, 3, 4), TOY_WL("t5", 64, 33, 3, 4), TOY_WL("t6", 16, 33, 3, 4),
};

/* Two var axes under constraints that tie them together; k is read by a
 * constraint on tensor data and q sizes an int32 index tensor: neither may
 * change. */
static void test_constraints_hold(void **state)
{
    (void)state;
    char *dir = write_pkg(TOY_DEF("\"m <= 2 * n\", \"n % 2 == 1\", \"k == lens[0].item()\""),
                          TOY_WLS, KH_ARRAY_LEN(TOY_WLS));
    pkg p;
    pkg_load(&p, dir);
    kh_shapes s = KH_SHAPES_INIT;
    draw(&p, 12, 3, &s);
    print_shapes(&p, &s, 3);
    assert_int_equal(s.n, 12);
    check_invariants(&p, &s);
    int m_changed = 0, n_changed = 0;
    for (size_t i = 0; i < s.n; i++) {
        int64_t m = axis_of(&p, &s.w[i], "m"), n = axis_of(&p, &s.w[i], "n");
        assert_true(m <= 2 * n);
        assert_int_equal(n % 2, 1);
        assert_int_equal(axis_of(&p, &s.w[i], "k"), 3);
        assert_int_equal(axis_of(&p, &s.w[i], "q"), 4);
        m_changed |= m != axis_of(&p, s.from[i], "m");
        n_changed |= n != axis_of(&p, s.from[i], "n");
    }
    assert_true(m_changed && n_changed);
    kh_shapes_free(&s);

    /* asking for more than exists: all admissible ones, and the count of why not */
    draw(&p, 100000, 3, &s);
    assert_true(s.n > 12 && s.n < 100000);
    check_invariants(&p, &s);
    assert_non_null(strstr(s.note, "violate a constraint"));
    assert_non_null(strstr(s.note, "1.25 x"));
    kh_shapes_free(&s);
    pkg_free(&p);
    kh_test_rmtree(dir);
    free(dir);
}

/* Bytes grow with the square of m: m = 48 (the one multiple of 8 but not of 32
 * above the largest listed m, always a candidate) needs 1.44 times the
 * largest listed workload's bytes, and is refused like every m above 44. */
static void test_size_bound(void **state)
{
    (void)state;
    const char *def = "{\"name\": \"sq\", \"op_type\": \"toy\","
                      " \"axes\": {\"m\": {\"type\": \"var\"}},"
                      " \"inputs\": {\"x\": {\"shape\": [\"m\", \"m\"], \"dtype\": \"float32\"}},"
                      " \"outputs\": {\"y\": {\"shape\": [\"m\"], \"dtype\": \"float32\"}},"
                      " \"reference\": \"def run(x):\\n    return x.sum(1)\\n\"}";
#define SQ_WL(id, m)                                                                            \
    "{\"definition\": \"sq\", \"solution\": null, \"evaluation\": null, \"workload\": {\"uuid\": \"" \
    id "\", \"axes\": {\"m\": " #m "}, \"inputs\": {\"x\": {\"type\": \"random\"}}}}"
    const char *const wls[] = {SQ_WL("s1", 10), SQ_WL("s2", 20), SQ_WL("s3", 40)};
    char *dir = write_pkg(def, wls, KH_ARRAY_LEN(wls));
    pkg p;
    pkg_load(&p, dir);
    kh_shapes s = KH_SHAPES_INIT;
    draw(&p, 1000, 5, &s);
    print_shapes(&p, &s, 5);
    assert_true(s.n >= 10);
    check_invariants(&p, &s);
    int above = 0;
    for (size_t i = 0; i < s.n; i++) {
        assert_true(s.w[i].axes[0] <= 44);
        above |= s.w[i].axes[0] > 40;
    }
    assert_true(above); /* 41 and 42 are candidates and fit */
    assert_null(strstr(s.note, " 0 need more"));
    kh_shapes_free(&s);
    pkg_free(&p);
    kh_test_rmtree(dir);
    free(dir);
}

/* A constraint that does not parse could forbid anything: nothing is drawn,
 * and the note names it. */
static void test_unparsable_constraint(void **state)
{
    (void)state;
    char *dir = write_pkg(TOY_DEF("\"m <= 2 * * n\""), TOY_WLS, KH_ARRAY_LEN(TOY_WLS));
    pkg p;
    pkg_load(&p, dir);
    assert_null(p.d->constraints[0].expr);
    kh_shapes s = KH_SHAPES_INIT;
    draw(&p, 8, 1, &s);
    assert_int_equal(s.n, 0);
    assert_non_null(strstr(s.note, "does not parse"));
    kh_shapes_free(&s);
    pkg_free(&p);
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_gdn_decode),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_safetensors_only),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_n0),
        cmocka_unit_test(test_small_sizes),
        cmocka_unit_test(test_constraints_hold),
        cmocka_unit_test(test_size_bound),
        cmocka_unit_test(test_unparsable_constraint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
