/* role_profile.c: the "profile" worker role: one GPU, its counters, no
 * activity tracing (rprof.h says why it is a process of its own).  Methods:
 *   info                      the device, the chip, whether counters work
 *   load   (payload: cubin)   load a module under params.module
 *   unload                    drop a module
 *   peaks  {measure?}         the device's measured copy bandwidth
 *                             (measure: again, now)
 *   profile                   per-kernel metrics of a launch list, the
 *                             launches' resources and occupancy, a timing
 * Peaks are measured once, when the worker starts (or, with
 * KHLUA_PEAKS_LAZY, on the first "peaks" call: the coordinator reuses the
 * peaks it keeps per GPU UUID), and reported with the GPU's UUID.  Also here: kh_profile_target, the process ncu profiles.
 * A sticky CUDA error is reported, then the process exits.
 * KHLUA_PROFILE_FAKE=FILE stands in for the GPU: no CUDA at all, the
 * methods answer from FILE ({"info", "peaks", "profile"}, a recorded
 * session), so the coordinator's side (peaks kept per UUID, the profile
 * record) is tested where no GPU is. */
#include "gpu/bench.h"
#include "compile/cubin.h"
#include "profile/profile.h"
#include "profile/rprof.h"
#include "worker/worker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MODULES 32

typedef struct prof_state {
    kh_gpu *g;
    kh_rprof *rp;
    int rp_tried;
    char no_counters[512]; /* why, when counters are unavailable */
    CUdevice dev;
    json_t *peaks;         /* {uuid, copy_bytes_per_s, ...} or {error} */
    json_t *fake;          /* KHLUA_PROFILE_FAKE's recorded answers; NULL: a real GPU */
    struct {
        char key[96];
        CUmodule mod;
        kh_cubin_info res; /* spills and local memory per kernel */
        int has_res;
    } modules[MAX_MODULES];
} prof_state;

static prof_state *S(kh_worker *w) { return kh_worker_state(w); }

static kh_status after(kh_worker *w, kh_status st)
{
    if (S(w)->g && kh_gpu_poisoned(S(w)->g))
        kh_worker_exit_after_reply(w, 3);
    return st;
}

/* ---- peaks ---------------------------------------------------------------- */

typedef struct copy_target {
    kh_gpu *g;
    CUdeviceptr a, b;
    size_t n;
} copy_target;

static kh_status ct_call(void *ctx, kh_err *err)
{
    copy_target *c = ctx;
    return kh_gpu_check(c->g,
                        kh_gpu_api(c->g)->cuMemcpyDtoDAsync(c->b, c->a, c->n,
                                                            kh_gpu_stream(c->g)),
                        "cuMemcpyDtoDAsync", err);
}

/* Device-to-device copy bandwidth (read + write bytes per second): median of
 * 20 copies of 1 GiB (256 MiB when memory is short), timed with events (no
 * CUPTI in this process; a 0.5 ms copy carries ~1% event bias). */
static json_t *measure_peaks(kh_gpu *g)
{
    json_t *info = kh_gpu_info(g);
    json_t *res = json_pack("{s:O}", "uuid", json_object_get(info, "uuid"));
    json_decref(info);
    kh_err err = {0};
    kh_status st = KH_OK;
    size_t sizes[] = {1u << 30, 256u << 20};
    for (size_t k = 0; k < 2; k++) {
        size_t bytes = sizes[k];
        kh_gpu_buf a, b;
        if ((st = kh_gpu_buf_alloc(g, bytes, 0, &a, &err)))
            continue;
        if ((st = kh_gpu_buf_alloc(g, bytes, 0, &b, &err))) {
            kh_gpu_buf_free(g, &a);
            continue;
        }
        st = kh_gpu_memset8(g, a.ptr, 0x3c, bytes, &err);
        copy_target ct = {g, a.ptr, b.ptr, bytes};
        kh_bench_target t = {.call = ct_call, .ctx = &ct};
        kh_bench_opts o;
        kh_bench_defaults(KH_PROTO_SCREEN, &o);
        o.max_iters = 20;
        o.rel_ci = 0;
        o.cold_l2 = 0;
        o.use_events = 1;
        kh_bench_result r;
        if (!st)
            st = kh_bench_run(g, NULL, &t, &o, &r, &err);
        if (!st) {
            json_object_set_new(res, "copy_bytes_per_s",
                                json_real(2.0 * (double)bytes / (r.median_ns * 1e-9)));
            json_object_set_new(res, "copy_median_ns", json_real(r.median_ns));
            json_object_set_new(res, "copy_bytes", json_integer((json_int_t)bytes));
            json_object_set_new(res, "timer", json_string(r.timer));
            json_object_set_new(res, "method",
                                json_string("cuMemcpyDtoDAsync, median of 20 copies, "
                                            "(read + write bytes) / time"));
            kh_bench_result_free(&r);
        }
        kh_gpu_buf_free(g, &a);
        kh_gpu_buf_free(g, &b);
        if (!st)
            break;
    }
    if (st)
        json_object_set_new(res, "error", json_string(err.msg));
    /* The matrix rate is not measured yet: the SOL bound uses bytes only. */
    return res;
}

