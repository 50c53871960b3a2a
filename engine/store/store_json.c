/* store_json.c: the store's own compact JSON writer and reader for record
 * values.  Every record write serialises one jansson object and every record
 * read parses one back; jansson's json_dumps (a loop check per container,
 * one callback per token) and json_loadb (a byte-at-a-time stream) were most
 * of the store's cost.  The text is compact JSON as jansson writes it
 * (insertion order, the same escapes) except that a real takes the fewest
 * decimals that read back to the same double; any JSON reader, jansson
 * included, reads it (tests/c/test_store.c checks that).  User input
 * elsewhere is still parsed by jansson. */
#include "store/store_int.h"

#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 2048 /* jansson's parser limit: what we write, it must read */

/* ---- buffer -------------------------------------------------------------------- */
kh_status kh_sbuf_reserve(kh_sbuf *b, size_t extra, kh_err *err)
{
    if (b->cap - b->n >= extra)
        return KH_OK;
    size_t nc = b->cap ? b->cap : 4096;
    while (nc - b->n < extra) {
        if (nc > SIZE_MAX / 2)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        nc *= 2;
    }
    char *p = realloc(b->p, nc);
    if (!p)
        return kh_err_set(err, KH_ENOMEM, "out of memory serialising a record");
    b->p = p;
    b->cap = nc;
    return KH_OK;
}

void kh_sbuf_free(kh_sbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static inline kh_status put(kh_sbuf *b, const void *s, size_t n, kh_err *err)
{
    if (b->cap - b->n < n && kh_sbuf_reserve(b, n, err))
        return KH_ENOMEM;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return KH_OK;
}

/* ---- UTF-8 ------------------------------------------------------------------------ */
/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* ---- writer ------------------------------------------------------------------------- */
/* plain[c]: byte c stands for itself in a JSON string (printable ASCII but
 * '"' and '\\') */
static const unsigned char plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* 1 if any of the 8 bytes in w needs more than a copy: a control byte, '"',
 * '\\' or a byte >= 0x80 (the classic "has a byte less than / equal to"
 * word tricks; exact, no false negatives) */
static inline int word_special(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t lt20 = (w - ones * 0x20) & ~w;
    uint64_t q = w ^ (ones * '"'), bs = w ^ (ones * '\\');
    uint64_t eq = ((q - ones) & ~q) | ((bs - ones) & ~bs);
    return ((lt20 | eq | w) & high) != 0;
}

static kh_status dump_string(const char *str, size_t n, kh_sbuf *b, kh_err *err)
{
    static const char hx[] = "0123456789ABCDEF";
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    int first = 1;
    do {
        /* at most 6 bytes out per byte in; a UTF-8 sequence may run 3 past stop */
        size_t chunk = n - i < 65536 ? n - i : 65536;
        if (b->cap - b->n < 6 * chunk + 10 && kh_sbuf_reserve(b, 6 * chunk + 10, err))
            return KH_ENOMEM;
        char *o = b->p + b->n;
        if (first)
            *o++ = '"';
        first = 0;
        for (size_t stop = i + chunk; i < stop;) {
            /* the common case: 8 plain bytes at a time */
            while (i + 8 <= stop) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (word_special(w))
                    break;
                memcpy(o, &w, 8);
                o += 8;
                i += 8;
            }
            if (i >= stop)
                break;
            unsigned c = s[i];
            if (plain[c]) {
                *o++ = (char)c;
                i++;
                continue;
            }
            if (c >= 0x80) {
                size_t l = utf8_seq(s + i, n - i);
                if (!l)
                    return kh_err_set(err, KH_EINVAL, "a string holds invalid UTF-8 (byte %zu)",
                                      i);
                memcpy(o, s + i, l);
                o += l;
                i += l;
                continue;
            }
            *o++ = '\\';
            switch (c) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            default:
                memcpy(o, "u00", 3);
                o[3] = hx[c >> 4];
                o[4] = hx[c & 15];
                o += 5;
            }
            i++;
        }
        if (i >= n)
            *o++ = '"';
        b->n = (size_t)(o - b->p);
    } while (i < n);
    return KH_OK;
}

