/* eval.c: the coordinator's side of evaluation (eval.h, docs/evaluation.md).
 * Owns: choosing workloads, resolving manifests into concrete `evaluate`
 * requests, building artifacts (hostcc for the host backend, the compile
 * core for cuda), the reference-output cache, the comparison of returned
 * outputs (engine/check, FlashInfer-Bench's aggregation), the hardened
 * checks' verdicts, the speed-of-light bound, and the verdict JSON.
 * Running anything a candidate wrote is left to the workers (role_host.c,
 * role_gpu.c) behind the supervisor's pools.  Scale-out (docs/scale-out.md):
 * the workers' placement (GPUs, workers per GPU, hosts, launch template) and
 * the scheduler that runs the requests of several workloads in parallel. */
#include "eval/eval.h"

#include "gpu/bench.h"
#include "store/candidate.h"
#include "store/evaluation.h"
#include "eval/check.h"
#include "compile/compile.h"
#include "core/doctor.h"
#include "compile/hostcc.h"
#include "core/scrub.h"
#include "eval/pyref.h"
#include "task/rng.h"
#include "task/safetensors.h"
#include "eval/sanitizer.h"
#include "eval/shapes.h"
#include "store/store.h"
#include "worker/supervisor.h"
#include "task/task.h"
#include "task/tensor.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#if defined(__SANITIZE_ADDRESS__)
#define KH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KH_ASAN 1
#endif
#endif

/* ---- caches --------------------------------------------------------------- */
typedef struct art {
    struct art *next;
    char key[33];       /* source hash (kind, paths, contents) */
    int host;           /* 1: shared object for the host worker, 0: cubin */
    int so;             /* 1: trusted nvcc shared object for the gpu worker (cuda_so) */
    int ok;
    unsigned char *bytes;
    size_t len;
    char hash[33];      /* of the bytes */
    char *log;
} art;

typedef struct refout {
    struct refout *next;
    char *def, *uuid;
    uint64_t seed;
    size_t n;
    char **names;
    unsigned char **bytes;
    size_t *lens;
    json_t *ranges;     /* NULL: whole outputs; else {name: [[start, n], ...]}: the bytes
                           hold those element ranges only (a verified timed call's) */
} refout;

typedef struct refperf {
    struct refperf *next;
    char *def, *uuid, *protocol;
    double latency_ns;
} refperf;

/* The copy bandwidth of one GPU, by UUID (GPUs differ, even of one model). */
typedef struct peak {
    struct peak *next;
    char uuid[96];
    double bw;          /* bytes/s with the margin; < 0: the worker could not say */
} peak;

struct job;

#define MAX_GPUS 64
#define KH_MAX_VERIFIED 256 /* verified timed calls per request, at most */
#define KH_VERIFY_RANGES 64  /* a large output's verified call returns 64 runs */
#define KH_VERIFY_ELEMS 512  /* of 512 elements each */
#define MAX_HOSTS 64

struct kh_eval {
    kh_engine *e;
    char *exe, *launch;
    uint64_t host_as;
    kh_pool *host, *gpu;
    kh_compiler *cc;
    art *arts;
    refout *refs;
    refperf *perfs;
    char as_env[64], asan_env[1024];
    const char *env[3];
    kh_store *store;   /* borrowed (cfg) or opened here on first record */
    int own_store;
    /* placement (kh_eval_opts.gpus ...); place_key says what the pools were
     * built for */
    char place_key[2048];
    char gpus_spec[512];
    const char *place_launch;           /* the opts' or cfg's launch spec (borrowed: key) */
    char launch_buf[1024];
    int per_gpu, host_workers;
    char gpu_ids[MAX_GPUS][128];
    size_t ngpus;                       /* 0: the default device, not pinned */
    int gpus_resolved;
    char hosts[MAX_HOSTS][256];
    size_t nhosts;
    char tpl_host[1024], tpl_gpu[1024];
    const char *genv[3];
    peak *peaks;
    struct job *jobs;                   /* this run's worker requests (the scheduler) */
};

static char *dupstr(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static void hex128(const void *data, size_t len, char out[33])
{
    XXH128_hash_t h = XXH3_128bits(data, len);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

kh_eval *kh_eval_new(kh_engine *e, const kh_eval_config *cfg, kh_err *err)
{
    kh_eval *ev = calloc(1, sizeof *ev);
    if (!ev) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    ev->e = e;
    ev->store = cfg ? cfg->store : NULL;
    ev->host_as = cfg && cfg->host_as_bytes ? cfg->host_as_bytes : (uint64_t)8 << 30;
    if ((cfg && cfg->exe && !(ev->exe = dupstr(cfg->exe))) ||
        (cfg && cfg->launch && !(ev->launch = dupstr(cfg->launch)))) {
        kh_eval_free(ev);
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    return ev;
}

static void refs_free(kh_eval *ev)
{
    for (refout *r = ev->refs, *n; r; r = n) {
        n = r->next;
        for (size_t i = 0; i < r->n; i++) {
            free(r->names[i]);
            free(r->bytes[i]);
        }
        free(r->names);
        free(r->bytes);
        free(r->lens);
        free(r->def);
        free(r->uuid);
        json_decref(r->ranges);
        free(r);
    }
    ev->refs = NULL;
}

/* Reference outputs are kept between runs for the seeds a run shares with
 * an earlier one (a fixed --seed); runs with fresh seeds share none, so
 * past a size the whole cache goes, before a run starts. */
static void refs_trim(kh_eval *ev)
{
    size_t total = 0;
    for (refout *r = ev->refs; r; r = r->next)
        for (size_t i = 0; i < r->n; i++)
            total += r->lens[i];
    if (total > (size_t)512 << 20)
        refs_free(ev);
}

void kh_eval_free(kh_eval *ev)
{
    if (!ev)
        return;
    kh_pool_free(ev->host);
    kh_pool_free(ev->gpu);
    for (peak *p = ev->peaks, *nx; p; p = nx) {
        nx = p->next;
        free(p);
    }
    if (ev->own_store)
        kh_store_close(ev->store);
    if (ev->cc)
        kh_compile_free(ev->cc);
    for (art *a = ev->arts, *n; a; a = n) {
        n = a->next;
        free(a->bytes);
        free(a->log);
        free(a);
    }
    refs_free(ev);
    for (refperf *p = ev->perfs, *n; p; p = n) {
        n = p->next;
        free(p->def);
        free(p->uuid);
        free(p->protocol);
        free(p);
    }
    free(ev->exe);
    free(ev->launch);
    free(ev);
}

void kh_eval_opts_default(kh_eval_opts *o)
{
    memset(o, 0, sizeof *o);
    o->protocol = "official";
    o->timing = 1;
    o->trials = 3;
    o->seed = KH_EVAL_SEED_RANDOM;
    o->warmup = o->iters = o->timing_trials = -1;
    o->rotate_inputs = 3;
    o->verify_timed_fraction = 1.0;
    o->cold = 1;
    o->deterministic = -1;
    o->deadline_s = 300;
    o->atol = o->rtol = o->required_matched_ratio = -1;
    o->time_reference = 1;
    o->record = 1;
    o->round_index = -1;
}

/* ---- the store ------------------------------------------------------------
 * One update per verdict: the task (named by its definition) and the candidate
 * (content-addressed by the solution JSON) if not there yet, the raw samples
 * as a blob (float64 little-endian, one per timed call, in call order), and
 * the evaluation record. */
typedef struct rec_ctx {
    const kh_eval_opts *o;    /* protocol, timing, and a run's context */
    const kh_task_def *d;
    const kh_candidate *cand; /* its one identity (candidate.h) */
    const char *sol_name;
    json_t *trace;
    const void *samples;
    size_t samples_len;
    char blob[33];
    char cand_id[KH_STORE_ID_MAX], eval_id[KH_STORE_ID_MAX];
} rec_ctx;

static kh_status rec_fn(kh_store_txn *tx, void *arg, kh_err *err)
{
    rec_ctx *r = arg;
    char task_id[KH_STORE_ID_MAX];
    kh_status st = kh_task_record_put(tx, r->d->name, r->d->json, NULL, task_id, err);
    if (st)
        return st;
    snprintf(r->cand_id, sizeof r->cand_id, "%s", r->cand->id);
    if ((st = kh_candidate_put(tx, r->cand, task_id, err)))
        return st;
    r->blob[0] = 0;
    if (r->samples_len) {
        kh_hash bh;
        if ((st = kh_store_txn_put_blob(tx, r->samples, r->samples_len, &bh, err)))
            return st;
        kh_hash_hex(&bh, r->blob);
    }
    json_t *kl = json_object_get(json_object_get(r->trace, "evaluation"), "khlua");
    if (r->blob[0])
        json_object_set_new(kl, "samples_blob", json_string(r->blob));
    kh_evaluation_facts f = {.task = task_id,
                             .candidate = r->cand_id,
                             .definition = r->d->name,
                             .solution = r->sol_name,
                             .trace = r->trace,
                             .samples_blob = r->blob[0] ? r->blob : NULL,
                             .timing = r->o->timing,
                             .run = r->o->run,
                             .round_index = r->o->run ? r->o->round_index : -1,
                             .purpose = r->o->purpose};
    return kh_evaluation_put(tx, &f, r->eval_id, err);
}

/* Record a verdict; on success the trace carries khlua.record and
 * khlua.samples_blob. */
static kh_status record(kh_eval *ev, const kh_eval_opts *o, const kh_task_def *d,
                        const kh_task_solution *sol, json_t *trace, const double *samples,
                        size_t n, kh_err *err)
{
    kh_store *use = o->store;
    if (!use && !ev->store) {
        kh_status st = kh_store_open(kh_engine_store_path(ev->e), NULL, &ev->store, err);
        if (st)
            return st;
        ev->own_store = 1;
    }
    unsigned char *raw = n ? malloc(n * 8) : NULL;
    if (n && !raw)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &samples[i], 8);
        for (int b = 0; b < 8; b++)
            raw[i * 8 + (size_t)b] = (unsigned char)(u >> (8 * b));
    }
    kh_candidate cand;
    kh_status st = kh_candidate_of(sol->json, &cand, err);
    if (st) {
        free(raw);
        return kh_err_prefix(err, "solution %s", sol->name ? sol->name : "?");
    }
    rec_ctx r = {.o = o, .d = d, .cand = &cand, .sol_name = sol->name, .trace = trace,
                 .samples = raw, .samples_len = n * 8};
    st = kh_store_update(use ? use : ev->store, rec_fn, &r, err);
    kh_candidate_free(&cand); /* its bytes outlived the update (write replay) */
    free(raw);
    if (!st)
        json_object_set_new(json_object_get(json_object_get(trace, "evaluation"), "khlua"),
                            "record", json_string(r.eval_id));
    return st;
}

/* ---- placement and pools --------------------------------------------------- */

/* Split "a,b,c" into out[][w]; KH_EINVAL on an empty or over-long entry. */
static kh_status split_list(const char *what, const char *s, char *out, size_t w, size_t max,
                            size_t *n, kh_err *err)
{
    *n = 0;
    for (const char *q = s; *q;) {
        size_t l = strcspn(q, ",");
        if (l == 0 || l >= w)
            return kh_err_set(err, KH_EINVAL, "%s: bad entry '%.*s' in '%s'", what, (int)l, q, s);
        if (*n == max)
            return kh_err_set(err, KH_EINVAL, "%s: more than %zu entries", what, max);
        memcpy(out + *n * w, q, l);
        out[*n * w + l] = '\0';
        (*n)++;
        q += l + (q[l] == ',');
    }
    return KH_OK;
}

static void free_pools(kh_eval *ev)
{
    kh_pool_free(ev->host);
    kh_pool_free(ev->gpu);
    ev->host = ev->gpu = NULL;
}

static kh_status resolve_gpus(kh_eval *ev, kh_err *err);

/* Take the placement the options ask for; the pools are rebuilt when it
 * changed.  GPUs are resolved later, when a gpu worker is first needed. */
static kh_status place(kh_eval *ev, const kh_eval_opts *o, kh_err *err)
{
    const char *launch = o->launch && *o->launch ? o->launch : ev->launch;
    int k = o->workers_per_gpu > 0 ? o->workers_per_gpu : 1;
    int h = o->host_workers > 0 ? o->host_workers : 1;
    char key[sizeof ev->place_key];
    snprintf(key, sizeof key, "%s|%s|%d|%d|%s", o->gpus ? o->gpus : "", launch ? launch : "", k,
             h, o->hosts ? o->hosts : "");
    if (!strcmp(key, ev->place_key))
        return KH_OK;
    if (o->workers_per_gpu < 0 || k > 64)
        return kh_err_set(err, KH_EINVAL, "workers per GPU must be 1 to 64, got %d",
                          o->workers_per_gpu);
    if (o->host_workers < 0 || h > 256)
        return kh_err_set(err, KH_EINVAL, "host workers must be 1 to 256, got %d",
                          o->host_workers);
    if (o->gpus && strlen(o->gpus) >= sizeof ev->gpus_spec)
        return kh_err_set(err, KH_EINVAL, "--gpus: list too long");
    if (launch && strlen(launch) >= sizeof ev->launch_buf)
        return kh_err_set(err, KH_EINVAL, "launch template too long");
    const char *th, *tg;
    kh_status st;
    if ((st = kh_launch_template(launch, "host", &th, err)) ||
        (st = kh_launch_template(launch, "gpu", &tg, err)))
        return st;
    const char *kind = kh_launch_kind(launch);
    size_t nh = 0;
    if (o->hosts && *o->hosts &&
        (st = split_list("hosts", o->hosts, &ev->hosts[0][0], sizeof ev->hosts[0], MAX_HOSTS, &nh,
                         err)))
        return st;
    if (!strcmp(kind, "ssh") && nh == 0)
        return kh_err_set(err, KH_EINVAL, "launch 'ssh' needs hosts (--hosts a,b)");
    if (!strcmp(kind, "srun") && k > 1)
        return kh_err_set(err, KH_EINVAL, "launch 'srun' gives every worker a GPU of its own: "
                          "several workers per GPU need the local or ssh launch");
    free_pools(ev);
    ev->nhosts = nh;
    ev->per_gpu = k;
    ev->host_workers = h;
    snprintf(ev->gpus_spec, sizeof ev->gpus_spec, "%s", o->gpus ? o->gpus : "");
    snprintf(ev->launch_buf, sizeof ev->launch_buf, "%s", launch ? launch : "");
    ev->place_launch = launch ? ev->launch_buf : NULL;
    snprintf(ev->tpl_host, sizeof ev->tpl_host, "%s", th == launch ? ev->launch_buf : th);
    snprintf(ev->tpl_gpu, sizeof ev->tpl_gpu, "%s", tg == launch ? ev->launch_buf : tg);
    ev->gpus_resolved = 0;
    ev->ngpus = 0;
    /* what needs no probe is checked now, before any work starts */
    if (strcmp(kind, "local") && strcmp(kind, "template") && (st = resolve_gpus(ev, err))) {
        ev->place_key[0] = '\0';
        return st;
    }
    snprintf(ev->place_key, sizeof ev->place_key, "%s", key);
    return KH_OK;
}

/* How many GPUs Slurm gave this allocation on this node; 0 when it does not
 * say. */
static size_t slurm_gpus(void)
{
    const char *v = getenv("SLURM_GPUS_ON_NODE");
    if (v && atoi(v) > 0)
        return (size_t)atoi(v);
    v = getenv("SLURM_JOB_GPUS");
    if (v && *v) {
        size_t n = 1;
        for (; *v; v++)
            n += *v == ',';
        return n;
    }
    return 0;
}

/* ev->gpu_ids from the gpus spec: probed in a child process for local
 * launches (the coordinator never calls the driver), counted from the
 * allocation for srun, taken as given for remote shells. */
static kh_status resolve_gpus(kh_eval *ev, kh_err *err)
{
    if (ev->gpus_resolved)
        return KH_OK;
    const char *spec = ev->gpus_spec;
    const char *kind = kh_launch_kind(ev->place_launch);
    ev->ngpus = 0;
    if (!*spec) {
        ev->gpus_resolved = 1;
        return KH_OK;
    }
    char *end;
    long count = strtol(spec, &end, 10);
    int is_count = *end == '\0' && end != spec;
    if (is_count && (count < 1 || count > MAX_GPUS))
        return kh_err_set(err, KH_EINVAL, "--gpus %s: a bare number is how many GPUs (1 to %d); "
                          "to name GPUs give a list of indices or UUIDs (e.g. 0,2)", spec,
                          MAX_GPUS);
    if (!strcmp(kind, "srun")) {
        /* Slurm picks the devices: one slot per GPU, CUDA_VISIBLE_DEVICES its own */
        size_t n = is_count ? (size_t)count : 0;
        if (!strcmp(spec, "all") && !(n = slurm_gpus()))
            return kh_err_set(err, KH_EINVAL, "--gpus all with srun: no allocation says how "
                              "many GPUs (SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS); give a count");
        if (!n) {
            size_t m;
            kh_status st = split_list("--gpus", spec, &ev->gpu_ids[0][0], sizeof ev->gpu_ids[0],
                                      MAX_GPUS, &m, err);
            if (st)
                return st;
            n = m;
        }
        for (size_t i = 0; i < n; i++)
            ev->gpu_ids[i][0] = '\0';
        ev->ngpus = n > MAX_GPUS ? MAX_GPUS : n;
        ev->gpus_resolved = 1;
        return KH_OK;
    }
    if (!strcmp(kind, "ssh")) {
        if (!strcmp(spec, "all"))
            return kh_err_set(err, KH_EINVAL, "--gpus all cannot be probed on remote hosts: give "
                              "a count or a list of indices");
        if (is_count) {
            for (long i = 0; i < count; i++)
                snprintf(ev->gpu_ids[i], sizeof ev->gpu_ids[i], "%ld", i);
            ev->ngpus = (size_t)count;
        } else {
            kh_status st = split_list("--gpus", spec, &ev->gpu_ids[0][0], sizeof ev->gpu_ids[0],
                                      MAX_GPUS, &ev->ngpus, err);
            if (st)
                return st;
        }
        ev->gpus_resolved = 1;
        return KH_OK;
    }
    json_t *probe = NULL;
    kh_status st = kh_doctor_probe_gpus(60.0, &probe, err);
    if (st)
        return kh_err_prefix(err, "--gpus %s: cannot list the GPUs", spec);
    json_t *gs = json_object_get(probe, "gpus");
    size_t nv = json_array_size(gs);
    if (nv == 0) {
        json_decref(probe);
        return kh_err_set(err, KH_ENODEV, "--gpus %s: no GPU is visible", spec);
    }
    if (!strcmp(spec, "all") || is_count) {
        size_t n = is_count ? (size_t)count : nv;
        if (n > nv) {
            json_decref(probe);
            return kh_err_set(err, KH_EINVAL, "--gpus %ld: only %zu GPU%s visible", count, nv,
                              nv == 1 ? " is" : "s are");
        }
        for (size_t i = 0; i < n && i < MAX_GPUS; i++)
            snprintf(ev->gpu_ids[i], sizeof ev->gpu_ids[i], "%lld",
                     (long long)json_integer_value(
                         json_object_get(json_array_get(gs, i), "index")));
        ev->ngpus = n > MAX_GPUS ? MAX_GPUS : n;
    } else {
        if ((st = split_list("--gpus", spec, &ev->gpu_ids[0][0], sizeof ev->gpu_ids[0], MAX_GPUS,
                             &ev->ngpus, err))) {
            json_decref(probe);
            return st;
        }
        for (size_t i = 0; i < ev->ngpus; i++) {
            int found = 0;
            for (size_t k = 0; k < nv && !found; k++) {
                json_t *g = json_array_get(gs, k);
                char idx[32];
                snprintf(idx, sizeof idx, "%lld",
                         (long long)json_integer_value(json_object_get(g, "index")));
                const char *u = json_string_value(json_object_get(g, "uuid"));
                found = !strcmp(idx, ev->gpu_ids[i]) || (u && !strcmp(u, ev->gpu_ids[i]));
            }
            if (!found) {
                json_decref(probe);
                return kh_err_set(err, KH_EINVAL, "--gpus: GPU '%s' is not visible (%zu GPU%s: "
                                  "indices 0 to %zu)", ev->gpu_ids[i], nv, nv == 1 ? "" : "s",
                                  nv - 1);
            }
        }
    }
    json_decref(probe);
    ev->gpus_resolved = 1;
    return KH_OK;
}

/* Slots per GPU group: the workers of one GPU are consecutive slots. */
static size_t group_size(const kh_eval *ev, int host) { return host ? 1 : (size_t)ev->per_gpu; }

static kh_pool *pool_for(kh_eval *ev, int host, uint64_t mem, kh_err *err)
{
    kh_pool **pp = host ? &ev->host : &ev->gpu;
    if (host && mem && mem != ev->host_as) {
        kh_pool_free(ev->host);
        ev->host = NULL;
        ev->host_as = mem;
    }
    if (*pp)
        return *pp;
    if (!ev->place_key[0]) {
        kh_eval_opts d;
        kh_eval_opts_default(&d);
        if (place(ev, &d, err))
            return NULL;
    }
    /* the pool keeps pointers to these: they live in ev */
    char *as_env = ev->as_env, *asan_env = ev->asan_env;
    const char **env = host ? ev->env : ev->genv;
    size_t ne = 0;
    if (host) {
        snprintf(as_env, sizeof ev->as_env, "KHLUA_HOST_AS_BYTES=%llu",
                 (unsigned long long)ev->host_as);
        env[ne++] = as_env;
#ifdef KH_ASAN
        /* ASan needs its terabytes of shadow address space, so the worker
         * cannot take an address-space limit: bound its resident memory. */
        const char *cur = getenv("ASAN_OPTIONS");
        snprintf(asan_env, sizeof ev->asan_env, "ASAN_OPTIONS=%s%shard_rss_limit_mb=%llu",
                 cur ? cur : "", cur && *cur ? ":" : "",
                 (unsigned long long)(ev->host_as >> 20));
        env[ne++] = asan_env;
#else
        (void)asan_env;
#endif
    } else {
        if (resolve_gpus(ev, err))
            return NULL;
        if (ev->ngpus && strcmp(kh_launch_kind(ev->place_launch), "srun")) {
            /* each worker sees only its GPU, as device 0 */
            env[ne++] = "CUDA_VISIBLE_DEVICES={gpu}";
            env[ne++] = "KHLUA_GPU=0";
        }
    }
    env[ne] = NULL;
    size_t nh = ev->nhosts ? ev->nhosts : 1;
    size_t ng = ev->ngpus ? ev->ngpus : 1;
    size_t n = host ? (size_t)ev->host_workers * nh : ng * nh * (size_t)ev->per_gpu;
    kh_wproc_opts wo = {.role = host ? "host" : "gpu", .launch = host ? ev->tpl_host : ev->tpl_gpu,
                        .exe = ev->exe, .env = ne ? env : NULL};
    kh_pool *p = kh_pool_new(&wo, n, err);
    for (size_t i = 0; p && i < n; i++) {
        size_t g = i / group_size(ev, host); /* the GPU group (host: the slot) */
        const char *hn = ev->nhosts ? ev->hosts[host ? i % nh : g / ng] : NULL;
        const char *gn = host ? NULL : ev->gpu_ids[g % ng];
        if (kh_pool_place(p, i, gn, hn, err)) {
            kh_pool_free(p);
            p = NULL;
        }
    }
    *pp = p;
    return *pp;
}

/* ---- building ------------------------------------------------------------- */
static int is_host(const kh_task_solution *sol) { return sol->manifest && sol->manifest->host; }
static int is_so(const kh_task_solution *sol) { return sol->manifest && sol->manifest->so; }

static kh_status write_whole(const char *path, const void *d, size_t n, kh_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kh_err_set(err, KH_EIO, "cannot write %s: %s", path, strerror(errno));
    size_t w = fwrite(d, 1, n, f);
    if (fclose(f) || w != n)
        return kh_err_set(err, KH_EIO, "cannot write %s", path);
    return KH_OK;
}

static kh_status read_whole(const char *path, unsigned char **d, size_t *n, kh_err *err)
{
    char *b;
    if (kh_read_file(path, &b, n))
        return kh_err_set(err, errno == ENOMEM ? KH_ENOMEM : KH_EIO, "cannot read %s: %s", path,
                          strerror(errno));
    *d = (unsigned char *)b;
    return KH_OK;
}

static kh_status build(kh_eval *ev, const kh_task_solution *sol, int trusted, art **out,
                       kh_err *err)
{
    json_t *srcs = json_object_get(sol->json, "sources");
    int host = is_host(sol), so = is_so(sol);
    const kh_task_manifest *man = sol->manifest;
    /* key: backend, trust, then every (path, content) */
    XXH3_state_t *hs = XXH3_createState();
    if (!hs)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    XXH3_128bits_reset(hs);
    const char *kind = host ? "so" : so ? "cuda_so" : "cubin";
    XXH3_128bits_update(hs, kind, strlen(kind) + 1);
    for (size_t l = 0; so && l < man->nlink; l++) /* -lcublas or not: another binary */
        XXH3_128bits_update(hs, man->link[l], strlen(man->link[l]) + 1);
    XXH3_128bits_update(hs, trusted ? "T" : "U", 1);
    size_t i;
    json_t *s;
    json_array_foreach(srcs, i, s) {
        const char *p = json_string_value(json_object_get(s, "path"));
        const char *c = json_string_value(json_object_get(s, "content"));
        XXH3_128bits_update(hs, p ? p : "", (p ? strlen(p) : 0) + 1);
        XXH3_128bits_update(hs, c ? c : "", (c ? strlen(c) : 0) + 1);
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(hs));
    XXH3_freeState(hs);
    char key[33];
    for (int k = 0; k < 16; k++)
        snprintf(key + 2 * k, 3, "%02x", canon.digest[k]);
    for (art *a = ev->arts; a; a = a->next)
        if (!strcmp(a->key, key)) {
            *out = a;
            return KH_OK;
        }
    art *a = calloc(1, sizeof *a);
    if (!a)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    memcpy(a->key, key, 33);
    a->host = host;
    a->so = so;
    kh_status st = KH_OK;
    if (host || so) {
        /* host: cc; cuda_so: the trusted nvcc path (a package's own solution,
         * checked in kh_eval_run), linked with the manifest's libraries */
        const char *tmp = getenv("TMPDIR");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/khlua-build-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            free(a);
            return kh_err_set(err, KH_EIO, "mkdtemp: %s", strerror(errno));
        }
        char path[4600], sopath[4600], entry[4600] = "";
        /* a candidate's files, which its compile may read (ccguard.h) */
        size_t nsrc = json_array_size(srcs), nown = 0;
        char **own = calloc(nsrc + 1, sizeof *own);
        if (!own)
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
        json_array_foreach(srcs, i, s) {
            if (st)
                break;
            const char *p = json_string_value(json_object_get(s, "path"));
            const char *c = json_string_value(json_object_get(s, "content"));
            if (!p || !c || strchr(p, '/') || p[0] == '.') {
                st = kh_err_set(err, KH_EUNSUPPORTED,
                                "host sources must be plain file names (got '%s')", p ? p : "?");
                break;
            }
            snprintf(path, sizeof path, "%s/%s", dir, p);
            if ((st = write_whole(path, c, strlen(c), err)))
                break;
            if (!(own[nown++] = dupstr(path))) {
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
                break;
            }
            if (sol->entry_file && !strcmp(p, sol->entry_file))
                snprintf(entry, sizeof entry, "%s", path);
        }
        if (!st && !entry[0])
            st = kh_err_set(err, KH_EINVAL, "entry file '%s' is not among the sources",
                            sol->entry_file ? sol->entry_file : "?");
        snprintf(sopath, sizeof sopath, "%s/candidate.so", dir);
        if (!st) {
            kh_hostcc_result res;
            char inc[4200], libs[16][140], rpath[4200];
            snprintf(inc, sizeof inc, "-I%s", dir);
            const char *flags[19] = {inc, "-lm"};
            size_t nf = 2;
            for (size_t l = 0; so && l < man->nlink && l < 16; l++) {
                snprintf(libs[l], sizeof libs[l], "-l%s", man->link[l]);
                flags[nf++] = libs[l];
            }
            if (so && man->nlink) {
                /* the toolkit's libraries (libcublas) found at load time without
                 * LD_LIBRARY_PATH in the gpu worker */
                const char *home = kh_engine_cuda_home(ev->e);
                snprintf(rpath, sizeof rpath, "-Xlinker=-rpath,%s/lib64",
                         home && *home ? home : "/usr/local/cuda");
                flags[nf++] = rpath;
            }
            /* a candidate's C: staged and checked, its own files and system
             * headers only (-I of its directory is not needed: "x.h" is
             * looked for next to the file that includes it) */
            kh_status bs =
                host && !trusted
                    ? kh_hostcc_build_candidate(ev->e, entry, sopath, (const char *const *)own,
                                                flags + 1, 1, 120, &res, err)
                    : kh_hostcc_build(ev->e, so ? KH_HOSTCC_NVCC_SO : KH_HOSTCC_CC_SO, entry,
                                      sopath, NULL, flags, nf, 120, &res, err);
            if (bs == KH_OK) {
                st = read_whole(sopath, &a->bytes, &a->len, err);
                a->ok = st == KH_OK;
            } else if (bs == KH_ECOMPILE || bs == KH_ETIMEOUT) {
                const char *text = res.log && *res.log ? res.log : err->msg;
                a->log = kh_scrub_text(text, strlen(text), KH_SCRUB_MAX, KH_SCRUB_HEAD);
                st = a->log ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
            } else {
                st = bs;
            }
            if (bs != KH_EINVAL && bs != KH_ENOMEM)
                kh_hostcc_result_free(&res);
        }
        json_array_foreach(srcs, i, s) {
            const char *p = json_string_value(json_object_get(s, "path"));
            if (p && !strchr(p, '/')) {
                snprintf(path, sizeof path, "%s/%s", dir, p);
                unlink(path);
            }
        }
        unlink(sopath);
        rmdir(dir);
        for (size_t k = 0; own && k < nown; k++)
            free(own[k]);
        free(own);
    } else {
        /* the entry file is the translation unit; the other sources are its
         * headers, #include-able by their paths */
        const char *src = NULL;
        size_t src_len = 0, nh = 0;
        kh_source *hdrs = NULL;
        st = kh_task_cuda_sources(sol, &src, &src_len, &hdrs, &nh, err);
        if (!st && !ev->cc && !(ev->cc = kh_compile_new(ev->e, err)))
            st = err->code;
        if (!st) {
            const kh_task_manifest *m = sol->manifest;
            const char *kernels[64];
            size_t nk = 0;
            for (size_t l = 0; l < m->nlaunches && nk < 64; l++)
                kernels[nk++] = m->launches[l].kernel;
            kh_compile_req rq = {.source = src, .source_len = src_len,
                                 .name = sol->entry_file, .headers = hdrs, .n_headers = nh,
                                 .kernels = kernels, .n_kernels = nk,
                                 .trusted = trusted, .isolate = !trusted};
            kh_artifact *ar = NULL;
            kh_status bs = kh_compile_build(ev->cc, &rq, &ar, err);
            if (bs == KH_OK) {
                a->bytes = malloc(ar->cubin_len);
                if (!a->bytes)
                    st = kh_err_set(err, KH_ENOMEM, "out of memory");
                else {
                    memcpy(a->bytes, ar->cubin, ar->cubin_len);
                    a->len = ar->cubin_len;
                    a->ok = 1;
                }
            } else if (bs == KH_ECOMPILE || bs == KH_ETIMEOUT) {
                const char *text = ar && ar->log ? ar->log : err->msg;
                a->log = kh_scrub_text(text, strlen(text), KH_SCRUB_MAX, KH_SCRUB_HEAD);
                if (!a->log)
                    st = kh_err_set(err, KH_ENOMEM, "out of memory");
            } else {
                st = bs;
            }
            kh_artifact_free(ar);
        }
        free(hdrs);
    }
    if (st) {
        free(a->bytes);
        free(a->log);
        free(a);
        return st;
    }
    if (a->ok)
        hex128(a->bytes, a->len, a->hash);
    a->next = ev->arts;
    ev->arts = a;
    *out = a;
    return KH_OK;
}

