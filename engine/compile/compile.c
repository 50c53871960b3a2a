/* compile.c: NVRTC compiles, the warm precompiled header, the in-memory
 * artifact cache and the cache key (see compile.h).  Owns the NVRTC program
 * life cycle and the cancel callback; parsing cubins belongs to cubin.c,
 * screening source to srccheck.c, and the store-backed cache and compile
 * servers to the store and worker modules that wrap a kh_compiler. */
#include "compile/compile.h"

#include "compile/srccheck.h"

#include "core/proc.h"

#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <jansson.h>
#include <xxhash.h>

typedef struct cache_entry {
    unsigned char key[16];
    kh_artifact *a;
    size_t bytes;
    unsigned long last_use;
} cache_entry;

struct kh_compiler {
    kh_engine *e;
    char inc_cuda[600], inc_cccl[600];
    cache_entry *cache;
    size_t n_cache, cap_cache, cache_bytes, cache_max;
    unsigned long tick;
    size_t hits, misses, evictions;
    /* include prefixes (XXH3-64 of the text) whose PCH this process holds */
    uint64_t warm[256];
    size_t n_warm;
};

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

typedef struct optlist {
    char *v[96];
    size_t n;
} optlist;

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

typedef struct flow_ctx {
    double deadline_at;
    kh_engine *e;
    volatile int why; /* 0 running, 1 deadline, 2 stop */
} flow_ctx;

/* Called by NVRTC from inside nvrtcCompileProgram; must not call NVRTC. */
static int flow_cb(void *payload, void *unused)
{
    (void)unused;
    flow_ctx *f = payload;
    if (kh_engine_stop_requested(f->e)) {
        f->why = 2;
        return 1;
    }
    if (kh_now() > f->deadline_at) {
        f->why = 1;
        return 1;
    }
    return 0;
}

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

/* What one NVRTC run produced; the same whether it ran here or in a child. */
typedef struct nvrtc_out {
    nvrtcResult r;
    int why;              /* 1 deadline, 2 stop request */
    int pch;              /* nvrtcGetPCHCreateStatus, or -1 when not asked */
    char *log;            /* raw, may be invalid UTF-8 */
    size_t log_len;
    unsigned char *cubin;
    size_t cubin_len;
    double create, compile, extract;
} nvrtc_out;

static void nvrtc_out_free(nvrtc_out *n)
{
    free(n->log);
    free(n->cubin);
    memset(n, 0, sizeof *n);
}

/* The candidate's headers as nvrtcCreateProgram takes them: NUL-terminated
 * texts and their names. */
typedef struct nvrtc_headers {
    int n;
    char **text;
    const char **names;
} nvrtc_headers;

static void nvrtc_headers_free(nvrtc_headers *h)
{
    for (int i = 0; h->text && i < h->n; i++)
        free(h->text[i]);
    free(h->text);
    free(h->names);
    memset(h, 0, sizeof *h);
}

/* Copies of req's headers (validated: at most KH_COMPILE_MAX_HEADERS).  A NUL
 * byte would silently cut a header, so it is refused, as in the source. */
static kh_status nvrtc_headers_make(const kh_compile_req *req, nvrtc_headers *h, kh_err *err)
{
    memset(h, 0, sizeof *h);
    if (!req->n_headers)
        return KH_OK;
    h->text = calloc(req->n_headers, sizeof *h->text);
    h->names = calloc(req->n_headers, sizeof *h->names);
    if (!h->text || !h->names) {
        nvrtc_headers_free(h);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < req->n_headers; i++) {
        const kh_source *s = &req->headers[i];
        if (s->len && memchr(s->text, '\0', s->len)) {
            nvrtc_headers_free(h);
            return kh_err_set(err, KH_EINVAL, "compile: header '%s' contains a NUL byte",
                              s->name);
        }
        if (!(h->text[i] = malloc(s->len + 1))) {
            nvrtc_headers_free(h);
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        }
        if (s->len)
            memcpy(h->text[i], s->text, s->len);
        h->text[i][s->len] = '\0';
        h->names[i] = s->name;
        h->n = (int)i + 1;
    }
    return KH_OK;
}

/* One program through NVRTC, with hdr (NULL: none) as its headers.  KH_OK
 * whenever NVRTC ran (inspect o->r); an error when memory, program creation,
 * or reading back the log or cubin of a compile fails. */
