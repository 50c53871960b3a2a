/* supervisor.h: the coordinator's side of the worker protocol.  Starts worker
 * processes from a launch template, gives every request a deadline, kills a
 * worker that overruns it (its whole process group), notices one that dies,
 * and turns each fate into a status the caller can record: the worker's own
 * error, KH_ETIMEOUT, or KH_ECHILD ("killed by SIGSEGV; last stderr: ...").
 * The coordinator itself never runs candidate code or touches CUDA.
 *
 * kh_wproc is one worker process; kh_pool keeps N of one role alive,
 * respawning with backoff and giving up (KH_ENODEV) on a role that keeps
 * dying.  A worker may be started through a launcher (srun, ssh: a template
 * that does not start with {exe}); a launcher that exits is a lost worker,
 * reported like a crash (docs/scale-out.md). */
#ifndef KH_SUPERVISOR_H
#define KH_SUPERVISOR_H

#include "core/wire.h"

#define KH_LAUNCH_LOCAL "{exe} worker --role {role}"

typedef struct kh_wproc_opts {
    const char *role;
    /* Whitespace-separated argv template, no shell; placeholders {exe},
     * {role}, {index}, {gpu} (the slot's GPU, "" when none), {host} (the
     * slot's host), and {env}: a token of its own that becomes one argument
     * per env entry ("NAME=value"), for launchers that do not pass the
     * environment on (ssh: "ssh {host} env {env} {exe} worker --role {role}").
     * NULL: KH_LAUNCH_LOCAL.  kh_launch_template gives the named presets. */
    const char *launch;
    const char *exe;         /* NULL: this executable (/proc/self/exe) */
    double hello_timeout_s;  /* 0: 30 s */
    /* extra "NAME=value" entries, NULL-terminated, or NULL; placeholders as
     * in launch; an entry whose value expands to "" is left out */
    const char *const *env;
    int index;
    /* Seconds a worker that leaves by itself (a sticky error) or dies gets
     * before its process group is killed; 0: 5 s and 2 s.  A launch prefix
     * that reports after the worker exits (compute-sanitizer) needs more. */
    double exit_grace_s;
    const char *gpu;         /* {gpu}; NULL: "" */
    const char *host;        /* {host}; NULL: "localhost" */
} kh_wproc_opts;

/* The launch template of a named preset for a role:
 *   "local" (or NULL, "")  {exe} worker --role {role}
 *   "srun"                 srun --nodes=1 --ntasks=1 [--gres=gpu:1 for gpu roles]
 *                          --kill-on-bad-exit=1 --quiet {exe} worker --role {role}
 *   "ssh"                  ssh -T -o BatchMode=yes {host} env {env} {exe} worker ...
 * Anything else must be a template itself (it contains "{exe}" or names a
 * program and a role) and is returned unchanged.  KH_EINVAL with a message
 * naming the presets otherwise.  *out points to a static string or to spec. */
kh_status kh_launch_template(const char *spec, const char *role, const char **out, kh_err *err);
/* "local", "srun", "ssh" or "template" (a free template). */
const char *kh_launch_kind(const char *spec);

typedef struct kh_wproc kh_wproc;

/* Start a worker and wait for its hello.  NULL with err on failure (cannot
 * exec, no hello in time, wrong role, the role's init failed). */
kh_wproc *kh_wproc_start(const kh_wproc_opts *o, kh_err *err);
/* kh_wproc_start in two halves, so that a worker's start (its process, its
 * role's init: a CUDA context) overlaps the caller's own work: spawn returns
 * once the process runs; ready reads its hello (NULL with err, w stopped and
 * freed, on failure).  Nothing else may be called on a spawned worker before
 * ready but kh_wproc_stop and kh_wproc_starting (1 until ready). */
kh_wproc *kh_wproc_spawn(const kh_wproc_opts *o, kh_err *err);
kh_wproc *kh_wproc_ready(kh_wproc *w, kh_err *err);
int kh_wproc_starting(const kh_wproc *w);

/* Send one request (one outstanding request per worker: KH_ESTATE if busy,
 * if dead).  params is borrowed.  The deadline starts now. */
kh_status kh_wproc_submit(kh_wproc *w, const char *method, const json_t *params,
                          const void *payload, size_t payload_len, double timeout_s,
                          kh_err *err);

typedef struct kh_wdone {
    kh_wproc *w;
    kh_status status;  /* KH_OK: the worker answered ok; else why not */
    kh_err err;
    kh_msg reply;      /* the reply when the worker answered (free with kh_msg_free) */
    int worker_died;   /* the process is gone (crash, exit, or killed at the deadline) */
    double seconds;    /* from submit to completion */
} kh_wdone;

/* Wait up to wait_s for busy workers among ws[0..n) to complete; fill up to
 * max_done entries of done[] and return how many.  Deadlines are enforced
 * here: an overrunning worker is killed and reported as KH_ETIMEOUT. */
size_t kh_wproc_wait(kh_wproc *const *ws, size_t n, double wait_s, kh_wdone *done,
                     size_t max_done);

/* submit + wait: *reply owned by the caller on KH_OK and on worker-reported
 * errors (reply->head non-NULL); zeroed otherwise. */
kh_status kh_wproc_call(kh_wproc *w, const char *method, const json_t *params,
                        const void *payload, size_t payload_len, double timeout_s,
                        kh_msg *reply, kh_err *err);

int kh_wproc_busy(const kh_wproc *w);
/* What the worker said about itself in its hello: its own pid (under srun or
 * ssh not the launcher's, which kh_wproc_pid gives), its host name, and the
 * Slurm job and step it runs in ("" outside Slurm).  Valid while w lives. */