/* ---- requests ------------------------------------------------------------- */
/* Where a workload's Python reference outputs came from, and the
 * coordinator's own seconds on it (coord_s), across rounds. */
typedef struct pyref_stat {
    const char *source;
    double seconds;
    int runs, cached;
    double coord_s;
} pyref_stat;

typedef struct wctx {
    char task_hash[17]; /* the package as loaded (kh_task_fingerprint) */
    /* the solution's file holds an error (kh_task_solution_errors): every
     * workload's verdict is COMPILE_ERROR with it; empty when none */
    char bad_solution[1024];
    kh_eval *ev;
    const kh_eval_opts *o;
    const kh_task_def *d;
    const kh_task_workload *w;
    const char *base;        /* safetensors paths are relative to this */
    uint64_t seeds[KH_TASK_MAX_SAMPLING_TRIALS]; /* 64 at most, but for sampling */
    size_t ntrials;
    /* the run's base seed (opts.seed, else drawn from the OS CSPRNG) and,
     * derived from it per workload, the seed of the timing inputs and of
     * the schedule of verified timed calls: secret to the candidate */
    uint64_t base_seed, timing_seed, sample_seed;
    int timed_refs; /* ref_outputs is fetching verified timed calls' references */
    json_t **trial_ranges; /* per seed, NULL or the element ranges to return (borrowed) */
    int ref_gpu;           /* the trusted reference runs in the gpu worker */
    /* a drawn shape (opts.shapes): the listed workload it came from; its
     * check is correctness alone */
    const kh_task_workload *shape_of;
    json_t *shapes_info; /* {asked, drawn, note} when shapes were asked for */
    kh_check_evaluator evaluator;
    kh_check_opts copts;
    /* payload under construction: artifact first, then safetensors bytes */
    unsigned char *pl;
    size_t pl_len;
    /* reference outputs from the definition's Python run (no trusted
     * reference): where this workload's came from, and the Python time */
    const char *pyref_source; /* "memory", "store", "python" (the last one used) */
    double pyref_seconds;
    int pyref_runs, pyref_cached;
    /* seconds this workload's earlier eval_workload calls took, and when
     * this one began: the coordinator's own work on it (its requests wait
     * between rounds, outside), khlua.coordinator_seconds */
    double coord_s, call_t0;
    /* the inputs of (in_w, in_seed) regenerated here, for evaluators that
     * need them (DSA top-k: reachability and scores); freed by in_free */
    kh_tensor *ins[64];
    const kh_task_workload *in_w;
    uint64_t in_seed;
    int in_ok;
    /* the scheduler: this workload's index, and whether a request it needs
     * has not been answered yet (eval_workload then stops, to be run again
     * once the requests of every workload have run in parallel) */
    size_t wl;
    int pending;
    const struct job *last;  /* the job behind the last reply handed out */
    const struct job *ref_timing; /* the job that timed the reference (this workload) */
    /* sampling: this workload's probs (softmax of randn from seeds[0] and the
     * input's stream, or the workload's safetensors), made here and sent as
     * bytes so every validation call gets the same distribution; freed by
     * probs_free */
    kh_tensor *probs;
    const kh_task_workload *probs_w;
    uint64_t probs_seed;
    double tvd_threshold;
    /* sampling: FIB's thresholding method and valid mask [batch * vocab]
     * (made with probs, freed by probs_free); tile > 1: the TVD phase's
     * requests, every tensor input repeated tile times along its first axis
     * and the axes those requests use (axes_over); light: inputs_unchanged
     * and guards alone (no poison runs) */
    kh_sampling_method smethod;
    unsigned char *smask;
    int64_t tile;
    const int64_t *axes_over;
    int light;
    uint64_t tile_seed; /* seeds[0] of the workload while the TVD phase's own seeds are set */
} wctx;

static void in_free(wctx *c)
{
    for (size_t i = 0; i < 64; i++) {
        kh_tensor_free(c->ins[i]);
        c->ins[i] = NULL;
    }
    c->in_ok = 0;
}

static void probs_free(wctx *c)
{
    kh_tensor_free(c->probs);
    c->probs = NULL;
    c->probs_w = NULL;
    free(c->smask);
    c->smask = NULL;
}

static kh_status host_inputs(wctx *c, uint64_t seed, kh_err *err);
static const kh_tensor *input_named(wctx *c, const char *name);

/* The seed of the workload's inputs: seeds[0], or the saved one while the
 * TVD phase's requests hold their own seeds. */
static uint64_t base_seed(const wctx *c) { return c->tile ? c->tile_seed : c->seeds[0]; }

/* The sampling evaluator's probs for this workload (see wctx). */
static kh_status sampling_probs(wctx *c, const kh_tensor **out, kh_err *err)
{
    if (c->probs && c->probs_w == c->w && c->probs_seed == base_seed(c)) {
        *out = c->probs;
        return KH_OK;
    }
    probs_free(c);
    size_t idx = 0;
    const kh_task_tensor *t = NULL;
    for (size_t i = 0; i < c->d->ninputs && !t; i++)
        if (!strcmp(c->d->inputs[i].name, "probs"))
            t = &c->d->inputs[(idx = i)];
    if (!t || t->is_scalar || t->rank != 2 || strcmp(t->dtype, "float32"))
        return kh_err_set(err, KH_EINVAL, "sampling evaluator: '%s' needs an input 'probs', "
                          "float32 [batch_size, vocab_size]", c->d->name);
    int64_t shape[2] = {c->w->axes[t->dims[0]], c->w->axes[t->dims[1]]};
    if (shape[0] < 1 || shape[1] < 1)
        return kh_err_set(err, KH_EINVAL, "workload %s: probs is [%lld, %lld]: nothing to "
                          "sample", c->w->uuid, (long long)shape[0], (long long)shape[1]);
    json_t *in = json_object_get(json_object_get(c->w->json, "inputs"), "probs");
    const char *type = json_string_value(json_object_get(in, "type"));
    kh_status st = KH_OK;
    if (type && !strcmp(type, "safetensors")) {
        /* the workload's own probs: what input_gen sends the workers */
        const char *path = json_string_value(json_object_get(in, "path"));
        const char *key = json_string_value(json_object_get(in, "tensor_key"));
        char full[4096];
        kh_st_file *f = NULL;
        kh_tensor *tt = NULL;
        snprintf(full, sizeof full, "%s/%s", c->base, path ? path : "");
        if (!path || !key)
            st = kh_err_set(err, KH_EINVAL, "workload %s: input 'probs': safetensors needs path "
                            "and tensor_key", c->w->uuid);
        else if (!(st = kh_st_open(full, &f, err))) {
            if (!(st = kh_st_get_expect(f, key, "probs", KH_DTYPE_F32, 2, shape, &tt, err)))
                st = kh_tensor_clone(&c->probs, tt, err);
            kh_tensor_free(tt);
            kh_st_close(f);
        }
    } else if (type && strcmp(type, "random")) {
        st = kh_err_set(err, KH_EINVAL, "workload %s: the sampling evaluator's probs must be "
                        "random or safetensors, not %s", c->w->uuid, type);
    } else if (!(st = kh_tensor_new(&c->probs, KH_DTYPE_F32, 2, shape, err))) {
        st = kh_rng_fill_softmax(c->ev->e, c->probs, base_seed(c), (uint32_t)idx, err);
    }
    const float *pv = c->probs ? c->probs->data : NULL;
    for (uint64_t i = 0; !st && i < c->probs->numel; i++)
        if (!(pv[i] >= 0) || !isfinite(pv[i]))
            st = kh_err_set(err, KH_EINVAL, "workload %s: probs[%llu, %llu] is %g, not a "
                            "probability", c->w->uuid,
                            (unsigned long long)(i / (uint64_t)shape[1]),
                            (unsigned long long)(i % (uint64_t)shape[1]), (double)pv[i]);
    if (st) {
        probs_free(c);
        return st;
    }
    c->probs_w = c->w;
    c->probs_seed = base_seed(c);
    *out = c->probs;
    return KH_OK;
}

/* A sampling parameter (top_k / top_p) per row: the workload's scalar value,
 * or the input made from seeds[0] (a scalar, or one value per row). */
static kh_status sampling_param(wctx *c, const char *name, int64_t rows, double *vals,
                                kh_err *err)
{
    const kh_task_tensor *t = NULL;
    for (size_t i = 0; i < c->d->ninputs && !t; i++)
        if (!strcmp(c->d->inputs[i].name, name))
            t = &c->d->inputs[i];
    if (!t)
        return kh_err_set(err, KH_EINVAL, "definition '%s' (sampling evaluator, %s): an input "
                          "'%s' is required", c->d->name,
                          kh_check_sampling_method_name(c->smethod), name);
    json_t *in = json_object_get(json_object_get(c->w->json, "inputs"), name);
    const char *type = json_string_value(json_object_get(in, "type"));
    if (type && !strcmp(type, "scalar")) {
        json_t *v = json_object_get(in, "value");
        if (!json_is_number(v))
            return kh_err_set(err, KH_EINVAL, "workload %s: input '%s': scalar without a "
                              "numeric value", c->w->uuid, name);
        for (int64_t b = 0; b < rows; b++)
            vals[b] = json_number_value(v);
        return KH_OK;
    }
    kh_status st = host_inputs(c, base_seed(c), err);
    if (st)
        return st;
    const kh_tensor *x = input_named(c, name);
    if (!x || (x->numel != 1 && x->numel != (uint64_t)rows))
        return kh_err_set(err, KH_EINVAL, "workload %s: input '%s' must be a scalar or hold one "
                          "value per batch row (%lld)", c->w->uuid, name, (long long)rows);
    for (int64_t b = 0; b < rows; b++)
        vals[b] = kh_tensor_get(x, x->numel == 1 ? 0 : (uint64_t)b);
    return KH_OK;
}