static kh_status nvrtc_run(kh_compiler *c, const kh_nvrtc_api *nv, const char *src,
                           const char *name, const nvrtc_headers *hdr, const optlist *opts,
                           double deadline, int want_pch, nvrtc_out *o, kh_err *err)
{
    memset(o, 0, sizeof *o);
    o->pch = -1;
    nvrtcProgram prog = NULL;
    double tp = kh_now();
    nvrtcResult r = nv->nvrtcCreateProgram(&prog, src, name, hdr ? hdr->n : 0,
                                           hdr && hdr->n ? (const char *const *)hdr->text : NULL,
                                           hdr && hdr->n ? hdr->names : NULL);
    o->create = kh_now() - tp;
    if (r != NVRTC_SUCCESS)
        return kh_err_set(err, r == NVRTC_ERROR_OUT_OF_MEMORY ? KH_ENOMEM : KH_ECOMPILE,
                          "nvrtcCreateProgram: %s", nv->nvrtcGetErrorString(r));
    flow_ctx fc = {.deadline_at = kh_now() + deadline, .e = c->e};
    if ((r = nv->nvrtcSetFlowCallback(prog, flow_cb, &fc)) != NVRTC_SUCCESS) {
        nv->nvrtcDestroyProgram(&prog);
        return kh_err_set(err, KH_ECOMPILE, "nvrtcSetFlowCallback: %s",
                          nv->nvrtcGetErrorString(r));
    }
    tp = kh_now();
    o->r = nv->nvrtcCompileProgram(prog, (int)opts->n, (const char *const *)opts->v);
    o->compile = kh_now() - tp;
    o->why = fc.why;
    tp = kh_now();
    kh_status st = KH_OK;
    size_t lsz = 0;
    nvrtcResult lr = nv->nvrtcGetProgramLogSize(prog, &lsz);
    if (lr == NVRTC_SUCCESS && lsz > 1) {
        if (!(o->log = malloc(lsz)))
            st = kh_err_set(err, KH_ENOMEM, "out of memory reading the compile log");
        else if ((lr = nv->nvrtcGetProgramLog(prog, o->log)) == NVRTC_SUCCESS)
            o->log_len = strnlen(o->log, lsz);
    }
    if (!st && lr != NVRTC_SUCCESS) {
        /* the verdict stands (o->r); the log says why it is missing */
        char msg[160];
        snprintf(msg, sizeof msg, "(the compile log could not be read: %s)\n",
                 nv->nvrtcGetErrorString(lr));
        free(o->log);
        if (!(o->log = kh_strdup(msg)))
            st = kh_err_set(err, KH_ENOMEM, "out of memory reading the compile log");
        o->log_len = o->log ? strlen(o->log) : 0;
    }
    if (want_pch)
        o->pch = (int)nv->nvrtcGetPCHCreateStatus(prog); /* a status is its answer */
    /* no cubin size: a compute_ architecture (PTX only), said by the caller */
    if (!st && o->r == NVRTC_SUCCESS &&
        nv->nvrtcGetCUBINSize(prog, &o->cubin_len) == NVRTC_SUCCESS && o->cubin_len) {
        nvrtcResult cr;
        if (!(o->cubin = malloc(o->cubin_len)))
            st = kh_err_set(err, KH_ENOMEM, "out of memory reading the cubin");
        else if ((cr = nv->nvrtcGetCUBIN(prog, (char *)o->cubin)) != NVRTC_SUCCESS)
            st = kh_err_set(err, KH_ECOMPILE, "nvrtcGetCUBIN: %s", nv->nvrtcGetErrorString(cr));
    }
    if (!st && want_pch && o->pch == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED) {
        /* grow the heap so the next compile with these headers creates it;
         * if either call fails, the next compile goes without a PCH, as now */
        size_t need = 0;
        if (nv->nvrtcGetPCHHeapSizeRequired(prog, &need) == NVRTC_SUCCESS && need &&
            nv->nvrtcSetPCHHeapSize(need + need / 4) != NVRTC_SUCCESS)
            o->pch = NVRTC_ERROR_PCH_CREATE; /* "creation failed", not "grown" */
    }
    /* a failure here can only leak the program: nothing to answer differently */
    (void)nv->nvrtcDestroyProgram(&prog);
    o->extract = kh_now() - tp;
    if (st)
        nvrtc_out_free(o);
    return st;
}

