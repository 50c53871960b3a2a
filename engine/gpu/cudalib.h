/* cudalib.h: the CUDA libraries khlua uses, loaded at run time with dlopen so
 * that one binary starts on a machine with no GPU (or no toolkit) and says so
 * when a GPU feature is asked for.  Types come from the toolkit's headers;
 * every entry point is a function pointer filled by the loader.
 *
 * Lists are X-macros: a module that needs another driver entry point adds it
 * to the list, and the loader and the struct follow. */
#ifndef KH_CUDALIB_H
#define KH_CUDALIB_H

#include "core/kh.h"

#include <cuda.h>
#include <nvrtc.h>

/* ---- CUDA driver (libcuda.so.1) ------------------------------------------ */
#define KH_CUDA_FUNCS(X)                                                                  \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                 \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)         \
    X(cuDeviceTotalMem) X(cuDeviceGetUuid)                                                \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)           \
    X(cuCtxSynchronize) X(cuCtxGetLimit) X(cuCtxResetPersistingL2Cache)                   \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery)          \
    X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal)     \
    X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuFuncGetName)                          \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                                        \
    X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoD) X(cuMemcpyDtoH)            \
    X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD32Async)            \
    X(cuMemsetD8) X(cuMemGetAllocationGranularity) X(cuMemAddressReserve)                 \
    X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap)          \
    X(cuMemSetAccess)                                                                     \
    X(cuLaunchKernel) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                 \
    X(cuEventSynchronize) X(cuEventElapsedTime)

typedef struct kh_cuda_api {
#define KH_X(fn) __typeof__(fn) *fn;
    KH_CUDA_FUNCS(KH_X)
#undef KH_X
    void *handle;
    char path[256];
} kh_cuda_api;

/* Fill api from libcuda.so.1.  KH_ENODEV with the loader's reason when the
 * driver is absent; does not call cuInit. */
kh_status kh_cuda_load(kh_cuda_api *api, kh_err *err);
/* "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered". */
void kh_cuda_describe(const kh_cuda_api *api, CUresult r, char *buf, size_t n);

/* ---- NVRTC (libnvrtc.so.13) ---------------------------------------------- */
#define KH_NVRTC_FUNCS(X)                                                                 \
    X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcGetNumSupportedArchs)                   \
    X(nvrtcGetSupportedArchs) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)                \
    X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)                \
    X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)               \
    X(nvrtcSetFlowCallback) X(nvrtcGetPCHCreateStatus) X(nvrtcGetPCHHeapSize)             \
    X(nvrtcSetPCHHeapSize) X(nvrtcGetPCHHeapSizeRequired)

typedef struct kh_nvrtc_api {
#define KH_X(fn) __typeof__(fn) *fn;
    KH_NVRTC_FUNCS(KH_X)
#undef KH_X
    void *handle;
    char path[512];
    int major, minor;
} kh_nvrtc_api;

/* Fill api from libnvrtc.so.13: the loader's search path first, then
 * cuda_home/lib64 and cuda_home/lib.  KH_ENODEV when absent. */
kh_status kh_nvrtc_load(kh_nvrtc_api *api, const char *cuda_home, kh_err *err);

/* ---- CUPTI (libcupti.so.13) ---------------------------------------------- */
typedef struct kh_cupti_api {
    int (*cuptiGetVersion)(uint32_t *version);
    void *handle;
    char path[512];
    uint32_t version;
} kh_cupti_api;

/* Fill api from libcupti.so.13 (search path, cuda_home/lib64,
 * cuda_home/extras/CUPTI/lib64).  KH_ENODEV when absent. */
kh_status kh_cupti_load(kh_cupti_api *api, const char *cuda_home, kh_err *err);

/* ---- NVML (libnvidia-ml.so.1), declared here: the toolkit ships no nvml.h */
typedef struct kh_nvml_api {
    int (*nvmlInit_v2)(void);
    int (*nvmlShutdown)(void);
    int (*nvmlSystemGetDriverVersion)(char *version, unsigned int length);
    /* For the noise guards; NULL when this NVML lacks them. */
    int (*nvmlDeviceGetHandleByUUID)(const char *uuid, void **device);
    int (*nvmlDeviceGetClockInfo)(void *device, int type, unsigned int *mhz);
    int (*nvmlDeviceGetTemperature)(void *device, int sensor, unsigned int *celsius);
    int (*nvmlDeviceGetCurrentClocksEventReasons)(void *device, unsigned long long *reasons);
    void *handle;
    char path[256];
} kh_nvml_api;

/* Clock-event reasons that mean the GPU slowed itself down (NVML's
 * SwPowerCap, HwSlowdown, SwThermalSlowdown, HwThermalSlowdown,
 * HwPowerBrakeSlowdown). */
#define KH_NVML_THROTTLE_MASK 0xECull

kh_status kh_nvml_load(kh_nvml_api *api, kh_err *err);

/* Close a loaded library (any of the above; handle may be NULL). */
void kh_lib_close(void *handle);

#endif
