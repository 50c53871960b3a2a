/* role_gpu.c: the "gpu" worker role: one process per GPU, owning its CUDA
 * context, CUPTI, loaded modules and buffers.  Methods:
 *   info                      the device
 *   load   (payload: cubin)   load a module under params.module (a key)
 *   unload                    drop a module
 *   time                      run a launch list (launch.h) under a protocol
 *   paired                    two launch lists interleaved (bench.h)
 *   peaks                     measured copy bandwidth (device-to-device)
 * A sticky CUDA error is reported, then the process exits (the supervisor
 * starts a fresh one): its context can never be trusted again. */
#include "gpu/bench.h"
#include "gpu/gpu_eval.h"
#include "gpu/launch.h"
#include "worker/worker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MODULES 64

typedef struct gpu_state {
    kh_gpu *g;
    kh_cupti *c;
    kh_gpu_eval *ev;
    char cupti_note[256];
    struct {
        char key[96];
        CUmodule mod;
    } modules[MAX_MODULES];
} gpu_state;

static gpu_state *S(kh_worker *w) { return kh_worker_state(w); }

static kh_status after(kh_worker *w, kh_status st)
{
    if (S(w)->g && kh_gpu_poisoned(S(w)->g))
        kh_worker_exit_after_reply(w, 3);
    return st;
}

static kh_status gpu_init(kh_worker *w, kh_err *err)
{
    gpu_state *s = calloc(1, sizeof *s);
    if (!s)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    const char *ord = getenv("KHLUA_GPU");
    s->g = kh_gpu_open(ord ? atoi(ord) : 0, err);
    if (!s->g) {
        free(s);
        return err->code;
    }
    if (getenv("KHLUA_NO_CUPTI")) {
        snprintf(s->cupti_note, sizeof s->cupti_note, "CUPTI off (KHLUA_NO_CUPTI)");
    } else {
        kh_err cerr;
        s->c = kh_cupti_open(kh_engine_cuda_home(kh_worker_engine(w)), &cerr);
        if (!s->c)
            snprintf(s->cupti_note, sizeof s->cupti_note, "CUPTI unavailable: %s", cerr.msg);
    }
    kh_worker_set_state(w, s);
    /* the evaluator's own kernels (input generator, utilities, comparison)
     * made before the hello, while the coordinator compiles the candidate
     * (kh_pool_prestart); a failure here is reported by the first request,
     * which makes them again */
    kh_err werr;
    kh_err_clear(&werr);
    if ((s->ev = kh_gpu_eval_new(kh_worker_engine(w), s->g, s->c, &werr)))
        kh_gpu_eval_warm(s->ev, &werr);
    return KH_OK;
}

static void gpu_fini(kh_worker *w)
{
    gpu_state *s = S(w);
    if (!s)
        return;
    kh_gpu_eval_free(s->ev);
    kh_cupti_close(s->c);
    if (!kh_gpu_poisoned(s->g))
        for (int i = 0; i < MAX_MODULES; i++)
            if (s->modules[i].mod)
                kh_gpu_api(s->g)->cuModuleUnload(s->modules[i].mod);
    kh_gpu_close(s->g);
    free(s);
}

static CUmodule find_module(gpu_state *s, const char *key)
{
    for (int i = 0; key && i < MAX_MODULES; i++)
        if (s->modules[i].mod && !strcmp(s->modules[i].key, key))
            return s->modules[i].mod;
    return NULL;
}

static kh_status m_info(kh_worker *w, const json_t *params, const unsigned char *payload,
                        size_t n, json_t **result, unsigned char **out, size_t *out_n,
                        kh_err *err)
{
    (void)params; (void)payload; (void)n; (void)out; (void)out_n; (void)err;
    json_t *info = kh_gpu_info(S(w)->g);
    json_object_set_new(info, "timer", json_string(S(w)->c ? "cupti" : "events"));
    if (S(w)->cupti_note[0])
        json_object_set_new(info, "timer_note", json_string(S(w)->cupti_note));
    *result = info;
    return KH_OK;
}

