/* compile.c: NVRTC compiles, the in-memory artifact cache and the cache key
 * (see compile.h).  Owns the options, the key, the checks a request must
 * pass and a build's stages, from the request to the artifact; one NVRTC
 * program belongs to compile_nvrtc.c, the isolated child and the warm
 * precompiled header to compile_isolate.c (compile_int.h), parsing cubins to
 * cubin.c, screening source to srccheck.c, and the store-backed cache and
 * compile servers to the store and worker modules that wrap a kh_compiler. */
#include "compile/compile_int.h"

#include "compile/srccheck.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <jansson.h>
#include <xxhash.h>

const char *kh_compile_default_arch(void)
{
    const char *a = getenv("KHLUA_ARCH");
    return a && a[0] ? a : KH_COMPILE_DEFAULT_ARCH;
}

kh_compiler *kh_compile_new(kh_engine *e, kh_err *err)
{
    kh_compiler *c = calloc(1, sizeof *c);
    if (!c) {
        kh_err_set(err, KH_ENOMEM, "out of memory creating the compiler");
        return NULL;
    }
    c->e = e;
    snprintf(c->inc_cuda, sizeof c->inc_cuda, "%s/include", kh_engine_cuda_home(e));
    snprintf(c->inc_cccl, sizeof c->inc_cccl, "%s/include/cccl", kh_engine_cuda_home(e));
    c->cache_max = 256u << 20;
    return c;
}

void kh_compile_cache_clear(kh_compiler *c)
{
    for (size_t i = 0; i < c->n_cache; i++)
        kh_artifact_free(c->cache[i].a);
    c->n_cache = 0;
    c->cache_bytes = 0;
}

void kh_compile_free(kh_compiler *c)
{
    if (!c)
        return;
    kh_compile_cache_clear(c);
    free(c->cache);
    free(c);
}

void kh_artifact_free(kh_artifact *a)
{
    if (!a)
        return;
    free(a->cubin);
    free(a->log);
    free(a->arch);
    for (size_t i = 0; i < a->n_options; i++)
        free(a->options[i]);
    free(a->options);
    kh_cubin_info_free(&a->res);
    free(a);
}

/* ---- options ------------------------------------------------------------- */

