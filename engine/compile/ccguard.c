/* ccguard.c: the checks of ccguard.h over a host candidate's compile: its own
 * sources (directives), the compiler's dependency list, preprocessed text,
 * assembly and log.  Text work and realpath only; running the compiler and
 * deciding what a rejection does belong to hostcc.c. */
#include "compile/ccguard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define ONLY_SYSTEM "a host candidate may include system headers and its own sources only"

typedef enum fclass { F_OWN, F_SYSTEM, F_BUILTIN, F_MISSING, F_FOREIGN } fclass;

typedef struct own_file {
    char *path; /* as the compiler is given it */
    char *real;
    char *text; /* as read before the compile; what is checked and quoted */
    size_t len;
    int generated; /* written by the compile (preprocessed text, assembly) */
} own_file;

typedef struct seen {
    char *name;
    fclass c;
} seen;

struct kh_ccguard {
    char **sys; /* realpaths of the system include directories */
    size_t nsys;
    own_file *own;
    size_t nown, capown;
    char *dir; /* the first source's directory with its '/', stripped from messages */
    seen cache[256];
    size_t ncache;
};

/* ---- setup ---------------------------------------------------------------- */

void kh_ccguard_strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

char **kh_ccguard_sysdirs(const char *out)
{
    size_t n = 0, cap = 8;
    char **v = calloc(cap + 1, sizeof *v);
    if (!v)
        return NULL;
    const char *p = out ? strstr(out, "#include <...> search starts here:") : NULL;
    if (p)
        p = strchr(p, '\n');
    while (p && *p == '\n') {
        p++;
        size_t ll = strcspn(p, "\n");
        if (ll == 0 || p[0] != ' ')
            break; /* "End of search list." */
        const char *s = p;
        size_t l = ll;
        while (l && (*s == ' ' || *s == '\t'))
            s++, l--;
        const char *fw = " (framework directory)";
        if (l > strlen(fw) && !memcmp(s + l - strlen(fw), fw, strlen(fw)))
            l -= strlen(fw);
        while (l && (s[l - 1] == ' ' || s[l - 1] == '\r'))
            l--;
        if (n == cap) {
            char **nv = realloc(v, (cap * 2 + 1) * sizeof *v);
            if (!nv) {
                kh_ccguard_strv_free(v);
                return NULL;
            }
            v = nv;
            cap *= 2;
        }
        if (!(v[n] = strndup(s, l))) {
            kh_ccguard_strv_free(v);
            return NULL;
        }
        v[++n] = NULL;
        p += ll;
    }
    return v;
}


static kh_status add_own(kh_ccguard *g, const char *path, int generated, kh_err *err)
{
    if (g->nown == g->capown) {
        size_t nc = g->capown ? g->capown * 2 : 8;
        own_file *no = realloc(g->own, nc * sizeof *no);
        if (!no)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        g->own = no;
        g->capown = nc;
    }
    own_file *o = &g->own[g->nown];
    memset(o, 0, sizeof *o);
    o->generated = generated;
    if (!(o->path = kh_strdup(path)))
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    if (!generated) {
        if (!(o->real = realpath(path, NULL)) || kh_read_file(path, &o->text, &o->len)) {
            free(o->path);
            free(o->real);
            return kh_err_set(err, KH_EIO, "cannot read the candidate's source %s", path);
        }
    }
    g->nown++;
    /* a generated file may have been looked at before it existed */
    for (size_t i = 0; i < g->ncache; i++)
        free(g->cache[i].name);
    g->ncache = 0;
    return KH_OK;
}

kh_ccguard *kh_ccguard_new(const char *const *sys_dirs, const char *const *own, kh_err *err)
{
    kh_ccguard *g = calloc(1, sizeof *g);
    size_t n = 0;
    while (sys_dirs && sys_dirs[n])
        n++;
    if (!g || !(g->sys = calloc(n + 1, sizeof *g->sys))) {
        free(g);
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        char *r = realpath(sys_dirs[i], NULL);
        if (r && strcmp(r, "/"))
            g->sys[g->nsys++] = r;
        else
            free(r);
    }
    for (size_t i = 0; own && own[i]; i++)
        if (add_own(g, own[i], 0, err)) {
            kh_ccguard_free(g);
            return NULL;
        }
    if (g->nown) {
        const char *slash = strrchr(g->own[0].path, '/');
        g->dir = slash ? strndup(g->own[0].path, (size_t)(slash - g->own[0].path) + 1)
                       : kh_strdup("");
        if (!g->dir) {
            kh_ccguard_free(g);
            kh_err_set(err, KH_ENOMEM, "out of memory");
            return NULL;
        }
    }
    return g;
}