static kh_status m_load(kh_worker *w, const json_t *params, const unsigned char *payload,
                        size_t n, json_t **result, unsigned char **out, size_t *out_n,
                        kh_err *err)
{
    (void)out; (void)out_n;
    gpu_state *s = S(w);
    const char *key = json_string_value(json_object_get(params, "module"));
    if (!key || !n)
        return kh_err_set(err, KH_EINVAL, "load: params.module (a key) and a cubin payload "
                          "are required");
    if (find_module(s, key)) {
        *result = json_pack("{s:s, s:b}", "module", key, "cached", 1);
        return KH_OK;
    }
    int slot = -1;
    for (int i = 0; i < MAX_MODULES && slot < 0; i++)
        if (!s->modules[i].mod)
            slot = i;
    if (slot < 0) { /* evict the oldest slot */
        kh_gpu_api(s->g)->cuModuleUnload(s->modules[0].mod);
        memmove(&s->modules[0], &s->modules[1], sizeof s->modules[0] * (MAX_MODULES - 1));
        memset(&s->modules[MAX_MODULES - 1], 0, sizeof s->modules[0]);
        slot = MAX_MODULES - 1;
    }
    /* The driver wants the image to stay readable only during the call. */
    unsigned char *img = malloc(n + 1);
    if (!img)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    memcpy(img, payload, n);
    img[n] = 0;
    CUmodule mod;
    kh_status st = kh_gpu_check(s->g, kh_gpu_api(s->g)->cuModuleLoadData(&mod, img),
                                "cuModuleLoadData", err);
    free(img);
    if (st)
        return after(w, st);
    snprintf(s->modules[slot].key, sizeof s->modules[slot].key, "%s", key);
    s->modules[slot].mod = mod;
    *result = json_pack("{s:s, s:b}", "module", key, "cached", 0);
    return KH_OK;
}

static kh_status m_unload(kh_worker *w, const json_t *params, const unsigned char *payload,
                          size_t n, json_t **result, unsigned char **out, size_t *out_n,
                          kh_err *err)
{
    (void)payload; (void)n; (void)out; (void)out_n; (void)err; (void)result;
    gpu_state *s = S(w);
    const char *key = json_string_value(json_object_get(params, "module"));
    for (int i = 0; key && i < MAX_MODULES; i++)
        if (s->modules[i].mod && !strcmp(s->modules[i].key, key)) {
            kh_gpu_api(s->g)->cuModuleUnload(s->modules[i].mod);
            memset(&s->modules[i], 0, sizeof s->modules[i]);
        }
    return KH_OK;
}

/* A launch list as a timing target; trials re-draw the random buffers. */
typedef struct list_target {
    kh_launch_list l;
    const json_t *spec;
} list_target;

static kh_status lt_call(void *ctx, kh_err *err)
{
    return kh_launch_enqueue(&((list_target *)ctx)->l, err);
}

static kh_status lt_trial(void *ctx, int t, kh_err *err)
{
    (void)ctx; (void)t; (void)err;
    return KH_OK; /* fresh inputs per trial arrive with the evaluation issue's generator */
}

static json_t *samples_json(const double *x, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_real(x[i]));
    return a;
}

static kh_status prepare_target(gpu_state *s, const json_t *p, list_target *t, kh_err *err)
{
    const char *key = json_string_value(json_object_get(p, "module"));
    CUmodule mod = find_module(s, key);
    if (!mod)
        return kh_err_set(err, KH_ENOTFOUND, "no module '%s' loaded in this worker",
                          key ? key : "(none)");
    json_t *spec = json_object_get(p, "spec");
    json_t *g = json_object_get(p, "guard");
    size_t guard = g ? (size_t)json_integer_value(g) : 4096;
    t->spec = spec;
    return kh_launch_prepare(s->g, mod, spec, guard, &t->l, err);
}

