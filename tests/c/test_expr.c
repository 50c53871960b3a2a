/* test_expr.c: the integer expression language (engine/task/expr.h): Python's
 * precedence and floor-division rules on random operands, short-circuit
 * logic, every error with its column, overflow and division by zero; its
 * translation to C++ (kh_expr_to_cpp): the text of every node kind, and
 * random expressions compiled with the system's C++ compiler and run on
 * ordinary and extreme values, each value and each failure the same as
 * kh_expr_eval's. */
#include "kh_test.h"

#include "task/expr.h"
#include "core/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned seed;

static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(rand() % (int)(hi - lo + 1)); }

static int64_t eval3(const char *text, int64_t a, int64_t b, int64_t c)
{
    const char *names[] = {"a", "b", "c"};
    int64_t vals[] = {a, b, c};
    kh_expr_env env = {3, names, vals};
    int64_t out = 0;
    kh_err err;
    kh_status st = kh_expr_eval_text(text, &env, &out, &err);
    if (st)
        fail_msg("'%s' with a=%lld b=%lld c=%lld: %s (seed %u)", text, (long long)a, (long long)b,
                 (long long)c, err.msg, seed);
    return out;
}

/* The message of a failed parse or evaluation. */
static const char *err_of(const char *text, kh_status want)
{
    static kh_err err;
    const char *names[] = {"a", "b", "big"};
    int64_t vals[] = {7, 0, INT64_MAX};
    kh_expr_env env = {3, names, vals};
    int64_t out;
    kh_status st = kh_expr_eval_text(text, &env, &out, &err);
    if (st != want)
        fail_msg("'%s': expected status %s, got %s (%s)", text, kh_status_name(want),
                 kh_status_name(st), st ? err.msg : "no error");
    return err.msg;
}

static void expect_msg(const char *text, kh_status want, const char *substr)
{
    const char *m = err_of(text, want);
    if (!strstr(m, substr))
        fail_msg("'%s': message '%s' lacks '%s'", text, m, substr);
}

static int64_t py_floordiv(int64_t a, int64_t b)
{
    /* independent of expr.c's formula: via the sign of the exact quotient */
    long double q = (long double)a / (long double)b;
    int64_t t = (int64_t)q;
    return (q < 0 && (long double)t != q) ? t - 1 : t;
}

static void test_precedence_random(void **state)
{
    (void)state;
    for (int i = 0; i < 500; i++) {
        int64_t a = rnd(-1000, 1000), b = rnd(-1000, 1000), c = rnd(-1000, 1000);
        assert_int_equal(eval3("a + b * c", a, b, c), a + b * c);
        assert_int_equal(eval3("(a + b) * c", a, b, c), (a + b) * c);
        assert_int_equal(eval3("a - b - c", a, b, c), a - b - c);
        assert_int_equal(eval3("-a * b + +c", a, b, c), -a * b + c);
        assert_int_equal(eval3("min(a, b, c)", a, b, c), a < b ? (a < c ? a : c) : (b < c ? b : c));
        assert_int_equal(eval3("max(a, b)", a, b, c), a > b ? a : b);
        assert_int_equal(eval3("a < b", a, b, c), a < b);
        assert_int_equal(eval3("a == b or b >= c", a, b, c), a == b || b >= c);
        assert_int_equal(eval3("not a > b and c != 0", a, b, c), !(a > b) && c != 0);
        assert_int_equal(eval3("a + b <= c * 2 && !(a == c)", a, b, c), a + b <= c * 2 && a != c);
        if (b != 0) {
            int64_t q = eval3("a / b", a, b, c), r = eval3("a % b", a, b, c);
            assert_int_equal(q, py_floordiv(a, b));
            assert_int_equal(eval3("a // b", a, b, c), q);
            assert_int_equal(q * b + r, a);
            if (b > 0)
                assert_true(r >= 0 && r < b);
            else
                assert_true(r <= 0 && r > b);
            int64_t cd = eval3("ceil_div(a, b)", a, b, c);
            assert_int_equal(cd, -py_floordiv(-a, b));
            if (a >= 0 && b > 0)
                assert_int_equal(cd, (a + b - 1) / b);
        }
    }
}