static kh_status dump_int(json_int_t v, kh_sbuf *b, kh_err *err)
{
    char t[24];
    size_t i = sizeof t;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        t[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        t[--i] = '-';
    return put(b, t + i, sizeof t - i, err);
}

/* A real, always with a '.' or an exponent (so it reads back as a real).
 * The common case (a measured latency, a speedup: few decimals, |d| < 2^53)
 * without printf: the fewest decimals k such that round(d * 10^k) / 10^k
 * gives d back; both operands are exact, so the division is correctly rounded
 * and a reader's strtod of the same digits returns d.  Otherwise as jansson
 * writes it: %.17g, the exponent without '+' or leading zeros. */
static kh_status dump_real(double d, kh_sbuf *b, kh_err *err)
{
    static const double p10[18] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,
                                   1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17};
    if (!isfinite(d))
        return kh_err_set(err, KH_EINVAL, "a number is NaN or infinite (JSON has neither)");
    double a = fabs(d);
    if (a >= 1e-4 && a < 1e15) {
        for (int k = 0; k < 18 && a * p10[k] < 9007199254740992.0; k++) {
            double m = nearbyint(a * p10[k]);
            if (m / p10[k] != a)
                continue;
            uint64_t u = (uint64_t)m;
            char dg[24], t[48];
            int nd = 0;
            size_t n = 0;
            do { /* reversed, at least k + 1 digits */
                dg[nd++] = (char)('0' + u % 10);
                u /= 10;
            } while (u || nd <= k);
            if (signbit(d))
                t[n++] = '-';
            for (int q = nd - 1; q >= 0; q--) {
                t[n++] = dg[q];
                if (q == k && k)
                    t[n++] = '.';
            }
            if (!k) {
                t[n++] = '.';
                t[n++] = '0';
            }
            return put(b, t, n, err);
        }
    }
    char t[64], o[64];
    int n = snprintf(t, sizeof t, "%.17g", d);
    if (n <= 0 || n >= (int)sizeof t)
        return kh_err_set(err, KH_EINVAL, "cannot format a real number");
    size_t k = 0;
    int dot = 0;
    for (int i = 0; i < n; i++) {
        char c = t[i];
        if (c == 'e') {
            dot = 1;
            o[k++] = 'e';
            i++;
            if (i < n && t[i] == '-')
                o[k++] = t[i++];
            else if (i < n && t[i] == '+')
                i++;
            while (i < n - 1 && t[i] == '0')
                i++;
            while (i < n)
                o[k++] = t[i++];
            break;
        }
        if ((c < '0' || c > '9') && c != '-') { /* the decimal point, in any locale */
            c = '.';
            dot = 1;
        }
        o[k++] = c;
    }
    if (!dot) {
        o[k++] = '.';
        o[k++] = '0';
    }
    return put(b, o, k, err);
}

