/* proc.h: running work in a child process with a deadline and capturing what
 * it writes.  Used wherever the coordinator must survive what it runs: the
 * GPU probe of `khlua doctor` (the coordinator never calls the driver), and
 * external tools (nvcc, cc, ncu, Python references).  The supervised worker
 * protocol builds on the same primitives. */
#ifndef KH_PROC_H
#define KH_PROC_H

#include "core/kh.h"

typedef struct kh_child_result {
    int exited;      /* 1 if the child called exit */
    int exit_code;   /* valid when exited */
    int signaled;    /* 1 if a signal ended it */
    int signal;      /* valid when signaled */
    int timed_out;   /* 1 if we killed it at the deadline */
    char *out;       /* what it wrote (NUL-terminated; caller frees via _free) */
    size_t out_len;
    int truncated;   /* output exceeded max_out and was cut */
    double seconds;  /* wall time */
} kh_child_result;

/* fn runs in a forked child and writes its answer to out_fd; its return value
 * becomes the exit code.  The parent reads up to max_out bytes, kills the
 * child with SIGKILL at timeout_s, and reaps it.  KH_OK means the child ran
 * and was reaped, whatever its fate: inspect res.  Only fork/pipe failures
 * return an error. */
typedef int (*kh_child_fn)(void *arg, int out_fd);
kh_status kh_proc_fork_call(kh_child_fn fn, void *arg, double timeout_s, size_t max_out,
                            kh_child_result *res, kh_err *err);

/* Run argv[0] (searched on PATH) with stdin from /dev/null, stdout and
 * stderr captured together, under the same deadline rules.  The child gets
 * this process's environment without the variables that may hold a
 * credential (kh_scrub_env): compilers, profilers and references never need
 * an API key, and some of them run what a candidate wrote. */
kh_status kh_proc_run(char *const argv[], double timeout_s, size_t max_out,
                      kh_child_result *res, kh_err *err);
/* The same with the child's address space capped at max_as bytes (0: no
 * cap): what compiles a candidate's source, which may try to read an endless
 * file (#include "/dev/zero") into the compiler's memory. */
kh_status kh_proc_run_limited(char *const argv[], double timeout_s, size_t max_out,
                              size_t max_as, kh_child_result *res, kh_err *err);

void kh_child_result_free(kh_child_result *res);

/* ---- liveness: is the process that wrote a record still there? -------------
 * A process is named by its pid and its start time (clock ticks after boot,
 * field 22 of /proc/PID/stat), so a pid the system gave to another process
 * since does not pass for it. */
unsigned long long kh_proc_start_time(long pid); /* 0: unknown (no /proc, no such pid) */
/* 1: pid runs and started at start (start 0: any); 0: it does not; -1: this
 * system cannot tell (no /proc). */
int kh_proc_alive(long pid, unsigned long long start);

/* One line describing how a child ended: "exit 0", "killed by SIGSEGV",
 * "timed out after 5.0 s". */
void kh_child_describe(const kh_child_result *res, char *buf, size_t n);

/* Search PATH (or a colon-separated list of extra dirs first) for an
 * executable; returns a malloc'ed absolute path or NULL. */
char *kh_which(const char *name, const char *extra_dirs);

/* The interpreter Python references run with (eval/pyref.h) and task checks
 * parse them with: $KHLUA_PYTHON, else python3 on PATH.  A malloc'ed
 * absolute path, or NULL with *asked set to the name or path that was not
 * found. */
char *kh_which_python(const char **asked);

#endif
