/* gpu.h: one GPU as the gpu worker process sees it: the CUDA driver loaded
 * with dlopen, the primary context, one stream, modules loaded from cubins,
 * buffers with guard bands, and the classification of CUDA errors into
 * sticky (the process must exit) and recoverable.  Only worker processes use
 * this; the coordinator never initialises CUDA. */
#ifndef KH_GPU_H
#define KH_GPU_H

#include "gpu/cudalib.h"

#include <jansson.h>

typedef struct kh_gpu kh_gpu;

/* cuInit, retain the primary context of `ordinal`, make it current, create a
 * non-blocking stream.  KH_ENODEV when there is no driver or no such GPU. */
kh_gpu *kh_gpu_open(int ordinal, kh_err *err);
void kh_gpu_close(kh_gpu *g);

const kh_cuda_api *kh_gpu_api(const kh_gpu *g);
CUstream kh_gpu_stream(const kh_gpu *g);
/* {name, uuid, compute_capability, sms, l2_bytes, memory_bytes, ...}; new ref. */
json_t *kh_gpu_info(const kh_gpu *g);
size_t kh_gpu_l2_bytes(const kh_gpu *g);

/* Turn a CUresult into a status and message ("cuLaunchKernel: CUDA_ERROR_...:
 * ...").  Sets *sticky when the context is unusable from now on (illegal
 * address, launch failure, ...: the worker must exit after reporting). */
kh_status kh_gpu_check(kh_gpu *g, CUresult r, const char *what, kh_err *err);
int kh_gpu_is_sticky(CUresult r);
/* Has any call so far hit a sticky error? */
int kh_gpu_poisoned(const kh_gpu *g);

/* ---- buffers with guard bands ----------------------------------------------
 * Each allocation is [guard | bytes | guard]; the guards hold a pattern that
 * kh_gpu_buf_guards_ok checks after a launch, catching writes just outside an
 * output.  The data pointer is 256-byte aligned.
 *
 * With guard > 0 (an evaluation's buffers) and a GPU with virtual memory
 * management, every buffer is an island: its own physical allocation mapped
 * at a secret random place in a large reserved address range, the after-guard
 * ending where the mapping ends, unmapped address space all around.  A kernel
 * learns only the addresses it is given, and reading or writing past its
 * guards, or at a guessed address, faults (CUDA_ERROR_ILLEGAL_ADDRESS) instead
 * of reaching another buffer.  Every buffer is filled when allocated and
 * zeroed before it is freed, so no buffer ever holds what an earlier one (a
 * reference's outputs) left.  guard == 0 (compute-sanitizer runs, which must
 * see a buffer's true end, and the worker's own scratch) uses cuMemAlloc. */
/* The byte every guard band holds. */
#define KH_GPU_GUARD_BYTE 0xA5

typedef struct kh_gpu_buf {
    CUdeviceptr base, ptr;
    size_t bytes, guard;
    CUmemGenericAllocationHandle mh; /* island: the physical allocation (0: cuMemAlloc) */
    CUdeviceptr map;                 /* island: where its mapping starts */
    size_t map_bytes;                /* island: its length (whole granules) */
} kh_gpu_buf;

/* Buffers with guard > 0 are islands (1), or cuMemAlloc'd (0: the GPU has no
 * virtual memory management, or KHLUA_NO_ISLANDS is set). */
int kh_gpu_islands(kh_gpu *g);

kh_status kh_gpu_buf_alloc(kh_gpu *g, size_t bytes, size_t guard, kh_gpu_buf *b, kh_err *err);
void kh_gpu_buf_free(kh_gpu *g, kh_gpu_buf *b);
/* 1 if both guards still hold their pattern; on 0, *where says which. */
int kh_gpu_buf_guards_ok(kh_gpu *g, const kh_gpu_buf *b, const char **where, kh_err *err);

/* ---- L2 flush (FlashInfer-Bench's: a write of 2 x L2, rounded down to MiB) */
kh_status kh_gpu_flush_l2(kh_gpu *g, kh_err *err);

/* ---- clocks (NVML), for the noise guards ------------------------------------ */
typedef struct kh_gpu_clocks {
    int valid;                 /* 0: NVML unavailable */
    unsigned sm_mhz, mem_mhz, temp_c;
    unsigned long long reasons; /* NVML clock-event reasons */
    int throttled;             /* reasons & KH_NVML_THROTTLE_MASK */
} kh_gpu_clocks;

void kh_gpu_read_clocks(kh_gpu *g, kh_gpu_clocks *c);
json_t *kh_gpu_clocks_json(const kh_gpu_clocks *c);
/* Reset persisting L2 lines before a timing set (a candidate could leave
 * data pinned in L2 for the next one). */
kh_status kh_gpu_reset_l2_persisting(kh_gpu *g, kh_err *err);

/* Set every byte of the first n bytes at ptr (async on the stream). */
kh_status kh_gpu_memset8(kh_gpu *g, CUdeviceptr ptr, unsigned char v, size_t n, kh_err *err);
kh_status kh_gpu_sync(kh_gpu *g, kh_err *err);
/* Copy n host bytes to ptr, landed on the device before any later work on
 * the stream: cuMemcpyHtoD from pageable memory may return before its DMA
 * is done, and the legacy stream it runs on is not ordered with this
 * non-blocking one, so the copy is followed by a context sync. */
kh_status kh_gpu_htod(kh_gpu *g, CUdeviceptr ptr, const void *src, size_t n, kh_err *err);

#endif
