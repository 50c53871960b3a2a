/* fib_export_int.h: what fib_export.c takes from fib_export_image.c, the
 * kernels an exported solution launches (khlua's cubin, or nvcc's build),
 * and from fib_export_support.c, the part of binding.cu that does not
 * depend on the manifest. */
#ifndef KH_FIB_EXPORT_INT_H
#define KH_FIB_EXPORT_INT_H

#include "task/fib_export.h"

/* distinct kernels per manifest (manifests are checked to hold fewer) */
#define KH_FIB_MAX_KERNELS 64

/* The GPUs a cubin of arch runs on: compute capability major.minor, exact
 * (sm_XYa) or that minor and later ones (sm_XY, sm_XYf).  KH_EINVAL naming
 * arch otherwise. */
kh_status kh_fib_image_arch(const char *arch, int *major, int *minor, int *exact, kh_err *err);

/* C++ for kernels.cu: o->image as a byte array and its accessor
 * khlua_export_image.  NULL when out of memory. */
char *kh_fib_image_array(const kh_fib_export_opts *o);

/* C++ for binding.cu (inside its namespace, after check_cuda and kSolution):
 * the kernel table and kernel_func(device, k), k as kh_fib_kernel_index
 * gives it.  NULL when out of memory. */
char *kh_fib_kernel_table(const kh_task_manifest *m, const kh_fib_export_opts *o);

/* The kernels m launches fit the table (at most KH_FIB_MAX_KERNELS distinct
 * ones), and o->image, when there is one, is a cubin of a known
 * architecture; an error naming the solution sname otherwise. */
kh_status kh_fib_kernels_check(const kh_task_manifest *m, const kh_fib_export_opts *o,
                               const char *sname, kh_err *err);

/* The table index of launch's kernel. */
size_t kh_fib_kernel_index(const kh_task_manifest *m, size_t launch);

/* C++ for binding.cu (inside its namespace, after kSolution): the value()
 * helper, the tensor, device and launch checks, the device guard and the
 * launcher.  Static text. */
const char *kh_fib_support(void);

/* C++ for binding.cu after kh_fib_support's, when the manifest has
 * workspace buffers: one workspace block per device, grown when a call
 * needs more and kept for the next calls.  Static text. */
const char *kh_fib_support_workspace(void);

#endif
