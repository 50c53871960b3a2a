/* sanitizer.h: compute-sanitizer around a gpu worker (issue 6, promotion
 * time).  The coordinator runs the finalist once per tool in a dedicated gpu
 * worker whose launch template is prefixed with
 *   compute-sanitizer --tool T --log-file F --print-limit 20
 *                     --report-api-errors no [--racecheck-report analysis]
 * and reads the report from F after the worker has exited.  This module
 * finds the tool, builds that template and parses the report; running the
 * worker is eval_sanitize.c's.
 *
 * The sanitizer wraps the whole worker process, so its report can name the
 * worker's own kernels (input generator, checksums) or host API calls; only
 * records that name one of the candidate's kernels count as errors, the rest
 * are counted as `ignored`. */
#ifndef KH_SANITIZER_H
#define KH_SANITIZER_H

#include "core/engine.h"

#include <stddef.h>

/* memcheck, racecheck, initcheck, synccheck; NULL otherwise.  The returned
 * "sanitizer:<tool>" is a static string (a check name). */
const char *kh_san_check_name(const char *tool);

/* The compute-sanitizer executable: $KHLUA_COMPUTE_SANITIZER, else
 * <cuda home>/bin/compute-sanitizer, else compute-sanitizer on $PATH.
 * KH_ENOTFOUND naming the places looked at. */
kh_status kh_san_find(kh_engine *e, char *path, size_t n, kh_err *err);

/* base (a worker launch template; NULL: KH_LAUNCH_LOCAL) with "{exe}"
 * replaced by the sanitizer's command line followed by "{exe}", so a
 * scheduler prefix (srun ...) stays in front.  extra: more options (from
 * $KHLUA_SANITIZER_FLAGS), whitespace-separated, or NULL.  Paths with
 * whitespace are refused (templates are split on it). */
kh_status kh_san_template(const char *sanitizer, const char *tool, const char *log_path,
                          const char *extra, const char *base, char *out, size_t n,
                          kh_err *err);

typedef struct kh_san_report {
    int summary;          /* a summary line was found (the run finished its report) */
    long summary_count;   /* errors (memcheck, initcheck, synccheck) or racecheck
                             errors as the summary counts them; -1 unknown */
    int errors;           /* records naming one of the candidate's kernels */
    int warnings;         /* racecheck warnings naming one of them (not failures) */
    int ignored;          /* records naming none of them */
    char first[1536];     /* the first counted error record, its lines joined by
                             '\n', the "=========" prefixes removed */
} kh_san_report;

/* Parse a report (the log file's text).  kernels: the candidate's kernel
 * names; a record counts when it names one as a kernel: a whole identifier
 * followed by '(', '+', '<' or the end of a line. */
void kh_san_parse(const char *text, const char *tool, const char *const *kernels, size_t nk,
                  kh_san_report *r);

#endif
