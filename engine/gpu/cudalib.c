/* cudalib.c: dlopen/dlsym of the CUDA driver, NVRTC, CUPTI and NVML.  Owns
 * only finding and binding the libraries; what is done with them belongs to
 * the modules that use them (compile, gpu worker, timing, doctor). */
#include "gpu/cudalib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define KH_STR2(x) #x
#define KH_STR(x) KH_STR2(x) /* expands cuda.h's _v2 aliases first */

/* Try each candidate path in turn; on success copy the path used. */
static void *open_first(const char *const *paths, size_t n, char *used, size_t used_n,
                        char *why, size_t why_n)
{
    why[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (!paths[i] || !paths[i][0])
            continue;
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(used, used_n, "%s", paths[i]);
            return h;
        }
        if (!why[0]) {
            const char *e = dlerror();
            snprintf(why, why_n, "%s", e ? e : "unknown dlopen error");
        }
    }
    return NULL;
}

static kh_status bind_symbol(void *h, const char *name, void **slot, const char *lib,
                             kh_err *err)
{
    *slot = dlsym(h, name);
    if (!*slot)
        return kh_err_set(err, KH_ENODEV, "%s lacks symbol %s (library too old?)", lib, name);
    return KH_OK;
}

kh_status kh_cuda_load(kh_cuda_api *api, kh_err *err)
{
    memset(api, 0, sizeof *api);
    const char *paths[] = {"libcuda.so.1"};
    char why[512];
    api->handle = open_first(paths, 1, api->path, sizeof api->path, why, sizeof why);
    if (!api->handle)
        return kh_err_set(err, KH_ENODEV,
                          "no CUDA driver on this machine (libcuda.so.1: %s)", why);
#define KH_X(fn)                                                                          \
    if (bind_symbol(api->handle, KH_STR(fn), (void **)&api->fn, "libcuda.so.1", err)) {   \
        kh_lib_close(api->handle);                                                        \
        api->handle = NULL;                                                               \
        return KH_ENODEV;                                                                 \
    }
    KH_CUDA_FUNCS(KH_X)
#undef KH_X
    return KH_OK;
}

void kh_cuda_describe(const kh_cuda_api *api, CUresult r, char *buf, size_t n)
{
    const char *name = NULL, *text = NULL;
    if (api && api->cuGetErrorName)
        api->cuGetErrorName(r, &name);
    if (api && api->cuGetErrorString)
        api->cuGetErrorString(r, &text);
    if (name)
        snprintf(buf, n, "%s: %s", name, text ? text : "");
    else
        snprintf(buf, n, "CUDA error %d", (int)r);
}

kh_status kh_nvrtc_load(kh_nvrtc_api *api, const char *cuda_home, kh_err *err)
{
    memset(api, 0, sizeof *api);
    char p1[512] = "", p2[512] = "";
    if (cuda_home && cuda_home[0]) {
        snprintf(p1, sizeof p1, "%s/lib64/libnvrtc.so.13", cuda_home);
        snprintf(p2, sizeof p2, "%s/lib/libnvrtc.so.13", cuda_home);
    }
    const char *paths[] = {"libnvrtc.so.13", p1, p2};
    char why[512];
    api->handle = open_first(paths, 3, api->path, sizeof api->path, why, sizeof why);
    if (!api->handle)
        return kh_err_set(err, KH_ENODEV,
                          "NVRTC not found (libnvrtc.so.13 on the loader path or under "
                          "CUDA_HOME=%s): %s", cuda_home ? cuda_home : "(unset)", why);
#define KH_X(fn)                                                                          \
    if (bind_symbol(api->handle, KH_STR(fn), (void **)&api->fn, "libnvrtc.so.13", err)) { \
        kh_lib_close(api->handle);                                                        \
        api->handle = NULL;                                                               \
        return KH_ENODEV;                                                                 \
    }
    KH_NVRTC_FUNCS(KH_X)
#undef KH_X
    if (api->nvrtcVersion(&api->major, &api->minor) != NVRTC_SUCCESS) {
        kh_lib_close(api->handle);
        api->handle = NULL;
        return kh_err_set(err, KH_ENODEV, "nvrtcVersion failed in %s", api->path);
    }
    return KH_OK;
}

kh_status kh_cupti_load(kh_cupti_api *api, const char *cuda_home, kh_err *err)
{
    memset(api, 0, sizeof *api);
    char p1[512] = "", p2[512] = "", p3[512] = "";
    if (cuda_home && cuda_home[0]) {
        snprintf(p1, sizeof p1, "%s/lib64/libcupti.so.13", cuda_home);
        snprintf(p2, sizeof p2, "%s/extras/CUPTI/lib64/libcupti.so.13", cuda_home);
        snprintf(p3, sizeof p3, "%s/lib/libcupti.so.13", cuda_home);
    }
    const char *paths[] = {"libcupti.so.13", p1, p2, p3};
    char why[512];
    api->handle = open_first(paths, 4, api->path, sizeof api->path, why, sizeof why);
    if (!api->handle)
        return kh_err_set(err, KH_ENODEV, "CUPTI not found (libcupti.so.13): %s", why);
    if (bind_symbol(api->handle, "cuptiGetVersion", (void **)&api->cuptiGetVersion,
                    "libcupti.so.13", err)) {
        kh_lib_close(api->handle);
        api->handle = NULL;
        return KH_ENODEV;
    }
    if (api->cuptiGetVersion(&api->version) != 0)
        api->version = 0;
    return KH_OK;
}

kh_status kh_nvml_load(kh_nvml_api *api, kh_err *err)
{
    memset(api, 0, sizeof *api);
    const char *paths[] = {"libnvidia-ml.so.1"};
    char why[512];
    api->handle = open_first(paths, 1, api->path, sizeof api->path, why, sizeof why);
    if (!api->handle)
        return kh_err_set(err, KH_ENODEV, "NVML not found (libnvidia-ml.so.1): %s", why);
    if (bind_symbol(api->handle, "nvmlInit_v2", (void **)&api->nvmlInit_v2,
                    "libnvidia-ml.so.1", err) ||
        bind_symbol(api->handle, "nvmlShutdown", (void **)&api->nvmlShutdown,
                    "libnvidia-ml.so.1", err) ||
        bind_symbol(api->handle, "nvmlSystemGetDriverVersion",
                    (void **)&api->nvmlSystemGetDriverVersion, "libnvidia-ml.so.1", err)) {
        kh_lib_close(api->handle);
        api->handle = NULL;
        return KH_ENODEV;
    }
    *(void **)&api->nvmlDeviceGetHandleByUUID = dlsym(api->handle, "nvmlDeviceGetHandleByUUID");
    *(void **)&api->nvmlDeviceGetClockInfo = dlsym(api->handle, "nvmlDeviceGetClockInfo");
    *(void **)&api->nvmlDeviceGetTemperature = dlsym(api->handle, "nvmlDeviceGetTemperature");
    *(void **)&api->nvmlDeviceGetCurrentClocksEventReasons =
        dlsym(api->handle, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!api->nvmlDeviceGetCurrentClocksEventReasons) /* its name before R535 */
        *(void **)&api->nvmlDeviceGetCurrentClocksEventReasons =
            dlsym(api->handle, "nvmlDeviceGetCurrentClocksThrottleReasons");
    return KH_OK;
}

/* CUDA libraries are never unloaded: they keep thread-local state and exit
 * handlers, and dlclose of libstdc++-based libraries is a known source of
 * crashes at exit.  The handle is simply left to the process. */
void kh_lib_close(void *handle)
{
    (void)handle;
}