/* ---- life cycle ------------------------------------------------------------ */

static kh_status prof_init(kh_worker *w, kh_err *err)
{
    prof_state *s = calloc(1, sizeof *s);
    if (!s)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    const char *fake = getenv("KHLUA_PROFILE_FAKE");
    if (fake && *fake) {
        json_error_t je;
        s->fake = json_load_file(fake, 0, &je);
        if (!json_is_object(s->fake)) {
            json_decref(s->fake);
            free(s);
            return kh_err_set(err, KH_EINVAL, "KHLUA_PROFILE_FAKE %s: %s", fake, je.text);
        }
        if (!getenv("KHLUA_PEAKS_LAZY"))
            s->peaks = json_deep_copy(json_object_get(s->fake, "peaks"));
        kh_worker_set_state(w, s);
        return KH_OK;
    }
    const char *ord = getenv("KHLUA_GPU");
    s->g = kh_gpu_open(ord ? atoi(ord) : 0, err);
    if (!s->g) {
        free(s);
        return err->code;
    }
    json_t *info = kh_gpu_info(s->g);
    int ordinal = (int)json_integer_value(json_object_get(info, "ordinal"));
    json_decref(info);
    kh_status st = kh_gpu_check(s->g, kh_gpu_api(s->g)->cuDeviceGet(&s->dev, ordinal),
                                "cuDeviceGet", err);
    if (st) {
        kh_gpu_close(s->g);
        free(s);
        return st;
    }
    /* KHLUA_PEAKS_LAZY: the coordinator may hold this GPU's peaks already
     * (kept per UUID in the store) and asks "peaks" {measure} only when not. */
    if (getenv("KHLUA_NO_PEAKS"))
        s->peaks = json_pack("{s:s}", "error", "KHLUA_NO_PEAKS set");
    else if (!getenv("KHLUA_PEAKS_LAZY"))
        s->peaks = measure_peaks(s->g);
    kh_worker_set_state(w, s);
    return KH_OK;
}

static void prof_fini(kh_worker *w)
{
    prof_state *s = S(w);
    if (!s)
        return;
    kh_rprof_close(s->rp);
    for (int i = 0; i < MAX_MODULES; i++) {
        if (s->modules[i].mod && !kh_gpu_poisoned(s->g))
            kh_gpu_api(s->g)->cuModuleUnload(s->modules[i].mod);
        if (s->modules[i].has_res)
            kh_cubin_info_free(&s->modules[i].res);
    }
    json_decref(s->peaks);
    json_decref(s->fake);
    kh_gpu_close(s->g);
    free(s);
}

/* Open the range profiler once; remember why not. */
static kh_rprof *profiler(kh_worker *w)
{
    prof_state *s = S(w);
    if (!s->rp_tried) {
        s->rp_tried = 1;
        if (getenv("KHLUA_NO_COUNTERS")) {
            snprintf(s->no_counters, sizeof s->no_counters, "counters off (KHLUA_NO_COUNTERS)");
        } else {
            kh_err err = {0};
            s->rp = kh_rprof_open(s->g, kh_engine_cuda_home(kh_worker_engine(w)), &err);
            if (!s->rp)
                snprintf(s->no_counters, sizeof s->no_counters, "%s", err.msg);
        }
    }
    return s->rp;
}

static int find_slot(prof_state *s, const char *key)
{
    for (int i = 0; key && i < MAX_MODULES; i++)
        if (s->modules[i].mod && !strcmp(s->modules[i].key, key))
            return i;
    return -1;
}

static void drop_slot(prof_state *s, int i)
{
    kh_gpu_api(s->g)->cuModuleUnload(s->modules[i].mod);
    if (s->modules[i].has_res)
        kh_cubin_info_free(&s->modules[i].res);
    memset(&s->modules[i], 0, sizeof s->modules[i]);
}

