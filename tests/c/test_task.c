/* test_task.c: engine/task/task.h: the rmsnorm fixture package loads cleanly with
 * khlua's additions resolved; the real FlashInfer-Bench copy in
 * ../shared/data loads without errors and every one of its constraints is
 * either evaluated or reported as needing tensor data; broken definitions
 * get problems at the right file, line and field. */
#include "kh_test.h"

#include "eval/pyref.h"
#include "task/task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static char *fixture(const char *rel)
{
    char *p = malloc(1024);
    snprintf(p, 1024, "%s/tests/fixtures/task/%s", kh_test_source_dir(), rel);
    return p;
}

static kh_task_set *load_ok(const char *path, int strict)
{
    kh_task_opts o = {.strict = strict};
    kh_task_set *s;
    kh_err err;
    if (kh_task_load(path, &o, &s, &err))
        fail_msg("loading %s: %s", path, err.msg);
    return s;
}

static void dump(const kh_task_set *s)
{
    char buf[2048];
    for (size_t i = 0; i < kh_task_nproblems(s); i++)
        print_message("# %s\n", kh_task_problem_format(kh_task_problem_at(s, i), buf, sizeof buf));
}

static void test_fixture_package(void **state)
{
    (void)state;
    char *dir = fixture("rmsnorm");
    kh_task_set *s = load_ok(dir, 0);
    const kh_task_summary *m = kh_task_set_summary(s);
    dump(s);
    assert_string_equal(m->kind, "package");
    assert_int_equal(m->errors, 0);
    assert_int_equal(m->warnings, 0);
    assert_int_equal(kh_task_ndefs(s), 1);
    assert_int_equal(kh_task_nworkloads(s), 3);
    assert_int_equal(kh_task_nsolutions(s), 2);
    assert_int_equal(m->candidates, 2);
    assert_int_equal(m->constraint_checks, 6);

    const kh_task_def *d = kh_task_find_def(s, "rmsnorm_h512");
    assert_non_null(d);
    assert_string_equal(d->evaluator, "default");
    assert_string_equal(d->reference, "rmsnorm_h512_ref_c");
    assert_true(d->atol == 0.01 && d->required_matched_ratio == 1.0);
    int h = kh_task_axis_index(d, "hidden_size"), b = kh_task_axis_index(d, "batch_size");
    assert_true(h >= 0 && b >= 0);
    assert_true(d->axes[h].is_const && d->axes[h].value == 512);
    assert_true(d->inputs[2].is_scalar);
    assert_int_equal(d->outputs[0].rank, 2);

    const kh_task_workload *w = kh_task_workload_at(s, 2);
    assert_true(w->axes_ok);
    assert_int_equal(w->axes[b], 333);
    assert_int_equal(w->axes[h], 512);

    /* speed of light on random axis values: bytes default to every tensor */
    srand((unsigned)time(NULL));
    for (int i = 0; i < 50; i++) {
        int64_t axes[2];
        axes[b] = 1 + rand() % 4096;
        axes[h] = 512;
        int64_t bytes, flops;
        kh_err err;
        assert_int_equal(kh_task_speed_of_light(d, axes, &bytes, &flops, &err), KH_OK);
        int64_t want = axes[b] * 512 * 2 /* x */ + 512 * 2 /* weight */ + 4 /* eps */ +
                       axes[b] * 512 * 2 /* output */;
        assert_int_equal(bytes, want);
        assert_int_equal(flops, 4 * axes[b] * 512);

        const kh_task_solution *sol = kh_task_find_solution(s, "rmsnorm_h512_cuda_v1");
        assert_non_null(sol);
        assert_non_null(sol->manifest);
        assert_int_equal(sol->manifest->nlaunches, 2);
        kh_task_launch_dims dims[2];
        int64_t ws[1];
        assert_int_equal(kh_task_manifest_resolve(sol, axes, dims, ws, &err), KH_OK);
        assert_int_equal(ws[0], 4 * axes[b]);
        assert_int_equal(dims[0].grid[0], axes[b]);
        assert_int_equal(dims[0].grid[1], 2);
        assert_int_equal(dims[0].block[0], 256);
        assert_int_equal(dims[0].shared_bytes, 32);
        assert_int_equal(dims[1].grid[0], (axes[b] * 512 + 1023) / 1024);
        assert_int_equal(dims[1].block[1], 1);
    }
    const kh_task_solution *ref = kh_task_find_solution(s, "rmsnorm_h512_ref_c");
    assert_true(ref->manifest && ref->manifest->host);
    assert_string_equal(ref->manifest->function, "rmsnorm_ref");
    assert_int_equal(ref->manifest->nargs, 6);
    assert_int_equal(ref->manifest->args[2].kind, KH_TASK_ARG_SCALAR);
    assert_string_equal(ref->manifest->args[4].type, "int64");
    kh_task_set_free(s);
    free(dir);
}

