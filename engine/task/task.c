/* task.c: loading and checking tasks in FlashInfer-Bench's formats plus
 * khlua's "khlua" additions (task.h): definitions, workload and trace JSONL,
 * solutions and candidate manifests, task packages and datasets.  Owns the
 * problem list with line numbers (jansson keeps no positions, so a small
 * scanner walks the already-valid JSON text to the field's key), constraint
 * evaluation per workload, safetensors header checks (shape and dtype, and
 * single index elements for constraints such as indptr[-1].item(); loading
 * tensors is engine/tensor's), speed-of-light bounds and manifest
 * resolution; for a check, references and constraints parsed by a Python
 * child's ast (FlashInfer-Bench's own rule).  JSON is read as FIB writes it
 * (bare NaN / Infinity tokens included).  The expression language itself is
 * expr.c's. */
#include "task/task.h"

#include "eval/check.h"
#include "core/proc.h"
#include "compile/srccheck.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE (64u << 20)
#define MAX_HEADER (100u << 20)

struct kh_task_set {
    kh_task_opts opts;
    char *root; /* folder that safetensors paths are relative to, or NULL */
    int quiet;  /* loading context (definitions above a checked file): no problems */
    kh_task_def **defs;
    size_t ndefs, capdefs;
    kh_task_workload **wls;
    size_t nwls, capwls;
    kh_task_solution **sols;
    size_t nsols, capsols;
    kh_task_problem *probs;
    size_t nprobs, capprobs;
    char **deferred;
    size_t ndeferred, capdeferred;
    char python[32]; /* the version of Python that parsed the references, or "" */
    kh_task_summary sum;
    /* definitions looked up here after this set's own (a Solution parsed in
     * memory against a loaded task: kh_task_solution_from_text); not owned */
    const kh_task_set *borrow;
};

/* Grow the array whose pointer lives at arrp (any T *) to hold one more
 * element.  memcpy moves the pointer in and out, so no T ** is read through
 * a void ** (all object pointers share one representation on our targets). */
static int grow(void *arrp, size_t *cap, size_t elem)
{
    void *old, *nw;
    size_t c = *cap ? *cap * 2 : 16;
    memcpy(&old, arrp, sizeof old);
    if (!(nw = realloc(old, c * elem)))
        return -1;
    memcpy(arrp, &nw, sizeof nw);
    *cap = c;
    return 0;
}
/* Append item to arr (n used of cap); 0, or -1 when out of memory. */
#define PUSH(arr, n, cap, item)                                                                    \
    (((n) < (cap) || !grow(&(arr), &(cap), sizeof *(arr))) ? ((arr)[(n)++] = (item), 0) : -1)

/* ---- dtypes ----------------------------------------------------------------- */
static const struct {
    const char *name, *st; /* FlashInfer-Bench name, safetensors name */
    int bits;
} dtypes[] = {
    {"float32", "F32", 32},       {"float16", "F16", 16},      {"bfloat16", "BF16", 16},
    {"float8_e4m3fn", "F8_E4M3", 8}, {"float8_e5m2", "F8_E5M2", 8}, {"float4_e2m1", "F4", 4},
    {"int64", "I64", 64},         {"int32", "I32", 32},        {"int16", "I16", 16},
    {"int8", "I8", 8},            {"bool", "BOOL", 8},
};
static const char *DTYPE_LIST = "float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, "
                                "float4_e2m1, int64, int32, int16, int8, bool";

int kh_task_dtype_bits(const char *dtype)
{
    for (size_t i = 0; dtype && i < KH_ARRAY_LEN(dtypes); i++)
        if (!strcmp(dtypes[i].name, dtype))
            return dtypes[i].bits;
    return 0;
}

static const char *dtype_st_name(const char *dtype)
{
    for (size_t i = 0; i < KH_ARRAY_LEN(dtypes); i++)
        if (!strcmp(dtypes[i].name, dtype))
            return dtypes[i].st;
    return "?";
}

static int is_int_dtype(const char *dtype) { return dtype && !strncmp(dtype, "int", 3); }

/* ---- problems ------------------------------------------------------------------ */
static void add_problemv(kh_task_set *s, kh_task_severity sev, const char *file, int line,
                         const char *field, const char *fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));
static void add_problemv(kh_task_set *s, kh_task_severity sev, const char *file, int line,
                         const char *field, const char *fmt, va_list ap)
{
    if (s->quiet)
        return;
    if (sev == KH_TASK_ERROR)
        s->sum.errors++;
    else
        s->sum.warnings++;
    if (s->nprobs == s->capprobs) {
        size_t c = s->capprobs ? s->capprobs * 2 : 32;
        kh_task_problem *p = realloc(s->probs, c * sizeof *p);
        if (!p)
            return; /* counted, not kept: the summary still says so */
        s->probs = p;
        s->capprobs = c;
    }
    char msg[1200];
    vsnprintf(msg, sizeof msg, fmt, ap);
    kh_task_problem *p = &s->probs[s->nprobs];
    p->severity = sev;
    p->file = kh_strdup(file ? file : "");
    p->line = line;
    p->field = kh_strdup(field && *field ? field : "(root)");
    p->msg = kh_strdup(msg);
    if (!p->file || !p->field || !p->msg) {
        free(p->file);
        free(p->field);
        free(p->msg);
        return;
    }
    s->nprobs++;
}

static void add_problem(kh_task_set *s, kh_task_severity sev, const char *file, int line,
                        const char *field, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void add_problem(kh_task_set *s, kh_task_severity sev, const char *file, int line,
                        const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_problemv(s, sev, file, line, field, fmt, ap);
    va_end(ap);
}

const char *kh_task_problem_format(const kh_task_problem *p, char *buf, size_t n)
{
    if (p->line > 0)
        snprintf(buf, n, "%s:%d: %s: %s", p->file, p->line, p->field, p->msg);
    else
        snprintf(buf, n, "%s: %s: %s", p->file, p->field, p->msg);
    return buf;
}

/* ---- locating a field in JSON text --------------------------------------------
 * The text already parsed, so the scanner may trust its structure.  It follows
 * a path of object keys and array indices and returns the offset of the
 * deepest part it found: a member's key, an element's first character.  Keys
 * are compared as written (escapes in keys are not decoded). */
typedef struct scan {
    const char *s;
    size_t n, i;
} scan;

static void sc_ws(scan *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
                           c->s[c->i] == '\r'))
        c->i++;
}

static void sc_string(scan *c)
{
    c->i++;
    while (c->i < c->n && c->s[c->i] != '"') {
        if (c->s[c->i] == '\\')
            c->i++;
        c->i++;
    }
    c->i++;
}

static void sc_value(scan *c)
{
    sc_ws(c);
    if (c->i >= c->n)
        return;
    char ch = c->s[c->i];
    if (ch == '"') {
        sc_string(c);
    } else if (ch == '{' || ch == '[') {
        int depth = 0;
        while (c->i < c->n) {
            ch = c->s[c->i];
            if (ch == '"') {
                sc_string(c);
                continue;
            }
            if (ch == '{' || ch == '[')
                depth++;
            else if (ch == '}' || ch == ']')
                depth--;
            c->i++;
            if (depth == 0)
                break;
        }
    } else {
        while (c->i < c->n && !strchr(",}] \t\r\n", c->s[c->i]))
            c->i++;
    }
}

/* At an object: move to the value of member key; *at = the key's offset. */
static int sc_member(scan *c, const char *key, size_t *at)
{
    sc_ws(c);
    if (c->i >= c->n || c->s[c->i] != '{')
        return 0;
    c->i++;
    size_t klen = strlen(key);
    for (;;) {
        sc_ws(c);
        if (c->i >= c->n || c->s[c->i] != '"')
            return 0;
        size_t kstart = c->i;
        sc_string(c);
        size_t kend = c->i;
        int match = kend - kstart - 2 == klen && !strncmp(c->s + kstart + 1, key, klen);
        sc_ws(c);
        if (c->i >= c->n || c->s[c->i] != ':')
            return 0;
        c->i++;
        if (match) {
            *at = kstart;
            sc_ws(c);
            return 1;
        }
        sc_value(c);
        sc_ws(c);
        if (c->i < c->n && c->s[c->i] == ',')
            c->i++;
        else
            return 0;
    }
}

static int sc_element(scan *c, long idx, size_t *at)
{
    sc_ws(c);
    if (c->i >= c->n || c->s[c->i] != '[')
        return 0;
    c->i++;
    for (long k = 0;; k++) {
        sc_ws(c);
        if (c->i >= c->n || c->s[c->i] == ']')
            return 0;
        if (k == idx) {
            *at = c->i;
            return 1;
        }
        sc_value(c);
        sc_ws(c);
        if (c->i < c->n && c->s[c->i] == ',')
            c->i++;
        else
            return 0;
    }
}

/* Validation context: the document being checked and the path to the field
 * at hand (keys[i] for members, idx[i] for array elements). */
typedef struct vctx {
    kh_task_set *s;
    const char *file;
    const char *text;
    size_t len;
    int base_line;
    int depth;
    const char *keys[32];
    long idx[32];
} vctx;

static void vpush(vctx *v, const char *key)
{
    if (v->depth < 32) {
        v->keys[v->depth] = key;
        v->idx[v->depth] = -1;
    }
    v->depth++;
}
static void vpush_i(vctx *v, long i)
{
    if (v->depth < 32) {
        v->keys[v->depth] = NULL;
        v->idx[v->depth] = i;
    }
    v->depth++;
}
static void vpop(vctx *v) { v->depth--; }

static void field_name(const vctx *v, const char *leaf, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    int d = v->depth < 32 ? v->depth : 32;
    for (int i = 0; i <= d && used < n; i++) {
        const char *k = i < d ? v->keys[i] : leaf;
        if (i == d && !leaf)
            break;
        if (k)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? "." : "", k);
        else
            used += (size_t)snprintf(buf + used, n - used, "[%ld]", v->idx[i]);
    }
}

static int field_line(const vctx *v, const char *leaf)
{
    if (!v->text)
        return v->base_line;
    scan c = {v->text, v->len, 0};
    size_t at = 0;
    sc_ws(&c);
    at = c.i;
    int d = v->depth < 32 ? v->depth : 32;
    for (int i = 0; i <= d; i++) {
        size_t here;
        int ok;
        if (i == d) {
            if (!leaf)
                break;
            ok = sc_member(&c, leaf, &here);
        } else if (v->keys[i]) {
            ok = sc_member(&c, v->keys[i], &here);
        } else {
            ok = sc_element(&c, v->idx[i], &here);
        }
        if (!ok)
            break;
        at = here;
    }
    int line = v->base_line;
    for (size_t i = 0; i < at && i < v->len; i++)
        if (v->text[i] == '\n')
            line++;
    return line;
}