/* FIB's valid mask for this workload's probs (see wctx). */
static kh_status sampling_mask(wctx *c, const kh_tensor **probs, const unsigned char **mask,
                               kh_err *err)
{
    kh_status st = sampling_probs(c, probs, err);
    if (st)
        return st;
    if (c->smask) {
        *mask = c->smask;
        return KH_OK;
    }
    int64_t B = (*probs)->shape[0];
    double *kv = calloc((size_t)B + 1, sizeof *kv), *pv = calloc((size_t)B + 1, sizeof *pv);
    int64_t *ki = calloc((size_t)B + 1, sizeof *ki);
    unsigned char *m = malloc((*probs)->numel + 1);
    if (!kv || !pv || !ki || !m)
        st = kh_err_set(err, KH_ENOMEM, "out of memory for the sampling mask");
    int use_k = c->smethod == KH_SAMPLING_TOP_K || c->smethod == KH_SAMPLING_TOP_K_TOP_P;
    int use_p = c->smethod == KH_SAMPLING_TOP_P || c->smethod == KH_SAMPLING_TOP_K_TOP_P;
    if (!st && use_k)
        st = sampling_param(c, "top_k", B, kv, err);
    if (!st && use_p)
        st = sampling_param(c, "top_p", B, pv, err);
    for (int64_t b = 0; !st && b < B; b++)
        ki[b] = (int64_t)kv[b];
    if (!st)
        st = kh_check_sampling_mask(*probs, c->smethod, use_k ? ki : NULL, use_p ? pv : NULL, m,
                                    err);
    free(kv);
    free(pv);
    free(ki);
    if (st) {
        free(m);
        return st;
    }
    c->smask = m;
    *mask = m;
    return KH_OK;
}

/* The inputs of this workload for seed, the workers' bits (pyref.h). */
static kh_status host_inputs(wctx *c, uint64_t seed, kh_err *err)
{
    if (c->in_ok && c->in_w == c->w && c->in_seed == seed)
        return KH_OK;
    in_free(c);
    if (c->d->ninputs > 64)
        return kh_err_set(err, KH_EUNSUPPORTED, "more than 64 inputs");
    /* the sampling evaluator makes probs itself (sampling_probs: a softmax,
     * not the randn these would be) */
    uint64_t skip = 0;
    for (size_t i = 0; i < c->d->ninputs && c->evaluator == KH_EVAL_SAMPLING; i++)
        if (!strcmp(c->d->inputs[i].name, "probs"))
            skip |= (uint64_t)1 << i;
    kh_status st = kh_pyref_inputs(c->ev->e, c->d, c->w, c->base, seed,
                                   c->evaluator == KH_EVAL_DSA_TOPK, skip, c->ins, err);
    if (st)
        return st;
    c->in_ok = 1;
    c->in_w = c->w;
    c->in_seed = seed;
    return KH_OK;
}

static const kh_tensor *input_named(wctx *c, const char *name)
{
    for (size_t i = 0; i < c->d->ninputs && i < 64; i++)
        if (!strcmp(c->d->inputs[i].name, name))
            return c->ins[i];
    return NULL;
}

static kh_status pl_add(wctx *c, const void *d, size_t n, size_t *off, kh_err *err)
{
    unsigned char *p = realloc(c->pl, c->pl_len + n + 1);
    if (!p)
        return kh_err_set(err, KH_ENOMEM, "out of memory for a %zu-byte request", c->pl_len + n);
    c->pl = p;
    memcpy(p + c->pl_len, d, n);
    *off = c->pl_len;
    c->pl_len += n;
    return KH_OK;
}

static json_t *shape_of(const kh_task_def *d, const kh_task_tensor *t, const int64_t *axes)
{
    json_t *a = json_array();
    for (size_t i = 0; !t->is_scalar && i < t->rank; i++)
        json_array_append_new(a, json_integer(axes[t->dims[i]]));
    return a;
    (void)d;
}

/* An input's generator, from the workload's inputs entry. */
static kh_status input_gen(wctx *c, const kh_task_tensor *t, size_t stream, json_t **gen,
                           kh_err *err)
{
    json_t *in = json_object_get(json_object_get(c->w->json, "inputs"), t->name);
    const char *type = json_string_value(json_object_get(in, "type"));
    if (c->evaluator == KH_EVAL_SAMPLING && (!type || strcmp(type, "scalar")) &&
        (!t->is_scalar || !strcmp(t->name, "top_k") || !strcmp(t->name, "top_p"))) {
        /* FIB's sampling: every call on one set of inputs (probs: softmax of
         * randn), so the coordinator sends their bytes, repeated `tile`
         * times for the TVD phase; only the other random scalars (a
         * candidate's seed) are fresh per call */
        const kh_tensor *pt = NULL;
        size_t off = 0;
        kh_status st;
        if (!strcmp(t->name, "probs")) {
            st = sampling_probs(c, &pt, err);
        } else if (!(st = host_inputs(c, base_seed(c), err)) && !(pt = input_named(c, t->name))) {
            st = kh_err_set(err, KH_EINVAL, "workload %s: input '%s' was not made", c->w->uuid,
                            t->name);
        }
        if (!st && t->is_scalar) {
            *gen = json_pack("{s:s, s:f}", "kind", "scalar", "value", kh_tensor_get(pt, 0));
            return KH_OK;
        }
        if (!st)
            st = pl_add(c, pt->data, pt->nbytes, &off, err);
        if (!st)
            *gen = json_pack("{s:s, s:[I, I]}", "kind", "bytes", "payload", (json_int_t)off,
                             (json_int_t)pt->nbytes);
        if (!st && c->tile > 1)
            json_object_set_new(*gen, "tile", json_integer(c->tile));
        return st;
    }
    if (!type || !strcmp(type, "random")) {
        const char *kind = c->evaluator == KH_EVAL_DSA_TOPK && !strcmp(t->name, "k_index_cache_fp8")
                               ? "dsa_kcache" : "random";
        *gen = json_pack("{s:s, s:I, s:I}", "kind", kind, "seed", (json_int_t)c->seeds[0],
                         "stream", (json_int_t)stream);
        return KH_OK;
    }
    if (!strcmp(type, "scalar")) {
        json_t *v = json_object_get(in, "value");
        if (!json_is_number(v) && !json_is_boolean(v))
            return kh_err_set(err, KH_EINVAL, "workload %s: input '%s': scalar without a value",
                              c->w->uuid, t->name);
        double x = json_is_boolean(v) ? (json_is_true(v) ? 1.0 : 0.0) : json_number_value(v);
        *gen = json_pack("{s:s, s:f}", "kind", "scalar", "value", x);
        return KH_OK;
    }
    if (!strcmp(type, "safetensors")) {
        const char *path = json_string_value(json_object_get(in, "path"));
        const char *key = json_string_value(json_object_get(in, "tensor_key"));
        if (!path || !key)
            return kh_err_set(err, KH_EINVAL, "workload %s: input '%s': safetensors needs path "
                              "and tensor_key", c->w->uuid, t->name);
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", c->base, path);
        kh_st_file *f = NULL;
        kh_status st = kh_st_open(full, &f, err);
        if (st)
            return st;
        kh_tensor *tt = NULL;
        st = kh_st_get(f, key, &tt, err);
        size_t off = 0;
        if (!st)
            st = pl_add(c, tt->data, tt->nbytes, &off, err);
        if (!st)
            *gen = json_pack("{s:s, s:[I, I]}", "kind", "bytes", "payload", (json_int_t)off,
                             (json_int_t)tt->nbytes);
        kh_tensor_free(tt);
        kh_st_close(f);
        return st;
    }
    return kh_err_set(err, KH_EINVAL, "workload %s: input '%s': unknown type '%s'", c->w->uuid,
                      t->name, type);
}

static const kh_task_tensor *find_input(const kh_task_def *d, const char *name, size_t *idx)
{
    for (size_t i = 0; i < d->ninputs; i++)
        if (!strcmp(d->inputs[i].name, name)) {
            if (idx)
                *idx = i;
            return &d->inputs[i];
        }
    return NULL;
}

static kh_status concrete_arg(wctx *c, const kh_task_arg *a, json_t **out, kh_err *err)
{
    switch (a->kind) {
    case KH_TASK_ARG_INPUT:
    case KH_TASK_ARG_OUTPUT:
    case KH_TASK_ARG_WORKSPACE:
        *out = json_pack("{s:s}", "tensor", a->name);
        return KH_OK;
    case KH_TASK_ARG_SCALAR: {
        const kh_task_tensor *t = find_input(c->d, a->name, NULL);
        json_t *in = json_object_get(json_object_get(c->w->json, "inputs"), a->name);
        const char *type = json_string_value(json_object_get(in, "type"));
        json_t *v = json_object_get(in, "value");
        if (t && type && !strcmp(type, "scalar") && json_is_number(v)) {
            const char *k = !strcmp(t->dtype, "float32") ? "f32"
                            : !strcmp(t->dtype, "int32") ? "i32"
                            : !strcmp(t->dtype, "int64") ? "i64" : NULL;
            if (k) {
                *out = !strcmp(k, "f32") ? json_pack("{s:f}", k, json_number_value(v))
                                         : json_pack("{s:I}", k, (json_int_t)json_number_value(v));
                return KH_OK;
            }
        }
        /* a random scalar (or another dtype): the worker passes the value */
        *out = json_pack("{s:s}", "scalar", a->name);
        return KH_OK;
    }
    case KH_TASK_ARG_VALUE: {
        int64_t v;
        kh_status st = kh_task_eval(c->d, c->axes_over ? c->axes_over : c->w->axes, a->expr, NULL,
                                    NULL, &v, err);
        if (st)
            return st;
        const char *ty = a->type ? a->type : "int32";
        const char *k = !strcmp(ty, "int64") ? "i64" : !strcmp(ty, "uint32") ? "u32"
                        : !strcmp(ty, "uint64") ? "u64" : "i32";
        *out = json_pack("{s:I}", k, (json_int_t)v);
        return KH_OK;
    }
    }
    return kh_err_set(err, KH_EINVAL, "unknown argument kind");
}

/* The request params for sol on this workload (artifact at payload[0, len)). */
static kh_status make_request(wctx *c, const kh_task_solution *sol, const art *a, int reference,
                              json_t **params, kh_err *err)
{
    const kh_task_manifest *m = sol->manifest;
    const int64_t *axes = c->axes_over ? c->axes_over : c->w->axes;
    kh_task_launch_dims dims[64];
    int64_t ws[64];
    if (m->nlaunches > 64 || m->nworkspace > 64)
        return kh_err_set(err, KH_EUNSUPPORTED, "more than 64 launches or workspace buffers");
    kh_status st = kh_task_manifest_resolve(sol, axes, dims, ws, err);
    if (st)
        return st;
    json_t *p = json_object(), *tensors = json_array(), *args;
    json_object_set_new(p, "artifact",
                        json_pack("{s:s, s:s, s:[I, I]}", "kind", a->host || a->so ? "so" : "cubin",
                                  "key",
                                  a->hash, "payload", (json_int_t)0, (json_int_t)a->len));
    json_object_set_new(p, "tensors", tensors);
    for (size_t i = 0; i < c->d->ninputs && !st; i++) {
        const kh_task_tensor *t = &c->d->inputs[i];
        json_t *gen = NULL;
        if ((st = input_gen(c, t, i, &gen, err)))
            break;
        json_array_append_new(tensors, json_pack("{s:s, s:s, s:s, s:o, s:o}", "name", t->name,
                                                 "role", "input", "dtype", t->dtype, "shape",
                                                 shape_of(c->d, t, axes), "gen", gen));
    }
    for (size_t i = 0; i < c->d->noutputs && !st; i++) {
        const kh_task_tensor *t = &c->d->outputs[i];
        json_array_append_new(tensors, json_pack("{s:s, s:s, s:s, s:o}", "name", t->name, "role",
                                                 "output", "dtype", t->dtype, "shape",
                                                 shape_of(c->d, t, axes)));
    }
    for (size_t i = 0; i < m->nworkspace && !st; i++)
        json_array_append_new(tensors, json_pack("{s:s, s:s, s:I, s:b}", "name",
                                                 m->workspace[i].name, "role", "workspace",
                                                 "bytes", (json_int_t)ws[i], "zero",
                                                 m->workspace[i].zero));
    if (m->host || m->so) {
        /* one C entry; for cuda_so the gpu worker appends its stream */
        args = json_array();
        for (size_t i = 0; i < m->nargs && !st; i++) {
            json_t *v = NULL;
            if (!(st = concrete_arg(c, &m->args[i], &v, err)))
                json_array_append_new(args, v);
        }
        json_object_set_new(p, "entry", json_pack("{s:s, s:o}", "symbol", m->function, "args",
                                                  args));
    } else {
        json_t *ls = json_array();
        for (size_t l = 0; l < m->nlaunches && !st; l++) {
            const kh_task_launch *L = &m->launches[l];
            args = json_array();
            for (size_t i = 0; i < L->nargs && !st; i++) {
                json_t *v = NULL;
                if (!(st = concrete_arg(c, &L->args[i], &v, err)))
                    json_array_append_new(args, v);
            }
            json_array_append_new(
                ls, json_pack("{s:s, s:[I,I,I], s:[I,I,I], s:I, s:o}", "kernel", L->kernel,
                              "grid", (json_int_t)dims[l].grid[0], (json_int_t)dims[l].grid[1],
                              (json_int_t)dims[l].grid[2], "block", (json_int_t)dims[l].block[0],
                              (json_int_t)dims[l].block[1], (json_int_t)dims[l].block[2], "smem",
                              (json_int_t)dims[l].shared_bytes, "args", args));
        }
        json_object_set_new(p, "launches", ls);
    }
    json_t *trials = json_array();
    for (size_t t = 0; t < c->ntrials; t++) {
        json_t *tj = json_pack("{s:I}", "seed", (json_int_t)c->seeds[t]);
        if (c->trial_ranges && c->trial_ranges[t])
            json_object_set(tj, "ranges", c->trial_ranges[t]);
        json_array_append_new(trials, tj);
    }
    json_object_set_new(p, "trials", trials);
    const kh_eval_opts *o = c->o;
    int hard = !o->parity && !reference;
    int det = o->deterministic >= 0 ? o->deterministic : m->host;
    json_object_set_new(p, "checks",
                        hard && c->light ? json_pack("{s:b, s:b}", "inputs_unchanged", 1,
                                                     "guards", 1)
                        : hard ? json_pack("{s:b, s:b, s:b, s:b, s:b}", "poison", 1,
                                         "inputs_unchanged", 1, "guards", 1, "deterministic",
                                         det && c->evaluator != KH_EVAL_SAMPLING,
                                         "reload_before_timing", 1)
                             : json_object());
    json_object_set_new(p, "timing", json_null());
    json_object_set_new(p, "deadline_s", json_real(o->deadline_s));
    if (st) {
        json_decref(p);
        return st;
    }
    *params = p;
    return KH_OK;
}

static size_t out_bytes(const kh_task_def *d, const kh_task_tensor *t, const int64_t *axes);

/* How many timed calls the protocol makes (official: known; screen and
 * precise stop adaptively: their cap, precise's taken as 1000). */
static double expected_timed_calls(const wctx *c, const json_t *t)
{
    kh_protocol proto = KH_PROTO_OFFICIAL;
    kh_protocol_parse(c->o->protocol, &proto);
    kh_bench_opts bo;
    kh_bench_defaults(proto, &bo);
    json_t *v;
    if ((v = json_object_get(t, "iters")))
        bo.iters = (int)json_integer_value(v);
    if ((v = json_object_get(t, "trials")))
        bo.trials = (int)json_integer_value(v);
    if ((v = json_object_get(t, "max_iters")))
        bo.max_iters = (int)json_integer_value(v);
    if (proto == KH_PROTO_OFFICIAL)
        return (double)(bo.iters > 0 ? bo.iters : 1) * (bo.trials > 0 ? bo.trials : 1);
    double n = bo.max_iters > 0 ? bo.max_iters : 200;
    return proto == KH_PROTO_PRECISE && n > 1000 ? 1000 : n;
}

/* The verified timed calls (docs/evaluation.md, "Which timed calls are
 * verified"): every one by default; fewer where their outputs would pass
 * verify_bytes, or where each costs the coordinator a regeneration of
 * inputs (DSA top-k) or a Python run.  The worker picks them by the secret
 * sample_seed, so a candidate cannot tell which; it stops at max_verified. */
static void verify_plan(const wctx *c, const json_t *t, int verify, double *p, int *cap,
                        int *ranged)
{
    const kh_eval_opts *o = c->o;
    *p = 0;
    *cap = 0;
    *ranged = 0;
    if (!verify || o->verify_timed_fraction <= 0)
        return;
    const int64_t *axes = c->axes_over ? c->axes_over : c->w->axes;
    double ob = 0;
    for (size_t i = 0; i < c->d->noutputs; i++)
        ob += (double)out_bytes(c->d, &c->d->outputs[i], axes);
    double budget = o->verify_bytes > 0 ? o->verify_bytes : 256.0 * 1024 * 1024;
    double most = ob > 0 ? floor(budget / ob) : KH_MAX_VERIFIED;
    /* large outputs of an element-wise rule: every verified call returns
     * KH_VERIFY_RANGES runs of KH_VERIFY_ELEMS elements per output at secret
     * offsets instead of the whole (a call that skips its work, or part of
     * it, is still wrong in those elements).  The reference must run in the
     * gpu worker, which returns the same ranges for each seed; a host or
     * Python reference returns whole outputs, and its verified calls stay
     * within verify_bytes */
    *ranged = c->evaluator == KH_EVAL_DEFAULT && ob > 4.0 * 1024 * 1024 && c->ref_gpu;
    if (*ranged)
        most = KH_MAX_VERIFIED;
    if (most > KH_MAX_VERIFIED)
        most = KH_MAX_VERIFIED;
    if (c->evaluator == KH_EVAL_DSA_TOPK && most > 8)
        most = 8; /* each seed's k cache is regenerated here */
    else if (!c->d->reference && c->evaluator != KH_EVAL_SAMPLING && most > 32)
        most = 32; /* each seed is a Python reference run */
    if (most < 1)
        most = 1;
    double n = expected_timed_calls(c, t);
    *p = o->verify_timed_fraction;
    if (*p > 1)
        *p = 1;
    if (*p * n > most)
        *p = most / n;
    *cap = (int)most;
}

static void add_timing(wctx *c, json_t *p, int verify)
{
    const kh_eval_opts *o = c->o;
    json_t *t = json_pack("{s:s, s:b, s:i, s:I, s:I}", "protocol", o->protocol, "cold", o->cold,
                          "rotate_inputs", o->parity ? 1 : o->rotate_inputs, "seed",
                          (json_int_t)c->timing_seed, "sample_seed",
                          (json_int_t)c->sample_seed);
    /* The contest's per-definition flags (GDN prefill: 1 / 5 / 3) unless the
     * caller chose counts. */
    kh_protocol proto;
    if (kh_protocol_parse(o->protocol, &proto) && proto == KH_PROTO_OFFICIAL) {
        kh_bench_opts bo, dflt;
        kh_bench_defaults(proto, &bo);
        dflt = bo;
        kh_bench_definition_flags(c->d->name, &bo);
        if (o->warmup < 0 && bo.warmup != dflt.warmup)
            json_object_set_new(t, "warmup", json_integer(bo.warmup));
        if (o->iters < 0 && bo.iters != dflt.iters)
            json_object_set_new(t, "iters", json_integer(bo.iters));
        if (o->timing_trials < 0 && bo.trials != dflt.trials)
            json_object_set_new(t, "trials", json_integer(bo.trials));
    }
    if (o->warmup >= 0)
        json_object_set_new(t, "warmup", json_integer(o->warmup));
    if (o->iters >= 0)
        json_object_set_new(t, "iters", json_integer(o->iters));
    if (o->timing_trials >= 0)
        json_object_set_new(t, "trials", json_integer(o->timing_trials));
    if (o->max_iters > 0)
        json_object_set_new(t, "max_iters", json_integer(o->max_iters));
    if (o->timing_timeout_s > 0)
        json_object_set_new(t, "timeout_s", json_real(o->timing_timeout_s));
    double vp;
    int vcap, ranged;
    verify_plan(c, t, verify, &vp, &vcap, &ranged);
    json_object_set_new(t, "verify_timed_fraction", json_real(vp));
    json_object_set_new(t, "max_verified", json_integer(vcap));
    if (ranged)
        json_object_set_new(t, "verify_ranges", json_pack("{s:i, s:i}", "count",
                                                          KH_VERIFY_RANGES, "elems",
                                                          KH_VERIFY_ELEMS));
    json_object_set_new(p, "timing", t);
}

/* ---- calling a worker: the scheduler --------------------------------------
 * eval_workload is written as straight-line code that calls workers.  To run
 * many workloads at once without turning it inside out, a request it makes
 * is not sent at once: call_worker files it as a job (keyed by a hash of the
 * request) and says "pending"; eval_workload stops there without side
 * effects.  run_jobs then runs every filed job in parallel on the pools'
 * workers, and each unfinished workload is evaluated again from the start:
 * the cached artifacts and reference outputs make the replay cheap, and the
 * answered job now hands its reply back.  A workload needs at most four
 * rounds (reference outputs, the candidate, reference outputs for timed
 * input sets, the reference's timing).  Every request of one workload runs
 * on one GPU (group), so a speedup compares two timings of one device. */
typedef struct wres {
    kh_status st;     /* KH_OK: reply; else the failure */
    kh_err err;
    kh_msg reply;     /* owned by the job that ran it: never freed by the caller */
    double seconds;
    int not_run;
} wres;

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

typedef struct job {
    struct job *next;
    char key[33];
    int host;
    size_t wl;
    json_t *params;
    unsigned char *pl;
    size_t pl_len;
    int state;
    size_t slot;
    wres res;
    json_t *placement;  /* where it ran: slot, gpu, host, pids, slurm job */
} job;

static void job_free(job *j)
{
    json_decref(j->params);
    free(j->pl);
    kh_msg_free(&j->res.reply);
    json_decref(j->placement);
    free(j);
}

