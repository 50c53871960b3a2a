/* expr.h: the small integer expression language over axis names, used by
 * definition constraints, launch manifests (grid, block, shared memory,
 * workspace sizes) and speed-of-light bounds.
 *
 * Syntax (Python-like, so FlashInfer-Bench constraints parse as written):
 *   integers (decimal or 0x hex), names (axis names), parentheses
 *   + - * / // %   binary; / and // are both floor division and % is the
 *                  floor remainder (Python's rules: a == (a / b) * b + a % b)
 *   unary - and +
 *   ceil_div(a, b), min(a, b, ...), max(a, b, ...)
 *   == != < <= > >=  yield 0 or 1; a chain (a < b < c) is rejected, because
 *                    Python and C read it differently
 *   and or not (also && || !)  short-circuit, yield 0 or 1
 *   t.shape[i]       dimension i of tensor t (negative i counts from the end);
 *                    the task layer resolves it to the axis in t's shape
 *   t[i].item()      the value of element i of tensor t: needs tensor data,
 *                    so a task check reports such a constraint as deferred
 * Arithmetic is int64; overflow and division by zero are errors, never UB.
 * Truth: nonzero is true. */
#ifndef KH_EXPR_H
#define KH_EXPR_H

#include "core/kh.h"

#include <stdint.h>

typedef struct kh_expr kh_expr;

typedef enum kh_expr_var_kind {
    KH_EXPR_AXIS,  /* a plain name */
    KH_EXPR_SHAPE, /* name.shape[index] */
    KH_EXPR_DATA,  /* name[index].item() */
} kh_expr_var_kind;

/* One distinct free name of an expression. */
typedef struct kh_expr_var {
    kh_expr_var_kind kind;
    const char *name;  /* the axis or tensor name */
    int64_t index;     /* SHAPE / DATA: the index as written (may be negative) */
    const char *text;  /* canonical spelling: "n", "t.shape[-1]", "t[-1].item()" */
    int column;        /* 1-based column of its first use */
} kh_expr_var;

/* Parse text once.  On error returns KH_EPARSE with a message of the form
 * "column 7: expected ')' after the arguments of min, found 'x'".  The
 * expression owns a copy of text; free with kh_expr_free. */
kh_status kh_expr_parse(const char *text, kh_expr **out, kh_err *err);
void kh_expr_free(kh_expr *e);

/* The source text (owned by e). */
const char *kh_expr_text(const kh_expr *e);
/* The distinct free names, in order of first use; pointers live as long as e. */
size_t kh_expr_nvars(const kh_expr *e);
const kh_expr_var *kh_expr_var_at(const kh_expr *e, size_t i);
/* 1 if some var is of kind DATA (the value depends on tensor contents). */
int kh_expr_needs_data(const kh_expr *e);
/* 1 if the top-level operator is a comparison or and/or/not (a predicate). */
int kh_expr_is_predicate(const kh_expr *e);

/* Evaluate with vals[i] the value of var i (kh_expr_nvars entries).  Errors
 * (KH_EINVAL) are overflow and division by zero; the message names the
 * operator, its column and its operands: "column 3: division by zero (7 / 0)". */
kh_status kh_expr_eval(const kh_expr *e, const int64_t *vals, int64_t *out, kh_err *err);

/* Evaluate, asking lookup for each var's value.  lookup returns 0 and sets
 * *val when it knows the var, nonzero when it does not (the evaluation then
 * fails with "column N: unknown name 'x'", KH_ENOTFOUND). */
typedef int (*kh_expr_lookup_fn)(void *ctx, const kh_expr_var *var, int64_t *val);
kh_status kh_expr_eval_lookup(const kh_expr *e, kh_expr_lookup_fn lookup, void *ctx,
                              int64_t *out, kh_err *err);

/* A simple environment of name = value pairs, for lookup by plain name (axis
 * vars) or by canonical text (shape and data vars). */
typedef struct kh_expr_env {
    size_t n;
    const char *const *names;
    const int64_t *values;
} kh_expr_env;
int kh_expr_env_lookup(void *env, const kh_expr_var *var, int64_t *val);

/* Parse and evaluate in one step (for one-off use). */
kh_status kh_expr_eval_text(const char *text, const kh_expr_env *env, int64_t *out, kh_err *err);

/* ---- translation to C++ ---------------------------------------------------
 * For code that must compute a manifest's expressions where khlua does not
 * run (the host entry of an exported FlashInfer-Bench solution, fib_export.h).
 * kh_expr_to_cpp spells e as one C++ expression of type int64_t with the
 * same meaning as kh_expr_eval: every operation that can fail calls a
 * checked helper of namespace khx (kh_expr_cpp_helpers holds their source),
 * which throws khx::expr_error {column, message} on overflow or division by
 * zero; comparisons, and/or/not yield 0 or 1, and and/or short-circuit.
 * Literals are INT64_C(n) (<cstdint>).  Only the order in which the two
 * operands of one operation are evaluated is C++'s, so where both fail the
 * message may name the other one.
 *
 * spell writes the C++ spelling of var into buf (n bytes) and returns 0, or
 * writes why it cannot (a data reference, an unknown name) and returns
 * nonzero: the translation then fails with KH_EUNSUPPORTED and
 * "column N: <why>".  *out is malloc'ed (caller frees). */
typedef int (*kh_expr_spell_fn)(void *ctx, const kh_expr_var *var, char *buf, size_t n);
kh_status kh_expr_to_cpp(const kh_expr *e, kh_expr_spell_fn spell, void *ctx, char **out,
                         kh_err *err);
/* The C++17 source of namespace khx: the helpers kh_expr_to_cpp calls and
 * struct expr_error.  Needs <cstdint> and <cstdio>; static storage. */
const char *kh_expr_cpp_helpers(void);

#endif