static void vproblem(vctx *v, kh_task_severity sev, const char *leaf, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void vproblem(vctx *v, kh_task_severity sev, const char *leaf, const char *fmt, ...)
{
    if (v->s->quiet)
        return;
    char field[512];
    field_name(v, leaf, field, sizeof field);
    va_list ap;
    va_start(ap, fmt);
    add_problemv(v->s, sev, v->file, field_line(v, leaf), field, fmt, ap);
    va_end(ap);
}
#define VERR(v, leaf, ...) vproblem((v), KH_TASK_ERROR, (leaf), __VA_ARGS__)
#define VWARN(v, leaf, ...) vproblem((v), KH_TASK_WARNING, (leaf), __VA_ARGS__)

/* ---- JSON helpers ----------------------------------------------------------- */
static const char *jtype(const json_t *j)
{
    if (!j)
        return "nothing";
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A string member: NULL (and a problem, when required or mistyped) if absent
 * or not a (non-empty, when asked) string. */
static const char *get_str(vctx *v, json_t *obj, const char *key, int required, int nonempty)
{
    json_t *j = json_object_get(obj, key);
    if (!j) {
        if (required)
            VERR(v, key, "missing; expected %s", nonempty ? "a non-empty string" : "a string");
        return NULL;
    }
    if (!json_is_string(j)) {
        VERR(v, key, "expected %s, got %s", nonempty ? "a non-empty string" : "a string", jtype(j));
        return NULL;
    }
    if (nonempty && !json_string_length(j)) {
        VERR(v, key, "expected a non-empty string, got \"\"");
        return NULL;
    }
    return json_string_value(j);
}

/* An optional string member, which FlashInfer-Bench writes as null when
 * unset (model_dump_json writes "description": null for every one). */
static const char *get_opt_str(vctx *v, json_t *obj, const char *key)
{
    json_t *j = json_object_get(obj, key);
    if (!j || json_is_null(j))
        return NULL;
    if (!json_is_string(j)) {
        VERR(v, key, "expected a string or null, got %s", jtype(j));
        return NULL;
    }
    return json_string_value(j);
}

/* A float as FlashInfer-Bench's pydantic reads it: a JSON number, or a
 * string naming a non-finite value, in any case and with a sign: "NaN",
 * "Infinity", "-Infinity" (as pydantic writes them, ser_json_inf_nan=
 * "strings"), "nan", "inf", "-inf" (as khlua writes them).  A bare NaN or
 * Infinity token arrives here as such a string (parse_json).  0 and *x, or
 * -1 for anything else. */
static int fib_float(const json_t *j, double *x)
{
    if (json_is_number(j)) {
        *x = json_number_value(j);
        return 0;
    }
    const char *s = json_string_value(j);
    if (!s)
        return -1;
    double sign = *s == '-' ? -1.0 : 1.0;
    if (*s == '-' || *s == '+')
        s++;
    if (!strcasecmp(s, "nan")) {
        *x = NAN;
        return 0;
    }
    if (!strcasecmp(s, "inf") || !strcasecmp(s, "infinity")) {
        *x = sign * INFINITY;
        return 0;
    }
    return -1;
}

static void check_known_keys(vctx *v, json_t *obj, const char *const *known, size_t n,
                             kh_task_severity sev, const char *why)
{
    const char *k;
    json_t *val;
    json_object_foreach(obj, k, val) {
        size_t i;
        for (i = 0; i < n && strcmp(known[i], k); i++)
            ;
        if (i == n)
            vproblem(v, sev, k, "unknown key; %s", why);
    }
}

/* An array of at least min strings, each non-empty when asked
 * (FlashInfer-Bench's List[NonEmptyString]). */
static void check_str_array(vctx *v, json_t *obj, const char *key, int min, int nonempty)
{
    json_t *a = json_object_get(obj, key);
    if (!a)
        return;
    if (!json_is_array(a)) {
        VERR(v, key, "expected an array of strings, got %s", jtype(a));
        return;
    }
    if (json_array_size(a) < (size_t)min)
        VERR(v, key, "expected at least %d string(s), got an empty array", min);
    size_t i;
    json_t *e;
    vpush(v, key);
    json_array_foreach(a, i, e) {
        if (!json_is_string(e) || (nonempty && !json_string_length(e))) {
            vpush_i(v, (long)i);
            if (!json_is_string(e))
                VERR(v, NULL, "expected a %sstring, got %s", nonempty ? "non-empty " : "", jtype(e));
            else
                VERR(v, NULL, "expected a non-empty string, got \"\"");
            vpop(v);
        }
    }
    vpop(v);
}

static int is_ident(const char *s)
{
    if (!s || !*s || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return 0;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

static char *read_file(const char *path, size_t *len, kh_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        kh_err_set(err, errno == ENOENT ? KH_ENOTFOUND : KH_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) {
            if (ferror(f)) {
                kh_err_set(err, KH_EIO, "%s: read error", path);
                free(buf);
                fclose(f);
                return NULL;
            }
            break;
        }
        if (cap >= MAX_FILE) {
            kh_err_set(err, KH_EINVAL, "%s: larger than %u MiB", path, MAX_FILE >> 20);
            free(buf);
            fclose(f);
            return NULL;
        }
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb)
            free(buf);
        buf = nb;
    }
    fclose(f);
    if (!buf) {
        kh_err_set(err, KH_ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static char *path_join(const char *a, const char *b)
{
    while (b[0] == '.' && b[1] == '/') /* "./blob/x" as FlashInfer-Bench writes it */
        b += 2;
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p)
        return NULL;
    memcpy(p, a, la);
    size_t k = la;
    if (k && p[k - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, b, lb + 1);
    return p;
}

static int is_dir(const char *p)
{
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}
static int is_file(const char *p)
{
    struct stat st;
    return !stat(p, &st) && S_ISREG(st.st_mode);
}

/* ---- definitions ------------------------------------------------------------- */
static void tensor_free(kh_task_tensor *t)
{
    free(t->name);
    free(t->dtype);
    free(t->dims);
}

static void def_free(kh_task_def *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->naxes; i++)
        free(d->axes[i].name);
    for (size_t i = 0; i < d->ninputs; i++)
        tensor_free(&d->inputs[i]);
    for (size_t i = 0; i < d->noutputs; i++)
        tensor_free(&d->outputs[i]);
    for (size_t i = 0; i < d->nconstraints; i++) {
        free(d->constraints[i].text);
        kh_expr_free(d->constraints[i].expr);
    }
    free(d->axes);
    free(d->inputs);
    free(d->outputs);
    free(d->constraints);
    free(d->name);
    free(d->op_type);
    free(d->file);
    free(d->reference);
    free(d->baseline);
    free(d->evaluator);
    kh_expr_free(d->sol_bytes);
    kh_expr_free(d->sol_flops);
    json_decref(d->json);
    free(d);
}

int kh_task_axis_index(const kh_task_def *d, const char *name)
{
    for (size_t i = 0; i < d->naxes; i++)
        if (!strcmp(d->axes[i].name, name))
            return (int)i;
    return -1;
}

static const kh_task_tensor *find_tensor(const kh_task_def *d, const char *name, int *is_output)
{
    for (size_t i = 0; i < d->ninputs; i++)
        if (!strcmp(d->inputs[i].name, name)) {
            if (is_output)
                *is_output = 0;
            return &d->inputs[i];
        }
    for (size_t i = 0; i < d->noutputs; i++)
        if (!strcmp(d->outputs[i].name, name)) {
            if (is_output)
                *is_output = 1;
            return &d->outputs[i];
        }
    return NULL;
}

static const kh_task_tensor *find_input(const kh_task_def *d, const char *name)
{
    for (size_t i = 0; i < d->ninputs; i++)
        if (!strcmp(d->inputs[i].name, name))
            return &d->inputs[i];
    return NULL;
}

/* Check that every name of e means something in d; report under leaf.
 * Returns 0 when all resolve. */
static int check_expr_names(vctx *v, const kh_task_def *d, const kh_expr *e, int allow_data,
                            const char *leaf)
{
    int bad = 0;
    for (size_t i = 0; i < kh_expr_nvars(e); i++) {
        const kh_expr_var *x = kh_expr_var_at(e, i);
        if (x->kind == KH_EXPR_AXIS) {
            if (kh_task_axis_index(d, x->name) < 0) {
                VERR(v, leaf, "'%s': column %d: '%s' is not an axis of %s; expected one of its axes",
                     kh_expr_text(e), x->column, x->name, d->name ? d->name : "the definition");
                bad = 1;
            }
            continue;
        }
        const kh_task_tensor *t = find_tensor(d, x->name, NULL);
        if (!t) {
            VERR(v, leaf, "'%s': column %d: '%s' is not an input or output; expected a tensor name",
                 kh_expr_text(e), x->column, x->name);
            bad = 1;
        } else if (!t->valid) {
            bad = 1; /* its own problem is already reported */
        } else if (x->kind == KH_EXPR_SHAPE &&
                   (t->is_scalar || x->index >= (int64_t)t->rank || x->index < -(int64_t)t->rank)) {
            VERR(v, leaf, "'%s': column %d: %s has rank %zu; expected an index in [-%zu, %zu)",
                 kh_expr_text(e), x->column, x->name, t->rank, t->rank, t->rank);
            bad = 1;
        } else if (x->kind == KH_EXPR_DATA && !allow_data) {
            VERR(v, leaf, "'%s': column %d: '%s' reads tensor data; expected axes and shapes only",
                 kh_expr_text(e), x->column, x->text);
            bad = 1;
        }
    }
    return bad;
}

static kh_expr *parse_expr_field(vctx *v, json_t *j, const char *leaf)
{
    char buf[32];
    const char *text;
    if (json_is_integer(j)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(j));
        text = buf;
    } else if (json_is_string(j)) {
        text = json_string_value(j);
    } else {
        VERR(v, leaf, "expected an integer expression (a string or an integer), got %s", jtype(j));
        return NULL;
    }
    kh_expr *e;
    kh_err err;
    if (kh_expr_parse(text, &e, &err)) {
        VERR(v, leaf, "'%s': %s", text, err.msg);
        return NULL;
    }
    return e;
}

static int parse_tensors(vctx *v, kh_task_def *d, json_t *root, const char *key,
                         kh_task_tensor **out, size_t *nout)
{
    json_t *obj = json_object_get(root, key);
    if (!obj) {
        VERR(v, key, "missing; expected an object of name: {shape, dtype}");
        return -1;
    }
    if (!json_is_object(obj)) {
        VERR(v, key, "expected an object of name: {shape, dtype}, got %s", jtype(obj));
        return -1;
    }
    if (!strcmp(key, "outputs") && json_object_size(obj) == 0)
        VERR(v, key, "expected at least one output, got an empty object");
    *out = calloc(json_object_size(obj) + 1, sizeof **out);
    if (!*out)
        return -1;
    const char *name;
    json_t *t;
    vpush(v, key);
    json_object_foreach(obj, name, t) {
        if (!*name) {
            VERR(v, NULL, "expected non-empty %s names, got \"\"",
                 strcmp(key, "outputs") ? "input" : "output");
            continue;
        }
        vpush(v, name);
        kh_task_tensor *ts = &(*out)[*nout];
        if (!json_is_object(t)) {
            VERR(v, NULL, "expected an object {shape, dtype}, got %s", jtype(t));
            vpop(v);
            continue;
        }
        static const char *const known[] = {"shape", "dtype", "description", "optional"};
        check_known_keys(v, t, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                         "FlashInfer-Bench ignores it");
        get_opt_str(v, t, "description");
        if (!strcmp(key, "outputs") && json_object_get(json_object_get(root, "inputs"), name))
            VERR(v, NULL, "'%s' is also an input; expected distinct input and output names", name);
        int ok = 1;
        json_t *shape = json_object_get(t, "shape");
        const char *dtype = get_str(v, t, "dtype", 1, 1);
        if (dtype && !kh_task_dtype_bits(dtype)) {
            VERR(v, "dtype", "expected one of %s, got \"%s\"", DTYPE_LIST, dtype);
            ok = 0;
        }
        if (!dtype)
            ok = 0;
        if (!shape) {
            VERR(v, "shape", "missing; expected an array of axis names, or null for a scalar");
            ok = 0;
        } else if (json_is_null(shape)) {
            ts->is_scalar = 1;
        } else if (!json_is_array(shape)) {
            VERR(v, "shape", "expected an array of axis names, or null for a scalar, got %s",
                 jtype(shape));
            ok = 0;
        } else {
            ts->rank = json_array_size(shape);
            ts->dims = calloc(ts->rank + 1, sizeof *ts->dims);
            if (!ts->dims)
                ok = 0;
            size_t i;
            json_t *a;
            vpush(v, "shape");
            json_array_foreach(shape, i, a) {
                vpush_i(v, (long)i);
                int ax = json_is_string(a) ? kh_task_axis_index(d, json_string_value(a)) : -1;
                if (!json_is_string(a)) {
                    VERR(v, NULL, "expected an axis name, got %s", jtype(a));
                    ok = 0;
                } else if (ax < 0) {
                    VERR(v, NULL, "expected an axis name defined in axes, got \"%s\"",
                         json_string_value(a));
                    ok = 0;
                } else if (ts->dims) {
                    ts->dims[i] = (size_t)ax;
                }
                vpop(v);
            }
            vpop(v);
        }
        /* a broken tensor is kept (invalid) so that workloads and manifests
         * naming it do not cascade into "unknown input" errors */
        ts->name = kh_strdup(name);
        ts->dtype = kh_strdup(dtype ? dtype : "?");
        ts->dtype_bits = dtype ? kh_task_dtype_bits(dtype) : 0;
        ts->valid = ok && ts->name && ts->dtype;
        if (!ts->valid) {
            free(ts->dims);
            ts->dims = NULL;
            ts->rank = 0;
        }
        (*nout)++;
        vpop(v);
    }
    vpop(v);
    return 0;
}

/* What the sampling evaluator needs of a definition (eval.c refuses the
 * rest): said at load time, as warnings, so `khlua task check` tells. */
static void check_sampling_def(vctx *v, const kh_task_def *d)
{
    const kh_task_tensor *p = find_input(d, "probs");
    kh_sampling_method m = kh_check_sampling_method(d->name);
    if (!p || p->is_scalar || p->rank != 2 || strcmp(p->dtype, "float32")) {
        VWARN(v, "inputs", "the sampling evaluator needs an input 'probs', float32 "
              "[batch_size, vocab_size]: kh.eval will refuse this definition");
        return;
    }
    if (d->noutputs < 1 || d->outputs[0].is_scalar || d->outputs[0].rank != 1 ||
        d->outputs[0].dims[0] != p->dims[0] ||
        (strcmp(d->outputs[0].dtype, "int32") && strcmp(d->outputs[0].dtype, "int64")))
        VWARN(v, "outputs", "the sampling evaluator needs a first output of samples, int32 or "
              "int64 [batch_size] (the first axis of probs): kh.eval will refuse this definition");
    if ((m == KH_SAMPLING_TOP_K || m == KH_SAMPLING_TOP_K_TOP_P) && !find_input(d, "top_k"))
        VWARN(v, "inputs", "the name asks for top-k sampling (FlashInfer-Bench's thresholding) "
              "but there is no input 'top_k': kh.eval will refuse this definition");
    if ((m == KH_SAMPLING_TOP_P || m == KH_SAMPLING_TOP_K_TOP_P) && !find_input(d, "top_p"))
        VWARN(v, "inputs", "the name asks for top-p sampling (FlashInfer-Bench's thresholding) "
              "but there is no input 'top_p': kh.eval will refuse this definition");
    for (size_t i = 0; i < d->ninputs; i++)
        if (!d->inputs[i].is_scalar && d->inputs[i].dims[0] != p->dims[0])
            VWARN(v, "inputs", "input '%s' does not start with the batch axis: the sampling "
                  "evaluator's TVD test repeats every tensor input along it, and kh.eval will "
                  "refuse this definition", d->inputs[i].name);
}

static const char *default_evaluator(const char *name, const char *op_type)
{
    /* FlashInfer-Bench's evaluators/registry.py matching rules */
    if (name && strstr(name, "moe_fp8_block_scale"))
        return "lowbit";
    if (name && (!strcmp(name, "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1") ||
                 !strcmp(name, "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64")))
        return "dsa_sparse_attention";
    if (name && !strncmp(name, "dsa_topk_indexer", 16))
        return "dsa_topk_indexer";
    if (op_type && !strcmp(op_type, "sampling"))
        return "sampling";
    return "default";
}

static void parse_def_khlua(vctx *v, kh_task_def *d, json_t *k)
{
    if (!json_is_object(k)) {
        VERR(v, "khlua", "expected an object, got %s", jtype(k));
        return;
    }
    vpush(v, "khlua");
    static const char *const known[] = {"reference", "baseline", "tolerance", "evaluator",
                                        "speed_of_light"};
    check_known_keys(v, k, known, KH_ARRAY_LEN(known), KH_TASK_ERROR,
                     "expected reference, baseline, tolerance, evaluator or speed_of_light");
    const char *s;
    if ((s = get_str(v, k, "reference", 0, 1)))
        d->reference = kh_strdup(s);
    if ((s = get_str(v, k, "baseline", 0, 1)))
        d->baseline = kh_strdup(s);
    if ((s = get_str(v, k, "evaluator", 0, 1))) {
        static const char *const ev[] = {"default", "lowbit", "dsa_sparse_attention",
                                         "dsa_topk_indexer", "sampling"};
        size_t i;
        for (i = 0; i < KH_ARRAY_LEN(ev) && strcmp(ev[i], s); i++)
            ;
        if (i == KH_ARRAY_LEN(ev))
            VERR(v, "evaluator",
                 "expected default, lowbit, dsa_sparse_attention, dsa_topk_indexer or sampling, "
                 "got \"%s\"", s);
        else {
            free(d->evaluator);
            d->evaluator = kh_strdup(s);
        }
    }
    json_t *tol = json_object_get(k, "tolerance");
    if (tol && !json_is_object(tol)) {
        VERR(v, "tolerance", "expected an object {atol, rtol, required_matched_ratio}, got %s",
             jtype(tol));
    } else if (tol) {
        vpush(v, "tolerance");
        static const char *const tk[] = {"atol", "rtol", "required_matched_ratio",
                                         "sampling_validation_trials", "sampling_tvd_threshold"};
        check_known_keys(v, tol, tk, KH_ARRAY_LEN(tk), KH_TASK_ERROR,
                         "expected atol, rtol, required_matched_ratio, "
                         "sampling_validation_trials or sampling_tvd_threshold");
        json_t *st = json_object_get(tol, "sampling_validation_trials");
        if (st && (!json_is_integer(st) || json_integer_value(st) < 1 ||
                   json_integer_value(st) > KH_TASK_MAX_SAMPLING_TRIALS))
            VERR(v, "sampling_validation_trials", "expected an integer from 1 to %d",
                 KH_TASK_MAX_SAMPLING_TRIALS);
        else if (st)
            d->sampling_validation_trials = (int)json_integer_value(st);
        json_t *tv = json_object_get(tol, "sampling_tvd_threshold");
        if (tv && (!json_is_number(tv) || json_number_value(tv) < 0 || json_number_value(tv) > 1))
            VERR(v, "sampling_tvd_threshold", "expected a number in [0, 1]");
        else if (tv)
            d->sampling_tvd_threshold = json_number_value(tv);
        double *dst[] = {&d->atol, &d->rtol, &d->required_matched_ratio};
        for (size_t i = 0; i < 3; i++) {
            json_t *x = json_object_get(tol, tk[i]);
            if (!x)
                continue;
            double val = json_number_value(x);
            if (!json_is_number(x))
                VERR(v, tk[i], "expected a number, got %s", jtype(x));
            else if (val < 0 || (i == 2 && val > 1))
                VERR(v, tk[i], "expected a number %s, got %g", i == 2 ? "in [0, 1]" : ">= 0", val);
            else
                *dst[i] = val;
        }
        vpop(v);
    }
    json_t *sol = json_object_get(k, "speed_of_light");
    if (sol && !json_is_object(sol)) {
        VERR(v, "speed_of_light", "expected an object {bytes, flops} of expressions, got %s",
             jtype(sol));
    } else if (sol) {
        vpush(v, "speed_of_light");
        static const char *const sk[] = {"bytes", "flops"};
        check_known_keys(v, sol, sk, KH_ARRAY_LEN(sk), KH_TASK_ERROR, "expected bytes or flops");
        kh_expr **dst[] = {&d->sol_bytes, &d->sol_flops};
        for (size_t i = 0; i < 2; i++) {
            json_t *x = json_object_get(sol, sk[i]);
            if (!x)
                continue;
            kh_expr *e = parse_expr_field(v, x, sk[i]);
            if (e && check_expr_names(v, d, e, 0, sk[i])) {
                kh_expr_free(e);
                e = NULL;
            }
            *dst[i] = e;
        }
        vpop(v);
    }
    vpop(v);
}

/* A line starting `def run(` in the reference source: what a load looks
 * for; a check asks Python's ast, as FlashInfer-Bench does (check_python). */
static int has_run(const char *src)
{
    for (const char *p = src; p; p = strchr(p, '\n')) {
        if (*p == '\n')
            p++;
        if (!strncmp(p, "def run(", 8) || !strncmp(p, "def run (", 9))
            return 1;
    }
    return 0;
}

static kh_task_def *parse_definition(vctx *v, json_t *root)
{
    if (!json_is_object(root)) {
        VERR(v, NULL, "expected a Definition object, got %s", jtype(root));
        return NULL;
    }
    kh_task_def *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->json = json_incref(root);
    d->file = kh_strdup(v->file);
    d->line = v->base_line;
    d->atol = 1e-2;
    d->rtol = 1e-2;
    d->required_matched_ratio = 1.0;
    d->sampling_validation_trials = 100;
    d->sampling_tvd_threshold = 0.2;
    static const char *const known[] = {"name", "op_type", "description", "tags", "axes",
                                        "inputs", "outputs", "reference", "constraints", "khlua"};
    check_known_keys(v, root, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                     "FlashInfer-Bench ignores it (khlua's additions go under \"khlua\")");
    const char *s;
    if ((s = get_str(v, root, "name", 1, 1)))
        d->name = kh_strdup(s);
    if ((s = get_str(v, root, "op_type", 1, 1)))
        d->op_type = kh_strdup(s);
    get_opt_str(v, root, "description");
    check_str_array(v, root, "tags", 0, 1);
    const char *ref = get_str(v, root, "reference", 1, 1);
    if (ref && !v->s->opts.python && !has_run(ref)) /* else check_python decides */
        VERR(v, "reference", "expected Python source with a top-level 'def run(...)'");

    json_t *axes = json_object_get(root, "axes");
    if (!axes) {
        VERR(v, "axes", "missing; expected an object of axis name: {type, value}");
    } else if (!json_is_object(axes)) {
        VERR(v, "axes", "expected an object of axis name: {type, value}, got %s", jtype(axes));
    } else if ((d->axes = calloc(json_object_size(axes) + 1, sizeof *d->axes))) {
        const char *name;
        json_t *a;
        vpush(v, "axes");
        json_object_foreach(axes, name, a) {
            if (!*name) {
                VERR(v, NULL, "expected non-empty axis names, got \"\"");
                continue;
            }
            vpush(v, name);
            if (!is_ident(name))
                VWARN(v, NULL, "not an identifier; expressions cannot name this axis");
            const char *type = NULL;
            json_t *tj = json_object_get(a, "type"), *tv = json_object_get(a, "value");
            if (json_is_object(a) && !tj) {
                /* FlashInfer-Bench's save_json_file leaves the default "type"
                 * out (exclude_unset); its union then reads an axis whose
                 * value is an integer >= 0 as const, any other as var */
                type = json_is_integer(tv) && json_integer_value(tv) >= 0 ? "const" : "var";
                if (tv && !strcmp(type, "var"))
                    VWARN(v, "value", "no \"type\" and not an integer >= 0: FlashInfer-Bench reads "
                          "this axis as var, its value ignored; expected an integer >= 0 (const) "
                          "or no value (var)");
            } else if (json_is_object(a)) {
                type = get_str(v, a, "type", 1, 1);
            }
            if (!json_is_object(a)) {
                VERR(v, NULL, "expected an object {\"type\": \"const\"|\"var\"}, got %s", jtype(a));
            } else if (type && strcmp(type, "const") && strcmp(type, "var")) {
                VERR(v, "type", "expected \"const\" or \"var\", got \"%s\"", type);
            } else if (type) {
                json_t *val = json_object_get(a, "value");
                int is_const = !strcmp(type, "const");
                int ok = 1;
                if (is_const && !val) {
                    VERR(v, "value", "missing; expected an integer >= 0 for a const axis");
                    ok = 0;
                } else if (is_const && (!json_is_integer(val) || json_integer_value(val) < 0)) {
                    if (json_is_integer(val))
                        VERR(v, "value", "expected an integer >= 0, got %lld",
                             (long long)json_integer_value(val));
                    else
                        VERR(v, "value", "expected an integer >= 0, got %s", jtype(val));
                    ok = 0;
                }
                get_opt_str(v, a, "description");
                if (ok) {
                    kh_task_axis *ax = &d->axes[d->naxes++];
                    ax->name = kh_strdup(name);
                    ax->is_const = is_const;
                    ax->value = is_const ? (int64_t)json_integer_value(val) : 0;
                }
            }
            vpop(v);
        }
        vpop(v);
    }
    parse_tensors(v, d, root, "inputs", &d->inputs, &d->ninputs);
    parse_tensors(v, d, root, "outputs", &d->outputs, &d->noutputs);

    json_t *cons = json_object_get(root, "constraints");
    if (cons && !json_is_array(cons)) {
        VERR(v, "constraints", "expected an array of expression strings, got %s", jtype(cons));
    } else if (cons && (d->constraints = calloc(json_array_size(cons) + 1, sizeof *d->constraints))) {
        size_t i;
        json_t *c;
        vpush(v, "constraints");
        json_array_foreach(cons, i, c) {
            vpush_i(v, (long)i);
            if (!json_is_string(c)) {
                VERR(v, NULL, "expected an expression string, got %s", jtype(c));
                vpop(v);
                continue;
            }
            kh_task_constraint *k = &d->constraints[d->nconstraints++];
            k->text = kh_strdup(json_string_value(c));
            kh_err err;
            if (kh_expr_parse(k->text, &k->expr, &err)) {
                VERR(v, NULL, "'%s': %s", k->text, err.msg);
            } else if (check_expr_names(v, d, k->expr, 1, NULL)) {
                kh_expr_free(k->expr);
                k->expr = NULL;
            } else if (!kh_expr_is_predicate(k->expr)) {
                VWARN(v, NULL, "'%s' is not a comparison; expected a condition (nonzero = true)",
                      k->text);
            }
            vpop(v);
        }
        vpop(v);
    }
    d->evaluator = kh_strdup(default_evaluator(d->name, d->op_type));
    if (!strcmp(d->evaluator, "lowbit"))
        d->required_matched_ratio = 0.95;
    json_t *k = json_object_get(root, "khlua");
    if (k)
        parse_def_khlua(v, d, k);
    if (d->evaluator && !strcmp(d->evaluator, "sampling"))
        check_sampling_def(v, d);
    if (!d->file || !d->evaluator) {
        def_free(d);
        return NULL;
    }
    return d;
}

/* ---- evaluation against a definition --------------------------------------------- */
typedef struct eval_ctx {
    const kh_task_def *d;
    const int64_t *axes;
    kh_expr_lookup_fn data_lookup;
    void *data_ctx;
} eval_ctx;

static int def_lookup(void *vctx_, const kh_expr_var *x, int64_t *val)
{
    eval_ctx *c = vctx_;
    if (x->kind == KH_EXPR_AXIS) {
        int i = kh_task_axis_index(c->d, x->name);
        if (i < 0)
            return -1;
        *val = c->axes[i];
        return 0;
    }
    if (x->kind == KH_EXPR_DATA)
        return c->data_lookup ? c->data_lookup(c->data_ctx, x, val) : -1;
    const kh_task_tensor *t = find_tensor(c->d, x->name, NULL);
    if (!t || t->is_scalar || !t->valid)
        return -1;
    int64_t idx = x->index < 0 ? x->index + (int64_t)t->rank : x->index;
    if (idx < 0 || idx >= (int64_t)t->rank)
        return -1;
    *val = c->axes[t->dims[idx]];
    return 0;
}

kh_status kh_task_eval(const kh_task_def *d, const int64_t *axes, const kh_expr *e,
                       kh_expr_lookup_fn data_lookup, void *data_ctx, int64_t *out, kh_err *err)
{
    if (kh_expr_needs_data(e) && !data_lookup) {
        for (size_t i = 0; i < kh_expr_nvars(e); i++)
            if (kh_expr_var_at(e, i)->kind == KH_EXPR_DATA)
                return kh_err_set(err, KH_EUNSUPPORTED, "'%s' reads tensor data (%s)",
                                  kh_expr_text(e), kh_expr_var_at(e, i)->text);
    }
    eval_ctx c = {d, axes, data_lookup, data_ctx};
    return kh_expr_eval_lookup(e, def_lookup, &c, out, err);
}

static kh_status tensor_bytes(const kh_task_tensor *t, const int64_t *axes, int64_t *out,
                              kh_err *err)
{
    int64_t bits = t->dtype_bits;
    for (size_t k = 0; k < t->rank; k++)
        if (__builtin_mul_overflow(bits, axes[t->dims[k]], &bits))
            return kh_err_set(err, KH_EINVAL, "size of %s overflows 64 bits", t->name);
    *out = bits / 8 + (bits % 8 != 0);
    return KH_OK;
}

kh_status kh_task_io_bytes(const kh_task_def *d, const int64_t *axes, int64_t *bytes, kh_err *err)
{
    int64_t sum = 0, b = 0;
    kh_status st;
    for (size_t i = 0; i < d->ninputs + d->noutputs; i++) {
        const kh_task_tensor *t = i < d->ninputs ? &d->inputs[i] : &d->outputs[i - d->ninputs];
        if (!t->valid)
            return kh_err_set(err, KH_EINVAL, "tensor %s of %s is malformed", t->name, d->name);
        if ((st = tensor_bytes(t, axes, &b, err)))
            return st;
        if (__builtin_add_overflow(sum, b, &sum))
            return kh_err_set(err, KH_EINVAL, "total tensor size overflows 64 bits");
    }
    *bytes = sum;
    return KH_OK;
}

kh_status kh_task_speed_of_light(const kh_task_def *d, const int64_t *axes, int64_t *bytes,
                                 int64_t *flops, kh_err *err)
{
    kh_status st;
    *flops = -1;
    if (d->sol_bytes) {
        if ((st = kh_task_eval(d, axes, d->sol_bytes, NULL, NULL, bytes, err)))
            return kh_err_prefix(err, "khlua.speed_of_light.bytes");
    } else if ((st = kh_task_io_bytes(d, axes, bytes, err))) {
        return st;
    }
    if (d->sol_flops && (st = kh_task_eval(d, axes, d->sol_flops, NULL, NULL, flops, err)))
        return kh_err_prefix(err, "khlua.speed_of_light.flops");
    return KH_OK;
}

/* ---- solutions and candidate manifests --------------------------------------------- */
static void args_free(kh_task_arg *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(a[i].name);
        free(a[i].type);
        kh_expr_free(a[i].expr);
    }
    free(a);
}

static void manifest_free(kh_task_manifest *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nlaunches; i++) {
        kh_task_launch *l = &m->launches[i];
        free(l->kernel);
        for (int k = 0; k < 3; k++) {
            kh_expr_free(l->grid[k]);
            kh_expr_free(l->block[k]);
        }
        kh_expr_free(l->shared_bytes);
        args_free(l->args, l->nargs);
    }
    free(m->launches);
    for (size_t i = 0; i < m->nworkspace; i++) {
        free(m->workspace[i].name);
        kh_expr_free(m->workspace[i].bytes);
    }
    free(m->workspace);
    args_free(m->args, m->nargs);
    free(m->function);
    for (size_t i = 0; i < m->nlink; i++)
        free(m->link[i]);
    free(m->link);
    free(m);
}

static void sol_free(kh_task_solution *s)
{
    if (!s)
        return;
    free(s->name);
    free(s->definition);
    free(s->author);
    free(s->file);
    free(s->language);
    free(s->entry_file);
    free(s->entry_function);
    manifest_free(s->manifest);
    json_decref(s->json);
    free(s);
}

/* Parse one argument binding {"input": n} | {"output": n} | {"workspace": n} |
 * {"scalar": n} | {"axis": n, "type"?} | {"value": expr, "type"?}. */
static int parse_arg(vctx *v, const kh_task_def *d, const kh_task_manifest *m, json_t *j,
                     kh_task_arg *a)
{
    if (!json_is_object(j)) {
        VERR(v, NULL, "expected an object such as {\"input\": \"x\"}, got %s", jtype(j));
        return -1;
    }
    static const char *const kinds[] = {"input", "output", "workspace", "scalar", "axis", "value"};
    int kind = -1, nk = 0;
    for (int i = 0; i < 6; i++)
        if (json_object_get(j, kinds[i])) {
            kind = i;
            nk++;
        }
    static const char *const known[] = {"input", "output", "workspace", "scalar", "axis", "value",
                                        "type"};
    check_known_keys(v, j, known, KH_ARRAY_LEN(known), KH_TASK_ERROR,
                     "expected one of input, output, workspace, scalar, axis, value (+ type)");
    if (nk != 1) {
        VERR(v, NULL, "expected exactly one of input, output, workspace, scalar, axis, value; "
                      "got %d", nk);
        return -1;
    }
    const char *type = get_str(v, j, "type", 0, 1);
    if (type && kind < 4)
        VERR(v, "type", "only axis and value arguments take a type");
    if (type && strcmp(type, "int32") && strcmp(type, "int64") && strcmp(type, "uint32") &&
        strcmp(type, "uint64")) {
        VERR(v, "type", "expected int32, int64, uint32 or uint64, got \"%s\"", type);
        return -1;
    }
    if (kind == 5) {
        a->kind = KH_TASK_ARG_VALUE;
        if (!(a->expr = parse_expr_field(v, json_object_get(j, "value"), "value")))
            return -1;
        if (d && check_expr_names(v, d, a->expr, 0, "value"))
            return -1;
        a->type = kh_strdup(type ? type : "int32");
        return 0;
    }
    const char *name = get_str(v, j, kinds[kind], 1, 1);
    if (!name)
        return -1;
    if (kind == 4) {
        a->kind = KH_TASK_ARG_VALUE;
        if (d && kh_task_axis_index(d, name) < 0) {
            VERR(v, "axis", "expected an axis of %s, got \"%s\"", d->name, name);
            return -1;
        }
        kh_err err;
        if (kh_expr_parse(name, &a->expr, &err)) {
            VERR(v, "axis", "expected an axis name, got \"%s\"", name);
            return -1;
        }
        a->type = kh_strdup(type ? type : "int32");
        return 0;
    }
    a->name = kh_strdup(name);
    if (kind == 2) {
        a->kind = KH_TASK_ARG_WORKSPACE;
        for (size_t i = 0; i < m->nworkspace; i++)
            if (!strcmp(m->workspace[i].name, name))
                return 0;
        VERR(v, "workspace", "expected a buffer declared in spec.khlua.workspace, got \"%s\"", name);
        return -1;
    }
    if (!d) {
        a->kind = kind == 0 ? KH_TASK_ARG_INPUT : kind == 1 ? KH_TASK_ARG_OUTPUT : KH_TASK_ARG_SCALAR;
        return 0;
    }
    int is_out = 0;
    const kh_task_tensor *t = find_tensor(d, name, &is_out);
    if (kind == 0) {
        a->kind = KH_TASK_ARG_INPUT;
        if (!t || is_out || t->is_scalar) {
            VERR(v, "input", "expected a tensor input of %s, got \"%s\"%s", d->name, name,
                 t && t->is_scalar ? " (a scalar: bind it with \"scalar\")" : "");
            return -1;
        }
    } else if (kind == 1) {
        a->kind = KH_TASK_ARG_OUTPUT;
        if (!t || !is_out) {
            VERR(v, "output", "expected an output of %s, got \"%s\"", d->name, name);
            return -1;
        }
    } else {
        a->kind = KH_TASK_ARG_SCALAR;
        if (!t || is_out || !t->is_scalar) {
            VERR(v, "scalar", "expected a scalar (shape null) input of %s, got \"%s\"", d->name,
                 name);
            return -1;
        }
    }
    return 0;
}

static void parse_args(vctx *v, const kh_task_def *d, const kh_task_manifest *m, json_t *arr,
                       kh_task_arg **out, size_t *n, int *bound_outputs)
{
    if (!arr) {
        VERR(v, "args", "missing; expected an array of argument bindings");
        return;
    }
    if (!json_is_array(arr)) {
        VERR(v, "args", "expected an array of argument bindings, got %s", jtype(arr));
        return;
    }
    *out = calloc(json_array_size(arr) + 1, sizeof **out);
    if (!*out)
        return;
    size_t i;
    json_t *j;
    vpush(v, "args");
    json_array_foreach(arr, i, j) {
        vpush_i(v, (long)i);
        kh_task_arg *a = &(*out)[*n];
        if (parse_arg(v, d, m, j, a)) {
            free(a->name);
            free(a->type);
            kh_expr_free(a->expr);
            memset(a, 0, sizeof *a);
        } else {
            if (a->kind == KH_TASK_ARG_OUTPUT && d && bound_outputs)
                for (size_t k = 0; k < d->noutputs; k++)
                    if (!strcmp(d->outputs[k].name, a->name))
                        bound_outputs[k] = 1;
            (*n)++;
        }
        vpop(v);
    }
    vpop(v);
}

/* grid / block: one expression, or an array of 1 to 3. */
static void parse_dims(vctx *v, const kh_task_def *d, json_t *j, const char *key, kh_expr **dst)
{
    if (!j) {
        VERR(v, key, "missing; expected an expression or an array of 1 to 3 expressions");
        return;
    }
    if (!json_is_array(j)) {
        if ((dst[0] = parse_expr_field(v, j, key)) && d && check_expr_names(v, d, dst[0], 0, key)) {
            kh_expr_free(dst[0]);
            dst[0] = NULL;
        }
        return;
    }
    if (json_array_size(j) < 1 || json_array_size(j) > 3) {
        VERR(v, key, "expected 1 to 3 expressions (x, y, z), got %zu", json_array_size(j));
        return;
    }
    vpush(v, key);
    for (size_t k = 0; k < json_array_size(j); k++) {
        vpush_i(v, (long)k);
        if ((dst[k] = parse_expr_field(v, json_array_get(j, k), NULL)) && d &&
            check_expr_names(v, d, dst[k], 0, NULL)) {
            kh_expr_free(dst[k]);
            dst[k] = NULL;
        }
        vpop(v);
    }
    vpop(v);
}

static kh_task_manifest *parse_manifest(vctx *v, kh_task_solution *s, json_t *k)
{
    const kh_task_def *d = s->def;
    if (!json_is_object(k)) {
        VERR(v, "khlua", "expected a launch manifest object, got %s", jtype(k));
        return NULL;
    }
    kh_task_manifest *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    vpush(v, "khlua");
    static const char *const known[] = {"backend", "launches", "workspace", "function", "args",
                                        "link"};
    check_known_keys(v, k, known, KH_ARRAY_LEN(known), KH_TASK_ERROR,
                     "expected backend, launches, workspace, function, args or link");
    const char *backend = get_str(v, k, "backend", 0, 1);
    if (!backend)
        backend = s->language && !strcmp(s->language, "cpp") ? "host" : "cuda";
    if (strcmp(backend, "cuda") && strcmp(backend, "host") && strcmp(backend, "cuda_so")) {
        VERR(v, "backend", "expected \"cuda\", \"host\" or \"cuda_so\", got \"%s\"", backend);
        backend = "cuda";
    }
    m->host = !strcmp(backend, "host");
    m->so = !strcmp(backend, "cuda_so");
    const char *want_lang = m->host ? "cpp" : "cuda";
    if (s->language && strcmp(s->language, want_lang)) {
        vpop(v);
        VERR(v, "language", "a %s-backend candidate expects language \"%s\", got \"%s\"", backend,
             want_lang, s->language);
        vpush(v, "khlua");
    }
    json_t *ws = json_object_get(k, "workspace");
    if (ws && !json_is_object(ws)) {
        VERR(v, "workspace", "expected an object of name: {bytes, zero}, got %s", jtype(ws));
    } else if (ws && (m->workspace = calloc(json_object_size(ws) + 1, sizeof *m->workspace))) {
        const char *name;
        json_t *w;
        vpush(v, "workspace");
        json_object_foreach(ws, name, w) {
            vpush(v, name);
            if (!json_is_object(w)) {
                VERR(v, NULL, "expected an object {\"bytes\": expression}, got %s", jtype(w));
            } else {
                static const char *const wk[] = {"bytes", "zero"};
                check_known_keys(v, w, wk, 2, KH_TASK_ERROR, "expected bytes or zero");
                json_t *z = json_object_get(w, "zero");
                if (z && !json_is_boolean(z))
                    VERR(v, "zero", "expected true or false, got %s", jtype(z));
                json_t *b = json_object_get(w, "bytes");
                kh_expr *e = NULL;
                if (!b)
                    VERR(v, "bytes", "missing; expected an integer expression over the axes");
                else if ((e = parse_expr_field(v, b, "bytes")) && d &&
                         check_expr_names(v, d, e, 0, "bytes")) {
                    kh_expr_free(e);
                    e = NULL;
                }
                if (e) {
                    kh_task_workspace *x = &m->workspace[m->nworkspace++];
                    x->name = kh_strdup(name);
                    x->bytes = e;
                    x->zero = json_is_true(z);
                }
            }
            vpop(v);
        }
        vpop(v);
    }
    int *bound = d ? calloc(d->noutputs + 1, sizeof *bound) : NULL;
    json_t *link = json_object_get(k, "link");
    if (link && !m->so) {
        VERR(v, "link", "only a cuda_so solution links libraries");
    } else if (link && !json_is_array(link)) {
        VERR(v, "link", "expected an array of library names (\"cublas\"), got %s", jtype(link));
    } else if (link && (m->link = calloc(json_array_size(link) + 1, sizeof *m->link))) {
        size_t i;
        json_t *l;
        json_array_foreach(link, i, l) {
            const char *lib = json_string_value(l);
            /* a name, never a flag or a path: it becomes -l<name> on nvcc's command line */
            if (!lib || !is_ident(lib))
                VERR(v, "link", "entry %zu: expected a library name such as \"cublas\"", i);
            else
                m->link[m->nlink++] = kh_strdup(lib);
        }
    }
    if (m->host || m->so) {
        const char *fn = get_str(v, k, "function", 0, 1);
        if (!fn)
            fn = s->entry_function;
        if (fn && !is_ident(fn))
            VERR(v, "function", "expected a C function name, got \"%s\"", fn);
        m->function = kh_strdup(fn);
        if (json_object_get(k, "launches"))
            VERR(v, "launches", "a %s solution has no launches; expected function and args",
                 m->host ? "host-backend" : "cuda_so");
        parse_args(v, d, m, json_object_get(k, "args"), &m->args, &m->nargs, bound);
    } else {
        if (json_object_get(k, "args"))
            VERR(v, "args", "a cuda candidate binds arguments per launch; expected launches[].args");
        if (json_object_get(k, "function"))
            VERR(v, "function", "a cuda candidate names kernels per launch; expected launches[].kernel");
        json_t *ls = json_object_get(k, "launches");
        if (!ls) {
            VERR(v, "launches", "missing; expected an array of launches");
        } else if (!json_is_array(ls) || json_array_size(ls) == 0) {
            VERR(v, "launches", "expected a non-empty array of launches, got %s",
                 json_is_array(ls) ? "an empty array" : jtype(ls));
        } else if ((m->launches = calloc(json_array_size(ls), sizeof *m->launches))) {
            size_t i;
            json_t *l;
            int entry_found = 0;
            vpush(v, "launches");
            json_array_foreach(ls, i, l) {
                vpush_i(v, (long)i);
                if (!json_is_object(l)) {
                    VERR(v, NULL, "expected a launch object {kernel, grid, block, args}, got %s",
                         jtype(l));
                    vpop(v);
                    continue;
                }
                kh_task_launch *x = &m->launches[m->nlaunches++];
                static const char *const lk[] = {"kernel", "grid", "block", "shared_bytes", "args"};
                check_known_keys(v, l, lk, KH_ARRAY_LEN(lk), KH_TASK_ERROR,
                                 "expected kernel, grid, block, shared_bytes or args");
                const char *kern = get_str(v, l, "kernel", 1, 1);
                if (kern && !is_ident(kern))
                    VERR(v, "kernel", "expected a kernel (function) name, got \"%s\"", kern);
                x->kernel = kh_strdup(kern);
                if (kern && s->entry_function && !strcmp(kern, s->entry_function))
                    entry_found = 1;
                parse_dims(v, d, json_object_get(l, "grid"), "grid", x->grid);
                parse_dims(v, d, json_object_get(l, "block"), "block", x->block);
                json_t *sh = json_object_get(l, "shared_bytes");
                if (sh && (x->shared_bytes = parse_expr_field(v, sh, "shared_bytes")) && d &&
                    check_expr_names(v, d, x->shared_bytes, 0, "shared_bytes")) {
                    kh_expr_free(x->shared_bytes);
                    x->shared_bytes = NULL;
                }
                parse_args(v, d, m, json_object_get(l, "args"), &x->args, &x->nargs, bound);
                vpop(v);
            }
            vpop(v);
            if (s->entry_function && m->nlaunches && !entry_found) {
                vpop(v);
                VERR(v, "entry_point",
                     "function '%s' is launched by no entry of spec.khlua.launches; expected it to "
                     "name a launched kernel", s->entry_function);
                vpush(v, "khlua");
            }
        }
    }
    if (d && bound)
        for (size_t i = 0; i < d->noutputs; i++)
            if (!bound[i])
                VWARN(v, NULL, "output '%s' is bound to no argument; nothing can write it",
                      d->outputs[i].name);
    free(bound);
    vpop(v);
    return m;
}

static kh_task_solution *parse_solution(vctx *v, json_t *root)
{
    if (!json_is_object(root)) {
        VERR(v, NULL, "expected a Solution object, got %s", jtype(root));
        return NULL;
    }
    kh_task_solution *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->json = json_incref(root);
    s->file = kh_strdup(v->file);
    s->line = v->base_line;
    s->dps = 1;
    static const char *const known[] = {"name", "definition", "author", "description", "spec",
                                        "sources"};
    check_known_keys(v, root, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                     "FlashInfer-Bench ignores it (khlua's additions go under spec.khlua)");
    const char *x;
    if ((x = get_str(v, root, "name", 1, 1)))
        s->name = kh_strdup(x);
    if ((x = get_str(v, root, "definition", 1, 1)))
        s->definition = kh_strdup(x);
    if ((x = get_str(v, root, "author", 1, 1)))
        s->author = kh_strdup(x);
    get_opt_str(v, root, "description");
    if (s->definition)
        s->def = kh_task_find_def(v->s, s->definition);
    if (s->def)
        ((kh_task_def *)s->def)->used = 1; /* the set owns it; const only to users */

    /* sources first: the entry point must name one of them */
    json_t *src = json_object_get(root, "sources");
    if (!src) {
        VERR(v, "sources", "missing; expected an array of {path, content}");
    } else if (!json_is_array(src) || json_array_size(src) == 0) {
        VERR(v, "sources", "expected a non-empty array of {path, content}, got %s",
             json_is_array(src) ? "an empty array" : jtype(src));
    } else {
        size_t i;
        json_t *f;
        vpush(v, "sources");
        json_array_foreach(src, i, f) {
            vpush_i(v, (long)i);
            if (!json_is_object(f)) {
                VERR(v, NULL, "expected an object {path, content}, got %s", jtype(f));
                vpop(v);
                continue;
            }
            const char *p = get_str(v, f, "path", 1, 1);
            get_str(v, f, "content", 1, 1);
            if (p && (p[0] == '/' || !strcmp(p, "..") || !strncmp(p, "../", 3) ||
                      strstr(p, "/../") || (strlen(p) >= 3 && !strcmp(p + strlen(p) - 3, "/.."))))
                VERR(v, "path", "expected a relative path without '..', got \"%s\"", p);
            for (size_t k = 0; p && k < i; k++) {
                const char *q = json_string_value(json_object_get(json_array_get(src, k), "path"));
                if (q && !strcmp(p, q)) {
                    VERR(v, "path", "duplicate source path \"%s\" (also sources[%zu]); expected "
                                    "unique paths", p, k);
                    break;
                }
            }
            vpop(v);
        }
        vpop(v);
    }

    json_t *spec = json_object_get(root, "spec");
    if (!spec) {
        VERR(v, "spec", "missing; expected an object {language, target_hardware, entry_point}");
        return s;
    }
    if (!json_is_object(spec)) {
        VERR(v, "spec", "expected an object {language, target_hardware, entry_point}, got %s",
             jtype(spec));
        return s;
    }
    vpush(v, "spec");
    static const char *const sk[] = {"language", "target_hardware", "entry_point", "dependencies",
                                     "destination_passing_style", "binding", "khlua"};
    check_known_keys(v, spec, sk, KH_ARRAY_LEN(sk), KH_TASK_WARNING,
                     "FlashInfer-Bench ignores it");
    const char *lang = get_str(v, spec, "language", 1, 1);
    if (lang && strcmp(lang, "python") && strcmp(lang, "triton") && strcmp(lang, "cpp") &&
        strcmp(lang, "cuda") && strcmp(lang, "tilelang"))
        VERR(v, "language", "expected python, triton, cpp, cuda or tilelang, got \"%s\"", lang);
    else if (lang)
        s->language = kh_strdup(lang);
    if (!json_object_get(spec, "target_hardware"))
        VERR(v, "target_hardware", "missing; expected an array of at least one string");
    check_str_array(v, spec, "target_hardware", 1, 0);
    check_str_array(v, spec, "dependencies", 0, 1);
    json_t *dps = json_object_get(spec, "destination_passing_style");
    if (dps && !json_is_boolean(dps))
        VERR(v, "destination_passing_style", "expected true or false, got %s", jtype(dps));
    else if (dps)
        s->dps = json_is_true(dps);
    json_t *bind = json_object_get(spec, "binding");
    if (bind && !json_is_null(bind) &&
        (!json_is_string(bind) ||
         (strcmp(json_string_value(bind), "tvm-ffi") && strcmp(json_string_value(bind), "torch"))))
        VERR(v, "binding", "expected \"tvm-ffi\", \"torch\" or null, got %s%s%s", jtype(bind),
             json_is_string(bind) ? " " : "", json_is_string(bind) ? json_string_value(bind) : "");
    const char *ep = get_str(v, spec, "entry_point", 1, 1);
    if (ep) {
        const char *sep = strstr(ep, "::");
        if (!sep || strstr(sep + 2, "::") || sep == ep || !sep[2]) {
            VERR(v, "entry_point", "expected \"<file>::<function>\" with exactly one '::', got \"%s\"",
                 ep);
        } else {
            s->entry_file = strndup(ep, (size_t)(sep - ep));
            s->entry_function = kh_strdup(sep + 2);
            int found = 0;
            char names[400] = "";
            size_t used = 0;
            for (size_t i = 0; json_is_array(src) && i < json_array_size(src); i++) {
                const char *p = json_string_value(json_object_get(json_array_get(src, i), "path"));
                if (!p)
                    continue;
                if (s->entry_file && !strcmp(p, s->entry_file))
                    found = 1;
                if (used < sizeof names)
                    used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                                             used ? ", " : "", p);
            }
            if (!found && json_is_array(src) && json_array_size(src))
                VERR(v, "entry_point", "file \"%s\" is not among sources (%s); expected "
                                       "\"<file>::<function>\" naming a source file",
                     s->entry_file, names);
        }
    }
    json_t *k = json_object_get(spec, "khlua");
    if (k) {
        if (!s->dps)
            VERR(v, "destination_passing_style",
                 "a khlua candidate writes into preallocated outputs; expected true");
        s->manifest = parse_manifest(v, s, k);
    } else {
        /* a valid FlashInfer-Bench Solution that eval will refuse: said here,
         * in eval's words, so a check of a dataset does not promise more */
        const char *b = json_string_value(bind);
        int compiled = s->language && (!strcmp(s->language, "cuda") || !strcmp(s->language, "cpp"));
        VWARN(v, "khlua", "solution '%s' (%s%s%s) %s; khlua eval refuses it",
              s->name ? s->name : "?", s->language ? s->language : "?", compiled ? ", " : "",
              compiled ? (b ? b : "tvm-ffi") : "", kh_task_unrunnable(s));
    }
    vpop(v);
    if (s->manifest && !s->manifest->host && !s->manifest->so && json_is_array(src)) {
        /* a CUDA candidate's other sources reach NVRTC as headers named by
         * their paths: only the names compile.c takes (the one it checks
         * beyond these, a toolkit header's name, needs the toolkit) */
        size_t i;
        json_t *f;
        vpush(v, "sources");
        json_array_foreach(src, i, f) {
            const char *p = json_string_value(json_object_get(f, "path"));
            const char *why = p && !(s->entry_file && !strcmp(p, s->entry_file))
                                  ? kh_srccheck_header_name_problem(p)
                                  : NULL;
            /* an absolute path or '..' is said above, for every solution */
            if (why && (p[0] == '/' || strstr(why, "'..'")))
                why = NULL;
            if (why) {
                vpush_i(v, (long)i);
                VERR(v, "path", "\"%s\" cannot be a header of a CUDA candidate (NVRTC finds "
                                "it by this name): %s; expected a plain file name or a relative "
                                "path such as util.cuh or include/util.cuh", p, why);
                vpop(v);
            }
        }
        vpop(v);
    }
    return s;
}

