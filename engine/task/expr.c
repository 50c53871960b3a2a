/* expr.c: the integer expression language of expr.h.  A recursive-descent
 * parser turns the text into one flat array of nodes (children by index) and
 * a table of distinct free names; evaluation walks that array with the
 * names' values, checking every operation for overflow and division by zero.
 * Name resolution (axis values, tensor shapes) is left to the caller. */
#include "task/expr.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_TEXT 4096

enum op {
    OP_INT, OP_VAR, OP_NEG,
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MOD, OP_CEILDIV, OP_MIN, OP_MAX,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
    OP_AND, OP_OR, OP_NOT,
};

typedef struct node {
    uint8_t op;
    int col;
    int64_t val; /* OP_INT: the literal; OP_VAR: the var index */
    int a, b;    /* children (node indices), -1 when absent */
} node;

struct kh_expr {
    char *text;
    node *nodes;
    int nnodes, cap;
    int root;
    kh_expr_var *vars;
    size_t nvars;
    int needs_data;
};

typedef struct parser {
    kh_expr *e;
    const char *s;
    size_t pos;
    int depth;
    kh_err *err;
    int failed;
} parser;

static const char *op_spelling(int op)
{
    static const char *names[] = {
        [OP_ADD] = "+", [OP_SUB] = "-", [OP_MUL] = "*", [OP_DIV] = "/", [OP_MOD] = "%",
        [OP_CEILDIV] = "ceil_div", [OP_MIN] = "min", [OP_MAX] = "max", [OP_NEG] = "-",
        [OP_EQ] = "==", [OP_NE] = "!=", [OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">",
        [OP_GE] = ">=",
    };
    return op < (int)KH_ARRAY_LEN(names) && names[op] ? names[op] : "?";
}

/* ---- lexing helpers --------------------------------------------------------- */
static void skip_ws(parser *p)
{
    while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
           p->s[p->pos] == '\r')
        p->pos++;
}

static int col(const parser *p) { return (int)p->pos + 1; }

/* A short description of what stands at the cursor, for messages. */
static void describe_here(const parser *p, char *buf, size_t n)
{
    const char *c = p->s + p->pos;
    if (!*c) {
        snprintf(buf, n, "the end of the expression");
        return;
    }
    size_t len = 0;
    if (isalnum((unsigned char)*c) || *c == '_')
        while (isalnum((unsigned char)c[len]) || c[len] == '_')
            len++;
    else
        len = 1;
    if (len > 24)
        len = 24;
    snprintf(buf, n, "'%.*s'", (int)len, c);
}

static int fail(parser *p, int column, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser *p, int column, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    p->failed = 1;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kh_err_set(p->err, KH_EPARSE, "column %d: %s", column, msg);
    return -1;
}

static int expect_fail(parser *p, const char *what)
{
    char here[64];
    describe_here(p, here, sizeof here);
    return fail(p, col(p), "expected %s, found %s", what, here);
}

/* Match punctuation tok at the cursor (after blanks). */
static int accept(parser *p, const char *tok)
{
    skip_ws(p);
    size_t n = strlen(tok);
    if (strncmp(p->s + p->pos, tok, n))
        return 0;
    p->pos += n;
    return 1;
}

/* Match keyword kw as a whole word. */
static int accept_word(parser *p, const char *kw)
{
    skip_ws(p);
    size_t n = strlen(kw);
    const char *c = p->s + p->pos;
    if (strncmp(c, kw, n) || isalnum((unsigned char)c[n]) || c[n] == '_')
        return 0;
    p->pos += n;
    return 1;
}

static int is_keyword(const char *w, size_t n)
{
    static const char *kws[] = {"and", "or", "not"};
    for (size_t i = 0; i < KH_ARRAY_LEN(kws); i++)
        if (strlen(kws[i]) == n && !strncmp(w, kws[i], n))
            return 1;
    return 0;
}

