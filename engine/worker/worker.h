/* worker.h: the worker side of the protocol.  `khlua worker --role R` runs
 * kh_worker_main: it says hello, then answers requests one at a time with the
 * role's methods until told to shut down or its input closes.  Roles (compile,
 * gpu, host, echo) are tables of methods registered in worker_roles.c; each
 * lives in the module that owns the work.
 *
 * A method that hits an unrecoverable state (a sticky CUDA error) calls
 * kh_worker_exit_after_reply: the reply still goes out, then the process exits
 * and the supervisor starts a fresh one. */
#ifndef KH_WORKER_H
#define KH_WORKER_H

#include "core/engine.h"
#include "core/wire.h"

typedef struct kh_worker kh_worker;

/* A method: params is the request's "params" (borrowed, may be NULL);
 * payload its bytes.  On success set *result (a new reference; NULL means
 * {}), and optionally *out_payload (malloc'ed, freed by the caller) and
 * *out_len.  On failure return a status with err filled. */
typedef kh_status (*kh_worker_method)(kh_worker *w, const json_t *params,
                                      const unsigned char *payload, size_t payload_len,
                                      json_t **result, unsigned char **out_payload,
                                      size_t *out_len, kh_err *err);

typedef struct kh_worker_method_entry {
    const char *name;
    kh_worker_method fn;
} kh_worker_method_entry;

typedef struct kh_worker_role {
    const char *name;
    const char *summary;
    const kh_worker_method_entry *methods; /* NULL-terminated */
    /* Optional: set up role state before the hello; a failure is reported in
     * the hello ({"hello": ..., "error": ...}) and the worker exits 1. */
    kh_status (*init)(kh_worker *w, kh_err *err);
    void (*fini)(kh_worker *w);
} kh_worker_role;

/* Known roles, NULL-terminated; and lookup by name (NULL if unknown). */
extern const kh_worker_role *const kh_worker_roles[];
const kh_worker_role *kh_worker_role_find(const char *name);

/* Serve on in_fd/out_fd until shutdown or EOF.  Returns the exit code.
 * Standard output is moved aside first (fd 1 then points at stderr), so
 * nothing a library prints can corrupt the frames. */
int kh_worker_main(kh_engine *e, const kh_worker_role *role, int in_fd, int out_fd);

/* A payload slice [offset, length] in a request of payload_len bytes.  what
 * names the field in the error. */
kh_status kh_worker_slice(const json_t *j, size_t payload_len, size_t *off, size_t *len,
                          const char *what, kh_err *err);

/* An input generator {"kind": "bytes", "payload": [offset, length], "tile":
 * T (default 1)}: the payload slice, repeated T times (the sampling TVD
 * test's repeated batch), must fill exactly nbytes.  what names the tensor
 * in the error. */
kh_status kh_worker_gen_bytes(const json_t *gen, size_t payload_len, size_t nbytes, size_t *off,
                              size_t *len, const char *what, kh_err *err);

kh_engine *kh_worker_engine(kh_worker *w);
void *kh_worker_state(kh_worker *w);
void kh_worker_set_state(kh_worker *w, void *state);
void kh_worker_exit_after_reply(kh_worker *w, int code);

#endif
