/* compile_service.h: the coordinator's compile service.  A pool of compile
 * servers (`khlua worker --role compile`, CUDA-free processes that each keep
 * one kh_compiler, so their precompiled headers stay warm between jobs), fed
 * over the worker protocol, in front of the store-backed cache.
 *
 * One job, in order:
 *   1. kh_compile_check here (header names; static checks for model-written
 *      source), so a cached artifact is never handed to a request its checks
 *      would refuse;
 *   2. the key (kh_compile_key: source, arch, options, NVRTC version, the
 *      identity of the included system headers, the candidate's headers) and a look-up of the record
 *      "compile-<key>" in the store: a hit is answered from the store's blobs
 *      without any server (served_by = "store");
 *   3. otherwise a server compiles it, preferably one that compiled the same
 *      #include prefix before (its PCH is warm); servers compile in their own
 *      process, and the supervisor kills a server that overruns the job's
 *      deadline plus a grace: the answer is KH_ETIMEOUT with the reason, and
 *      the slot gets a fresh server for the next job.  A server that dies
 *      mid-compile (a crash, kill -9) gives KH_ECOMPILE with the reason,
 *      and is replaced likewise;
 *   4. the manifest kernels are checked against the cubin here;
 *   5. a compiler verdict (an artifact, or a compile error with its log) is
 *      written to the store: the cubin, log, source and each header as blobs,
 *      and a "compile" record (docs/store.md, "compile records").  Timeouts and
 *      crashes are not cached.
 * Several jobs run at once, one per server.  With in_process the service
 * has no servers and compiles in this process (isolated for model-written
 * source); the store cache works the same.
 *
 * Local servers get a TMPDIR of the service's own (NVRTC keeps its PCH files
 * there); what a killed server leaves is removed, and the folder with the
 * service.
 *
 * Not thread-safe: one caller at a time.  The store (when given) is the
 * caller's and must stay open during the call. */
#ifndef KH_COMPILE_SERVICE_H
#define KH_COMPILE_SERVICE_H

#include "compile/compile.h"
#include "store/store.h"

#define KH_COMPILE_SERVICE_MAX_SERVERS 64

typedef struct kh_compile_service kh_compile_service;

typedef struct kh_compile_service_opts {
    size_t servers;          /* 0: kh_compile_service_default_servers() */
    int in_process;          /* 1: no servers; compile here */
    const char *launch;      /* worker launch template (supervisor.h); NULL: local */
    const char *exe;         /* NULL: this executable */
    const char *const *env;  /* extra environment for the servers, NULL-terminated;
                                must outlive the service */
    double grace_s;          /* past a job's deadline before its server is killed; 0: 2 s */
} kh_compile_service_opts;

/* min(online cores, 4), at least 1. */
size_t kh_compile_service_default_servers(void);

/* Servers start lazily, on the first jobs that need them.  o may be NULL.
 * NULL with err only when out of memory or o is invalid. */
kh_compile_service *kh_compile_service_new(kh_engine *e, const kh_compile_service_opts *o,
                                           kh_err *err);
/* Stops the servers (each gets a second to leave). */
void kh_compile_service_free(kh_compile_service *s);
/* Start servers now, until n are alive, rather than on the first jobs
 * (kh_pool_prestart): their start overlaps the caller's work.  Nothing in
 * process mode. */
kh_status kh_compile_service_prestart(kh_compile_service *s, size_t n, kh_err *err);

/* One job; outcomes as kh_compile_build (compile.h), plus: KH_ETIMEOUT with
 * *out an artifact whose log says a server was killed at the hard deadline;
 * KH_ECOMPILE when a server died mid-compile (the log says how); KH_ENODEV
 * when servers cannot be started.  store may be NULL (no cache).  The
 * caller frees *out. */
kh_status kh_compile_service_build(kh_compile_service *s, kh_store *store,
                                   const kh_compile_req *req, kh_artifact **out, kh_err *err);

typedef struct kh_compile_result {
    kh_status status;
    kh_err err;
    kh_artifact *a; /* as *out of kh_compile_service_build; caller frees */
} kh_compile_result;

/* n jobs at once (up to one per server); res[i] answers reqs[i].  Ctrl-C
 * (the engine's stop request) ends jobs not yet started with KH_EINTR; jobs
 * in flight finish (their deadlines bound them). */
void kh_compile_service_build_many(kh_compile_service *s, kh_store *store,
                                   const kh_compile_req *reqs, size_t n, kh_compile_result *res);

typedef struct kh_compile_service_stats {
    size_t servers;          /* pool size (0 in process) */
    long jobs, store_hits, store_writes, store_errors, dispatched, warm_routed;
    long started, deaths, timeouts; /* servers, from the pool */
    char last_store_error[256];
} kh_compile_service_stats;
void kh_compile_service_stats_get(const kh_compile_service *s, kh_compile_service_stats *st);

/* The pid of the live server in slot i (0: none running there). */
int kh_compile_service_server_pid(const kh_compile_service *s, size_t i);

/* The servers' TMPDIR ("" when there is none: in process, or a custom launch).
 * Valid until the service is freed, which removes it. */
const char *kh_compile_service_tmpdir(const kh_compile_service *s);

/* ---- the wire form (compile_wire.c), shared with the compile role (role_compile.c) */
/* The request's fields as JSON; the texts travel as the payload
 * (kh_compile_req_payload), each header listed here as {name, bytes}. */
json_t *kh_compile_req_to_json(const kh_compile_req *req);
/* The payload: the source, then each header's text, in order.  *buf is
 * malloc'ed (caller frees). */
kh_status kh_compile_req_payload(const kh_compile_req *req, void **buf, size_t *len,
                                 kh_err *err);
/* Fill req from params and the payload; strings and texts borrow from params
 * and payload, the arrays are malloc'ed into *scratch (caller frees).
 * KH_EINVAL on a malformed field, or header sizes the payload cannot hold. */
kh_status kh_compile_req_from_json(const json_t *params, const void *payload, size_t n,
                                   kh_compile_req *req, void **scratch, kh_err *err);
/* Rebuild an artifact from kh_artifact_to_json's object and the cubin bytes
 * (resources are parsed from the cubin again, not trusted from the JSON).
 * KH_EPARSE on a malformed object or cubin. */
kh_status kh_artifact_from_json(const json_t *j, const void *cubin, size_t len,
                                kh_artifact **out, kh_err *err);

#endif
