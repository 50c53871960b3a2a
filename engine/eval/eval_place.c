/* eval_place.c: where the evaluator's workers run (docs/scale-out.md).
 * Owns the placement the options ask for (GPUs, workers per GPU, host
 * workers, hosts, the launch template), resolving GPUs (probed in a child
 * process for local launches, counted from a Slurm allocation, taken as
 * given for remote shells), the host and gpu pools built for it, and the
 * description of where a request ran.  Which request runs where is the
 * scheduler's (eval_jobs.c). */
#include "eval/eval_int.h"

#include "core/doctor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void eval_free_pools(kh_eval *ev)
{
    kh_pool_free(ev->host);
    kh_pool_free(ev->gpu);
    ev->host = ev->gpu = NULL;
}

static kh_status resolve_gpus(kh_eval *ev, kh_err *err);

/* Take the placement the options ask for; the pools are rebuilt when it
 * changed.  GPUs are resolved later, when a gpu worker is first needed. */
kh_status eval_place(kh_eval *ev, const kh_eval_opts *o, kh_err *err)
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
    eval_free_pools(ev);
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
size_t eval_group_size(const kh_eval *ev, int host) { return host ? 1 : (size_t)ev->per_gpu; }

kh_pool *eval_pool_for(kh_eval *ev, int host, uint64_t mem, kh_err *err)
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
        if (eval_place(ev, &d, err))
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
        size_t g = i / eval_group_size(ev, host); /* the GPU group (host: the slot) */
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

/* Where a finished request ran, for the verdict. */
json_t *eval_placement_json(kh_eval *ev, kh_pool *p, size_t slot, const kh_wproc *w)
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