static void test_known_values(void **state)
{
    (void)state;
    assert_int_equal(eval3("-7 / 2", 0, 0, 0), -4);
    assert_int_equal(eval3("-7 % 2", 0, 0, 0), 1);
    assert_int_equal(eval3("7 % -2", 0, 0, 0), -1);
    assert_int_equal(eval3("ceil_div(-7, 2)", 0, 0, 0), -3);
    assert_int_equal(eval3("ceil_div(7, 2)", 0, 0, 0), 4);
    assert_int_equal(eval3("0x10 * 2", 0, 0, 0), 32);
    assert_int_equal(eval3("2 * 3 == 6", 0, 0, 0), 1);
}

static void test_short_circuit(void **state)
{
    (void)state;
    /* the right side would divide by zero; and/or must not evaluate it */
    assert_int_equal(eval3("b != 0 and a / b > 1", 9, 0, 0), 0);
    assert_int_equal(eval3("b == 0 or a / b > 1", 9, 0, 0), 1);
    expect_msg("a / b > 1 and b != 0", KH_EINVAL, "division by zero");
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_msg("a + * b", KH_EPARSE, "column 5: expected a number, a name or '('");
    expect_msg("(a + b", KH_EPARSE, "column 7: expected ')'");
    expect_msg("min(a)", KH_EPARSE, "min takes at least 2 arguments");
    expect_msg("ceil_div(a)", KH_EPARSE, "ceil_div takes 2 arguments");
    expect_msg("floor(a)", KH_EPARSE, "column 1: unknown function 'floor'");
    expect_msg("", KH_EPARSE, "empty expression");
    expect_msg("   ", KH_EPARSE, "empty expression");
    expect_msg("1.5 * a", KH_EPARSE, "only integers");
    expect_msg("a = b", KH_EPARSE, "column 3: '=' is assignment");
    expect_msg("a ** 2", KH_EPARSE, "column 3: '**'");
    expect_msg("a < b < c", KH_EPARSE, "column 7: chained comparison");
    expect_msg("a b", KH_EPARSE, "column 3: expected an operator or the end");
    expect_msg("a and", KH_EPARSE, "column 6: expected a number, a name or '('");
    expect_msg("99999999999999999999", KH_EPARSE, "does not fit in 64 bits");
    expect_msg("t.stride[0]", KH_EPARSE, "only t.shape[i]");
    expect_msg("t[0] + 1", KH_EPARSE, "'.item()'");
    expect_msg("t.shape[x]", KH_EPARSE, "expected an integer");
    char deep[400] = "";
    for (int i = 0; i < 120; i++)
        strcat(deep, "(");
    strcat(deep, "1");
    expect_msg(deep, KH_EPARSE, "nested deeper");
}

static void test_eval_errors(void **state)
{
    (void)state;
    expect_msg("a / b", KH_EINVAL, "column 3: division by zero");
    expect_msg("a % b", KH_EINVAL, "division by zero");
    expect_msg("1 + ceil_div(a, b)", KH_EINVAL, "column 5: division by zero (ceil_div(7, 0))");
    expect_msg("big + 1", KH_EINVAL, "column 5: integer overflow in 9223372036854775807 + 1");
    expect_msg("big * a", KH_EINVAL, "integer overflow");
    expect_msg("-big - 2", KH_EINVAL, "integer overflow");
    expect_msg("(-big - 1) / -1", KH_EINVAL, "integer overflow");
    expect_msg("a + nope", KH_ENOTFOUND, "column 5: unknown name 'nope'");
}