/* ---- building ------------------------------------------------------------- */
static int add_node(parser *p, int op, int column, int64_t val, int a, int b)
{
    kh_expr *e = p->e;
    if (e->nnodes == e->cap) {
        int cap = e->cap ? e->cap * 2 : 16;
        node *nn = realloc(e->nodes, (size_t)cap * sizeof *nn);
        if (!nn) {
            p->failed = 1;
            kh_err_set(p->err, KH_ENOMEM, "out of memory parsing an expression");
            return -1;
        }
        e->nodes = nn;
        e->cap = cap;
    }
    e->nodes[e->nnodes] = (node){(uint8_t)op, column, val, a, b};
    return e->nnodes++;
}

static int add_var(parser *p, kh_expr_var_kind kind, const char *name, size_t nlen, int64_t index,
                   int column)
{
    char text[256];
    if (kind == KH_EXPR_AXIS)
        snprintf(text, sizeof text, "%.*s", (int)nlen, name);
    else if (kind == KH_EXPR_SHAPE)
        snprintf(text, sizeof text, "%.*s.shape[%lld]", (int)nlen, name, (long long)index);
    else
        snprintf(text, sizeof text, "%.*s[%lld].item()", (int)nlen, name, (long long)index);
    kh_expr *e = p->e;
    for (size_t i = 0; i < e->nvars; i++)
        if (!strcmp(e->vars[i].text, text))
            return add_node(p, OP_VAR, column, (int64_t)i, -1, -1);
    kh_expr_var *nv = realloc(e->vars, (e->nvars + 1) * sizeof *nv);
    if (!nv)
        goto oom;
    e->vars = nv;
    kh_expr_var *v = &e->vars[e->nvars];
    memset(v, 0, sizeof *v);
    char *nm = strndup(name, nlen);
    char *tx = kh_strdup(text);
    if (!nm || !tx) {
        free(nm);
        free(tx);
        goto oom;
    }
    *v = (kh_expr_var){kind, nm, index, tx, column};
    e->nvars++;
    if (kind == KH_EXPR_DATA)
        e->needs_data = 1;
    return add_node(p, OP_VAR, column, (int64_t)(e->nvars - 1), -1, -1);
oom:
    p->failed = 1;
    kh_err_set(p->err, KH_ENOMEM, "out of memory parsing an expression");
    return -1;
}

/* ---- grammar ---------------------------------------------------------------- */
static int parse_or(parser *p);

/* An integer literal at the cursor (optionally signed, for indices). */
static int parse_int_literal(parser *p, int64_t *out)
{
    skip_ws(p);
    int c0 = col(p);
    int neg = 0;
    if (p->s[p->pos] == '-') {
        neg = 1;
        p->pos++;
    }
    const char *c = p->s + p->pos;
    if (!isdigit((unsigned char)*c))
        return expect_fail(p, "an integer");
    int base = 10;
    if (c[0] == '0' && (c[1] == 'x' || c[1] == 'X')) {
        base = 16;
        c += 2;
        if (!isxdigit((unsigned char)*c))
            return fail(p, c0, "'0x' without hex digits");
    }
    uint64_t v = 0;
    const char *d = c;
    for (; base == 16 ? isxdigit((unsigned char)*d) : isdigit((unsigned char)*d); d++) {
        int dig = isdigit((unsigned char)*d) ? *d - '0' : (tolower((unsigned char)*d) - 'a' + 10);
        if (v > (UINT64_MAX - (uint64_t)dig) / (uint64_t)base)
            return fail(p, c0, "integer literal does not fit in 64 bits");
        v = v * (uint64_t)base + (uint64_t)dig;
    }
    if (isalpha((unsigned char)*d) || *d == '_' || *d == '.')
        return fail(p, c0, "malformed number (only integers are allowed)");
    if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
        return fail(p, c0, "integer literal does not fit in 64 bits");
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    p->pos = (size_t)(d - p->s);
    return 0;
}

