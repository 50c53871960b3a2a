/* srccheck.c: the tokenizer and rules behind kh_srccheck_run (see
 * srccheck.h).  Owns the lexical view of candidate source; it knows nothing
 * about NVRTC or the manifest beyond the kernel names it is handed. */
#include "compile/srccheck.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tokenizer ----------------------------------------------------------- */

typedef enum { T_EOF, T_IDENT, T_NUM, T_STR, T_CHAR, T_PUNCT, T_HEADER } tkind;

typedef struct tok {
    tkind kind;
    const char *s;
    size_t n;
    int line;
    int directive;  /* inside a preprocessor line */
    int dir_start;  /* the identifier right after '#' (include, define, ...) */
} tok;

typedef struct lexer {
    const char *p, *end;
    int line;
    int bol;        /* only whitespace since the last newline */
    int in_dir;     /* inside a directive, until an unescaped newline */
    int want_dir;   /* the next identifier names the directive */
    int want_hdr;   /* after #include: lex <...> as one header name */
} lexer;

static int is_id0(int c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static int is_id(int c) { return is_id0(c) || (c >= '0' && c <= '9'); }

/* Skip whitespace and comments; track lines and the end of directives. */
static void skip_space(lexer *lx)
{
    while (lx->p < lx->end) {
        char c = *lx->p;
        if (c == '\\' && lx->p + 1 < lx->end && lx->p[1] == '\n') {
            lx->p += 2;
            lx->line++;
        } else if (c == '\\' && lx->p + 2 < lx->end && lx->p[1] == '\r' && lx->p[2] == '\n') {
            lx->p += 3;
            lx->line++;
        } else if (c == '\n') {
            lx->p++;
            lx->line++;
            lx->bol = 1;
            lx->in_dir = lx->want_dir = lx->want_hdr = 0;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            lx->p++;
        } else if (c == '/' && lx->p + 1 < lx->end && lx->p[1] == '/') {
            while (lx->p < lx->end && *lx->p != '\n') {
                if (*lx->p == '\\' && lx->p + 1 < lx->end && lx->p[1] == '\n') {
                    lx->p++;
                    lx->line++;
                }
                lx->p++;
            }
        } else if (c == '/' && lx->p + 1 < lx->end && lx->p[1] == '*') {
            lx->p += 2;
            while (lx->p < lx->end && !(*lx->p == '*' && lx->p + 1 < lx->end && lx->p[1] == '/')) {
                if (*lx->p == '\n')
                    lx->line++;
                lx->p++;
            }
            lx->p = lx->p < lx->end ? lx->p + 2 : lx->end;
        } else {
            break;
        }
    }
}

/* A quoted literal ending at an unescaped q (or the end of the line). */
static void skip_quoted(lexer *lx, char q)
{
    lx->p++;
    while (lx->p < lx->end && *lx->p != q && *lx->p != '\n') {
        if (*lx->p == '\\' && lx->p + 1 < lx->end) {
            if (lx->p[1] == '\n')
                lx->line++;
            lx->p++;
        }
        lx->p++;
    }
    if (lx->p < lx->end && *lx->p == q)
        lx->p++;
}

static tok next(lexer *lx)
{
    skip_space(lx);
    tok t = {.kind = T_EOF, .s = lx->p, .line = lx->line, .directive = lx->in_dir};
    if (lx->p >= lx->end)
        return t;
    char c = *lx->p;
    if (c == '#' && lx->bol) {
        lx->bol = 0;
        lx->in_dir = lx->want_dir = 1;
        lx->p++;
        t.kind = T_PUNCT;
        t.n = 1;
        t.directive = 1;
        return t;
    }
    lx->bol = 0;
    if (lx->want_hdr && c == '<') {
        const char *q = lx->p + 1;
        while (q < lx->end && *q != '>' && *q != '\n')
            q++;
        t.kind = T_HEADER;
        t.s = lx->p;
        t.n = (size_t)(q - lx->p) + (q < lx->end && *q == '>');
        lx->p += t.n;
        lx->want_hdr = 0;
        return t;
    }
    lx->want_hdr = 0;
    if (c == 'R' && lx->p + 1 < lx->end && lx->p[1] == '"') {
        /* raw string R"delim( ... )delim" */
        const char *d = lx->p + 2, *q = d;
        while (q < lx->end && *q != '(' && q - d < 16)
            q++;
        size_t dn = (size_t)(q - d);
        const char *r = q < lx->end ? q + 1 : lx->end;
        for (; r < lx->end; r++) {
            if (*r == '\n')
                lx->line++;
            if (*r == ')' && (size_t)(lx->end - r) > dn + 1 && !memcmp(r + 1, d, dn) &&
                r[1 + dn] == '"') {
                r += dn + 2;
                break;
            }
        }
        t.kind = T_STR;
        t.n = (size_t)(r - lx->p);
        lx->p = r > lx->end ? lx->end : r;
        return t;
    }
    if (is_id0((unsigned char)c)) {
        const char *q = lx->p;
        while (q < lx->end && is_id((unsigned char)*q))
            q++;
        /* encoding prefixes: u8"..", L'..' */
        if (q < lx->end && (*q == '"' || *q == '\'') && q - lx->p <= 2 &&
            strchr("uUL8", lx->p[0])) {
            lx->p = q;
            skip_quoted(lx, *q);
            t.kind = *q == '"' ? T_STR : T_CHAR;
            t.n = (size_t)(lx->p - t.s);
            return t;
        }
        t.kind = T_IDENT;
        t.n = (size_t)(q - lx->p);
        lx->p = q;
        if (lx->want_dir) {
            t.dir_start = 1;
            lx->want_dir = 0;
            if ((t.n == 7 && !memcmp(t.s, "include", 7)) ||
                (t.n == 12 && !memcmp(t.s, "include_next", 12)) ||
                (t.n == 6 && !memcmp(t.s, "import", 6)))
                lx->want_hdr = 1;
        }
        return t;
    }
    lx->want_dir = 0;
    if (c >= '0' && c <= '9') {
        const char *q = lx->p;
        while (q < lx->end && (is_id((unsigned char)*q) || *q == '.' || *q == '\'' ||
                               ((*q == '+' || *q == '-') && strchr("eEpP", q[-1]))))
            q++;
        t.kind = T_NUM;
        t.n = (size_t)(q - lx->p);
        lx->p = q;
        return t;
    }
    if (c == '"' || c == '\'') {
        skip_quoted(lx, c);
        t.kind = c == '"' ? T_STR : T_CHAR;
        t.n = (size_t)(lx->p - t.s);
        return t;
    }
    t.kind = T_PUNCT;
    static const char *const multi[] = {"<<<", ">>>", "::", "<<", ">>", "->", "&&", "||"};
    for (size_t i = 0; i < KH_ARRAY_LEN(multi); i++) {
        size_t m = strlen(multi[i]);
        if ((size_t)(lx->end - lx->p) >= m && !memcmp(lx->p, multi[i], m)) {
            t.n = m;
            lx->p += m;
            return t;
        }
    }
    t.n = 1;
    lx->p++;
    return t;
}

static int is(const tok *t, const char *s)
{
    size_t n = strlen(s);
    return t->n == n && !memcmp(t->s, s, n);
}

/* ---- rules --------------------------------------------------------------- */

#define MAX_PROBLEMS 100 /* listed in a report; the rest are counted */
#define MAX_DECL_TOKENS 256 /* how far a __global__ declaration is searched */

typedef struct problems {
    char *buf;
    size_t len, cap;
    int count;
    int oom;
    kh_err first;
} problems;

static void add(problems *pr, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(problems *pr, const char *file, int line, const char *fmt, ...)
{
    char msg[768], full[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(full, sizeof full, "%s:%d: %s", file, line, msg);
    else
        snprintf(full, sizeof full, "%s: %s", file, msg);
    if (pr->count++ == 0)
        kh_err_set(&pr->first, KH_ECOMPILE, "%s", full);
    if (pr->count > MAX_PROBLEMS)
        return; /* counted, summarised at the end */
    size_t n = strlen(full);
    if (pr->len + n + 2 > pr->cap) {
        size_t cap = (pr->cap + n + 2) * 2;
        char *b = realloc(pr->buf, cap);
        if (!b) {
            pr->oom = 1;
            return;
        }
        pr->buf = b;
        pr->cap = cap;
    }
    memcpy(pr->buf + pr->len, full, n);
    pr->len += n;
    pr->buf[pr->len++] = '\n';
    pr->buf[pr->len] = '\0';
}

static const char *const default_includes[] = {
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cooperative_groups.h",
    "cooperative_groups/", "cuda/std/", "cub/",
};

static int include_match(const char *name, const char *pat)
{
    size_t n = strlen(pat);
    if (n && pat[n - 1] == '/')
        return !strncmp(name, pat, n) && name[n] != '\0';
    return !strcmp(name, pat);
}

int kh_srccheck_include_allowed(const char *name)
{
    if (strstr(name, ".."))
        return 0;
    for (size_t i = 0; i < KH_ARRAY_LEN(default_includes); i++)
        if (include_match(name, default_includes[i]))
            return 1;
    return 0;
}

/* Device-side functions whose names look like host API calls. */
static const char *const device_api_ok[] = {
    "cudaGridDependencySynchronize", "cudaTriggerProgrammaticLaunchCompletion",
};
static const char *const device_launch_api[] = {
    "cudaLaunchDevice", "cudaGetParameterBuffer", "cudaLaunchKernel",
    "cudaGetParameterBufferV2", "cudaLaunchDeviceV2", "cudaDeviceSynchronize",
};

static int in_list(const tok *t, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (is(t, list[i]))
            return 1;
    return 0;
}

static int looks_like_host_api(const tok *t)
{
    /* cudaMalloc, cuLaunchKernel, cuMemAlloc_v2: the runtime and driver APIs */
    if (t->n > 4 && !memcmp(t->s, "cuda", 4) && t->s[4] >= 'A' && t->s[4] <= 'Z')
        return 1;
    if (t->n > 3 && t->s[0] == 'c' && t->s[1] == 'u' && t->s[2] >= 'A' && t->s[2] <= 'Z' &&
        t->s[3] >= 'a' && t->s[3] <= 'z')
        return 1;
    return 0;
}

/* The line of the first invalid UTF-8 sequence or NUL byte, or 0. */
static int first_bad_utf8(const unsigned char *s, size_t n, int *is_nul)
{
    int line = 1;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c == '\n') {
            line++;
            i++;
            continue;
        }
        if (c == 0) {
            *is_nul = 1;
            return line;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned min;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
            min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            min = 0x10000;
        } else {
            return line;
        }
        if (i + need >= n)
            return line;
        unsigned cp = c & (0x3f >> need);
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return line;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return line;
        i += need + 1;
    }
    return 0;
}

typedef struct kdef {
    char name[128];
    const char *file;
    int line;
    int c_linkage;
    int templated;
} kdef;

typedef struct kdefs {
    kdef *v;
    size_t n, cap;
} kdefs;

/* 1 if the n bytes at s are the name of one of the candidate's headers. */
static int is_header(const kh_srccheck_opts *o, const char *s, size_t n)
{
    for (size_t i = 0; i < o->n_headers; i++)
        if (o->headers[i].name && strlen(o->headers[i].name) == n &&
            !memcmp(o->headers[i].name, s, n))
            return 1;
    return 0;
}

const char *kh_srccheck_header_name_problem(const char *name)
{
    if (!name || !name[0])
        return "the name is empty";
    if (strlen(name) > KH_SRCCHECK_MAX_NAME)
        return "the name is longer than 255 bytes";
    if (name[0] == '/')
        return "it is an absolute path";
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '+' || c == '/'))
            return "it has a character other than letters, digits and . _ - + /";
    }
    for (const char *seg = name;;) {
        const char *e = strchr(seg, '/');
        size_t n = e ? (size_t)(e - seg) : strlen(seg);
        if (n == 0)
            return "it has an empty path component";
        if (n == 2 && !memcmp(seg, "..", 2))
            return "it goes up with '..'";
        if (n == 1 && seg[0] == '.')
            return "it has a '.' path component";
        if (!e)
            return NULL;
        seg = e + 1;
    }
}