/* "sm_90a", "sm_100", "compute_90": letters, digits, '_' only. */
static int arch_ok(const char *a)
{
    if (strncmp(a, "sm_", 3) && strncmp(a, "compute_", 8))
        return 0;
    for (const char *p = a; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_')
            return 0;
    return strlen(a) < 32;
}

static void optlist_free(optlist *o)
{
    for (size_t i = 0; i < o->n; i++)
        free(o->v[i]);
    o->n = 0;
}

static kh_status optlist_add(optlist *o, const char *s, kh_err *err)
{
    if (o->n >= KH_ARRAY_LEN(o->v))
        return kh_err_set(err, KH_EINVAL, "too many compile options (at most %zu)",
                          KH_ARRAY_LEN(o->v) - 8);
    if (!(o->v[o->n] = kh_strdup(s)))
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    o->n++;
    return KH_OK;
}

/* pch: pass -pch (with its quieting options). */
static kh_status build_options(kh_compiler *c, const kh_compile_req *req, const char *arch,
                               int pch, optlist *o, kh_err *err)
{
    char buf[700];
    snprintf(buf, sizeof buf, "-arch=%s", arch);
    kh_status st = optlist_add(o, buf, err);
    if (!st) st = optlist_add(o, "--std=c++17", err);
    if (!st) st = optlist_add(o, "-lineinfo", err);
    if (!st) st = optlist_add(o, "-default-device", err);
    snprintf(buf, sizeof buf, "-I%s", c->inc_cuda);
    if (!st) st = optlist_add(o, buf, err);
    snprintf(buf, sizeof buf, "-I%s", c->inc_cccl);
    if (!st) st = optlist_add(o, buf, err);
    if (!st && pch) st = optlist_add(o, "-pch", err);
    /* PCH chatter ("creating precompiled header file", warnings 629/630 when a
     * source's prefix or options differ from a held PCH) is not the candidate's log */
    if (!st && pch) st = optlist_add(o, "--pch-messages=false", err);
    if (!st && pch) st = optlist_add(o, "-diag-suppress=629,630", err);
    for (size_t i = 0; !st && i < req->n_options; i++) {
        const char *opt = req->options[i];
        if (!opt || !opt[0])
            return kh_err_set(err, KH_EINVAL, "compile option %zu is empty", i + 1);
        /* options that write files or change where output goes are ours */
        if (!strncmp(opt, "--time", 6) || !strncmp(opt, "-time", 5) ||
            !strncmp(opt, "--fdevice-time-trace", 20) || !strncmp(opt, "-pch-dir", 8) ||
            !strncmp(opt, "--pch-dir", 9) || !strncmp(opt, "-arch", 5) ||
            !strncmp(opt, "--gpu-architecture", 18))
            return kh_err_set(err, KH_EINVAL,
                              "compile option '%s' is not allowed (use arch= for the "
                              "architecture; file-writing options are refused)", opt);
        st = optlist_add(o, opt, err);
    }
    if (st)
        optlist_free(o);
    return st;
}

/* ---- key ----------------------------------------------------------------- */

typedef struct hdr_ctx {
    kh_compiler *c;
    XXH3_state_t *h;
    const kh_compile_req *req;
} hdr_ctx;

/* The directories NVRTC searches for an #include: the toolkit's, then the
 * caller's -I options.  Returns how many went into dirs. */
static size_t include_dirs(const kh_compiler *c, const kh_compile_req *req, const char **dirs,
                           size_t cap)
{
    size_t nd = 0;
    dirs[nd++] = c->inc_cuda;
    dirs[nd++] = c->inc_cccl;
    for (size_t i = 0; i < req->n_options && nd < cap; i++)
        if (req->options[i] && !strncmp(req->options[i], "-I", 2) && req->options[i][2])
            dirs[nd++] = req->options[i] + 2;
    return nd;
}

/* The candidate's header of that name, or NULL. */
static const kh_source *find_header(const kh_compile_req *req, const char *name)
{
    for (size_t i = 0; i < req->n_headers; i++)
        if (req->headers[i].name && !strcmp(req->headers[i].name, name))
            return &req->headers[i];
    return NULL;
}

/* Hash the identity of one included header: one of the candidate's (its text
 * is hashed with the rest of them), else the first match on the include path. */
static void hash_header(void *ud, const char *name, int angled, int line)
{
    (void)angled;
    (void)line;
    hdr_ctx *x = ud;
    const char *dirs[2 + 16];
    size_t nd = include_dirs(x->c, x->req, dirs, KH_ARRAY_LEN(dirs));
    XXH3_128bits_update(x->h, name, strlen(name) + 1);
    if (find_header(x->req, name)) {
        XXH3_128bits_update(x->h, "=", 2); /* the candidate's: NVRTC looks there first */
        return;
    }
    for (size_t i = 0; i < nd; i++) {
        char path[1200];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dirs[i], name);
        if (stat(path, &sb) == 0) {
            int64_t id[4] = {(int64_t)sb.st_size, (int64_t)sb.st_mtim.tv_sec,
                             (int64_t)sb.st_mtim.tv_nsec, (int64_t)sb.st_ino};
            XXH3_128bits_update(x->h, path, strlen(path) + 1);
            XXH3_128bits_update(x->h, id, sizeof id);
            return;
        }
    }
    XXH3_128bits_update(x->h, "?", 2); /* not found: NVRTC will say so */
}

static int cmp_header(const void *a, const void *b)
{
    return strcmp((*(const kh_source *const *)a)->name, (*(const kh_source *const *)b)->name);
}

