/* scrub.c: the two rules of scrub.h: which environment variables may hold a
 * credential (by name), and how text a candidate can make a child print is
 * redacted and cut.  Where text crosses into a verdict or a record, and which
 * children get which environment, is the callers' business (supervisor.c,
 * proc.c, hostcc.c, eval.c). */
#include "core/scrub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

/* ---- names ---------------------------------------------------------------- */

static int contains_ci(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (!strncasecmp(s + i, needle, m))
            return 1;
    return 0;
}

int kh_scrub_secret_name(const char *name, size_t len)
{
    static const char *const parts[] = {"KEY",     "TOKEN",   "SECRET",  "PASS",
                                        "CREDENTIAL", "AUTH", "COOKIE",  "SESSION",
                                        "PRIVATE", "WEBHOOK", "CANARY"};
    static const char *const prefixes[] = {
        "ANTHROPIC_", "CLAUDE_",   "OPENAI_",     "AZURE_",     "GEMINI_",   "GOOGLE_",
        "GCP_",       "GCLOUD_",   "CLOUDSDK_",   "VERTEX",     "AWS_",      "HF_",
        "HUGGING",    "GITHUB_",   "GH_",         "GITLAB_",    "MISTRAL_",  "COHERE_",
        "GROQ_",      "DEEPSEEK_", "XAI_",        "TOGETHER_",  "OPENROUTER_", "FIREWORKS_",
        "REPLICATE_", "PERPLEXITY_", "SLACK_",    "NPM_",       "PYPI_",     "TWINE_",
        "KHLUA_REDTEAM_", "KRB5"};
    static const char *const suffixes[] = {"_PAT", "_DSN"};
    for (size_t i = 0; i < KH_ARRAY_LEN(parts); i++)
        if (contains_ci(name, len, parts[i]))
            return 1;
    for (size_t i = 0; i < KH_ARRAY_LEN(prefixes); i++) {
        size_t m = strlen(prefixes[i]);
        if (len >= m && !strncasecmp(name, prefixes[i], m))
            return 1;
    }
    for (size_t i = 0; i < KH_ARRAY_LEN(suffixes); i++) {
        size_t m = strlen(suffixes[i]);
        if (len >= m && !strncasecmp(name + len - m, suffixes[i], m))
            return 1;
    }
    return 0;
}

/* The entry of list ("NAME=value" each) from index `from` on that sets the
 * variable name[0..n), or -1. */
static long find_entry(char *const *list, size_t from, const char *name, size_t n)
{
    for (size_t i = from; list && list[i]; i++)
        if (!strncmp(list[i], name, n) && list[i][n] == '=')
            return (long)i;
    return -1;
}

static int listed(const char *const *names, const char *name, size_t n)
{
    for (size_t i = 0; names && names[i]; i++)
        if (strlen(names[i]) == n && !strncmp(names[i], name, n))
            return 1;
    return 0;
}

char **kh_scrub_env(char *const *env, const char *const *keep, char *const *extra)
{
    size_t ne = 0, nx = 0;
    while (env && env[ne])
        ne++;
    while (extra && extra[nx])
        nx++;
    char **out = malloc((ne + nx + 1) * sizeof *out);
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < ne; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq || eq == env[i])
            continue;
        size_t n = (size_t)(eq - env[i]);
        if (find_entry(extra, 0, env[i], n) >= 0)
            continue; /* replaced */
        if (kh_scrub_secret_name(env[i], n) && !listed(keep, env[i], n))
            continue;
        out[k++] = env[i];
    }
    /* as putenv in order would: the last entry of a name wins */
    for (size_t i = 0; i < nx; i++) {
        const char *eq = strchr(extra[i], '=');
        if (eq && find_entry(extra, i + 1, extra[i], (size_t)(eq - extra[i])) < 0)
            out[k++] = extra[i];
    }
    out[k] = NULL;
    return out;
}

/* ---- text ----------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
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

static void redacted(sbuf *b)
{
    put(b, KH_SCRUB_REDACTED, strlen(KH_SCRUB_REDACTED));
}

static int is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int is_hex(char c)
{
    return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9');
}

/* base64 and base64url, without the '=' padding */
static int is_b64(char c)
{
    return is_alnum(c) || c == '+' || c == '/' || c == '_' || c == '-';
}

/* Characters that may follow a known key prefix. */
enum { SET_TOKEN, SET_UPPER_DIGIT, SET_WORD, SET_DASHED };

static int in_set(int set, char c)
{
    switch (set) {
    case SET_TOKEN: return is_alnum(c) || c == '_' || c == '-';
    case SET_UPPER_DIGIT: return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    case SET_WORD: return is_alnum(c) || c == '_';
    default: return is_alnum(c) || c == '-';
    }
}

