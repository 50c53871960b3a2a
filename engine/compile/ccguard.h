/* ccguard.h: what the compile of a host candidate (C source by the model) may
 * read and what it may emit, decided from the compiler's own records rather
 * than from the source text, so that macros, _Pragma, line splices and
 * trigraphs cannot hide anything:
 *   - the dependency list (-MD) names every file the preprocessor read: each
 *     must be the candidate's own source or lie under the compiler's system
 *     include directories (realpath);
 *   - the preprocessed text may hold no asm outside system headers;
 *   - the assembly may hold no inline assembly (#APP) and no assembler
 *     directive that reads a file or builds one (.incbin, .include, .macro);
 *   - the candidate's own sources may hold no #line, line marker or #embed
 *     directive (they would let its text pass for a system header's);
 *   - the log it keeps names the candidate's files and system headers only,
 *     quoting the candidate's own lines from memory, never from disk.
 * A rejection is a message that says "not allowed" and names what the
 * candidate wrote; it never quotes a file that is not the candidate's.
 * Running the compiler belongs to hostcc.c. */
#ifndef KH_CCGUARD_H
#define KH_CCGUARD_H

#include "core/kh.h"

typedef struct kh_ccguard kh_ccguard;

/* The directories listed between "#include <...> search starts here:" and
 * "End of search list." in the output of `cc -xc -E -v /dev/null`: a
 * malloc'ed NULL-terminated array of malloc'ed strings (kh_ccguard_strv_free);
 * NULL when out of memory.  An output without the list gives an empty array. */
char **kh_ccguard_sysdirs(const char *verbose_out);
void kh_ccguard_strv_free(char **v);

/* A guard for one compile.  sys_dirs: the compiler's system include
 * directories (NULL-terminated).  own: the candidate's files as the compiler
 * is given them (absolute paths, NULL-terminated); their text is read now and
 * kept, so that what is quoted later is what was checked.  NULL with err set
 * when a file cannot be read or memory runs out. */
kh_ccguard *kh_ccguard_new(const char *const *sys_dirs, const char *const *own, kh_err *err);
void kh_ccguard_free(kh_ccguard *g);

/* Treat path (a file the compile writes: the preprocessed text, the
 * assembly) as the candidate's own in logs.  KH_ENOMEM or KH_OK. */
kh_status kh_ccguard_add_generated(kh_ccguard *g, const char *path);

/* Each check returns KH_OK when the input passes, KH_ECOMPILE with a message
 * in err when something is not allowed, KH_ENOMEM. */

/* The candidate's own sources: no #line, line marker or #embed directive. */
kh_status kh_ccguard_check_sources(kh_ccguard *g, kh_err *err);

/* deps: a make-style dependency list (-MD / -M).  pre: the preprocessed text
 * of the same run (may be NULL), used to find the directive that included a
 * file.  missing_ok: a dependency that does not exist passes (a -MG listing:
 * a header the compiler could not find has no text to leak). */
kh_status kh_ccguard_check_deps(kh_ccguard *g, const char *deps, const char *pre,
                                int missing_ok, kh_err *err);

/* The preprocessed text: no asm / __asm / __asm__ outside system headers. */
kh_status kh_ccguard_check_preprocessed(kh_ccguard *g, const char *pre, size_t len, kh_err *err);

/* The assembly the compiler wrote, before it is assembled. */
kh_status kh_ccguard_check_assembly(const char *s, size_t len, kh_err *err);

/* The part of a compiler log that may be kept: lines that name a file that is
 * neither the candidate's nor a system header go; a diagnostic on one of the
 * candidate's lines is followed by that line, quoted from memory; the
 * candidate's directory is stripped from paths.  Malloc'ed; NULL when out of
 * memory. */
char *kh_ccguard_log(kh_ccguard *g, const char *log);

#endif