static void test_real_dataset(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/../shared/data/flashinfer-trace", kh_test_source_dir());
    FILE *probe = fopen(path, "r");
    if (!probe) {
        print_message("# SKIP: %s absent (the shared FlashInfer-Bench copy)\n", path);
        skip();
    }
    fclose(probe);
    double t0 = kh_now();
    kh_task_set *s = load_ok(path, 0);
    double dt = kh_now() - t0;
    print_message("# loaded %s in %.3f s\n", path, dt);
    const kh_task_summary *m = kh_task_set_summary(s);
    if (m->errors)
        dump(s);
    assert_int_equal(m->errors, 0);
    assert_int_equal(m->definitions, 130);
    assert_int_equal(m->workload_files, 24);
    assert_int_equal(m->workloads, 627);
    assert_int_equal(m->constraints, 192);
    assert_int_equal(m->blobs_missing, 651);

    /* Every constraint is either evaluated against all workloads of its
     * definition or needs tensor data; count both independently. */
    size_t evaluable = 0, data = 0, checks = 0;
    for (size_t i = 0; i < kh_task_ndefs(s); i++) {
        const kh_task_def *d = kh_task_def_at(s, i);
        for (size_t k = 0; k < d->nconstraints; k++) {
            const kh_task_constraint *c = &d->constraints[k];
            assert_non_null(c->expr);
            if (kh_expr_needs_data(c->expr)) {
                data++;
                continue;
            }
            evaluable++;
            for (size_t j = 0; j < kh_task_nworkloads(s); j++) {
                const kh_task_workload *w = kh_task_workload_at(s, j);
                if (w->def != d)
                    continue;
                int64_t r;
                kh_err err;
                assert_int_equal(kh_task_eval(d, w->axes, c->expr, NULL, NULL, &r, &err), KH_OK);
                assert_int_equal(r, 1);
                checks++;
            }
        }
    }
    assert_int_equal(evaluable + data, 192);
    assert_int_equal(data, m->deferred);
    assert_int_equal(checks, m->constraint_checks);
    assert_int_equal(data, 87);
    assert_int_equal(kh_task_ndeferred(s), 4);
    assert_true(dt < 5.0);

    /* the contest MoE definition gets the low-bit evaluator by FIB's rule */
    const kh_task_def *moe =
        kh_task_find_def(s, "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048");
    assert_non_null(moe);
    assert_string_equal(moe->evaluator, "lowbit");
    assert_true(moe->required_matched_ratio == 0.95);
    kh_task_set_free(s);
}

/* Load text as a lone definition file; return the set (caller frees). */
static kh_task_set *load_text(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    kh_test_write_file(path, text);
    return load_ok(path, 0);
}

/* Assert a problem with this line, field and message fragment exists. */
static void has_problem(const kh_task_set *s, int line, const char *field, const char *frag)
{
    char buf[2048];
    for (size_t i = 0; i < kh_task_nproblems(s); i++) {
        const kh_task_problem *p = kh_task_problem_at(s, i);
        if (p->line == line && !strcmp(p->field, field) && strstr(p->msg, frag))
            return;
    }
    for (size_t i = 0; i < kh_task_nproblems(s); i++)
        print_message("# have: %s\n", kh_task_problem_format(kh_task_problem_at(s, i), buf, sizeof buf));
    fail_msg("no problem at line %d, field %s, with '%s'", line, field, frag);
}