const char *kh_task_unrunnable(const kh_task_solution *sol)
{
    if (sol->manifest)
        return NULL;
    return "has no khlua manifest (spec.khlua): khlua runs candidates with a launch manifest, "
           "not Python or host code that launches itself";
}

/* ---- workloads and traces ------------------------------------------------------ */
static void wl_free(kh_task_workload *w)
{
    if (!w)
        return;
    free(w->definition);
    free(w->uuid);
    free(w->file);
    free(w->axes);
    json_decref(w->json);
    json_decref(w->record);
    free(w);
}

typedef struct file_state {
    size_t missing;     /* absent blobs in this file (non-strict) */
    int first_line;
    char first_field[256];
    char first_path[512];
} file_state;

/* Axis bindings of one workload while its safetensors inputs are checked:
 * who bound each var axis first. */
typedef struct binder {
    int64_t value;
    int set;
    char who[96];
} binder;

static int64_t le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return (int64_t)v;
}

static void check_blob(vctx *v, const kh_task_def *d, const kh_task_tensor *t, const char *path,
                       const char *key, binder *bind, file_state *fs)
{
    kh_task_set *s = v->s;
    char *full = s->root ? path_join(s->root, path) : kh_strdup(path);
    if (!full)
        return;
    FILE *f = fopen(full, "rb");
    if (!f) {
        s->sum.blobs_missing++;
        if (s->opts.strict) {
            VERR(v, "path", "safetensors file %s is absent", full);
        } else if (!fs->missing++) {
            fs->first_line = field_line(v, "path");
            field_name(v, "path", fs->first_field, sizeof fs->first_field);
            snprintf(fs->first_path, sizeof fs->first_path, "%s", path);
        }
        free(full);
        return;
    }
    unsigned char head[8];
    json_t *hdr = NULL;
    char *buf = NULL;
    if (fread(head, 1, 8, f) != 8) {
        VERR(v, "path", "%s: shorter than a safetensors header", full);
        goto out;
    }
    if (!memcmp(head, "version ", 8)) {
        vproblem(v, s->opts.strict ? KH_TASK_ERROR : KH_TASK_WARNING, "path",
                 "%s is a Git LFS pointer, not the data; run git lfs pull", full);
        goto out;
    }
    int64_t n = le64(head);
    if (n <= 0 || n > (int64_t)MAX_HEADER) {
        VERR(v, "path", "%s: header length %lld; expected a safetensors file", full, (long long)n);
        goto out;
    }
    buf = malloc((size_t)n);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        VERR(v, "path", "%s: truncated safetensors header", full);
        goto out;
    }
    json_error_t je;
    hdr = json_loadb(buf, (size_t)n, 0, &je);
    if (!json_is_object(hdr)) {
        VERR(v, "path", "%s: safetensors header is not a JSON object (%s)", full, je.text);
        goto out;
    }
    s->sum.blobs_checked++;
    json_t *ent = json_object_get(hdr, key);
    if (!json_is_object(ent)) {
        VERR(v, "tensor_key", "\"%s\" is not a tensor in %s", key, full);
        goto out;
    }
    const char *dt = json_string_value(json_object_get(ent, "dtype"));
    if (!dt || strcmp(dt, dtype_st_name(t->dtype)))
        VERR(v, "tensor_key", "tensor \"%s\" in %s has dtype %s; expected %s (%s)", key, full,
             dt ? dt : "(none)", dtype_st_name(t->dtype), t->dtype);
    json_t *shape = json_object_get(ent, "shape");
    if (!json_is_array(shape) || json_array_size(shape) != t->rank) {
        VERR(v, "tensor_key", "tensor \"%s\" in %s has rank %zu; expected %zu", key, full,
             json_array_size(shape), t->rank);
        goto out;
    }
    for (size_t k = 0; k < t->rank; k++) {
        int64_t dim = json_integer_value(json_array_get(shape, k));
        size_t ax = t->dims[k];
        binder *b = &bind[ax];
        if (d->axes[ax].is_const) {
            if (dim != d->axes[ax].value)
                VERR(v, "tensor_key", "dimension %zu of \"%s\" in %s is %lld; expected const axis "
                                      "%s = %lld", k, key, full, (long long)dim, d->axes[ax].name,
                     (long long)d->axes[ax].value);
        } else if (!b->set) {
            b->set = 1;
            b->value = dim;
            snprintf(b->who, sizeof b->who, "input '%s'", t->name);
        } else if (b->value != dim) {
            VERR(v, "tensor_key", "dimension %zu of \"%s\" in %s binds var axis %s = %lld, but %s "
                                  "bind%s it to %lld; expected one value across inputs",
                 k, key, full, d->axes[ax].name, (long long)dim, b->who,
                 strchr(b->who, '&') ? "" : "s", (long long)b->value);
        } else if (!strchr(b->who, '&')) {
            /* a confirmation: name it too, so a later mismatch shows both */
            size_t used = strlen(b->who);
            snprintf(b->who + used, sizeof b->who - used, " & input '%s'", t->name);
        }
    }
    json_t *off = json_object_get(ent, "data_offsets");
    if (json_is_array(off) && json_array_size(off) == 2) {
        int64_t bytes = json_integer_value(json_array_get(off, 1)) -
                        json_integer_value(json_array_get(off, 0));
        int64_t want = t->dtype_bits;
        for (size_t k = 0; k < t->rank; k++)
            want *= json_integer_value(json_array_get(shape, k));
        want = want / 8 + (want % 8 != 0);
        if (bytes != want)
            VERR(v, "tensor_key", "tensor \"%s\" in %s holds %lld bytes; its shape and dtype need "
                                  "%lld", key, full, (long long)bytes, (long long)want);
    }