/* Length of a key of a known shape at s (n bytes left), 0 if none. */
static size_t known_key(const char *s, size_t n)
{
    static const struct {
        const char *prefix;
        int set;
        size_t min;
    } shapes[] = {
        {"sk-ant-", SET_TOKEN, 8},   {"sk-", SET_TOKEN, 20},        {"AKIA", SET_UPPER_DIGIT, 16},
        {"ASIA", SET_UPPER_DIGIT, 16}, {"ghp_", SET_WORD, 10},      {"gho_", SET_WORD, 10},
        {"ghu_", SET_WORD, 10},      {"ghs_", SET_WORD, 10},        {"ghr_", SET_WORD, 10},
        {"github_pat_", SET_WORD, 10}, {"xoxb-", SET_DASHED, 8},    {"xoxp-", SET_DASHED, 8},
        {"xoxa-", SET_DASHED, 8},    {"xoxr-", SET_DASHED, 8},      {"xoxs-", SET_DASHED, 8},
        {"xapp-", SET_DASHED, 8},    {"hf_", SET_WORD, 20},         {"AIza", SET_TOKEN, 30},
    };
    for (size_t k = 0; k < KH_ARRAY_LEN(shapes); k++) {
        size_t m = strlen(shapes[k].prefix);
        if (n < m || memcmp(s, shapes[k].prefix, m))
            continue;
        size_t e = m;
        while (e < n && in_set(shapes[k].set, s[e]))
            e++;
        if (e - m >= shapes[k].min)
            return e;
    }
    return 0;
}

/* "Bearer <token>": the offset of the token and its end, or 0. */
static size_t bearer(const char *s, size_t n, size_t *tok)
{
    if (n < 7 || strncasecmp(s, "bearer", 6) || (s[6] != ' ' && s[6] != '\t'))
        return 0;
    size_t t = 6;
    while (t < n && (s[t] == ' ' || s[t] == '\t'))
        t++;
    size_t e = t, rl = strlen(KH_SCRUB_REDACTED);
    if (n - t >= rl && !memcmp(s + t, KH_SCRUB_REDACTED, rl))
        return 0; /* scrubbed before */
    while (e < n && (is_alnum(s[e]) || strchr("._~+/=-", s[e])))
        e++;
    if (e - t < 8)
        return 0;
    *tok = t;
    return e;
}

/* "api_key=v", "token: v", "\"password\": \"v\"": the offset of the value
 * and its end, or 0. */
static size_t assignment(const char *s, size_t n, size_t *val)
{
    static const char *const names[] = {"key", "token", "password", "passwd", "secret", "pwd"};
    size_t e = 0;
    while (e < n && (is_alnum(s[e]) || s[e] == '_' || s[e] == '-' || s[e] == '.'))
        e++;
    int named = 0;
    for (size_t k = 0; k < KH_ARRAY_LEN(names) && !named; k++) {
        size_t m = strlen(names[k]);
        named = e >= m && !strncasecmp(s + e - m, names[k], m);
    }
    if (!named)
        return 0;
    size_t j = e;
    if (j < n && (s[j] == '"' || s[j] == '\''))
        j++;
    while (j < n && (s[j] == ' ' || s[j] == '\t'))
        j++;
    if (j >= n || (s[j] != '=' && s[j] != ':') || (j + 1 < n && s[j + 1] == '='))
        return 0;
    j++;
    while (j < n && (s[j] == ' ' || s[j] == '\t'))
        j++;
    if (j < n && (s[j] == '"' || s[j] == '\''))
        j++;
    size_t v = j, rl = strlen(KH_SCRUB_REDACTED);
    if (n - j >= rl && !memcmp(s + j, KH_SCRUB_REDACTED, rl))
        return 0; /* scrubbed before */
    while (j < n && !strchr(" \t\r\n\"'&,;)]}<>", s[j]))
        j++;
    if (j == v)
        return 0;
    *val = v;
    return j;
}

/* A run of base64 characters starting at s (s[-1] is not one): its length
 * when it looks like a key (32 or more hex digits, or 32 or more characters
 * mixing upper case, lower case and digits with a stretch of 16 or more
 * between separators, '=' padding included), else 0.  Paths (a leading '/')
 * and identifiers made of words (rms_norm_Kernel_H4096_v2, a mangled C++
 * name) are not keys: their pieces between '_', '-', '/', '+' are short. */
