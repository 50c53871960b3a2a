/* compile_nvrtc.c: one program through NVRTC (compile_int.h), the same
 * whether it runs in this process or in an isolated child.  Owns the NVRTC
 * program life cycle, the flow callback that cancels at the deadline or on
 * a stop request, and the candidate's headers as nvrtcCreateProgram takes
 * them.  Options, the key, the cache and what the result means are
 * compile.c's; forking the child is compile_isolate.c's. */
#include "compile/compile_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void compile_nvrtc_out_free(nvrtc_out *n)
{
    free(n->log);
    free(n->cubin);
    memset(n, 0, sizeof *n);
}


void compile_nvrtc_headers_free(nvrtc_headers *h)
{
    for (int i = 0; h->text && i < h->n; i++)
        free(h->text[i]);
    free(h->text);
    free(h->names);
    memset(h, 0, sizeof *h);
}

/* Copies of req's headers (validated: at most KH_COMPILE_MAX_HEADERS).  A NUL
 * byte would silently cut a header, so it is refused, as in the source. */
kh_status compile_nvrtc_headers_make(const kh_compile_req *req, nvrtc_headers *h,
                                     kh_err *err)
{
    memset(h, 0, sizeof *h);
    if (!req->n_headers)
        return KH_OK;
    h->text = calloc(req->n_headers, sizeof *h->text);
    h->names = calloc(req->n_headers, sizeof *h->names);
    if (!h->text || !h->names) {
        compile_nvrtc_headers_free(h);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < req->n_headers; i++) {
        const kh_source *s = &req->headers[i];
        if (s->len && memchr(s->text, '\0', s->len)) {
            compile_nvrtc_headers_free(h);
            return kh_err_set(err, KH_EINVAL, "compile: header '%s' contains a NUL byte",
                              s->name);
        }
        if (!(h->text[i] = malloc(s->len + 1))) {
            compile_nvrtc_headers_free(h);
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
kh_status compile_nvrtc_run(kh_compiler *c, const kh_nvrtc_api *nv, const char *src,
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
        compile_nvrtc_out_free(o);
    return st;
}