static void test_vars(void **state)
{
    (void)state;
    kh_expr *e;
    kh_err err;
    assert_int_equal(kh_expr_parse("n + t.shape[-1] * n - kv[-1].item() + t.shape[ -1 ]", &e, &err),
                     KH_OK);
    assert_int_equal(kh_expr_nvars(e), 3);
    assert_string_equal(kh_expr_var_at(e, 0)->text, "n");
    assert_int_equal(kh_expr_var_at(e, 0)->kind, KH_EXPR_AXIS);
    assert_string_equal(kh_expr_var_at(e, 1)->text, "t.shape[-1]");
    assert_string_equal(kh_expr_var_at(e, 1)->name, "t");
    assert_int_equal(kh_expr_var_at(e, 1)->index, -1);
    assert_int_equal(kh_expr_var_at(e, 1)->column, 5);
    assert_string_equal(kh_expr_var_at(e, 2)->text, "kv[-1].item()");
    assert_int_equal(kh_expr_var_at(e, 2)->kind, KH_EXPR_DATA);
    assert_true(kh_expr_needs_data(e));
    assert_false(kh_expr_is_predicate(e));
    int64_t n = rnd(1, 100), d0 = rnd(1, 100), kv = rnd(1, 100);
    int64_t vals[] = {n, d0, kv}, out;
    assert_int_equal(kh_expr_eval(e, vals, &out, &err), KH_OK);
    assert_int_equal(out, n + d0 * n - kv + d0);
    kh_expr_free(e);

    assert_int_equal(kh_expr_parse("len_indptr == batch_size + 1", &e, &err), KH_OK);
    assert_true(kh_expr_is_predicate(e));
    assert_false(kh_expr_needs_data(e));
    assert_string_equal(kh_expr_text(e), "len_indptr == batch_size + 1");
    kh_expr_free(e);
}

/* One parsed expression evaluated many times: the compact form is reused. */
static void test_many_evals(void **state)
{
    (void)state;
    kh_expr *e;
    kh_err err;
    assert_int_equal(kh_expr_parse("ceil_div(batch * heads, 4) * min(dim, 128) % 1000003", &e, &err),
                     KH_OK);
    for (int i = 0; i < 2000; i++) {
        int64_t b = rnd(1, 5000), h = rnd(1, 64), d = rnd(1, 512);
        int64_t vals[] = {b, h, d}, out;
        assert_int_equal(kh_expr_eval(e, vals, &out, &err), KH_OK);
        assert_int_equal(out, ((b * h + 3) / 4) * (d < 128 ? d : 128) % 1000003);
    }
    kh_expr_free(e);
}

/* ---- translation to C++ ------------------------------------------------------ */

/* a, b, c become va, vb, vc; t.shape[0] becomes t_0; anything else fails. */
static int spell3(void *ctx, const kh_expr_var *v, char *buf, size_t n)
{
    (void)ctx;
    if (v->kind == KH_EXPR_AXIS && strlen(v->name) == 1 && strchr("abc", v->name[0])) {
        snprintf(buf, n, "v%s", v->name);
        return 0;
    }
    if (v->kind == KH_EXPR_SHAPE && !strcmp(v->name, "t") && v->index == 0) {
        snprintf(buf, n, "t_0");
        return 0;
    }
    snprintf(buf, n, "'%s' %s", v->text,
             v->kind == KH_EXPR_DATA ? "reads tensor data" : "is not an axis here");
    return 1;
}

static char *to_cpp(const char *text)
{
    kh_expr *e;
    kh_err err;
    if (kh_expr_parse(text, &e, &err))
        fail_msg("'%s': %s", text, err.msg);
    char *out = NULL;
    kh_status st = kh_expr_to_cpp(e, spell3, NULL, &out, &err);
    kh_expr_free(e);
    if (st)
        fail_msg("'%s': expected a translation, got %s: %s", text, kh_status_name(st), err.msg);
    return out;
}

static void expect_cpp(const char *text, const char *want)
{
    char *got = to_cpp(text);
    if (strcmp(got, want))
        fail_msg("'%s':\n  expected %s\n  got      %s", text, want, got);
    free(got);
}