static int parse_call(parser *p, const char *fn, size_t fnlen, int c0)
{
    int op;
    if (fnlen == 8 && !strncmp(fn, "ceil_div", 8))
        op = OP_CEILDIV;
    else if (fnlen == 3 && !strncmp(fn, "min", 3))
        op = OP_MIN;
    else if (fnlen == 3 && !strncmp(fn, "max", 3))
        op = OP_MAX;
    else
        return fail(p, c0, "unknown function '%.*s' (known: ceil_div, min, max)", (int)fnlen, fn);
    int args[64], n = 0;
    if (!accept(p, ")")) {
        do {
            if (n == (int)KH_ARRAY_LEN(args))
                return fail(p, col(p), "too many arguments to %.*s", (int)fnlen, fn);
            if ((args[n++] = parse_or(p)) < 0)
                return -1;
        } while (accept(p, ","));
        if (!accept(p, ")"))
            return expect_fail(p, "',' or ')' in the arguments of a function call");
    }
    if (op == OP_CEILDIV && n != 2)
        return fail(p, c0, "ceil_div takes 2 arguments, got %d", n);
    if (op != OP_CEILDIV && n < 2)
        return fail(p, c0, "%.*s takes at least 2 arguments, got %d", (int)fnlen, fn, n);
    int acc = args[0];
    for (int i = 1; i < n; i++)
        if ((acc = add_node(p, op, c0, 0, acc, args[i])) < 0)
            return -1;
    return acc;
}

static int parse_primary(parser *p)
{
    skip_ws(p);
    int c0 = col(p);
    char ch = p->s[p->pos];
    if (ch == '(') {
        p->pos++;
        int r = parse_or(p);
        if (r < 0)
            return -1;
        if (!accept(p, ")"))
            return expect_fail(p, "')'");
        return r;
    }
    if (isdigit((unsigned char)ch)) {
        int64_t v;
        if (parse_int_literal(p, &v) < 0)
            return -1;
        return add_node(p, OP_INT, c0, v, -1, -1);
    }
    if (isalpha((unsigned char)ch) || ch == '_') {
        const char *w = p->s + p->pos;
        size_t n = 0;
        while (isalnum((unsigned char)w[n]) || w[n] == '_')
            n++;
        if (is_keyword(w, n))
            return fail(p, c0, "expected an operand, found the operator '%.*s'", (int)n, w);
        if (n > 200)
            return fail(p, c0, "name longer than 200 characters");
        p->pos += n;
        if (accept(p, "("))
            return parse_call(p, w, n, c0);
        size_t save = p->pos;
        if (accept(p, ".")) {
            if (!accept_word(p, "shape")) {
                p->pos = save + 1;
                return expect_fail(p, "'shape' after '.' (only t.shape[i] is supported)");
            }
            int64_t idx;
            if (!accept(p, "["))
                return expect_fail(p, "'[' after '.shape'");
            if (parse_int_literal(p, &idx) < 0)
                return -1;
            if (!accept(p, "]"))
                return expect_fail(p, "']'");
            return add_var(p, KH_EXPR_SHAPE, w, n, idx, c0);
        }
        if (accept(p, "[")) {
            int64_t idx;
            if (parse_int_literal(p, &idx) < 0)
                return -1;
            if (!accept(p, "]"))
                return expect_fail(p, "']'");
            if (!accept(p, ".") || !accept_word(p, "item") || !accept(p, "(") || !accept(p, ")"))
                return expect_fail(p, "'.item()' after an element index");
            return add_var(p, KH_EXPR_DATA, w, n, idx, c0);
        }
        return add_var(p, KH_EXPR_AXIS, w, n, 0, c0);
    }
    return expect_fail(p, "a number, a name or '('");
}

static int parse_unary(parser *p)
{
    if (++p->depth > MAX_DEPTH)
        return fail(p, col(p), "expression nested deeper than %d", MAX_DEPTH);
    skip_ws(p);
    int c0 = col(p);
    int r;
    if (accept(p, "-")) {
        int a = parse_unary(p);
        r = a < 0 ? -1 : add_node(p, OP_NEG, c0, 0, a, -1);
    } else if (accept(p, "+")) {
        r = parse_unary(p);
    } else {
        r = parse_primary(p);
    }
    p->depth--;
    return r;
}

static int parse_mul(parser *p)
{
    int a = parse_unary(p);
    while (a >= 0) {
        skip_ws(p);
        int c0 = col(p), op;
        if (accept(p, "//") || accept(p, "/"))
            op = OP_DIV;
        else if (accept(p, "*")) {
            if (p->s[p->pos] == '*')
                return fail(p, c0, "'**' (power) is not supported");
            op = OP_MUL;
        } else if (accept(p, "%"))
            op = OP_MOD;
        else
            break;
        int b = parse_unary(p);
        if (b < 0)
            return -1;
        a = add_node(p, op, c0, 0, a, b);
    }
    return a;
}