/* ---- isolated compiles: a forked child with a hard deadline ----------------
 * NVRTC polls the flow callback between phases, not inside template
 * instantiation (a measured recursion bomb ran 67 s past a 3 s deadline), so
 * an in-process compile cannot be bounded.  The child inherits this process's
 * precompiled headers (fork copies the NVRTC heap), compiles, writes the
 * result to a pipe and exits; the parent kills it at the deadline. */

typedef struct child_job {
    kh_compiler *c;
    const kh_nvrtc_api *nv;
    const char *src, *name;
    const nvrtc_headers *hdr;
    const optlist *opts;
    double deadline;
    int want_pch;
    const char *tmpdir; /* the child's TMPDIR, or "" */
} child_job;


static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int child_compile(void *arg, int fd)
{
    child_job *j = arg;
    nvrtc_out o;
    kh_err err;
    if (j->tmpdir[0])
        setenv("TMPDIR", j->tmpdir, 1);
    if (nvrtc_run(j->c, j->nv, j->src, j->name, j->hdr, j->opts, j->deadline, j->want_pch, &o,
                  &err))
        return 3;
    int32_t hdr[3] = {(int32_t)o.r, o.why, o.pch};
    uint64_t ln = o.log_len, cn = o.cubin_len;
    double tm[3] = {o.create, o.compile, o.extract};
    int bad = write_all(fd, hdr, sizeof hdr) || write_all(fd, tm, sizeof tm) ||
              write_all(fd, &ln, sizeof ln) || write_all(fd, o.log ? o.log : "", ln) ||
              write_all(fd, &cn, sizeof cn) || write_all(fd, o.cubin ? (void *)o.cubin : "", cn);
    return bad ? 4 : 0;
}

/* NVRTC writes its automatic PCH under $TMPDIR/__nvrtc_auto_pch_<pid>_N/ and
 * removes what it made at exit.  A child must leave nothing behind: a killed
 * one cannot clean up, and one that creates a PCH while this process already
 * has a PCH folder writes into *this process's* folder (it inherited the
 * name), which NVRTC then fails to remove.  So each child gets a TMPDIR of
 * its own, removed after it, and files that appear in this process's folders
 * during a child's compile are removed too. */
static const char AUTO_PCH[] = "__nvrtc_auto_pch_";

static const char *tmp_base(void)
{
    const char *t = getenv("TMPDIR");
    return t && t[0] ? t : "/tmp";
}

/* Call fn(path, ud) for each file in tmp/__nvrtc_auto_pch_<who>* (who "" for
 * every process), then, if rm_dirs, remove those folders. */
static void each_pch_file(const char *tmp, const char *who, int rm_dirs,
                          void (*fn)(const char *path, void *ud), void *ud)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s%s", AUTO_PCH, who);
    DIR *d = opendir(tmp);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)))
            continue;
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", tmp, de->d_name);
        DIR *d2 = opendir(dir);
        if (d2) {
            struct dirent *f;
            while ((f = readdir(d2))) {
                if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, ".."))
                    continue;
                char path[1400];
                snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
                fn(path, ud);
            }
            closedir(d2);
        }
        if (rm_dirs)
            rmdir(dir);
    }
    closedir(d);
}

static void unlink_fn(const char *path, void *ud)
{
    (void)ud;
    unlink(path);
}

typedef struct snapshot {
    char *list; /* "\npath\npath\n" */
    size_t len, cap;
} snapshot;

static void snap_fn(const char *path, void *ud)
{
    snapshot *s = ud;
    size_t n = strlen(path);
    if (s->len + n + 3 > s->cap) {
        size_t cap = (s->cap + n + 3) * 2;
        char *l = realloc(s->list, cap);
        if (!l)
            return;
        s->list = l;
        s->cap = cap;
    }
    if (!s->len)
        s->list[s->len++] = '\n';
    memcpy(s->list + s->len, path, n);
    s->len += n;
    s->list[s->len++] = '\n';
    s->list[s->len] = '\0';
}