/* Drop the jobs of workload wl (all when wl is SIZE_MAX). */
static void drop_jobs(kh_eval *ev, size_t wl)
{
    for (job **pj = &ev->jobs; *pj;) {
        job *j = *pj;
        if (wl == SIZE_MAX || j->wl == wl) {
            *pj = j->next;
            job_free(j);
        } else {
            pj = &j->next;
        }
    }
}

static void request_key(int host, const json_t *params, const void *pl, size_t n, char out[33])
{
    XXH3_state_t *hs = XXH3_createState();
    char *txt = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
    if (!hs || !txt) {
        /* cannot hash: a key no other request has, so nothing is reused */
        static unsigned long serial;
        snprintf(out, 33, "nohash-%lu", ++serial);
    } else {
        XXH3_128bits_reset(hs);
        XXH3_128bits_update(hs, host ? "h" : "g", 1);
        XXH3_128bits_update(hs, txt, strlen(txt) + 1);
        XXH3_128bits_update(hs, pl, n);
        XXH128_canonical_t canon;
        XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(hs));
        for (int k = 0; k < 16; k++)
            snprintf(out + 2 * k, 3, "%02x", canon.digest[k]);
    }
    free(txt);
    XXH3_freeState(hs);
}

static void call_worker(wctx *c, int host, const json_t *params, const art *a, wres *r)
{
    memset(r, 0, sizeof *r);
    /* artifact first in the payload */
    if (c->pl_len < a->len || memcmp(c->pl, a->bytes, a->len)) {
        r->st = kh_err_set(&r->err, KH_ESTATE, "request payload out of order");
        return;
    }
    char key[33];
    request_key(host, params, c->pl, c->pl_len, key);
    job *j = c->ev->jobs, *tail = NULL;
    for (; j; tail = j, j = j->next)
        if (j->wl == c->wl && !strcmp(j->key, key))
            break;
    if (j && j->state == JOB_DONE) {
        *r = j->res; /* the reply stays the job's */
        c->last = j;
        return;
    }
    c->pending = 1;
    r->st = kh_err_set(&r->err, KH_ESTATE, "request pending");
    if (j)
        return;
    if (!(j = calloc(1, sizeof *j)) || !(j->pl = malloc(c->pl_len ? c->pl_len : 1))) {
        free(j);
        c->pending = 0;
        r->st = kh_err_set(&r->err, KH_ENOMEM, "out of memory");
        return;
    }
    memcpy(j->key, key, sizeof key);
    j->host = host;
    j->wl = c->wl;
    j->params = json_incref((json_t *)params);
    memcpy(j->pl, c->pl, c->pl_len);
    j->pl_len = c->pl_len;
    /* in filing order: the workloads' requests start in workload order */
    if (tail)
        tail->next = j;
    else
        c->ev->jobs = j;
}

/* Where a finished request ran, for the verdict. */
static json_t *placement_json(kh_eval *ev, kh_pool *p, size_t slot, const kh_wproc *w)
{
    const char *gpu = kh_pool_slot_gpu(p, slot), *target = kh_pool_slot_host(p, slot);
    const char *sj = w ? kh_wproc_slurm_job(w) : "";
    /* gpu: the slot's device as given to CUDA_VISIBLE_DEVICES; target: the
     * {host} it was launched on; host: what the worker itself reported */
    return json_pack("{s:I, s:s?, s:s?, s:s, s:i, s:i, s:s, s:s?}", "slot", (json_int_t)slot,
                     "gpu", gpu[0] ? gpu : NULL, "target", target[0] ? target : NULL, "host",
                     w ? kh_wproc_worker_host(w) : "", "pid", w ? kh_wproc_worker_pid(w) : 0,
                     "launcher_pid", w ? kh_wproc_pid(w) : 0, "launch",
                     kh_launch_kind(ev->place_launch), "slurm_job", sj[0] ? sj : NULL);
}

/* Start queued jobs on idle workers: a workload's GPU jobs only in its GPU
 * group; live idle workers before empty slots, so the pool does not start
 * more processes than the work needs.  wl_group[wl] holds the workload's
 * position in its task package until its first GPU job starts, then its
 * group: position mod the number of groups.  So the GPU of a workload does
 * not depend on what else is evaluated: the candidate and the incumbent,
 * evaluated in two calls (the promotion gate's paired comparison), meet on
 * one GPU for every workload. */
static void dispatch(kh_eval *ev, const kh_eval_opts *o, int *wl_group)
{
    for (job *j = ev->jobs; j; j = j->next) {
        if (j->state != JOB_QUEUED)
            continue;
        kh_err perr;
        kh_err_clear(&perr);
        kh_pool *p = pool_for(ev, j->host, o->host_memory_bytes, &perr);
        if (!p) {
            j->res.st = perr.code ? perr.code : KH_ECHILD;
            j->res.err = perr;
            j->res.not_run = 1;
            j->state = JOB_DONE;
            continue;
        }
        size_t n = kh_pool_size(p), k = group_size(ev, j->host), pick = n;
        int want = -1;
        if (!j->host) {
            if (wl_group[j->wl] < 0) /* the position, encoded */
                wl_group[j->wl] = (int)((size_t)(-wl_group[j->wl] - 1) % (n / k));
            want = wl_group[j->wl];
        }
        for (int live = 1; live >= 0 && pick == n; live--)
            for (size_t sl = 0; sl < n && pick == n; sl++)
                if ((want < 0 || sl / k == (size_t)want) && !kh_pool_slot_busy(p, sl) &&
                    (kh_pool_slot_pid(p, sl) != 0) == live)
                    pick = sl;
        if (pick == n)
            continue; /* all busy: next round */
        kh_pool_stats before, after;
        kh_pool_stats_get(p, &before);
        /* the worker's own limits (CPU time) sit above the deadline, so an
         * overrun is seen here first, as a TIMEOUT */
        double dl = json_number_value(json_object_get(j->params, "deadline_s"));
        kh_status st = kh_pool_submit_to(p, "evaluate", j->params, j->pl, j->pl_len,
                                         (dl > 0 ? dl : o->deadline_s) + 1, pick, &j->res.err);
        kh_pool_stats_get(p, &after);
        if (st) {
            /* No request went out: the pool could not start a worker (no
             * GPU, the role's init failed, a role that keeps dying).  Not
             * the candidate's doing, so not a verdict. */
            j->res.st = st;
            j->res.not_run = after.calls == before.calls;
            j->state = JOB_DONE;
            continue;
        }
        j->state = JOB_RUNNING;
        j->slot = pick;
    }
}

/* Collect finished requests of pool p. */
static size_t collect(kh_eval *ev, kh_pool *p, int host, double wait_s)
{
    kh_pool_done d[64];
    size_t nd = kh_pool_wait(p, wait_s, d, KH_ARRAY_LEN(d));
    for (size_t i = 0; i < nd; i++) {
        job *j = ev->jobs;
        while (j && !(j->state == JOB_RUNNING && j->host == host && j->slot == d[i].slot))
            j = j->next;
        if (!j) {
            kh_msg_free(&d[i].d.reply);
            continue;
        }
        j->res.st = d[i].d.status;
        j->res.err = d[i].d.err;
        j->res.reply = d[i].d.reply;
        j->res.seconds = d[i].d.seconds;
        j->placement = placement_json(ev, p, d[i].slot, d[i].d.w);
        j->state = JOB_DONE;
        /* a candidate that crashed its host worker broke that process, not
         * the machine: as in eval_workload, no backoff for the next one */
        if (host && d[i].d.worker_died && d[i].d.status == KH_ECHILD && !d[i].d.reply.head)
            kh_pool_reset(p);
    }
    return nd;
}

/* Run every queued job, in parallel across the workers; returns when all are
 * done (KH_EINTR on Ctrl-C: the workers in flight are stopped). */
static kh_status run_jobs(kh_eval *ev, const kh_eval_opts *o, int *wl_group, kh_err *err)
{
    for (;;) {
        if (kh_engine_stop_requested(ev->e)) {
            free_pools(ev);
            ev->place_key[0] = '\0';
            return kh_err_set(err, KH_EINTR, "evaluation interrupted");
        }
        dispatch(ev, o, wl_group);
        size_t fh = ev->host ? kh_pool_in_flight(ev->host) : 0;
        size_t fg = ev->gpu ? kh_pool_in_flight(ev->gpu) : 0;
        if (!fh && !fg) {
            for (job *j = ev->jobs; j; j = j->next)
                if (j->state == JOB_QUEUED)
                    return kh_err_set(err, KH_ESTATE, "a worker request could not be placed");
            return KH_OK;
        }
        double w = fh && fg ? 0.01 : 0.25;
        if (fh)
            collect(ev, ev->host, 1, w);
        if (fg)
            collect(ev, ev->gpu, 0, w);
    }
}

/* [offset, length] of the reply payload, or NULL when out of range. */
static const unsigned char *reply_bytes(const kh_msg *m, const json_t *sl, size_t want)
{
    json_int_t off = json_integer_value(json_array_get(sl, 0));
    json_int_t len = json_integer_value(json_array_get(sl, 1));
    if (!json_is_array(sl) || off < 0 || len < 0 || (size_t)len != want ||
        (size_t)off > m->payload_len || (size_t)len > m->payload_len - (size_t)off)
        return NULL;
    static const unsigned char empty[1];
    return len ? m->payload + off : empty; /* an empty tensor (a batch of 0) is there */
}

static size_t out_bytes(const kh_task_def *d, const kh_task_tensor *t, const int64_t *axes)
{
    uint64_t n = 1;
    for (size_t i = 0; !t->is_scalar && i < t->rank; i++)
        n *= (uint64_t)axes[t->dims[i]];
    kh_dtype dt;
    if (kh_dtype_parse(t->dtype, &dt, NULL))
        return 0;
    return kh_dtype_nbytes(dt, n);
    (void)d;
}

/* ---- reference outputs ---------------------------------------------------- */
/* The outputs of (def, uuid, seed): whole, or, when ranges are asked for,
 * whole or those very ranges. */
static refout *ref_find(kh_eval *ev, const char *def, const char *uuid, uint64_t seed,
                        const json_t *ranges)
{
    for (refout *r = ev->refs; r; r = r->next)
        if (r->seed == seed && !strcmp(r->def, def) && !strcmp(r->uuid, uuid) &&
            (!r->ranges || (ranges && json_equal(r->ranges, (json_t *)ranges))))
            return r;
    return NULL;
}

/* The bytes of the element ranges [[start, n], ...] of a dtype; 0 when the
 * list is not one (the worker's reply is checked against it). */
static size_t ranges_bytes(kh_dtype dt, const json_t *list)
{
    size_t total = 0, k;
    json_t *e;
    if (!json_is_array(list))
        return 0;
    json_array_foreach(list, k, e) {
        json_int_t a = json_integer_value(json_array_get(e, 0)),
                   b = json_integer_value(json_array_get(e, 1));
        if (a < 0 || b <= 0)
            return 0;
        total += kh_dtype_nbytes(dt, (uint64_t)(a + b)) - kh_dtype_nbytes(dt, (uint64_t)a);
    }
    return total;
}

static kh_status ref_outputs(wctx *c, const kh_task_solution *ref, refout **outs, char hash[33],
                             kh_err *err);

/* Reference outputs for the given seeds (the same request, other trials). */
static kh_status ref_outputs_for(wctx *c, const kh_task_solution *ref, const uint64_t *seeds,
                                 json_t **ranges, size_t n, refout **outs, char hash[33],
                                 kh_err *err)
{
    uint64_t saved[KH_TASK_MAX_SAMPLING_TRIALS];
    size_t saved_n = c->ntrials;
    memcpy(saved, c->seeds, sizeof saved);
    memcpy(c->seeds, seeds, n * sizeof *seeds);
    c->ntrials = n;
    c->timed_refs = 1;
    c->trial_ranges = ranges;
    kh_status st = ref_outputs(c, ref, outs, hash, err);
    c->trial_ranges = NULL;
    c->timed_refs = 0;
    memcpy(c->seeds, saved, sizeof saved);
    c->ntrials = saved_n;
    return st;
}

static kh_status py_ref_outputs(wctx *c, refout **outs, kh_err *err);

static kh_status ref_outputs(wctx *c, const kh_task_solution *ref, refout **outs, char hash[33],
                             kh_err *err)
{
    size_t missing = 0;
    for (size_t t = 0; t < c->ntrials; t++)
        if (!(outs[t] = ref_find(c->ev, c->d->name, c->w->uuid, c->seeds[t],
                                 c->trial_ranges ? c->trial_ranges[t] : NULL)))
            missing++;
    if (missing < c->ntrials && !ref && !c->pyref_source) /* not one of an earlier round */
        c->pyref_source = "memory";
    if (missing && !ref) {
        kh_status st = py_ref_outputs(c, outs, err);
        if (st)
            return st;
    } else if (missing) {
        art *a = NULL;
        kh_status st = build(c->ev, ref, 1, &a, err);
        if (st)
            return st;
        if (!a->ok)
            return kh_err_set(err, KH_ECOMPILE, "the trusted reference '%s' does not build: %.300s",
                              ref->name, a->log ? a->log : "");
        free(c->pl);
        c->pl = NULL;
        c->pl_len = 0;
        size_t off = 0;
        json_t *p = NULL;
        if ((st = pl_add(c, a->bytes, a->len, &off, err)) ||
            (st = make_request(c, ref, a, 1, &p, err)))
            return st;
        wres r;
        call_worker(c, is_host(ref), p, a, &r);
        json_decref(p);
        if (c->pending)
            return kh_err_set(err, KH_ESTATE, "pending");
        if (r.st)
            return kh_err_set(err, r.not_run && r.st == KH_ECHILD ? KH_ENODEV : r.st,
                              "the trusted reference '%s' %s on workload %s: %s", ref->name,
                              r.not_run ? "could not be run" : "failed", c->w->uuid, r.err.msg);
        json_t *res = json_object_get(r.reply.head, "result");
        json_t *trials = json_object_get(res, "trials");
        for (size_t t = 0; t < c->ntrials && !st; t++) {
            if (outs[t])
                continue;
            json_t *o = json_object_get(json_array_get(trials, t), "outputs");
            refout *ro = calloc(1, sizeof *ro);
            if (!ro) {
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
                break;
            }
            ro->def = dupstr(c->d->name);
            ro->uuid = dupstr(c->w->uuid);
            ro->seed = c->seeds[t];
            ro->n = c->d->noutputs;
            ro->names = calloc(ro->n, sizeof *ro->names);
            ro->bytes = calloc(ro->n, sizeof *ro->bytes);
            ro->lens = calloc(ro->n, sizeof *ro->lens);
            ro->next = c->ev->refs;
            c->ev->refs = ro;
            if (!ro->def || !ro->uuid || !ro->names || !ro->bytes || !ro->lens) {
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
                break;
            }
            /* a reference asked for element ranges returns those (the gpu
             * worker) or the whole outputs (the host worker) */
            const json_t *tr = c->trial_ranges ? c->trial_ranges[t] : NULL;
            for (size_t k = 0; k < ro->n; k++) {
                const kh_task_tensor *ot = &c->d->outputs[k];
                size_t want = out_bytes(c->d, ot, c->w->axes);
                json_t *sl = json_object_get(o, ot->name);
                kh_dtype odt;
                kh_err derr;
                if (tr && !kh_dtype_parse(ot->dtype, &odt, &derr)) {
                    size_t rl = ranges_bytes(odt, json_object_get(tr, ot->name));
                    if (rl && (size_t)json_integer_value(json_array_get(sl, 1)) == rl) {
                        want = rl;
                        if (!ro->ranges)
                            ro->ranges = json_incref((json_t *)tr);
                    }
                }
                const unsigned char *b = reply_bytes(&r.reply, sl, want);
                ro->names[k] = dupstr(ot->name);
                ro->bytes[k] = malloc(want ? want : 1);
                if (!b || !ro->names[k] || !ro->bytes[k]) {
                    st = kh_err_set(err, b ? KH_ENOMEM : KH_ECORRUPT,
                                    "the reference's reply lacks output '%s'", ot->name);
                    break;
                }
                memcpy(ro->bytes[k], b, want);
                ro->lens[k] = want;
            }
            outs[t] = ro;
        }
        if (st)
            return st;
    }
    XXH3_state_t *hs = XXH3_createState();
    if (!hs)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    XXH3_128bits_reset(hs);
    for (size_t t = 0; t < c->ntrials; t++)
        for (size_t k = 0; k < outs[t]->n; k++)
            XXH3_128bits_update(hs, outs[t]->bytes[k], outs[t]->lens[k]);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(hs));
    XXH3_freeState(hs);
    for (int k = 0; k < 16; k++)
        snprintf(hash + 2 * k, 3, "%02x", canon.digest[k]);
    return KH_OK;
}

/* ---- reference outputs from the definition's Python run ----------------------
 * Memory first (ev->refs), then the store (a `refout` record per (definition,
 * workload, seed), kh_pyref_key), then one run of the interpreter for every
 * seed still missing, whose outputs go to both.  The store is used only when
 * verdicts are recorded (record = true): the same store, so `--no-store`
 * leaves no trace. */
static refout *refout_add(kh_eval *ev, const char *def, const char *uuid, uint64_t seed, size_t n)
{
    refout *ro = calloc(1, sizeof *ro);
    if (!ro)
        return NULL;
    ro->def = dupstr(def);
    ro->uuid = dupstr(uuid);
    ro->seed = seed;
    ro->n = n;
    ro->names = calloc(n ? n : 1, sizeof *ro->names);
    ro->bytes = calloc(n ? n : 1, sizeof *ro->bytes);
    ro->lens = calloc(n ? n : 1, sizeof *ro->lens);
    /* linked in at once, so kh_eval_free frees it whatever happens next */
    ro->next = ev->refs;
    ev->refs = ro;
    if (!ro->def || !ro->uuid || !ro->names || !ro->bytes || !ro->lens) {
        ro->n = 0; /* nothing to free per output */
        return NULL;
    }
    return ro;
}

static kh_store *cache_store(wctx *c)
{
    if (!c->o->record)
        return NULL;
    if (c->o->store)
        return c->o->store;
    if (!c->ev->store) {
        kh_err e2;
        if (kh_store_open(kh_engine_store_path(c->ev->e), NULL, &c->ev->store, &e2) != KH_OK)
            return NULL; /* record() will say why when it tries */
        c->ev->own_store = 1;
    }
    return c->ev->store;
}

/* The cached outputs of one seed from the store, or NULL. */
static refout *refout_from_store(wctx *c, kh_store *s, uint64_t seed)
{
    char key[33], id[KH_STORE_ID_MAX];
    kh_pyref_key(c->d, c->w, seed, c->evaluator == KH_EVAL_DSA_TOPK, key);
    snprintf(id, sizeof id, "refout-%s", key);
    json_t *rec = NULL;
    kh_err e2;
    if (kh_store_get(s, id, &rec, &e2) != KH_OK)
        return NULL;
    json_t *outs = json_object_get(rec, "outputs");
    void *data[64] = {0};
    size_t lens[64] = {0};
    int ok = c->d->noutputs <= 64;
    for (size_t k = 0; ok && k < c->d->noutputs; k++) {
        const kh_task_tensor *ot = &c->d->outputs[k];
        json_t *o = json_object_get(outs, ot->name);
        kh_hash h;
        ok = o && kh_hash_parse(json_string_value(json_object_get(o, "data_blob")) ?
                                    json_string_value(json_object_get(o, "data_blob")) : "",
                                &h, &e2) == KH_OK &&
             kh_store_get_blob(s, &h, &data[k], &lens[k], &e2) == KH_OK &&
             lens[k] == out_bytes(c->d, ot, c->w->axes);
    }
    json_decref(rec);
    refout *ro = ok ? refout_add(c->ev, c->d->name, c->w->uuid, seed, c->d->noutputs) : NULL;
    for (size_t k = 0; k < c->d->noutputs && k < 64; k++) {
        if (ro) {
            ro->names[k] = dupstr(c->d->outputs[k].name);
            ro->bytes[k] = data[k];
            ro->lens[k] = lens[k];
        } else {
            free(data[k]);
        }
    }
    return ro;
}

typedef struct pyput {
    wctx *c;
    const kh_pyref_result *res;
    const uint64_t *seeds;
    size_t n;
    const char *python;
} pyput;

static kh_status pyput_fn(kh_store_txn *tx, void *arg, kh_err *err)
{
    pyput *p = arg;
    wctx *c = p->c;
    for (size_t s = 0; s < p->n; s++) {
        char key[33], id[KH_STORE_ID_MAX];
        kh_pyref_key(c->d, c->w, p->seeds[s], c->evaluator == KH_EVAL_DSA_TOPK, key);
        snprintf(id, sizeof id, "refout-%s", key);
        json_t *outs = json_object();
        for (size_t k = 0; k < c->d->noutputs; k++) {
            const kh_tensor *t = p->res->out[s * p->res->noutputs + k];
            kh_hash h;
            kh_status st = kh_store_txn_put_blob(tx, t->data, t->nbytes, &h, err);
            if (st) {
                json_decref(outs);
                return st;
            }
            char hx[33];
            kh_hash_hex(&h, hx);
            json_t *shape = json_array();
            for (int i = 0; i < t->ndim; i++)
                json_array_append_new(shape, json_integer(t->shape[i]));
            json_object_set_new(outs, c->d->outputs[k].name,
                                json_pack("{s:s, s:o, s:s}", "dtype", c->d->outputs[k].dtype,
                                          "shape", shape, "data_blob", hx));
        }
        json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:I, s:o, s:{s:s, s:s, s:f}}", "type",
                                "refout", "id", id, "definition", c->d->name, "workload",
                                c->w->uuid, "seed", (json_int_t)p->seeds[s], "outputs", outs,
                                "provenance", "source", "python", "python", p->python,
                                "seconds", p->res->seconds);
        char out[KH_STORE_ID_MAX];
        kh_status st = kh_store_txn_put(tx, rec, KH_STORE_REPLACE, out, err);
        json_decref(rec);
        if (st)
            return st;
    }
    return KH_OK;
}

