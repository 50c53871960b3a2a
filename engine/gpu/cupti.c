/* cupti.c: CUPTI activity tracing and per-call attribution (see cupti.h).
 * Owns the library handle, CUPTI's buffers (handed out and taken back on
 * CUPTI's threads, hence the mutex) and the parsed records. */
#include "gpu/cupti.h"

#include <cupti_activity.h> /* not <cupti.h>: engine/gpu/cupti.h shadows it */
#include <cupti_result.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_SIZE (8u << 20) /* FlashInfer-Bench uses 8 MiB buffers */

#define KH_CUPTI_FUNCS(X)                                                                 \
    X(cuptiActivityEnable) X(cuptiActivityDisable) X(cuptiActivityRegisterCallbacks)      \
    X(cuptiActivityFlushAll) X(cuptiActivityGetNextRecord)                                \
    X(cuptiActivityGetNumDroppedRecords) X(cuptiActivityPushExternalCorrelationId)        \
    X(cuptiActivityPopExternalCorrelationId) X(cuptiGetTimestamp) X(cuptiGetResultString)

typedef struct rec {
    uint8_t kind;      /* 'k' kernel, 'c' memcpy, 's' memset */
    uint32_t corr;
    uint64_t start, end;
    const char *name;  /* interned */
    uint64_t bytes;
} rec;

typedef struct api_rec {
    uint32_t corr;
    uint64_t start;
} api_rec;

typedef struct ext_rec {
    uint32_t corr;
    uint64_t ext;
} ext_rec;

struct kh_cupti {
    void *handle;
#define KH_X(fn) __typeof__(fn) *fn;
    KH_CUPTI_FUNCS(KH_X)
#undef KH_X
    pthread_mutex_t mu;
    rec *recs;
    size_t nrec, caprec;
    api_rec *apis;
    size_t napi, capapi;
    ext_rec *exts;
    size_t next, capext;
    char **names;
    size_t nnames, capnames;
    size_t dropped;
    int enabled;
};

static kh_cupti *g_cupti; /* CUPTI's callbacks carry no user pointer */

static kh_status check(kh_cupti *c, CUptiResult r, const char *what, kh_err *err)
{
    if (r == CUPTI_SUCCESS)
        return KH_OK;
    const char *s = NULL;
    if (c && c->cuptiGetResultString)
        c->cuptiGetResultString(r, &s);
    return kh_err_set(err, r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? KH_EUNSUPPORTED
                                                                               : KH_ECUDA,
                      "%s: %s (CUPTI %d)", what, s ? s : "?", (int)r);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUF_SIZE);
    *size = *buffer ? BUF_SIZE : 0;
    *max_records = 0;
}

static const char *intern(kh_cupti *c, const char *s)
{
    if (!s)
        s = "?";
    for (size_t i = c->nnames; i-- > 0;)
        if (!strcmp(c->names[i], s))
            return c->names[i];
    if (c->nnames == c->capnames) {
        size_t n = c->capnames ? c->capnames * 2 : 32;
        char **nn = realloc(c->names, n * sizeof *nn);
        if (!nn)
            return "?";
        c->names = nn;
        c->capnames = n;
    }
    char *d = kh_strdup(s);
    if (!d)
        return "?";
    c->names[c->nnames++] = d;
    return d;
}

