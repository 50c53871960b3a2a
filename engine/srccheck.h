/* srccheck.h: static checks on model-written CUDA source before it reaches a
 * compiler.  A small C/C++ tokenizer (comments, strings, character and raw
 * string literals, preprocessor lines with continuations) feeds rules that
 * each name the line they fail on:
 *   - size: the source is at most max_bytes;
 *   - encoding: valid UTF-8 without NUL bytes;
 *   - includes: #include only of the allowlist in DESIGN.md (cuda_fp16.h,
 *     cuda_bf16.h, cuda_fp8.h, cooperative_groups[.h|/...], cuda/std/...,
 *     cub/...) plus the caller's extras; no computed includes, no "..";
 *   - device code only: no main, no __host__-only functions, no calls of the
 *     CUDA runtime or driver host API (cudaXxx(...) / cuXxx(...); the device
 *     intrinsics cudaGridDependencySynchronize and
 *     cudaTriggerProgrammaticLaunchCompletion are allowed);
 *   - no device-side kernel launches (<<<...>>>, cudaLaunchDevice) unless
 *     allowed;
 *   - every manifest kernel is defined as a non-template __global__ function
 *     with extern "C" linkage.
 * This is a screen, not a proof: the compiler and the cubin check (the
 * kernels exist as symbols) run after it.  Trusted sources skip it. */
#ifndef KH_SRCCHECK_H
#define KH_SRCCHECK_H

#include "kh.h"

#define KH_SRCCHECK_MAX_BYTES (256u * 1024u)

typedef struct kh_srccheck_opts {
    const char *name;                   /* file name in messages; NULL: "candidate.cu" */
    size_t max_bytes;                   /* 0: KH_SRCCHECK_MAX_BYTES */
    int allow_device_launch;            /* 1: <<<>>> and cudaLaunchDevice are allowed */
    const char *const *kernels;         /* manifest kernel names (may be NULL) */
    size_t n_kernels;
    const char *const *extra_includes;  /* more allowed headers: exact names, or
                                           prefixes ending in '/' */
    size_t n_extra_includes;
} kh_srccheck_opts;

/* Run every rule.  KH_OK when the source passes.  KH_ECOMPILE when it does
 * not: err->msg holds the first problem ("candidate.cu:12: host API call
 * 'cudaMalloc' is not allowed in device code"), and if report is non-NULL
 * *report receives all problems, one per line (caller frees).  KH_ENOMEM
 * only when out of memory.  opts may be NULL (defaults). */
kh_status kh_srccheck_run(const char *src, size_t len, const kh_srccheck_opts *opts,
                          char **report, kh_err *err);

/* Call fn for each #include in src (outside comments), in order: the header
 * name without delimiters, whether it was <angled>, and its line.  Used to
 * hash the headers a compile depends on.  Never fails. */
typedef void (*kh_include_fn)(void *ud, const char *name, int angled, int line);
void kh_srccheck_includes(const char *src, size_t len, kh_include_fn fn, void *ud);

/* The source's leading #include lines, then the #define, #undef and #pragma
 * lines that follow them (with the comments and blank lines among them),
 * verbatim, up to the first other directive, code, or an #include after a
 * #define; NULL when it holds no #include, or an #include is malformed.
 * Compiling this prefix alone (plus a lone ';') creates the precompiled
 * header that the full source then reuses.  Nothing in it can expand a
 * candidate's macro (no #if, no header after a #define, no identifier in the
 * body), so it runs in bounded time.  Caller frees. */
char *kh_srccheck_pch_prefix(const char *src, size_t len);

/* 1 if name is on the default allowlist. */
int kh_srccheck_include_allowed(const char *name);

#endif