static void unlink_new_fn(const char *path, void *ud)
{
    const snapshot *s = ud;
    char key[1410];
    snprintf(key, sizeof key, "\n%s\n", path);
    if (!s->list || !strstr(s->list, key))
        unlink(path);
}

static void remove_child_pch(const char *child_tmp, const snapshot *mine)
{
    char me[32];
    snprintf(me, sizeof me, "%ld_", (long)getpid());
    if (child_tmp[0]) {
        each_pch_file(child_tmp, "", 1, unlink_fn, NULL);
        rmdir(child_tmp);
    }
    each_pch_file(tmp_base(), me, 0, unlink_new_fn, (void *)mine);
}

static int read_bytes(const char **p, const char *end, void *dst, size_t n)
{
    if ((size_t)(end - *p) < n)
        return -1;
    memcpy(dst, *p, n);
    *p += n;
    return 0;
}

static kh_status nvrtc_run_isolated(child_job *j, nvrtc_out *o, kh_err *err)
{
    memset(o, 0, sizeof *o);
    char me[32], child_tmp[600];
    snprintf(me, sizeof me, "%ld_", (long)getpid());
    snapshot mine = {0};
    each_pch_file(tmp_base(), me, 0, snap_fn, &mine);
    snprintf(child_tmp, sizeof child_tmp, "%s/khlua-nvrtc-XXXXXX", tmp_base());
    if (!mkdtemp(child_tmp))
        child_tmp[0] = '\0';
    j->tmpdir = child_tmp;
    kh_child_result res;
    /* a little grace beyond the deadline: the child's own flow callback
     * usually ends it, with a log */
    kh_status st = kh_proc_fork_call(child_compile, j, j->deadline + 0.5, 256u << 20, &res, err);
    remove_child_pch(child_tmp, &mine);
    free(mine.list);
    if (st)
        return st;
    if (res.timed_out || res.signaled) {
        char how[128];
        kh_child_describe(&res, how, sizeof how);
        kh_child_result_free(&res);
        if (res.timed_out) {
            o->pch = -1;
            o->why = 1;
            o->r = NVRTC_ERROR_CANCELLED;
            o->compile = res.seconds;
            return KH_OK;
        }
        return kh_err_set(err, KH_ECHILD, "the compiler process died (%s)", how);
    }
    const char *p = res.out, *end = res.out + res.out_len;
    int32_t hdr[3];
    double tm[3];
    uint64_t ln, cn;
    if (!res.exited || res.exit_code != 0 || read_bytes(&p, end, hdr, sizeof hdr) ||
        read_bytes(&p, end, tm, sizeof tm) || read_bytes(&p, end, &ln, sizeof ln) ||
        ln > (uint64_t)(end - p)) {
        char how[128];
        kh_child_describe(&res, how, sizeof how);
        kh_child_result_free(&res);
        return kh_err_set(err, KH_ECHILD, "the compiler process failed (%s)", how);
    }
    o->r = (nvrtcResult)hdr[0];
    o->why = hdr[1];
    o->pch = hdr[2];
    o->create = tm[0];
    o->compile = tm[1];
    o->extract = tm[2];
    o->log_len = ln;
    if (!(o->log = malloc(ln + 1)))
        goto oom;
    memcpy(o->log, p, ln);
    o->log[ln] = '\0';
    p += ln;
    if (read_bytes(&p, end, &cn, sizeof cn) || cn > (uint64_t)(end - p)) {
        nvrtc_out_free(o);
        kh_child_result_free(&res);
        return kh_err_set(err, KH_ECHILD, "the compiler process sent a truncated result");
    }
    o->cubin_len = cn;
    if (cn) {
        if (!(o->cubin = malloc(cn)))
            goto oom;
        memcpy(o->cubin, p, cn);
    }
    kh_child_result_free(&res);
    return KH_OK;
oom:
    nvrtc_out_free(o);
    kh_child_result_free(&res);
    return kh_err_set(err, KH_ENOMEM, "out of memory");
}

/* Make sure this process holds the PCH for the source's directive prefix, by
 * compiling the prefix alone here (#include/#define/#undef/#pragma lines
 * only: no code of the candidate's runs, no macro is evaluated).  The prefix
 * ends before the first #include of one of the candidate's headers, and it
 * compiles without them: their code is the candidate's, which runs only in
 * the child, and a PCH holding a header of theirs would be served to the next
 * candidate whose header of that name says something else (compile.h).
 * Failure is not an error: the child then compiles cold. */