out:
    json_decref(hdr);
    free(buf);
    fclose(f);
    free(full);
}

/* Element index (negative from the end) of the rank-1 integer tensor key in
 * the safetensors file at full.  0 and *val on success; -1 when the file,
 * the tensor or its data is unavailable or not a rank-1 integer tensor (the
 * constraint reading it then stays deferred; check_blob reports why). */
static int blob_element(const char *full, const char *key, int64_t index, int64_t *val)
{
    FILE *f = fopen(full, "rb");
    if (!f)
        return -1;
    int rc = -1;
    char *buf = NULL;
    json_t *hdr = NULL;
    unsigned char head[8], el[8];
    if (fread(head, 1, 8, f) != 8)
        goto out;
    int64_t n = le64(head);
    if (n <= 0 || n > (int64_t)MAX_HEADER || !(buf = malloc((size_t)n)) ||
        fread(buf, 1, (size_t)n, f) != (size_t)n)
        goto out;
    hdr = json_loadb(buf, (size_t)n, 0, NULL);
    json_t *ent = json_object_get(hdr, key);
    const char *dt = json_string_value(json_object_get(ent, "dtype"));
    json_t *shape = json_object_get(ent, "shape");
    json_t *off = json_object_get(ent, "data_offsets");
    if (!dt || json_array_size(shape) != 1 || json_array_size(off) != 2)
        goto out;
    int size = !strcmp(dt, "I64") ? 8 : !strcmp(dt, "I32") ? 4 : !strcmp(dt, "I16") ? 2
             : !strcmp(dt, "I8") ? 1 : 0;
    int64_t numel = json_integer_value(json_array_get(shape, 0));
    int64_t start = json_integer_value(json_array_get(off, 0));
    if (!size || index >= numel || index < -numel)
        goto out;
    if (index < 0)
        index += numel;
    if (fseeko(f, (off_t)(8 + n + start + index * size), SEEK_SET) || fread(el, 1, (size_t)size, f) != (size_t)size)
        goto out;
    uint64_t u = 0;
    for (int i = size - 1; i >= 0; i--)
        u = (u << 8) | el[i];
    if (size < 8 && (u >> (size * 8 - 1)) & 1) /* sign-extend */
        u |= ~(uint64_t)0 << (size * 8);
    *val = (int64_t)u;
    rc = 0;
out:
    json_decref(hdr);
    free(buf);
    fclose(f);
    return rc;
}