kh_status kh_ccguard_add_generated(kh_ccguard *g, const char *path)
{
    kh_err err;
    return add_own(g, path, 1, &err);
}

void kh_ccguard_free(kh_ccguard *g)
{
    if (!g)
        return;
    kh_ccguard_strv_free(g->sys);
    for (size_t i = 0; i < g->nown; i++) {
        free(g->own[i].path);
        free(g->own[i].real);
        free(g->own[i].text);
    }
    free(g->own);
    free(g->dir);
    for (size_t i = 0; i < g->ncache; i++)
        free(g->cache[i].name);
    free(g);
}

/* ---- what a file is ------------------------------------------------------- */

static int under(const char *real, const char *dir)
{
    size_t n = strlen(dir);
    return !strncmp(real, dir, n) && real[n] == '/';
}

static fclass classify_real(const kh_ccguard *g, const char *real)
{
    for (size_t i = 0; i < g->nown; i++)
        if (g->own[i].real && !strcmp(real, g->own[i].real))
            return F_OWN;
    for (size_t i = 0; i < g->nsys; i++)
        if (under(real, g->sys[i]))
            return F_SYSTEM;
    return F_FOREIGN;
}

/* A file as the compiler names it: "<built-in>" and "<command-line>" are the
 * compiler's; a generated file (listed by path) is the candidate's. */
static fclass classify(kh_ccguard *g, const char *name)
{
    if (name[0] == '<')
        return F_BUILTIN;
    for (size_t i = 0; i < g->ncache; i++)
        if (!strcmp(g->cache[i].name, name))
            return g->cache[i].c;
    fclass c = F_MISSING;
    for (size_t i = 0; i < g->nown && c == F_MISSING; i++)
        if (!strcmp(name, g->own[i].path))
            c = F_OWN;
    if (c == F_MISSING) {
        char *real = realpath(name, NULL);
        if (real)
            c = classify_real(g, real);
        free(real);
    }
    if (g->ncache < KH_ARRAY_LEN(g->cache) && (g->cache[g->ncache].name = kh_strdup(name)))
        g->cache[g->ncache++].c = c;
    return c;
}

static const own_file *own_by_name(const kh_ccguard *g, const char *name)
{
    for (size_t i = 0; i < g->nown; i++)
        if (!strcmp(name, g->own[i].path))
            return &g->own[i];
    char *real = realpath(name, NULL);
    const own_file *o = NULL;
    for (size_t i = 0; real && i < g->nown && !o; i++)
        if (g->own[i].real && !strcmp(real, g->own[i].real))
            o = &g->own[i];
    free(real);
    return o;
}

/* name without the candidate's directory */
static const char *shown(const kh_ccguard *g, const char *name)
{
    size_t n = g->dir ? strlen(g->dir) : 0;
    return n && !strncmp(name, g->dir, n) ? name + n : name;
}

/* The logical line (spliced lines joined) that holds physical line `line`
 * (1-based) of an own file, blanks trimmed, at most 160 bytes, into buf.
 * "" when there is no such line. */
