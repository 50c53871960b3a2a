/* kh.h: what every engine module shares: the status codes, the error record
 * that carries a message beside a code, and small helpers that several
 * modules need (UTF-8 sanitizing, monotonic time).  No Lua here, ever. */
#ifndef KH_H
#define KH_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Why an engine call could not run.  A domain verdict (a kernel is wrong or
 * slow) is never a status: it is data in the call's result.  Append new codes
 * at the end: the numbers are stored in records. */
typedef enum kh_status {
    KH_OK = 0,
    KH_EINVAL,       /* bad argument or malformed input */
    KH_ENOMEM,       /* allocation failed */
    KH_EIO,          /* file system or pipe error */
    KH_ENOTFOUND,    /* a named thing does not exist */
    KH_ENODEV,       /* no GPU, or a CUDA library is missing */
    KH_ECUDA,        /* a CUDA driver call failed */
    KH_ECOMPILE,     /* compilation failed */
    KH_ESTORE,       /* the artifact store failed */
    KH_ETIMEOUT,     /* a deadline passed */
    KH_EINTR,        /* interrupted (Ctrl-C) */
    KH_ENET,         /* network or HTTP failure */
    KH_EPARSE,       /* text could not be parsed */
    KH_ECORRUPT,     /* stored data does not match its hash or schema */
    KH_EUNSUPPORTED, /* valid request this build or machine cannot serve */
    KH_ESTATE,       /* call made in the wrong state (closed handle, ...) */
    KH_ECHILD,       /* a child process crashed or misbehaved */
    KH_STATUS_COUNT
} kh_status;

/* "EINVAL", "ENODEV", ...; "OK" for KH_OK; never NULL. */
const char *kh_status_name(kh_status s);

/* An error: a code and a message naming the problem.  Callers own it (usually
 * on the stack); callees fill it only when they return a non-OK status. */
typedef struct kh_err {
    kh_status code;
    char msg[1024];
} kh_err;

/* Set *e (if non-NULL) and return code, so `return kh_err_set(e, ...)` reads
 * naturally.  The message is printf-formatted and truncated to fit. */
kh_status kh_err_set(kh_err *e, kh_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
kh_status kh_err_setv(kh_err *e, kh_status code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* Prefix an existing message: "opening store: <old message>". */
kh_status kh_err_prefix(kh_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kh_err_clear(kh_err *e);

/* Copy src (len bytes) into a new NUL-terminated buffer of valid UTF-8:
 * invalid sequences become U+FFFD and NUL bytes are dropped.  Caller frees.
 * Compiler logs, kernel sources and model output pass through this before they
 * go into JSON.  Returns NULL only when out of memory. */
char *kh_utf8_sanitize(const char *src, size_t len, size_t *out_len);

/* Monotonic clock in seconds, and wall clock in seconds since the epoch. */
double kh_now(void);
double kh_wall_now(void);

/* With KHLUA_TIMELINE set to a file: append a line "monotonic-seconds pid
 * event" to it (one write, so the coordinator's and its workers' lines
 * interleave whole).  A diagnostic for where a run's wall time goes
 * (tests/bench/bench_eval.sh); nothing when unset. */
void kh_timeline(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Run fn(ctx, lo, hi) over the items [0, n), split into shares of at least
 * min_per items whose boundaries are multiples of align (>= 1), one thread
 * per online core (32 at most); the calling thread does the first share, and
 * any share whose thread cannot start.  fn returns nonzero to say it stopped
 * early (interrupted); the result is nonzero when any share did.  For work
 * whose result does not depend on the split (disjoint writes). */
typedef int (*kh_range_fn)(void *ctx, uint64_t lo, uint64_t hi);
int kh_parallel_for(uint64_t n, uint64_t min_per, uint64_t align, kh_range_fn fn, void *ctx);

/* Duplicate a string; NULL in, NULL out.  Caller frees. */
char *kh_strdup(const char *s);
/* The whole file at path, malloc'ed and NUL-terminated (*len without the
 * NUL; len may be NULL); -1 (errno set) when it cannot be read. */
int kh_read_file(const char *path, char **data, size_t *len);

/* A 63-bit seed from the OS CSPRNG (getrandom): what an adversary who has
 * read the source cannot predict.  KH_EIO when the kernel cannot give one. */
kh_status kh_secure_seed(uint64_t *out, kh_err *err);

#define KH_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