/* The names of the candidate's headers into pr, each problem naming its header. */
static void check_names(problems *pr, const char *entry, const kh_source *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *nm = h[i].name ? h[i].name : "";
        const char *why = kh_srccheck_header_name_problem(nm);
        if (why) {
            add(pr, entry, 0, "source '%.300s' cannot be a header: %s (expected a plain file "
                "name or a relative path such as util.cuh or include/util.cuh)", nm, why);
            continue;
        }
        if (!strcmp(nm, entry))
            add(pr, entry, 0, "source '%s' is given again as a header", nm);
        for (size_t k = 0; k < i; k++)
            if (h[k].name && !strcmp(h[k].name, nm)) {
                add(pr, entry, 0, "source '%s' is given twice", nm);
                break;
            }
    }
}

/* The report of pr as kh_srccheck_run returns it; frees pr's buffer unless
 * handed to *report. */
static kh_status finish_report(problems *pr, const char *file, char **report, kh_err *err)
{
    if (pr->oom) {
        free(pr->buf);
        return kh_err_set(err, KH_ENOMEM, "srccheck: out of memory");
    }
    if (pr->count == 0) {
        free(pr->buf);
        return KH_OK;
    }
    if (pr->count > MAX_PROBLEMS) {
        int more = pr->count - MAX_PROBLEMS;
        pr->count = 1; /* let add() append the summary */
        add(pr, file, 0, "... and %d more problems", more);
        if (pr->oom) {
            free(pr->buf);
            return kh_err_set(err, KH_ENOMEM, "srccheck: out of memory");
        }
    }
    if (err)
        *err = pr->first;
    if (report)
        *report = pr->buf;
    else
        free(pr->buf);
    return KH_ECOMPILE;
}