static void own_line(const own_file *o, long line, char *buf, size_t n)
{
    buf[0] = '\0';
    if (!o || !o->text || line < 1 || n == 0)
        return;
    const char *t = o->text, *end = o->text + o->len, *p = t;
    for (long l = 1; l < line && p < end; l++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    /* back to the start of the logical line: the line before ends in '\' */
    while (p > t) {
        const char *q = p - 1; /* the '\n' ending the line before */
        while (q > t && (q[-1] == '\r' || q[-1] == ' ' || q[-1] == '\t'))
            q--;
        if (q == t || q[-1] != '\\')
            break;
        while (q > t && q[-1] != '\n')
            q--;
        p = q;
    }
    size_t k = 0;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (p < end && *p != '\n' && k + 1 < n && k < 160) {
        if (*p == '\\' && memchr(p, '\n', (size_t)(end - p))) {
            const char *r = p + 1;
            while (r < end && (*r == ' ' || *r == '\t' || *r == '\r'))
                r++;
            if (r < end && *r == '\n') { /* a splice */
                p = r + 1;
                continue;
            }
        }
        buf[k++] = *p++;
    }
    while (k && (buf[k - 1] == ' ' || buf[k - 1] == '\t' || buf[k - 1] == '\r'))
        k--;
    buf[k] = '\0';
}

/* The first line of an own file that looks like a directive naming path
 * (for a dependency without a line marker): its file and line.  0 if none. */
static int directive_naming(const kh_ccguard *g, const char *path, const own_file **site,
                            long *line)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (size_t i = 0; i < g->nown; i++) {
        const own_file *o = &g->own[i];
        if (o->generated)
            continue;
        const char *p = o->text, *end = o->text + o->len;
        for (long l = 1; p < end; l++) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            const char *e = nl ? nl : end;
            const char *q = p;
            while (q < e && (*q == ' ' || *q == '\t'))
                q++;
            size_t len = (size_t)(e - q), bl = strlen(base);
            if (q < e && (*q == '#' || *q == '%' || *q == '?') && bl)
                for (size_t k = 0; k + bl <= len; k++)
                    if (!memcmp(q + k, base, bl)) {
                        *site = o;
                        *line = l;
                        return 1;
                    }
            p = nl ? nl + 1 : end;
        }
    }
    return 0;
}

/* ---- the candidate's own sources ------------------------------------------ */

static char trigraph(char c)
{
    static const char from[] = "=/'()!<>-", to[] = "#\\^[]|{}~";
    const char *k = c ? strchr(from, c) : NULL;
    return k ? to[k - from] : 0;
}

/* Translation phases 1 and 2 (trigraphs, line splices) of text into *out,
 * with the source line of every byte in *lines. */
static int splice(const char *s, size_t n, char **out, uint32_t **lines, size_t *out_n)
{
    char *b = malloc(n + 1);
    uint32_t *ln = malloc((n + 1) * sizeof *ln);
    if (!b || !ln) {
        free(b);
        free(ln);
        return -1;
    }
    size_t o = 0, i = 0;
    uint32_t line = 1;
    while (i < n) {
        char c = s[i], t;
        size_t w = 1;
        if (c == '?' && i + 2 < n && s[i + 1] == '?' && (t = trigraph(s[i + 2]))) {
            c = t;
            w = 3;
        }
        if (c == '\\') {
            size_t j = i + w;
            while (j < n && (s[j] == ' ' || s[j] == '\t'))
                j++;
            if (j + 1 < n && s[j] == '\r' && s[j + 1] == '\n')
                j++;
            if (j < n && s[j] == '\n') {
                line++;
                i = j + 1;
                continue;
            }
        }
        b[o] = c;
        ln[o++] = line;
        if (c == '\n')
            line++;
        i += w;
    }
    b[o] = '\0';
    *out = b;
    *lines = ln;
    *out_n = o;
    return 0;
}

static int ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' ||
           (unsigned char)c >= 0x80;
}

static int ident_char(char c)
{
    return ident_start(c) || (c >= '0' && c <= '9');
}

/* Past a block comment starting at b[i] ("/ *"); *nl set when it spans lines. */
static size_t skip_block(const char *b, size_t n, size_t i, int *nl)
{
    for (i += 2; i < n; i++) {
        if (b[i] == '\n')
            *nl = 1;
        if (b[i] == '*' && i + 1 < n && b[i + 1] == '/')
            return i + 2;
    }
    return n;
}

/* Blanks and comments within a line. */
static size_t skip_blanks(const char *b, size_t n, size_t i)
{
    for (;;) {
        while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\f' || b[i] == '\v' ||
                         b[i] == '\r'))
            i++;
        int nl = 0;
        if (i + 1 < n && b[i] == '/' && b[i + 1] == '*')
            i = skip_block(b, n, i, &nl);
        else
            return i;
    }
}

/* Past a header name "<...>" at b[i], if there is one: the preprocessor reads
 * no comment or string inside it. */
static size_t skip_header_name(const char *b, size_t n, size_t i)
{
    i = skip_blanks(b, n, i);
    if (i < n && b[i] == '<')
        while (i < n && b[i] != '>' && b[i] != '\n')
            i++;
    return i;
}

