/* hostcc.h: compiles by nvcc and the system C compiler:
 *   nvcc -> shared object with a C entry point (baselines written by people),
 *   nvcc -> cubin (the anchor the compile benchmark measures NVRTC against),
 *   the system C compiler -> shared object (code written by people),
 * and, for model-written host candidates, the system C compiler in stages
 * whose every record is checked (kh_hostcc_build_candidate, ccguard.h).
 * Each runs the compiler as a child process with a deadline (proc.h) and
 * records the exact command line and the compiler's version, so the store can
 * say how a binary was made. */
#ifndef KH_HOSTCC_H
#define KH_HOSTCC_H

#include "core/engine.h"

typedef enum kh_hostcc_kind {
    KH_HOSTCC_NVCC_SO,     /* nvcc -shared -Xcompiler -fPIC -O3 -std=c++17 -lineinfo -arch=A */
    KH_HOSTCC_NVCC_CUBIN,  /* nvcc -cubin -std=c++17 -lineinfo -arch=A */
    KH_HOSTCC_CC_SO,       /* $CC (else cc) -shared -fPIC -O2 -std=c11 */
} kh_hostcc_kind;

typedef struct kh_hostcc_result {
    int ok;            /* compiler exited 0 and the output file exists */
    char *command;     /* the exact command line, shell-quoted */
    char *compiler;    /* absolute path of the compiler run */
    char *version;     /* e.g. "Cuda compilation tools, release 13.0, V13.0.88" */
    char *log;         /* what the compiler printed, valid UTF-8, never NULL on return */
    double seconds;
} kh_hostcc_result;

/* Compile src_path into out_path.  flags go after the fixed flags (may be
 * NULL).  arch applies to the nvcc kinds (NULL: the compile default).
 * KH_OK when it built; KH_ECOMPILE when the compiler failed (res->log says
 * why); KH_ETIMEOUT at the deadline (0: 300 s); KH_ENOTFOUND when the
 * compiler is missing.  res is filled in every case but KH_EINVAL/KH_ENOMEM;
 * free it with kh_hostcc_result_free. */
kh_status kh_hostcc_build(kh_engine *e, kh_hostcc_kind kind, const char *src_path,
                          const char *out_path, const char *arch, const char *const *flags,
                          size_t n_flags, double deadline_s, kh_hostcc_result *res,
                          kh_err *err);
void kh_hostcc_result_free(kh_hostcc_result *res);

/* A host candidate (C written by a model) into a shared object, in stages,
 * each checked before the next (ccguard.h):
 *   0. its own sources hold no #line, line marker or #embed;
 *   1. cc -std=c11 -O2 -fPIC -E -MD: every file the preprocessor read is one
 *      of the candidate's own (src_path and own, absolute paths,
 *      NULL-terminated, may be NULL) or lies under the compiler's system
 *      include directories; no asm outside system headers;
 *   2. cc -S of that preprocessed text: no inline assembly, no .incbin,
 *      .include, .macro in the assembly;
 *   3. cc -shared of the assembly, with flags (libraries: "-lm") after it.
 * A check that fails is KH_ECOMPILE with res->log a message that says "not
 * allowed" and names what the candidate wrote, and nothing the compiler
 * printed; a compile error is KH_ECOMPILE with res->log the compiler's
 * diagnostics about the candidate's files and system headers only, the
 * candidate's lines quoted from memory (no caret display reads a file).
 * Other statuses and res as kh_hostcc_build. */
kh_status kh_hostcc_build_candidate(kh_engine *e, const char *src_path, const char *out_path,
                                    const char *const *own, const char *const *flags,
                                    size_t n_flags, double deadline_s, kh_hostcc_result *res,
                                    kh_err *err);

#endif