kh_status kh_srccheck_names(const char *entry, const kh_source *headers, size_t n,
                            char **report, kh_err *err)
{
    problems pr = {0};
    if (report)
        *report = NULL;
    const char *file = entry && entry[0] ? entry : "candidate.cu";
    check_names(&pr, file, headers, n);
    return finish_report(&pr, file, report, err);
}

/* An #include directive (t names it; lx is just after it): the header it
 * names must be on the allowlist, among o's extra includes, or one of the
 * candidate's own sources in quotes.  Returns the header's token. */
static tok check_include(problems *pr, const char *file, lexer *lx, const tok *t,
                         const kh_srccheck_opts *o)
{
    int line = t->line;
    tok h = next(lx);
    if (is(t, "include_next") || is(t, "import")) {
        add(pr, file, line, "#%.*s is not allowed", (int)t->n, t->s);
    } else if ((h.kind != T_HEADER && h.kind != T_STR) || h.n < 2 || h.line != line) {
        add(pr, file, line, "#include must name a header in <> or \"\"");
    } else {
        char name[256];
        size_t n = h.n - 2 < sizeof name - 1 ? h.n - 2 : sizeof name - 1;
        memcpy(name, h.s + 1, n);
        name[n] = '\0';
        int ok = kh_srccheck_include_allowed(name);
        for (size_t i = 0; !ok && i < o->n_extra_includes; i++)
            ok = !strstr(name, "..") && include_match(name, o->extra_includes[i]);
        /* one of the candidate's own sources, by its name, in quotes:
         * that is how nvcc finds it beside the file too */
        int own = is_header(o, h.s + 1, h.n - 2);
        if (!ok && own && h.kind == T_STR)
            ok = 1;
        if (!ok && own)
            add(pr, file, line, "#include <%s> names the candidate's own source: "
                "include it as \"%s\"", name, name);
        else if (!ok && h.kind == T_STR)
            add(pr, file, line,
                "#include \"%s\" is not on the allowlist (cuda_fp16.h, cuda_bf16.h, "
                "cuda_fp8.h, cooperative_groups, cuda/std/*, cub/*) and is not one "
                "of the candidate's sources", name);
        else if (!ok)
            add(pr, file, line,
                "#include <%s> is not on the allowlist (cuda_fp16.h, cuda_bf16.h, "
                "cuda_fp8.h, cooperative_groups, cuda/std/*, cub/*)", name);
    }
    return h;
}