static kh_status check_directives(const kh_ccguard *g, const own_file *o, kh_err *err)
{
    char *b;
    uint32_t *ln;
    size_t n;
    if (splice(o->text, o->len, &b, &ln, &n))
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    const char *name = shown(g, o->path), *bad = NULL;
    uint32_t bad_line = 0;
    int bol = 1;
    size_t i = 0;
    while (i < n && !bad) {
        char c = b[i];
        if (c == '\n') {
            bol = 1;
            i++;
        } else if (c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r') {
            i++;
        } else if (c == '/' && i + 1 < n && b[i + 1] == '*') {
            int nl = 0;
            i = skip_block(b, n, i, &nl);
            bol |= nl; /* counted as a line start: more is checked, never less */
        } else if (c == '/' && i + 1 < n && b[i + 1] == '/') {
            while (i < n && b[i] != '\n')
                i++;
        } else if (bol && (c == '#' || (c == '%' && i + 1 < n && b[i + 1] == ':'))) {
            uint32_t at = ln[i];
            size_t j = skip_blanks(b, n, i + (c == '#' ? 1 : 2));
            char dir[32] = "";
            size_t k = 0;
            if (j < n && b[j] >= '0' && b[j] <= '9') {
                bad = "line markers ('# 1 \"file\"') are not allowed in a host candidate";
                bad_line = at;
            }
            while (j < n && ident_char(b[j])) {
                if (k + 1 < sizeof dir)
                    dir[k++] = b[j];
                j++;
            }
            dir[k] = '\0';
            if (!strcmp(dir, "line")) {
                bad = "#line is not allowed in a host candidate";
                bad_line = at;
            } else if (!strcmp(dir, "embed")) {
                bad = "#embed is not allowed: " ONLY_SYSTEM;
                bad_line = at;
            } else if (!strcmp(dir, "include") || !strcmp(dir, "include_next") ||
                       !strcmp(dir, "import")) {
                j = skip_header_name(b, n, j);
            }
            bol = 0;
            i = j;
        } else if (c == '"' || c == '\'') {
            bol = 0;
            for (i++; i < n && b[i] != c && b[i] != '\n'; i++)
                if (b[i] == '\\' && i + 1 < n && b[i + 1] != '\n')
                    i++;
            if (i < n && b[i] == c)
                i++;
        } else if (ident_start(c)) {
            bol = 0;
            size_t s = i;
            while (i < n && ident_char(b[i]))
                i++;
            size_t l = i - s;
            if ((l == 13 && !memcmp(b + s, "__has_include", 13)) ||
                (l == 18 && !memcmp(b + s, "__has_include_next", 18)) ||
                (l == 11 && !memcmp(b + s, "__has_embed", 11))) {
                size_t j = skip_blanks(b, n, i);
                if (j < n && b[j] == '(')
                    i = skip_header_name(b, n, j + 1);
            }
        } else if ((c >= '0' && c <= '9') || (c == '.' && i + 1 < n && b[i + 1] >= '0' &&
                                               b[i + 1] <= '9')) {
            bol = 0; /* a pp-number: 1e+5, 0x1p-3, 12asm */
            for (i++; i < n; i++) {
                if ((b[i] == '+' || b[i] == '-') && strchr("eEpP", b[i - 1]))
                    continue;
                if (!ident_char(b[i]) && b[i] != '.')
                    break;
            }
        } else {
            bol = 0;
            i++;
        }
    }
    free(b);
    free(ln);
    if (bad)
        return kh_err_set(err, KH_ECOMPILE, "%s:%u: %s", name, bad_line, bad);
    return KH_OK;
}

kh_status kh_ccguard_check_sources(kh_ccguard *g, kh_err *err)
{
    for (size_t i = 0; i < g->nown; i++) {
        if (g->own[i].generated)
            continue;
        kh_status st = check_directives(g, &g->own[i], err);
        if (st)
            return st;
    }
    return KH_OK;
}

/* ---- the preprocessed text ------------------------------------------------ */

/* A line marker `# 12 "name" 1 3` of len bytes at l: its line number, its
 * name (unescaped, into name[n]) and whether it enters (1) or leaves (2) a
 * file.  0 when l is not a marker. */
