/* gpu_check.h: the default comparison (eval/check.h) made on the device.
 * A kernel scans both outputs where they lie, chunk by chunk, into the
 * parts kh_check_compare makes on the host (kh_check_part, the same chunks,
 * each scanned in element order, the sums of norm_error too), and the host
 * merges them with kh_check_from_parts: the verdict, its figures and its
 * reason are the same bits as kh_check_compare's on copies of the two
 * tensors (tests/c/test_gpu_check.c), and what crosses PCIe is one part of
 * 144 bytes per 2^16 elements.
 *
 * The module is compiled with NVRTC for the device's architecture once per
 * kh_gpu_cmp, without FMA contraction (the host's arithmetic rounds every
 * operation). */
#ifndef KH_GPU_CHECK_H
#define KH_GPU_CHECK_H

#include "core/engine.h"
#include "eval/check.h"
#include "gpu/cudalib.h"

typedef struct kh_gpu_cmp kh_gpu_cmp;

/* The kernel's CUDA source (kh_cmp_parts), for a test to compile. */
const char *kh_gpu_cmp_source(void);

/* Compile and load the comparison for arch ("sm_90") in the current
 * context; its launches and copies go to stream s (0: the default). */
kh_gpu_cmp *kh_gpu_cmp_new(kh_engine *e, const kh_cuda_api *cu, const char *arch, CUstream s,
                           kh_err *err);
void kh_gpu_cmp_free(kh_gpu_cmp *c); /* only while its context is usable */

/* The parts of numel elements of dtype t at out against ref (device
 * pointers), kh_check_nchunks(numel) of them, into parts (host memory).
 * Waits for the stream. */
kh_status kh_gpu_cmp_parts(kh_gpu_cmp *c, kh_dtype t, CUdeviceptr out, CUdeviceptr ref,
                           uint64_t numel, const kh_check_opts *o, kh_check_part *parts,
                           kh_err *err);
/* The kernel writes KH_GPU_CMP_GROUPS parts per chunk (each from a block
 * of its own, a quarter of the chunk's lanes); kh_gpu_cmp_fold makes the
 * chunk's part of them on the host. */
#define KH_GPU_CMP_GROUPS 4
static inline uint64_t kh_gpu_cmp_slots(uint64_t numel)
{
    return kh_check_nchunks(numel) * KH_GPU_CMP_GROUPS;
}
/* The groups' parts into device memory at dparts (room for
 * kh_gpu_cmp_slots(numel) parts), in stream order: nothing waits (the
 * caller syncs, copies them back and folds them with kh_gpu_cmp_fold). */
kh_status kh_gpu_cmp_parts_async(kh_gpu_cmp *c, kh_dtype t, CUdeviceptr out, CUdeviceptr ref,
                                 uint64_t numel, const kh_check_opts *o, CUdeviceptr dparts,
                                 kh_err *err);
/* The groups' parts of nchunks chunks (kh_gpu_cmp_parts_async's, copied
 * back) into their nchunks parts, the bits kh_check_parts gives. */
void kh_gpu_cmp_fold(const kh_check_part *groups, uint64_t nchunks, kh_check_part *parts);
/* The verdict itself: kh_gpu_cmp_parts, then kh_check_from_parts. */
kh_status kh_gpu_cmp_run(kh_gpu_cmp *c, kh_dtype t, CUdeviceptr out, CUdeviceptr ref,
                         uint64_t numel, const kh_check_opts *o, kh_check_result *r,
                         kh_err *err);

/* Whether bytes bytes at a and b (device pointers, 8-byte aligned) are the
 * same: the determinism check of two calls' outputs.  Waits for the stream. */
kh_status kh_gpu_cmp_same(kh_gpu_cmp *c, CUdeviceptr a, CUdeviceptr b, size_t bytes, int *same,
                          kh_err *err);
/* The first of numel elements of dtype t at p whose code (dtype.h) is code,
 * or -1: elements an output's poison left unwritten.  Waits for the
 * stream. */
kh_status kh_gpu_cmp_find(kh_gpu_cmp *c, kh_dtype t, CUdeviceptr p, uint64_t numel,
                          uint64_t code, int64_t *first, kh_err *err);

#endif