#define GROW(arr, n, cap)                                                                 \
    do {                                                                                  \
        if ((n) == (cap)) {                                                               \
            size_t nc = (cap) ? (cap) * 2 : 1024;                                         \
            void *np = realloc((arr), nc * sizeof *(arr));                                \
            if (!np)                                                                      \
                goto oom;                                                                 \
            (arr) = np;                                                                   \
            (cap) = nc;                                                                   \
        }                                                                                 \
    } while (0)

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    (void)ctx; (void)stream; (void)size;
    kh_cupti *c = g_cupti;
    if (!c) {
        free(buffer);
        return;
    }
    pthread_mutex_lock(&c->mu);
    CUpti_Activity *a = NULL;
    while (valid && c->cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        switch (a->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const void *)a;
            GROW(c->recs, c->nrec, c->caprec);
            c->recs[c->nrec++] = (rec){'k', k->correlationId, k->start, k->end,
                                       intern(c, k->name), 0};
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const void *)a;
            GROW(c->recs, c->nrec, c->caprec);
            c->recs[c->nrec++] = (rec){'c', m->correlationId, m->start, m->end,
                                       intern(c, "memcpy"), m->bytes};
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const void *)a;
            GROW(c->recs, c->nrec, c->caprec);
            c->recs[c->nrec++] = (rec){'s', m->correlationId, m->start, m->end,
                                       intern(c, "memset"), m->bytes};
            break;
        }
        case CUPTI_ACTIVITY_KIND_DRIVER:
        case CUPTI_ACTIVITY_KIND_RUNTIME: {
            const CUpti_ActivityAPI *p = (const void *)a;
            GROW(c->apis, c->napi, c->capapi);
            c->apis[c->napi++] = (api_rec){p->correlationId, p->start};
            break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
            const CUpti_ActivityExternalCorrelation *e = (const void *)a;
            GROW(c->exts, c->next, c->capext);
            c->exts[c->next++] = (ext_rec){e->correlationId, e->externalId};
            break;
        }
        default:
            break;
        }
    }
oom:
    pthread_mutex_unlock(&c->mu);
    free(buffer);
}