static const char *GOOD_DEF =
    "{\n"                                                              /* 1 */
    "  \"name\": \"tiny\",\n"                                          /* 2 */
    "  \"op_type\": \"gemm\",\n"                                       /* 3 */
    "  \"axes\": {\n"                                                  /* 4 */
    "    \"M\": {\"type\": \"var\"},\n"                                /* 5 */
    "    \"N\": {\"type\": \"const\", \"value\": 64}\n"                /* 6 */
    "  },\n"                                                           /* 7 */
    "  \"inputs\": {\n"                                                /* 8 */
    "    \"a\": {\"shape\": [\"M\", \"N\"], \"dtype\": \"float16\"}\n" /* 9 */
    "  },\n"                                                           /* 10 */
    "  \"outputs\": {\n"                                               /* 11 */
    "    \"c\": {\"shape\": [\"M\"], \"dtype\": \"float32\"}\n"        /* 12 */
    "  },\n"                                                           /* 13 */
    "  \"constraints\": [\"N % 16 == 0\"],\n"                          /* 14 */
    "  \"reference\": \"def run(a):\\n    return a.sum(-1)\\n\"\n"     /* 15 */
    "}\n";

static char *replace(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at)
        fail_msg("fixture text lacks '%s'", from);
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return out;
}

static void test_broken_definitions(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir();
    kh_task_set *s = load_text(dir, "good.json", GOOD_DEF);
    dump(s);
    assert_int_equal(kh_task_set_summary(s)->errors, 0);
    kh_task_set_free(s);

    struct {
        const char *from, *to;
        int line;
        const char *field, *frag;
    } cases[] = {
        {"  \"op_type\": \"gemm\",\n", "", 1, "op_type", "missing; expected a non-empty string"},
        {"\"float16\"", "\"float99\"", 9, "inputs.a.dtype", "got \"float99\""},
        {"[\"M\", \"N\"]", "[\"M\", \"K\"]", 9, "inputs.a.shape[1]",
         "expected an axis name defined in axes, got \"K\""},
        /* the parser notices the stray '[' where the next member starts */
        {"\"axes\": {", "\"axes\": [{", 8, "json", "invalid JSON at column 11"},
        {"\"value\": 64", "\"value\": \"64\"", 6, "axes.N.value", "expected an integer >= 0, got a string"},
        {"\"type\": \"var\"", "\"type\": \"variable\"", 5, "axes.M.type",
         "expected \"const\" or \"var\", got \"variable\""},
        {"\"constraints\": [\"N % 16 == 0\"]", "\"constraints\": [\"N %% 16 == 0\"]", 14,
         "constraints[0]", "column 4"},
        {"\"constraints\": [\"N % 16 == 0\"]", "\"constraints\": [\"P > 0\"]", 14, "constraints[0]",
         "'P' is not an axis of tiny"},
        {"\"c\": {", "\"a\": {", 12, "outputs.a", "also an input"},
        {"\"a\": {\"shape\"", "\"a\": {\"shape\": null, \"shape\"", 9, "json", "duplicate object key"},
        {"def run(a)", "def go(a)", 15, "reference", "top-level 'def run(...)'"},
        {"\"inputs\": {", "\"inputs\": [{", 11, "json", "invalid JSON at column 12"},
    };
    for (size_t i = 0; i < KH_ARRAY_LEN(cases); i++) {
        char *text = replace(GOOD_DEF, cases[i].from, cases[i].to);
        s = load_text(dir, "broken.json", text);
        has_problem(s, cases[i].line, cases[i].field, cases[i].frag);
        assert_true(kh_task_set_summary(s)->errors > 0);
        kh_task_set_free(s);
        free(text);
    }
    /* truncated: cut the good text at a random point inside */
    for (int k = 0; k < 5; k++) {
        size_t len = strlen(GOOD_DEF), cut = 5 + (size_t)rand() % (len - 10);
        char *text = strndup(GOOD_DEF, cut);
        s = load_text(dir, "cut.json", text);
        assert_int_equal(kh_task_set_summary(s)->errors, 1);
        assert_string_equal(kh_task_problem_at(s, 0)->field, "json");
        assert_non_null(strstr(kh_task_problem_at(s, 0)->msg, "invalid JSON"));
        kh_task_set_free(s);
        free(text);
    }
    kh_test_rmtree(dir);
    free(dir);
}

/* Non-finite floats as FlashInfer-Bench writes them: bare NaN / Infinity /
 * -Infinity tokens (Python's json module) are read as the strings pydantic
 * writes for them, never inside strings; a syntax error after one is named
 * at its line and column as written. */
