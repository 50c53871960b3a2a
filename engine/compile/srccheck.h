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
 * A candidate of several files is checked as one: each of its headers (the
 * solution's other sources) by the same rules, under its own name, the size
 * limit over all of them together, and `#include "name"` of one of them is
 * allowed beside the allowlist.
 * This is a screen, not a proof: the compiler and the cubin check (the
 * kernels exist as symbols) run after it.  Trusted sources skip it. */
#ifndef KH_SRCCHECK_H
#define KH_SRCCHECK_H

#include "core/kh.h"

#define KH_SRCCHECK_MAX_BYTES (256u * 1024u)
#define KH_SRCCHECK_MAX_NAME 255 /* bytes in a header's name */

/* One named text: a candidate's header, named by its path among the
 * solution's sources, which is what an #include of it says.  text need not be
 * NUL-terminated. */
typedef struct kh_source {
    const char *name;
    const char *text;
    size_t len;
} kh_source;

typedef struct kh_srccheck_opts {
    const char *name;                   /* file name in messages; NULL: "candidate.cu" */
    size_t max_bytes;                   /* 0: KH_SRCCHECK_MAX_BYTES */
    int allow_device_launch;            /* 1: <<<>>> and cudaLaunchDevice are allowed */
    const char *const *kernels;         /* manifest kernel names (may be NULL) */
    size_t n_kernels;
    const char *const *extra_includes;  /* more allowed headers: exact names, or
                                           prefixes ending in '/' */
    size_t n_extra_includes;
    const kh_source *headers;           /* the candidate's other sources (may be NULL) */
    size_t n_headers;
} kh_srccheck_opts;

/* Run every rule on src and on each of opts->headers (their names first, as
 * kh_srccheck_names).  KH_OK when all pass.  KH_ECOMPILE when one does not:
 * err->msg holds the first problem ("candidate.cu:12: host API call
 * 'cudaMalloc' is not allowed in device code", "util.cuh:3: ..." for a
 * header), and if report is non-NULL *report receives all problems, one per
 * line (caller frees).  KH_ENOMEM only when out of memory.  opts may be NULL
 * (defaults). */
kh_status kh_srccheck_run(const char *src, size_t len, const kh_srccheck_opts *opts,
                          char **report, kh_err *err);

/* NULL when name may name a candidate's header, else why not (a static
 * string): a plain file name or a relative path of plain components
 * ("util.cuh", "include/util.cuh"): letters, digits and . _ - + only, no
 * absolute path, no empty, "." or ".." component, at most
 * KH_SRCCHECK_MAX_NAME bytes.  NVRTC finds a header by the name an #include
 * writes, so these are the names an #include can use. */
const char *kh_srccheck_header_name_problem(const char *name);

/* The header names of a candidate whose entry source is `entry` (NULL:
 * "candidate.cu"): each acceptable (kh_srccheck_header_name_problem), none
 * twice, none the entry's own name.  KH_OK, or KH_ECOMPILE with every problem
 * in *report (if non-NULL; caller frees) and the first in err->msg, each
 * naming the header; KH_ENOMEM. */
kh_status kh_srccheck_names(const char *entry, const kh_source *headers, size_t n,
                            char **report, kh_err *err);

/* Call fn for each #include in src (outside comments), in order: the header
 * name without delimiters, whether it was <angled>, and its line.  Used to
 * hash the headers a compile depends on.  Never fails. */
typedef void (*kh_include_fn)(void *ud, const char *name, int angled, int line);
void kh_srccheck_includes(const char *src, size_t len, kh_include_fn fn, void *ud);

/* The source's leading #include lines, then the #define, #undef and #pragma
 * lines that follow them (with the comments and blank lines among them),
 * verbatim, up to the first other directive, code, an #include after a
 * #define, or an #include of one of the candidate's headers; NULL when it
 * holds no #include, or an #include is malformed.  Compiling this prefix
 * alone (plus a lone ';') creates the precompiled header that the full
 * source then reuses.  Nothing in it can expand a candidate's macro (no #if,
 * no header after a #define, no identifier in the body) and no header of the
 * candidate's is in it, so it runs in bounded time and holds system headers
 * only.  headers may be NULL.  Caller frees. */
char *kh_srccheck_pch_prefix(const char *src, size_t len, const kh_source *headers,
                             size_t n_headers);

/* 1 when the precompiled header NVRTC would make of src with -pch might hold
 * one of the candidate's headers, else 0.  NVRTC's PCH covers the source's
 * initial sequence of preprocessing directives and everything they include,
 * and it does not notice when the text of a header given to
 * nvrtcCreateProgram changes: a later program with the same directives gets
 * the old header (measured with NVRTC 13.0).  Only a preprocessor knows where
 * that sequence ends (a false #if hides lines of code), so this answers 1 for
 * an #include naming one of headers (quoted or angled), a computed #include,
 * or a conditional directive, seen before the first line of code. */
int kh_srccheck_pch_may_hold(const char *src, size_t len, const kh_source *headers,
                             size_t n_headers);

/* 1 if name is on the default allowlist. */
int kh_srccheck_include_allowed(const char *name);

#endif