static kh_status dump_value(const json_t *j, kh_sbuf *b, int depth, kh_err *err)
{
    if (depth > JSON_MAX_DEPTH)
        return kh_err_set(err, KH_EINVAL, "a record is nested more than %d deep (or holds "
                                          "itself)",
                          JSON_MAX_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if (put(b, "{", 1, err))
            return KH_ENOMEM;
        int first = 1;
        for (void *it = json_object_iter((json_t *)j); it;
             it = json_object_iter_next((json_t *)j, it)) {
            if (!first && put(b, ",", 1, err))
                return KH_ENOMEM;
            first = 0;
            const char *key = json_object_iter_key(it);
            size_t kn = json_object_iter_key_len(it);
            if (memchr(key, 0, kn))
                return kh_err_set(err, KH_EINVAL, "a key holds a NUL byte");
            kh_status st = dump_string(key, kn, b, err);
            if (!st)
                st = put(b, ":", 1, err);
            if (!st)
                st = dump_value(json_object_iter_value(it), b, depth + 1, err);
            if (st)
                return st;
        }
        return put(b, "}", 1, err);
    }
    case JSON_ARRAY: {
        if (put(b, "[", 1, err))
            return KH_ENOMEM;
        size_t n = json_array_size(j);
        for (size_t i = 0; i < n; i++) {
            if (i && put(b, ",", 1, err))
                return KH_ENOMEM;
            kh_status st = dump_value(json_array_get(j, i), b, depth + 1, err);
            if (st)
                return st;
        }
        return put(b, "]", 1, err);
    }
    case JSON_STRING:
        return dump_string(json_string_value(j), json_string_length(j), b, err);
    case JSON_INTEGER:
        return dump_int(json_integer_value(j), b, err);
    case JSON_REAL:
        return dump_real(json_real_value(j), b, err);
    case JSON_TRUE:
        return put(b, "true", 4, err);
    case JSON_FALSE:
        return put(b, "false", 5, err);
    case JSON_NULL:
        return put(b, "null", 4, err);
    }
    return kh_err_set(err, KH_EINVAL, "unknown JSON value type");
}

kh_status kh_store_json_dump(const json_t *j, kh_sbuf *b, kh_err *err)
{

    size_t n0 = b->n;
    kh_status st = dump_value(j, b, 0, err);
    if (st)
        b->n = n0;
    return st;
}

/* ---- reader ---------------------------------------------------------------------------- */
typedef struct jp {
    const unsigned char *p, *end, *start;
    kh_err *err;
    kh_sbuf tmp; /* decoded strings with escapes */
} jp;

static json_t *perr(jp *s, const char *what)
{
    kh_err_set(s->err, KH_ECORRUPT, "stored record is not JSON: %s at byte %zu", what,
               (size_t)(s->p - s->start));
    return NULL;
}

static inline void skip_ws(jp *s)
{
    if (s->p < s->end && *s->p > ' ')
        return;
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return 0;
        v = v << 4 | d;
    }
    *out = v;
    return 1;
}

static size_t utf8_put(unsigned cp, unsigned char *o)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parse a string at s->p (on the opening quote).  *out and *n: the bytes,
 * either in the input or in s->tmp (valid until the next string). */