static void test_cpp_text(void **state)
{
    (void)state;
    /* every node kind, with the column of the operation it checks */
    expect_cpp("42", "INT64_C(42)");
    expect_cpp("0x10", "INT64_C(16)");
    expect_cpp("a", "va");
    expect_cpp("t.shape[0]", "t_0");
    expect_cpp("-a", "khx::neg(va, 1)");
    expect_cpp("+a", "va");
    expect_cpp("a + b * 2", "khx::add(va, khx::mul(vb, INT64_C(2), 7), 3)");
    expect_cpp("a - b", "khx::sub(va, vb, 3)");
    expect_cpp("a / b", "khx::floordiv(va, vb, 3)");
    expect_cpp("a // b", "khx::floordiv(va, vb, 3)");
    expect_cpp("a % b", "khx::floormod(va, vb, 3)");
    expect_cpp("ceil_div(a, 128)", "khx::ceil_div(va, INT64_C(128), 1)");
    expect_cpp("min(a, b, c)", "khx::min(khx::min(va, vb), vc)");
    expect_cpp("max(a, 1)", "khx::max(va, INT64_C(1))");
    expect_cpp("a == b", "((va) == (vb) ? INT64_C(1) : INT64_C(0))");
    expect_cpp("a != b", "((va) != (vb) ? INT64_C(1) : INT64_C(0))");
    expect_cpp("a < b", "((va) < (vb) ? INT64_C(1) : INT64_C(0))");
    expect_cpp("a <= b", "((va) <= (vb) ? INT64_C(1) : INT64_C(0))");
    expect_cpp("a > b", "((va) > (vb) ? INT64_C(1) : INT64_C(0))");
    expect_cpp("a >= b", "((va) >= (vb) ? INT64_C(1) : INT64_C(0))");
    expect_cpp("not a", "((va) == 0 ? INT64_C(1) : INT64_C(0))");
    expect_cpp("!a", "((va) == 0 ? INT64_C(1) : INT64_C(0))");
    expect_cpp("a and b", "((va) != 0 && (vb) != 0 ? INT64_C(1) : INT64_C(0))");
    expect_cpp("a or b", "((va) != 0 || (vb) != 0 ? INT64_C(1) : INT64_C(0))");
    expect_cpp("(a + 1) * (b - 1)",
               "khx::mul(khx::add(va, INT64_C(1), 4), khx::sub(vb, INT64_C(1), 14), 9)");
    expect_cpp("9223372036854775807", "INT64_C(9223372036854775807)");
    /* a name the caller cannot spell: the reason, at its column */
    kh_expr *e;
    kh_err err;
    char *out = (char *)"untouched";
    assert_int_equal(kh_expr_parse("a + x[0].item()", &e, &err), KH_OK);
    assert_int_equal(kh_expr_to_cpp(e, spell3, NULL, &out, &err), KH_EUNSUPPORTED);
    assert_null(out);
    assert_string_equal(err.msg, "column 5: 'x[0].item()' reads tensor data");
    kh_expr_free(e);
    assert_int_equal(kh_expr_parse("zz * 2", &e, &err), KH_OK);
    assert_int_equal(kh_expr_to_cpp(e, spell3, NULL, &out, &err), KH_EUNSUPPORTED);
    assert_string_equal(err.msg, "column 1: 'zz' is not an axis here");
    kh_expr_free(e);
}

/* A random expression over a, b, c using every operator and function. */
static void gen_expr(char *buf, size_t n, int depth)
{
    static const char *bin[] = {"+", "-", "*", "/", "//", "%", "==", "!=", "<", "<=", ">", ">=",
                                "and", "or"};
    static const char *leaf[] = {"a", "b", "c", "0", "1", "2", "3", "7", "128",
                                 "9223372036854775807", "0x7fffffff"};
    int r = depth <= 0 ? 0 : rand() % 10;
    char x[2048], y[2048], z[2048];
    if (r <= 2) {
        snprintf(buf, n, "%s", leaf[rand() % (int)KH_ARRAY_LEN(leaf)]);
    } else if (r == 3) {
        gen_expr(x, sizeof x, depth - 1);
        snprintf(buf, n, rand() % 2 ? "-(%s)" : "(not (%s))", x);
    } else if (r <= 7) {
        gen_expr(x, sizeof x, depth - 1);
        gen_expr(y, sizeof y, depth - 1);
        snprintf(buf, n, "(%s %s %s)", x, bin[rand() % (int)KH_ARRAY_LEN(bin)], y);
    } else {
        gen_expr(x, sizeof x, depth - 1);
        gen_expr(y, sizeof y, depth - 1);
        gen_expr(z, sizeof z, depth - 1);
        int f = rand() % 3;
        if (f == 0)
            snprintf(buf, n, "ceil_div(%s, %s)", x, y);
        else if (f == 1)
            snprintf(buf, n, "min(%s, %s, %s)", x, y, z);
        else
            snprintf(buf, n, "max(%s, %s)", x, y);
    }
}