/* Values of a data-reading constraint's t[i].item() vars, from blobs. */
typedef struct data_vals {
    const kh_expr *e;
    int64_t *vals;
} data_vals;

static int data_vals_lookup(void *ctx, const kh_expr_var *x, int64_t *val)
{
    data_vals *dv = ctx;
    for (size_t i = 0; i < kh_expr_nvars(dv->e); i++)
        if (kh_expr_var_at(dv->e, i) == x) {
            *val = dv->vals[i];
            return 0;
        }
    return -1;
}

/* Fetch every data var of e from the workload's safetensors inputs; 0 when
 * all are available. */
static int fetch_data_vars(kh_task_set *s, const kh_expr *e, json_t *inputs, int64_t *vals)
{
    for (size_t i = 0; i < kh_expr_nvars(e); i++) {
        const kh_expr_var *x = kh_expr_var_at(e, i);
        if (x->kind != KH_EXPR_DATA)
            continue;
        json_t *in = json_object_get(inputs, x->name);
        const char *type = json_string_value(json_object_get(in, "type"));
        const char *path = json_string_value(json_object_get(in, "path"));
        const char *key = json_string_value(json_object_get(in, "tensor_key"));
        if (!type || strcmp(type, "safetensors") || !path || !key || path[0] == '/' ||
            strstr(path, ".."))
            return -1;
        char *full = s->root ? path_join(s->root, path) : kh_strdup(path);
        int rc = full ? blob_element(full, key, x->index, &vals[i]) : -1;
        free(full);
        if (rc)
            return -1;
    }
    return 0;
}

static void check_evaluation(vctx *v, json_t *ev)
{
    if (!json_is_object(ev)) {
        VERR(v, "evaluation", "expected an Evaluation object, got %s", jtype(ev));
        return;
    }
    vpush(v, "evaluation");
    static const char *const known[] = {"status", "environment", "timestamp", "log",
                                        "correctness", "performance"};
    check_known_keys(v, ev, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                     "FlashInfer-Bench ignores it");
    const char *st = get_str(v, ev, "status", 1, 1);
    static const char *const statuses[] = {"PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL",
                                           "INCORRECT_DTYPE", "RUNTIME_ERROR", "COMPILE_ERROR",
                                           "TIMEOUT"};
    size_t i = 0;
    for (; st && i < KH_ARRAY_LEN(statuses) && strcmp(statuses[i], st); i++)
        ;
    if (st && i == KH_ARRAY_LEN(statuses)) {
        VERR(v, "status", "expected PASSED, INCORRECT_SHAPE, INCORRECT_NUMERICAL, INCORRECT_DTYPE, "
                          "RUNTIME_ERROR, COMPILE_ERROR or TIMEOUT, got \"%s\"", st);
        st = NULL;
    }
    json_t *env = json_object_get(ev, "environment");
    if (!env)
        VERR(v, "environment", "missing; expected an object {hardware, libs}");
    else if (!json_is_object(env))
        VERR(v, "environment", "expected an object {hardware, libs}, got %s", jtype(env));
    else {
        vpush(v, "environment");
        get_str(v, env, "hardware", 1, 1);
        json_t *libs = json_object_get(env, "libs");
        if (libs && !json_is_object(libs)) {
            VERR(v, "libs", "expected an object of library: version, got %s", jtype(libs));
        } else if (libs) {
            const char *lib;
            json_t *ver;
            vpush(v, "libs");
            json_object_foreach(libs, lib, ver) {
                if (!json_is_string(ver))
                    VERR(v, lib, "expected a version string, got %s", jtype(ver));
            }
            vpop(v);
        }
        vpop(v);
    }
    get_str(v, ev, "timestamp", 1, 1);
    get_str(v, ev, "log", 0, 0);
    json_t *corr = json_object_get(ev, "correctness");
    json_t *perf = json_object_get(ev, "performance");
    if (corr && json_is_null(corr))
        corr = NULL;
    if (perf && json_is_null(perf))
        perf = NULL;
    if (st) {
        int want_c = !strcmp(st, "PASSED") || !strcmp(st, "INCORRECT_NUMERICAL");
        int want_p = !strcmp(st, "PASSED");
        if (want_c && !corr)
            VERR(v, "correctness", "missing; status %s carries correctness", st);
        if (!want_c && corr)
            VERR(v, "correctness", "status %s carries no correctness; expected null", st);
        if (want_p && !perf)
            VERR(v, "performance", "missing; status PASSED carries performance");
        if (!want_p && perf)
            VERR(v, "performance", "status %s carries no performance; expected null", st);
    }
    if (corr) {
        if (!json_is_object(corr)) {
            VERR(v, "correctness", "expected an object, got %s", jtype(corr));
        } else {
            /* FlashInfer-Bench's Correctness: absent means 0.0; non-negative or NaN */
            vpush(v, "correctness");
            static const char *const ck[] = {"max_relative_error", "max_absolute_error"};
            for (size_t k = 0; k < 2; k++) {
                json_t *x = json_object_get(corr, ck[k]);
                double val;
                if (x && fib_float(x, &val))
                    VERR(v, ck[k], "expected a number (or \"NaN\" / \"Infinity\"), got %s",
                         jtype(x));
                else if (x && val < 0)
                    VERR(v, ck[k], "expected a number >= 0 or NaN, got %g", val);
            }
            json_t *extra = json_object_get(corr, "extra");
            if (extra && !json_is_null(extra) && !json_is_object(extra))
                VERR(v, "extra", "expected an object or null, got %s", jtype(extra));
            vpop(v);
        }
    }
    if (perf) {
        if (!json_is_object(perf)) {
            VERR(v, "performance", "expected an object, got %s", jtype(perf));
        } else {
            /* FlashInfer-Bench's Performance: absent means 0.0; >= 0, so
             * never NaN (khlua's eval leaves the reference figures out when
             * the reference was not timed) */
            vpush(v, "performance");
            static const char *const pk[] = {"latency_ms", "reference_latency_ms",
                                             "speedup_factor"};
            for (size_t k = 0; k < 3; k++) {
                json_t *x = json_object_get(perf, pk[k]);
                double val;
                if (x && fib_float(x, &val))
                    VERR(v, pk[k], "expected a number (or \"Infinity\"), got %s", jtype(x));
                else if (x && isnan(val))
                    VERR(v, pk[k], "expected a number >= 0, got NaN");
                else if (x && val < 0)
                    VERR(v, pk[k], "expected a number >= 0, got %g", val);
            }
            vpop(v);
        }
    }
    vpop(v);
}

/* What a JSONL file holds.  FlashInfer-Bench's TraceSet.from_path asserts
 * that every line of workloads/ is a workload trace (solution and
 * evaluation null) and that no line of traces/ is; a file outside both (a
 * `khlua store export`) is told line by line. */
typedef enum jl_kind { JL_WORKLOADS, JL_TRACES, JL_EITHER } jl_kind;

