/* rng.h: khlua's seeded input generator.  Counter-based (Philox4x32-10), so
 * element i of a tensor depends only on (seed, stream, i): the host and the
 * GPU produce the same bits, in any order, in parallel, and a tensor can be
 * regenerated from its seed alone.  The distributions are FlashInfer-Bench's
 * (fib-harness.md, "Inputs (gen_inputs / _rand_tensor)"); the arithmetic is
 * in rng_core.h, shared verbatim with the device kernel.
 *
 * Seeds: one 64-bit seed per (evaluation, trial) (kh_rng_derive_seed); the
 * stream is the input's position in the definition's input list, so two
 * inputs of one workload never share numbers.  Callers record the seed with
 * every verdict that used it.  FlashInfer-Bench sets no seed at all: khlua's
 * inputs follow its distributions, not its values.
 *
 * Host speed: about 120 ns per element per core (the double-precision
 * Box-Muller dominates); large inputs belong on the device. */
#ifndef KH_RNG_H
#define KH_RNG_H

#include "core/engine.h"
#include "task/tensor.h"

/* One Philox4x32-10 block: out = philox(counter, key).  For tests and for
 * callers that need raw words. */
void kh_rng_philox(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* The standard normal drawn for element idx (before rounding to a dtype). */
double kh_rng_normal_at(uint64_t seed, uint32_t stream, uint64_t idx);

/* The code (bit pattern, zero-extended) of element idx of a random tensor of
 * type t: floats randn (through float32), fp8/fp4 randn clamped to [-2, 2],
 * int8 in [-128, 128), int16/32/64 in [-1024, 1024), bool 0/1. */
uint64_t kh_rng_code_at(kh_dtype t, uint64_t seed, uint32_t stream, uint64_t idx);

/* Fill t (every element) from (seed, stream).  A random scalar (a workload
 * input with shape null) is a 0-D tensor: one draw.  Large tensors are split
 * over up to one thread per online CPU (32 at most; the bits do not depend on
 * the split).  Polls the engine's stop request every million elements per
 * thread when e is non-NULL (KH_EINTR). */
kh_status kh_rng_fill(kh_engine *e, kh_tensor *t, uint64_t seed, uint32_t stream,
                      kh_err *err);

/* The DSA top-k indexer's random k cache, as FlashInfer-Bench makes it
 * (its evaluator replaces a random k_index_cache_fp8 by bf16 randn packed to
 * the deep_gemm FP8 layout: rng_core.h, kh_rng_dsa_kcache_token).  t must be
 * int8 [num_pages, page_size, 1, D + 4]. */
kh_status kh_rng_fill_dsa_kcache(kh_engine *e, kh_tensor *t, uint64_t seed, uint32_t stream,
                                 kh_err *err);

/* The same bits for the listed pages only (each token is drawn on its own,
 * so a page's bytes do not depend on the others); the other pages are left
 * as they are.  Pages outside [0, num_pages) or listed twice are an error.
 * Both fills split the pages across the machine's cores. */
kh_status kh_rng_fill_dsa_kcache_pages(kh_engine *e, kh_tensor *t, uint64_t seed,
                                       uint32_t stream, const int64_t *pages, size_t npages,
                                       kh_err *err);

/* A sampling task's probs, as FlashInfer-Bench makes them: softmax over the
 * last dimension of a float32 randn tensor drawn from (seed, stream) as
 * kh_rng_fill does.  Host only (the coordinator sends the bytes). */
kh_status kh_rng_fill_softmax(kh_engine *e, kh_tensor *t, uint64_t seed, uint32_t stream,
                              kh_err *err);

/* A seed for (base, a, b), e.g. (run seed, workload index, trial): one
 * Philox block, so derived seeds are independent of each other. */
uint64_t kh_rng_derive_seed(uint64_t base, uint64_t a, uint64_t b);

/* The element ranges of one output that a verified timed call returns when
 * its outputs are too large to return whole (docs/evaluation.md, "Which
 * timed calls are verified"): the first and the last `elems` elements and
 * count - 2 more runs of `elems` at offsets drawn from (seed, call, tensor),
 * every start and length a multiple of 8 elements (sub-byte types stay
 * whole bytes), sorted and merged where they touch.  out needs count
 * entries of {start, length}; returns how many were written (1 when
 * numel <= count * elems: the whole tensor).  The seed is the worker's
 * secret: a kernel cannot know which elements will be read. */
size_t kh_rng_ranges(uint64_t seed, uint64_t call, uint64_t tensor, uint64_t numel, size_t count,
                     uint64_t elems, uint64_t (*out)[2]);

/* ---- the device generator ------------------------------------------------
 * CUDA source (a malloc'ed NUL-terminated string, caller frees; NULL when
 * out of memory) defining
 *   extern "C" __global__ void kh_rng_fill(unsigned char *out,
 *       unsigned long long n, unsigned long long seed, unsigned int stream,
 *       int kind)
 * which writes n elements of kind kh_rng_kind(dtype) into out (packed, as on
 * the host; float4_e2m1: (n + 1) / 2 bytes, one byte per thread step), and
 *   extern "C" __global__ void kh_rng_dsa_kcache(unsigned char *out,
 *       unsigned long long tokens, unsigned long long seed,
 *       unsigned int stream, unsigned int page_size, unsigned int head_dim)
 * which fills a whole DSA k cache (tokens = num_pages * page_size), one
 * token per thread step.  Any grid and block size work (grid-stride loops).
 * Compile it with NVRTC and the options kh_rng_device_options() (--fmad=false
 * is belt and braces: the source already uses non-contractible intrinsics). */
char *kh_rng_device_source(void);
#define KH_RNG_KERNEL "kh_rng_fill"
#define KH_RNG_KCACHE_KERNEL "kh_rng_dsa_kcache"
int kh_rng_kind(kh_dtype t);
/* NULL-terminated list of NVRTC options besides the architecture. */
const char *const *kh_rng_device_options(void);

/* Compile the device generator with NVRTC for arch ("sm_90") into a cubin
 * (malloc'ed, caller frees).  KH_ENODEV without NVRTC, KH_ECOMPILE with the
 * log on a compile error. */
kh_status kh_rng_compile(kh_engine *e, const char *arch, void **cubin, size_t *size,
                         kh_err *err);
/* The same as PTX text (malloc'ed, NUL-terminated, caller frees), for a
 * virtual or real arch ("compute_90", "sm_90"). */
kh_status kh_rng_compile_ptx(kh_engine *e, const char *arch, char **ptx, kh_err *err);

#endif
