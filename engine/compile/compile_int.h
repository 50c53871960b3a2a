/* compile_int.h: what the compile*.c units behind compile.h share and nobody
 * else sees: the compiler (struct kh_compiler), an NVRTC option list, and one
 * NVRTC run's inputs and outputs.  Which unit owns what: compile.c the public
 * API, options, key, checks, cache and the build's stages; compile_nvrtc.c
 * one program through NVRTC; compile_isolate.c the forked child with a hard
 * deadline and the warm PCH made for it.  Calls point one way: compile.c ->
 * compile_isolate.c -> compile_nvrtc.c (no call cycle, docs/design.md). */
#ifndef KH_COMPILE_INT_H
#define KH_COMPILE_INT_H

#include "compile/compile.h"

#include <stddef.h>
#include <stdint.h>

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

typedef struct optlist {
    char *v[96];
    size_t n;
} optlist;

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

/* The candidate's headers as nvrtcCreateProgram takes them: NUL-terminated
 * texts and their names. */
typedef struct nvrtc_headers {
    int n;
    char **text;
    const char **names;
} nvrtc_headers;

/* ---- compile_nvrtc.c ------------------------------------------------------ */
void compile_nvrtc_out_free(nvrtc_out *n);
void compile_nvrtc_headers_free(nvrtc_headers *h);
/* Copies of req's headers; KH_EINVAL for a header with a NUL byte. */
kh_status compile_nvrtc_headers_make(const kh_compile_req *req, nvrtc_headers *h,
                                     kh_err *err);
/* One program through NVRTC in this process, hdr (NULL: none) its headers,
 * cancelled at deadline seconds from now.  KH_OK whenever NVRTC ran (inspect
 * o->r); an error when memory, program creation, or reading back the log or
 * cubin fails.  The caller frees o with compile_nvrtc_out_free. */
kh_status compile_nvrtc_run(kh_compiler *c, const kh_nvrtc_api *nv, const char *src,
                            const char *name, const nvrtc_headers *hdr, const optlist *opts,
                            double deadline, int want_pch, nvrtc_out *o, kh_err *err);

/* ---- compile_isolate.c ---------------------------------------------------- */
/* compile_nvrtc_run in a forked child killed just past the deadline (then
 * KH_OK with o->r NVRTC_ERROR_CANCELLED); KH_ECHILD when the child dies or
 * sends a bad result. */
kh_status compile_nvrtc_isolated(kh_compiler *c, const kh_nvrtc_api *nv, const char *src,
                                 const char *name, const nvrtc_headers *headers,
                                 const optlist *opts, double deadline, int want_pch,
                                 nvrtc_out *o, kh_err *err);
/* 1 when this process holds the PCH for src's #include prefix (made now if
 * need be); 0 otherwise, and the child compiles cold. */
int compile_warm_prefix(kh_compiler *c, const kh_nvrtc_api *nv, const char *src, size_t len,
                        const kh_compile_req *req, const char *name, const optlist *opts,
                        double deadline);
/* Take -pch and its quieting options out of o (a child must never create a PCH). */
void compile_drop_pch_options(optlist *o);

#endif