/* ---- methods ---------------------------------------------------------------- */

static kh_status m_info(kh_worker *w, const json_t *params, const unsigned char *payload,
                        size_t n, json_t **result, unsigned char **out, size_t *out_n,
                        kh_err *err)
{
    (void)params; (void)payload; (void)n; (void)out; (void)out_n; (void)err;
    prof_state *s = S(w);
    if (s->fake) {
        json_t *info = json_deep_copy(json_object_get(s->fake, "info"));
        if (s->peaks)
            json_object_set(info, "peaks", s->peaks);
        *result = info;
        return KH_OK;
    }
    json_t *info = kh_gpu_info(s->g);
    kh_rprof *rp = profiler(w);
    json_object_set_new(info, "counters", json_boolean(rp != NULL));
    if (rp)
        json_object_set_new(info, "chip", json_string(kh_rprof_chip(rp)));
    else
        json_object_set_new(info, "why", json_string(s->no_counters));
    json_object_set_new(info, "peaks", json_incref(s->peaks));
    json_object_set_new(info, "default_metrics", kh_profile_default_metrics());
    *result = info;
    return KH_OK;
}

static kh_status m_load(kh_worker *w, const json_t *params, const unsigned char *payload,
                        size_t n, json_t **result, unsigned char **out, size_t *out_n,
                        kh_err *err)
{
    (void)out; (void)out_n;
    prof_state *s = S(w);
    const char *key = json_string_value(json_object_get(params, "module"));
    if (!key || !n)
        return kh_err_set(err, KH_EINVAL, "load: params.module (a key) and a cubin payload "
                          "are required");
    if (s->fake) {
        *result = json_pack("{s:s, s:b, s:I}", "module", key, "cached", 0, "bytes",
                            (json_int_t)n);
        return KH_OK;
    }
    if (find_slot(s, key) >= 0) {
        *result = json_pack("{s:s, s:b}", "module", key, "cached", 1);
        return KH_OK;
    }
    int slot = -1;
    for (int i = 0; i < MAX_MODULES && slot < 0; i++)
        if (!s->modules[i].mod)
            slot = i;
    if (slot < 0) {
        drop_slot(s, 0);
        slot = 0;
    }
    unsigned char *img = malloc(n + 1);
    if (!img)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    memcpy(img, payload, n);
    img[n] = 0;
    CUmodule mod;
    kh_status st = kh_gpu_check(s->g, kh_gpu_api(s->g)->cuModuleLoadData(&mod, img),
                                "cuModuleLoadData", err);
    if (!st) {
        snprintf(s->modules[slot].key, sizeof s->modules[slot].key, "%s", key);
        s->modules[slot].mod = mod;
        kh_err perr;
        /* A PTX image loads but has no cubin resources: spills stay unknown. */
        s->modules[slot].has_res = kh_cubin_parse(img, n, &s->modules[slot].res, &perr) == KH_OK;
        *result = json_pack("{s:s, s:b}", "module", key, "cached", 0);
    }
    free(img);
    return after(w, st);
}

static kh_status m_unload(kh_worker *w, const json_t *params, const unsigned char *payload,
                          size_t n, json_t **result, unsigned char **out, size_t *out_n,
                          kh_err *err)
{
    (void)payload; (void)n; (void)out; (void)out_n; (void)err; (void)result;
    prof_state *s = S(w);
    int i = find_slot(s, json_string_value(json_object_get(params, "module")));
    if (i >= 0)
        drop_slot(s, i);
    return KH_OK;
}

static kh_status m_peaks(kh_worker *w, const json_t *params, const unsigned char *payload,
                         size_t n, json_t **result, unsigned char **out, size_t *out_n,
                         kh_err *err)
{
    (void)payload; (void)n; (void)out; (void)out_n; (void)err;
    prof_state *s = S(w);
    if (json_is_true(json_object_get(params, "measure")) && !getenv("KHLUA_NO_PEAKS")) {
        json_decref(s->peaks);
        s->peaks = NULL;
    }
    if (!s->peaks)
        s->peaks = s->fake ? json_deep_copy(json_object_get(s->fake, "peaks"))
                           : measure_peaks(s->g);
    *result = json_incref(s->peaks);
    return after(w, KH_OK);
}

static int dev_attr(prof_state *s, CUdevice_attribute a)
{
    int v = 0;
    if (kh_gpu_api(s->g)->cuDeviceGetAttribute(&v, a, s->dev) != CUDA_SUCCESS)
        return 0;
    return v;
}

