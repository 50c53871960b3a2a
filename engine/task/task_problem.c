/* task_problem.c: the problem list with file:line and field (jansson keeps
 * no positions, so a small scanner walks the already-valid JSON text to the
 * field's key), the typed getters that report a problem at the field, and
 * reading files.  The bottom of the task units: it calls none of them. */
#include "task/task_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_FILE (64u << 20)

/* ---- problems ------------------------------------------------------------------ */
void task_add_problemv(kh_task_set *s, kh_task_severity sev, const char *file, int line,
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

void task_add_problem(kh_task_set *s, kh_task_severity sev, const char *file, int line,
                      const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    task_add_problemv(s, sev, file, line, field, fmt, ap);
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

void task_field_name(const vctx *v, const char *leaf, char *buf, size_t n)
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

int task_field_line(const vctx *v, const char *leaf)
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

void task_vproblem(vctx *v, kh_task_severity sev, const char *leaf, const char *fmt, ...)
{
    if (v->s->quiet)
        return;
    char field[512];
    task_field_name(v, leaf, field, sizeof field);
    va_list ap;
    va_start(ap, fmt);
    task_add_problemv(v->s, sev, v->file, task_field_line(v, leaf), field, fmt, ap);
    va_end(ap);
}

/* ---- JSON helpers ----------------------------------------------------------- */
const char *task_jtype(const json_t *j)
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
const char *task_get_str(vctx *v, json_t *obj, const char *key, int required, int nonempty)
{
    json_t *j = json_object_get(obj, key);
    if (!j) {
        if (required)
            VERR(v, key, "missing; expected %s", nonempty ? "a non-empty string" : "a string");
        return NULL;
    }
    if (!json_is_string(j)) {
        VERR(v, key, "expected %s, got %s", nonempty ? "a non-empty string" : "a string",
             task_jtype(j));
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
const char *task_get_opt_str(vctx *v, json_t *obj, const char *key)
{
    json_t *j = json_object_get(obj, key);
    if (!j || json_is_null(j))
        return NULL;
    if (!json_is_string(j)) {
        VERR(v, key, "expected a string or null, got %s", task_jtype(j));
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
int task_fib_float(const json_t *j, double *x)
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

void task_check_known_keys(vctx *v, json_t *obj, const char *const *known, size_t n,
                           kh_task_severity sev, const char *why)
{
    const char *k;
    json_t *val;
    json_object_foreach(obj, k, val) {
        size_t i;
        for (i = 0; i < n && strcmp(known[i], k); i++)
            ;
        if (i == n)
            task_vproblem(v, sev, k, "unknown key; %s", why);
    }
}

/* An array of at least min strings, each non-empty when asked
 * (FlashInfer-Bench's List[NonEmptyString]). */
void task_check_str_array(vctx *v, json_t *obj, const char *key, int min, int nonempty)
{
    json_t *a = json_object_get(obj, key);
    if (!a)
        return;
    if (!json_is_array(a)) {
        VERR(v, key, "expected an array of strings, got %s", task_jtype(a));
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
                VERR(v, NULL, "expected a %sstring, got %s", nonempty ? "non-empty " : "",
                     task_jtype(e));
            else
                VERR(v, NULL, "expected a non-empty string, got \"\"");
            vpop(v);
        }
    }
    vpop(v);
}

int task_is_ident(const char *s)
{
    if (!s || !*s || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return 0;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

char *task_read_file(const char *path, size_t *len, kh_err *err)
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

char *task_path_join(const char *a, const char *b)
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

int task_is_dir(const char *p)
{
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}
int task_is_file(const char *p)
{
    struct stat st;
    return !stat(p, &st) && S_ISREG(st.st_mode);
}