static int parse_string(jp *s, const char **out, size_t *n)
{
    const unsigned char *a = s->p + 1, *p = a, *end = s->end;
    for (;;) { /* locals, not s->p: the compiler keeps them in registers */
        while (p < end && plain[*p])
            p++;
        if (p == end || *p < 0x80)
            break;
        size_t l = utf8_seq(p, (size_t)(end - p));
        if (!l) {
            s->p = p;
            return perr(s, "invalid UTF-8"), 0;
        }
        p += l;
    }
    s->p = p;
    if (s->p < s->end && *s->p == '"') { /* no escapes: point into the input */
        *out = (const char *)a;
        *n = (size_t)(s->p - a);
        s->p++;
        return 1;
    }
    s->tmp.n = 0;
    if (kh_sbuf_reserve(&s->tmp, (size_t)(s->p - a) + 64, s->err))
        return 0;
    memcpy(s->tmp.p, a, (size_t)(s->p - a));
    s->tmp.n = (size_t)(s->p - a);
    for (;;) {
        if (s->p >= s->end)
            return perr(s, "unterminated string"), 0;
        unsigned c = *s->p;
        if (c == '"') {
            s->p++;
            break;
        }
        if (c < 0x20)
            return perr(s, "control character in a string"), 0;
        if (kh_sbuf_reserve(&s->tmp, 8, s->err))
            return 0;
        unsigned char *o = (unsigned char *)s->tmp.p + s->tmp.n;
        if (c >= 0x80) {
            size_t l = utf8_seq(s->p, (size_t)(s->end - s->p));
            if (!l)
                return perr(s, "invalid UTF-8"), 0;
            memcpy(o, s->p, l);
            s->tmp.n += l;
            s->p += l;
            continue;
        }
        if (c != '\\') {
            *o = (unsigned char)c;
            s->tmp.n++;
            s->p++;
            continue;
        }
        if (s->end - s->p < 2)
            return perr(s, "unterminated escape"), 0;
        c = s->p[1];
        s->p += 2;
        unsigned char e;
        switch (c) {
        case '"': e = '"'; break;
        case '\\': e = '\\'; break;
        case '/': e = '/'; break;
        case 'b': e = '\b'; break;
        case 'f': e = '\f'; break;
        case 'n': e = '\n'; break;
        case 'r': e = '\r'; break;
        case 't': e = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (s->end - s->p < 4 || !hex4(s->p, &cp))
                return perr(s, "bad \\u escape"), 0;
            s->p += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' ||
                    !hex4(s->p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                    return perr(s, "lone surrogate in a \\u escape"), 0;
                s->p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                return perr(s, "lone surrogate in a \\u escape"), 0;
            }
            s->tmp.n += utf8_put(cp, o);
            continue;
        }
        default:
            return perr(s, "bad escape"), 0;
        }
        *o = e;
        s->tmp.n++;
    }
    *out = s->tmp.p;
    *n = s->tmp.n;
    return 1;
}

static json_t *parse_number(jp *s)
{
    const unsigned char *a = s->p;
    int real = 0;
    if (s->p < s->end && *s->p == '-')
        s->p++;
    const unsigned char *d = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
        s->p++;
    if (s->p == d || (*d == '0' && s->p - d > 1))
        return perr(s, "bad number");
    if (s->p < s->end && *s->p == '.') {
        real = 1;
        s->p++;
        d = s->p;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
        if (s->p == d)
            return perr(s, "bad number");
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        real = 1;
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        d = s->p;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
        if (s->p == d)
            return perr(s, "bad number");
    }
    size_t n = (size_t)(s->p - a);
    if (!real) {
        uint64_t u = 0, lim = a[0] == '-' ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        for (const unsigned char *q = a + (a[0] == '-'); q < s->p; q++) {
            if (u > (lim - (uint64_t)(*q - '0')) / 10)
                return perr(s, "integer too big");
            u = u * 10 + (uint64_t)(*q - '0');
        }
        json_int_t v = a[0] == '-' ? (json_int_t)(0 - u) : (json_int_t)u;
        json_t *j = json_integer(v);
        return j ? j : perr(s, "out of memory");
    }
    /* the usual real ("12.3456"): at most 15 digits, no exponent, is an exact
     * integer divided by an exact power of ten, one correctly rounded
     * division, the same double strtod gives */
    static const double p10[16] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    const unsigned char *q = a + (a[0] == '-');
    if (n - (size_t)(q - a) <= 16) {
        uint64_t m = 0;
        int frac = -1, ok = 1;
        for (; q < s->p && ok; q++) {
            if (*q == '.')
                frac = 0;
            else if (*q >= '0' && *q <= '9') {
                m = m * 10 + (uint64_t)(*q - '0');
                if (frac >= 0)
                    frac++;
            } else
                ok = 0; /* an exponent */
        }
        if (ok && frac > 0 && frac <= 15 && m < (1ULL << 53)) {
            double v = (double)m / p10[frac];
            json_t *j = json_real(a[0] == '-' ? -v : v);
            return j ? j : perr(s, "out of memory");
        }
    }
    char t[128];
    if (n >= sizeof t)
        return perr(s, "number too long");
    memcpy(t, a, n);
    t[n] = '\0';
    char *e;
    double v = strtod(t, &e);
    if (e != t + n) { /* a locale whose decimal point is not '.' */
        char *dot = strchr(t, '.');
        const char *lp = localeconv()->decimal_point;
        if (dot && lp && lp[0] && !lp[1])
            *dot = lp[0];
        v = strtod(t, &e);
        if (e != t + n)
            return perr(s, "bad number");
    }
    if (!isfinite(v))
        return perr(s, "real number overflow");
    json_t *j = json_real(v);
    return j ? j : perr(s, "out of memory");
}