static kh_status key_with(kh_compiler *c, const kh_compile_req *req, const char *arch,
                          const optlist *o, const kh_nvrtc_api *nv, unsigned char key[16],
                          kh_err *err)
{
    XXH3_state_t *h = XXH3_createState();
    if (!h)
        return kh_err_set(err, KH_ENOMEM, "out of memory hashing");
    XXH3_128bits_reset(h);
    static const char tag[] = "khlua-compile-key-v1";
    XXH3_128bits_update(h, tag, sizeof tag);
    uint64_t n = req->source_len;
    XXH3_128bits_update(h, &n, sizeof n);
    XXH3_128bits_update(h, req->source, req->source_len);
    XXH3_128bits_update(h, arch, strlen(arch) + 1);
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->v[i], "-pch") && strcmp(o->v[i], "--pch-messages=false") &&
            strcmp(o->v[i], "-diag-suppress=629,630"))
            XXH3_128bits_update(h, o->v[i], strlen(o->v[i]) + 1);
    int ver[2] = {nv->major, nv->minor};
    XXH3_128bits_update(h, ver, sizeof ver);
    /* the toolkit's own identity covers headers included indirectly */
    char vpath[700];
    struct stat sb;
    snprintf(vpath, sizeof vpath, "%s/cuda.h", c->inc_cuda);
    if (stat(vpath, &sb) == 0) {
        int64_t id[2] = {(int64_t)sb.st_size, (int64_t)sb.st_mtim.tv_sec};
        XXH3_128bits_update(h, id, sizeof id);
    }
    hdr_ctx x = {c, h, req};
    kh_srccheck_includes(req->source, req->source_len, hash_header, &x);
    if (req->n_headers) {
        /* name order: NVRTC finds a header by name, so the order they came in
         * changes nothing, and must not change the key */
        const kh_source **by = malloc(req->n_headers * sizeof *by);
        if (!by) {
            XXH3_freeState(h);
            return kh_err_set(err, KH_ENOMEM, "out of memory hashing");
        }
        for (size_t i = 0; i < req->n_headers; i++)
            by[i] = &req->headers[i];
        qsort(by, req->n_headers, sizeof *by, cmp_header);
        static const char htag[] = "headers";
        uint64_t nh = req->n_headers;
        XXH3_128bits_update(h, htag, sizeof htag);
        XXH3_128bits_update(h, &nh, sizeof nh);
        for (size_t i = 0; i < req->n_headers; i++) {
            uint64_t len = by[i]->len;
            XXH3_128bits_update(h, by[i]->name, strlen(by[i]->name) + 1);
            XXH3_128bits_update(h, &len, sizeof len);
            XXH3_128bits_update(h, by[i]->text, by[i]->len);
        }
        /* and the system headers they include */
        for (size_t i = 0; i < req->n_headers; i++)
            kh_srccheck_includes(by[i]->text, by[i]->len, hash_header, &x);
        free(by);
    }
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, d);
    memcpy(key, canon.digest, 16);
    return KH_OK;
}

static kh_status validate(const kh_compile_req *req, const char **arch, kh_err *err)
{
    if (!req || !req->source)
        return kh_err_set(err, KH_EINVAL, "compile: no source");
    if (req->source_len > KH_COMPILE_MAX_SOURCE)
        return kh_err_set(err, KH_EINVAL, "compile: source is %zu bytes, over the hard "
                                          "limit of %u bytes", req->source_len,
                          KH_COMPILE_MAX_SOURCE);
    *arch = req->arch && req->arch[0] ? req->arch : kh_compile_default_arch();
    if (!arch_ok(*arch))
        return kh_err_set(err, KH_EINVAL, "compile: bad architecture '%s' (want e.g. sm_90a)",
                          *arch);
    if (req->deadline_s < 0)
        return kh_err_set(err, KH_EINVAL, "compile: negative deadline");
    if (req->n_headers && !req->headers)
        return kh_err_set(err, KH_EINVAL, "compile: %zu headers but no array of them",
                          req->n_headers);
    if (req->n_headers > KH_COMPILE_MAX_HEADERS)
        return kh_err_set(err, KH_EINVAL, "compile: %zu headers (at most %d)", req->n_headers,
                          KH_COMPILE_MAX_HEADERS);
    size_t total = req->source_len;
    for (size_t i = 0; i < req->n_headers; i++) {
        const kh_source *hd = &req->headers[i];
        if (!hd->name || (!hd->text && hd->len))
            return kh_err_set(err, KH_EINVAL, "compile: header %zu has no name or no text",
                              i + 1);
        total += hd->len;
    }
    if (total > KH_COMPILE_MAX_SOURCE)
        return kh_err_set(err, KH_EINVAL, "compile: the source and its %zu headers are %zu "
                          "bytes, over the hard limit of %u bytes", req->n_headers, total,
                          KH_COMPILE_MAX_SOURCE);
    return KH_OK;
}

kh_status kh_compile_key(kh_compiler *c, const kh_compile_req *req, unsigned char key[16],
                         kh_err *err)
{
    const char *arch;
    kh_status st = validate(req, &arch, err);
    if (st)
        return st;
    const kh_nvrtc_api *nv = kh_engine_nvrtc(c->e, err);
    if (!nv)
        return KH_ENODEV;
    optlist o = {0};
    if ((st = build_options(c, req, arch, !req->no_pch, &o, err)))
        return st;
    st = key_with(c, req, arch, &o, nv, key, err);
    optlist_free(&o);
    return st;
}