static kh_status m_time(kh_worker *w, const json_t *params, const unsigned char *payload,
                        size_t n, json_t **result, unsigned char **out, size_t *out_n,
                        kh_err *err)
{
    (void)payload; (void)n; (void)out; (void)out_n;
    gpu_state *s = S(w);
    kh_protocol proto = KH_PROTO_OFFICIAL;
    const char *ps = json_string_value(json_object_get(params, "protocol"));
    if (ps && !kh_protocol_parse(ps, &proto))
        return kh_err_set(err, KH_EINVAL, "time: unknown protocol '%s'", ps);
    kh_bench_opts o;
    kh_bench_defaults(proto, &o);
    json_t *v;
    if ((v = json_object_get(params, "warmup"))) o.warmup = (int)json_integer_value(v);
    if ((v = json_object_get(params, "iters"))) o.iters = (int)json_integer_value(v);
    if ((v = json_object_get(params, "trials"))) o.trials = (int)json_integer_value(v);
    if ((v = json_object_get(params, "max_iters"))) o.max_iters = (int)json_integer_value(v);
    if ((v = json_object_get(params, "cold_l2"))) o.cold_l2 = json_is_true(v);
    if ((v = json_object_get(params, "use_events"))) o.use_events = json_is_true(v);
    if ((v = json_object_get(params, "rel_ci"))) o.rel_ci = json_number_value(v);
    if ((v = json_object_get(params, "timeout_s"))) o.timeout_s = json_number_value(v);

    list_target t;
    kh_status st = prepare_target(s, params, &t, err);
    if (st)
        return after(w, st);
    kh_bench_target bt = {.call = lt_call, .trial = lt_trial, .ctx = &t};
    kh_bench_result r;
    /* Noise guards: no persisting L2 lines left by an earlier candidate;
     * clocks read around the set; a set during which the GPU throttled
     * itself is discarded and run again (at most twice). */
    kh_gpu_clocks before, after_c;
    int throttled_sets = 0;
    for (;;) {
        st = kh_gpu_reset_l2_persisting(s->g, err);
        if (st)
            break;
        kh_gpu_read_clocks(s->g, &before);
        st = kh_bench_run(s->g, s->c, &bt, &o, &r, err);
        kh_gpu_read_clocks(s->g, &after_c);
        if (st || !(before.throttled || after_c.throttled) || throttled_sets >= 2)
            break;
        throttled_sets++;
        kh_bench_result_free(&r);
    }
    if (!st) {
        kh_err gerr;
        json_t *res = json_pack(
            "{s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:I}",
            "status", r.status, "why", r.why, "timer", r.timer, "protocol",
            kh_protocol_name(proto), "latency_ns", r.latency_ns, "window_latency_ns",
            r.window_latency_ns, "median_ns", r.median_ns, "mean_ns", r.mean_ns, "stdev_ns",
            r.stdev_ns, "min_ns", r.min_ns, "max_ns", r.max_ns, "rel_ci",
            isfinite(r.rel_ci) ? r.rel_ci : -1.0, "sum_kernel_ns", r.sum_kernel_ns,
            "kernels_per_call", r.kernels_per_call, "trials", r.trials, "n", (json_int_t)r.n);
        json_t *names = json_array();
        for (int i = 0; i < r.nnames; i++)
            json_array_append_new(names, json_string(r.names[i]));
        json_object_set_new(res, "kernels", names);
        json_object_set_new(res, "trial_median_ns", samples_json(r.trial_median_ns,
                                                                 (size_t)r.trials));
        json_object_set_new(res, "samples_ns", samples_json(r.samples_ns, r.n));
        if (kh_launch_check_guards(&t.l, &gerr))
            json_object_set_new(res, "guards", json_string(gerr.msg));
        else
            json_object_set_new(res, "guards", json_string("ok"));
        if (s->cupti_note[0])
            json_object_set_new(res, "timer_note", json_string(s->cupti_note));
        json_object_set_new(res, "gap_ns", json_real(r.gap_ns));
        json_object_set_new(res, "clocks_before", kh_gpu_clocks_json(&before));
        json_object_set_new(res, "clocks_after", kh_gpu_clocks_json(&after_c));
        json_object_set_new(res, "throttled_sets_discarded", json_integer(throttled_sets));
        json_object_set_new(res, "gpu", kh_gpu_info(s->g));
        *result = res;
    }
    kh_bench_result_free(&r);
    kh_launch_free(&t.l);
    return after(w, st);
}

static kh_status m_paired(kh_worker *w, const json_t *params, const unsigned char *payload,
                          size_t n, json_t **result, unsigned char **out, size_t *out_n,
                          kh_err *err)
{
    (void)payload; (void)n; (void)out; (void)out_n;
    gpu_state *s = S(w);
    list_target ta, tb;
    kh_status st = prepare_target(s, json_object_get(params, "a"), &ta, err);
    if (st)
        return after(w, st);
    st = prepare_target(s, json_object_get(params, "b"), &tb, err);
    if (st) {
        kh_launch_free(&ta.l);
        return after(w, st);
    }
    json_t *v;
    int rounds = (v = json_object_get(params, "rounds")) ? (int)json_integer_value(v) : 20;
    int block = (v = json_object_get(params, "block")) ? (int)json_integer_value(v) : 5;
    double margin = (v = json_object_get(params, "margin")) ? json_number_value(v) : 0.0;
    uint64_t seed = (v = json_object_get(params, "seed")) ? (uint64_t)json_integer_value(v)
                                                          : 1;
    kh_bench_target a = {.call = lt_call, .ctx = &ta}, b = {.call = lt_call, .ctx = &tb};
    kh_paired_result r;
    st = kh_bench_paired(s->g, s->c, &a, &b, rounds, block, margin, seed, &r, err);
    if (!st)
        *result = json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:s, s:I, s:I, s:I}", "timer",
                            r.timer, "median_a_ns", r.median_a_ns, "median_b_ns",
                            r.median_b_ns, "ratio", r.ratio, "ci_lo", r.ci_lo, "ci_hi",
                            r.ci_hi, "verdict", r.verdict, "n_a", (json_int_t)r.n_a, "n_b",
                            (json_int_t)r.n_b, "seed", (json_int_t)r.seed);
    kh_launch_free(&ta.l);
    kh_launch_free(&tb.l);
    return after(w, st);
}

