/* llm_extract.c: pulling a candidate (device source and launch manifest) out
 * of a model's reply.  Owns the fenced-code-block scan and the failure
 * classes a policy acts on (no code, cut off by the token limit, malformed or
 * missing manifest).  What the manifest means is the task module's. */
#include "llm/llm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct block {
    char lang[32];
    const char *body;
    size_t len;
    int closed;
} block;

static int is_source_lang(const char *l)
{
    static const char *const langs[] = {"cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h",
                                        "hpp"};
    for (size_t i = 0; i < KH_ARRAY_LEN(langs); i++)
        if (!strcmp(l, langs[i]))
            return 1;
    return 0;
}

static int is_manifest_lang(const char *l)
{
    return !strcmp(l, "json") || !strcmp(l, "manifest") || !strcmp(l, "jsonc");
}

/* Scan fenced blocks (``` or ~~~, three or more, at the start of a line,
 * up to three spaces of indent).  Returns the number found (at most max). */
static size_t scan(const char *t, block *out, size_t max)
{
    size_t n = 0;
    const char *p = t;
    while (*p && n < max) {
        const char *eol = strchr(p, '\n');
        const char *next = eol ? eol + 1 : p + strlen(p);
        const char *q = p;
        int indent = 0;
        while (*q == ' ' && indent < 4)
            q++, indent++;
        char fc = *q;
        size_t flen = 0;
        if (indent < 4 && (fc == '`' || fc == '~'))
            while (q[flen] == fc)
                flen++;
        if (flen < 3) {
            p = next;
            continue;
        }
        /* the info string: first word, lower-cased */
        const char *info = q + flen;
        while (*info == ' ' || *info == '\t')
            info++;
        block *b = &out[n++];
        memset(b, 0, sizeof *b);
        size_t k = 0;
        while (info[k] && info[k] != '\n' && info[k] != ' ' && info[k] != '\t' && info[k] != '\r' &&
               info[k] != '{' && k + 1 < sizeof b->lang) {
            char ch = info[k];
            b->lang[k] = (char)(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
            k++;
        }
        b->lang[k] = '\0';
        b->body = next;
        /* find the closing fence: same char, at least as long, nothing after */
        const char *r = next;
        while (*r) {
            const char *e2 = strchr(r, '\n');
            const char *n2 = e2 ? e2 + 1 : r + strlen(r);
            const char *s = r;
            int ind = 0;
            while (*s == ' ' && ind < 4)
                s++, ind++;
            size_t cl = 0;
            while (s[cl] == fc)
                cl++;
            const char *after = s + cl;
            while (*after == ' ' || *after == '\t' || *after == '\r')
                after++;
            if (ind < 4 && cl >= flen && (*after == '\n' || *after == '\0')) {
                b->len = (size_t)(r - next);
                b->closed = 1;
                p = n2;
                break;
            }
            r = n2;
        }
        if (!b->closed) {
            b->len = strlen(next);
            p = next + b->len;
        }
    }
    return n;
}

static json_t *verdict(const char *status, const char *msg)
{
    return json_pack("{s:s, s:s}", "status", status, "message", msg);
}

json_t *kh_llm_extract(const char *text, const char *finish_reason, int require_manifest)
{
    enum { MAXB = 64 };
    block b[MAXB];
    size_t n = scan(text ? text : "", b, MAXB);
    int cut = finish_reason && (!strcmp(finish_reason, "length") ||
                                !strcmp(finish_reason, "max_tokens") ||
                                !strcmp(finish_reason, "max_output_tokens"));
    const block *src = NULL, *man = NULL, *open_src = NULL, *open_man = NULL, *plain = NULL;
    for (size_t i = 0; i < n; i++) {
        if (is_source_lang(b[i].lang)) {
            if (b[i].closed)
                src = &b[i];
            else
                open_src = &b[i];
        } else if (is_manifest_lang(b[i].lang)) {
            if (b[i].closed)
                man = &b[i];
            else
                open_man = &b[i];
        } else if (!b[i].lang[0] && b[i].closed) {
            plain = &b[i];
        }
    }
    /* A block without a language counts as source only when nothing is labelled. */
    if (!src && !open_src && plain)
        src = plain;
    if (open_src || (open_man && !man))
        return verdict("truncated", cut ? "the reply hit the output token limit inside a "
                                                "code block"
                                              : "a code block was never closed (the reply was "
                                                "cut off)");
    if (!src) {
        if (cut)
            return verdict("truncated", "the reply hit the output token limit before any "
                                              "code");
        return verdict("no_code", "the reply holds no fenced code block (```cuda ... ```)");
    }
    json_t *out = json_object();
    char lang[32];
    snprintf(lang, sizeof lang, "%s", src->lang[0] ? src->lang : "unknown");
    char *s = kh_utf8_sanitize(src->body, src->len, NULL);
    json_object_set_new(out, "source", json_string(s ? s : ""));
    free(s);
    json_object_set_new(out, "source_lang", json_string(lang));
    if (man) {
        json_error_t je;
        json_t *m = json_loadb(man->body, man->len, 0, &je);
        if (!json_is_object(m)) {
            json_decref(out);
            char why[400];
            if (m)
                snprintf(why, sizeof why, "the manifest block is valid JSON but not an object");
            else
                snprintf(why, sizeof why, "the manifest block is not valid JSON: line %d, column "
                                          "%d: %s", je.line, je.column, je.text);
            json_decref(m);
            return verdict("bad_manifest", why);
        }
        char *mt = kh_utf8_sanitize(man->body, man->len, NULL);
        json_object_set_new(out, "manifest", m);
        json_object_set_new(out, "manifest_text", json_string(mt ? mt : ""));
        free(mt);
    } else if (require_manifest) {
        json_decref(out);
        if (cut)
            return verdict("truncated", "the reply hit the output token limit before the "
                                              "manifest");
        return verdict("no_manifest", "the reply holds source but no ```json manifest "
                                            "block");
    }
    json_object_set_new(out, "status", json_string("ok"));
    json_object_set_new(out, "blocks", json_integer((json_int_t)n));
    return out;
}