static int warm_prefix(kh_compiler *c, const kh_nvrtc_api *nv, const char *src, size_t len,
                       const kh_compile_req *req, const char *name, const optlist *opts,
                       double deadline)
{
    int warm = 0;
    char *prefix = kh_srccheck_pch_prefix(src, len, req->headers, req->n_headers);
    if (!prefix)
        return 0;
    uint64_t h = XXH3_64bits(prefix, strlen(prefix));
    for (size_t i = 0; i < c->n_warm; i++)
        if (c->warm[i] == h) {
            free(prefix);
            return 1;
        }
    /* the body is punctuation only: the prefix's #defines may redefine any
     * identifier (even `void`), and nothing of theirs may expand here */
    static const char body[] = ";\n";
    char *prog = malloc(strlen(prefix) + sizeof body);
    if (prog) {
        sprintf(prog, "%s%s", prefix, body);
        nvrtc_out o;
        kh_err err;
        if (!nvrtc_run(c, nv, prog, name, NULL, opts, deadline, 1, &o, &err)) {
            /* created now, or not attempted because a held PCH matched */
            if (o.r == NVRTC_SUCCESS &&
                (o.pch == NVRTC_SUCCESS || o.pch == NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED)) {
                if (c->n_warm == KH_ARRAY_LEN(c->warm))
                    c->n_warm = 0; /* forget; NVRTC's own heap decides anyway */
                c->warm[c->n_warm++] = h;
                warm = 1;
            }
            nvrtc_out_free(&o);
        }
        free(prog);
    }
    free(prefix);
    return warm;
}

/* Drop the PCH options: a child must never create a PCH, because the files
 * would land in this process's PCH folder, which NVRTC then fails to remove. */