static int marker(const char *l, size_t len, long *line, char *name, size_t n, int *enter,
                  int *leave)
{
    if (len < 3 || l[0] != '#' || l[1] != ' ' || l[2] < '0' || l[2] > '9')
        return 0;
    size_t i = 2;
    long v = 0;
    while (i < len && l[i] >= '0' && l[i] <= '9')
        v = v * 10 + (l[i++] - '0');
    *line = v;
    while (i < len && l[i] == ' ')
        i++;
    size_t k = 0;
    if (i < len && l[i] == '"') {
        for (i++; i < len && l[i] != '"'; i++) {
            char c = l[i];
            if (c == '\\' && i + 1 < len) {
                c = l[++i];
                if (c >= '0' && c <= '7') {
                    int oct = 0;
                    for (int d = 0; d < 3 && i < len && l[i] >= '0' && l[i] <= '7'; d++)
                        oct = oct * 8 + (l[i++] - '0');
                    i--;
                    c = (char)oct;
                }
            }
            if (k + 1 < n)
                name[k++] = c;
        }
        i++;
    }
    name[k] = '\0';
    *enter = *leave = 0;
    for (; i < len; i++) {
        if (l[i] == '1' && l[i - 1] == ' ' && (i + 1 == len || l[i + 1] == ' '))
            *enter = 1;
        if (l[i] == '2' && l[i - 1] == ' ' && (i + 1 == len || l[i + 1] == ' '))
            *leave = 1;
    }
    return 1;
}

/* An asm keyword among the tokens of one line (strings and character
 * constants skipped). */
static int has_asm(const char *l, size_t len)
{
    size_t i = 0;
    while (i < len) {
        char c = l[i];
        if (c == '"' || c == '\'') {
            for (i++; i < len && l[i] != c; i++)
                if (l[i] == '\\')
                    i++;
            i++;
        } else if (c >= '0' && c <= '9') {
            while (i < len && (ident_char(l[i]) || l[i] == '.'))
                i++;
        } else if (ident_start(c)) {
            size_t s = i;
            while (i < len && ident_char(l[i]))
                i++;
            size_t n = i - s;
            if ((n == 3 && !memcmp(l + s, "asm", 3)) || (n == 5 && !memcmp(l + s, "__asm", 5)) ||
                (n == 7 && !memcmp(l + s, "__asm__", 7)))
                return 1;
        } else {
            i++;
        }
    }
    return 0;
}

kh_status kh_ccguard_check_preprocessed(kh_ccguard *g, const char *pre, size_t len, kh_err *err)
{
    char name[4096] = "<built-in>";
    fclass cls = F_BUILTIN;
    long line = 0;
    size_t i = 0;
    while (i < len) {
        const char *l = pre + i;
        const char *nl = memchr(l, '\n', len - i);
        size_t ll = nl ? (size_t)(nl - l) : len - i;
        int enter, leave;
        if (marker(l, ll, &line, name, sizeof name, &enter, &leave)) {
            cls = classify(g, name);
        } else {
            /* The compile of this text reads no file but the ones a pragma
             * names: "#pragma GCC pch_preprocess" loads one.  Other lines
             * that start with '#' are pragmas and #ident; the preprocessor
             * puts a blank before a '#' that a macro made. */
            if (l[0] == '#') {
                int pragma = ll >= 7 && !memcmp(l, "#pragma", 7);
                int ident = ll >= 6 && !memcmp(l, "#ident", 6);
                int pch = pragma && memmem(l, ll, "pch_preprocess", 14);
                if (pch || (!pragma && !ident))
                    return kh_err_set(err, KH_ECOMPILE,
                                      "%s:%ld: '%.40s' is not allowed in a host candidate",
                                      shown(g, name), line, l);
            } else if (cls != F_SYSTEM && cls != F_BUILTIN && has_asm(l, ll)) {
                return kh_err_set(err, KH_ECOMPILE,
                                  "%s:%ld: asm is not allowed in a host candidate",
                                  shown(g, name), line);
            }
            line++;
        }
        i += ll + 1;
    }
    return KH_OK;
}

/* ---- the dependency list -------------------------------------------------- */

typedef struct frame {
    char name[4096];
    long line;
} frame;

/* Where pre includes the file whose realpath is dep_real (or, for a file that
 * does not exist, whose name is dep): the candidate's file and line of the
 * directive.  0 when not found. */