/* Append one line to a growing report; 0, or -1 when out of memory. */
static int report_line(char **buf, size_t *len, const char *line)
{
    size_t n = strlen(line);
    char *b = realloc(*buf, *len + n + 2);
    if (!b)
        return -1;
    memcpy(b + *len, line, n);
    *len += n;
    b[(*len)++] = '\n';
    b[*len] = '\0';
    *buf = b;
    return 0;
}

kh_status kh_compile_check(kh_compiler *c, const kh_compile_req *req, char **report,
                           kh_err *err)
{
    if (report)
        *report = NULL;
    const char *name = req->name && req->name[0] ? req->name : "candidate.cu";
    kh_status st = kh_srccheck_names(name, req->headers, req->n_headers, report, err);
    if (st)
        return st;
    /* NVRTC looks among the headers it was given before the include path,
     * for every #include, the toolkit's own too (measured: a header named
     * cuda/std/version replaces CCCL's for <cuda/std/cstdint>): a candidate's
     * header must not take a toolkit file's name */
    const char *dirs[2 + 16];
    size_t nd = include_dirs(c, req, dirs, KH_ARRAY_LEN(dirs));
    char *buf = NULL;
    size_t len = 0;
    int bad = 0;
    for (size_t i = 0; i < req->n_headers; i++) {
        for (size_t k = 0; k < nd; k++) {
            char path[1200], line[1600];
            struct stat sb;
            snprintf(path, sizeof path, "%s/%s", dirs[k], req->headers[i].name);
            if (stat(path, &sb) != 0)
                continue;
            snprintf(line, sizeof line, "%s: source '%s' cannot be a header: it has the name "
                     "of %s, which NVRTC would then replace wherever it is included; rename it",
                     name, req->headers[i].name, path);
            if (!bad++)
                kh_err_set(err, KH_ECOMPILE, "%s", line);
            if (report_line(&buf, &len, line)) {
                free(buf);
                return kh_err_set(err, KH_ENOMEM, "out of memory");
            }
            break;
        }
    }
    if (bad) {
        if (report)
            *report = buf;
        else
            free(buf);
        return KH_ECOMPILE;
    }
    if (req->trusted)
        return KH_OK;
    kh_srccheck_opts so = {.name = name, .max_bytes = req->max_source_bytes,
                           .allow_device_launch = req->allow_device_launch,
                           .kernels = req->kernels, .n_kernels = req->n_kernels,
                           .headers = req->headers, .n_headers = req->n_headers};
    return kh_srccheck_run(req->source, req->source_len, &so, report, err);
}

/* ---- cache --------------------------------------------------------------- */

static size_t artifact_bytes(const kh_artifact *a)
{
    return sizeof *a + a->cubin_len + a->log_len + a->res.n_kernels * 128 + 256;
}

static kh_artifact *artifact_clone(const kh_artifact *a)
{
    kh_artifact *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    *b = *a;
    b->cubin = NULL;
    b->log = NULL;
    b->arch = NULL;
    b->options = NULL;
    b->n_options = 0;
    memset(&b->res, 0, sizeof b->res);
    b->cubin = malloc(a->cubin_len ? a->cubin_len : 1);
    b->log = malloc(a->log_len + 1);
    b->arch = kh_strdup(a->arch);
    b->options = calloc(a->n_options ? a->n_options : 1, sizeof *b->options);
    b->res.kernels = calloc(a->res.n_kernels ? a->res.n_kernels : 1, sizeof *b->res.kernels);
    if (!b->cubin || !b->log || !b->arch || !b->options || !b->res.kernels)
        goto oom;
    memcpy(b->cubin, a->cubin, a->cubin_len);
    memcpy(b->log, a->log, a->log_len + 1);
    for (; b->n_options < a->n_options; b->n_options++)
        if (!(b->options[b->n_options] = kh_strdup(a->options[b->n_options])))
            goto oom;
    b->res.sm = a->res.sm;
    b->res.reserved_smem = a->res.reserved_smem;
    for (; b->res.n_kernels < a->res.n_kernels; b->res.n_kernels++) {
        kh_kernel_res *k = &b->res.kernels[b->res.n_kernels];
        *k = a->res.kernels[b->res.n_kernels];
        if (!(k->name = kh_strdup(k->name)))
            goto oom;
    }
    return b;
oom:
    kh_artifact_free(b);
    return NULL;
}

