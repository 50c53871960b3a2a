/* engine.h: the one process-wide engine object.  main() makes it, hands it to
 * every binding as an upvalue, and frees it after lua_close().  It owns the
 * configuration (store path, CUDA home), the lazily loaded CUDA-free libraries
 * (NVRTC, CUPTI for inspection), the stop request raised by Ctrl-C, and a count
 * of live engine objects that the Lua test runner uses as a leak check.
 *
 * The coordinator never calls the CUDA driver: nothing here loads or calls
 * it.  GPU work happens in child processes (see proc.h, doctor.c).  NVRTC 13
 * itself loads and initialises the driver during a compile in this process
 * (seen on the H200), so nothing may count on a forked child being able to
 * use CUDA: the GPU probe then runs in a fresh process (doctor.h). */
#ifndef KH_ENGINE_H
#define KH_ENGINE_H

#include "gpu/cudalib.h"
#include "core/kh.h"

typedef struct kh_engine kh_engine;

typedef struct kh_engine_config {
    const char *store_path; /* NULL: $KHLUA_STORE, else ".khlua/store" */
    const char *cuda_home;  /* NULL: $CUDA_HOME, else the build's toolkit */
} kh_engine_config;

/* NULL on failure (only when out of memory), with err set. */
kh_engine *kh_engine_new(const kh_engine_config *cfg, kh_err *err);
void kh_engine_free(kh_engine *e);

/* Valid for the engine's lifetime. */
const char *kh_engine_store_path(const kh_engine *e);
const char *kh_engine_cuda_home(const kh_engine *e);
/* Where the store path came from: "--store", "KHLUA_STORE" or "default". */
const char *kh_engine_store_origin(const kh_engine *e);

/* NVRTC, loaded on first use; the failure is remembered and repeated.  The
 * returned table lives as long as the engine.  NULL with err on failure. */
const kh_nvrtc_api *kh_engine_nvrtc(kh_engine *e, kh_err *err);

/* Stop requests.  request_stop is async-signal-safe (a SIGINT handler calls
 * it); long-running engine calls poll stop_requested and return KH_EINTR. */
void kh_engine_request_stop(kh_engine *e);
int kh_engine_stop_requested(const kh_engine *e);
void kh_engine_clear_stop(kh_engine *e);

/* Live-object accounting: every userdata the bindings create that holds an
 * engine resource counts itself in and out. */
void kh_engine_obj_acquire(kh_engine *e);
void kh_engine_obj_release(kh_engine *e);
long kh_engine_live_objects(const kh_engine *e);

#endif
