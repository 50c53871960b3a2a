/* role_compile.c: the "compile" worker role, a compile server.  A long-lived
 * CUDA-free process holding one kh_compiler, so NVRTC's precompiled headers
 * and the in-memory cache stay warm from job to job.  Methods:
 *   build  (payload: the source, then the headers' texts: kh_compile_req_payload)
 *          params: kh_compile_req_to_json's fields; the
 *          reply is {status, message, artifact} with the cubin as payload.
 *          A compile error or a soft deadline is a verdict (ok reply with
 *          status "ECOMPILE" / "ETIMEOUT" and the log), not a worker error.
 *   stats  the compiler's cache statistics.
 * Compiles run in this process: the coordinator's supervisor is the hard
 * deadline (it kills this process), so no fork per job is needed. */
#include "compile/compile_service.h"
#include "worker/worker.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kh_compiler *C(kh_worker *w) { return kh_worker_state(w); }

static kh_status compile_init(kh_worker *w, kh_err *err)
{
    kh_compiler *c = kh_compile_new(kh_worker_engine(w), err);
    if (!c)
        return err->code;
    /* load NVRTC now: a server that cannot compile says so in its hello */
    if (!kh_engine_nvrtc(kh_worker_engine(w), err)) {
        kh_compile_free(c);
        return KH_ENODEV;
    }
    kh_worker_set_state(w, c);
    return KH_OK;
}

static void compile_fini(kh_worker *w)
{
    kh_compile_free(C(w));
    kh_worker_set_state(w, NULL);
}

static kh_status m_build(kh_worker *w, const json_t *params, const unsigned char *payload,
                         size_t n, json_t **result, unsigned char **out, size_t *out_n,
                         kh_err *err)
{
    kh_compile_req req;
    void *scratch = NULL;
    kh_status st = kh_compile_req_from_json(params, payload, n, &req, &scratch, err);
    if (st) {
        free(scratch);
        return st;
    }
    req.isolate = 0; /* this process is the isolation */
    kh_artifact *a = NULL;
    kh_err cerr;
    kh_err_clear(&cerr);
    st = kh_compile_build(C(w), &req, &a, &cerr);
    free(scratch);
    if (!a) { /* EINVAL, ENODEV, ENOMEM: the request could not run */
        *err = cerr;
        return st;
    }
    json_t *aj = kh_artifact_to_json(a);
    *result = aj ? json_pack("{s:s, s:s, s:o}", "status", st ? kh_status_name(st) : "OK",
                             "message", st ? cerr.msg : "", "artifact", aj)
                 : NULL;
    if (!*result) {
        kh_artifact_free(a);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    if (a->cubin_len) {
        *out = a->cubin; /* handed over: the worker frees the payload */
        *out_n = a->cubin_len;
        a->cubin = NULL;
        a->cubin_len = 0;
    }
    kh_artifact_free(a);
    return KH_OK;
}

static kh_status m_stats(kh_worker *w, const json_t *params, const unsigned char *payload,
                         size_t n, json_t **result, unsigned char **out, size_t *out_n,
                         kh_err *err)
{
    (void)params; (void)payload; (void)n; (void)out; (void)out_n;
    kh_compile_cache_stats s;
    kh_compile_cache_stats_get(C(w), &s);
    *result = json_pack("{s:i, s:I, s:I, s:I, s:I, s:I}", "pid", (int)getpid(), "entries",
                        (json_int_t)s.entries, "bytes", (json_int_t)s.bytes, "hits",
                        (json_int_t)s.hits, "misses", (json_int_t)s.misses, "evictions",
                        (json_int_t)s.evictions);
    return *result ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
}

static const kh_worker_method_entry compile_methods[] = {
    {"build", m_build}, {"stats", m_stats}, {NULL, NULL},
};

const kh_worker_role kh_role_compile = {
    .name = "compile",
    .summary = "compile server: NVRTC with a warm precompiled header (CUDA-free)",
    .methods = compile_methods,
    .init = compile_init,
    .fini = compile_fini,
};
