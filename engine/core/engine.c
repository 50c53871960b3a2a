/* engine.c: the process-wide engine object (see engine.h).  Owns configuration
 * and lazily loaded libraries; every subsystem that needs state beyond one
 * call hangs it here rather than in a global. */
#include "core/engine.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct kh_engine {
    char *store_path;
    const char *store_origin;
    char *cuda_home;

    int nvrtc_tried;
    kh_nvrtc_api nvrtc;
    kh_err nvrtc_err;

    volatile sig_atomic_t stop;
    long live_objects;
};

kh_engine *kh_engine_new(const kh_engine_config *cfg, kh_err *err)
{
    kh_engine *e = calloc(1, sizeof *e);
    if (!e) {
        kh_err_set(err, KH_ENOMEM, "out of memory creating the engine");
        return NULL;
    }
    const char *store = cfg ? cfg->store_path : NULL;
    e->store_origin = "--store";
    if (!store || !store[0]) {
        store = getenv("KHLUA_STORE");
        e->store_origin = "KHLUA_STORE";
    }
    if (!store || !store[0]) {
        store = ".khlua/store";
        e->store_origin = "default";
    }
    const char *cuda = cfg ? cfg->cuda_home : NULL;
    if (!cuda || !cuda[0])
        cuda = getenv("CUDA_HOME");
    if (!cuda || !cuda[0])
        cuda = KH_DEFAULT_CUDA_HOME;
    e->store_path = kh_strdup(store);
    e->cuda_home = kh_strdup(cuda);
    if (!e->store_path || !e->cuda_home) {
        kh_engine_free(e);
        kh_err_set(err, KH_ENOMEM, "out of memory creating the engine");
        return NULL;
    }
    return e;
}

void kh_engine_free(kh_engine *e)
{
    if (!e)
        return;
    kh_lib_close(e->nvrtc.handle);
    free(e->store_path);
    free(e->cuda_home);
    free(e);
}

const char *kh_engine_store_path(const kh_engine *e) { return e->store_path; }
const char *kh_engine_store_origin(const kh_engine *e) { return e->store_origin; }
const char *kh_engine_cuda_home(const kh_engine *e) { return e->cuda_home; }

const kh_nvrtc_api *kh_engine_nvrtc(kh_engine *e, kh_err *err)
{
    if (!e->nvrtc_tried) {
        e->nvrtc_tried = 1;
        kh_err_clear(&e->nvrtc_err);
        kh_nvrtc_load(&e->nvrtc, e->cuda_home, &e->nvrtc_err);
    }
    if (!e->nvrtc.handle) {
        if (err)
            *err = e->nvrtc_err;
        return NULL;
    }
    return &e->nvrtc;
}

void kh_engine_request_stop(kh_engine *e) { e->stop = 1; }
int kh_engine_stop_requested(const kh_engine *e) { return e->stop != 0; }
void kh_engine_clear_stop(kh_engine *e) { e->stop = 0; }

void kh_engine_obj_acquire(kh_engine *e) { e->live_objects++; }
void kh_engine_obj_release(kh_engine *e) { e->live_objects--; }
long kh_engine_live_objects(const kh_engine *e) { return e->live_objects; }
