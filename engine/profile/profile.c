/* profile.c: the coordinator's side of profiling (see profile.h).  Owns the
 * metric list in force, the conversation with a profile worker, the joining
 * of metrics with launch resources into bottleneck states, and the ncu run
 * beside it.  Counting happens in rprof.c, classifying in bottleneck.c. */
#include "profile/profile.h"

#include "profile/ncu.h"
#include "worker/supervisor.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const default_metrics[] = {
    KH_BN_TIME,     KH_BN_SM,    KH_BN_MEM,    KH_BN_DRAM,          KH_BN_DRAM_READ,
    KH_BN_DRAM_WRITE, KH_BN_WARPS, KH_BN_L2_HIT, KH_BN_TENSOR_METRIC,
};

json_t *kh_profile_default_metrics(void)
{
    json_t *a = json_array();
    const char *env = getenv("KHLUA_PROFILE_METRICS");
    if (env && *env) {
        char *copy = kh_strdup(env);
        char *save = NULL;
        for (char *t = copy ? strtok_r(copy, ", ", &save) : NULL; t;
             t = strtok_r(NULL, ", ", &save))
            json_array_append_new(a, json_string(t));
        free(copy);
        if (json_array_size(a))
            return a;
    }
    for (size_t i = 0; i < KH_ARRAY_LEN(default_metrics); i++)
        json_array_append_new(a, json_string(default_metrics[i]));
    return a;
}

static long jint(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (long)json_integer_value(v)
           : json_is_number(v) ? (long)json_number_value(v)
                               : 0;
}

void kh_profile_launch_from_json(const json_t *launch, const json_t *device, kh_bn_launch *l)
{
    memset(l, 0, sizeof *l);
    l->spill_instructions = -1;
    if (launch) {
        l->blocks = jint(launch, "blocks");
        l->threads_per_block = (int)jint(launch, "threads_per_block");
        l->regs_per_thread = (int)jint(launch, "regs_per_thread");
        l->smem_per_block = jint(launch, "smem_per_block");
        l->local_bytes = jint(launch, "local_bytes");
        if (json_object_get(launch, "spill_instructions"))
            l->spill_instructions = (int)jint(launch, "spill_instructions");
        l->api_blocks_per_sm = (int)jint(launch, "api_blocks_per_sm");
    }
    if (device) {
        l->sms = (int)jint(device, "sms");
        l->regs_per_sm = (int)jint(device, "regs_per_sm");
        l->smem_per_sm = (int)jint(device, "smem_per_sm");
        l->reserved_smem_per_block = (int)jint(device, "reserved_smem_per_block");
        l->max_threads_per_sm = (int)jint(device, "max_threads_per_sm");
        l->max_blocks_per_sm = (int)jint(device, "max_blocks_per_sm");
    }
}

/* The range of launch i, if the profiler returned one. */
static const json_t *range_of(const json_t *ranges, size_t i)
{
    size_t k;
    const json_t *r;
    json_array_foreach(ranges, k, r) {
        if ((size_t)json_integer_value(json_object_get(r, "index")) == i)
            return r;
    }
    return NULL;
}