int kh_wproc_worker_pid(const kh_wproc *w);
const char *kh_wproc_worker_host(const kh_wproc *w);
const char *kh_wproc_slurm_job(const kh_wproc *w);
int kh_wproc_alive(const kh_wproc *w);
int kh_wproc_pid(const kh_wproc *w);
const char *kh_wproc_role(const kh_wproc *w);
/* The end of what the worker wrote on stderr, at most KH_SCRUB_MAX bytes,
 * scrubbed of secrets (scrub.h): what a candidate printed (valid until the
 * next call). */
const char *kh_wproc_stderr_tail(kh_wproc *w);

/* Ask for a clean exit, wait up to grace_s, then SIGKILL; frees w. */
void kh_wproc_stop(kh_wproc *w, double grace_s);
/* Ask for a clean exit and return (an idle, live worker; nothing else is
 * done): several workers asked first, then each stopped with kh_wproc_stop,
 * exit side by side instead of one after another.  w stays the caller's
 * until kh_wproc_stop; no call may be submitted to it. */
void kh_wproc_ask_exit(kh_wproc *w, double grace_s);

/* ---- pools ---------------------------------------------------------------- */
typedef struct kh_pool kh_pool;

typedef struct kh_pool_stats {
    long started, deaths, timeouts, calls;
    double last_restart_s; /* seconds the last respawn took */
} kh_pool_stats;

/* A pool of n workers of one role, started lazily.  o is copied. */
kh_pool *kh_pool_new(const kh_wproc_opts *o, size_t n, kh_err *err);
void kh_pool_free(kh_pool *p);
/* Spawn workers in empty slots, until max are alive (SIZE_MAX: every
 * slot), without waiting for their hello: the workers start while the
 * caller works; the first request for a slot reads its hello (a failed
 * start counts as a death there, and the slot is started again as usual). */
kh_status kh_pool_prestart(kh_pool *p, size_t max, kh_err *err);

/* Run one request on an idle worker, starting or respawning one as needed.
 * A worker that dies or overruns is replaced before the next call (with
 * backoff after repeated deaths); after max_deaths consecutive deaths with no
 * success the pool refuses with KH_ENODEV until kh_pool_reset. */
kh_status kh_pool_call(kh_pool *p, const char *method, const json_t *params,
                       const void *payload, size_t payload_len, double timeout_s,
                       kh_msg *reply, kh_err *err);
void kh_pool_stats_get(const kh_pool *p, kh_pool_stats *s);
void kh_pool_set_max_deaths(kh_pool *p, int max_deaths);
void kh_pool_reset(kh_pool *p);
/* Place slot's workers: {gpu} and {host} for its launch template and env
 * (copied).  A live worker in the slot keeps running until it is replaced.
 * KH_EINVAL when slot is out of range. */
kh_status kh_pool_place(kh_pool *p, size_t slot, const char *gpu, const char *host,
                        kh_err *err);
const char *kh_pool_slot_gpu(const kh_pool *p, size_t slot);   /* "" when unplaced */
const char *kh_pool_slot_host(const kh_pool *p, size_t slot);  /* "" when unplaced */
/* The live worker in slot (NULL when empty or dead); owned by the pool. */
const kh_wproc *kh_pool_slot_worker(const kh_pool *p, size_t slot);

/* Asynchronous use: several requests in flight, one per worker.
 * kh_pool_submit starts a request on the worker in slot prefer when that one
 * is alive and idle (prefer >= kh_pool_size: no preference), else on any
 * idle live worker, else on a worker it starts in an empty slot (respawn
 * backoff and the max_deaths refusal as for kh_pool_call).  *slot receives
 * the slot used.  KH_ESTATE when every worker is busy.  Deaths, timeouts and
 * calls count in the stats exactly as for kh_pool_call. */
kh_status kh_pool_submit(kh_pool *p, const char *method, const json_t *params,
                         const void *payload, size_t payload_len, double timeout_s,
                         size_t prefer, size_t *slot, kh_err *err);

/* As kh_pool_submit, on exactly this slot (a worker is started there when it
 * is empty or its worker died); KH_ESTATE when that worker is busy.  For a
 * scheduler that keeps related requests on one GPU. */
kh_status kh_pool_submit_to(kh_pool *p, const char *method, const json_t *params,
                            const void *payload, size_t payload_len, double timeout_s,
                            size_t slot, kh_err *err);

typedef struct kh_pool_done {
    size_t slot;   /* the slot the request ran in */
    int pid;       /* the worker that ran it (it may be gone now) */
    kh_wdone d;    /* as from kh_wproc_wait; d.w belongs to the pool (may be freed
                      by the next submit if the worker died) */
} kh_pool_done;

/* Wait up to wait_s for requests started by kh_pool_submit; fill up to
 * max_done entries and return how many (0: none finished in time, or none in
 * flight).  Deadlines are enforced here, as in kh_wproc_wait. */
size_t kh_pool_wait(kh_pool *p, double wait_s, kh_pool_done *done, size_t max_done);

size_t kh_pool_size(const kh_pool *p);
/* Requests in flight. */
size_t kh_pool_in_flight(const kh_pool *p);
/* The pid of the live worker in slot, 0 when the slot is empty or its worker
 * died; and whether it has a request in flight. */
int kh_pool_slot_pid(const kh_pool *p, size_t slot);
int kh_pool_slot_busy(const kh_pool *p, size_t slot);

#endif