static json_t *device_limits(prof_state *s)
{
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "sms",
                     dev_attr(s, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), "regs_per_sm",
                     dev_attr(s, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
                     "smem_per_sm",
                     dev_attr(s, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
                     "reserved_smem_per_block",
                     dev_attr(s, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK),
                     "max_threads_per_sm",
                     dev_attr(s, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
                     "max_blocks_per_sm",
                     dev_attr(s, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR));
}

/* Resources and occupancy of each launch (the bottleneck state's context). */
static json_t *launch_info(prof_state *s, int slot, const kh_launch_list *l)
{
    const kh_cuda_api *cu = kh_gpu_api(s->g);
    json_t *a = json_array();
    for (size_t i = 0; i < l->nlaunches; i++) {
        const kh_launch_one *o = &l->launches[i];
        int regs = 0, ssmem = 0, local = 0, bps = 0;
        cu->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, o->fn);
        cu->cuFuncGetAttribute(&ssmem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, o->fn);
        cu->cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, o->fn);
        int threads = (int)(o->block[0] * o->block[1] * o->block[2]);
        if (cu->cuOccupancyMaxActiveBlocksPerMultiprocessor(&bps, o->fn, threads, o->smem) !=
            CUDA_SUCCESS)
            bps = 0;
        int spills = -1;
        if (s->modules[slot].has_res) {
            const kh_kernel_res *r = kh_cubin_find(&s->modules[slot].res, o->kernel);
            if (r)
                spills = r->spill_instructions;
        }
        json_array_append_new(
            a, json_pack("{s:I, s:s, s:[i,i,i], s:[i,i,i], s:I, s:i, s:i, s:i, s:i, s:i, s:I}",
                         "index", (json_int_t)i, "kernel", o->kernel, "grid", (int)o->grid[0],
                         (int)o->grid[1], (int)o->grid[2], "block", (int)o->block[0],
                         (int)o->block[1], (int)o->block[2], "blocks",
                         (json_int_t)o->grid[0] * o->grid[1] * o->grid[2], "threads_per_block",
                         threads, "regs_per_thread", regs, "smem_per_block",
                         ssmem + (int)o->smem, "local_bytes", local, "spill_instructions",
                         spills, "api_blocks_per_sm", (json_int_t)bps));
    }
    return a;
}

static kh_status lt_call(void *ctx, kh_err *err) { return kh_launch_enqueue(ctx, err); }

