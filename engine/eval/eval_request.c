/* eval_request.c: the `evaluate` request the coordinator sends a worker
 * (docs/evaluation.md, "The worker method evaluate").  Owns resolving the
 * manifest for a workload into concrete launches or an entry call, each
 * input's generator (random with its seed and stream, a scalar, the bytes
 * of a safetensors input or of the sampling evaluator's inputs, whose probs
 * are made here), the trials, the hardened checks asked for, the timing
 * plan with its verified calls, and the inputs regenerated here for checks
 * that need them.
 * Filing and running requests is eval_jobs.c's. */
#include "eval/eval_int.h"

#include "gpu/bench.h"
#include "eval/pyref.h"
#include "task/rng.h"
#include "task/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void eval_in_free(wctx *c)
{
    for (size_t i = 0; i < 64; i++) {
        kh_tensor_free(c->ins[i]);
        c->ins[i] = NULL;
    }
    c->in_ok = 0;
}


/* The inputs of this workload for seed, the workers' bits (pyref.h). */
kh_status eval_host_inputs(wctx *c, uint64_t seed, kh_err *err)
{
    if (c->in_ok && c->in_w == c->w && c->in_seed == seed)
        return KH_OK;
    eval_in_free(c);
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

const kh_tensor *eval_input_named(wctx *c, const char *name)
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
            st = eval_sampling_probs(c, &pt, err);
        } else if (!(st = eval_host_inputs(c, eval_base_seed(c), err)) &&
                   !(pt = eval_input_named(c, t->name))) {
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

const kh_task_tensor *eval_find_input(const kh_task_def *d, const char *name, size_t *idx)
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
        const kh_task_tensor *t = eval_find_input(c->d, a->name, NULL);
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

/* The request of sol on this workload, its payload started afresh: the
 * artifact first, then the bytes its inputs' generators send. */
kh_status eval_request(wctx *c, const kh_task_solution *sol, const art *a, int reference,
                       json_t **params, kh_err *err)
{
    free(c->pl);
    c->pl = NULL;
    c->pl_len = 0;
    size_t off = 0;
    kh_status st = pl_add(c, a->bytes, a->len, &off, err);
    return st ? st : make_request(c, sol, a, reference, params, err);
}

/* The trusted reference's run rides in the candidate's request: its
 * artifact, tensors and launches (or entry) as its own request would hold
 * them, its payload (artifact, input bytes) after the candidate's, and the
 * comparison's options.  The worker runs it after the candidate's calls of
 * each trial and compares there (gpu_eval.c). */
kh_status eval_request_fused(wctx *c, const kh_task_solution *sol, const art *a,
                             json_t **params, kh_err *err)
{
    const kh_task_solution *ref = c->ref;
    art *ra = NULL;
    kh_status st = eval_build_reference(c, &ra, err);
    if (st)
        return st;
    json_t *rp = NULL, *p = NULL;
    if ((st = eval_request(c, ref, ra, 1, &rp, err)))
        return st;
    unsigned char *rpl = c->pl;
    size_t rlen = c->pl_len, off = 0;
    c->pl = NULL;
    c->pl_len = 0;
    st = eval_request(c, sol, a, 0, &p, err);
    if (!st)
        st = pl_add(c, rpl, rlen, &off, err);
    free(rpl);
    if (st) {
        json_decref(rp);
        json_decref(p);
        return st;
    }
    json_t *spec = json_object();
    const char *keys[] = {"artifact", "tensors", "launches", "entry"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (json_object_get(rp, keys[i]))
            json_object_set(spec, keys[i], json_object_get(rp, keys[i]));
    json_decref(rp);
    json_object_set_new(p, "verify",
                        json_pack("{s:o, s:[I, I], s:{s:f, s:f, s:s}}", "reference", spec,
                                  "payload", (json_int_t)off, (json_int_t)rlen, "compare",
                                  "atol", c->copts.atol, "rtol", c->copts.rtol, "precision",
                                  c->copts.precision == KH_CHECK_DOUBLE ? "double" : "f32"));
    *params = p;
    return KH_OK;
}

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
        ob += (double)eval_out_bytes(c->d, &c->d->outputs[i], axes);
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

void eval_add_timing(wctx *c, json_t *p, int verify)
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

size_t eval_out_bytes(const kh_task_def *d, const kh_task_tensor *t, const int64_t *axes)
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

void eval_probs_free(wctx *c)
{
    kh_tensor_free(c->probs);
    c->probs = NULL;
    c->probs_w = NULL;
    free(c->smask);
    c->smask = NULL;
}

/* The sampling evaluator's probs for this workload (see wctx). */
kh_status eval_sampling_probs(wctx *c, const kh_tensor **out, kh_err *err)
{
    if (c->probs && c->probs_w == c->w && c->probs_seed == eval_base_seed(c)) {
        *out = c->probs;
        return KH_OK;
    }
    eval_probs_free(c);
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
        st = kh_rng_fill_softmax(c->ev->e, c->probs, eval_base_seed(c), (uint32_t)idx, err);
    }
    const float *pv = c->probs ? c->probs->data : NULL;
    for (uint64_t i = 0; !st && i < c->probs->numel; i++)
        if (!(pv[i] >= 0) || !isfinite(pv[i]))
            st = kh_err_set(err, KH_EINVAL, "workload %s: probs[%llu, %llu] is %g, not a "
                            "probability", c->w->uuid,
                            (unsigned long long)(i / (uint64_t)shape[1]),
                            (unsigned long long)(i % (uint64_t)shape[1]), (double)pv[i]);
    if (st) {
        eval_probs_free(c);
        return st;
    }
    c->probs_w = c->w;
    c->probs_seed = eval_base_seed(c);
    *out = c->probs;
    return KH_OK;
}