static void test_nonfinite_tokens(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/definitions", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/traces", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/definitions/tiny.json", dir);
    kh_test_write_file(path, GOOD_DEF);
    const char *head = "{\"definition\": \"tiny\", \"workload\": {\"uuid\": \"u1\", \"axes\": "
                       "{\"M\": 4}, \"inputs\": {\"a\": {\"type\": \"random\"}}}, \"solution\": "
                       "\"s\", \"evaluation\": {\"status\": \"INCORRECT_NUMERICAL\", "
                       "\"environment\": {\"hardware\": \"H200\", \"libs\": {}}, \"timestamp\": "
                       "\"t\", \"log\": \"NaN \\\"Infinity\\\" -Infinity\", \"correctness\": "
                       "{\"max_relative_error\": NaN, \"max_absolute_error\": ";
    char text[4096];
    snprintf(text, sizeof text, "%sInfinity}, \"performance\": null}}\n"
             "%s-Infinity}, \"performance\": null}}\n"
             "%sInfinity}, \"performance\": nul}}\n", head, head, head);
    snprintf(path, sizeof path, "%s/traces/tiny.jsonl", dir);
    kh_test_write_file(path, text);
    kh_task_set *s = load_ok(dir, 0);
    has_problem(s, 2, "evaluation.correctness.max_absolute_error",
                "expected a number >= 0 or NaN, got -inf");
    /* the column of the stray "nul" in the line as written */
    char line3[2048];
    snprintf(line3, sizeof line3, "%sInfinity}, \"performance\": nul}}", head);
    json_error_t je;
    char *nan0 = replace(line3, "NaN,", "0.0,");
    char *same = replace(nan0, "Infinity}", "12345678}");
    assert_null(json_loads(same, 0, &je));
    free(nan0);
    free(same);
    char col[64];
    snprintf(col, sizeof col, "invalid JSON at column %d:", je.column);
    has_problem(s, 3, "json", col);
    assert_int_equal(kh_task_set_summary(s)->errors, 2);
    assert_int_equal(kh_task_set_summary(s)->traces, 2);
    const kh_task_workload *w = kh_task_workload_at(s, 0);
    json_t *ev = json_object_get(w->record, "evaluation");
    assert_string_equal(json_string_value(json_object_get(ev, "log")), "NaN \"Infinity\" -Infinity");
    json_t *c = json_object_get(ev, "correctness");
    assert_string_equal(json_string_value(json_object_get(c, "max_relative_error")), "NaN");
    assert_string_equal(json_string_value(json_object_get(c, "max_absolute_error")), "Infinity");
    kh_task_set_free(s);
    kh_test_rmtree(dir);
    free(dir);
}

/* kh_pyref_inputs makes the workers' inputs; a skipped one stays NULL and
 * the others are the same bits as without skipping. */
static void test_pyref_inputs_skip(void **state)
{
    (void)state;
    char *dir = fixture("rmsnorm");
    kh_task_set *s = load_ok(dir, 0);
    const kh_task_def *d = kh_task_find_def(s, "rmsnorm_h512");
    const kh_task_workload *w = kh_task_workload_at(s, 1);
    assert_int_equal(d->ninputs, 3);
    kh_tensor *all[3], *some[3], *other[3];
    kh_err err;
    uint64_t seed = (uint64_t)rand() << 16 | (uint64_t)rand();
    if (kh_pyref_inputs(NULL, d, w, dir, seed, 0, 0, all, &err) ||
        kh_pyref_inputs(NULL, d, w, dir, seed, 0, 1, some, &err) ||
        kh_pyref_inputs(NULL, d, w, dir, seed + 1, 0, 0, other, &err))
        fail_msg("%s", err.msg);
    assert_non_null(all[0]);
    assert_non_null(all[1]);
    assert_null(all[2]); /* eps: the workload's scalar */
    assert_null(some[0]);
    assert_non_null(some[1]);
    assert_int_equal(all[0]->nbytes, (size_t)7 * 512 * 2);
    assert_int_equal(some[1]->nbytes, all[1]->nbytes);
    assert_memory_equal(some[1]->data, all[1]->data, all[1]->nbytes);
    /* and the bits depend on the seed */
    assert_memory_not_equal(other[0]->data, all[0]->data, all[0]->nbytes);
    for (int i = 0; i < 3; i++) {
        kh_tensor_free(all[i]);
        kh_tensor_free(some[i]);
        kh_tensor_free(other[i]);
    }
    kh_task_set_free(s);
    free(dir);
}

int main(void)
{
    srand((unsigned)time(NULL));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_package),
        cmocka_unit_test(test_real_dataset),
        cmocka_unit_test(test_broken_definitions),
        cmocka_unit_test(test_nonfinite_tokens),
        cmocka_unit_test(test_pyref_inputs_skip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
