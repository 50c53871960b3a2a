/* cubin.h: per-kernel resources read from a CUDA cubin (an ELF64 image)
 * without a GPU and without running a tool: the kernel symbols, registers,
 * static shared memory, per-thread local memory (stack frame), launch bounds,
 * and the spill instructions ptxas recorded.
 *
 * Sources inside the cubin (codes verified against nvcc -Xptxas -v, CUDA 13):
 *   kernels        STT_FUNC symbols with the CUDA entry bit (st_other 0x10)
 *   registers      .nv.info, EIATTR_REGCOUNT (0x2f) {symbol, count}
 *   local memory   .nv.info, EIATTR_FRAME_SIZE (0x11) {symbol, bytes}
 *   min stack      .nv.info, EIATTR_MIN_STACK_SIZE (0x12) {symbol, bytes}
 *   launch bounds  .nv.info.<k>, EIATTR_MAX_THREADS (0x05), EIATTR_REQNTID (0x10)
 *   max registers  .nv.info.<k>, EIATTR_MAXREG_COUNT (0x1b) (0xff: no limit)
 *   barriers       .nv.info.<k>, attribute 0x4c (present when bar.sync is used)
 *   spills         .nv.info.<k>, attribute 0x55: one entry per local-memory
 *                  spill instruction; ptxas's spill *byte* counts are not in
 *                  the cubin, so we report the instruction count
 *   shared memory  size of .nv.shared.<k>; on sm_90+ that section includes
 *                  the 1 KiB system-reserved region (.nv.shared.reserved.0),
 *                  which we subtract so the number matches ptxas's "smem". */
#ifndef KH_CUBIN_H
#define KH_CUBIN_H

#include "core/kh.h"

typedef struct kh_kernel_res {
    char *name;             /* the symbol as in the cubin (extern "C": plain name) */
    int registers;          /* per thread; -1 when the cubin does not say */
    long shared_static;     /* bytes of static __shared__ per block */
    long local_bytes;       /* per-thread stack frame (local arrays + spills) */
    long min_stack;         /* per-thread stack including callees */
    int max_threads;        /* __launch_bounds__ max threads (x*y*z); 0: none */
    int max_threads_per_block; /* what a launch may use: min(1024, the launch
                                  bound, the register file's limit: 64 Ki
                                  registers per block, allocated per warp in
                                  units of 256); 0 when registers are unknown.
                                  Meant to equal cuFuncGetAttribute(
                                  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) */
    int reqntid[3];         /* required block size (.reqntid); zeros: none */
    int maxreg;             /* register cap from __maxnreg__/launch bounds; 0: none */
    int barriers;           /* named barriers used (0 when absent) */
    int spill_instructions; /* local-memory spill instructions; 0 when none */
    long param_bytes;       /* kernel parameter bank (.nv.constant0.<k>) size */
    long code_bytes;        /* .text.<k> size */
} kh_kernel_res;

typedef struct kh_cubin_info {
    int sm;                  /* e.g. 90 for sm_90/sm_90a, from the ELF header */
    int reserved_smem;       /* bytes subtracted from each shared section */
    kh_kernel_res *kernels;  /* owned; in symbol-table order */
    size_t n_kernels;
} kh_cubin_info;

/* Parse a cubin.  KH_EPARSE with a message on anything that is not a
 * well-formed CUDA ELF64 (bounds are checked everywhere: the input may be
 * hostile or truncated).  On success *out owns its memory: free it with
 * kh_cubin_info_free.  On failure *out is left empty. */
kh_status kh_cubin_parse(const void *data, size_t len, kh_cubin_info *out, kh_err *err);
void kh_cubin_info_free(kh_cubin_info *info);

/* The kernel named name, or NULL.  Valid while info lives. */
const kh_kernel_res *kh_cubin_find(const kh_cubin_info *info, const char *name);

#endif