/* A __global__ declaration (at: just after the keyword, on line `line`):
 * its name into kd, with its linkage and whether it is a template.  The name
 * is the identifier before the first '(' that is not an attribute's argument
 * list.  -1 only when out of memory. */
static int global_def(const lexer *at, const char *file, int line, int c_linkage,
                      int templated, kdefs *kd)
{
    lexer lx = *at;
    tok last = {0}, n2;
    /* bounded: hostile input must not make this quadratic */
    for (int budget = MAX_DECL_TOKENS; budget > 0; budget--) {
        n2 = next(&lx);
        if (n2.kind == T_EOF || (n2.kind == T_PUNCT && (is(&n2, ";") || is(&n2, "{"))))
            break;
        if (n2.kind == T_IDENT &&
            (is(&n2, "__launch_bounds__") || is(&n2, "__maxnreg__") ||
             is(&n2, "__cluster_dims__") || is(&n2, "__attribute__") ||
             is(&n2, "alignas") || is(&n2, "__declspec"))) {
            int par = 0;
            do {
                n2 = next(&lx);
                if (n2.kind == T_PUNCT && is(&n2, "("))
                    par++;
                else if (n2.kind == T_PUNCT && is(&n2, ")"))
                    par--;
            } while (n2.kind != T_EOF && par > 0 && --budget > 0);
            continue;
        }
        if (n2.kind == T_PUNCT && is(&n2, "(")) {
            if (last.kind == T_IDENT) {
                if (kd->n == kd->cap) {
                    size_t cap = kd->cap ? 2 * kd->cap : 16;
                    kdef *k2 = realloc(kd->v, cap * sizeof *k2);
                    if (!k2)
                        return -1;
                    kd->v = k2;
                    kd->cap = cap;
                }
                kdef *k = &kd->v[kd->n++];
                size_t n = last.n < sizeof k->name - 1 ? last.n : sizeof k->name - 1;
                memcpy(k->name, last.s, n);
                k->name[n] = '\0';
                k->file = file;
                k->line = line;
                k->c_linkage = c_linkage;
                k->templated = templated;
            }
            break;
        }
        last = n2;
    }
    return 0;
}

