/* test_expr.c: the integer expression language (engine/expr.h): Python's
 * precedence and floor-division rules on random operands, short-circuit
 * logic, every error with its column, overflow and division by zero. */
#include "kh_test.h"

#include "expr.h"

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

int main(void)
{
    seed = (unsigned)time(NULL);
    srand(seed);
    printf("# seed %u\n", seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precedence_random), cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_short_circuit),     cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_eval_errors),       cmocka_unit_test(test_vars),
        cmocka_unit_test(test_many_evals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