static int parse_add(parser *p)
{
    int a = parse_mul(p);
    while (a >= 0) {
        skip_ws(p);
        int c0 = col(p), op;
        if (accept(p, "+"))
            op = OP_ADD;
        else if (accept(p, "-"))
            op = OP_SUB;
        else
            break;
        int b = parse_mul(p);
        if (b < 0)
            return -1;
        a = add_node(p, op, c0, 0, a, b);
    }
    return a;
}

static int accept_cmp(parser *p)
{
    skip_ws(p);
    if (accept(p, "=="))
        return OP_EQ;
    if (accept(p, "!="))
        return OP_NE;
    if (accept(p, "<="))
        return OP_LE;
    if (accept(p, ">="))
        return OP_GE;
    if (accept(p, "<"))
        return OP_LT;
    if (accept(p, ">"))
        return OP_GT;
    return -1;
}

static int parse_cmp(parser *p)
{
    int a = parse_add(p);
    if (a < 0)
        return -1;
    skip_ws(p);
    int c0 = col(p);
    if (p->s[p->pos] == '=' && p->s[p->pos + 1] != '=')
        return fail(p, c0, "'=' is assignment; compare with '=='");
    int op = accept_cmp(p);
    if (op < 0)
        return a;
    int b = parse_add(p);
    if (b < 0)
        return -1;
    skip_ws(p);
    int c1 = col(p);
    if (accept_cmp(p) >= 0)
        return fail(p, c1, "chained comparison; write 'a < b and b < c'");
    return add_node(p, op, c0, 0, a, b);
}

static int parse_not(parser *p)
{
    skip_ws(p);
    int c0 = col(p);
    if (accept_word(p, "not") || (p->s[p->pos] == '!' && p->s[p->pos + 1] != '=' && accept(p, "!"))) {
        if (++p->depth > MAX_DEPTH)
            return fail(p, c0, "expression nested deeper than %d", MAX_DEPTH);
        int a = parse_not(p);
        p->depth--;
        return a < 0 ? -1 : add_node(p, OP_NOT, c0, 0, a, -1);
    }
    return parse_cmp(p);
}

static int parse_and(parser *p)
{
    int a = parse_not(p);
    while (a >= 0) {
        skip_ws(p);
        int c0 = col(p);
        if (!accept_word(p, "and") && !accept(p, "&&"))
            break;
        int b = parse_not(p);
        if (b < 0)
            return -1;
        a = add_node(p, OP_AND, c0, 0, a, b);
    }
    return a;
}

static int parse_or(parser *p)
{
    if (++p->depth > MAX_DEPTH)
        return fail(p, col(p), "expression nested deeper than %d", MAX_DEPTH);
    int a = parse_and(p);
    while (a >= 0) {
        skip_ws(p);
        int c0 = col(p);
        if (!accept_word(p, "or") && !accept(p, "||"))
            break;
        int b = parse_and(p);
        if (b < 0)
            return -1;
        a = add_node(p, OP_OR, c0, 0, a, b);
    }
    p->depth--;
    return a;
}

kh_status kh_expr_parse(const char *text, kh_expr **out, kh_err *err)
{
    *out = NULL;
    if (!text)
        return kh_err_set(err, KH_EINVAL, "no expression text");
    size_t len = strlen(text);
    if (len > MAX_TEXT)
        return kh_err_set(err, KH_EPARSE, "expression longer than %d characters", MAX_TEXT);
    kh_expr *e = calloc(1, sizeof *e);
    if (!e || !(e->text = kh_strdup(text))) {
        free(e);
        return kh_err_set(err, KH_ENOMEM, "out of memory parsing an expression");
    }
    parser p = {e, e->text, 0, 0, err, 0};
    skip_ws(&p);
    if (!p.s[p.pos]) {
        kh_expr_free(e);
        return kh_err_set(err, KH_EPARSE, "column 1: empty expression");
    }
    e->root = parse_or(&p);
    if (e->root >= 0) {
        skip_ws(&p);
        if (p.s[p.pos])
            expect_fail(&p, "an operator or the end of the expression");
    }
    if (p.failed || e->root < 0) {
        kh_status st = err ? err->code : KH_EPARSE;
        kh_expr_free(e);
        return st ? st : KH_EPARSE;
    }
    *out = e;
    return KH_OK;
}