#define NEXPR 300
#define NVALS 12

static void test_cpp_matches_eval(void **state)
{
    (void)state;
    const char *cxx = getenv("CXX") && *getenv("CXX") ? getenv("CXX") : "c++";
    int64_t vals[NVALS][3] = {
        {0, 0, 0}, {1, -1, 2}, {INT64_MAX, 1, -1}, {INT64_MIN, -1, 2}, {INT64_MIN, 2, INT64_MAX},
        {-7, 2, 3}, {7, -2, -3}, {1LL << 40, -(1LL << 33), 5},
    };
    for (int k = 8; k < NVALS; k++)
        for (int j = 0; j < 3; j++)
            vals[k][j] = rnd(-50, 50);
    static char texts[NEXPR][2048];
    char *dir = kh_test_tmpdir();
    char src[4096], bin[4096];
    snprintf(src, sizeof src, "%s/exprs.cpp", dir);
    snprintf(bin, sizeof bin, "%s/exprs", dir);
    FILE *f = fopen(src, "w");
    assert_non_null(f);
    fprintf(f, "#include <cstdint>\n#include <cstdio>\n%s\nint main()\n{\n"
               "    static const int64_t V[%d][3] = {\n", kh_expr_cpp_helpers(), NVALS);
    for (int k = 0; k < NVALS; k++)
        fprintf(f, "        {INT64_C(%lld), INT64_C(%lld), INT64_C(%lld)},\n",
                (long long)vals[k][0], (long long)vals[k][1], (long long)vals[k][2]);
    fprintf(f, "    };\n    for (int k = 0; k < %d; k++) {\n"
               "        int64_t va = V[k][0], vb = V[k][1], vc = V[k][2];\n"
               "        (void)va; (void)vb; (void)vc;\n", NVALS);
    for (int i = 0; i < NEXPR; i++) {
        gen_expr(texts[i], sizeof texts[i], 1 + i % 4);
        char *c = to_cpp(texts[i]);
        fprintf(f, "        try { std::printf(\"%%lld\\n\", (long long)(%s)); }\n"
                   "        catch (const khx::expr_error &e) { std::printf(\"E %%d %%s\\n\", "
                   "e.column, e.message); }\n", c);
        free(c);
    }
    fprintf(f, "    }\n    return 0;\n}\n");
    assert_int_equal(fclose(f), 0);
    char *cc_argv[] = {(char *)cxx, "-std=c++17", "-O1", "-w", "-o", bin, src, NULL};
    kh_child_result res;
    kh_err err;
    assert_int_equal(kh_proc_run(cc_argv, 300, 1 << 20, &res, &err), KH_OK);
    if (!res.exited || res.exit_code == 127) {
        kh_child_result_free(&res);
        kh_test_rmtree(dir);
        free(dir);
        printf("# no C++ compiler (%s): the compiled comparison is skipped\n", cxx);
        skip();
    }
    if (res.exit_code)
        fail_msg("%s failed on the translation:\n%.4000s", cxx, res.out);
    kh_child_result_free(&res);
    char *run_argv[] = {bin, NULL};
    assert_int_equal(kh_proc_run(run_argv, 60, 1 << 22, &res, &err), KH_OK);
    assert_true(res.exited && res.exit_code == 0);
    /* the program prints expression by expression within each value set */
    const char *line = res.out;
    int compared = 0, failures = 0;
    for (int k = 0; k < NVALS; k++) {
        for (int i = 0; i < NEXPR; i++) {
            const char *nl = strchr(line, '\n');
            assert_non_null(nl);
            kh_expr *e;
            assert_int_equal(kh_expr_parse(texts[i], &e, &err), KH_OK);
            /* vars in order of first use: map each back to a, b or c */
            int64_t v[3];
            for (size_t j = 0; j < kh_expr_nvars(e); j++)
                v[j] = vals[k][kh_expr_var_at(e, j)->name[0] - 'a'];
            int64_t want = 0;
            kh_status st = kh_expr_eval(e, v, &want, &err);
            kh_expr_free(e);
            if (st) {
                if (line[0] != 'E')
                    fail_msg("'%s' at (%lld, %lld, %lld): kh_expr_eval fails (%s), C++ gives %.*s",
                             texts[i], (long long)vals[k][0], (long long)vals[k][1],
                             (long long)vals[k][2], err.msg, (int)(nl - line), line);
                failures++;
            } else {
                char buf[64];
                snprintf(buf, sizeof buf, "%lld", (long long)want);
                if (strlen(buf) != (size_t)(nl - line) || strncmp(buf, line, (size_t)(nl - line)))
                    fail_msg("'%s' at (%lld, %lld, %lld): expected %s, C++ gives %.*s (seed %u)",
                             texts[i], (long long)vals[k][0], (long long)vals[k][1],
                             (long long)vals[k][2], buf, (int)(nl - line), line, seed);
            }
            compared++;
            line = nl + 1;
        }
    }
    printf("# %d evaluations compared, %d of them failures in both\n", compared, failures);
    assert_true(failures > 0 && failures < compared);
    kh_child_result_free(&res);

    /* one failing operation: the same column and message as khlua's own */
    f = fopen(src, "w");
    assert_non_null(f);
    fprintf(f, "#include <cstdint>\n#include <cstdio>\n%s\nint main()\n{\n"
               "    int64_t va = 7, vb = 0, vc = INT64_MAX;\n    (void)va; (void)vb; (void)vc;\n",
            kh_expr_cpp_helpers());
    const char *one[] = {"a / b", "a % b", "ceil_div(a, b)", "c + 1", "c * 2", "-c - 2",
                         "b != 0 and a / b > 1"};
    for (size_t i = 0; i < KH_ARRAY_LEN(one); i++) {
        char *c = to_cpp(one[i]);
        fprintf(f, "    try { std::printf(\"%%lld\\n\", (long long)(%s)); }\n"
                   "    catch (const khx::expr_error &e) { std::printf(\"column %%d: %%s\\n\", "
                   "e.column, e.message); }\n", c);
        free(c);
    }
    fprintf(f, "    return 0;\n}\n");
    assert_int_equal(fclose(f), 0);
    assert_int_equal(kh_proc_run(cc_argv, 300, 1 << 20, &res, &err), KH_OK);
    if (res.exit_code)
        fail_msg("%s failed:\n%.4000s", cxx, res.out);
    kh_child_result_free(&res);
    assert_int_equal(kh_proc_run(run_argv, 60, 1 << 20, &res, &err), KH_OK);
    assert_string_equal(res.out, "column 3: division by zero (7 / 0)\n"
                                 "column 3: division by zero (7 % 0)\n"
                                 "column 1: division by zero (ceil_div(7, 0))\n"
                                 "column 3: integer overflow in 9223372036854775807 + 1\n"
                                 "column 3: integer overflow in 9223372036854775807 * 2\n"
                                 "column 4: integer overflow in -9223372036854775807 - 2\n"
                                 "0\n");
    kh_child_result_free(&res);
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    seed = (unsigned)time(NULL);
    srand(seed);
    printf("# seed %u\n", seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precedence_random), cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_short_circuit),     cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_eval_errors),       cmocka_unit_test(test_vars),
        cmocka_unit_test(test_many_evals),        cmocka_unit_test(test_cpp_text),
        cmocka_unit_test(test_cpp_matches_eval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