static cache_entry *cache_find(kh_compiler *c, const unsigned char key[16])
{
    for (size_t i = 0; i < c->n_cache; i++)
        if (!memcmp(c->cache[i].key, key, 16))
            return &c->cache[i];
    return NULL;
}

static void cache_evict_to(kh_compiler *c, size_t max_bytes)
{
    while (c->n_cache && c->cache_bytes > max_bytes) {
        size_t oldest = 0;
        for (size_t i = 1; i < c->n_cache; i++)
            if (c->cache[i].last_use < c->cache[oldest].last_use)
                oldest = i;
        c->cache_bytes -= c->cache[oldest].bytes;
        kh_artifact_free(c->cache[oldest].a);
        c->cache[oldest] = c->cache[--c->n_cache];
        c->evictions++;
    }
}

/* Keep a copy of a; failure to cache is not an error. */
static void cache_put(kh_compiler *c, const kh_artifact *a)
{
    size_t bytes = artifact_bytes(a);
    if (bytes > c->cache_max)
        return;
    if (c->n_cache == c->cap_cache) {
        size_t cap = c->cap_cache ? c->cap_cache * 2 : 64;
        cache_entry *n = realloc(c->cache, cap * sizeof *n);
        if (!n)
            return;
        c->cache = n;
        c->cap_cache = cap;
    }
    kh_artifact *copy = artifact_clone(a);
    if (!copy)
        return;
    cache_entry *ce = &c->cache[c->n_cache++];
    memcpy(ce->key, a->key, 16);
    ce->a = copy;
    ce->bytes = bytes;
    ce->last_use = ++c->tick;
    c->cache_bytes += bytes;
    cache_evict_to(c, c->cache_max);
}

void kh_compile_cache_stats_get(const kh_compiler *c, kh_compile_cache_stats *s)
{
    s->entries = c->n_cache;
    s->bytes = c->cache_bytes;
    s->hits = c->hits;
    s->misses = c->misses;
    s->evictions = c->evictions;
}

void kh_compile_cache_limit(kh_compiler *c, size_t max_bytes)
{
    c->cache_max = max_bytes;
    cache_evict_to(c, max_bytes);
}

/* ---- build --------------------------------------------------------------- */


static void hexify(const unsigned char key[16], char out[33])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hx[key[i] >> 4];
        out[2 * i + 1] = hx[key[i] & 15];
    }
    out[32] = '\0';
}

static kh_status set_log(kh_artifact *a, const char *text, size_t len, kh_err *err)
{
    free(a->log);
    a->log = kh_utf8_sanitize(text ? text : "", text ? len : 0, &a->log_len);
    if (!a->log)
        return kh_err_set(err, KH_ENOMEM, "out of memory copying the compile log");
    return KH_OK;
}

/* The first line of the log that says "error", for err->msg. */
static void first_error(const char *log, char *buf, size_t n)
{
    const char *p = strstr(log, "error");
    if (!p) {
        snprintf(buf, n, "%s", log[0] ? log : "(empty log)");
    } else {
        const char *b = p;
        while (b > log && b[-1] != '\n')
            b--;
        const char *e = strchr(p, '\n');
        int len = e ? (int)(e - b) : (int)strlen(b);
        snprintf(buf, n, "%.*s", len, b);
    }
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
}

static const char *pch_word(int pch_status)
{
    switch (pch_status) {
    case -1: return "off";
    case NVRTC_SUCCESS: return "created";
    case NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED: return "reused or not needed";
    case NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED: return "heap exhausted (grown for next time)";
    default: return "creation failed";
    }
}

/* 1. header names, and static checks on model-written source.  KH_ECOMPILE:
 * the report is a's log now (the caller answers with a). */
static kh_status build_check(kh_compiler *c, const kh_compile_req *req, kh_artifact *a,
                             kh_err *err)
{
    double tc = kh_now();
    char *report = NULL;
    kh_status st = kh_compile_check(c, req, &report, err);
    a->t.check = kh_now() - tc;
    if (st == KH_ECOMPILE) {
        kh_status s2 = set_log(a, report, report ? strlen(report) : 0, err);
        free(report);
        return s2 ? s2 : KH_ECOMPILE;
    }
    free(report);
    return st;
}