void kh_expr_free(kh_expr *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->nvars; i++) {
        free((char *)e->vars[i].name);
        free((char *)e->vars[i].text);
    }
    free(e->vars);
    free(e->nodes);
    free(e->text);
    free(e);
}

const char *kh_expr_text(const kh_expr *e) { return e->text; }
size_t kh_expr_nvars(const kh_expr *e) { return e->nvars; }
const kh_expr_var *kh_expr_var_at(const kh_expr *e, size_t i)
{
    return i < e->nvars ? &e->vars[i] : NULL;
}
int kh_expr_needs_data(const kh_expr *e) { return e->needs_data; }
int kh_expr_is_predicate(const kh_expr *e)
{
    int op = e->nodes[e->root].op;
    return op >= OP_EQ && op <= OP_NOT;
}

/* ---- evaluation ------------------------------------------------------------- */
static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static kh_status eval_node(const kh_expr *e, int i, const int64_t *vals, int64_t *out, kh_err *err)
{
    const node *n = &e->nodes[i];
    int64_t a = 0, b = 0;
    kh_status st;
    switch (n->op) {
    case OP_INT:
        *out = n->val;
        return KH_OK;
    case OP_VAR:
        *out = vals[n->val];
        return KH_OK;
    case OP_AND:
    case OP_OR:
        if ((st = eval_node(e, n->a, vals, &a, err)))
            return st;
        if ((n->op == OP_AND) == (a == 0)) {
            *out = a != 0;
            return KH_OK;
        }
        if ((st = eval_node(e, n->b, vals, &b, err)))
            return st;
        *out = b != 0;
        return KH_OK;
    default:
        break;
    }
    if ((st = eval_node(e, n->a, vals, &a, err)))
        return st;
    if (n->b >= 0 && (st = eval_node(e, n->b, vals, &b, err)))
        return st;
    int ovf = 0;
    switch (n->op) {
    case OP_NEG:
        ovf = __builtin_sub_overflow((int64_t)0, a, out);
        break;
    case OP_NOT:
        *out = a == 0;
        break;
    case OP_ADD:
        ovf = __builtin_add_overflow(a, b, out);
        break;
    case OP_SUB:
        ovf = __builtin_sub_overflow(a, b, out);
        break;
    case OP_MUL:
        ovf = __builtin_mul_overflow(a, b, out);
        break;
    case OP_DIV:
    case OP_MOD:
    case OP_CEILDIV:
        if (b == 0)
            return kh_err_set(err, KH_EINVAL, "column %d: division by zero (%s(%lld, 0))", n->col,
                              n->op == OP_CEILDIV ? "ceil_div" : op_spelling(n->op), (long long)a);
        if (b == -1 && a == INT64_MIN) {
            ovf = 1;
            break;
        }
        if (n->op == OP_DIV)
            *out = floor_div(a, b);
        else if (n->op == OP_MOD) {
            /* a - floor_div(a, b) * b, without its overflow: the product
             * leaves int64 for a = INT64_MAX, b = -3 */
            int64_t r = a % b;
            *out = r != 0 && (r < 0) != (b < 0) ? r + b : r;
        }
        else {
            /* ceil(a / b) = -floor(-a / b) */
            if (a == INT64_MIN) {
                ovf = 1;
                break;
            }
            *out = -floor_div(-a, b);
        }
        break;
    case OP_MIN:
        *out = a < b ? a : b;
        break;
    case OP_MAX:
        *out = a > b ? a : b;
        break;
    case OP_EQ:
        *out = a == b;
        break;
    case OP_NE:
        *out = a != b;
        break;
    case OP_LT:
        *out = a < b;
        break;
    case OP_LE:
        *out = a <= b;
        break;
    case OP_GT:
        *out = a > b;
        break;
    case OP_GE:
        *out = a >= b;
        break;
    default:
        return kh_err_set(err, KH_EINVAL, "column %d: bad expression node", n->col);
    }
    if (ovf) {
        if (n->op == OP_NEG)
            return kh_err_set(err, KH_EINVAL, "column %d: integer overflow in -(%lld)", n->col,
                              (long long)a);
        if (n->op == OP_CEILDIV)
            return kh_err_set(err, KH_EINVAL, "column %d: integer overflow in ceil_div(%lld, %lld)",
                              n->col, (long long)a, (long long)b);
        return kh_err_set(err, KH_EINVAL, "column %d: integer overflow in %lld %s %lld", n->col,
                          (long long)a, op_spelling(n->op), (long long)b);
    }
    return KH_OK;
}