kh_status kh_profile_classify(const json_t *reply, const kh_bn_context *ctx_in,
                              json_t **report, kh_err *err)
{
    *report = NULL;
    if (!json_is_object(reply))
        return kh_err_set(err, KH_EINVAL, "profile: the worker's reply is not an object");
    const json_t *launches = json_object_get(reply, "launches");
    const json_t *device = json_object_get(reply, "device");
    const json_t *prof = json_object_get(reply, "profiler");
    size_t n = json_array_size(launches);
    if (!n)
        return kh_err_set(err, KH_EINVAL, "profile: the reply lists no launches");
    kh_bn_context ctx = ctx_in ? *ctx_in : (kh_bn_context){0};
    if (ctx.copy_bytes_per_s <= 0) {
        const json_t *bw = json_object_get(json_object_get(reply, "peaks"), "copy_bytes_per_s");
        ctx.copy_bytes_per_s = json_is_number(bw) ? json_number_value(bw) : 0;
    }
    const char *why = json_string_value(json_object_get(reply, "why"));
    if (!prof && ctx.measured_ns <= 0) {
        /* no counters: the event timing is the only time there is */
        const json_t *lat = json_object_get(json_object_get(reply, "timing"), "latency_ns");
        ctx.measured_ns = json_is_number(lat) ? json_number_value(lat) : 0;
    }
    /* Per kernel: the task's bytes and FLOPs describe the whole candidate,
     * so a kernel of several gets no SOL of its own. */
    kh_bn_context kctx = ctx;
    kctx.measured_ns = 0;
    if (n > 1)
        kctx.min_bytes = kctx.flops = 0;
    else if (!prof)
        kctx.measured_ns = ctx.measured_ns;

    kh_bn_state *states = calloc(n, sizeof *states);
    if (!states)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    json_t *kernels = json_array();
    for (size_t i = 0; i < n; i++) {
        const json_t *ln = json_array_get(launches, i);
        const json_t *r = prof ? range_of(json_object_get(prof, "ranges"), i) : NULL;
        kh_bn_launch bl;
        kh_profile_launch_from_json(ln, device, &bl);
        kh_bn_metrics m;
        if (r)
            kh_bn_metrics_from_json(json_object_get(r, "metrics"), &m);
        kh_bn_classify(r ? &m : NULL, &bl, &kctx,
                       r ? NULL : prof ? "the profiler returned no range for this launch"
                                       : (why ? why : "no counters"),
                       &states[i]);
        json_t *k = json_pack("{s:I, s:O, s:O}", "index", (json_int_t)i, "kernel",
                              json_object_get(ln, "kernel"), "launch", ln);
        json_object_set_new(k, "metrics", r ? json_deep_copy(json_object_get(r, "metrics"))
                                            : json_object());
        json_object_set_new(k, "state", kh_bn_state_json(&states[i]));
        json_array_append_new(kernels, k);
    }
    kh_bn_state all;
    kh_bn_combine(states, n, &ctx, &all);
    free(states);

    json_t *rep = json_deep_copy(reply);
    json_object_del(rep, "profiler");
    json_object_set_new(rep, "counters", json_boolean(prof != NULL));
    if (prof) {
        const char *keys[] = {"chip",     "replay",  "passes",   "metrics", "dropped",
                              "dropped_ranges", "l2_flush", "setup_s", "collect_s"};
        for (size_t i = 0; i < KH_ARRAY_LEN(keys); i++) {
            json_t *v = json_object_get(prof, keys[i]);
            if (v)
                json_object_set(rep, keys[i], v);
        }
    } else if (!why) {
        json_object_set_new(rep, "why", json_string("no counters"));
    }
    json_object_set_new(rep, "kernels", kernels);
    json_object_set_new(rep, "state", kh_bn_state_json(&all));
    json_object_set_new(rep, "signature", json_string(all.signature));
    *report = rep;
    return KH_OK;
}

/* ---- running --------------------------------------------------------------------- */

static kh_status mkdir_p(const char *path, kh_err *err)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return kh_err_set(err, KH_EIO, "mkdir %s: %s", buf, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    return KH_OK;
}

static kh_status write_all(const char *path, const void *data, size_t n, kh_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kh_err_set(err, KH_EIO, "%s: %s", path, strerror(errno));
    size_t w = fwrite(data, 1, n, f);
    if (fclose(f) != 0 || w != n)
        return kh_err_set(err, KH_EIO, "%s: write failed", path);
    return KH_OK;
}

/* One request; params (may be NULL) is stolen. */
static json_t *worker_call(kh_wproc *w, const char *method, json_t *params,
                           const void *payload, size_t n, double timeout, kh_status *st,
                           kh_err *err)
{
    kh_msg reply = {0};
    *st = kh_wproc_call(w, method, params, payload, n, timeout, &reply, err);
    json_decref(params);
    json_t *res = NULL;
    if (!*st)
        res = json_incref(json_object_get(reply.head, "result"));
    kh_msg_free(&reply);
    return res;
}