static kh_status py_ref_outputs(wctx *c, refout **outs, kh_err *err)
{
    kh_store *s = cache_store(c);
    uint64_t need[KH_TASK_MAX_SAMPLING_TRIALS];
    size_t idx[KH_TASK_MAX_SAMPLING_TRIALS], nn = 0;
    int dsa = c->evaluator == KH_EVAL_DSA_TOPK;
    for (size_t t = 0; t < c->ntrials; t++) {
        if (outs[t])
            continue;
        if (s && (outs[t] = refout_from_store(c, s, c->seeds[t]))) {
            c->pyref_source = "store";
            c->pyref_cached++;
            continue;
        }
        need[nn] = c->seeds[t];
        idx[nn++] = t;
    }
    if (!nn)
        return KH_OK;
    kh_pyref_result res;
    double budget = c->o->deadline_s * (double)nn + 120;
    kh_status st = kh_pyref_run(c->ev->e, c->d, c->w, c->base, need, nn, dsa, budget, &res, err);
    if (st)
        return st;
    c->pyref_source = "python";
    c->pyref_runs++;
    c->pyref_seconds += res.seconds;
    for (size_t j = 0; j < nn && !st; j++) {
        refout *ro = refout_add(c->ev, c->d->name, c->w->uuid, need[j], c->d->noutputs);
        if (!ro) {
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            break;
        }
        for (size_t k = 0; k < c->d->noutputs; k++) {
            const kh_tensor *t = res.out[j * res.noutputs + k];
            ro->names[k] = dupstr(c->d->outputs[k].name);
            ro->bytes[k] = malloc(t->nbytes ? t->nbytes : 1);
            if (!ro->names[k] || !ro->bytes[k]) {
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
                break;
            }
            memcpy(ro->bytes[k], t->data, t->nbytes);
            ro->lens[k] = t->nbytes;
        }
        outs[idx[j]] = ro;
    }
    if (!st && s && !c->timed_refs) {
        /* a cache: a store that refuses the write costs a rerun, not the
         * verdict.  Timed calls' seeds are not kept: each is used once */
        kh_err e2;
        pyput p = {.c = c, .res = &res, .seeds = need, .n = nn, .python = res.python};
        (void)kh_store_update(s, pyput_fn, &p, &e2);
    }
    kh_pyref_result_free(&res);
    return st;
}

static kh_status ref_latency(wctx *c, const kh_task_solution *ref, double *ns, kh_err *err)
{
    if (!ref) { /* a Python reference: nothing of it runs in a worker to time */
        *ns = NAN;
        return KH_OK;
    }
    for (refperf *p = c->ev->perfs; p; p = p->next)
        if (!strcmp(p->def, c->d->name) && !strcmp(p->uuid, c->w->uuid) &&
            !strcmp(p->protocol, c->o->protocol)) {
            *ns = p->latency_ns;
            return KH_OK;
        }
    art *a = NULL;
    kh_status st = build(c->ev, ref, 1, &a, err);
    if (st || !a->ok)
        return st ? st : kh_err_set(err, KH_ECOMPILE, "the reference does not build");
    free(c->pl);
    c->pl = NULL;
    c->pl_len = 0;
    size_t off = 0;
    json_t *p = NULL;
    if ((st = pl_add(c, a->bytes, a->len, &off, err)) || (st = make_request(c, ref, a, 1, &p, err)))
        return st;
    add_timing(c, p, 0);
    /* the trusted reference: the host worker may rotate a few input sets
     * instead of generating each timed call's afresh (a 64 MiB input takes
     * longer to draw than to use) */
    json_object_set_new(p, "trusted", json_true());
    /* its deadline is not the candidate's: a short one (a red team's 10 s)
     * must not fail a reference whose timing phase flushes the caches before
     * each of a hundred calls on 64 MiB inputs */
    if (c->o->deadline_s < 120)
        json_object_set_new(p, "deadline_s", json_real(120));
    wres r;
    call_worker(c, is_host(ref), p, a, &r);
    json_decref(p);
    if (c->pending)
        return kh_err_set(err, KH_ESTATE, "pending");
    if (r.st)
        return kh_err_set(err, r.st, "timing the reference failed: %s", r.err.msg);
    json_t *tm = json_object_get(json_object_get(r.reply.head, "result"), "timing");
    *ns = json_number_value(json_object_get(tm, "latency_ns"));
    c->ref_timing = c->last;
    refperf *rp = calloc(1, sizeof *rp);
    if (rp) {
        rp->def = dupstr(c->d->name);
        rp->uuid = dupstr(c->w->uuid);
        rp->protocol = dupstr(c->o->protocol);
        rp->latency_ns = *ns;
        rp->next = c->ev->perfs;
        c->ev->perfs = rp;
    }
    return KH_OK;
}

/* The gpu worker measures a device-to-device copy ("peaks"): its median
 * bandwidth (the speed-of-light check allows 1.5x that, for inputs the L2
 * holds: a bound that rejects honest work is worse than none).  Asked once per GPU
 * (by UUID), on the worker slot that ran the candidate, so the bound is the
 * one of the device it ran on; 0 when the worker cannot say (the check is
 * then "unknown"). */
static double gpu_bandwidth(wctx *c, const char *uuid, size_t slot)
{
    peak *pk = c->ev->peaks;
    while (pk && strcmp(pk->uuid, uuid ? uuid : ""))
        pk = pk->next;
    if (pk)
        return pk->bw > 0 ? pk->bw : 0;
    if (!(pk = calloc(1, sizeof *pk)))
        return 0;
    snprintf(pk->uuid, sizeof pk->uuid, "%s", uuid ? uuid : "");
    pk->bw = -1;
    pk->next = c->ev->peaks;
    c->ev->peaks = pk;
    kh_err err;
    kh_pool *p = pool_for(c->ev, 0, 0, &err);
    json_t *params = json_object();
    if (p && kh_pool_submit_to(p, "peaks", params, NULL, 0, 120, slot, &err) == KH_OK) {
        kh_pool_done d;
        memset(&d, 0, sizeof d);
        d.d.status = KH_ECHILD;
        while (kh_pool_wait(p, 1.0, &d, 1) == 0 && kh_pool_in_flight(p)) {
        }
        if (d.d.status == KH_OK) {
            double bw = json_number_value(
                json_object_get(json_object_get(d.d.reply.head, "result"), "copy_bytes_per_s"));
            if (bw > 0)
                pk->bw = bw;
        }
        kh_msg_free(&d.d.reply);
    }
    json_decref(params);
    return pk->bw > 0 ? pk->bw : 0;
}

/* ---- comparison ----------------------------------------------------------- */
static json_t *num(double x)
{
    if (isnan(x))
        return json_string("nan");
    if (isinf(x))
        return json_string(x > 0 ? "inf" : "-inf");
    return json_real(x);
}

typedef struct verdict {
    const char *status;      /* FlashInfer-Bench's */
    const char *failed;      /* failed check, or NULL */
    char detail[700];
    int has_correctness;
    kh_check_result acc;
    json_t *checks;          /* khlua.checks */
} verdict;

static void fail(verdict *v, const char *status, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(verdict *v, const char *status, const char *check, const char *fmt, ...)
{
    if (v->failed || strcmp(v->status, "PASSED"))
        return;
    v->status = status;
    v->failed = check;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->detail, sizeof v->detail, fmt, ap);
    va_end(ap);
    /* a detail quotes what a worker or a compiler said, which a candidate
     * can choose: no secret reaches the verdict, its log or the store */
    char *clean = kh_scrub_text(v->detail, strlen(v->detail), sizeof v->detail - 1,
                                KH_SCRUB_TAIL);
    if (clean)
        snprintf(v->detail, sizeof v->detail, "%s", clean);
    else
        v->detail[0] = '\0';
    free(clean);
}

/* Does element first_fail of out still hold the poison byte pattern? */
static int untouched(const kh_tensor *t, int64_t idx, unsigned pat)
{
    if (idx < 0)
        return 0;
    int bits = kh_dtype_bits(t->dtype);
    uint64_t code = kh_dtype_get_code(t->dtype, t->data, (uint64_t)idx);
    uint64_t want = 0;
    for (int b = 0; b < bits; b += 8)
        want |= (uint64_t)pat << b;
    if (bits < 8)
        want = pat & 0xF;
    return code == want;
}

/* Compare the outputs at slices `outs` of the reply with the reference ro.
 * Returns 1 when they pass; fills r with the merged result. */
static kh_status compare_set(wctx *c, const kh_msg *m, const json_t *outs, const refout *ro,
                             kh_check_result *merged, unsigned poison, int *untouched_fail,
                             kh_err *err)
{
    kh_check_result_init(merged);
    *untouched_fail = 0;
    for (size_t k = 0; k < c->d->noutputs; k++) {
        const kh_task_tensor *ot = &c->d->outputs[k];
        kh_dtype dt;
        kh_status st = kh_dtype_parse(ot->dtype, &dt, err);
        if (st)
            return st;
        int64_t shape[KH_TENSOR_MAX_DIMS];
        int nd = ot->is_scalar ? 0 : (int)ot->rank;
        for (int i = 0; i < nd; i++)
            shape[i] = c->w->axes[ot->dims[i]];
        size_t want = ro->lens[k];
        const unsigned char *b = reply_bytes(m, json_object_get(outs, ot->name), want);
        if (!b)
            return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks output '%s'", ot->name);
        kh_tensor *tx = NULL, *ty = NULL;
        kh_check_result r;
        if (c->evaluator == KH_EVAL_DSA_TOPK && !strcmp(ot->name, "topk_indices")) {
            /* FlashInfer-Bench's DSA top-k rule: reachable, distinct indices
             * whose scores (recomputed from this seed's inputs) match */
            if ((st = host_inputs(c, ro->seed, err)))
                return st;
            kh_check_topk_inputs in = {input_named(c, "q_index_fp8"),
                                       input_named(c, "k_index_cache_fp8"),
                                       input_named(c, "weights"), input_named(c, "seq_lens"),
                                       input_named(c, "block_table")};
            if (!in.q || !in.k_cache || !in.weights || !in.seq_lens || !in.block_table)
                return kh_err_set(err, KH_EINVAL, "dsa_topk_indexer evaluator: '%s' lacks one of "
                                  "q_index_fp8, k_index_cache_fp8, weights, seq_lens, "
                                  "block_table (tensor inputs)", c->d->name);
            if ((st = kh_tensor_borrow(&tx, dt, nd, shape, (void *)b, want, err)) ||
                (st = kh_tensor_borrow(&ty, dt, nd, shape, ro->bytes[k], want, err)) ||
                (st = kh_check_dsa_topk(tx, ty, &in, &c->copts, &r, err))) {
                kh_tensor_free(tx);
                kh_tensor_free(ty);
                return st;
            }
        } else if ((st = kh_tensor_borrow(&tx, dt, nd, shape, (void *)b, want, err)) ||
            (st = kh_tensor_borrow(&ty, dt, nd, shape, ro->bytes[k], want, err)) ||
            (st = kh_check_compare(tx, ty, &c->copts, &r, err))) {
            kh_tensor_free(tx);
            kh_tensor_free(ty);
            return st;
        }
        if (r.status != KH_CHECK_PASSED && poison && !*untouched_fail) {
            /* Elements still holding the poison were never written.  For
             * float outputs any such element counts (no arithmetic result
             * has those bits: 0xFF.. is a NaN nobody computes, 0x7F.. the
             * largest finite); for integers, where -1 is a value, only the
             * first failing element is looked at. */
            if (kh_dtype_is_float(dt)) {
                for (uint64_t i = 0; i < tx->numel && !*untouched_fail; i++)
                    *untouched_fail = untouched(tx, (int64_t)i, poison);
            } else {
                *untouched_fail = untouched(tx, r.first_fail, poison);
            }
        }
        if (r.status != KH_CHECK_PASSED) {
            size_t l = strlen(r.reason);
            snprintf(r.reason + l, sizeof r.reason - l, " (output '%s')", ot->name);
        }
        kh_tensor_free(tx);
        kh_tensor_free(ty);
        kh_check_merge(merged, &r);
        if (merged->final)
            break;
    }
    return KH_OK;
}

/* Compare the element ranges a verified timed call returned (outputs at
 * slices `outs`, ranges {name: [[start, n], ...]}) with the same elements of
 * the reference ro (whole, or those ranges).  The rule is the definition's,
 * element by element, over the elements returned. */
static kh_status compare_ranged(wctx *c, const kh_msg *m, const json_t *outs, const json_t *ranges,
                                const refout *ro, kh_check_result *merged, unsigned poison,
                                int *untouched_fail, kh_err *err)
{
    kh_check_result_init(merged);
    *untouched_fail = 0;
    for (size_t k = 0; k < c->d->noutputs; k++) {
        const kh_task_tensor *ot = &c->d->outputs[k];
        kh_dtype dt;
        kh_status st = kh_dtype_parse(ot->dtype, &dt, err);
        if (st)
            return st;
        const json_t *list = json_object_get(ranges, ot->name);
        size_t rl = ranges_bytes(dt, list), full = ro->lens[k];
        const unsigned char *b = reply_bytes(m, json_object_get(outs, ot->name), rl);
        if (!rl || !b)
            return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks the ranges of output "
                              "'%s'", ot->name);
        unsigned char *refb = NULL;
        const unsigned char *yb = ro->bytes[k];
        if (!ro->ranges) { /* the whole reference: gather the same ranges */
            refb = malloc(rl);
            if (!refb)
                return kh_err_set(err, KH_ENOMEM, "out of memory");
            size_t at = 0, i;
            json_t *e;
            json_array_foreach(list, i, e) {
                uint64_t a = (uint64_t)json_integer_value(json_array_get(e, 0)),
                         n = (uint64_t)json_integer_value(json_array_get(e, 1));
                size_t bo = kh_dtype_nbytes(dt, a), bl = kh_dtype_nbytes(dt, a + n) - bo;
                if (bo + bl > full) {
                    free(refb);
                    return kh_err_set(err, KH_ECORRUPT, "output '%s': a range past its end",
                                      ot->name);
                }
                memcpy(refb + at, ro->bytes[k] + bo, bl);
                at += bl;
            }
            yb = refb;
        } else if (full != rl) {
            return kh_err_set(err, KH_ECORRUPT, "output '%s': the reference holds other ranges",
                              ot->name);
        }
        int64_t shape[1] = {0};
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e)
            shape[0] += json_integer_value(json_array_get(e, 1));
        kh_tensor *tx = NULL, *ty = NULL;
        kh_check_result r;
        if ((st = kh_tensor_borrow(&tx, dt, 1, shape, (void *)b, rl, err)) ||
            (st = kh_tensor_borrow(&ty, dt, 1, shape, (void *)yb, rl, err)) ||
            (st = kh_check_compare(tx, ty, &c->copts, &r, err))) {
            kh_tensor_free(tx);
            kh_tensor_free(ty);
            free(refb);
            return st;
        }
        if (r.status != KH_CHECK_PASSED && poison && !*untouched_fail) {
            if (kh_dtype_is_float(dt)) {
                for (uint64_t q = 0; q < tx->numel && !*untouched_fail; q++)
                    *untouched_fail = untouched(tx, (int64_t)q, poison);
            } else {
                *untouched_fail = untouched(tx, r.first_fail, poison);
            }
        }
        if (r.status != KH_CHECK_PASSED) {
            size_t l = strlen(r.reason);
            snprintf(r.reason + l, sizeof r.reason - l, " (output '%s', %lld sampled elements)",
                     ot->name, (long long)shape[0]);
        }
        kh_tensor_free(tx);
        kh_tensor_free(ty);
        free(refb);
        kh_check_merge(merged, &r);
        if (merged->final)
            break;
    }
    return KH_OK;
}

static const char *fault_kind(const char *msg)
{
    const char *k = strstr(msg, "khlua-fault: kind=");
    static char kind[48];
    if (k) {
        k += strlen("khlua-fault: kind=");
        size_t n = strcspn(k, " \n;");
        snprintf(kind, sizeof kind, "%.*s", (int)(n < 47 ? n : 47), k);
        return kind;
    }
    /* AddressSanitizer builds: its hard_rss_limit_mb report ends with the
     * process memory map */
    if (strstr(msg, "rss limit") || strstr(msg, "out of memory") || strstr(msg, "out-of-memory") ||
        strstr(msg, "End of process memory map"))
        return "out_of_memory";
    if (strstr(msg, "SIGSYS"))
        return "forbidden_syscall"; /* the host jail's seccomp filter */
    if (strstr(msg, "SIGSEGV"))
        return "segfault";
    if (strstr(msg, "SIGABRT"))
        return "abort";
    if (strstr(msg, "SIGBUS"))
        return "bus_error";
    if (strstr(msg, "SIGKILL"))
        return "killed";
    if (strstr(msg, "exited with code"))
        return "exit";
    return "crash";
}

/* ---- compute-sanitizer (promotion time) ---------------------------------- */
/* Run sol once under each tool of o->sanitize, in a gpu worker of its own
 * started through the launch template with compute-sanitizer in front, and
 * judge the tool's report: one correctness trial, then the timing phase of
 * the evaluation's protocol (every call on fresh inputs, after a reload).  Only records naming the candidate's kernels
 * count (the worker's own generator and checksum kernels run under the tool
 * too).  Buffers get no guard bands here ("guard_bytes": 0): memcheck must
 * see the allocation's true end.  Outputs are poisoned (so initcheck does
 * not blame the worker's copy of an unwritten output), workspaces zeroed
 * only when the manifest says so (a kernel reading workspace it never wrote
 * is what initcheck is for).  The tools' own failures (no report) are
 * recorded as "incomplete", not blamed on the candidate. */
static kh_status sanitize(wctx *c, const kh_task_solution *sol, const art *a, verdict *v,
                          json_t *kl, kh_err *err)
{
    char cs[4096];
    kh_status st = kh_san_find(c->ev->e, cs, sizeof cs, err);
    if (st)
        return kh_err_prefix(err, "sanitize");
    const kh_task_manifest *m = sol->manifest;
    const char *kernels[64];
    size_t nk = 0;
    for (size_t l = 0; l < m->nlaunches && nk < 64; l++)
        kernels[nk++] = m->launches[l].kernel;
    json_t *all = json_object();
    json_object_set_new(kl, "sanitizer", all);
    double dl = c->o->sanitize_deadline_s > 0 ? c->o->sanitize_deadline_s : 4 * c->o->deadline_s;
    for (const char *q = c->o->sanitize; *q && !st && !v->failed;) {
        size_t l = strcspn(q, ",");
        char tool[32];
        snprintf(tool, sizeof tool, "%.*s", (int)(l < 31 ? l : 31), q);
        q += l + (q[l] == ',');
        const char *check = kh_san_check_name(tool);
        if (!check)
            continue; /* validated in kh_eval_run; empty items are skipped */
        const char *tmp = getenv("TMPDIR");
        char dir[4096], log[4200], tmpl[8192];
        snprintf(dir, sizeof dir, "%s/khlua-san-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir))
            return kh_err_set(err, KH_EIO, "sanitize: mkdtemp: %s", strerror(errno));
        snprintf(log, sizeof log, "%s/%s.log", dir, tool);
        if ((st = kh_san_template(cs, tool, log, getenv("KHLUA_SANITIZER_FLAGS"), c->ev->launch,
                                  tmpl, sizeof tmpl, err))) {
            rmdir(dir);
            return st;
        }
        double t0 = kh_now();
        kh_wproc_opts wo = {.role = "gpu", .launch = tmpl, .exe = c->ev->exe,
                            .hello_timeout_s = 180, .exit_grace_s = 60};
        /* no CUPTI: it and the sanitizer both instrument the process, and
         * nothing is timed here */
        const char *envs[3] = {"KHLUA_NO_CUPTI=1", NULL, NULL};
#ifdef KH_ASAN
        /* compute-sanitizer injects its library with LD_PRELOAD, ahead of
         * AddressSanitizer's runtime, which then refuses to start */
        char asan[1200];
        const char *cur = getenv("ASAN_OPTIONS");
        snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sverify_asan_link_order=0", cur ? cur : "",
                 cur && *cur ? ":" : "");
        envs[1] = asan;
#endif
        wo.env = envs;
        kh_err werr;
        kh_wproc *w = kh_wproc_start(&wo, &werr);
        unsigned char *text = NULL;
        size_t tn = 0;
        if (!w) {
            kh_err rerr;
            if (read_whole(log, &text, &tn, &rerr) == KH_OK)
                text[tn] = 0; /* read_whole leaves room after the bytes */
            st = kh_err_set(err, KH_ENODEV, "sanitize: no gpu worker under compute-sanitizer "
                            "%s: %s%s%.400s", tool, werr.msg, text ? "; its log: " : "",
                            text ? (char *)text : "");
            free(text);
            unlink(log);
            rmdir(dir);
            return st;
        }
        /* one correctness trial, the first seed */
        size_t saved = c->ntrials;
        c->ntrials = 1;
        free(c->pl);
        c->pl = NULL;
        c->pl_len = 0;
        size_t off = 0;
        json_t *p = NULL;
        st = pl_add(c, a->bytes, a->len, &off, err);
        if (!st)
            st = make_request(c, sol, a, 1, &p, err);
        c->ntrials = saved;
        const char *worker = "ok";
        char wmsg[600];
        if (!st) {
            /* the timing phase too, as the evaluation runs it (the same
             * protocol, call count, fresh inputs per call, module reloaded
             * first), unverified: a kernel that misbehaves only there, or only
             * after N calls, is under the tool as well */
            add_timing(c, p, 0);
            json_t *tm = json_object_get(p, "timing");
            json_object_set_new(tm, "timeout_s", json_real(dl));
            json_object_set_new(tm, "cold", json_false());
            json_object_set_new(p, "checks", json_pack("{s:b, s:b}", "poison", 1,
                                                       "reload_before_timing", 1));
            json_object_set_new(p, "guard_bytes", json_integer(0));
            json_object_set_new(p, "deadline_s", json_real(dl));
            kh_msg reply;
            memset(&reply, 0, sizeof reply);
            kh_status ws = kh_wproc_call(w, "evaluate", p, c->pl, c->pl_len, dl + 5, &reply,
                                         &werr);
            if (ws) {
                snprintf(wmsg, sizeof wmsg, "%s", werr.msg);
                worker = wmsg;
            }
            kh_msg_free(&reply);
        }
        json_decref(p);
        /* the report is complete once the tool has exited */
        kh_wproc_stop(w, 60);
        if (st) {
            unlink(log);
            rmdir(dir);
            return st;
        }
        kh_err rerr;
        if (read_whole(log, &text, &tn, &rerr) == KH_OK)
            text[tn] = 0; /* read_whole leaves room after the bytes */
        unlink(log);
        rmdir(dir);
        kh_san_report sr;
        kh_san_parse(text ? (char *)text : "", tool, kernels, nk, &sr);
        free(text);
        const char *state = sr.errors ? "errors" : sr.summary ? "clean" : "incomplete";
        json_object_set_new(all, tool,
                            json_pack("{s:s, s:i, s:i, s:i, s:I, s:s, s:s, s:f}", "status", state,
                                      "errors", sr.errors, "warnings", sr.warnings, "ignored",
                                      sr.ignored, "summary_count", (json_int_t)sr.summary_count,
                                      "report", sr.first, "worker", worker, "seconds",
                                      kh_now() - t0));
        json_object_set_new(v->checks, check,
                            json_string(sr.errors ? "failed" : sr.summary ? "ok" : "incomplete"));
        if (sr.errors)
            fail(v, "RUNTIME_ERROR", check, "compute-sanitizer %s: %d error%s in the candidate's "
                 "kernels; the first: %.480s", tool, sr.errors, sr.errors == 1 ? "" : "s",
                 sr.first);
    }
    return KH_OK;
}