kh_status kh_expr_eval(const kh_expr *e, const int64_t *vals, int64_t *out, kh_err *err)
{
    return eval_node(e, e->root, vals, out, err);
}

kh_status kh_expr_eval_lookup(const kh_expr *e, kh_expr_lookup_fn lookup, void *ctx, int64_t *out,
                              kh_err *err)
{
    int64_t small[16];
    int64_t *vals = small;
    if (e->nvars > KH_ARRAY_LEN(small) && !(vals = malloc(e->nvars * sizeof *vals)))
        return kh_err_set(err, KH_ENOMEM, "out of memory evaluating an expression");
    kh_status st = KH_OK;
    for (size_t i = 0; i < e->nvars; i++) {
        if (lookup(ctx, &e->vars[i], &vals[i])) {
            st = kh_err_set(err, KH_ENOTFOUND, "column %d: unknown name '%s'", e->vars[i].column,
                            e->vars[i].text);
            break;
        }
    }
    if (!st)
        st = kh_expr_eval(e, vals, out, err);
    if (vals != small)
        free(vals);
    return st;
}

int kh_expr_env_lookup(void *ctx, const kh_expr_var *var, int64_t *val)
{
    const kh_expr_env *env = ctx;
    if (!env)
        return -1;
    for (size_t i = 0; i < env->n; i++)
        if (!strcmp(env->names[i], var->text)) {
            *val = env->values[i];
            return 0;
        }
    return -1;
}

kh_status kh_expr_eval_text(const char *text, const kh_expr_env *env, int64_t *out, kh_err *err)
{
    kh_expr *e;
    kh_status st = kh_expr_parse(text, &e, err);
    if (st)
        return st;
    st = kh_expr_eval_lookup(e, kh_expr_env_lookup, (void *)env, out, err);
    kh_expr_free(e);
    return st;
}

/* ---- translation to C++ ----------------------------------------------------- */
/* The helpers below are the C++ twin of eval_node: the same checks in the
 * same places, written without compiler builtins so any host compiler
 * behind nvcc takes them.  test_expr compiles them with the translation of
 * random expressions and compares every value and every failure with
 * kh_expr_eval. */