/* The rules of one file (encoding, includes, device code only, launches);
 * the __global__ definitions it holds go to kd.  KH_ENOMEM only when out of
 * memory; problems go to pr. */
static kh_status check_file(problems *pr, const char *file, const char *src, size_t len,
                            const kh_srccheck_opts *o, kdefs *kd)
{
    int nul = 0;
    int bad = first_bad_utf8((const unsigned char *)src, len, &nul);
    if (bad) {
        add(pr, file, bad, nul ? "NUL byte in source" : "source is not valid UTF-8");
        return KH_OK;
    }

    /* Brace stack: 1 for an extern "C" { block, 0 for anything else. */
    enum { MAXDEPTH = 256 };
    unsigned char stack[MAXDEPTH];
    int depth = 0, c_blocks = 0;
    int pending_c = 0, pending_template = 0, saw_extern_c = 0;
    lexer lx = {.p = src, .end = src + len, .line = 1, .bol = 1};
    tok prev = {0}, t;
    for (t = next(&lx); t.kind != T_EOF; prev = t, t = next(&lx)) {
        if (t.directive) {
            if (t.kind == T_IDENT && t.dir_start &&
                (is(&t, "include") || is(&t, "include_next") || is(&t, "import"))) {
                prev = check_include(pr, file, &lx, &t, o);
                continue;
            }
        }
        if (t.kind == T_PUNCT && is(&t, "<<<") && !o->allow_device_launch)
            add(pr, file, t.line, "device-side kernel launch (<<<...>>>) is not allowed");
        if (t.kind == T_PUNCT && !t.directive && (is(&t, ";") || is(&t, "}")))
            pending_c = pending_template = 0;
        if (t.kind == T_PUNCT && !t.directive && is(&t, "{")) {
            int is_c = saw_extern_c;
            saw_extern_c = 0;
            if (depth < MAXDEPTH)
                stack[depth] = (unsigned char)is_c;
            depth++;
            c_blocks += is_c;
            if (!is_c)
                pending_c = 0;
            continue;
        }
        if (t.kind == T_PUNCT && !t.directive && is(&t, "}")) {
            if (depth > 0) {
                depth--;
                if (depth < MAXDEPTH)
                    c_blocks -= stack[depth];
            }
            continue;
        }
        if (t.kind == T_STR && prev.kind == T_IDENT && is(&prev, "extern") && is(&t, "\"C\"")) {
            pending_c = 1;
            saw_extern_c = 1; /* cleared unless '{' follows */
            continue;
        }
        saw_extern_c = 0;
        if (t.kind != T_IDENT)
            continue;
        if (is(&t, "template"))
            pending_template = 1;
        /* main at any depth outside a function body is a host entry point */
        if (is(&t, "main")) {
            lexer save = lx;
            tok n2 = next(&lx);
            lx = save;
            if (n2.kind == T_PUNCT && is(&n2, "("))
                add(pr, file, t.line, "host function 'main' is not allowed: device code only");
        }
        if (is(&t, "__host__")) {
            /* allowed only together with __device__ in the same declaration */
            int dev = is(&prev, "__device__");
            lexer save = lx;
            for (int k = 0; k < 6 && !dev; k++) {
                tok n2 = next(&lx);
                if (n2.kind == T_EOF || (n2.kind == T_PUNCT && (is(&n2, "(") || is(&n2, ";"))))
                    break;
                dev = is(&n2, "__device__");
            }
            lx = save;
            if (!dev)
                add(pr, file, t.line, "__host__ function is not allowed: device code only");
        }
        if (looks_like_host_api(&t) && !in_list(&t, device_api_ok, KH_ARRAY_LEN(device_api_ok))) {
            lexer save = lx;
            tok n2 = next(&lx);
            lx = save;
            if (n2.kind == T_PUNCT && is(&n2, "(")) {
                if (in_list(&t, device_launch_api, KH_ARRAY_LEN(device_launch_api))) {
                    if (!o->allow_device_launch)
                        add(pr, file, t.line,
                            "device-side launch API '%.*s' is not allowed", (int)t.n, t.s);
                } else {
                    add(pr, file, t.line,
                        "host API call '%.*s' is not allowed in device code", (int)t.n, t.s);
                }
            }
        }
        if (is(&t, "__global__") && !t.directive &&
            global_def(&lx, file, t.line, pending_c || c_blocks > 0, pending_template, kd))
            return KH_ENOMEM;
    }
    return KH_OK;
}