/* ---- one workload --------------------------------------------------------- */
/* Sampling: one call's samples (the first output, at slice `outs` of the
 * reply; tile copies of the batch in the TVD phase) checked against [0,
 * vocab_size) and the valid mask and, when counts is not NULL, counted per
 * row.  *untouched_fail: the first bad id still holds the poison. */
static kh_status sampling_call(wctx *c, const kh_msg *m, const json_t *outs, uint64_t *counts,
                               unsigned poison, kh_check_result *r, int *untouched_fail,
                               kh_err *err)
{
    *untouched_fail = 0;
    const kh_task_tensor *ot = &c->d->outputs[0];
    kh_dtype dt;
    kh_status st = kh_dtype_parse(ot->dtype, &dt, err);
    if (st)
        return st;
    const kh_tensor *probs = NULL;
    const unsigned char *mask = NULL;
    if ((st = sampling_mask(c, &probs, &mask, err)))
        return st;
    int64_t shape[1] = {probs->shape[0] * (c->tile > 1 ? c->tile : 1)};
    size_t want = out_bytes(c->d, ot, c->axes_over ? c->axes_over : c->w->axes);
    if (want != kh_dtype_nbytes(dt, (uint64_t)shape[0]))
        return kh_err_set(err, KH_EINVAL, "sampling: output '%s' holds %zu bytes, not one id per "
                          "batch row", ot->name, want);
    const unsigned char *b = reply_bytes(m, json_object_get(outs, ot->name), want);
    if (!b)
        return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks output '%s'", ot->name);
    kh_tensor *tx = NULL;
    /* the zero-probability check is khlua's: off in parity runs */
    if ((st = kh_tensor_borrow(&tx, dt, 1, shape, (void *)b, want, err)) ||
        (st = kh_check_sampling_count(tx, probs->shape[0], probs->shape[1],
                                      c->smethod == KH_SAMPLING_NONE ? NULL : mask,
                                      kh_check_sampling_method_name(c->smethod),
                                      c->o->parity ? NULL : probs, counts, r, err))) {
        kh_tensor_free(tx);
        return st;
    }
    if (r->status != KH_CHECK_PASSED) {
        if (poison)
            *untouched_fail = untouched(tx, r->first_fail, poison);
        size_t l = strlen(r->reason);
        snprintf(r->reason + l, sizeof r->reason - l, " (output '%s')", ot->name);
    }
    kh_tensor_free(tx);
    return KH_OK;
}

/* FIB's TVD phase (check.h): skipped when the nucleus is too large for
 * 500000 samples to tell; else the candidate is called on the batch
 * repeated `tile` times, in requests of at most SAMPLING_CHUNK calls filed
 * together (they run in parallel), and every call's samples are checked and
 * counted.  Fills *extra (FIB's Correctness.extra) and v.  KH_ESTATE while
 * requests are pending. */
#define SAMPLING_CHUNK 256
static kh_status sampling_tvd(wctx *c, const kh_task_solution *sol, const art *a, verdict *v,
                              json_t **extra, kh_err *err)
{
    const kh_tensor *probs = NULL;
    const unsigned char *mask = NULL;
    kh_status st = sampling_mask(c, &probs, &mask, err);
    if (st)
        return st;
    int64_t B = probs->shape[0], V = probs->shape[1];
    if (B < 1 || V < 1)
        return kh_err_set(err, KH_EINVAL, "workload %s: probs is [%lld, %lld]: nothing to sample",
                          c->w->uuid, (long long)B, (long long)V);
    int64_t nucleus = kh_check_sampling_nucleus(probs, mask);
    /* FIB's calls, capped for batches so large that a call holds few copies
     * of the batch (FIB divides by zero past 10000 rows); the skip rule then
     * uses the samples actually drawn */
    int64_t tile = KH_SAMPLING_TVD_ROWS / B;
    if (tile < 1)
        tile = 1;
    uint64_t calls = (KH_SAMPLING_TVD_SAMPLES + (uint64_t)tile - 1) / (uint64_t)tile;
    if (calls > KH_SAMPLING_MAX_CALLS)
        calls = KH_SAMPLING_MAX_CALLS;
    if (sqrt((double)nucleus / (double)(calls * (uint64_t)tile)) > c->tvd_threshold) {
        /* the noise of 500000 samples alone would exceed the bound: the
         * mask check above is the test (FIB's tvd_skipped) */
        json_decref(*extra);
        *extra = json_pack("{s:b, s:I, s:f, s:I, s:s}", "tvd_skipped", 1, "max_nucleus_size",
                           (json_int_t)nucleus, "tvd_threshold", c->tvd_threshold,
                           "validation_trials", (json_int_t)c->ntrials, "thresholding",
                           kh_check_sampling_method_name(c->smethod));
        kh_check_result_init(&v->acc);
        v->acc.max_abs_error = v->acc.max_rel_error = 0;
        v->has_correctness = 1;
        return KH_OK;
    }
    /* every tensor input is repeated along its first axis, that of probs */
    size_t bax = 0;
    for (size_t i = 0; i < c->d->ninputs; i++) {
        const kh_task_tensor *t = &c->d->inputs[i];
        if (!strcmp(t->name, "probs"))
            bax = t->dims[0];
    }
    for (size_t i = 0; i < c->d->ninputs; i++) {
        const kh_task_tensor *t = &c->d->inputs[i];
        if (!t->is_scalar && t->dims[0] != bax)
            return kh_err_set(err, KH_EUNSUPPORTED, "definition '%s' (sampling evaluator): the "
                              "TVD test repeats every tensor input along the batch axis, but "
                              "input '%s' does not start with it", c->d->name, t->name);
    }
    size_t nchunks = (size_t)((calls + SAMPLING_CHUNK - 1) / SAMPLING_CHUNK);
    int64_t *axes = malloc((c->d->naxes + 1) * sizeof *axes);
    uint64_t *counts = calloc((size_t)(B * V), sizeof *counts);
    uint64_t *saved = malloc(sizeof c->seeds);
    if (!axes || !counts || !saved) {
        free(axes);
        free(counts);
        free(saved);
        return kh_err_set(err, KH_ENOMEM, "out of memory for the TVD test");
    }
    memcpy(axes, c->w->axes, c->d->naxes * sizeof *axes);
    axes[bax] *= tile;
    memcpy(saved, c->seeds, sizeof c->seeds);
    size_t saved_n = c->ntrials;
    c->tile_seed = saved[0];
    c->tile = tile;
    c->axes_over = axes;
    c->light = 1;
    const char *bad = NULL; /* a failed call's check, once v holds it */
    /* khlua's check (not in parity runs): ids of consecutive calls at the
     * same position repeat about as often as independent draws do, so a
     * sampler that ignores its seed (one fixed draw per position: FIB's
     * repeated batch alone would pass it) fails */
    uint64_t same = 0, pairs = 0;
    const kh_task_tensor *ot = &c->d->outputs[0];
    kh_dtype odt;
    if ((st = kh_dtype_parse(ot->dtype, &odt, err)))
        goto done;
    size_t esz = kh_dtype_nbytes(odt, 1), obytes = 0;
    for (size_t k = 0; k < nchunks && !st && !bad; k++) {
        size_t n = (size_t)(calls - k * SAMPLING_CHUNK < SAMPLING_CHUNK ? calls - k * SAMPLING_CHUNK
                                                                       : SAMPLING_CHUNK);
        for (size_t i = 0; i < n; i++)
            c->seeds[i] = kh_rng_derive_seed(saved[0], 0x7D, k * SAMPLING_CHUNK + i) & INT64_MAX;
        c->ntrials = n;
        free(c->pl);
        c->pl = NULL;
        c->pl_len = 0;
        size_t off = 0;
        json_t *p = NULL;
        wres r;
        if ((st = pl_add(c, a->bytes, a->len, &off, err)) ||
            (st = make_request(c, sol, a, 0, &p, err)))
            break;
        call_worker(c, is_host(sol), p, a, &r);
        json_decref(p);
        if (c->pending)
            continue; /* file the other chunks too */
        if (r.st && (r.not_run || r.st == KH_ESTATE || r.st == KH_EIO || r.st == KH_ENODEV)) {
            st = kh_err_set(err, r.st == KH_ECHILD ? KH_ENODEV : r.st, "TVD test: %s",
                            r.err.msg);
            break;
        }
        if (r.st) {
            bad = r.st == KH_ETIMEOUT ? "deadline" : "tvd_calls";
            fail(v, r.st == KH_ETIMEOUT ? "TIMEOUT" : "RUNTIME_ERROR", bad,
                 "TVD test, calls %zu to %zu: %s", k * SAMPLING_CHUNK,
                 k * SAMPLING_CHUNK + n - 1, r.err.msg);
            break;
        }
        json_t *res = json_object_get(r.reply.head, "result"), *f;
        size_t fi;
        json_array_foreach(json_object_get(res, "failures"), fi, f) {
            const char *ck = json_string_value(json_object_get(f, "check"));
            const char *d = json_string_value(json_object_get(f, "detail"));
            if (ck && (!strcmp(ck, "inputs_unchanged") || !strcmp(ck, "guards") ||
                       !strcmp(ck, "late_write"))) {
                bad = ck;
                json_object_set_new(v->checks, ck, json_string("failed"));
                fail(v, "RUNTIME_ERROR", ck, "TVD test: %s", d ? d : "");
                break;
            }
        }
        json_t *trials = json_object_get(res, "trials");
        for (size_t t = 0; t < n && !bad && !st; t++) {
            kh_check_result rc;
            int u = 0;
            json_t *tr = json_array_get(trials, t);
            if (!tr) {
                st = kh_err_set(err, KH_ECORRUPT, "TVD test: the worker answered %zu of %zu "
                                "calls", json_array_size(trials), n);
                break;
            }
            if ((st = sampling_call(c, &r.reply, json_object_get(tr, "outputs"), counts, 0, &rc,
                                    &u, err)))
                break;
            if (t > 0 && rc.status == KH_CHECK_PASSED) {
                obytes = out_bytes(c->d, ot, axes);
                const unsigned char *x = reply_bytes(&r.reply, json_object_get(json_object_get(
                                                         json_array_get(trials, t - 1), "outputs"),
                                                         ot->name), obytes),
                                    *y = reply_bytes(&r.reply, json_object_get(
                                                         json_object_get(tr, "outputs"), ot->name),
                                                     obytes);
                for (size_t q = 0; x && y && q + esz <= obytes; q += esz) {
                    same += !memcmp(x + q, y + q, esz);
                    pairs++;
                }
            }
            if (rc.status != KH_CHECK_PASSED) {
                bad = "correctness";
                kh_check_merge(&v->acc, &rc);
                v->has_correctness = 1;
                fail(v, kh_check_status_name(rc.status), "correctness",
                     "TVD test, call %zu (seed %llu): %s", k * SAMPLING_CHUNK + t,
                     (unsigned long long)c->seeds[t], rc.reason);
            }
        }
    }
done:
    memcpy(c->seeds, saved, sizeof c->seeds);
    c->ntrials = saved_n;
    c->tile = 0;
    c->axes_over = NULL;
    c->light = 0;
    free(saved);
    free(axes);
    if (!st && c->pending)
        st = kh_err_set(err, KH_ESTATE, "pending");
    if (!st && !bad) {
        double *tvds = calloc((size_t)B + 1, sizeof *tvds);
        kh_check_result rt;
        uint64_t per_row = calls * (uint64_t)tile;
        if (!tvds)
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
        else
            st = kh_check_sampling_tvd(probs, c->smethod == KH_SAMPLING_NONE ? NULL : mask,
                                       counts, per_row, c->tvd_threshold, tvds, &rt, err);
        if (!st) {
            json_t *per = json_array();
            double worst = 0;
            for (int64_t b = 0; b < B; b++) {
                json_array_append_new(per, json_real(tvds[b]));
                worst = tvds[b] > worst ? tvds[b] : worst;
            }
            json_decref(*extra);
            *extra = json_pack("{s:f, s:o, s:f, s:I, s:s, s:I, s:I, s:I, s:I}", "tvd", worst,
                               "tvds_per_batch", per, "tvd_threshold", c->tvd_threshold,
                               "validation_trials", (json_int_t)c->ntrials, "thresholding",
                               kh_check_sampling_method_name(c->smethod), "max_nucleus_size",
                               (json_int_t)nucleus, "tvd_samples_per_row", (json_int_t)per_row,
                               "tvd_calls", (json_int_t)calls, "tvd_repeat", (json_int_t)tile);
            kh_check_result_init(&v->acc);
            kh_check_merge(&v->acc, &rt);
            v->has_correctness = 1;
            /* independent draws from q repeat with probability sum_v q_v^2
             * per row; the rows weigh equally in the repeated batch */
            double coll = 0;
            const float *pf = probs->data;
            for (int64_t b = 0; b < B; b++) {
                double sum = 0, sq = 0;
                for (int64_t x = 0; x < V; x++)
                    sum += mask[b * V + x] ? pf[b * V + x] : 0.0f;
                for (int64_t x = 0; x < V; x++) {
                    double q = mask[b * V + x] ? pf[b * V + x] / sum : 0;
                    sq += q * q;
                }
                coll += sq / (double)B;
            }
            double seen = pairs ? (double)same / (double)pairs : 0;
            json_object_set_new(*extra, "repeat_rate", json_real(seen));
            json_object_set_new(*extra, "repeat_rate_expected", json_real(coll));
            if (rt.status != KH_CHECK_PASSED) {
                fail(v, kh_check_status_name(rt.status), "correctness", "%s", rt.reason);
            } else if (!c->o->parity && pairs && seen > coll + 0.05) {
                /* 0.05 is hundreds of standard errors of the rate over
                 * 500000 draws per row: only a sampler that repeats fails */
                json_object_set_new(v->checks, "fresh_samples", json_string("failed"));
                v->acc.max_abs_error = v->acc.max_rel_error = INFINITY;
                fail(v, "INCORRECT_NUMERICAL", "fresh_samples",
                     "consecutive calls gave the same id at %.1f%% of positions, where "
                     "independent draws from probs repeat at %.1f%%: the sampler does not draw "
                     "afresh on each call (does it ignore its seed?)", 100 * seen, 100 * coll);
            } else if (!c->o->parity) {
                json_object_set_new(v->checks, "fresh_samples", json_string("ok"));
            }
        }
        free(tvds);
    }
    free(counts);
    return st;
}

