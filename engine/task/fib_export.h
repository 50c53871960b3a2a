/* fib_export.h: a khlua CUDA solution as a FlashInfer-Bench Solution that
 * FlashInfer-Bench's own builder and benchmark run unchanged.
 *
 * khlua runs a candidate from its launch manifest (spec.khlua): the engine
 * compiles the kernels with NVRTC and makes the launches.  FlashInfer-Bench
 * (0.1.2, and its main branch at 40e6ca78) needs a host entry point instead:
 * for spec.language "cuda" its TVMFFIBuilder (compile/builders/
 * tvm_ffi_builder.py, TVMFFIBuilder.build) writes the sources into a build
 * folder, compiles every .cu with nvcc and every .cpp/.cc/.cxx/.c with the
 * host compiler through tvm_ffi.cpp.build, loads the module and looks up the
 * function named after "::" in spec.entry_point; the benchmark then calls it
 * in destination-passing style: inputs in definition order (tensors as
 * tvm::ffi::TensorView, scalars as Python numbers), then the outputs it
 * allocated (compile/runnable.py, Runnable.call_destination_passing).
 *
 * The export therefore writes:
 *   - the solution's entry source, unchanged but renamed so the builder does
 *     not compile it as it is (rmsnorm.cu -> rmsnorm.cuh; its other sources
 *     as they are);
 *   - kernels.cu, generated: that source compiled on its own, as khlua
 *     compiles it (its macros and names meet nothing else), plus one
 *     extern "C" accessor per kernel giving its address, and the cubin
 *     khlua compiled from it, which binding.cu launches instead on a GPU of
 *     its architecture (opts.image; fib_export_image.c);
 *   - binding.cu, generated from the manifest: its exported function `run`
 *     checks every tensor (CUDA device, rank,
 *     dtype, contiguity, each dimension against the axes), takes the var
 *     axes from the tensors' shapes, computes each launch's grid, block and
 *     dynamic shared memory and each workspace size with the manifest's
 *     expressions (kh_expr_to_cpp: the same checked int64 arithmetic),
 *     binds the arguments in the manifest's order (each in an 8-byte slot,
 *     as khlua's own launcher does), and launches every kernel with
 *     cudaLaunchKernel on the stream TVM-FFI gives (TVMFFIEnvGetStream),
 *     checking each launch's error.
 * spec.entry_point is "binding.cu::run", spec.binding "tvm-ffi",
 * destination_passing_style true; the manifest is kept for reading as
 * spec.khlua_manifest (FlashInfer-Bench's pydantic models ignore unknown
 * keys; under spec.khlua khlua's task check would take the export for one of
 * its own candidates and refuse it). */
#ifndef KH_FIB_EXPORT_H
#define KH_FIB_EXPORT_H

#include "core/kh.h"
#include "task/task.h"

#include <jansson.h>

typedef struct kh_fib_export_opts {
    const char *name; /* the exported Solution's name; NULL: the solution's own */
    /* The cubin khlua compiled from the solution's sources (what it timed),
     * embedded in kernels.cu and launched by binding.cu on a GPU of
     * image_arch (fib_export_image.c says why); NULL: only the kernels
     * nvcc builds from the source (--source-only). */
    const unsigned char *image;
    size_t image_len;
    const char *image_arch;  /* "sm_90a": required with image */
    const char *image_about; /* "NVRTC 13.0, compile key ...": for the reader */
} kh_fib_export_opts;

typedef struct kh_fib_export {
    json_t *solution;  /* the FlashInfer-Bench Solution, sources embedded */
    char *entry_file;  /* the generated file ("binding.cu") */
    char *kernel_file; /* where the solution's entry source went ("rmsnorm.cuh") */
    char *wrapper_file; /* the generated file that compiles it ("kernels.cu") */
} kh_fib_export;

/* Export sol (a CUDA-backend candidate whose definition, sol->def, is
 * loaded).  Refused with a message naming the reason: a host or cuda_so
 * backend, a plain Solution without a manifest, value-returning style, a
 * manifest expression that reads tensor data or names an axis no tensor
 * carries, a scalar dtype that cannot be passed by value, another source
 * whose name the builder would compile on its own.  Free with
 * kh_fib_export_free. */
kh_status kh_fib_export_solution(const kh_task_solution *sol, const kh_fib_export_opts *o,
                                 kh_fib_export *out, kh_err *err);
void kh_fib_export_free(kh_fib_export *x);

/* Write x into dir (created if missing): <name>.json, the Solution
 * FlashInfer-Bench loads, and each source beside it under its path (for
 * reading and compiling by hand; FlashInfer-Bench uses the embedded ones).
 * The Solution's path goes into path (n bytes). */
kh_status kh_fib_export_write(const kh_fib_export *x, const char *dir, char *path, size_t n,
                              kh_err *err);

#endif