static json_t *parse_value(jp *s, int depth)
{
    skip_ws(s);
    if (s->p >= s->end)
        return perr(s, "unexpected end");
    if (depth > JSON_MAX_DEPTH)
        return perr(s, "nested too deep");
    unsigned c = *s->p;
    if (c == '{') {
        json_t *o = json_object();
        if (!o)
            return perr(s, "out of memory");
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            return o;
        }
        for (;;) {
            skip_ws(s);
            const char *k;
            size_t kn;
            if (s->p >= s->end || *s->p != '"') {
                json_decref(o);
                return perr(s, "expected a key");
            }
            if (!parse_string(s, &k, &kn)) {
                json_decref(o);
                return NULL;
            }
            /* a key with escapes sits in s->tmp, which the value's strings reuse */
            char kbuf[256], *key = (char *)k;
            if (k == s->tmp.p) {
                key = kn < sizeof kbuf ? kbuf : malloc(kn + 1);
                if (!key) {
                    json_decref(o);
                    return perr(s, "out of memory");
                }
                memcpy(key, k, kn);
            }
            skip_ws(s);
            json_t *v = NULL;
            if (s->p < s->end && *s->p == ':') {
                s->p++;
                v = parse_value(s, depth + 1);
            } else {
                perr(s, "expected ':'");
            }
            int bad = !v || json_object_setn_new_nocheck(o, key, kn, v);
            if (key != k && key != kbuf)
                free(key);
            if (bad) {
                json_decref(o);
                return v ? perr(s, "out of memory") : NULL;
            }
            skip_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                continue;
            }
            if (s->p < s->end && *s->p == '}') {
                s->p++;
                return o;
            }
            json_decref(o);
            return perr(s, "expected ',' or '}'");
        }
    }
    if (c == '[') {
        json_t *a = json_array();
        if (!a)
            return perr(s, "out of memory");
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return a;
        }
        for (;;) {
            json_t *v = parse_value(s, depth + 1);
            if (!v || json_array_append_new(a, v)) {
                json_decref(a);
                return v ? perr(s, "out of memory") : NULL;
            }
            skip_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                continue;
            }
            if (s->p < s->end && *s->p == ']') {
                s->p++;
                return a;
            }
            json_decref(a);
            return perr(s, "expected ',' or ']'");
        }
    }
    if (c == '"') {
        const char *v;
        size_t n;
        if (!parse_string(s, &v, &n))
            return NULL;
        json_t *j = json_stringn_nocheck(v, n); /* checked above */
        return j ? j : perr(s, "out of memory");
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(s);
    size_t left = (size_t)(s->end - s->p);
    if (left >= 4 && !memcmp(s->p, "true", 4))
        return s->p += 4, json_true();
    if (left >= 5 && !memcmp(s->p, "false", 5))
        return s->p += 5, json_false();
    if (left >= 4 && !memcmp(s->p, "null", 4))
        return s->p += 4, json_null();
    return perr(s, "unexpected character");
}

json_t *kh_store_json_parse(const void *data, size_t n, kh_err *err)
{
    jp s = {.p = data, .end = (const unsigned char *)data + n, .start = data, .err = err};
    json_t *j = parse_value(&s, 0);
    if (j) {
        skip_ws(&s);
        if (s.p != s.end) {
            json_decref(j);
            j = perr(&s, "text after the value");
        }
    }
    kh_sbuf_free(&s.tmp);
    return j;
}