/* 2. options and key, into o and a. */
static kh_status build_key(kh_compiler *c, const kh_compile_req *req, const char *arch,
                           const kh_nvrtc_api *nv, int pch, optlist *o, kh_artifact *a,
                           kh_err *err)
{
    kh_status st = build_options(c, req, arch, pch, o, err);
    if (st)
        return st;
    double tk = kh_now();
    if ((st = key_with(c, req, arch, o, nv, a->key, err)))
        return st;
    hexify(a->key, a->hash);
    a->t.key = kh_now() - tk;
    return KH_OK;
}

/* A copy of the cached artifact of a's key, with the timings of this answer
 * (a's so far, t0 its start); NULL on a miss (counted). */
static kh_artifact *cache_take(kh_compiler *c, const kh_artifact *a, double t0)
{
    cache_entry *ce = cache_find(c, a->key);
    if (ce) {
        kh_artifact *hit = artifact_clone(ce->a);
        if (hit) {
            ce->last_use = ++c->tick;
            c->hits++;
            hit->cache_hit = 1;
            hit->t = (kh_compile_timings){.check = a->t.check, .key = a->t.key};
            hit->t.total = kh_now() - t0;
            return hit;
        }
    }
    c->misses++;
    return NULL;
}

/* The exact option list into the artifact. */
static kh_status copy_options(kh_artifact *a, const optlist *o, kh_err *err)
{
    a->options = calloc(o->n, sizeof *a->options);
    if (!a->options)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    for (; a->n_options < o->n; a->n_options++)
        if (!(a->options[a->n_options] = kh_strdup(o->v[a->n_options])))
            return kh_err_set(err, KH_ENOMEM, "out of memory");
    return KH_OK;
}

/* 3. NVRTC, here or in an isolated child (compile_isolate.c).  The source
 * must be NUL-terminated for nvrtcCreateProgram, and an embedded NUL would
 * silently cut it, so it is refused.  o may lose its PCH options. */
static kh_status build_nvrtc(kh_compiler *c, const kh_nvrtc_api *nv, const kh_compile_req *req,
                             const char *name, int pch, double deadline, optlist *o,
                             kh_artifact *a, nvrtc_out *no, kh_err *err)
{
    if (memchr(req->source, '\0', req->source_len))
        return kh_err_set(err, KH_EINVAL, "compile: source contains a NUL byte");
    char *src = malloc(req->source_len + 1);
    if (!src)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    memcpy(src, req->source, req->source_len);
    src[req->source_len] = '\0';
    nvrtc_headers hdr;
    kh_status st = compile_nvrtc_headers_make(req, &hdr, err);
    if (st) {
        free(src);
        return st;
    }
    if (req->isolate) {
        /* the prefix holds only #include lines (allowlisted, unless trusted):
         * it gets the longer of the deadline and two minutes */
        double tw = kh_now();
        int warm = pch && compile_warm_prefix(c, nv, src, req->source_len, req, name, o,
                                              deadline > 120 ? deadline : 120);
        a->t.warm = kh_now() - tw;
        if (!warm)
            compile_drop_pch_options(o);
        st = compile_nvrtc_isolated(c, nv, src, name, &hdr, o, deadline, warm, no, err);
    } else {
        st = compile_nvrtc_run(c, nv, src, name, &hdr, o, deadline, pch, no, err);
    }
    free(src);
    compile_nvrtc_headers_free(&hdr);
    return st;
}

/* What NVRTC answered: KH_OK when it made a cubin; else the status the
 * artifact is answered with (cancelled, a compile error, no cubin). */
static kh_status nvrtc_verdict(const kh_nvrtc_api *nv, const nvrtc_out *no, kh_artifact *a,
                               const char *name, double deadline, const char *arch,
                               kh_err *err)
{
    if (no->r == NVRTC_ERROR_CANCELLED || no->why) {
        if (no->why == 2)
            return kh_err_set(err, KH_EINTR, "compile interrupted");
        return kh_err_set(err, KH_ETIMEOUT, "compile of %s passed its deadline of %.1f s "
                                            "(stopped after %.2f s)", name, deadline,
                          no->compile);
    }
    if (no->r != NVRTC_SUCCESS) {
        char line[600];
        first_error(a->log, line, sizeof line);
        kh_status st = kh_err_set(err, KH_ECOMPILE, "%s", no->r == NVRTC_ERROR_COMPILATION
                                      ? line : nv->nvrtcGetErrorString(no->r));
        if (no->r != NVRTC_ERROR_COMPILATION && !a->log_len) {
            char msg[256];
            snprintf(msg, sizeof msg, "nvrtcCompileProgram: %s\n",
                     nv->nvrtcGetErrorString(no->r));
            set_log(a, msg, strlen(msg), NULL);
        }
        return st;
    }
    if (!no->cubin)
        return kh_err_set(err, KH_ECOMPILE, "no cubin from NVRTC (arch %s must be a real sm_ "
                                            "architecture, not compute_)", arch);
    return KH_OK;
}