kh_status kh_srccheck_run(const char *src, size_t len, const kh_srccheck_opts *opts,
                          char **report, kh_err *err)
{
    kh_srccheck_opts dflt = {0};
    const kh_srccheck_opts *o = opts ? opts : &dflt;
    const char *file = o->name ? o->name : "candidate.cu";
    size_t max = o->max_bytes ? o->max_bytes : KH_SRCCHECK_MAX_BYTES;
    problems pr = {0};
    kdefs kd = {0};
    if (report)
        *report = NULL;

    check_names(&pr, file, o->headers, o->n_headers);
    if (pr.count)
        return finish_report(&pr, file, report, err);
    size_t total = len;
    for (size_t i = 0; i < o->n_headers; i++)
        total += o->headers[i].len;
    if (total > max) {
        if (o->n_headers)
            add(&pr, file, 0, "sources are %zu bytes together (%s %zu, its %zu header%s %zu), "
                "over the limit of %zu bytes", total, file, len, o->n_headers,
                o->n_headers == 1 ? "" : "s", total - len, max);
        else
            add(&pr, file, 0, "source is %zu bytes, over the limit of %zu bytes", len, max);
        return finish_report(&pr, file, report, err);
    }
    kh_status st = check_file(&pr, file, src, len, o, &kd);
    for (size_t i = 0; !st && i < o->n_headers; i++)
        st = check_file(&pr, o->headers[i].name, o->headers[i].text ? o->headers[i].text : "",
                        o->headers[i].len, o, &kd);
    if (st) {
        free(kd.v);
        free(pr.buf);
        return kh_err_set(err, KH_ENOMEM, "srccheck: out of memory");
    }
    for (size_t i = 0; i < o->n_kernels; i++) {
        const char *want = o->kernels[i];
        const kdef *found = NULL;
        for (size_t k = 0; k < kd.n && !found; k++)
            if (!strcmp(kd.v[k].name, want))
                found = &kd.v[k];
        if (!found)
            add(&pr, file, 0, "kernel '%s' named in the manifest is not defined as a "
                              "__global__ function%s", want,
                o->n_headers ? " in any of the candidate's sources" : "");
        else if (found->templated)
            add(&pr, found->file, found->line, "kernel '%s' is a template: manifest kernels "
                                               "need extern \"C\" names", want);
        else if (!found->c_linkage)
            add(&pr, found->file, found->line, "kernel '%s' is not declared extern \"C\"", want);
    }
    free(kd.v);
    return finish_report(&pr, file, report, err);
}