static kh_task_workload *parse_workload_line(vctx *v, json_t *rec, jl_kind kind, file_state *fs)
{
    kh_task_set *s = v->s;
    if (!json_is_object(rec)) {
        VERR(v, NULL, "expected a Trace object {definition, workload, solution, evaluation}, got %s",
             jtype(rec));
        return NULL;
    }
    static const char *const known[] = {"definition", "workload", "solution", "evaluation"};
    check_known_keys(v, rec, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                     "FlashInfer-Bench ignores it");
    kh_task_workload *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->record = json_incref(rec);
    w->file = kh_strdup(v->file);
    w->line = v->base_line;
    const char *dn = get_str(v, rec, "definition", 1, 1);
    if (dn) {
        w->definition = kh_strdup(dn);
        w->def = kh_task_find_def(s, dn);
        if (w->def)
            ((kh_task_def *)w->def)->used = 1; /* the set owns it; const only to users */
        if (!w->def)
            VERR(v, "definition", "expected the name of a known definition, got \"%s\" (%zu "
                                  "definitions loaded)", dn, s->ndefs);
    }
    /* FlashInfer-Bench's Trace: solution is a name or null (a trace may
     * name none), evaluation an Evaluation or null */
    json_t *sol = json_object_get(rec, "solution");
    json_t *ev = json_object_get(rec, "evaluation");
    int has_sol = sol && !json_is_null(sol), has_ev = ev && !json_is_null(ev);
    if (has_sol && !json_is_string(sol))
        VERR(v, "solution", "expected a solution name or null, got %s", jtype(sol));
    if (kind == JL_WORKLOADS) {
        if (has_sol || has_ev)
            VERR(v, has_sol ? "solution" : "evaluation",
                 "expected null in a workload file (FlashInfer-Bench loads every line of "
                 "workloads/ as a workload, without solution or evaluation), got %s%s",
                 jtype(has_sol ? sol : ev), has_sol && has_ev ? " (and an evaluation)" : "");
    } else if (kind == JL_TRACES && !has_sol && !has_ev) {
        VERR(v, "solution", "a trace names a solution or carries an evaluation, got neither; "
                            "expected a trace (a workload belongs in workloads/)");
    }
    w->is_trace = kind == JL_TRACES || (kind == JL_EITHER && (has_sol || has_ev));
    if (w->is_trace && has_ev)
        check_evaluation(v, ev);
    json_t *wl = json_object_get(rec, "workload");
    if (!wl) {
        VERR(v, "workload", "missing; expected an object {uuid, axes, inputs}");
        return w;
    }
    if (!json_is_object(wl)) {
        VERR(v, "workload", "expected an object {uuid, axes, inputs}, got %s", jtype(wl));
        return w;
    }
    w->json = json_incref(wl);
    vpush(v, "workload");
    static const char *const wk[] = {"uuid", "axes", "inputs"};
    check_known_keys(v, wl, wk, KH_ARRAY_LEN(wk), KH_TASK_WARNING, "FlashInfer-Bench ignores it");
    const char *uuid = get_str(v, wl, "uuid", 1, 1);
    w->uuid = kh_strdup(uuid);
    const kh_task_def *d = w->def;
    json_t *axes = json_object_get(wl, "axes");
    if (d)
        w->axes = calloc(d->naxes + 1, sizeof *w->axes);
    int axes_ok = d && w->axes;
    if (!axes) {
        VERR(v, "axes", "missing; expected an object of var axis: integer");
        axes_ok = 0;
    } else if (!json_is_object(axes)) {
        VERR(v, "axes", "expected an object of var axis: integer, got %s", jtype(axes));
        axes_ok = 0;
    } else {
        const char *an;
        json_t *av;
        vpush(v, "axes");
        json_object_foreach(axes, an, av) {
            int ai = d ? kh_task_axis_index(d, an) : -1;
            if (!json_is_integer(av)) {
                VERR(v, an, "expected an integer >= 0, got %s", jtype(av));
                axes_ok = 0;
            } else if (json_integer_value(av) < 0) {
                VERR(v, an, "expected an integer >= 0, got %lld", (long long)json_integer_value(av));
                axes_ok = 0;
            } else if (d && ai < 0) {
                VERR(v, an, "expected a var axis of %s, got \"%s\"", d->name, an);
            } else if (d && d->axes[ai].is_const) {
                VERR(v, an, "is a const axis of %s (value %lld); expected var axes only", d->name,
                     (long long)d->axes[ai].value);
            } else if (d && w->axes) {
                w->axes[ai] = json_integer_value(av);
            }
        }
        vpop(v);
        for (size_t i = 0; d && i < d->naxes; i++) {
            if (d->axes[i].is_const) {
                if (w->axes)
                    w->axes[i] = d->axes[i].value;
            } else if (!json_object_get(axes, d->axes[i].name)) {
                VERR(v, "axes", "missing var axis '%s'; expected a value for every var axis of %s",
                     d->axes[i].name, d->name);
                axes_ok = 0;
            }
        }
    }
    w->axes_ok = axes_ok;

    json_t *inputs = json_object_get(wl, "inputs");
    binder *bind = d ? calloc(d->naxes + 1, sizeof *bind) : NULL;
    if (bind && axes_ok)
        for (size_t i = 0; i < d->naxes; i++)
            if (!d->axes[i].is_const) {
                bind[i].set = 1;
                bind[i].value = w->axes[i];
                snprintf(bind[i].who, sizeof bind[i].who, "workload.axes");
            }
    if (!inputs) {
        VERR(v, "inputs", "missing; expected an object of input name: {type, ...}");
    } else if (!json_is_object(inputs)) {
        VERR(v, "inputs", "expected an object of input name: {type, ...}, got %s", jtype(inputs));
    } else {
        const char *in;
        json_t *iv;
        vpush(v, "inputs");
        json_object_foreach(inputs, in, iv) {
            vpush(v, in);
            const kh_task_tensor *t = d ? find_input(d, in) : NULL;
            if (d && !t) {
                VERR(v, NULL, "expected an input of %s, got \"%s\"", d->name, in);
                vpop(v);
                continue;
            }
            if (!json_is_object(iv)) {
                VERR(v, NULL, "expected an object {\"type\": ...}, got %s", jtype(iv));
                vpop(v);
                continue;
            }
            const char *type = get_str(v, iv, "type", 1, 1);
            if (!type) {
            } else if (!strcmp(type, "random")) {
            } else if (!strcmp(type, "scalar")) {
                json_t *val = json_object_get(iv, "value");
                if (!val)
                    VERR(v, "value", "missing; expected a number or a boolean");
                else if (!json_is_number(val) && !json_is_boolean(val))
                    VERR(v, "value", "expected a number or a boolean, got %s", jtype(val));
                else if (t && is_int_dtype(t->dtype) && !json_is_integer(val))
                    VERR(v, "value", "expected an integer for %s input '%s', got %s", t->dtype, in,
                         jtype(val));
                if (t && !t->is_scalar)
                    VERR(v, "type", "\"scalar\" given for a tensor input (rank %zu); expected "
                                    "\"random\" or \"safetensors\"", t->rank);
            } else if (!strcmp(type, "safetensors")) {
                const char *p = get_str(v, iv, "path", 1, 1);
                const char *key = get_str(v, iv, "tensor_key", 1, 1);
                if (t && t->is_scalar)
                    VERR(v, "type", "\"safetensors\" given for a scalar input; expected \"scalar\" "
                                    "or \"random\"");
                else if (p && (p[0] == '/' || strstr(p, "..")))
                    VERR(v, "path", "expected a path relative to the dataset root without '..', "
                                    "got \"%s\"", p);
                else if (p && key && t && t->valid && bind)
                    check_blob(v, d, t, p, key, bind, fs);
            } else {
                VERR(v, "type", "expected \"random\", \"scalar\" or \"safetensors\", got \"%s\"",
                     type);
            }
            vpop(v);
        }
        vpop(v);
        for (size_t i = 0; d && i < d->ninputs; i++)
            if (!json_object_get(inputs, d->inputs[i].name))
                VWARN(v, "inputs", "input '%s' not given; generated as random (FlashInfer-Bench's "
                                   "validate requires every input)", d->inputs[i].name);
    }
    free(bind);

    if (axes_ok) {
        for (size_t i = 0; i < d->nconstraints; i++) {
            const kh_task_constraint *c = &d->constraints[i];
            if (!c->expr)
                continue;
            int64_t r, dvals[64] = {0};
            data_vals dv = {c->expr, dvals};
            kh_err err;
            if (kh_expr_needs_data(c->expr)) {
                /* only when every tensor it reads is in a present blob */
                if (kh_expr_nvars(c->expr) > KH_ARRAY_LEN(dvals) ||
                    fetch_data_vars(s, c->expr, inputs, dvals))
                    continue;
                s->sum.data_checks++;
            } else {
                s->sum.constraint_checks++;
            }
            if (kh_task_eval(d, w->axes, c->expr, data_vals_lookup, &dv, &r, &err)) {
                VERR(v, "axes", "constraint '%s' of %s cannot be evaluated: %s", c->text, d->name,
                     err.msg);
            } else if (!r) {
                char vals[300] = "";
                size_t used = 0;
                for (size_t k = 0; k < kh_expr_nvars(c->expr) && used < sizeof vals; k++) {
                    const kh_expr_var *x = kh_expr_var_at(c->expr, k);
                    int64_t xv = 0;
                    eval_ctx ec = {d, w->axes, data_vals_lookup, &dv};
                    def_lookup(&ec, x, &xv);
                    used += (size_t)snprintf(vals + used, sizeof vals - used, "%s%s = %lld",
                                             used ? ", " : "", x->text, (long long)xv);
                }
                VERR(v, "axes", "violates constraint '%s' of %s (%s)", c->text, d->name, vals);
            }
        }
        int64_t b, f;
        kh_err err;
        if (!d->errors && kh_task_speed_of_light(d, w->axes, &b, &f, &err))
            VERR(v, "axes", "speed of light: %s", err.msg);
    }
    vpop(v);
    return w;
}

/* ---- files ------------------------------------------------------------------ */
/* The bare tokens NaN, Infinity and -Infinity outside strings: Python's
 * json module writes them for non-finite floats (json.dump of a
 * FlashInfer-Bench model_dump()), pydantic reads them, jansson refuses them.
 * Each is the length of its token (0 when there is none at text). */
static size_t nonfinite_token(const char *text, size_t len)
{
    static const char *const toks[] = {"NaN", "Infinity", "-Infinity"};
    for (size_t k = 0; k < KH_ARRAY_LEN(toks); k++) {
        size_t n = strlen(toks[k]);
        if (n <= len && !memcmp(text, toks[k], n) &&
            (n == len || !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
                                 text[n]) || !text[n]))
            return n;
    }
    return 0;
}

/* json_loadb, after writing every bare non-finite token as the string
 * FlashInfer-Bench's pydantic writes for it ("NaN", "Infinity",
 * "-Infinity"), which the float fields read (fib_float).  No newline is
 * added, so lines stay; a syntax error's column is given in the text as
 * written (two quotes less per token before it on its line). */
static json_t *parse_json(const char *text, size_t len, json_error_t *je)
{
    size_t ntok = 0, tl;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        if (in_str) {
            if (text[i] == '\\')
                i++;
            else if (text[i] == '"')
                in_str = 0;
        } else if (text[i] == '"') {
            in_str = 1;
        } else if ((text[i] == 'N' || text[i] == 'I' || text[i] == '-') &&
                   (tl = nonfinite_token(text + i, len - i))) {
            ntok++;
            i += tl - 1;
        }
    }
    if (!ntok)
        return json_loadb(text, len, JSON_REJECT_DUPLICATES, je);
    char *buf = malloc(len + 2 * ntok);
    size_t *at = malloc(ntok * sizeof *at); /* where each token starts in buf */
    if (!buf || !at) {
        free(buf);
        free(at);
        return json_loadb(text, len, JSON_REJECT_DUPLICATES, je); /* names the token */
    }
    size_t n = 0, k = 0;
    in_str = 0;
    for (size_t i = 0; i < len; i++) {
        tl = 0;
        if (in_str) {
            if (text[i] == '\\' && i + 1 < len) {
                buf[n++] = text[i++];
            } else if (text[i] == '"') {
                in_str = 0;
            }
        } else if (text[i] == '"') {
            in_str = 1;
        } else if ((text[i] == 'N' || text[i] == 'I' || text[i] == '-') &&
                   (tl = nonfinite_token(text + i, len - i))) {
            at[k++] = n;
            buf[n++] = '"';
            memcpy(buf + n, text + i, tl);
            n += tl;
            buf[n++] = '"';
            i += tl - 1;
            continue;
        }
        buf[n++] = text[i];
    }
    json_t *j = json_loadb(buf, n, JSON_REJECT_DUPLICATES, je);
    if (!j && je->position >= 0) {
        size_t line_start = (size_t)je->position < n ? (size_t)je->position : n;
        while (line_start > 0 && buf[line_start - 1] != '\n')
            line_start--;
        for (size_t t = 0; t < k; t++)
            if (at[t] >= line_start && at[t] < (size_t)je->position)
                je->column -= 2;
    }
    free(buf);
    free(at);
    return j;
}

static json_t *load_json_text(kh_task_set *s, const char *file, const char *text, size_t len,
                              int line0)
{
    json_error_t je;
    json_t *j = parse_json(text, len, &je);
    if (!j)
        add_problem(s, KH_TASK_ERROR, file, line0 + (je.line > 0 ? je.line - 1 : 0), "json",
                    "invalid JSON at column %d: %s", je.column, je.text);
    return j;
}

static int load_def_file(kh_task_set *s, const char *file)
{
    size_t len;
    kh_err err;
    char *text = read_file(file, &len, &err);
    if (!text) {
        add_problem(s, KH_TASK_ERROR, file, 0, "file", "%s", err.msg);
        return -1;
    }
    s->sum.files++;
    size_t errors0 = s->sum.errors;
    json_t *j = load_json_text(s, file, text, len, 1);
    if (j) {
        vctx v = {.s = s, .file = file, .text = text, .len = len, .base_line = 1};
        kh_task_def *d = parse_definition(&v, j);
        if (d)
            d->errors = s->sum.errors - errors0;
        if (d && d->name) {
            const kh_task_def *other = kh_task_find_def(s, d->name);
            if (other) {
                VERR(&v, "name", "duplicate definition name \"%s\" (also %s:%d); expected unique "
                                 "names", d->name, other->file, other->line);
                def_free(d);
            } else if (PUSH(s->defs, s->ndefs, s->capdefs, d)) {
                def_free(d);
            } else if (s->quiet) {
                d->context = 1;
                s->sum.context_definitions++;
            } else {
                s->sum.definitions++;
            }
        } else {
            def_free(d);
        }
        json_decref(j);
    }
    free(text);
    return 0;
}

static void load_solution_text(kh_task_set *s, const char *file, const char *text, size_t len,
                               json_t *j)
{
    vctx v = {.s = s, .file = file, .text = text, .len = len, .base_line = 1};
    kh_task_solution *sol = parse_solution(&v, j);
    if (!sol)
        return;
    if (sol->definition && !sol->def && (s->ndefs || s->borrow))
        VERR(&v, "definition", "expected the name of a known definition, got \"%s\"",
             sol->definition);
    else if (sol->definition && !sol->def)
        VWARN(&v, "definition", "definition \"%s\" not loaded (no dataset or package around "
                                "this file); names in the solution are not checked",
              sol->definition);
    const kh_task_solution *other = sol->name ? kh_task_find_solution(s, sol->name) : NULL;
    if (other) {
        VERR(&v, "name", "duplicate solution name \"%s\" (also %s:%d); expected unique names",
             sol->name, other->file, other->line);
        sol_free(sol);
        return;
    }
    if (PUSH(s->sols, s->nsols, s->capsols, sol)) {
        sol_free(sol);
        return;
    }
    s->sum.solutions++;
    if (sol->manifest)
        s->sum.candidates++;
}

static void load_solution_file(kh_task_set *s, const char *file)
{
    size_t len;
    kh_err err;
    char *text = read_file(file, &len, &err);
    if (!text) {
        add_problem(s, KH_TASK_ERROR, file, 0, "file", "%s", err.msg);
        return;
    }
    s->sum.files++;
    json_t *j = load_json_text(s, file, text, len, 1);
    if (j)
        load_solution_text(s, file, text, len, j);
    json_decref(j);
    free(text);
}