static int include_site(kh_ccguard *g, const char *pre, const char *dep, const char *dep_real,
                        const own_file **site, long *site_line)
{
    if (!pre)
        return 0;
    size_t cap = 16, depth = 0;
    frame *st = malloc(cap * sizeof *st);
    if (!st)
        return 0;
    frame cur = {"<built-in>", 0};
    int found = 0;
    size_t len = strlen(pre), i = 0;
    while (i < len && !found) {
        const char *l = pre + i;
        const char *nl = memchr(l, '\n', len - i);
        size_t ll = nl ? (size_t)(nl - l) : len - i;
        int enter, leave;
        long line;
        char name[4096];
        if (!marker(l, ll, &line, name, sizeof name, &enter, &leave)) {
            cur.line++;
            i += ll + 1;
            continue;
        }
        if (enter) {
            int match = !strcmp(name, dep);
            if (!match && dep_real) {
                char *r = realpath(name, NULL);
                match = r && !strcmp(r, dep_real);
                free(r);
            }
            if (match) {
                /* the nearest file of the candidate's up the include chain */
                for (size_t d = depth + 1; d-- > 0 && !found;) {
                    const frame *f = d == depth ? &cur : &st[d];
                    const own_file *o = own_by_name(g, f->name);
                    if (o && !o->generated) {
                        *site = o;
                        *site_line = f->line;
                        found = 1;
                    }
                }
                break;
            }
            if (depth == cap) {
                frame *ns = realloc(st, cap * 2 * sizeof *ns);
                if (!ns)
                    break;
                st = ns;
                cap *= 2;
            }
            st[depth++] = cur;
        } else if (leave && depth) {
            depth--;
        }
        snprintf(cur.name, sizeof cur.name, "%s", name);
        cur.line = line;
        i += ll + 1;
    }
    free(st);
    return found;
}

/* The next file of a make-style dependency list at *p, unescaped into buf.
 * 0 at the end. */
static int next_dep(const char **p, char *buf, size_t n)
{
    const char *s = *p;
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            s++;
        if (s[0] == '\\' && (s[1] == '\n' || (s[1] == '\r' && s[2] == '\n'))) {
            s += s[1] == '\n' ? 2 : 3;
            continue;
        }
        break;
    }
    if (!*s) {
        *p = s;
        return 0;
    }
    size_t k = 0;
    while (*s && *s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') {
        char c = *s++;
        if (c == '\\' && (*s == ' ' || *s == '\t' || *s == '#' || *s == '\\'))
            c = *s++;
        else if (c == '\\' && (*s == '\n' || *s == '\r'))
            break;
        else if (c == '$' && *s == '$')
            s++;
        if (k + 1 < n)
            buf[k++] = c;
    }
    buf[k] = '\0';
    *p = s;
    return 1;
}

kh_status kh_ccguard_check_deps(kh_ccguard *g, const char *deps, const char *pre,
                                int missing_ok, kh_err *err)
{
    /* past the target: the first ':' followed by a blank or the end */
    const char *p = deps;
    while (*p && !(p[0] == ':' && (p[1] == ' ' || p[1] == '\t' || p[1] == '\n' ||
                                   p[1] == '\\' || !p[1])))
        p++;
    if (!*p)
        return kh_err_set(err, KH_ECOMPILE,
                          "the compiler's dependency list cannot be read, so the files this "
                          "compile read cannot be checked: not allowed");
    p++;
    char dep[4096];
    while (next_dep(&p, dep, sizeof dep)) {
        fclass c = classify(g, dep);
        if (c == F_OWN || c == F_SYSTEM || c == F_BUILTIN)
            continue;
        /* a -MG listing names a header it could not find as written: it has
         * no text; a name with an escape might be a file misread, so not */
        if (c == F_MISSING && missing_ok && !strpbrk(dep, "\\$"))
            continue;
        char *real = realpath(dep, NULL);
        const own_file *site = NULL;
        long line = 0;
        char text[200];
        /* The first file that is not allowed: its name was made before any
         * such file was read, from the candidate's text and system headers. */
        if (include_site(g, pre, dep, real, &site, &line) ||
            directive_naming(g, dep, &site, &line)) {
            own_line(site, line, text, sizeof text);
            kh_err_set(err, KH_ECOMPILE, "%s:%ld: '%s' reads %s, which is not allowed: %s",
                       shown(g, site->path), line, text, shown(g, dep), ONLY_SYSTEM);
        } else {
            kh_err_set(err, KH_ECOMPILE, "the compile reads %s, which is not allowed: %s",
                       shown(g, dep), ONLY_SYSTEM);
        }
        free(real);
        return KH_ECOMPILE;
    }
    return KH_OK;
}