void kh_srccheck_includes(const char *src, size_t len, kh_include_fn fn, void *ud)
{
    lexer lx = {.p = src, .end = src + len, .line = 1, .bol = 1};
    for (tok t = next(&lx); t.kind != T_EOF; t = next(&lx)) {
        if (!(t.directive && t.dir_start && t.kind == T_IDENT &&
              (is(&t, "include") || is(&t, "include_next"))))
            continue;
        tok h = next(&lx);
        if ((h.kind != T_HEADER && h.kind != T_STR) || h.n < 2 || h.line != t.line)
            continue;
        char name[512];
        size_t n = h.n - 2 < sizeof name - 1 ? h.n - 2 : sizeof name - 1;
        memcpy(name, h.s + 1, n);
        name[n] = '\0';
        fn(ud, name, h.kind == T_HEADER, t.line);
    }
}

/* Start of the line holding p. */
static const char *line_start(const char *src, const char *p)
{
    while (p > src && p[-1] != '\n')
        p--;
    return p;
}

/* 1 if the header token h (with its delimiters) names one of headers. */
static int names_header(const tok *h, const kh_source *headers, size_t n)
{
    kh_srccheck_opts o = {.headers = headers, .n_headers = n};
    return h->n >= 2 && is_header(&o, h->s + 1, h->n - 2);
}

char *kh_srccheck_pch_prefix(const char *src, size_t len, const kh_source *headers,
                             size_t n_headers)
{
    lexer lx = {.p = src, .end = src + len, .line = 1, .bol = 1};
    const char *stop = src + len, *hash = NULL;
    int includes = 0, seen_define = 0;
    for (tok t = next(&lx); t.kind != T_EOF; t = next(&lx)) {
        if (!t.directive) {
            stop = line_start(src, t.s);
            break;
        }
        if (t.kind == T_PUNCT && t.n == 1 && t.s[0] == '#') {
            hash = t.s;
            continue;
        }
        if (!t.dir_start)
            continue; /* the rest of an accepted directive */
        if (t.kind == T_IDENT && is(&t, "include") && seen_define) {
            /* a macro defined above would expand inside the header */
            stop = line_start(src, hash ? hash : t.s);
            break;
        }
        if (t.kind == T_IDENT && is(&t, "include")) {
            tok h = next(&lx);
            if ((h.kind != T_HEADER && h.kind != T_STR) || h.n < 2 || h.line != t.line)
                return NULL;
            if (names_header(&h, headers, n_headers)) {
                /* the candidate's own code: it is compiled isolated, never
                 * here, and never held in a precompiled header */
                stop = line_start(src, hash ? hash : t.s);
                break;
            }
            includes++;
        } else if (!(t.kind == T_IDENT &&
                     (is(&t, "define") || is(&t, "undef") || is(&t, "pragma")))) {
            /* #if and friends evaluate macros: warming them could run anything */
            stop = line_start(src, hash ? hash : t.s);
            break;
        } else {
            seen_define = 1;
        }
    }
    if (!includes || stop == src)
        return NULL;
    size_t n = (size_t)(stop - src);
    char *out = malloc(n + 2);
    if (!out)
        return NULL;
    memcpy(out, src, n);
    if (n && out[n - 1] != '\n')
        out[n++] = '\n';
    out[n] = '\0';
    return out;
}

int kh_srccheck_pch_may_hold(const char *src, size_t len, const kh_source *headers,
                             size_t n_headers)
{
    if (!n_headers)
        return 0;
    lexer lx = {.p = src, .end = src + len, .line = 1, .bol = 1};
    for (tok t = next(&lx); t.kind != T_EOF; t = next(&lx)) {
        if (!t.directive)
            return 0; /* the first line of code: the PCH ends before it */
        if (!t.dir_start || t.kind != T_IDENT)
            continue;
        if (is(&t, "include") || is(&t, "include_next") || is(&t, "import")) {
            tok h = next(&lx);
            if ((h.kind != T_HEADER && h.kind != T_STR) || h.line != t.line ||
                names_header(&h, headers, n_headers))
                return 1; /* computed, or one of the candidate's */
        } else if (is(&t, "if") || is(&t, "ifdef") || is(&t, "ifndef") || is(&t, "elif") ||
                   is(&t, "elifdef") || is(&t, "elifndef") || is(&t, "else") ||
                   is(&t, "endif")) {
            return 1; /* a false branch may hide code: the end is not known here */
        }
    }
    return 0;
}