static kh_status m_profile(kh_worker *w, const json_t *params, const unsigned char *payload,
                           size_t n, json_t **result, unsigned char **out, size_t *out_n,
                           kh_err *err)
{
    (void)payload; (void)n; (void)out; (void)out_n;
    prof_state *s = S(w);
    const char *key = json_string_value(json_object_get(params, "module"));
    if (s->fake) {
        json_t *res = json_deep_copy(json_object_get(s->fake, "profile"));
        if (s->peaks)
            json_object_set(res, "peaks", s->peaks);
        *result = res;
        return KH_OK;
    }
    int slot = find_slot(s, key);
    if (slot < 0)
        return kh_err_set(err, KH_ENOTFOUND, "no module '%s' loaded in this worker",
                          key ? key : "(none)");
    const char *replay = json_string_value(json_object_get(params, "replay"));
    if (replay && strcmp(replay, "user") && strcmp(replay, "kernel"))
        return kh_err_set(err, KH_EINVAL, "profile: replay is \"user\" or \"kernel\", not '%s'",
                          replay);
    json_t *metrics = json_object_get(params, "metrics");
    json_t *defaults = NULL;
    if (!metrics)
        metrics = defaults = kh_profile_default_metrics();
    if (!json_is_array(metrics) || !json_array_size(metrics)) {
        json_decref(defaults);
        return kh_err_set(err, KH_EINVAL, "profile: metrics must be a non-empty array of "
                          "names");
    }
    size_t nm = json_array_size(metrics);
    const char **names = calloc(nm, sizeof *names);
    if (!names) {
        json_decref(defaults);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    kh_status st = KH_OK;
    for (size_t i = 0; i < nm && !st; i++)
        if (!(names[i] = json_string_value(json_array_get(metrics, i))))
            st = kh_err_set(err, KH_EINVAL, "profile: metrics[%zu] is not a string", i);
    kh_launch_list l = {0};
    json_t *spec = json_object_get(params, "spec");
    if (!st)
        st = kh_launch_prepare(s->g, s->modules[slot].mod, spec, 4096, &l, err);
    if (st) {
        free(names);
        json_decref(defaults);
        return after(w, st);
    }
    json_t *res = json_object();
    json_object_set_new(res, "gpu", kh_gpu_info(s->g));
    json_object_set_new(res, "peaks", json_incref(s->peaks));
    json_object_set_new(res, "device", device_limits(s));
    json_object_set_new(res, "launches", launch_info(s, slot, &l));

    kh_rprof *rp = profiler(w);
    char why[600] = "";
    if (rp) {
        kh_rprof_opts o = {names, nm, replay && !strcmp(replay, "kernel")};
        json_t *pr = NULL;
        st = kh_rprof_run(rp, &l, &o, &pr, err);
        if (!st) {
            json_object_set_new(res, "profiler", pr);
        } else if (st == KH_EUNSUPPORTED) {
            /* e.g. counters refused at Enable: remembered, a verdict */
            snprintf(s->no_counters, sizeof s->no_counters, "%s", err->msg);
            st = KH_OK;
        } else if (st == KH_ECUDA && !kh_gpu_poisoned(s->g)) {
            /* A CUPTI failure costs this call its counters, not its
             * timing; the reason travels with the state. */
            snprintf(why, sizeof why, "range profiler failed: %s", err->msg);
            st = KH_OK;
        }
    }
    json_t *prof = json_object_get(res, "profiler");
    json_object_set_new(res, "counters", json_boolean(prof != NULL));
    if (!prof)
        json_object_set_new(res, "why", json_string(why[0] ? why : s->no_counters));

    /* Timings flow with or without counters: events (no CUPTI here), cold
     * L2, the screen protocol's stop rule. */
    if (!st && !json_is_false(json_object_get(params, "time"))) {
        kh_bench_target t = {.call = lt_call, .ctx = &l};
        kh_bench_opts bo;
        kh_bench_defaults(KH_PROTO_SCREEN, &bo);
        bo.use_events = 1;
        bo.max_iters = 50;
        kh_bench_result r;
        st = kh_bench_run(s->g, NULL, &t, &bo, &r, err);
        if (!st) {
            json_object_set_new(res, "timing",
                                json_pack("{s:s, s:s, s:f, s:f, s:I}", "timer", r.timer,
                                          "protocol", "screen", "latency_ns", r.latency_ns,
                                          "median_ns", r.median_ns, "n", (json_int_t)r.n));
            kh_bench_result_free(&r);
        }
    }
    if (!st) {
        kh_err gerr;
        json_object_set_new(res, "guards", json_string(kh_launch_check_guards(&l, &gerr)
                                                           ? gerr.msg
                                                           : "ok"));
        *result = res;
    } else {
        json_decref(res);
    }
    kh_launch_free(&l);
    free(names);
    json_decref(defaults);
    return after(w, st);
}

static const kh_worker_method_entry profile_methods[] = {
    {"info", m_info},   {"load", m_load},       {"unload", m_unload},
    {"peaks", m_peaks}, {"profile", m_profile}, {NULL, NULL},
};

const kh_worker_role kh_role_profile = {
    .name = "profile",
    .summary = "one GPU: range-profiler metrics, occupancy, measured peaks (no tracing)",
    .methods = profile_methods,
    .init = prof_init,
    .fini = prof_fini,
};

/* ---- the ncu target ------------------------------------------------------------ */

kh_status kh_profile_target(const unsigned char *cubin, size_t n, const json_t *spec,
                            kh_err *err)
{
    const char *ord = getenv("KHLUA_GPU");
    kh_gpu *g = kh_gpu_open(ord ? atoi(ord) : 0, err);
    if (!g)
        return err->code;
    unsigned char *img = malloc(n + 1);
    if (!img) {
        kh_gpu_close(g);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    memcpy(img, cubin, n);
    img[n] = 0;
    CUmodule mod = NULL;
    kh_status st = kh_gpu_check(g, kh_gpu_api(g)->cuModuleLoadData(&mod, img),
                                "cuModuleLoadData", err);
    free(img);
    kh_launch_list l = {0};
    if (!st)
        st = kh_launch_prepare(g, mod, spec, 4096, &l, err);
    if (!st)
        st = kh_launch_enqueue(&l, err);
    if (!st)
        st = kh_gpu_sync(g, err);
    if (l.g)
        kh_launch_free(&l);
    if (mod && !kh_gpu_poisoned(g))
        kh_gpu_api(g)->cuModuleUnload(mod);
    kh_gpu_close(g);
    return st;
}