/* 4. the manifest's kernels must be symbols of the cubin (compile.h); the
 * compile service checks its answers with it too. */
kh_status kh_compile_check_kernels(const kh_compile_req *req, kh_artifact *a, kh_err *err)
{
    for (size_t i = 0; i < req->n_kernels; i++) {
        if (kh_cubin_find(&a->res, req->kernels[i]))
            continue;
        char have[512] = "";
        for (size_t k = 0; k < a->res.n_kernels; k++) {
            size_t hl = strlen(have);
            snprintf(have + hl, sizeof have - hl, "%s%s", k ? ", " : "", a->res.kernels[k].name);
        }
        kh_status st = kh_err_set(err, KH_ECOMPILE, "kernel '%s' is not in the cubin (kernels: "
                                  "%s); manifest kernels need extern \"C\" names",
                                  req->kernels[i], have[0] ? have : "none");
        char *msg = malloc(a->log_len + strlen(err->msg) + 2);
        if (msg) {
            sprintf(msg, "%s%s\n", a->log, err->msg);
            set_log(a, msg, strlen(msg), NULL);
            free(msg);
        }
        free(a->cubin);
        a->cubin = NULL;
        a->cubin_len = 0;
        kh_cubin_info_free(&a->res);
        a->ok = 0;
        return st;
    }
    return KH_OK;
}

kh_status kh_compile_build(kh_compiler *c, const kh_compile_req *req, kh_artifact **out,
                           kh_err *err)
{
    *out = NULL;
    double t0 = kh_now();
    const char *arch;
    kh_status st = validate(req, &arch, err);
    if (st)
        return st;
    const kh_nvrtc_api *nv = kh_engine_nvrtc(c->e, err);
    if (!nv)
        return KH_ENODEV;
    const char *name = req->name && req->name[0] ? req->name : "candidate.cu";

    kh_artifact *a = calloc(1, sizeof *a);
    optlist o = {0};
    nvrtc_out no = {0};
    if (!a)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    a->pch = "off";
    snprintf(a->nvrtc_version, sizeof a->nvrtc_version, "%d.%d", nv->major, nv->minor);
    if (!(a->arch = kh_strdup(arch)) || set_log(a, "", 0, err)) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto fail;
    }

    /* 1. header names, and static checks on model-written source */
    if (!req->trusted || req->n_headers) {
        st = build_check(c, req, a, err);
        if (st == KH_ECOMPILE) {
            a->t.total = kh_now() - t0;
            kh_err_prefix(err, "static check");
            *out = a;
            return KH_ECOMPILE;
        }
        if (st)
            goto fail;
    }

    /* 2. options and key; a cache hit ends here.  In this process, -pch only
     * where the PCH cannot hold a header of the candidate's (compile.h); an
     * isolated compile's PCH dies with its child. */
    int pch = !req->no_pch &&
              (req->isolate ||
               !kh_srccheck_pch_may_hold(req->source, req->source_len, req->headers,
                                         req->n_headers));
    if ((st = build_key(c, req, arch, nv, pch, &o, a, err)))
        goto fail;
    kh_artifact *hit = req->no_cache ? NULL : cache_take(c, a, t0);
    if (hit) {
        kh_artifact_free(a);
        optlist_free(&o);
        *out = hit;
        return KH_OK;
    }
    if ((st = copy_options(a, &o, err)))
        goto fail;

    /* 3. NVRTC */
    double deadline = req->deadline_s > 0 ? req->deadline_s : KH_COMPILE_DEFAULT_DEADLINE;
    st = build_nvrtc(c, nv, req, name, pch, deadline, &o, a, &no, err);
    optlist_free(&o);
    if (st)
        goto fail;
    a->t.create = no.create;
    a->t.compile = no.compile;
    a->t.extract = no.extract;
    a->pch = pch_word(no.pch);
    if (no.log_len && (st = set_log(a, no.log, no.log_len, err)))
        goto fail;
    if ((st = nvrtc_verdict(nv, &no, a, name, deadline, arch, err)))
        goto partial;
    a->cubin = no.cubin;
    a->cubin_len = no.cubin_len;
    no.cubin = NULL;
    compile_nvrtc_out_free(&no);

    /* 4. resources, and the manifest's kernels must be symbols of the cubin */
    double tp = kh_now();
    if ((st = kh_cubin_parse(a->cubin, a->cubin_len, &a->res, err))) {
        kh_err_prefix(err, "reading the cubin NVRTC produced");
        goto fail;
    }
    a->t.parse = kh_now() - tp;
    if ((st = kh_compile_check_kernels(req, a, err)))
        goto partial;
    a->ok = 1;
    a->t.total = kh_now() - t0;
    if (!req->no_cache)
        cache_put(c, a);
    *out = a;
    return KH_OK;