static void drop_pch_options(optlist *o)
{
    size_t w = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (!strcmp(o->v[i], "-pch") || !strcmp(o->v[i], "--pch-messages=false") ||
            !strcmp(o->v[i], "-diag-suppress=629,630"))
            free(o->v[i]);
        else
            o->v[w++] = o->v[i];
    }
    o->n = w;
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
    char *src = NULL;
    nvrtc_headers hdr = {0};
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
        double tc = kh_now();
        char *report = NULL;
        st = kh_compile_check(c, req, &report, err);
        a->t.check = kh_now() - tc;
        if (st == KH_ECOMPILE) {
            kh_status s2 = set_log(a, report, report ? strlen(report) : 0, err);
            free(report);
            if (s2) {
                st = s2;
                goto fail;
            }
            a->t.total = kh_now() - t0;
            kh_err_prefix(err, "static check");
            *out = a;
            return KH_ECOMPILE;
        }
        free(report);
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
    if ((st = build_options(c, req, arch, pch, &o, err)))
        goto fail;
    double tk = kh_now();
    if ((st = key_with(c, req, arch, &o, nv, a->key, err)))
        goto fail;
    hexify(a->key, a->hash);
    a->t.key = kh_now() - tk;
    if (!req->no_cache) {
        cache_entry *ce = cache_find(c, a->key);
        if (ce) {
            kh_artifact *hit = artifact_clone(ce->a);
            if (hit) {
                ce->last_use = ++c->tick;
                c->hits++;
                hit->cache_hit = 1;
                hit->t = (kh_compile_timings){.check = a->t.check, .key = a->t.key};
                hit->t.total = kh_now() - t0;
                kh_artifact_free(a);
                optlist_free(&o);
                *out = hit;
                return KH_OK;
            }
        }
        c->misses++;
    }
    a->options = calloc(o.n, sizeof *a->options);
    if (!a->options) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto fail;
    }
    for (; a->n_options < o.n; a->n_options++)
        if (!(a->options[a->n_options] = kh_strdup(o.v[a->n_options]))) {
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            goto fail;
        }

    /* 3. NVRTC.  The source must be NUL-terminated for nvrtcCreateProgram, and
     * an embedded NUL would silently cut it, so it is refused. */
    if (memchr(req->source, '\0', req->source_len)) {
        st = kh_err_set(err, KH_EINVAL, "compile: source contains a NUL byte");
        goto fail;
    }
    if (!(src = malloc(req->source_len + 1))) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(src, req->source, req->source_len);
    src[req->source_len] = '\0';
    if ((st = nvrtc_headers_make(req, &hdr, err)))
        goto fail;
    double deadline = req->deadline_s > 0 ? req->deadline_s : KH_COMPILE_DEFAULT_DEADLINE;
    if (req->isolate) {
        /* the prefix holds only #include lines (allowlisted, unless trusted):
         * it gets the longer of the deadline and two minutes */
        double tw = kh_now();
        int warm = pch && warm_prefix(c, nv, src, req->source_len, req, name, &o,
                                      deadline > 120 ? deadline : 120);
        a->t.warm = kh_now() - tw;
        if (!warm)
            drop_pch_options(&o);
        child_job j = {c, nv, src, name, &hdr, &o, deadline, warm, ""};
        st = nvrtc_run_isolated(&j, &no, err);
    } else {
        st = nvrtc_run(c, nv, src, name, &hdr, &o, deadline, pch, &no, err);
    }
    free(src);
    src = NULL;
    nvrtc_headers_free(&hdr);
    optlist_free(&o);
    if (st)
        goto fail;
    a->t.create = no.create;
    a->t.compile = no.compile;
    a->t.extract = no.extract;
    a->pch = pch_word(no.pch);
    if (no.log_len && (st = set_log(a, no.log, no.log_len, err)))
        goto fail;
    if (no.r == NVRTC_ERROR_CANCELLED || no.why) {
        if (no.why == 2)
            st = kh_err_set(err, KH_EINTR, "compile interrupted");
        else
            st = kh_err_set(err, KH_ETIMEOUT, "compile of %s passed its deadline of %.1f s "
                                              "(stopped after %.2f s)", name, deadline,
                            no.compile);
        goto partial;
    }
    if (no.r != NVRTC_SUCCESS) {
        char line[600];
        first_error(a->log, line, sizeof line);
        st = kh_err_set(err, KH_ECOMPILE, "%s", no.r == NVRTC_ERROR_COMPILATION ? line
                                                   : nv->nvrtcGetErrorString(no.r));
        if (no.r != NVRTC_ERROR_COMPILATION && !a->log_len) {
            char msg[256];
            snprintf(msg, sizeof msg, "nvrtcCompileProgram: %s\n",
                     nv->nvrtcGetErrorString(no.r));
            set_log(a, msg, strlen(msg), NULL);
        }
        goto partial;
    }
    if (!no.cubin) {
        st = kh_err_set(err, KH_ECOMPILE, "no cubin from NVRTC (arch %s must be a real sm_ "
                                          "architecture, not compute_)", arch);
        goto partial;
    }
    a->cubin = no.cubin;
    a->cubin_len = no.cubin_len;
    no.cubin = NULL;
    nvrtc_out_free(&no);

    /* 4. resources, and the manifest's kernels must be symbols of the cubin */
    double tp = kh_now();
    if ((st = kh_cubin_parse(a->cubin, a->cubin_len, &a->res, err))) {
        kh_err_prefix(err, "reading the cubin NVRTC produced");
        goto fail;
    }
    a->t.parse = kh_now() - tp;
    for (size_t i = 0; i < req->n_kernels; i++) {
        if (kh_cubin_find(&a->res, req->kernels[i]))
            continue;
        char have[512] = "";
        for (size_t k = 0; k < a->res.n_kernels; k++) {
            size_t hl = strlen(have);
            snprintf(have + hl, sizeof have - hl, "%s%s", k ? ", " : "", a->res.kernels[k].name);
        }
        st = kh_err_set(err, KH_ECOMPILE, "kernel '%s' is not in the cubin (kernels: %s); "
                        "manifest kernels need extern \"C\" names", req->kernels[i],
                        have[0] ? have : "none");
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
        goto partial;
    }
    a->ok = 1;
    a->t.total = kh_now() - t0;
    if (!req->no_cache)
        cache_put(c, a);
    *out = a;
    return KH_OK;
partial:
    nvrtc_out_free(&no);
    a->t.total = kh_now() - t0;
    *out = a;
    return st;
fail:
    nvrtc_out_free(&no);
    optlist_free(&o);
    free(src);
    nvrtc_headers_free(&hdr);
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