/* The rich tier on the same launch list; results (or the error) into rep. */
static void run_ncu(kh_engine *e, const kh_profile_opts *o, json_t *rep, double timeout)
{
    kh_err err = {0};
    char dir[1024], cubin[1100], spec[1100];
    if (o->out_dir) {
        snprintf(dir, sizeof dir, "%s", o->out_dir);
    } else {
        /* beside the store (with a store given, the files also go in as blobs) */
        char base[900];
        snprintf(base, sizeof base, "%s",
                 o->store ? kh_store_path(o->store) : kh_engine_store_path(e));
        char *slash = strrchr(base, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(base, sizeof base, ".");
        char stamp[32];
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
        snprintf(dir, sizeof dir, "%s/profiles/%s-%d", base, stamp, (int)getpid());
    }
    snprintf(cubin, sizeof cubin, "%s/candidate.cubin", dir);
    snprintf(spec, sizeof spec, "%s/spec.json", dir);
    json_t *res = NULL;
    kh_status st = mkdir_p(dir, &err);
    if (!st)
        st = write_all(cubin, o->cubin, o->cubin_len, &err);
    if (!st && json_dump_file(o->spec, spec, JSON_COMPACT) != 0)
        st = kh_err_set(&err, KH_EIO, "%s: write failed", spec);
    /* kernel names (distinct), in launch order */
    const json_t *launches = json_object_get(o->spec, "launches");
    const char *names[64];
    size_t nn = 0, nl = json_array_size(launches);
    for (size_t i = 0; i < nl && nn < KH_ARRAY_LEN(names); i++) {
        const char *k = json_string_value(json_object_get(json_array_get(launches, i), "kernel"));
        int seen = 0;
        for (size_t j = 0; k && j < nn; j++)
            seen |= !strcmp(names[j], k);
        if (k && !seen)
            names[nn++] = k;
    }
    /* ncu refuses an unknown metric outright: pass the names the in-process
     * tier accepted when it ran, else the requested list. */
    char metrics[4096] = "";
    const json_t *used = json_object_get(rep, "metrics");
    json_t *req = used ? NULL : (o->metrics ? json_incref((json_t *)o->metrics)
                                            : kh_profile_default_metrics());
    size_t i;
    const json_t *v;
    json_array_foreach(used ? used : req, i, v) {
        size_t l = strlen(metrics);
        snprintf(metrics + l, sizeof metrics - l, "%s%s", l ? "," : "", json_string_value(v));
    }
    json_decref(req);
    char exe[1024];
    const char *exep = o->exe;
    if (!exep) {
        ssize_t r = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[r > 0 ? r : 0] = 0;
        exep = exe;
    }
    if (!st) {
        kh_ncu_opts no = {.ncu = o->ncu_path,
                          .cuda_home = kh_engine_cuda_home(e),
                          .exe = exep,
                          .cubin_path = cubin,
                          .spec_path = spec,
                          .kernels = names,
                          .nkernels = nn,
                          .launches = nl,
                          .metrics = metrics,
                          .sections = o->ncu_sections,
                          .out_dir = dir,
                          .timeout_s = timeout};
        st = kh_ncu_run(&no, &res, &err);
    }
    if (st) {
        json_object_set_new(rep, "ncu", json_pack("{s:s, s:s, s:s}", "error", err.msg, "code",
                                                  kh_status_name(st), "dir", dir));
        return;
    }
    /* classify ncu's kernels; ncu profiled the launches in order */
    const json_t *device = json_object_get(rep, "device");
    const json_t *mine = json_object_get(rep, "kernels");
    json_t *deltas = json_array();
    json_t *k;
    json_array_foreach(json_object_get(res, "kernels"), i, k) {
        const json_t *mk = json_array_get(mine, i);
        kh_bn_launch bl;
        kh_profile_launch_from_json(json_object_get(mk, "launch"), device, &bl);
        kh_bn_metrics m;
        kh_bn_metrics_from_json(json_object_get(k, "metrics"), &m);
        kh_bn_context c = o->ctx;
        c.measured_ns = 0;
        if (nl > 1)
            c.min_bytes = c.flops = 0;
        if (c.copy_bytes_per_s <= 0) {
            const json_t *bw =
                json_object_get(json_object_get(rep, "peaks"), "copy_bytes_per_s");
            c.copy_bytes_per_s = json_is_number(bw) ? json_number_value(bw) : 0;
        }
        kh_bn_state s;
        kh_bn_classify(&m, &bl, &c, NULL, &s);
        json_object_set_new(k, "state", kh_bn_state_json(&s));
        kh_bn_metrics mm;
        kh_bn_metrics_from_json(json_object_get(mk, "metrics"), &mm);
        json_array_append_new(deltas, isfinite(mm.dram_pct) && isfinite(m.dram_pct)
                                          ? json_real(m.dram_pct - mm.dram_pct)
                                          : json_null());
    }
    json_object_set_new(res, "dram_pct_delta", deltas);
    json_object_set_new(res, "dir", json_string(dir));
    json_object_set_new(rep, "ncu", res);
}

/* The peaks this run uses (new object): the store's for this GPU when fresh,
 * else measured now by the worker and kept in the store. */
static json_t *peaks_for(kh_wproc *w, const kh_profile_opts *o, double timeout)
{
    kh_status st;
    kh_err err = {0};
    json_t *info = worker_call(w, "info", NULL, NULL, 0, timeout, &st, &err);
    const char *why = NULL;
    char whybuf[1200] = "";
    json_t *peaks = NULL;
    if (o->store && info && !o->remeasure_peaks) {
        double age = o->peaks_max_age_s ? o->peaks_max_age_s : KH_PROFILE_PEAKS_MAX_AGE;
        if (kh_profile_peaks_lookup(o->store, info, age, &peaks, &why, &err)) {
            snprintf(whybuf, sizeof whybuf, "store: %s", err.msg);
            why = whybuf;
        }
    } else if (o->remeasure_peaks) {
        why = "re-measure asked";
    }
    if (peaks) {
        json_decref(info);
        return peaks;
    }
    peaks = worker_call(w, "peaks", json_pack("{s:b}", "measure", 1), NULL, 0, timeout, &st,
                        &err);
    if (!peaks)
        peaks = json_pack("{s:s}", "error", err.msg);
    if (!json_object_get(peaks, "error")) {
        char at[40];
        kh_store_format_time((int64_t)(kh_wall_now() * 1e6), at);
        json_object_set_new(peaks, "source", json_string("measured"));
        json_object_set_new(peaks, "measured_at", json_string(at));
        if (why)
            json_object_set_new(peaks, "why_measured", json_string(why));
        char id[KH_STORE_ID_MAX];
        if (o->store && info) {
            if (kh_profile_peaks_save(o->store, info, peaks, id, &err))
                json_object_set_new(peaks, "store_error", json_string(err.msg));
            else
                json_object_set_new(peaks, "record", json_string(id));
        }
    }
    json_decref(info);
    return peaks;
}

kh_status kh_profile_run(kh_engine *e, const kh_profile_opts *o, json_t **report, kh_err *err)
{
    *report = NULL;
    if (!o->cubin || !o->cubin_len || !json_is_object(o->spec))
        return kh_err_set(err, KH_EINVAL, "profile: a cubin and a launch list are required");
    if (o->metrics && !json_is_array(o->metrics))
        return kh_err_set(err, KH_EINVAL, "profile: metrics must be an array of names");
    if (o->store && kh_store_in_txn(o->store))
        return kh_err_set(err, KH_ESTATE, "profile: the store is inside a transaction");
    double timeout = o->timeout_s > 0 ? o->timeout_s : 300;
    /* the worker measures peaks only when asked (peaks_for) */
    static const char *const env[] = {"KHLUA_PEAKS_LAZY=1", NULL};
    kh_wproc_opts wo = {.role = "profile", .exe = o->exe, .hello_timeout_s = 120, .env = env};
    kh_wproc *w = kh_wproc_start(&wo, err);
    if (!w)
        return err->code;
    json_t *peaks = peaks_for(w, o, timeout);
    kh_status st;
    json_t *r = worker_call(w, "load", json_pack("{s:s}", "module", "candidate"), o->cubin,
                            o->cubin_len, timeout, &st, err);
    json_decref(r);
    json_t *params = json_pack("{s:s, s:O, s:s}", "module", "candidate", "spec", o->spec,
                               "replay", o->kernel_replay ? "kernel" : "user");
    if (o->metrics)
        json_object_set(params, "metrics", (json_t *)o->metrics);
    json_t *reply = NULL;
    if (!st)
        reply = worker_call(w, "profile", params, NULL, 0, timeout, &st, err);
    else
        json_decref(params);
    /* The worker goes before ncu starts: one process on the GPU at a time. */
    kh_wproc_stop(w, 5);
    if (st) {
        json_decref(peaks);
        return st;
    }
    json_object_set_new(reply, "peaks", peaks);
    st = kh_profile_classify(reply, &o->ctx, report, err);
    json_decref(reply);
    if (st)
        return st;
    /* the speed-of-light inputs the states were computed from */
    json_object_set_new(*report, "sol_inputs",
                        json_pack("{s:f, s:f, s:f}", "min_bytes", o->ctx.min_bytes, "flops",
                                  o->ctx.flops, "measured_ns", o->ctx.measured_ns));
    if (o->ncu)
        run_ncu(e, o, *report, timeout);
    if (o->store) {
        kh_profile_store_opts so = {.cubin = o->cubin, .cubin_len = o->cubin_len,
                                    .spec = o->spec, .task = o->task,
                                    .candidate = o->candidate, .evaluation = o->evaluation,
                                    .context = o->context};
        char id[KH_STORE_ID_MAX];
        kh_err serr = {0};
        if (kh_profile_store(o->store, *report, &so, id, &serr))
            json_object_set_new(*report, "store_error", json_string(serr.msg));
        else
            json_object_set_new(*report, "store_id", json_string(id));
    }
    return KH_OK;
}