/* ---- the assembly --------------------------------------------------------- */

kh_status kh_ccguard_check_assembly(const char *s, size_t len, kh_err *err)
{
    /* gcc and clang mark inline assembly with #APP; the directives that read
     * a file (.incbin, .include) or could spell one (.macro, .irp, .rept) may
     * also come from a section name or a symbol the candidate wrote, which
     * the compiler copies into the assembly as they are */
    static const char *const directives[] = {".incbin", ".include", ".macro",   ".irp",
                                             ".irpc",   ".rept",    ".altmacro"};
    const char *what = NULL;
    for (size_t i = 0; i < len && !what; i++) {
        if (s[i] == '#' && len - i >= 4 && !memcmp(s + i, "#APP", 4))
            what = "inline assembly";
        /* a directive ends its name with a blank, a quote, ';' or the line:
         * clang's "f.include_count" (a static in f) is not one */
        for (size_t k = 0; s[i] == '.' && k < KH_ARRAY_LEN(directives) && !what; k++) {
            size_t m = strlen(directives[k]);
            if (len - i >= m && !strncasecmp(s + i, directives[k], m) &&
                (len - i == m || !ident_char(s[i + m])) && (len - i == m || s[i + m] != '.'))
                what = directives[k];
        }
    }
    if (!what)
        return KH_OK;
    if (!strcmp(what, "inline assembly"))
        return kh_err_set(err, KH_ECOMPILE,
                          "inline assembly (asm, __asm__) is not allowed in a host candidate");
    return kh_err_set(err, KH_ECOMPILE,
                      "the assembler directive %s is not allowed in a host candidate (from a "
                      "section name, a symbol name or asm)",
                      what);
}

/* ---- the log -------------------------------------------------------------- */

typedef struct lbuf {
    char *p;
    size_t len, cap;
    int oom;
} lbuf;

static void lput(lbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = (b->len + n + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* s[0..n) with the candidate's directory taken out of paths */
static void lput_shown(lbuf *b, const kh_ccguard *g, const char *s, size_t n)
{
    size_t dl = g->dir ? strlen(g->dir) : 0;
    size_t i = 0, from = 0;
    while (dl && i + dl <= n) {
        if (!memcmp(s + i, g->dir, dl)) {
            lput(b, s + from, i - from);
            i += dl;
            from = i;
        } else {
            i++;
        }
    }
    lput(b, s + from, n - from);
}

char *kh_ccguard_log(kh_ccguard *g, const char *log)
{
    lbuf b = {0};
    lput(&b, "", 0);
    const char *p = log ? log : "";
    while (*p) {
        size_t ll = strcspn(p, "\n");
        const char *loc = p;
        size_t skip = 0;
        if (!strncmp(p, "In file included from ", 22))
            skip = 22;
        else {
            while (skip < ll && p[skip] == ' ')
                skip++;
            if (skip && !strncmp(p + skip, "from ", 5))
                skip += 5;
            else
                skip = 0;
        }
        loc = p + skip;
        size_t pl = 0;
        while (skip + pl < ll && loc[pl] != ':')
            pl++;
        char path[4096] = "";
        if (skip + pl < ll && pl && pl < sizeof path && memchr(loc, '/', pl))
            memcpy(path, loc, pl), path[pl] = '\0';
        fclass c = path[0] ? classify(g, path) : F_BUILTIN;
        struct stat sb;
        /* a line about a file that is neither the candidate's nor a system
         * header might quote it: it goes (tools such as /usr/bin/ld stay) */
        int keep = c != F_FOREIGN ||
                   (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0);
        if (keep) {
            lput_shown(&b, g, p, ll);
            lput(&b, "\n", 1);
            long line = 0;
            const own_file *o = NULL;
            if (c == F_OWN && !skip && sscanf(loc + pl, ":%ld:", &line) == 1 && line > 0 &&
                (o = own_by_name(g, path)) && !o->generated) {
                char text[200], q[240];
                own_line(o, line, text, sizeof text);
                int qn = snprintf(q, sizeof q, "%5ld | %s\n", line, text);
                if (text[0])
                    lput(&b, q, (size_t)qn < sizeof q ? (size_t)qn : sizeof q - 1);
            }
        }
        p += ll;
        if (*p == '\n')
            p++;
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