partial:
    compile_nvrtc_out_free(&no);
    a->t.total = kh_now() - t0;
    *out = a;
    return st;
fail:
    compile_nvrtc_out_free(&no);
    optlist_free(&o);
    kh_artifact_free(a);
    return st;
}

json_t *kh_artifact_to_json(const kh_artifact *a)
{
    json_t *j = json_object(), *opts = json_array(), *ks = json_object(), *t = json_object();
    if (!j || !opts || !ks || !t) {
        json_decref(j);
        json_decref(opts);
        json_decref(ks);
        json_decref(t);
        return NULL;
    }
    json_object_set_new(j, "ok", json_boolean(a->ok));
    json_object_set_new(j, "hash", json_string(a->hash));
    json_object_set_new(j, "arch", json_string(a->arch ? a->arch : ""));
    json_object_set_new(j, "sm", json_integer(a->res.sm));
    json_object_set_new(j, "nvrtc", json_string(a->nvrtc_version));
    for (size_t i = 0; i < a->n_options; i++)
        json_array_append_new(opts, json_string(a->options[i]));
    json_object_set_new(j, "options", opts);
    json_object_set_new(j, "cache_hit", json_boolean(a->cache_hit));
    json_object_set_new(j, "pch", json_string(a->pch ? a->pch : "off"));
    json_object_set_new(j, "served_by", json_string(a->served_by ? a->served_by : "in-process"));
    if (a->server_pid)
        json_object_set_new(j, "server_pid", json_integer(a->server_pid));
    json_object_set_new(j, "log", json_stringn(a->log ? a->log : "", a->log ? a->log_len : 0));
    json_object_set_new(j, "cubin_bytes", json_integer((json_int_t)a->cubin_len));
    for (size_t i = 0; i < a->res.n_kernels; i++) {
        const kh_kernel_res *k = &a->res.kernels[i];
        json_t *o = json_pack("{s:i,s:I,s:I,s:I,s:i,s:i,s:i,s:[iii],s:i,s:i,s:I,s:I}",
                              "registers", k->registers, "shared_static",
                              (json_int_t)k->shared_static, "local_bytes",
                              (json_int_t)k->local_bytes, "min_stack", (json_int_t)k->min_stack,
                              "spill_instructions", k->spill_instructions, "max_threads",
                              k->max_threads, "max_threads_per_block",
                              k->max_threads_per_block, "reqntid", k->reqntid[0], k->reqntid[1],
                              k->reqntid[2], "maxreg", k->maxreg, "barriers", k->barriers,
                              "param_bytes", (json_int_t)k->param_bytes, "code_bytes",
                              (json_int_t)k->code_bytes);
        /* cubin symbol names are not guaranteed UTF-8 */
        char *nm = kh_utf8_sanitize(k->name, strlen(k->name), NULL);
        if (o && nm)
            json_object_set_new(ks, nm, o);
        else
            json_decref(o);
        free(nm);
    }
    json_object_set_new(j, "kernels", ks);
    json_object_set_new(t, "check", json_real(a->t.check));
    json_object_set_new(t, "key", json_real(a->t.key));
    json_object_set_new(t, "warm", json_real(a->t.warm));
    json_object_set_new(t, "create", json_real(a->t.create));
    json_object_set_new(t, "compile", json_real(a->t.compile));
    json_object_set_new(t, "extract", json_real(a->t.extract));
    json_object_set_new(t, "parse", json_real(a->t.parse));
    json_object_set_new(t, "total", json_real(a->t.total));
    json_object_set_new(j, "timings", t);
    return j;
}