static const char cpp_helpers[] =
    "namespace khx {\n"
    "// A failed operation of khlua's expression language: its column, what failed.\n"
    "struct expr_error {\n"
    "    int column;\n"
    "    char message[160];\n"
    "};\n"
    "[[noreturn]] inline void overflow(int column, const char *op, int64_t a, int64_t b)\n"
    "{\n"
    "    expr_error e{column, {0}};\n"
    "    std::snprintf(e.message, sizeof e.message, \"integer overflow in %lld %s %lld\",\n"
    "                  (long long)a, op, (long long)b);\n"
    "    throw e;\n"
    "}\n"
    "[[noreturn]] inline void overflow_call(int column, const char *fn, int64_t a, int64_t b)\n"
    "{\n"
    "    expr_error e{column, {0}};\n"
    "    std::snprintf(e.message, sizeof e.message, \"integer overflow in %s(%lld, %lld)\", fn,\n"
    "                  (long long)a, (long long)b);\n"
    "    throw e;\n"
    "}\n"
    "[[noreturn]] inline void division_by_zero(int column, const char *op, int64_t a)\n"
    "{\n"
    "    expr_error e{column, {0}};\n"
    "    std::snprintf(e.message, sizeof e.message, \"division by zero (%lld %s 0)\", (long long)a,\n"
    "                  op);\n"
    "    throw e;\n"
    "}\n"
    "inline int64_t add(int64_t a, int64_t b, int column)\n"
    "{\n"
    "    if (b > 0 ? a > INT64_MAX - b : a < INT64_MIN - b)\n"
    "        overflow(column, \"+\", a, b);\n"
    "    return a + b;\n"
    "}\n"
    "inline int64_t sub(int64_t a, int64_t b, int column)\n"
    "{\n"
    "    if (b < 0 ? a > INT64_MAX + b : a < INT64_MIN + b)\n"
    "        overflow(column, \"-\", a, b);\n"
    "    return a - b;\n"
    "}\n"
    "inline int64_t mul(int64_t a, int64_t b, int column)\n"
    "{\n"
    "    if (a == 0 || b == 0)\n"
    "        return 0;\n"
    "    bool negative = (a < 0) != (b < 0);\n"
    "    uint64_t ua = a < 0 ? 0 - (uint64_t)a : (uint64_t)a;\n"
    "    uint64_t ub = b < 0 ? 0 - (uint64_t)b : (uint64_t)b;\n"
    "    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;\n"
    "    if (ua > limit / ub)\n"
    "        overflow(column, \"*\", a, b);\n"
    "    uint64_t p = ua * ub;\n"
    "    if (!negative)\n"
    "        return (int64_t)p;\n"
    "    return p == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)p;\n"
    "}\n"
    "inline int64_t neg(int64_t a, int column)\n"
    "{\n"
    "    if (a == INT64_MIN) {\n"
    "        expr_error e{column, {0}};\n"
    "        std::snprintf(e.message, sizeof e.message, \"integer overflow in -(%lld)\", (long long)a);\n"
    "        throw e;\n"
    "    }\n"
    "    return -a;\n"
    "}\n"
    "// Python's //: the quotient rounded towards minus infinity.\n"
    "inline int64_t floordiv(int64_t a, int64_t b, int column)\n"
    "{\n"
    "    if (b == 0)\n"
    "        division_by_zero(column, \"/\", a);\n"
    "    if (b == -1 && a == INT64_MIN)\n"
    "        overflow(column, \"/\", a, b);\n"
    "    int64_t q = a / b;\n"
    "    if (a % b != 0 && (a < 0) != (b < 0))\n"
    "        q -= 1;\n"
    "    return q;\n"
    "}\n"
    "// Python's %: the remainder takes the divisor's sign.\n"
    "inline int64_t floormod(int64_t a, int64_t b, int column)\n"
    "{\n"
    "    if (b == 0)\n"
    "        division_by_zero(column, \"%\", a);\n"
    "    if (b == -1 && a == INT64_MIN)\n"
    "        overflow(column, \"%\", a, b);\n"
    "    int64_t r = a % b;\n"
    "    if (r != 0 && (r < 0) != (b < 0))\n"
    "        r += b;\n"
    "    return r;\n"
    "}\n"
    "inline int64_t ceil_div(int64_t a, int64_t b, int column)\n"
    "{\n"
    "    if (b == 0) {\n"
    "        expr_error e{column, {0}};\n"
    "        std::snprintf(e.message, sizeof e.message, \"division by zero (ceil_div(%lld, 0))\",\n"
    "                      (long long)a);\n"
    "        throw e;\n"
    "    }\n"
    "    // as khlua computes it: -((-a) // b), so a = INT64_MIN overflows\n"
    "    if (a == INT64_MIN)\n"
    "        overflow_call(column, \"ceil_div\", a, b);\n"
    "    return -floordiv(-a, b, column);\n"
    "}\n"
    "inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "inline int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }\n"
    "}  // namespace khx\n";

const char *kh_expr_cpp_helpers(void) { return cpp_helpers; }

typedef struct cpp_writer {
    char *p;
    size_t n, cap;
    int oom, bad;
    char **vars; /* the spelling of each var */
} cpp_writer;

static void cw_puts(cpp_writer *w, const char *s)
{
    size_t l = strlen(s);
    if (w->oom)
        return;
    if (w->n + l + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 128;
        while (cap < w->n + l + 1)
            cap *= 2;
        char *np = realloc(w->p, cap);
        if (!np) {
            w->oom = 1;
            return;
        }
        w->p = np;
        w->cap = cap;
    }
    memcpy(w->p + w->n, s, l + 1);
    w->n += l;
}

