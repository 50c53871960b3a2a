/* sse.c: the incremental SSE decoder declared in sse.h.  Owns only framing:
 * line splitting across chunk boundaries, field parsing and event dispatch.
 * What an event means (OpenAI chunk, Anthropic block delta) is llm_wire.c's. */
#include "llm/sse.h"

#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

struct kh_sse {
    kh_sse_event_fn fn;
    void *ud;
    size_t max;
    sbuf line, data, event, id;
    int have_data;    /* a data field was seen since the last dispatch */
    int pending_cr;   /* the last byte fed was a CR ending a line */
    int started;      /* past the optional UTF-8 BOM */
    size_t bom_seen;  /* bytes of a BOM matched so far */
    size_t events, comments;
};

static int sbuf_add(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static void sbuf_set_empty(sbuf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

kh_sse *kh_sse_new(kh_sse_event_fn fn, void *ud, size_t max_event)
{
    kh_sse *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->fn = fn;
    s->ud = ud;
    s->max = max_event ? max_event : (size_t)64 << 20;
    return s;
}

void kh_sse_free(kh_sse *s)
{
    if (!s)
        return;
    free(s->line.p);
    free(s->data.p);
    free(s->event.p);
    free(s->id.p);
    free(s);
}

size_t kh_sse_events(const kh_sse *s) { return s->events; }
size_t kh_sse_comments(const kh_sse *s) { return s->comments; }

/* A blank line: dispatch the event (if it carried data) and reset. */
static kh_status dispatch(kh_sse *s, kh_err *err)
{
    int have = s->have_data;
    s->have_data = 0;
    if (!have) {
        sbuf_set_empty(&s->event);
        sbuf_set_empty(&s->data);
        return KH_OK;
    }
    /* every data line appended a '\n'; the last one is not part of the data */
    if (s->data.len && s->data.p[s->data.len - 1] == '\n')
        s->data.p[--s->data.len] = '\0';
    const char *ev = s->event.len ? s->event.p : "message";
    s->events++;
    int stop = s->fn(s->ud, ev, s->data.p ? s->data.p : "", s->data.len, s->id.p ? s->id.p : "");
    sbuf_set_empty(&s->event);
    sbuf_set_empty(&s->data);
    if (stop)
        return kh_err_set(err, KH_ESTATE, "SSE consumer stopped the stream");
    return KH_OK;
}

static kh_status process_line(kh_sse *s, const char *l, size_t n, kh_err *err)
{
    if (n == 0)
        return dispatch(s, err);
    if (l[0] == ':') {
        s->comments++;
        return KH_OK;
    }
    const char *colon = memchr(l, ':', n);
    size_t flen = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vlen = colon ? n - flen - 1 : 0;
    if (vlen && v[0] == ' ') {
        v++;
        vlen--;
    }
    if (flen == 4 && !memcmp(l, "data", 4)) {
        if (s->data.len + vlen + 1 > s->max)
            return kh_err_set(err, KH_EPARSE, "SSE event data longer than %zu bytes", s->max);
        if (sbuf_add(&s->data, v, vlen) || sbuf_add(&s->data, "\n", 1))
            return kh_err_set(err, KH_ENOMEM, "out of memory buffering an SSE event");
        s->have_data = 1;
    } else if (flen == 5 && !memcmp(l, "event", 5)) {
        sbuf_set_empty(&s->event);
        if (sbuf_add(&s->event, v, vlen))
            return kh_err_set(err, KH_ENOMEM, "out of memory buffering an SSE event");
    } else if (flen == 2 && !memcmp(l, "id", 2)) {
        if (!memchr(v, '\0', vlen)) {
            sbuf_set_empty(&s->id);
            if (sbuf_add(&s->id, v, vlen))
                return kh_err_set(err, KH_ENOMEM, "out of memory buffering an SSE event");
        }
    }
    /* `retry:` and unknown fields are ignored, as the standard says */
    return KH_OK;
}

kh_status kh_sse_feed(kh_sse *s, const char *buf, size_t n, kh_err *err)
{
    static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
    size_t i = 0;
    /* A UTF-8 BOM at the very start is dropped (possibly split over chunks). */
    while (!s->started && i < n) {
        if ((unsigned char)buf[i] == bom[s->bom_seen]) {
            s->bom_seen++;
            i++;
            if (s->bom_seen == 3)
                s->started = 1;
        } else {
            s->started = 1;
            if (s->bom_seen && sbuf_add(&s->line, (const char *)bom, s->bom_seen))
                return kh_err_set(err, KH_ENOMEM, "out of memory buffering an SSE line");
        }
    }
    while (i < n) {
        if (s->pending_cr) {
            s->pending_cr = 0;
            if (buf[i] == '\n') {
                i++;
                continue;
            }
        }
        /* find the next line end */
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r')
            j++;
        if (j == n) {
            if (s->line.len + (n - i) > s->max)
                return kh_err_set(err, KH_EPARSE, "SSE line longer than %zu bytes", s->max);
            if (sbuf_add(&s->line, buf + i, n - i))
                return kh_err_set(err, KH_ENOMEM, "out of memory buffering an SSE line");
            return KH_OK;
        }
        kh_status st;
        if (s->line.len) {
            if (s->line.len + (j - i) > s->max)
                return kh_err_set(err, KH_EPARSE, "SSE line longer than %zu bytes", s->max);
            if (sbuf_add(&s->line, buf + i, j - i))
                return kh_err_set(err, KH_ENOMEM, "out of memory buffering an SSE line");
            st = process_line(s, s->line.p, s->line.len, err);
            sbuf_set_empty(&s->line);
        } else {
            st = process_line(s, buf + i, j - i, err);
        }
        if (buf[j] == '\r')
            s->pending_cr = 1;
        i = j + 1;
        if (st != KH_OK)
            return st;
    }
    return KH_OK;
}

int kh_sse_finish(kh_sse *s)
{
    int partial = s->line.len > 0 || s->have_data;
    sbuf_set_empty(&s->line);
    sbuf_set_empty(&s->data);
    sbuf_set_empty(&s->event);
    s->have_data = 0;
    s->pending_cr = 0;
    return partial;
}