static kh_status eval_workload(wctx *c, const kh_task_solution *sol, const kh_task_solution *ref,
                               const char *sol_hash, json_t **trace, kh_err *err)
{
    const kh_eval_opts *o = c->o;
    verdict v;
    memset(&v, 0, sizeof v);
    v.status = "PASSED";
    kh_check_result_init(&v.acc);
    v.checks = json_object();
    json_t *kl = json_object(), *ev = json_object(), *perf = NULL, *timing = NULL;
    json_t *samples = NULL, *samp_extra = NULL;
    kh_status st = KH_OK;
    wres r;
    memset(&r, 0, sizeof r);
    art *a = NULL;
    refout *ro[64] = {0};
    char ref_hash[33] = "";

    json_t *seeds = json_array();
    for (size_t t = 0; t < c->ntrials; t++)
        json_array_append_new(seeds, json_integer((json_int_t)c->seeds[t]));
    json_object_set_new(kl, "seeds", seeds);
    json_object_set_new(kl, "base_seed", json_integer((json_int_t)c->base_seed));
    const int timed = o->timing && !c->shape_of;
    json_object_set_new(kl, "protocol", json_string(timed ? o->protocol : "none"));
    if (c->shape_of)
        json_object_set_new(kl, "shape_of", json_string(c->shape_of->uuid));
    if (c->shapes_info)
        json_object_set_new(kl, "shapes", json_incref(c->shapes_info));
    json_object_set_new(kl, "parity", json_boolean(o->parity));
    json_object_set_new(kl, "backend",
                        json_string(is_host(sol) ? "host" : is_so(sol) ? "cuda_so" : "cuda"));
    json_object_set_new(kl, "evaluator", json_string(kh_check_evaluator_name(c->evaluator)));
    {
        /* where the verdict was made: the store refuses an evaluation
         * without a host or a GPU UUID (the GPU's is added from the reply) */
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) != 0 || !host[0])
            snprintf(host, sizeof host, "unknown");
        json_object_set_new(kl, "host", json_string(host));
    }

    /* c->pyref_*: the driver restores this workload's from its earlier
     * rounds (a Python run in round one stays "python" when the reply
     * arrives in round two) */
    if (c->bad_solution[0]) {
        fail(&v, "COMPILE_ERROR", NULL, "%s", c->bad_solution);
        json_object_set_new(ev, "log", json_string(c->bad_solution));
        goto verdict;
    }
    if ((st = build(c->ev, sol, 0, &a, err)))
        goto out;
    if (!a->ok) {
        fail(&v, "COMPILE_ERROR", NULL, "%.600s", a->log ? a->log : "compile failed");
        json_object_set_new(ev, "log", json_string(a->log ? a->log : ""));
        goto verdict;
    }
    /* sampling: FIB's baseline is the distribution itself, the reference
     * runs only to be timed */
    if (c->evaluator != KH_EVAL_SAMPLING && (st = ref_outputs(c, ref, ro, ref_hash, err)))
        goto out;

    free(c->pl);
    c->pl = NULL;
    c->pl_len = 0;
    size_t off = 0;
    json_t *p = NULL;
    if ((st = pl_add(c, a->bytes, a->len, &off, err)))
        goto out;
    if ((st = make_request(c, sol, a, 0, &p, err))) {
        if (!c->shape_of || st == KH_ENOMEM)
            goto out;
        /* the candidate's manifest does not resolve on an admissible shape */
        st = KH_OK;
        fail(&v, "RUNTIME_ERROR", "shapes", "on shape %s (from workload %s): %s", c->w->uuid,
             c->shape_of->uuid, err->msg);
        goto verdict;
    }
    if (timed)
        add_timing(c, p, !o->parity);
    call_worker(c, is_host(sol), p, a, &r);
    json_decref(p);
    if (c->pending) {
        st = KH_ESTATE;
        goto out;
    }
    json_object_set_new(kl, "worker_seconds", json_real(r.seconds));
    const job *cand = c->last;
    if (cand && cand->placement)
        json_object_set(kl, "placement", cand->placement);
    if (r.st && r.not_run) {
        st = kh_err_set(err, r.st == KH_ECHILD ? KH_ENODEV : r.st, "no %s worker: %s",
                        is_host(sol) ? "host" : "gpu", r.err.msg);
        goto out;
    }
    if (r.st == KH_ETIMEOUT) {
        fail(&v, "TIMEOUT", "deadline", "%s", r.err.msg);
        goto verdict;
    }
    if (r.st == KH_ENODEV && !r.reply.head) {
        st = kh_err_set(err, KH_ENODEV, "%s", r.err.msg);
        goto out;
    }
    if (r.st == KH_ECHILD && !r.reply.head) {
        const char *k = fault_kind(r.err.msg);
        json_object_set_new(kl, "fault", json_string(k));
        fail(&v, "RUNTIME_ERROR",
             !strcmp(k, "guard_page")          ? "guards"
             : !strcmp(k, "forbidden_syscall") ? "sandbox"
                                               : NULL,
             "%s", r.err.msg);
        /* the candidate broke this worker, not the machine: no backoff */
        if (is_host(sol) && c->ev->host)
            kh_pool_reset(c->ev->host);
        goto verdict;
    }
    if (r.st == KH_ECOMPILE) {
        fail(&v, "COMPILE_ERROR", NULL, "%s", r.err.msg);
        goto verdict;
    }
    if (r.st == KH_ESTATE || r.st == KH_EIO || (r.st && !r.reply.head)) {
        st = kh_err_set(err, r.st, "%s", r.err.msg);
        goto out;
    }
    if (r.st) { /* the worker refused the call: the candidate cannot be run so */
        fail(&v, "RUNTIME_ERROR", NULL, "%s", r.err.msg);
        goto verdict;
    }

    {
        json_t *res = json_object_get(r.reply.head, "result");
        json_t *trials = json_object_get(res, "trials"), *failures = json_object_get(res, "failures");
        json_object_set(kl, "worker", json_object_get(res, "worker"));
        const char *gu = json_string_value(json_object_get(json_object_get(res, "gpu"), "uuid"));
        if (gu && *gu)
            json_object_set_new(kl, "gpu_uuid", json_string(gu));
        if (json_object_get(res, "gpu"))
            json_object_set(kl, "gpu", json_object_get(res, "gpu"));
        int hard = !o->parity;
        int poison_ok = 1, inputs_ok = 1, guards_ok = 1, det_ok = 1;
        /* FlashInfer-Bench evaluates trial by trial, output by output. */
        for (size_t t = 0; t < c->ntrials; t++) {
            json_t *tr = json_array_get(trials, t);
            size_t fi;
            json_t *f;
            json_array_foreach(failures, fi, f) {
                json_t *ft = json_object_get(f, "trial");
                if (!ft || json_integer_value(ft) < 0 || (size_t)json_integer_value(ft) != t)
                    continue;
                const char *ck = json_string_value(json_object_get(f, "check"));
                const char *d = json_string_value(json_object_get(f, "detail"));
                if (ck && !strcmp(ck, "inputs_unchanged")) {
                    inputs_ok = 0;
                    fail(&v, "RUNTIME_ERROR", "inputs_unchanged", "trial %zu: %s", t, d ? d : "");
                } else if (ck && !strcmp(ck, "guards")) {
                    guards_ok = 0;
                    fail(&v, "RUNTIME_ERROR", "guards", "trial %zu: %s", t, d ? d : "");
                } else if (ck && !strcmp(ck, "late_write")) {
                    json_object_set_new(v.checks, "late_write", json_string("failed"));
                    fail(&v, "RUNTIME_ERROR", "late_write", "trial %zu: %s", t, d ? d : "");
                }
            }
            if (strcmp(v.status, "PASSED"))
                break;
            kh_check_result ra, rb;
            int ua = 0, ub = 0;
            if (c->evaluator == KH_EVAL_SAMPLING) {
                /* every call in range and in the valid mask (the second
                 * poison's call, same seed, too) */
                if ((st = sampling_call(c, &r.reply, json_object_get(tr, "outputs"), NULL,
                                        hard ? 0xFF : 0, &ra, &ua, err)))
                    goto out;
                if (ra.status == KH_CHECK_PASSED && hard && json_object_get(tr, "outputs_b") &&
                    !json_is_true(json_object_get(tr, "outputs_b_same")) &&
                    (st = sampling_call(c, &r.reply, json_object_get(tr, "outputs_b"), NULL, 0x7F,
                                        &ra, &ub, err)))
                    goto out;
                if (ra.status != KH_CHECK_PASSED) {
                    kh_check_merge(&v.acc, &ra);
                    v.has_correctness = 1;
                    if (ua || ub)
                        poison_ok = 0;
                    fail(&v, kh_check_status_name(ra.status), ua || ub ? "poison" : "correctness",
                         "trial %zu (seed %llu)%s: %s", t, (unsigned long long)c->seeds[t],
                         ua || ub ? ", ids left as the poison" : "", ra.reason);
                    break;
                }
                continue;
            }
            if ((st = compare_set(c, &r.reply, json_object_get(tr, "outputs"), ro[t], &ra,
                                  hard ? 0xFF : 0, &ua, err)))
                goto out;
            kh_check_merge(&v.acc, &ra);
            v.has_correctness = 1;
            if (ra.status != KH_CHECK_PASSED) {
                if (ua)
                    poison_ok = 0;
                fail(&v, kh_check_status_name(ra.status), ua ? "poison" : "correctness",
                     "trial %zu (seed %llu)%s: %s", t, (unsigned long long)c->seeds[t],
                     ua ? ", elements left as the poison 0xFF" : "", ra.reason);
                break; /* FlashInfer-Bench returns at the first failing trial */
            }
            /* outputs_b_same: the worker found the second poison's outputs
             * bit-identical to the first's, judged above */
            if (hard && json_object_get(tr, "outputs_b") &&
                !json_is_true(json_object_get(tr, "outputs_b_same"))) {
                if ((st = compare_set(c, &r.reply, json_object_get(tr, "outputs_b"), ro[t], &rb,
                                      0x7F, &ub, err)))
                    goto out;
                kh_check_merge(&v.acc, &rb);
                if (rb.status != KH_CHECK_PASSED) {
                    poison_ok = 0;
                    fail(&v, kh_check_status_name(rb.status), "poison",
                         "trial %zu (seed %llu): the output passed under poison 0xFF but not "
                         "under 0x7F%s: %s", t, (unsigned long long)c->seeds[t],
                         ub ? " (elements left unwritten)" : "", rb.reason);
                    break;
                }
            }
            const char *dc = json_string_value(json_object_get(json_object_get(tr, "checks"),
                                                               "deterministic"));
            if (dc && !strcmp(dc, "failed")) {
                det_ok = 0;
                fail(&v, "RUNTIME_ERROR", "deterministic",
                     "trial %zu: two calls on the same inputs gave different bits", t);
                break;
            }
        }
        if (c->evaluator == KH_EVAL_SAMPLING && !strcmp(v.status, "PASSED") &&
            (st = sampling_tvd(c, sol, a, &v, &samp_extra, err)))
            goto out; /* KH_ESTATE: its requests are pending */
        if (hard) {
            json_object_set_new(v.checks, "poison", json_string(poison_ok ? "ok" : "failed"));
            json_object_set_new(v.checks, "inputs_unchanged",
                                json_string(inputs_ok ? "ok" : "failed"));
            json_object_set_new(v.checks, "guards", json_string(guards_ok ? "ok" : "failed"));
            int det = (o->deterministic >= 0 ? o->deterministic : is_host(sol)) &&
                      c->evaluator != KH_EVAL_SAMPLING;
            json_object_set_new(v.checks, "deterministic",
                                json_string(!det ? "off" : det_ok ? "ok" : "failed"));
        }
        json_object_set_new(v.checks, "correctness",
                            json_string(v.failed && !strcmp(v.failed, "correctness") ? "failed"
                                                                                       : "ok"));

        /* Timing: only for outputs that passed. */
        timing = json_object_get(res, "timing");
        if (!strcmp(v.status, "PASSED") && json_is_object(timing)) {
            const char *ts = json_string_value(json_object_get(timing, "status"));
            if (ts && strcmp(ts, "OK")) {
                const char *why = json_string_value(json_object_get(timing, "why"));
                fail(&v, "RUNTIME_ERROR", "kernel_set", "timing: %s", why ? why : ts);
            }
            /* failures during timing (no trial): inputs changed, guards */
            size_t fi;
            json_t *f;
            json_array_foreach(failures, fi, f) {
                json_t *ft = json_object_get(f, "trial"); /* absent or -1: timing */
                if (ft && json_integer_value(ft) >= 0)
                    continue;
                const char *ck = json_string_value(json_object_get(f, "check"));
                const char *d = json_string_value(json_object_get(f, "detail"));
                if (ck && (!strcmp(ck, "inputs_unchanged") || !strcmp(ck, "guards") ||
                           !strcmp(ck, "late_write"))) {
                    json_object_set_new(v.checks, ck, json_string("failed"));
                    fail(&v, "RUNTIME_ERROR",
                         !strcmp(ck, "guards")       ? "guards"
                         : !strcmp(ck, "late_write") ? "late_write"
                                                     : "inputs_unchanged",
                         "%s", d ? d : "");
                }
            }
            json_t *tos = json_object_get(res, "timed_outputs");
            size_t ti, nverified = 0, nbad = 0;
            json_t *to;
            /* A timed output names the seed of its input set ("seed"), or
             * the trial whose inputs it used ("set" alone, the host worker's
             * sets are the trials' inputs).  Seeds not seen in correctness
             * (the gpu worker's timing sets) get reference outputs now. */
            uint64_t tseeds[KH_MAX_VERIFIED];
            json_t *tranges[KH_MAX_VERIFIED];
            size_t ntseeds = 0;
            int any_ranges = 0;
            json_array_foreach(tos, ti, to) {
                json_t *sj = json_object_get(to, "seed");
                json_int_t set = json_integer_value(json_object_get(to, "set"));
                uint64_t sd = sj ? (uint64_t)json_integer_value(sj)
                              : set >= 0 && (size_t)set < c->ntrials ? c->seeds[set] : 0;
                int have = 0;
                for (size_t k = 0; k < ntseeds; k++)
                    have |= tseeds[k] == sd;
                if (!have && ntseeds < KH_MAX_VERIFIED) {
                    tranges[ntseeds] = json_object_get(to, "ranges");
                    any_ranges |= tranges[ntseeds] != NULL;
                    tseeds[ntseeds++] = sd;
                }
            }
            refout *tro[KH_MAX_VERIFIED] = {0};
            char unused[33];
            if (c->evaluator == KH_EVAL_SAMPLING) {
                /* a sample has no reference to match: in range is the check */
                ntseeds = 0;
                json_array_foreach(tos, ti, to) {
                    kh_check_result rt;
                    int ut = 0;
                    if ((st = sampling_call(c, &r.reply, json_object_get(to, "outputs"), NULL,
                                            0xFF, &rt, &ut, err)))
                        goto out;
                    nverified++;
                    if (rt.status != KH_CHECK_PASSED) {
                        nbad++;
                        fail(&v, "INCORRECT_NUMERICAL", "timed_outputs", "timed call %lld: %s",
                             (long long)json_integer_value(json_object_get(to, "call")),
                             rt.reason);
                        v.acc.max_abs_error = v.acc.max_rel_error = INFINITY;
                    }
                }
            }
            if (ntseeds && (st = ref_outputs_for(c, ref, tseeds, any_ranges ? tranges : NULL,
                                                 ntseeds, tro, unused, err)))
                goto out;
            json_array_foreach(tos, ti, to) {
                if (c->evaluator == KH_EVAL_SAMPLING)
                    break;
                json_t *sj = json_object_get(to, "seed");
                json_int_t set = json_integer_value(json_object_get(to, "set"));
                uint64_t sd = sj ? (uint64_t)json_integer_value(sj)
                              : set >= 0 && (size_t)set < c->ntrials ? c->seeds[set] : 0;
                refout *rref = NULL;
                for (size_t k = 0; k < ntseeds; k++)
                    if (tseeds[k] == sd)
                        rref = tro[k];
                if (!rref)
                    continue;
                kh_check_result rt;
                int ut = 0;
                const json_t *rgs = json_object_get(to, "ranges");
                if ((st = rgs ? compare_ranged(c, &r.reply, json_object_get(to, "outputs"), rgs,
                                               rref, &rt, 0xFF, &ut, err)
                              : compare_set(c, &r.reply, json_object_get(to, "outputs"), rref,
                                            &rt, 0xFF, &ut, err)))
                    goto out;
                nverified++;
                if (rt.status != KH_CHECK_PASSED) {
                    nbad++;
                    fail(&v, "INCORRECT_NUMERICAL", "timed_outputs",
                         "timed call %lld (input set %lld, seed %llu): %s",
                         (long long)json_integer_value(json_object_get(to, "call")),
                         (long long)set, (unsigned long long)sd, rt.reason);
                    if (!v.has_correctness || v.acc.max_abs_error < rt.max_abs_error)
                        v.acc.max_abs_error = rt.max_abs_error;
                    if (v.acc.max_rel_error < rt.max_rel_error)
                        v.acc.max_rel_error = rt.max_rel_error;
                }
            }
            if (hard) {
                json_object_set_new(v.checks, "timed_outputs",
                                    json_string(nbad ? "failed" : nverified ? "ok" : "none sampled"));
                json_object_set_new(kl, "timed_outputs_verified",
                                    json_pack("{s:I, s:I}", "calls", (json_int_t)nverified,
                                              "failed", (json_int_t)nbad));
            }
            double lat = json_number_value(json_object_get(timing, "latency_ns"));
            /* speed of light: nothing moves the task's minimum bytes faster
             * than the fastest measured copy, nor does its FLOPs faster than
             * the peak */
            int64_t sb = 0, sf = -1;
            kh_err serr;
            if (kh_task_speed_of_light(c->d, c->w->axes, &sb, &sf, &serr) == KH_OK) {
                double bw = json_number_value(json_object_get(timing, "copy_bandwidth_Bps"));
                /* The GPU's bound is the task's bytes at the measured DRAM
                 * copy rate (what a SoL fraction is read against); a call
                 * is only rejected below bound / 1.5, since inputs that fit
                 * in the 60 MiB L2 can beat a DRAM copy.  The host worker's
                 * bandwidth is measured in cache already. */
                double margin = 1.0;
                if (bw <= 0 && !is_host(sol)) {
                    bw = gpu_bandwidth(c, json_string_value(json_object_get(
                                              json_object_get(res, "gpu"), "uuid")),
                                       cand ? cand->slot : 0);
                    margin = 1.5;
                }
                double pk = json_number_value(json_object_get(timing, "peak_flops"));
                double bound = 0;
                if (bw > 0)
                    bound = (double)sb / bw * 1e9;
                if (pk > 0 && sf > 0 && (double)sf / pk * 1e9 > bound)
                    bound = (double)sf / pk * 1e9;
                json_object_set_new(kl, "speed_of_light",
                                    json_pack("{s:I, s:I, s:f, s:f, s:f, s:f}", "bytes",
                                              (json_int_t)sb, "flops", (json_int_t)sf,
                                              "copy_bandwidth_Bps", bw, "peak_flops", pk,
                                              "bound_ns", bound, "reject_below_ns",
                                              bound / margin));
                if (hard) {
                    if (bound <= 0)
                        json_object_set_new(v.checks, "speed_of_light", json_string("unknown"));
                    else if (lat < bound / margin) {
                        json_object_set_new(v.checks, "speed_of_light", json_string("failed"));
                        fail(&v, "RUNTIME_ERROR", "speed_of_light",
                             "latency %.1f ns is below the speed-of-light bound %.1f ns "
                             "(%lld bytes at %.3g B/s%s%s): impossible", lat, bound / margin,
                             (long long)sb, bw, sf > 0 && pk > 0 ? ", or the FLOPs at the peak" : "",
                             margin > 1 ? ", over 1.5 for the L2" : "");
                    } else
                        json_object_set_new(v.checks, "speed_of_light", json_string("ok"));
                }
            }
            if (hard && !json_object_get(v.checks, "kernel_set") &&
                !json_object_get(timing, "kernels_per_call") && is_host(sol))
                json_object_set_new(v.checks, "kernel_set", json_string("n/a (host)"));
            json_object_set_new(kl, "timer", json_incref(json_object_get(timing, "timer")));
            samples = json_incref(json_object_get(timing, "samples_ns"));
            if (!strcmp(v.status, "PASSED")) {
                double ref_ns = NAN;
                if (o->time_reference && (st = ref_latency(c, ref, &ref_ns, err)))
                    goto out;
                perf = json_pack("{s:f}", "latency_ms", lat / 1e6);
                /* where the speedup's other side was measured (same GPU) */
                if (c->ref_timing && c->ref_timing->placement)
                    json_object_set(kl, "reference_placement", c->ref_timing->placement);
                if (isfinite(ref_ns) && ref_ns > 0) {
                    json_object_set_new(perf, "reference_latency_ms", json_real(ref_ns / 1e6));
                    json_object_set_new(perf, "speedup_factor", json_real(ref_ns / lat));
                }
            }
            json_t *tcopy = json_deep_copy(timing);
            json_object_del(tcopy, "samples_ns");
            json_object_set_new(kl, "timing", tcopy);
        }
    }

    if (o->sanitize && *o->sanitize && !strcmp(v.status, "PASSED")) {
        if (is_host(sol)) {
            for (const char *q = o->sanitize; *q;) {
                size_t l = strcspn(q, ",");
                char tool[32];
                snprintf(tool, sizeof tool, "%.*s", (int)(l < 31 ? l : 31), q);
                q += l + (q[l] == ',');
                if (kh_san_check_name(tool))
                    json_object_set_new(v.checks, kh_san_check_name(tool),
                                        json_string("n/a (host)"));
            }
        } else if ((st = sanitize(c, sol, a, &v, kl, err))) {
            goto out;
        }
    }

verdict:
    if (c->shape_of && v.failed && strcmp(v.failed, "shapes")) {
        /* a drawn shape: the check that decided is the shape check; the
         * detail keeps which comparison failed there */
        char d2[sizeof v.detail];
        snprintf(d2, sizeof d2, "on shape %s (from workload %s), %s: %s", c->w->uuid,
                 c->shape_of->uuid, v.failed, v.detail);
        snprintf(v.detail, sizeof v.detail, "%s", d2);
        v.failed = "shapes";
    }
    /* where the reference outputs came from (timed outputs' seeds included) */
    if (!ref)
        json_object_set_new(kl, "reference",
                            json_pack("{s:s, s:s?, s:i, s:i, s:f}", "kind", "python", "source",
                                      c->pyref_source, "python_runs", c->pyref_runs,
                                      "store_hits", c->pyref_cached, "python_seconds",
                                      c->pyref_seconds));
    else
        json_object_set_new(kl, "reference", json_pack("{s:s, s:s}", "kind", "trusted", "name",
                                                       ref->name));
    json_object_set_new(ev, "status", json_string(v.status));
    if (!strcmp(v.status, "PASSED") || !strcmp(v.status, "INCORRECT_NUMERICAL")) {
        json_t *cj = json_pack("{s:o, s:o}", "max_relative_error", num(v.acc.max_rel_error),
                               "max_absolute_error", num(v.acc.max_abs_error));
        if (c->evaluator == KH_EVAL_LOWBIT)
            json_object_set_new(cj, "extra", json_pack("{s:o}", "matched_ratio",
                                                       num(v.acc.matched_ratio)));
        if (samp_extra) { /* FIB's Correctness.extra for sampling */
            json_object_set_new(cj, "extra", samp_extra);
            samp_extra = NULL;
        }
        json_object_set_new(ev, "correctness", cj);
    }
    if (perf && !strcmp(v.status, "PASSED")) {
        json_object_set_new(ev, "performance", perf);
        perf = NULL;
    }
    {
        char ts[64];
        time_t now = time(NULL);
        struct tm tmv;
        gmtime_r(&now, &tmv);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tmv);
        json_object_set_new(ev, "timestamp", json_string(ts));
        json_object_set_new(ev, "environment",
                            json_pack("{s:s, s:{}}", "hardware", is_host(sol) ? "host" : "cuda",
                                      "libs"));
    }
    if (!json_object_get(ev, "log"))
        json_object_set_new(ev, "log", json_string(v.detail));
    json_object_set_new(kl, "checks", v.checks);
    v.checks = NULL;
    json_object_set_new(kl, "coordinator_seconds", json_real(c->coord_s + kh_now() - c->call_t0));
    json_object_set_new(kl, "failed_check", v.failed ? json_string(v.failed) : json_null());
    json_object_set_new(kl, "detail", json_string(v.detail));
    if (v.has_correctness)
        json_object_set_new(kl, "figures",
                            json_pack("{s:o, s:o, s:I, s:I}", "matched_ratio",
                                      num(v.acc.matched_ratio), "norm_error",
                                      num(v.acc.norm_error), "max_ulp_error",
                                      (json_int_t)(v.acc.max_ulp_error > INT64_MAX
                                                       ? -1 : (json_int_t)v.acc.max_ulp_error),
                                      "elements", (json_int_t)v.acc.numel));
    json_object_set_new(kl, "hashes",
                        json_pack("{s:s, s:s?, s:s?, s:s}", "source", sol_hash, "artifact",
                                  a && a->ok ? a->hash : NULL, "reference",
                                  ref_hash[0] ? ref_hash : NULL, "task", c->task_hash));
    json_object_set_new(ev, "khlua", kl);
    kl = NULL;
    *trace = json_pack("{s:s, s:O, s:s, s:o}", "definition", c->d->name, "workload", c->w->json,
                       "solution", sol->name, "evaluation", ev);
    ev = NULL;
    {
        /* raw samples: a store blob; inline when the verdict is not stored */
        json_t *evj = json_object_get(*trace, "evaluation");
        json_t *kj = json_object_get(evj, "khlua");
        json_object_set_new(kj, "samples_blob", json_null());
        size_t ns = json_array_size(samples);
        double *sv = ns ? malloc(ns * sizeof *sv) : NULL;
        for (size_t i = 0; sv && i < ns; i++)
            sv[i] = json_number_value(json_array_get(samples, i));
        kh_err rerr;
        if (!o->record) {
            json_object_set_new(kj, "stored", json_string("no (record = false)"));
            if (samples)
                json_object_set(kj, "samples_ns", samples);
        } else if (record(c->ev, o, c->d, sol, *trace, sv, sv ? ns : 0, &rerr) != KH_OK) {
            json_object_set_new(kj, "stored", json_string(rerr.msg));
            if (samples)
                json_object_set(kj, "samples_ns", samples);
        } else {
            json_object_set_new(kj, "stored", json_string("yes"));
        }
        free(sv);
    }