/* Device-to-device copy bandwidth (bytes read + written per second), the
 * measured ceiling for memory-bound kernels: median of 20 copies of 1 GiB. */
typedef struct copy_target {
    kh_gpu *g;
    CUdeviceptr a, b;
    size_t n;
} copy_target;

static kh_status ct_call(void *ctx, kh_err *err)
{
    copy_target *c = ctx;
    const kh_cuda_api *cu = kh_gpu_api(c->g);
    return kh_gpu_check(c->g, cu->cuMemcpyDtoDAsync(c->b, c->a, c->n, kh_gpu_stream(c->g)),
                        "cuMemcpyDtoDAsync", err);
}

static kh_status m_peaks(kh_worker *w, const json_t *params, const unsigned char *payload,
                         size_t n, json_t **result, unsigned char **out, size_t *out_n,
                         kh_err *err)
{
    (void)payload; (void)n; (void)out; (void)out_n;
    gpu_state *s = S(w);
    json_t *v = json_object_get(params, "bytes");
    size_t bytes = v ? (size_t)json_integer_value(v) : (1u << 30);
    kh_gpu_buf a, b;
    kh_status st = kh_gpu_buf_alloc(s->g, bytes, 0, &a, err);
    if (st)
        return after(w, st);
    st = kh_gpu_buf_alloc(s->g, bytes, 0, &b, err);
    if (st) {
        kh_gpu_buf_free(s->g, &a);
        return after(w, st);
    }
    kh_gpu_memset8(s->g, a.ptr, 0x3c, bytes, err);
    copy_target ct = {s->g, a.ptr, b.ptr, bytes};
    kh_bench_target t = {.call = ct_call, .ctx = &ct};
    kh_bench_opts o;
    kh_bench_defaults(KH_PROTO_SCREEN, &o);
    o.max_iters = 20;
    o.rel_ci = 0; /* run all 20 */
    o.cold_l2 = 0;
    kh_bench_result r;
    st = kh_bench_run(s->g, s->c, &t, &o, &r, err);
    if (!st)
        *result = json_pack("{s:f, s:f, s:s, s:I}", "copy_bytes_per_s",
                            2.0 * (double)bytes / (r.median_ns * 1e-9), "copy_median_ns",
                            r.median_ns, "timer", r.timer, "bytes", (json_int_t)bytes);
    kh_bench_result_free(&r);
    kh_gpu_buf_free(s->g, &a);
    kh_gpu_buf_free(s->g, &b);
    return after(w, st);
}

/* evaluate: docs/evaluation.md */
static kh_status m_evaluate(kh_worker *w, const json_t *params, const unsigned char *payload,
                            size_t n, json_t **result, unsigned char **out, size_t *out_n,
                            kh_err *err)
{
    gpu_state *s = S(w);
    if (!s->ev && !(s->ev = kh_gpu_eval_new(kh_worker_engine(w), s->g, s->c, err)))
        return err->code;
    return after(w, kh_gpu_evaluate(s->ev, params, payload, n, result, out, out_n, err));
}

static const kh_worker_method_entry gpu_methods[] = {
    {"evaluate", m_evaluate},
    {"info", m_info},     {"load", m_load},     {"unload", m_unload}, {"time", m_time},
    {"paired", m_paired}, {"peaks", m_peaks},   {NULL, NULL},
};

const kh_worker_role kh_role_gpu = {
    .name = "gpu",
    .summary = "one GPU: CUDA context, CUPTI, modules, timing protocols",
    .methods = gpu_methods,
    .init = gpu_init,
    .fini = gpu_fini,
};
