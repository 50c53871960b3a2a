/* compile.h: CUDA C++ source -> cubin with NVRTC, in process.
 *
 * A kh_compiler is long-lived: it holds the loaded NVRTC (through the
 * engine), keeps NVRTC's automatic precompiled header warm (NVRTC keeps the
 * PCH in process memory only, so "warm" means this process compiled a program
 * with the same include prefix before), and an in-memory cache of successful
 * artifacts keyed by kh_compile_key.  A compile server process wraps one
 * kh_compiler; the store-backed cache uses the same key.  Not thread-safe:
 * one compile at a time per kh_compiler.
 *
 * A candidate of several files compiles its entry source as the translation
 * unit, with the others handed to NVRTC as headers by name (nvrtcCreateProgram's
 * headers and includeNames): `#include "util.cuh"`, in the entry or in a
 * header, is the header named "util.cuh" (NVRTC matches the name as written,
 * not relative to the including file).
 *
 * Every compile: the header names checked (kh_compile_check); optional static
 * checks (srccheck.h) for model-written source, headers included; the options
 * below; a deadline enforced through NVRTC's flow
 * callback (and Ctrl-C through the engine's stop request); the log made
 * valid UTF-8; the cubin parsed for per-kernel resources (cubin.h); the
 * manifest kernels checked against the cubin's symbols; timings per phase.
 *
 * Deadlines: NVRTC polls the flow callback between phases but not during
 * template instantiation (measured: a recursion bomb ran 67 s past a 3 s
 * deadline), so only an isolated compile has a hard deadline.  It forks a
 * child that inherits this process's precompiled headers, after compiling the
 * source's #include prefix here once so the PCH is warm (nothing but allowed
 * #include lines runs in this process).  Model-written source should be
 * compiled isolated; trusted source may run in process.
 *
 * NVRTC options, in this order (the exact list is in the artifact):
 *   -arch=<arch> --std=c++17 -lineinfo -default-device
 *   -I<cuda>/include -I<cuda>/include/cccl
 *   [-pch --pch-messages=false -diag-suppress=629,630] <caller's options> */
#ifndef KH_COMPILE_H
#define KH_COMPILE_H

#include "compile/cubin.h"
#include "core/engine.h"
#include "compile/srccheck.h"

#define KH_COMPILE_DEFAULT_ARCH "sm_90a"
#define KH_COMPILE_MAX_SOURCE (4u * 1024u * 1024u) /* hard cap, even for trusted */
#define KH_COMPILE_DEFAULT_DEADLINE 60.0
#define KH_COMPILE_MAX_HEADERS 256

typedef struct kh_compiler kh_compiler;

typedef struct kh_compile_req {
    const char *source;           /* required; need not be NUL-terminated */
    size_t source_len;
    const char *name;             /* file name in the log; NULL: "candidate.cu" */
    /* the candidate's other sources, each #include-able as "<name>" (names as
     * kh_srccheck_header_name_problem allows, none twice, none shadowing a
     * file on the include path); source plus headers at most
     * KH_COMPILE_MAX_SOURCE bytes; may be NULL */
    const kh_source *headers;
    size_t n_headers;
    const char *arch;             /* "sm_90a"; NULL: $KHLUA_ARCH, else the default */
    const char *const *options;   /* extra NVRTC options (may be NULL) */
    size_t n_options;
    const char *const *kernels;   /* kernels that must be in the cubin (manifest) */
    size_t n_kernels;
    double deadline_s;            /* 0: KH_COMPILE_DEFAULT_DEADLINE */
    int trusted;                  /* 1: written by people, skip the static checks
                                     (the header names are checked all the same) */
    int allow_device_launch;      /* static check: allow <<<>>> in device code */
    size_t max_source_bytes;      /* static check limit; 0: KH_SRCCHECK_MAX_BYTES */
    int no_pch;                   /* 1: do not pass -pch (a cold compile) */
    int no_cache;                 /* 1: neither read nor fill the cache */
    int isolate;                  /* 1: compile in a forked child killed at the
                                     deadline (see below); 0: in this process */
} kh_compile_req;

typedef struct kh_compile_timings { /* seconds */
    double check;    /* static checks */
    double key;      /* cache key (source, options, header stats) */
    double warm;     /* isolated only: creating the PCH for the includes here */
    double create;   /* nvrtcCreateProgram */
    double compile;  /* nvrtcCompileProgram */
    double extract;  /* log and cubin out of NVRTC */
    double parse;    /* cubin resources */
    double total;
} kh_compile_timings;