out:
    json_decref(samp_extra);
    json_decref(v.checks);
    json_decref(kl);
    json_decref(ev);
    json_decref(perf);
    json_decref(samples);
    return st;
}

/* ---- the whole run -------------------------------------------------------- */
static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

kh_status kh_eval_run(kh_eval *ev, const char *task_path, const char *solution,
                      const kh_eval_opts *o, json_t **traces, kh_err *err)
{
    *traces = NULL;
    if (!task_path || !solution)
        return kh_err_set(err, KH_EINVAL, "eval: a task and a solution are required");
    kh_task *t = NULL;
    kh_task_opts to = {0};
    kh_status st = kh_task_open(task_path, &to, &t, err);
    if (st)
        return st;
    kh_eval_solution s = {.name = solution};
    unsigned char *text = NULL;
    if (is_file(solution)) {
        /* a Solution file from anywhere: its definition is the package's */
        size_t len = 0;
        if ((st = read_whole(solution, &text, &len, err))) {
            kh_task_close(t);
            return st;
        }
        s = (kh_eval_solution){.json = (const char *)text, .json_len = len, .label = solution};
    }
    st = kh_eval_run_task(ev, t, &s, o, traces, err);
    free(text);
    kh_task_close(t);
    return st;
}

kh_status kh_eval_run_task(kh_eval *ev, const kh_task *t, const kh_eval_solution *s,
                           const kh_eval_opts *o, json_t **traces, kh_err *err)
{
    kh_eval_opts defo;
    if (!o) {
        kh_eval_opts_default(&defo);
        o = &defo;
    }
    *traces = NULL;
    if (!t || !t->set || !s || !!s->name == !!s->json)
        return kh_err_set(err, KH_EINVAL, "eval: a task and a solution (a name in it or a "
                          "Solution JSON) are required");
    const char *task_path = t->path;
    const char *solution = s->name ? s->name : s->label ? s->label : "solution";
    kh_protocol proto;
    if (!o->protocol || !kh_protocol_parse(o->protocol, &proto))
        return kh_err_set(err, KH_EINVAL, "eval: unknown protocol '%s' (official, screen, precise)",
                          o->protocol ? o->protocol : "(null)");
    for (const char *q = o->sanitize ? o->sanitize : ""; *q;) {
        size_t l = strcspn(q, ",");
        char tool[32];
        snprintf(tool, sizeof tool, "%.*s", (int)(l < 31 ? l : 31), q);
        if (l && !kh_san_check_name(tool))
            return kh_err_set(err, KH_EINVAL, "eval: unknown sanitizer tool '%.*s' (memcheck, "
                              "racecheck, initcheck, synccheck)", (int)l, q);
        q += l + (q[l] == ',');
    }
    if (o->trials < 1 || o->trials > 64)
        return kh_err_set(err, KH_EINVAL, "eval: trials must be 1 to 64, got %d", o->trials);
    kh_status pst = place(ev, o, err);
    if (pst)
        return pst;
    refs_trim(ev);
    /* the package as loaded, once (kh_task_open): its hash goes with every
     * verdict, and a file that has changed on disk since is named there
     * (nothing is read again: the loaded version is what is used) */
    const kh_task_set *P = t->set;
    kh_task_set *S = NULL;
    kh_task_fp fp1;
    kh_status st = KH_OK;
    /* a package with errors (a JSON syntax error, a bad workload line) is
     * refused, the first error named with its file and line */
    if ((st = kh_task_check_errors(P, task_path, err)))
        goto out;
    const kh_task_solution *sol = NULL;
    if (s->json) {
        /* a Solution from anywhere, parsed in memory against the package's
         * definitions: its definition is the package's */
        if ((st = kh_task_solution_from_text(P, solution, s->json, s->json_len, &S, err)))
            goto out;
        if (kh_task_nsolutions(S) != 1) {
            /* not JSON, or not a Solution: the first error, file:line */
            const kh_task_problem *p = NULL;
            for (size_t i = 0; !p && i < kh_task_nproblems(S); i++)
                if (kh_task_problem_at(S, i)->severity == KH_TASK_ERROR)
                    p = kh_task_problem_at(S, i);
            char buf[1024];
            st = p ? kh_err_set(err, KH_EPARSE, "%s", kh_task_problem_format(p, buf, sizeof buf))
                   : kh_err_set(err, KH_EINVAL, "%s: expected one Solution, found none",
                                solution);
            goto out;
        }
        sol = kh_task_solution_at(S, 0);
    } else {
        sol = kh_task_find_solution(P, solution);
        if (!sol) {
            st = kh_err_set(err, KH_ENOTFOUND, "no solution named '%s' in %s (nor a file by that "
                            "name)", solution, task_path);
            goto out;
        }
    }
    const kh_task_def *d = sol->definition ? kh_task_find_def(P, sol->definition) : NULL;
    if (!d) {
        st = kh_err_set(err, KH_ENOTFOUND, "solution '%s': definition '%s' is not in %s",
                        sol->name ? sol->name : "?", sol->definition ? sol->definition : "?",
                        task_path);
        goto out;
    }
    if (sol->manifest && sol->manifest->host && o->gpus && *o->gpus) {
        /* said, not ignored: a host solution runs in host workers */
        st = kh_err_set(err, KH_EINVAL, "--gpus %s: solution '%s' runs on the host backend (its "
                        "workers are --host-workers)", o->gpus, sol->name ? sol->name : "?");
        goto out;
    }
    if (kh_task_unrunnable(sol)) {
        st = kh_err_set(err, KH_EUNSUPPORTED, "solution '%s' %s", sol->name ? sol->name : "?",
                        kh_task_unrunnable(sol));
        goto out;
    }
    if (sol->manifest->so && S) {
        /* host code in the gpu worker: only a package's own solutions (people's
         * code, e.g. a cuBLAS anchor), never a Solution file, which is how
         * candidates arrive (policies/lib/evaluate.lua) */
        st = kh_err_set(err, KH_EUNSUPPORTED,
                        "solution '%s' is a cuda_so shared object (host code): khlua runs those "
                        "only from the task package's own solutions, not from a Solution file",
                        sol->name ? sol->name : "?");
        goto out;
    }
    /* The trusted khlua reference when the definition names one, else the
     * definition's own Python run (pyref.h), computed once per seed. */
    if (!d->reference && !kh_pyref_available(d)) {
        st = kh_err_set(err, KH_ENOTFOUND,
                        "definition '%s' names no trusted reference (khlua.reference) and has "
                        "no Python reference (\"reference\" defining run)", d->name);
        goto out;
    }
    const kh_task_solution *ref = d->reference ? kh_task_find_solution(P, d->reference) : NULL;
    if (d->reference && (!ref || !ref->manifest)) {
        st = kh_err_set(err, KH_ENOTFOUND, "the trusted reference '%s' of '%s' is %s", d->reference,
                        d->name, ref ? "not a khlua solution (no manifest)" : "not in the task");
        goto out;
    }

    /* workloads */
    size_t nw = kh_task_nworkloads(P);
    const kh_task_workload **ws = calloc(nw ? nw : 1, sizeof *ws);
    size_t n = 0;
    if (!ws) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto out;
    }
    const char *sel = o->workloads && *o->workloads ? o->workloads : "all";
    char *endp;
    long firstn = strtol(sel, &endp, 10);
    int by_count = *endp == 0 && endp != sel;
    if (by_count && firstn < 1) {
        free(ws);
        st = kh_err_set(err, KH_EINVAL, "--workloads: a count must be >= 1");
        goto out;
    }
    for (size_t i = 0; i < nw; i++) {
        const kh_task_workload *w = kh_task_workload_at(P, i);
        /* a trace line names a workload that was run: not one to run */
        if (!w->definition || strcmp(w->definition, d->name) || !w->axes_ok || !w->uuid ||
            w->is_trace)
            continue;
        if (!strcmp(sel, "all") || (by_count && (long)n < firstn))
            ws[n++] = w;
        else if (!by_count) {
            size_t ul = strlen(w->uuid);
            for (const char *q = sel; *q;) {
                size_t l = strcspn(q, ",");
                if (l == ul && !strncmp(q, w->uuid, l)) {
                    ws[n++] = w;
                    break;
                }
                q += l + (q[l] == ',');
            }
        }
    }
    if (!by_count && strcmp(sel, "all")) {
        /* every uuid asked for must exist */
        for (const char *q = sel; *q;) {
            size_t l = strcspn(q, ",");
            int found = 0;
            for (size_t i = 0; i < n && !found; i++)
                found = strlen(ws[i]->uuid) == l && !strncmp(q, ws[i]->uuid, l);
            if (!found) {
                free(ws);
                st = kh_err_set(err, KH_ENOTFOUND, "workload '%.*s' of '%s' is not in %s",
                                (int)l, q, d->name, task_path);
                goto out;
            }
            q += l + (q[l] == ',');
        }
    }
    if (n == 0) {
        free(ws);
        st = kh_err_set(err, KH_ENOTFOUND, "no workloads of '%s' in %s", d->name, task_path);
        goto out;
    }
    if (by_count && (size_t)firstn > n) {
        /* asked for more than there are: said, not silently fewer */
        st = kh_err_set(err, KH_EINVAL, "--workloads %ld: '%s' has %zu workload%s in %s",
                        firstn, d->name, n, n == 1 ? "" : "s", task_path);
        free(ws);
        goto out;
    }

    char sol_hash[33];
    {
        char *txt = json_dumps(json_object_get(sol->json, "sources"), JSON_COMPACT | JSON_SORT_KEYS);
        hex128(txt ? txt : "", txt ? strlen(txt) : 0, sol_hash);
        free(txt);
    }
    wctx c;
    memset(&c, 0, sizeof c);
    {
        /* a solution whose file holds an error (a binding naming what the
         * definition lacks is left out of its argument list) never runs:
         * the candidate's verdict, not an error of the evaluation */
        kh_err se;
        if (kh_task_solution_errors(S ? S : P, sol, &se))
            snprintf(c.bad_solution, sizeof c.bad_solution, "%s", se.msg);
    }
    c.ev = ev;
    c.o = o;
    c.d = d;
    c.base = task_path;
    snprintf(c.task_hash, sizeof c.task_hash, "%016llx", (unsigned long long)t->fp.hash);
    char base[4096];
    if (is_file(task_path)) {
        snprintf(base, sizeof base, "%s", task_path);
        char *sl = strrchr(base, '/');
        if (sl)
            *sl = 0;
        else
            snprintf(base, sizeof base, ".");
        c.base = base;
    }
    c.ntrials = (size_t)o->trials;
    c.ref_gpu = ref && !is_host(ref);
    c.base_seed = o->seed & INT64_MAX;
    if (o->seed == KH_EVAL_SEED_RANDOM && (st = kh_secure_seed(&c.base_seed, err))) {
        free(ws);
        goto out;
    }
    /* admissible shapes not in the list, checked for correctness after the
     * listed workloads (drawn from the secret base seed) */
    kh_shapes shapes = KH_SHAPES_INIT;
    const kh_task_workload **shape_from = NULL;
    size_t nlisted = n;
    if (o->shapes > 0) {
        const kh_task_workload **all = calloc(nw ? nw : 1, sizeof *all);
        size_t na = 0;
        for (size_t i = 0; all && i < nw; i++)
            all[na++] = kh_task_workload_at(P, i);
        st = all ? kh_shapes_draw(d, all, na, (size_t)o->shapes,
                                  kh_rng_derive_seed(c.base_seed, 0x5BA9E, 0), &shapes, err)
                 : kh_err_set(err, KH_ENOMEM, "out of memory");
        free(all);
        const kh_task_workload **grown = st ? NULL : realloc(ws, (n + shapes.n) * sizeof *ws);
        shape_from = st ? NULL : calloc(n + shapes.n, sizeof *shape_from);
        if (!st && (!grown || !shape_from))
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
        if (grown)
            ws = grown;
        if (st) {
            free(ws);
            free(shape_from);
            kh_shapes_free(&shapes);
            goto out;
        }
        for (size_t i = 0; i < shapes.n; i++) {
            ws[n + i] = &shapes.w[i];
            shape_from[n + i] = shapes.from[i];
        }
        n += shapes.n;
        c.shapes_info = json_pack("{s:i, s:I, s:s}", "asked", o->shapes, "drawn",
                                  (json_int_t)shapes.n, "note", shapes.note);
    }
    c.evaluator = kh_check_evaluator_for(d->name, d->op_type, &c.copts);
    if (d->evaluator) {
        static const struct { const char *n; kh_check_evaluator e; } evs[] = {
            {"default", KH_EVAL_DEFAULT}, {"lowbit", KH_EVAL_LOWBIT},
            {"dsa_sparse_attention", KH_EVAL_DSA_ATTENTION}, {"dsa_topk_indexer", KH_EVAL_DSA_TOPK},
            {"sampling", KH_EVAL_SAMPLING}};
        for (size_t i = 0; i < KH_ARRAY_LEN(evs); i++)
            if (!strcmp(d->evaluator, evs[i].n))
                c.evaluator = evs[i].e;
    }
    c.copts.atol = d->atol;
    c.copts.rtol = d->rtol;
    c.copts.required_ratio = d->required_matched_ratio;
    if (o->atol >= 0)
        c.copts.atol = o->atol;
    if (o->rtol >= 0)
        c.copts.rtol = o->rtol;
    if (o->required_matched_ratio >= 0)
        c.copts.required_ratio = o->required_matched_ratio;
    if (c.evaluator == KH_EVAL_SAMPLING) {
        /* FIB's SamplingEvaluator: validation calls on one probs with fresh
         * seeds (o->trials does not apply), then the TVD test */
        const kh_task_tensor *pin = find_input(d, "probs", NULL);
        const char *why = NULL;
        c.smethod = kh_check_sampling_method(d->name);
        int use_k = c.smethod == KH_SAMPLING_TOP_K || c.smethod == KH_SAMPLING_TOP_K_TOP_P;
        int use_p = c.smethod == KH_SAMPLING_TOP_P || c.smethod == KH_SAMPLING_TOP_K_TOP_P;
        if (!pin || pin->is_scalar || pin->rank != 2 || strcmp(pin->dtype, "float32"))
            why = "it needs an input 'probs', float32 [batch_size, vocab_size]";
        else if (d->noutputs < 1 || d->outputs[0].is_scalar || d->outputs[0].rank != 1 ||
                 (strcmp(d->outputs[0].dtype, "int32") && strcmp(d->outputs[0].dtype, "int64")))
            why = "its first output must be the samples, int32 or int64 [batch_size]";
        else if (d->outputs[0].dims[0] != pin->dims[0])
            why = "the samples' axis must be the first axis of probs";
        else if (use_k && !find_input(d, "top_k", NULL))
            why = "its name asks for top-k sampling (FIB's thresholding), but it has no input "
                  "'top_k'";
        else if (use_p && !find_input(d, "top_p", NULL))
            why = "its name asks for top-p sampling (FIB's thresholding), but it has no input "
                  "'top_p'";
        for (size_t i = 0; !why && i < d->ninputs; i++)
            if (!d->inputs[i].is_scalar && d->inputs[i].dims[0] != pin->dims[0])
                why = "the TVD test repeats every tensor input along the batch axis (the first "
                      "of probs), and an input does not start with it";
        if (why) {
            free(ws);
            free(shape_from);
            kh_shapes_free(&shapes);
            json_decref(c.shapes_info);
            st = kh_err_set(err, KH_EUNSUPPORTED, "definition '%s' (sampling evaluator): %s",
                            d->name, why);
            goto out;
        }
        c.ntrials = (size_t)d->sampling_validation_trials;
        c.tvd_threshold = d->sampling_tvd_threshold;
    }

    /* Rounds: evaluate every unfinished workload until it needs a worker
     * request (the scheduler above), run those requests in parallel, again. */
    json_t **outs = calloc(n, sizeof *outs);
    pyref_stat *pys = calloc(n, sizeof *pys);
    int *groups = malloc(n * sizeof *groups);
    size_t *ws_pos = calloc(n, sizeof *ws_pos);
    for (size_t i = 0; ws_pos && i < n; i++) {
        /* the workload's position among its definition's in the package */
        for (size_t k = 0, pos = 0; k < nw; k++) {
            const kh_task_workload *w = kh_task_workload_at(P, k);
            if (w == ws[i]) {
                ws_pos[i] = pos;
                break;
            }
            pos += w->definition && !strcmp(w->definition, d->name) && w->axes_ok && w->uuid;
        }
    }
    if (!outs || !groups || !ws_pos || !pys) {
        free(outs);
        free(pys);
        free(groups);
        free(ws_pos);
        free(ws);
        free(shape_from);
        kh_shapes_free(&shapes);
        json_decref(c.shapes_info);
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        groups[i] = -1 - (int)ws_pos[i]; /* dispatch turns it into the GPU group */
    drop_jobs(ev, SIZE_MAX);
    size_t ndone = 0;
    for (int round = 0; !st; round++) {
        size_t left = 0;
        for (size_t i = 0; i < n && !st; i++) {
            if (outs[i])
                continue;
            if (kh_engine_stop_requested(ev->e)) {
                st = kh_err_set(err, KH_EINTR, "evaluation interrupted");
                break;
            }
            c.w = ws[i];
            c.wl = i;
            c.shape_of = shape_from && i >= nlisted ? shape_from[i] : NULL;
            c.pending = 0;
            c.last = c.ref_timing = NULL;
            uint64_t wh = fnv(ws[i]->uuid);
            for (size_t k = 0; k < c.ntrials; k++)
                c.seeds[k] = kh_rng_derive_seed(c.base_seed, wh, k) & INT64_MAX; /* JSON, Lua */
            c.timing_seed = kh_rng_derive_seed(c.base_seed, wh, 0x71AE) & INT64_MAX;
            c.sample_seed = kh_rng_derive_seed(c.base_seed, wh, 0x5A3E) & INT64_MAX;
            json_t *tr = NULL;
            c.pyref_source = pys[i].source;
            c.pyref_seconds = pys[i].seconds;
            c.pyref_runs = pys[i].runs;
            c.pyref_cached = pys[i].cached;
            c.coord_s = pys[i].coord_s;
            c.call_t0 = kh_now();
            kh_status wst = eval_workload(&c, sol, ref, sol_hash, &tr, err);
            c.coord_s += kh_now() - c.call_t0;
            pys[i] = (pyref_stat){c.pyref_source, c.pyref_seconds, c.pyref_runs, c.pyref_cached,
                                  c.coord_s};
            if (c.pending) {
                left++;
            } else if (wst) {
                st = wst;
            } else {
                outs[i] = tr;
                drop_jobs(ev, i); /* its replies are no longer needed */
                ndone++;
                if (o->progress)
                    o->progress(o->progress_ud, ndone, n, tr);
            }
        }
        if (st || !left)
            break;
        if (round >= 16) {
            st = kh_err_set(err, KH_ESTATE, "evaluation did not settle after %d rounds of "
                            "worker requests", round);
            break;
        }
        st = run_jobs(ev, o, groups, err);
    }
    drop_jobs(ev, SIZE_MAX);
    json_t *arr = st ? NULL : json_array();
    for (size_t i = 0; i < n; i++) {
        if (arr)
            json_array_append_new(arr, outs[i]);
        else
            json_decref(outs[i]);
    }
    free(outs);
    free(pys);
    free(groups);
    free(ws_pos);
    free(c.pl);
    in_free(&c);
    probs_free(&c);
    free(ws);
    free(shape_from);
    kh_shapes_free(&shapes);
    json_decref(c.shapes_info);
    if (arr && kh_task_fingerprint(task_path, &fp1, err) == KH_OK) {
        const char *changed = kh_task_fp_diff(&t->fp, &fp1);
        size_t ti;
        json_t *tr;
        json_array_foreach(arr, ti, tr) {
            json_t *kl = json_object_get(json_object_get(tr, "evaluation"), "khlua");
            if (!kl)
                continue;
            if (changed)
                json_object_set_new(kl, "task_changed",
                                    json_sprintf("%s changed on disk during the evaluation; the "
                                                 "version loaded at its start was used",
                                                 changed));
        }
        if (changed)
            fprintf(stderr, "khlua: warning: %s/%s changed on disk during the evaluation; the "
                    "version loaded at its start was used\n", task_path, changed);
        kh_task_fp_free(&fp1);
    }
    *traces = arr;
out:
    kh_task_set_free(S);
    return st;
}