static void load_jsonl_file(kh_task_set *s, const char *file, jl_kind kind)
{
    size_t len;
    kh_err err;
    char *text = read_file(file, &len, &err);
    if (!text) {
        add_problem(s, KH_TASK_ERROR, file, 0, "file", "%s", err.msg);
        return;
    }
    s->sum.files++;
    if (kind != JL_TRACES)
        s->sum.workload_files++;
    file_state fs = {0};
    int line = 0;
    for (char *p = text; p < text + len;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        line++;
        size_t k = 0;
        while (k < n && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r'))
            k++;
        if (k < n) {
            json_t *j = load_json_text(s, file, p, n, line);
            if (j) {
                vctx v = {.s = s, .file = file, .text = p, .len = n, .base_line = line};
                kh_task_workload *w = parse_workload_line(&v, j, kind, &fs);
                if (w)
                    w->seq = s->nwls;
                if (w && PUSH(s->wls, s->nwls, s->capwls, w))
                    wl_free(w);
                else if (w && w->is_trace)
                    s->sum.traces++;
                else if (w)
                    s->sum.workloads++;
                json_decref(j);
            }
        }
        p += n + 1;
    }
    if (fs.missing)
        add_problem(s, KH_TASK_WARNING, file, fs.first_line, fs.first_field,
                    "%zu safetensors input%s without a blob (first: %s); shapes and dtypes "
                    "unchecked (--strict makes this an error)",
                    fs.missing, fs.missing == 1 ? "" : "s", fs.first_path);
    free(text);
}

/* Files under dir (recursively) ending in ext, sorted. */
static int collect(const char *dir, const char *ext, char ***out, size_t *n, size_t *cap, int depth)
{
    if (depth > 16) /* a symlink cycle, or absurd nesting */
        return -1;
    DIR *dp = opendir(dir);
    if (!dp)
        return errno == ENOENT ? 0 : -1;
    struct dirent *de;
    size_t el = strlen(ext);
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.')
            continue;
        char *p = path_join(dir, de->d_name);
        if (!p)
            break;
        if (is_dir(p)) {
            collect(p, ext, out, n, cap, depth + 1);
            free(p);
        } else {
            size_t l = strlen(de->d_name);
            if (l > el && !strcmp(de->d_name + l - el, ext) && !PUSH(*out, *n, *cap, p))
                continue;
            free(p);
        }
    }
    closedir(dp);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef enum { F_DEF, F_SOL, F_WL, F_TRACE } fkind;

static void load_tree(kh_task_set *s, const char *dir, const char *ext, fkind kind)
{
    char **files = NULL;
    size_t n = 0, cap = 0;
    collect(dir, ext, &files, &n, &cap, 0);
    if (n)
        qsort(files, n, sizeof *files, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (kind == F_DEF)
            load_def_file(s, files[i]);
        else if (kind == F_SOL)
            load_solution_file(s, files[i]);
        else
            load_jsonl_file(s, files[i], kind == F_TRACE ? JL_TRACES : JL_WORKLOADS);
        free(files[i]);
    }
    free(files);
}

static int is_dataset(const char *dir)
{
    static const char *const subs[] = {"definitions", "workloads", "solutions", "traces"};
    for (size_t i = 0; i < KH_ARRAY_LEN(subs); i++) {
        char *p = path_join(dir, subs[i]);
        int d = p && is_dir(p);
        free(p);
        if (d)
            return 1;
    }
    return 0;
}

static int is_package(const char *dir)
{
    char *p = path_join(dir, "definition.json");
    int f = p && is_file(p);
    free(p);
    return f;
}

static void load_dataset(kh_task_set *s, const char *root)
{
    char *p;
    if ((p = path_join(root, "definitions")))
        load_tree(s, p, ".json", F_DEF);
    free(p);
    if ((p = path_join(root, "solutions")))
        load_tree(s, p, ".json", F_SOL);
    free(p);
    if ((p = path_join(root, "workloads")))
        load_tree(s, p, ".jsonl", F_WL);
    free(p);
    if ((p = path_join(root, "traces")))
        load_tree(s, p, ".jsonl", F_TRACE);
    free(p);
}

static void load_package(kh_task_set *s, const char *root)
{
    char *p;
    if ((p = path_join(root, "definition.json")))
        load_def_file(s, p);
    free(p);
    if ((p = path_join(root, "solutions")))
        load_tree(s, p, ".json", F_SOL);
    free(p);
    /* workloads: *.jsonl at the top, and under workloads/ */
    DIR *dp = opendir(root);
    if (dp) {
        char **files = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(dp))) {
            size_t l = strlen(de->d_name);
            if (l > 6 && !strcmp(de->d_name + l - 6, ".jsonl") && de->d_name[0] != '.') {
                char *f = path_join(root, de->d_name);
                if (f && PUSH(files, n, cap, f))
                    free(f);
            }
        }
        closedir(dp);
        if (n)
            qsort(files, n, sizeof *files, cmp_str);
        for (size_t i = 0; i < n; i++) {
            load_jsonl_file(s, files[i], JL_WORKLOADS);
            free(files[i]);
        }
        free(files);
    }
    if ((p = path_join(root, "workloads")))
        load_tree(s, p, ".jsonl", F_WL);
    free(p);
}

/* The dataset or package folder above a single file, or NULL. */
static char *find_root(const char *file, int *pkg)
{
    char *dir = kh_strdup(file);
    if (!dir)
        return NULL;
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash) {
            /* relative path with no folder part: try "." once */
            free(dir);
            dir = kh_strdup(".");
            if (dir && (is_dataset(dir) || is_package(dir))) {
                *pkg = is_package(dir);
                return dir;
            }
            free(dir);
            return NULL;
        }
        if (slash == dir) {
            free(dir);
            return NULL;
        }
        *slash = '\0';
        if (is_package(dir)) {
            *pkg = 1;
            return dir;
        }
        if (is_dataset(dir)) {
            *pkg = 0;
            return dir;
        }
    }
}

/* A lone JSONL file: a package's are workloads; in a dataset, or a path
 * naming one, traces/ and workloads/ say; anything else is told by content. */
static jl_kind jsonl_kind(const char *path, const char *root, int pkg)
{
    if (root && pkg)
        return JL_WORKLOADS;
    if (strstr(path, "/traces/") || !strncmp(path, "traces/", 7))
        return JL_TRACES;
    if (strstr(path, "/workloads/") || !strncmp(path, "workloads/", 10))
        return JL_WORKLOADS;
    return JL_EITHER;
}

static int cmp_wl(const void *pa, const void *pb)
{
    const kh_task_workload *a = *(const kh_task_workload *const *)pa;
    const kh_task_workload *b = *(const kh_task_workload *const *)pb;
    int c = strcmp(a->definition, b->definition);
    if (!c)
        c = strcmp(a->uuid, b->uuid);
    if (!c)
        c = a->seq < b->seq ? -1 : a->seq > b->seq;
    return c;
}

/* Cross-file checks once everything is loaded. */
static void cross_check(kh_task_set *s)
{
    /* duplicate workload uuids within a definition (workload files only):
     * sort by (definition, uuid, file order) and compare neighbours */
    kh_task_workload **sorted = s->nwls ? malloc(s->nwls * sizeof *sorted) : NULL;
    size_t nw = 0;
    for (size_t i = 0; sorted && i < s->nwls; i++)
        if (!s->wls[i]->is_trace && s->wls[i]->uuid && s->wls[i]->definition)
            sorted[nw++] = s->wls[i];
    if (nw)
        qsort(sorted, nw, sizeof *sorted, cmp_wl);
    for (size_t i = 1; i < nw; i++) {
        kh_task_workload *a = sorted[i - 1], *b = sorted[i];
        if (!strcmp(a->uuid, b->uuid) && !strcmp(a->definition, b->definition)) {
            /* report each repeat against the first occurrence */
            size_t first = i - 1;
            while (first > 0 && !strcmp(sorted[first - 1]->uuid, b->uuid) &&
                   !strcmp(sorted[first - 1]->definition, b->definition))
                first--;
            add_problem(s, KH_TASK_ERROR, b->file, b->line, "workload.uuid",
                        "duplicate uuid \"%s\" for %s (also %s:%d); expected unique uuids",
                        b->uuid, b->definition, sorted[first]->file, sorted[first]->line);
        }
    }
    free(sorted);
    /* khlua.reference / baseline name a solution of the definition */
    int have_solutions = s->sum.kind && (!strcmp(s->sum.kind, "dataset") ||
                                         !strcmp(s->sum.kind, "package"));
    for (size_t i = 0; i < s->ndefs && have_solutions; i++) {
        kh_task_def *d = s->defs[i];
        const char *names[] = {d->reference, d->baseline};
        const char *keys[] = {"reference", "baseline"};
        for (int k = 0; k < 2; k++) {
            if (!names[k])
                continue;
            const kh_task_solution *sol = kh_task_find_solution(s, names[k]);
            if (!sol || !sol->definition || strcmp(sol->definition, d->name)) {
                size_t len;
                kh_err err;
                char *text = read_file(d->file, &len, &err);
                vctx v = {.s = s, .file = d->file, .text = text, .len = text ? len : 0,
                          .base_line = 1};
                vpush(&v, "khlua");
                VERR(&v, keys[k], "expected the name of a solution for %s, got \"%s\"%s", d->name,
                     names[k], sol ? " (a solution of another definition)" : "");
                free(text);
            }
        }
    }
    /* every candidate resolves on every workload of its definition */
    for (size_t i = 0; i < s->nsols; i++) {
        kh_task_solution *sol = s->sols[i];
        kh_task_manifest *m = sol->manifest;
        if (!m || !sol->def)
            continue;
        kh_task_launch_dims *dims = calloc(m->nlaunches + 1, sizeof *dims);
        int64_t *ws = calloc(m->nworkspace + 1, sizeof *ws);
        for (size_t k = 0; dims && ws && k < s->nwls; k++) {
            kh_task_workload *w = s->wls[k];
            if (w->def != sol->def || !w->axes_ok || w->is_trace)
                continue;
            kh_err err;
            if (kh_task_manifest_resolve(sol, w->axes, dims, ws, &err)) {
                add_problem(s, KH_TASK_ERROR, sol->file, sol->line, "spec.khlua",
                            "for workload %s (%s:%d): %s", w->uuid ? w->uuid : "?", w->file,
                            w->line, err.msg);
                break; /* one workload is enough to show the problem */
            }
        }
        free(dims);
        free(ws);
    }
    /* constraints of the checked definitions (or, checking one file, of the
     * definitions it uses); those that read tensor data listed once */
    for (size_t i = 0; i < s->ndefs; i++) {
        kh_task_def *d = s->defs[i];
        if (d->context && !d->used)
            continue;
        s->sum.constraints += d->nconstraints;
        for (size_t k = 0; k < d->nconstraints; k++) {
            kh_task_constraint *c = &d->constraints[k];
            if (!c->expr || !kh_expr_needs_data(c->expr))
                continue;
            s->sum.deferred++;
            size_t j;
            for (j = 0; j < s->ndeferred && strcmp(s->deferred[j], c->text); j++)
                ;
            if (j == s->ndeferred) {
                char *t = kh_strdup(c->text);
                if (t && PUSH(s->deferred, s->ndeferred, s->capdeferred, t))
                    free(t);
            }
        }
    }
}

/* ---- references and constraints as Python ------------------------------------------
 * FlashInfer-Bench's Definition validators parse the reference with
 * ast.parse and require a top-level function run (an ast.FunctionDef in the
 * module body: not async, not nested, not inside a string), and parse every
 * constraint with ast.parse(mode="eval").  C cannot parse Python, so a check
 * hands the references and constraints of every checked definition to one
 * Python process (the interpreter of Python references: kh_which_python)
 * that only parses them, never runs them.  Without one, a warning says so
 * and a line starting `def run(` is all that is looked for. */
static const char AST_CHECK[] =
    "import ast, json, sys, warnings\n"
    "warnings.simplefilter('ignore')\n"
    "def err(e):\n"
    "    return [getattr(e, 'msg', None) or str(e), getattr(e, 'lineno', 0) or 0,"
    " getattr(e, 'offset', 0) or 0]\n"
    "out = []\n"
    "for item in json.load(open(sys.argv[1], encoding='utf-8')):\n"
    "    r = {'constraints': []}\n"
    "    if item['reference'] is not None:\n"
    "        try:\n"
    "            mod = ast.parse(item['reference'], mode='exec')\n"
    "            r['run'] = any(isinstance(n, ast.FunctionDef) and n.name == 'run'"
    " for n in mod.body)\n"
    "        except (SyntaxError, ValueError) as e:\n"
    "            r['syntax'] = err(e)\n"
    "    for i, c in enumerate(item['constraints']):\n"
    "        if c is None:\n"
    "            continue\n"
    "        try:\n"
    "            ast.parse(c, mode='eval')\n"
    "        except (SyntaxError, ValueError) as e:\n"
    "            r['constraints'].append([i] + err(e))\n"
    "    out.append(r)\n"
    "print('KHLUA-AST ' + json.dumps({'python': sys.version.split()[0], 'results': out}))\n";

/* The has_run look, for when Python could not parse the references. */
static void check_run_lines(kh_task_set *s, kh_task_def **defs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *ref = json_string_value(json_object_get(defs[i]->json, "reference"));
        if (!ref || !*ref || has_run(ref))
            continue;
        size_t len;
        kh_err err;
        char *text = read_file(defs[i]->file, &len, &err);
        vctx v = {.s = s, .file = defs[i]->file, .text = text, .len = text ? len : 0,
                  .base_line = 1};
        VERR(&v, "reference", "expected Python source with a top-level 'def run(...)'");
        free(text);
    }
}

static void report_python(kh_task_set *s, const kh_task_def *d, json_t *r)
{
    json_t *syn = json_object_get(r, "syntax"), *cons = json_object_get(r, "constraints");
    int no_run = json_is_false(json_object_get(r, "run"));
    if (!syn && !no_run && !json_array_size(cons))
        return;
    size_t len;
    kh_err err;
    char *text = read_file(d->file, &len, &err);
    vctx v = {.s = s, .file = d->file, .text = text, .len = text ? len : 0, .base_line = 1};
    if (syn)
        VERR(&v, "reference", "expected Python source (FlashInfer-Bench parses it with "
             "ast.parse), got a syntax error at line %lld, column %lld of the reference: %s",
             (long long)json_integer_value(json_array_get(syn, 1)),
             (long long)json_integer_value(json_array_get(syn, 2)),
             json_string_value(json_array_get(syn, 0)));
    else if (no_run)
        VERR(&v, "reference", "expected Python source with a top-level 'def run(...)'; Python's "
             "ast finds no top-level function run (FlashInfer-Bench requires one)");
    json_t *all = json_object_get(d->json, "constraints");
    size_t i;
    json_t *c;
    vpush(&v, "constraints");
    json_array_foreach(cons, i, c) {
        size_t at = (size_t)json_integer_value(json_array_get(c, 0)), k = 0;
        for (size_t j = 0; j < at; j++) /* its place among d->constraints */
            k += json_is_string(json_array_get(all, j));
        if (k >= d->nconstraints || !d->constraints[k].expr)
            continue; /* khlua's own parser already named the problem */
        vpush_i(&v, (long)at);
        VERR(&v, NULL, "'%s' is not a Python expression (FlashInfer-Bench parses constraints with "
             "ast.parse): %s at column %lld", d->constraints[k].text,
             json_string_value(json_array_get(c, 1)),
             (long long)json_integer_value(json_array_get(c, 3)));
        vpop(&v);
    }
    vpop(&v);
    free(text);
}