typedef struct kh_artifact {
    int ok;                       /* 1: cubin present and kernels found */
    unsigned char key[16];        /* kh_compile_key of the request */
    char hash[33];                /* key as 32 lowercase hex digits */
    unsigned char *cubin;         /* NULL unless ok */
    size_t cubin_len;
    char *log;                    /* NVRTC log (or check report), valid UTF-8, never NULL */
    size_t log_len;
    char *arch;
    char **options;               /* the exact NVRTC option list */
    size_t n_options;
    char nvrtc_version[16];       /* "13.0" */
    kh_cubin_info res;            /* per-kernel resources (empty unless ok) */
    kh_compile_timings t;
    int cache_hit;                /* 1: served from the in-memory cache */
    const char *pch;              /* "off", "created", "used or none", "heap-grown", ... */
    /* Where the artifact came from (compile_service.h): NULL or "in-process"
     * (kh_compile_build here), "server" (a compile server; server_pid says
     * which), "store" (the store-backed cache).  A static string. */
    const char *served_by;
    int server_pid;
} kh_artifact;

/* A compiler bound to e (which must outlive it).  Loading NVRTC is deferred
 * to the first build.  NULL only when out of memory. */
kh_compiler *kh_compile_new(kh_engine *e, kh_err *err);
void kh_compile_free(kh_compiler *c);

/* Compile req.  Outcomes:
 *   KH_OK        *out = a successful artifact (cubin, resources, log);
 *   KH_ECOMPILE  *out = an artifact with ok = 0 and the log (compiler errors,
 *                kh_compile_check's report, or missing manifest kernels);
 *                err->msg holds the first error line;
 *   KH_ETIMEOUT  the deadline passed (NVRTC cancelled); *out has the timings;
 *   KH_EINTR     Ctrl-C; *out as for ETIMEOUT;
 *   KH_EINVAL    bad request (no source, sources over KH_COMPILE_MAX_SOURCE,
 *                more than KH_COMPILE_MAX_HEADERS headers, a NUL byte in a
 *                trusted source, bad arch); *out = NULL;
 *   KH_ENODEV    NVRTC missing; *out = NULL.
 * The caller frees *out with kh_artifact_free. */
kh_status kh_compile_build(kh_compiler *c, const kh_compile_req *req, kh_artifact **out,
                           kh_err *err);
void kh_artifact_free(kh_artifact *a);

/* The content key: XXH3-128 over the source, the arch, the full option list
 * (minus -pch, which does not change the output), the NVRTC version, the
 * stat identity (path, size, mtime) of every system header the source and
 * its headers #include, resolved against the include paths, and every
 * candidate header's name and content (in name order: the order they are
 * given in changes nothing).  A request without headers keys as before
 * headers existed.  Public so the store-backed cache uses the same key.
 * KH_ENODEV when NVRTC is missing. */
kh_status kh_compile_key(kh_compiler *c, const kh_compile_req *req, unsigned char key[16],
                         kh_err *err);

/* The manifest's kernels (req->kernels) must be symbols of a's cubin, as
 * kh_compile_build and the compile service check them: KH_OK, or KH_ECOMPILE
 * with the missing kernel and the cubin's kernels in err->msg and appended to
 * a's log, the cubin dropped and a->ok cleared. */
kh_status kh_compile_check_kernels(const kh_compile_req *req, kh_artifact *a, kh_err *err);

/* What a request must pass before it compiles, as kh_compile_build and the
 * compile service run it: the header names (kh_srccheck_names), none the
 * name of a file on the include path (NVRTC would hand the candidate's text
 * to every #include of that name, the toolkit's own included), then, unless
 * req->trusted, kh_srccheck_run over the source and its headers.  KH_OK;
 * KH_ECOMPILE with every problem in *report (caller frees; NULL allowed) and
 * the first in err->msg; KH_ENOMEM. */
kh_status kh_compile_check(kh_compiler *c, const kh_compile_req *req, char **report,
                           kh_err *err);

/* Cache statistics and control. */
typedef struct kh_compile_cache_stats {
    size_t entries, bytes, hits, misses, evictions;
} kh_compile_cache_stats;
void kh_compile_cache_stats_get(const kh_compiler *c, kh_compile_cache_stats *s);
void kh_compile_cache_clear(kh_compiler *c);
/* Bound the cache (default 256 MiB); older entries are evicted first. */
void kh_compile_cache_limit(kh_compiler *c, size_t max_bytes);

/* The artifact as a JSON object (the cubin itself left out, its size in
 * "cubin_bytes"): ok, hash, arch, sm, nvrtc, options, cache_hit, pch, log,
 * kernels {name: {registers, shared_static, local_bytes, min_stack,
 * spill_instructions, max_threads, max_threads_per_block, reqntid, maxreg,
 * barriers, param_bytes, code_bytes}}, timings {check, key, warm, create, compile, extract, parse, total}
 * in seconds, served_by ("in-process", "server", "store") and, for a server,
 * server_pid.  New reference; NULL when out of memory. */
struct json_t;
struct json_t *kh_artifact_to_json(const kh_artifact *a);

/* The arch a request without one gets: $KHLUA_ARCH, else "sm_90a". */
const char *kh_compile_default_arch(void);

#endif