static void cw_node(cpp_writer *w, const kh_expr *e, int i)
{
    const node *n = &e->nodes[i];
    char buf[64];
    const char *fn = NULL, *cmp = NULL;
    switch (n->op) {
    case OP_INT:
        snprintf(buf, sizeof buf, "INT64_C(%lld)", (long long)n->val);
        cw_puts(w, buf);
        return;
    case OP_VAR:
        cw_puts(w, w->vars[n->val]);
        return;
    case OP_NEG:
        cw_puts(w, "khx::neg(");
        cw_node(w, e, n->a);
        snprintf(buf, sizeof buf, ", %d)", n->col);
        cw_puts(w, buf);
        return;
    case OP_NOT:
        cw_puts(w, "((");
        cw_node(w, e, n->a);
        cw_puts(w, ") == 0 ? INT64_C(1) : INT64_C(0))");
        return;
    case OP_AND:
    case OP_OR:
        cw_puts(w, "((");
        cw_node(w, e, n->a);
        cw_puts(w, n->op == OP_AND ? ") != 0 && (" : ") != 0 || (");
        cw_node(w, e, n->b);
        cw_puts(w, ") != 0 ? INT64_C(1) : INT64_C(0))");
        return;
    case OP_ADD: fn = "add"; break;
    case OP_SUB: fn = "sub"; break;
    case OP_MUL: fn = "mul"; break;
    case OP_DIV: fn = "floordiv"; break;
    case OP_MOD: fn = "floormod"; break;
    case OP_CEILDIV: fn = "ceil_div"; break;
    case OP_MIN: fn = "min"; break;
    case OP_MAX: fn = "max"; break;
    case OP_EQ: cmp = "=="; break;
    case OP_NE: cmp = "!="; break;
    case OP_LT: cmp = "<"; break;
    case OP_LE: cmp = "<="; break;
    case OP_GT: cmp = ">"; break;
    case OP_GE: cmp = ">="; break;
    default:
        w->bad = 1; /* a node kind this writer does not know */
        return;
    }
    if (cmp) {
        cw_puts(w, "((");
        cw_node(w, e, n->a);
        snprintf(buf, sizeof buf, ") %s (", cmp);
        cw_puts(w, buf);
        cw_node(w, e, n->b);
        cw_puts(w, ") ? INT64_C(1) : INT64_C(0))");
        return;
    }
    cw_puts(w, "khx::");
    cw_puts(w, fn);
    cw_puts(w, "(");
    cw_node(w, e, n->a);
    cw_puts(w, ", ");
    cw_node(w, e, n->b);
    if (n->op == OP_MIN || n->op == OP_MAX) {
        cw_puts(w, ")");
    } else {
        snprintf(buf, sizeof buf, ", %d)", n->col);
        cw_puts(w, buf);
    }
}

kh_status kh_expr_to_cpp(const kh_expr *e, kh_expr_spell_fn spell, void *ctx, char **out,
                         kh_err *err)
{
    *out = NULL;
    cpp_writer w = {0};
    kh_status st = KH_OK;
    if (e->nvars && !(w.vars = calloc(e->nvars, sizeof *w.vars)))
        return kh_err_set(err, KH_ENOMEM, "out of memory translating an expression");
    for (size_t i = 0; i < e->nvars && !st; i++) {
        char buf[512] = "";
        if (spell(ctx, &e->vars[i], buf, sizeof buf))
            st = kh_err_set(err, KH_EUNSUPPORTED, "column %d: %s", e->vars[i].column,
                            buf[0] ? buf : "cannot be translated");
        else if (!(w.vars[i] = kh_strdup(buf)))
            st = kh_err_set(err, KH_ENOMEM, "out of memory translating an expression");
    }
    if (!st) {
        cw_node(&w, e, e->root);
        if (w.oom)
            st = kh_err_set(err, KH_ENOMEM, "out of memory translating an expression");
        else if (w.bad)
            st = kh_err_set(err, KH_EUNSUPPORTED, "'%s': an operation C++ translation does not "
                            "know", e->text);
    }
    for (size_t i = 0; i < e->nvars && w.vars; i++)
        free(w.vars[i]);
    free(w.vars);
    if (st) {
        free(w.p);
        return st;
    }
    *out = w.p;
    return KH_OK;
}