kh_cupti *kh_cupti_open(const char *cuda_home, kh_err *err)
{
    if (g_cupti) {
        kh_err_set(err, KH_ESTATE, "CUPTI is already open in this process");
        return NULL;
    }
    kh_cupti *c = calloc(1, sizeof *c);
    if (!c) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    char p1[512] = "", p2[512] = "";
    if (cuda_home) {
        snprintf(p1, sizeof p1, "%s/lib64/libcupti.so.13", cuda_home);
        snprintf(p2, sizeof p2, "%s/extras/CUPTI/lib64/libcupti.so.13", cuda_home);
    }
    const char *paths[] = {"libcupti.so.13", p1, p2};
    for (size_t i = 0; i < 3 && !c->handle; i++)
        if (paths[i][0])
            c->handle = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
    if (!c->handle) {
        kh_err_set(err, KH_ENODEV, "CUPTI not found (libcupti.so.13): %s", dlerror());
        free(c);
        return NULL;
    }
#define KH_X(fn)                                                                          \
    if (!(*(void **)&c->fn = dlsym(c->handle, #fn))) {                                     \
        kh_err_set(err, KH_ENODEV, "libcupti.so.13 lacks %s", #fn);                        \
        free(c);                                                                          \
        return NULL;                                                                      \
    }
    KH_CUPTI_FUNCS(KH_X)
#undef KH_X
    pthread_mutex_init(&c->mu, NULL);
    g_cupti = c;
    if (check(c, c->cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
              "cuptiActivityRegisterCallbacks", err)) {
        g_cupti = NULL;
        free(c);
        return NULL;
    }
    return c;
}

void kh_cupti_clear(kh_cupti *c)
{
    pthread_mutex_lock(&c->mu);
    c->nrec = c->napi = c->next = 0;
    pthread_mutex_unlock(&c->mu);
}

void kh_cupti_close(kh_cupti *c)
{
    if (!c)
        return;
    if (c->enabled)
        kh_cupti_disable(c, NULL);
    g_cupti = NULL;
    free(c->recs);
    free(c->apis);
    free(c->exts);
    for (size_t i = 0; i < c->nnames; i++)
        free(c->names[i]);
    free(c->names);
    pthread_mutex_destroy(&c->mu);
    free(c); /* the library stays loaded: CUPTI keeps threads */
}

static const CUpti_ActivityKind kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
};

kh_status kh_cupti_enable(kh_cupti *c, kh_err *err)
{
    for (size_t i = 0; i < KH_ARRAY_LEN(kinds); i++) {
        kh_status st = check(c, c->cuptiActivityEnable(kinds[i]), "cuptiActivityEnable", err);
        if (st) {
            for (size_t j = 0; j < i; j++)
                c->cuptiActivityDisable(kinds[j]);
            return st;
        }
    }
    c->enabled = 1;
    return KH_OK;
}

kh_status kh_cupti_disable(kh_cupti *c, kh_err *err)
{
    kh_status st = check(c, c->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                         "cuptiActivityFlushAll", err);
    for (size_t i = 0; i < KH_ARRAY_LEN(kinds); i++)
        c->cuptiActivityDisable(kinds[i]);
    size_t d = 0;
    if (c->cuptiActivityGetNumDroppedRecords(NULL, 0, &d) == CUPTI_SUCCESS)
        c->dropped += d;
    c->enabled = 0;
    return st;
}

kh_status kh_cupti_push(kh_cupti *c, uint64_t id, kh_err *err)
{
    return check(c, c->cuptiActivityPushExternalCorrelationId(
                        CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id),
                 "cuptiActivityPushExternalCorrelationId", err);
}

kh_status kh_cupti_pop(kh_cupti *c, kh_err *err)
{
    uint64_t id;
    return check(c, c->cuptiActivityPopExternalCorrelationId(
                        CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id),
                 "cuptiActivityPopExternalCorrelationId", err);
}

uint64_t kh_cupti_timestamp(kh_cupti *c)
{
    uint64_t t = 0;
    c->cuptiGetTimestamp(&t);
    return t;
}

size_t kh_cupti_dropped(kh_cupti *c) { return c->dropped; }

static int cmp_span(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

double kh_span_union_ns(uint64_t (*iv)[2], size_t n)
{
    qsort(iv, n, sizeof *iv, cmp_span);
    double total = 0;
    uint64_t s = 0, e = 0;
    int open = 0;
    for (size_t i = 0; i < n; i++) {
        if (iv[i][1] <= iv[i][0])
            continue;
        if (open && iv[i][0] <= e) {
            if (iv[i][1] > e)
                e = iv[i][1];
            continue;
        }
        if (open)
            total += (double)(e - s);
        s = iv[i][0];
        e = iv[i][1];
        open = 1;
    }
    if (open)
        total += (double)(e - s);
    return total;
}

double kh_cupti_active_ns(kh_cupti *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->nrec;
    uint64_t(*iv)[2] = malloc((n ? n : 1) * sizeof *iv);
    for (size_t i = 0; iv && i < n; i++) {
        iv[i][0] = c->recs[i].start;
        iv[i][1] = c->recs[i].end;
    }
    pthread_mutex_unlock(&c->mu);
    double t = iv ? kh_span_union_ns(iv, n) : 0;
    free(iv);
    return t;
}

/* FNV-1a over the sorted identities of a call's records, so two calls with
 * the same kernel set (FlashInfer-Bench's identity check) hash alike. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void add_rec(kh_call_span *s, const rec *r)
{
    if (s->count == 0 || r->start < s->start)
        s->start = r->start;
    if (s->count == 0 || r->end > s->end)
        s->end = r->end;
    s->count++;
    s->sum_ns += (double)(r->end - r->start);
    if (r->kind == 'k')
        s->kernels++;
    int have = 0;
    for (int i = 0; i < s->nnames; i++)
        if (s->names[i] == r->name)
            have = 1;
    if (!have && s->nnames < KH_CALL_MAX_NAMES)
        s->names[s->nnames++] = r->name;
}

static void finish_span(kh_call_span *s)
{
    s->span_ns = s->count ? (double)(s->end - s->start) : 0;
    const char *sorted[KH_CALL_MAX_NAMES];
    memcpy(sorted, s->names, sizeof(char *) * (size_t)s->nnames);
    qsort(sorted, (size_t)s->nnames, sizeof *sorted, cmp_str);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < s->nnames; i++) {
        for (const char *p = sorted[i]; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull;
    }
    s->set_hash = h;
}

/* A correlation id -> call index map: open addressing over 2x the entries. */
typedef struct cmap {
    uint32_t *keys;
    int64_t *vals;
    size_t cap;
} cmap;

static int cmap_init(cmap *m, size_t n)
{
    m->cap = 16;
    while (m->cap < n * 2 + 1)
        m->cap <<= 1;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = malloc(m->cap * sizeof *m->vals);
    return m->keys && m->vals;
}

static void cmap_put(cmap *m, uint32_t k, int64_t v)
{
    size_t i = (k * 2654435761u) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != k)
        i = (i + 1) & (m->cap - 1);
    m->keys[i] = k;
    m->vals[i] = v;
}

static int64_t cmap_get(const cmap *m, uint32_t k)
{
    size_t i = (k * 2654435761u) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->keys[i] == k)
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static void cmap_free(cmap *m)
{
    free(m->keys);
    free(m->vals);
}

kh_status kh_cupti_attribute_ext(kh_cupti *c, uint64_t first_id, size_t n, kh_call_span *out,
                                 kh_err *err)
{
    memset(out, 0, n * sizeof *out);
    pthread_mutex_lock(&c->mu);
    cmap m;
    if (!cmap_init(&m, c->next)) {
        pthread_mutex_unlock(&c->mu);
        cmap_free(&m);
        return kh_err_set(err, KH_ENOMEM, "out of memory attributing records");
    }
    for (size_t i = 0; i < c->next; i++)
        if (c->exts[i].ext >= first_id && c->exts[i].ext < first_id + n && c->exts[i].corr)
            cmap_put(&m, c->exts[i].corr, (int64_t)(c->exts[i].ext - first_id));
    for (size_t i = 0; i < c->nrec; i++) {
        int64_t call = cmap_get(&m, c->recs[i].corr);
        if (call >= 0 && c->recs[i].end >= c->recs[i].start && c->recs[i].start)
            add_rec(&out[call], &c->recs[i]);
    }
    pthread_mutex_unlock(&c->mu);
    cmap_free(&m);
    for (size_t i = 0; i < n; i++)
        finish_span(&out[i]);
    return KH_OK;
}

kh_status kh_cupti_attribute_window(kh_cupti *c, const uint64_t *t0, const uint64_t *t1,
                                    size_t n, kh_call_span *out, kh_err *err)
{
    memset(out, 0, n * sizeof *out);
    pthread_mutex_lock(&c->mu);
    cmap m;
    if (!cmap_init(&m, c->napi)) {
        pthread_mutex_unlock(&c->mu);
        cmap_free(&m);
        return kh_err_set(err, KH_ENOMEM, "out of memory attributing records");
    }
    /* Windows are in time order; API records are not necessarily. */
    for (size_t i = 0; i < c->napi; i++) {
        uint64_t s = c->apis[i].start;
        size_t lo = 0, hi = n;
        while (lo < hi) { /* first window whose end >= s */
            size_t mid = (lo + hi) / 2;
            if (t1[mid] < s)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < n && t0[lo] <= s && s <= t1[lo])
            cmap_put(&m, c->apis[i].corr, (int64_t)lo);
    }
    for (size_t i = 0; i < c->nrec; i++) {
        int64_t call = cmap_get(&m, c->recs[i].corr);
        if (call >= 0 && c->recs[i].end >= c->recs[i].start && c->recs[i].start)
            add_rec(&out[call], &c->recs[i]);
    }
    pthread_mutex_unlock(&c->mu);
    cmap_free(&m);
    for (size_t i = 0; i < n; i++)
        finish_span(&out[i]);
    return KH_OK;
}