static size_t long_run(const char *s, size_t n)
{
    if (s[0] == '/')
        return 0;
    size_t e = 0, piece = 0, longest = 0;
    int hex = 1, up = 0, lo = 0, dig = 0;
    while (e < n && is_b64(s[e])) {
        char c = s[e++];
        hex &= is_hex(c);
        up |= c >= 'A' && c <= 'Z';
        lo |= c >= 'a' && c <= 'z';
        dig |= c >= '0' && c <= '9';
        piece = is_alnum(c) ? piece + 1 : 0;
        longest = piece > longest ? piece : longest;
    }
    if (e < 32 || !(hex || (up && lo && dig && longest >= 16)))
        return 0;
    for (int pad = 0; pad < 2 && e < n && s[e] == '='; pad++)
        e++;
    return e;
}

typedef struct secret_value {
    const char *v;
    size_t len;
} secret_value;

/* The values of this process's secret-named variables of 8 bytes or more,
 * longest first (so that a value containing another is redacted whole). */
static secret_value *env_secrets(size_t *count)
{
    size_t n = 0, k = 0;
    while (environ && environ[n])
        n++;
    secret_value *sv = malloc((n + 1) * sizeof *sv);
    if (!sv)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(environ[i], '=');
        if (!eq || !kh_scrub_secret_name(environ[i], (size_t)(eq - environ[i])))
            continue;
        size_t len = strlen(eq + 1);
        if (len < 8)
            continue;
        size_t at = k++;
        while (at > 0 && sv[at - 1].len < len) {
            sv[at] = sv[at - 1];
            at--;
        }
        sv[at] = (secret_value){eq + 1, len};
    }
    *count = k;
    return sv;
}

static void redact(const char *s, size_t n, sbuf *b)
{
    size_t nsv = 0;
    secret_value *sv = env_secrets(&nsv);
    if (!sv) {
        b->oom = 1;
        return;
    }
    size_t i = 0, run_end = 0; /* no run is looked at again before run_end */
    while (i < n && !b->oom) {
        const char *p = s + i;
        size_t left = n - i, e = 0, at = 0, rl = strlen(KH_SCRUB_REDACTED);
        if (left >= rl && !memcmp(p, KH_SCRUB_REDACTED, rl)) { /* scrubbed before */
            redacted(b);
            i += rl;
            continue;
        }
        for (size_t k = 0; k < nsv && !e; k++)
            if (sv[k].len <= left && p[0] == sv[k].v[0] && !memcmp(p, sv[k].v, sv[k].len))
                e = sv[k].len;
        if (e) {
            redacted(b);
            i += e;
            continue;
        }
        int boundary = i == 0 || !is_alnum(s[i - 1]);
        if (boundary && (e = known_key(p, left))) {
            redacted(b);
            i += e;
            continue;
        }
        if (boundary && ((e = bearer(p, left, &at)) || (e = assignment(p, left, &at)))) {
            put(b, p, at);
            redacted(b);
            i += e;
            continue;
        }
        if (i >= run_end && is_b64(p[0]) && (i == 0 || !is_b64(s[i - 1]))) {
            if ((e = long_run(p, left))) {
                redacted(b);
                i += e;
                continue;
            }
            run_end = i;
            while (run_end < n && is_b64(s[run_end]))
                run_end++;
        }
        put(b, p, 1);
        i++;
    }
    free(sv);
}

/* Back up to the start of a UTF-8 character. */
static size_t char_start(const char *s, size_t i)
{
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

char *kh_scrub_text(const char *text, size_t len, size_t max, kh_scrub_keep keep)
{
    if (!max)
        max = KH_SCRUB_MAX;
    if (max < 64) /* room for the note */
        max = 64;
    size_t clean_len = 0;
    char *clean = kh_utf8_sanitize(text ? text : "", text ? len : 0, &clean_len);
    if (!clean)
        return NULL;
    sbuf b = {0};
    put(&b, "", 0);
    redact(clean, clean_len, &b);
    free(clean);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (b.len <= max)
        return b.p;
    char note[64];
    int nn = snprintf(note, sizeof note, "[... %zu bytes cut]", b.len);
    size_t budget = max > (size_t)nn + 1 ? max - (size_t)nn - 1 : 0;
    char *out = malloc(max + 1);
    if (!out) {
        free(b.p);
        return NULL;
    }
    size_t o;
    if (keep == KH_SCRUB_TAIL) {
        size_t from = b.len - budget;
        while (from < b.len && ((unsigned char)b.p[from] & 0xC0) == 0x80)
            from++;
        snprintf(note, sizeof note, "[... %zu bytes cut]\n", from);
        o = (size_t)snprintf(out, max + 1, "%s", note);
        memcpy(out + o, b.p + from, b.len - from);
        o += b.len - from;
    } else {
        size_t to = char_start(b.p, budget);
        memcpy(out, b.p, to);
        o = to;
        o += (size_t)snprintf(out + o, max + 1 - o, "\n[... %zu bytes cut]", b.len - to);
    }
    out[o] = '\0';
    free(b.p);
    return out;
}