static void check_python(kh_task_set *s, const char *path)
{
    kh_task_def **defs = s->ndefs ? calloc(s->ndefs, sizeof *defs) : NULL;
    json_t *items = json_array();
    size_t n = 0;
    for (size_t i = 0; defs && items && i < s->ndefs; i++) {
        kh_task_def *d = s->defs[i];
        if (d->context)
            continue;
        json_t *cons = json_object_get(d->json, "constraints"), *texts = json_array();
        for (size_t k = 0; texts && k < json_array_size(cons); k++) {
            json_t *c = json_array_get(cons, k);
            json_array_append_new(texts, json_is_string(c) ? json_incref(c) : json_null());
        }
        json_t *ref = json_object_get(d->json, "reference");
        /* [texts] stolen by the pack, the item by the append, even when they fail */
        json_t *item = json_pack("{s:O, s:o}", "reference", json_is_string(ref) ? ref : json_null(),
                                 "constraints", texts);
        if (item && !json_array_append_new(items, item))
            defs[n++] = d;
    }
    const char *asked = NULL;
    char *py = n ? kh_which_python(&asked) : NULL;
    char why[600] = "";
    char tmp[4096] = "";
    kh_child_result res = {0};
    json_t *answer = NULL;
    if (!n) {
        goto out;
    } else if (!py) {
        snprintf(why, sizeof why, "no interpreter (%s not found; $KHLUA_PYTHON names another)",
                 asked ? asked : "python3");
        goto out;
    }
    const char *tdir = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/khlua-ast-XXXXXX", tdir && *tdir ? tdir : "/tmp");
    int fd = mkstemp(tmp);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        snprintf(why, sizeof why, "cannot write a temporary file (%s): %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        goto out;
    }
    int bad = json_dumpf(items, f, JSON_COMPACT);
    if (fclose(f) || bad) {
        snprintf(why, sizeof why, "cannot write %s", tmp);
        goto out;
    }
    char *argv[] = {py, "-I", "-c", (char *)AST_CHECK, tmp, NULL};
    kh_err err;
    if (kh_proc_run(argv, 120.0, 64u << 20, &res, &err)) {
        snprintf(why, sizeof why, "%s could not run: %s", py, err.msg);
        goto out;
    }
    const char *mark = res.out ? strstr(res.out, "KHLUA-AST ") : NULL;
    answer = mark ? json_loads(mark + 10, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    json_t *results = json_object_get(answer, "results");
    if (!res.exited || res.exit_code || json_array_size(results) != n) {
        char how[128];
        kh_child_describe(&res, how, sizeof how);
        snprintf(why, sizeof why, "%s did not answer (%s)%s%.200s", py, how,
                 res.out && *res.out ? ": " : "", res.out ? res.out : "");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        report_python(s, defs[i], json_array_get(results, i));
    s->sum.python_checked = n;
    const char *ver = json_string_value(json_object_get(answer, "python"));
    snprintf(s->python, sizeof s->python, "%s", ver ? ver : "?");
    s->sum.python = s->python;
out:
    if (*why) {
        add_problem(s, KH_TASK_WARNING, path, 0, "reference",
                    "not parsed as Python: %s; FlashInfer-Bench requires every reference to parse "
                    "(ast.parse) with a top-level function run, and every constraint to be a "
                    "Python expression: only a line starting 'def run(' was looked for", why);
        check_run_lines(s, defs, n);
    }
    if (*tmp)
        unlink(tmp);
    kh_child_result_free(&res);
    json_decref(answer);
    json_decref(items);
    free(py);
    free(defs);
}

static _Atomic size_t n_loads;

size_t kh_task_load_count(void) { return n_loads; }

kh_status kh_task_load(const char *path, const kh_task_opts *opts, kh_task_set **out, kh_err *err)
{
    *out = NULL;
    n_loads++;
    struct stat st;
    if (stat(path, &st))
        return kh_err_set(err, errno == ENOENT ? KH_ENOTFOUND : KH_EIO, "%s: %s", path,
                          strerror(errno));
    kh_task_set *s = calloc(1, sizeof *s);
    if (!s)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    if (opts)
        s->opts = *opts;
    if (S_ISDIR(st.st_mode)) {
        s->root = kh_strdup(path);
        if (is_package(path)) {
            s->sum.kind = "package";
            load_package(s, path);
        } else if (is_dataset(path)) {
            s->sum.kind = "dataset";
            load_dataset(s, path);
        } else {
            kh_task_set_free(s);
            return kh_err_set(err, KH_ENOTFOUND,
                              "%s: neither a dataset (definitions/, workloads/, solutions/, "
                              "traces/) nor a task package (definition.json)", path);
        }
    } else {
        size_t l = strlen(path);
        int jsonl = l > 6 && !strcmp(path + l - 6, ".jsonl");
        int pkg = 0;
        s->root = find_root(path, &pkg);
        if (jsonl) {
            s->sum.kind = "workloads";
            if (s->root) {
                s->quiet = 1;
                if (pkg) {
                    char *p = path_join(s->root, "definition.json");
                    if (p)
                        load_def_file(s, p);
                    free(p);
                } else {
                    char *p = path_join(s->root, "definitions");
                    if (p)
                        load_tree(s, p, ".json", F_DEF);
                    free(p);
                }
                s->quiet = 0;
                s->sum.files = 0;
            }
            load_jsonl_file(s, path, jsonl_kind(path, s->root, pkg));
        } else {
            size_t len;
            char *text = read_file(path, &len, err);
            if (!text) {
                kh_task_set_free(s);
                return err ? err->code : KH_EIO;
            }
            json_error_t je;
            json_t *j = parse_json(text, len, &je);
            int is_sol = json_is_object(j) && json_object_get(j, "spec");
            json_decref(j);
            free(text);
            if (is_sol) {
                s->sum.kind = "solution";
                if (!s->root && opts && opts->defs_from) {
                    /* a Solution from anywhere, checked against the definitions
                     * of the package or dataset it is for */
                    s->quiet = 1;
                    char *p = path_join(opts->defs_from, "definition.json");
                    char *q = path_join(opts->defs_from, "definitions");
                    if (p && is_package(opts->defs_from))
                        load_def_file(s, p);
                    else if (q && is_dataset(opts->defs_from))
                        load_tree(s, q, ".json", F_DEF);
                    free(p);
                    free(q);
                    s->quiet = 0;
                    s->sum.files = 0;
                } else if (s->root) {
                    s->quiet = 1;
                    char *p = path_join(s->root, pkg ? "definition.json" : "definitions");
                    if (p && pkg)
                        load_def_file(s, p);
                    else if (p)
                        load_tree(s, p, ".json", F_DEF);
                    free(p);
                    s->quiet = 0;
                    s->sum.files = 0;
                }
                load_solution_file(s, path);
            } else {
                s->sum.kind = "definition";
                load_def_file(s, path);
            }
        }
    }
    cross_check(s);
    if (s->opts.python)
        check_python(s, path);
    *out = s;
    return KH_OK;
}

kh_status kh_task_solution_from_text(const kh_task_set *defs, const char *label, const char *text,
                                     size_t len, kh_task_set **out, kh_err *err)
{
    *out = NULL;
    if (!defs || !label || !text)
        return kh_err_set(err, KH_EINVAL, "a solution text needs its task and a label");
    kh_task_set *s = calloc(1, sizeof *s);
    if (!s)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    s->borrow = defs;
    s->sum.kind = "solution";
    s->sum.files = 1;
    json_t *j = load_json_text(s, label, text, len, 1);
    if (j && !(json_is_object(j) && json_object_get(j, "spec")))
        add_problem(s, KH_TASK_ERROR, label, 1, "spec",
                    "not a Solution: expected an object with name, definition, spec and sources");
    else if (j)
        load_solution_text(s, label, text, len, j);
    json_decref(j);
    *out = s;
    return KH_OK;
}

void kh_task_set_free(kh_task_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->ndefs; i++)
        def_free(s->defs[i]);
    for (size_t i = 0; i < s->nwls; i++)
        wl_free(s->wls[i]);
    for (size_t i = 0; i < s->nsols; i++)
        sol_free(s->sols[i]);
    for (size_t i = 0; i < s->nprobs; i++) {
        free(s->probs[i].file);
        free(s->probs[i].field);
        free(s->probs[i].msg);
    }
    for (size_t i = 0; i < s->ndeferred; i++)
        free(s->deferred[i]);
    free(s->defs);
    free(s->wls);
    free(s->sols);
    free(s->probs);
    free(s->deferred);
    free(s->root);
    free(s);
}

const kh_task_summary *kh_task_set_summary(const kh_task_set *s) { return &s->sum; }
size_t kh_task_nproblems(const kh_task_set *s) { return s->nprobs; }
const kh_task_problem *kh_task_problem_at(const kh_task_set *s, size_t i)
{
    return i < s->nprobs ? &s->probs[i] : NULL;
}
size_t kh_task_ndeferred(const kh_task_set *s) { return s->ndeferred; }
const char *kh_task_deferred_at(const kh_task_set *s, size_t i)
{
    return i < s->ndeferred ? s->deferred[i] : NULL;
}
size_t kh_task_ndefs(const kh_task_set *s) { return s->ndefs; }
const kh_task_def *kh_task_def_at(const kh_task_set *s, size_t i)
{
    return i < s->ndefs ? s->defs[i] : NULL;
}
const kh_task_def *kh_task_find_def(const kh_task_set *s, const char *name)
{
    for (size_t i = 0; name && i < s->ndefs; i++)
        if (s->defs[i]->name && !strcmp(s->defs[i]->name, name))
            return s->defs[i];
    return s->borrow ? kh_task_find_def(s->borrow, name) : NULL;
}
kh_status kh_task_check_errors(const kh_task_set *s, const char *path, kh_err *err)
{
    const kh_task_problem *first = NULL;
    size_t n = 0;
    for (size_t i = 0; i < s->nprobs; i++)
        if (s->probs[i].severity == KH_TASK_ERROR && s->probs[i].field &&
            !strcmp(s->probs[i].field, "json") && !n++)
            first = &s->probs[i];
    if (!n)
        return KH_OK;
    char buf[1024];
    if (n == 1)
        return kh_err_set(err, KH_EPARSE, "%s", kh_task_problem_format(first, buf, sizeof buf));
    return kh_err_set(err, KH_EPARSE, "%s (and %zu more unreadable: khlua task check %s lists "
                      "them)", kh_task_problem_format(first, buf, sizeof buf), n - 1, path);
}

kh_status kh_task_solution_errors(const kh_task_set *s, const kh_task_solution *sol, kh_err *err)
{
    const kh_task_problem *first = NULL;
    size_t n = 0;
    for (size_t i = 0; i < s->nprobs; i++) {
        const kh_task_problem *p = &s->probs[i];
        if (p->severity == KH_TASK_ERROR && sol->file && p->file && !strcmp(p->file, sol->file) &&
            !n++)
            first = p;
    }
    if (!n)
        return KH_OK;
    char buf[1024];
    kh_task_problem_format(first, buf, sizeof buf);
    if (n == 1)
        return kh_err_set(err, KH_EINVAL, "solution %s is not usable: %s", sol->name ? sol->name : "?",
                          buf);
    return kh_err_set(err, KH_EINVAL, "solution %s is not usable: %s (and %zu more)",
                      sol->name ? sol->name : "?", buf, n - 1);
}

kh_status kh_task_cuda_sources(const kh_task_solution *sol, const char **src, size_t *len,
                               kh_source **headers, size_t *n, kh_err *err)
{
    json_t *srcs = json_object_get(sol->json, "sources");
    size_t ns = json_array_size(srcs), nh = 0, i;
    json_t *f;
    *src = NULL;
    *len = 0;
    *headers = NULL;
    *n = 0;
    kh_source *h = calloc(ns ? ns : 1, sizeof *h);
    if (!h)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    json_array_foreach(srcs, i, f) {
        const char *p = json_string_value(json_object_get(f, "path"));
        json_t *c = json_object_get(f, "content");
        if (!p || !json_is_string(c)) {
            free(h);
            return kh_err_set(err, KH_EINVAL, "sources[%zu] has no path or no content", i);
        }
        /* the length as stored: a NUL inside is the checks' to refuse, not to cut */
        if (sol->entry_file && !strcmp(p, sol->entry_file)) {
            *src = json_string_value(c);
            *len = json_string_length(c);
        } else {
            h[nh++] = (kh_source){.name = p, .text = json_string_value(c),
                                  .len = json_string_length(c)};
        }
    }
    if (!*src) {
        free(h);
        return kh_err_set(err, KH_EINVAL, "entry file '%s' is not among the sources",
                          sol->entry_file ? sol->entry_file : "?");
    }
    *headers = h;
    *n = nh;
    return KH_OK;
}

size_t kh_task_bind_definitions(kh_task_set *sols, const kh_task_set *defs)
{
    size_t left = 0;
    for (size_t i = 0; i < sols->nsols; i++) {
        kh_task_solution *x = sols->sols[i];
        if (!x->def && x->definition)
            x->def = kh_task_find_def(defs, x->definition);
        left += !x->def;
    }
    return left;
}

size_t kh_task_nworkloads(const kh_task_set *s) { return s->nwls; }
const kh_task_workload *kh_task_workload_at(const kh_task_set *s, size_t i)
{
    return i < s->nwls ? s->wls[i] : NULL;
}
size_t kh_task_nsolutions(const kh_task_set *s) { return s->nsols; }
const kh_task_solution *kh_task_solution_at(const kh_task_set *s, size_t i)
{
    return i < s->nsols ? s->sols[i] : NULL;
}
const kh_task_solution *kh_task_find_solution(const kh_task_set *s, const char *name)
{
    for (size_t i = 0; name && i < s->nsols; i++)
        if (s->sols[i]->name && !strcmp(s->sols[i]->name, name))
            return s->sols[i];
    return NULL;
}

/* ---- manifest resolution ------------------------------------------------------ */
static kh_status eval_dim(const kh_task_def *d, const int64_t *axes, const kh_expr *e, int64_t dflt,
                          int64_t *out, const char *what, kh_err *err)
{
    if (!e) {
        *out = dflt;
        return KH_OK;
    }
    kh_status st = kh_task_eval(d, axes, e, NULL, NULL, out, err);
    if (st)
        return kh_err_prefix(err, "%s '%s'", what, kh_expr_text(e));
    return KH_OK;
}

kh_status kh_task_manifest_resolve(const kh_task_solution *sol, const int64_t *axes,
                                   kh_task_launch_dims *dims, int64_t *ws_bytes, kh_err *err)
{
    const kh_task_manifest *m = sol->manifest;
    const kh_task_def *d = sol->def;
    if (!m)
        return kh_err_set(err, KH_EINVAL, "%s is not a khlua candidate (no spec.khlua)",
                          sol->name ? sol->name : "solution");
    if (!d)
        return kh_err_set(err, KH_ENOTFOUND, "definition of %s not loaded",
                          sol->name ? sol->name : "solution");
    char what[96];
    kh_status st;
    for (size_t i = 0; i < m->nworkspace; i++) {
        snprintf(what, sizeof what, "workspace.%s.bytes", m->workspace[i].name);
        if ((st = eval_dim(d, axes, m->workspace[i].bytes, 0, &ws_bytes[i], what, err)))
            return st;
        if (ws_bytes[i] < 0)
            return kh_err_set(err, KH_EINVAL, "%s '%s' is %lld; expected >= 0", what,
                              kh_expr_text(m->workspace[i].bytes), (long long)ws_bytes[i]);
    }
    static const char xyz[] = "xyz";
    for (size_t i = 0; i < m->nlaunches; i++) {
        const kh_task_launch *l = &m->launches[i];
        kh_task_launch_dims *o = &dims[i];
        int64_t threads = 1;
        for (int k = 0; k < 3; k++) {
            snprintf(what, sizeof what, "launches[%zu].grid.%c", i, xyz[k]);
            if ((st = eval_dim(d, axes, l->grid[k], 1, &o->grid[k], what, err)))
                return st;
            if (o->grid[k] < 1 || o->grid[k] > (k ? 65535 : 2147483647))
                return kh_err_set(err, KH_EINVAL, "%s = %lld; expected 1 to %d", what,
                                  (long long)o->grid[k], k ? 65535 : 2147483647);
            snprintf(what, sizeof what, "launches[%zu].block.%c", i, xyz[k]);
            if ((st = eval_dim(d, axes, l->block[k], 1, &o->block[k], what, err)))
                return st;
            if (o->block[k] < 1 || o->block[k] > (k == 2 ? 64 : 1024))
                return kh_err_set(err, KH_EINVAL, "%s = %lld; expected 1 to %d", what,
                                  (long long)o->block[k], k == 2 ? 64 : 1024);
            threads *= o->block[k];
        }
        if (threads > 1024)
            return kh_err_set(err, KH_EINVAL, "launches[%zu].block has %lld threads; expected at "
                                              "most 1024", i, (long long)threads);
        snprintf(what, sizeof what, "launches[%zu].shared_bytes", i);
        if ((st = eval_dim(d, axes, l->shared_bytes, 0, &o->shared_bytes, what, err)))
            return st;
        if (o->shared_bytes < 0)
            return kh_err_set(err, KH_EINVAL, "%s = %lld; expected >= 0", what,
                              (long long)o->shared_bytes);
        for (size_t a = 0; a < l->nargs; a++) {
            int64_t val;
            if (l->args[a].kind != KH_TASK_ARG_VALUE)
                continue;
            snprintf(what, sizeof what, "launches[%zu].args[%zu].value", i, a);
            if ((st = eval_dim(d, axes, l->args[a].expr, 0, &val, what, err)))
                return st;
        }
    }
    for (size_t a = 0; a < m->nargs; a++) {
        int64_t val;
        if (m->args[a].kind != KH_TASK_ARG_VALUE)
            continue;
        snprintf(what, sizeof what, "args[%zu].value", a);
        if ((st = eval_dim(d, axes, m->args[a].expr, 0, &val, what, err)))
            return st;
    }
    return KH_OK;
}
