/* profile_task.c: a task's candidate made profilable (see profile.h): the
 * task package and the solution loaded as the evaluation loads them
 * (task.h), one workload chosen, the manifest resolved for its axes into a
 * concrete launch list (launch.h) whose inputs are random-filled buffers of
 * the right sizes, the source compiled by a compile server as eval compiles
 * it (compile_service.h: this process never runs NVRTC, which loads and
 * initialises the CUDA driver where it compiles), and the task's
 * speed-of-light inputs.  Profiling
 * needs no correct outputs, so no reference runs and nothing is compared. */
#include "store/candidate.h"
#include "compile/compile_service.h"
#include "profile/profile.h"
#include "task/task.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void kh_profile_task_free(kh_profile_task *t)
{
    if (!t)
        return;
    free(t->cubin);
    json_decref(t->spec);
    json_decref(t->context);
    json_decref(t->compile);
    memset(t, 0, sizeof *t);
}

static const kh_task_tensor *find_tensor(const kh_task_tensor *ts, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ts[i].name, name))
            return &ts[i];
    return NULL;
}

static kh_status tensor_bytes(const kh_task_def *d, const kh_task_tensor *t,
                              const int64_t *axes, int64_t *bytes, kh_err *err)
{
    if (!t->valid || !t->dtype_bits)
        return kh_err_set(err, KH_EINVAL, "tensor '%s': unknown dtype or shape", t->name);
    int64_t n = 1;
    for (size_t k = 0; k < t->rank; k++) {
        int64_t v = axes[t->dims[k]];
        if (v < 0 || (v && n > INT64_MAX / 8 / v))
            return kh_err_set(err, KH_EINVAL, "tensor '%s': size out of range", t->name);
        n *= v;
    }
    *bytes = (n * t->dtype_bits + 7) / 8;
    (void)d;
    return KH_OK;
}

/* A by-value scalar input: the workload's value, else 1 (profiling needs a
 * plausible value, not a random one: a scalar often scales or bounds work). */
static kh_status scalar_arg(const kh_task_def *d, const kh_task_workload *w, const char *name,
                            json_t **out, kh_err *err)
{
    const kh_task_tensor *t = find_tensor(d->inputs, d->ninputs, name);
    if (!t)
        return kh_err_set(err, KH_EINVAL, "scalar '%s' is not an input of '%s'", name, d->name);
    const json_t *in = json_object_get(json_object_get(w->json, "inputs"), name);
    const json_t *v = json_object_get(in, "value");
    double x = json_is_number(v) ? json_number_value(v) : 1.0;
    if (!strcmp(t->dtype, "float32"))
        *out = json_pack("{s:f}", "f32", x);
    else if (!strcmp(t->dtype, "float64"))
        *out = json_pack("{s:f}", "f64", x);
    else if (!strcmp(t->dtype, "int32"))
        *out = json_pack("{s:I}", "i32", (json_int_t)x);
    else if (!strcmp(t->dtype, "int64"))
        *out = json_pack("{s:I}", "i64", (json_int_t)x);
    else
        return kh_err_set(err, KH_EUNSUPPORTED, "scalar '%s' of dtype %s cannot be passed by "
                          "value to a profiled launch", name, t->dtype);
    return KH_OK;
}

static kh_status launch_arg(const kh_task_def *d, const kh_task_workload *w,
                            const kh_task_arg *a, json_t **out, kh_err *err)
{
    switch (a->kind) {
    case KH_TASK_ARG_INPUT:
    case KH_TASK_ARG_OUTPUT:
    case KH_TASK_ARG_WORKSPACE:
        *out = json_pack("{s:s}", "buf", a->name);
        return KH_OK;
    case KH_TASK_ARG_SCALAR:
        return scalar_arg(d, w, a->name, out, err);
    case KH_TASK_ARG_VALUE: {
        int64_t v;
        kh_status st = kh_task_eval(d, w->axes, a->expr, NULL, NULL, &v, err);
        if (st)
            return st;
        const char *ty = a->type ? a->type : "int32";
        const char *k = !strcmp(ty, "int64")    ? "i64"
                        : !strcmp(ty, "uint32") ? "u32"
                        : !strcmp(ty, "uint64") ? "u64"
                                                : "i32";
        *out = json_pack("{s:I}", k, (json_int_t)v);
        return KH_OK;
    }
    }
    return kh_err_set(err, KH_EINVAL, "unknown argument kind");
}

kh_status kh_profile_task_spec(const kh_task_def *d, const kh_task_solution *sol,
                               const kh_task_workload *w, uint64_t seed, json_t **spec,
                               kh_bn_context *ctx, kh_err *err)
{
    *spec = NULL;
    const kh_task_manifest *m = sol->manifest;
    if (!m)
        return kh_err_set(err, KH_EUNSUPPORTED, "solution '%s' has no khlua manifest",
                          sol->name ? sol->name : "?");
    if (m->host)
        return kh_err_set(err, KH_EUNSUPPORTED, "solution '%s' is a host candidate: the "
                          "profiler profiles CUDA kernels", sol->name ? sol->name : "?");
    if (m->so)
        return kh_err_set(err, KH_EUNSUPPORTED, "solution '%s' is a trusted shared object "
                          "(cuda_so): the profiler replays launch manifests",
                          sol->name ? sol->name : "?");
    if (!w->axes_ok)
        return kh_err_set(err, KH_EINVAL, "workload '%s' does not give every axis a value",
                          w->uuid ? w->uuid : "?");
    if (m->nlaunches > 64 || m->nworkspace > 64)
        return kh_err_set(err, KH_EUNSUPPORTED, "more than 64 launches or workspace buffers");
    kh_task_launch_dims dims[64];
    int64_t ws[64];
    kh_status st = kh_task_manifest_resolve(sol, w->axes, dims, ws, err);
    if (st)
        return st;
    json_t *bufs = json_array(), *ls = json_array();
    json_t *out = json_pack("{s:o, s:o}", "buffers", bufs, "launches", ls);
    /* inputs random (seeded per buffer), outputs left as allocated, workspace zero */
    for (size_t i = 0; i < d->ninputs + d->noutputs && !st; i++) {
        int is_in = i < d->ninputs;
        const kh_task_tensor *t = is_in ? &d->inputs[i] : &d->outputs[i - d->ninputs];
        if (t->is_scalar)
            continue;
        int64_t b = 0;
        if ((st = tensor_bytes(d, t, w->axes, &b, err)))
            break;
        json_t *bj = json_pack("{s:s, s:I, s:s}", "name", t->name, "bytes", (json_int_t)b,
                               "init", is_in ? "random" : "none");
        if (is_in)
            json_object_set_new(bj, "seed", json_integer((json_int_t)((seed + i) & INT64_MAX)));
        json_array_append_new(bufs, bj);
    }
    for (size_t i = 0; i < m->nworkspace && !st; i++)
        json_array_append_new(bufs, json_pack("{s:s, s:I, s:s}", "name", m->workspace[i].name,
                                              "bytes", (json_int_t)ws[i], "init", "zero"));
    for (size_t l = 0; l < m->nlaunches && !st; l++) {
        const kh_task_launch *L = &m->launches[l];
        json_t *args = json_array();
        for (size_t i = 0; i < L->nargs && !st; i++) {
            json_t *v = NULL;
            if (!(st = launch_arg(d, w, &L->args[i], &v, err)))
                json_array_append_new(args, v);
        }
        json_array_append_new(
            ls, json_pack("{s:s, s:[I,I,I], s:[I,I,I], s:I, s:o}", "kernel", L->kernel, "grid",
                          (json_int_t)dims[l].grid[0], (json_int_t)dims[l].grid[1],
                          (json_int_t)dims[l].grid[2], "block", (json_int_t)dims[l].block[0],
                          (json_int_t)dims[l].block[1], (json_int_t)dims[l].block[2], "smem",
                          (json_int_t)dims[l].shared_bytes, "args", args));
    }
    if (!st && ctx) {
        int64_t bytes = 0, flops = -1;
        if (!(st = kh_task_speed_of_light(d, w->axes, &bytes, &flops, err))) {
            ctx->min_bytes = (double)bytes;
            ctx->flops = flops > 0 ? (double)flops : 0;
        }
    }
    if (st) {
        json_decref(out);
        return st;
    }
    *spec = out;
    return KH_OK;
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The ids the evaluation gives the task and the candidate (eval_record.c): the task
 * by its definition's name, the candidate by its one identity
 * (candidate.h); none when the solution carries no candidate. */
static void ids_of(const kh_task_def *d, const kh_task_solution *sol, kh_profile_task *t)
{
    snprintf(t->task_id, sizeof t->task_id, "task-%s", d->name);
    kh_candidate c;
    kh_err err;
    if (kh_candidate_of(sol->json, &c, &err))
        return;
    snprintf(t->candidate_id, sizeof t->candidate_id, "%s", c.id);
    kh_candidate_free(&c);
}

kh_status kh_profile_task_prepare(kh_engine *e, const kh_profile_task_opts *o,
                                  kh_profile_task *t, kh_err *err)
{
    memset(t, 0, sizeof *t);
    if (!o->task_path || !o->solution)
        return kh_err_set(err, KH_EINVAL, "profile: a task and a solution are required");
    kh_task_set *own = NULL, *S = NULL;
    kh_task_opts to = {0};
    kh_status st = KH_OK;
    const kh_task_set *P = o->task_set;
    if (!P && !(st = kh_task_load(o->task_path, &to, &own, err)))
        P = own;
    if (st)
        return st;
    const kh_task_solution *sol = NULL;
    const kh_task_def *d = NULL;
    const kh_task_workload *w = NULL;
    char *text = NULL;
    size_t len = 0;
    const char *json = o->solution_json;
    if (json) {
        len = o->solution_json_len;
    } else if (is_file(o->solution)) {
        if (kh_read_file(o->solution, &text, &len)) {
            st = kh_err_set(err, KH_EIO, "%s: %s", o->solution, strerror(errno));
            goto out;
        }
        json = text;
    }
    if (json) {
        /* a Solution from anywhere, parsed against the task's definitions
         * as the evaluation parses it */
        if ((st = kh_task_solution_from_text(P, o->solution, json, len, &S, err)))
            goto out;
        if (kh_task_nsolutions(S) != 1) {
            const kh_task_problem *p = NULL;
            for (size_t i = 0; !p && i < kh_task_nproblems(S); i++)
                if (kh_task_problem_at(S, i)->severity == KH_TASK_ERROR)
                    p = kh_task_problem_at(S, i);
            char buf[1024];
            st = p ? kh_err_set(err, KH_EPARSE, "%s", kh_task_problem_format(p, buf, sizeof buf))
                   : kh_err_set(err, KH_EINVAL, "%s: expected one Solution, found none",
                                o->solution);
            goto out;
        }
        sol = kh_task_solution_at(S, 0);
    } else if (!(sol = kh_task_find_solution(P, o->solution))) {
        st = kh_err_set(err, KH_ENOTFOUND, "no solution named '%s' in %s (nor a file by that "
                        "name)", o->solution, o->task_path);
        goto out;
    }
    d = sol->definition ? kh_task_find_def(P, sol->definition) : NULL;
    if (!d) {
        st = kh_err_set(err, KH_ENOTFOUND, "solution '%s': definition '%s' is not in %s",
                        sol->name ? sol->name : "?", sol->definition ? sol->definition : "?",
                        o->task_path);
        goto out;
    }
    for (size_t i = 0; i < kh_task_nworkloads(P) && !w; i++) {
        const kh_task_workload *x = kh_task_workload_at(P, i);
        if (!x->definition || strcmp(x->definition, d->name) || !x->uuid || !x->axes_ok ||
            x->is_trace)
            continue;
        if (!o->workload || !strcmp(o->workload, x->uuid))
            w = x;
    }
    if (!w) {
        st = o->workload ? kh_err_set(err, KH_ENOTFOUND, "workload '%s' of '%s' is not in %s",
                                      o->workload, d->name, o->task_path)
                         : kh_err_set(err, KH_ENOTFOUND, "no workloads of '%s' in %s", d->name,
                                      o->task_path);
        goto out;
    }
    st = kh_profile_task_spec(d, sol, w, o->seed ? o->seed : 1, &t->spec, &t->ctx, err);
    if (st)
        goto out;

    /* compile: the candidate's entry source with the others as its headers,
     * isolated and checked as eval does */
    const char *src = NULL;
    size_t src_len = 0, nh = 0;
    kh_source *hdrs = NULL;
    if ((st = kh_task_cuda_sources(sol, &src, &src_len, &hdrs, &nh, err)))
        goto out;
    kh_compile_service_opts so = {.servers = 1, .exe = o->exe};
    kh_compile_service *cs = kh_compile_service_new(e, &so, err);
    if (!cs) {
        free(hdrs);
        st = err->code;
        goto out;
    }
    const kh_task_manifest *m = sol->manifest;
    const char *kernels[64];
    size_t nk = 0;
    for (size_t l = 0; l < m->nlaunches && nk < 64; l++)
        kernels[nk++] = m->launches[l].kernel;
    kh_compile_req rq = {.source = src, .source_len = src_len, .name = sol->entry_file,
                         .headers = hdrs, .n_headers = nh, .kernels = kernels,
                         .n_kernels = nk, .trusted = o->trusted};
    kh_artifact *ar = NULL;
    st = kh_compile_service_build(cs, o->cache, &rq, &ar, err);
    if (!st && !(t->cubin = malloc(ar->cubin_len)))
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
    if (!st) {
        memcpy(t->cubin, ar->cubin, ar->cubin_len);
        t->cubin_len = ar->cubin_len;
        t->compile = json_pack("{s:s, s:s, s:s}", "key", ar->hash, "arch",
                               ar->arch ? ar->arch : "", "nvrtc", ar->nvrtc_version);
    } else if ((st == KH_ECOMPILE || st == KH_ETIMEOUT) && ar && ar->log) {
        char first[700];
        snprintf(first, sizeof first, "%s", err->msg);
        kh_err_set(err, st, "%s\n%.2000s", first, ar->log);
    }
    kh_artifact_free(ar);
    kh_compile_service_free(cs);
    free(hdrs);
    if (st)
        goto out;
    ids_of(d, sol, t);
    json_t *axes = json_object();
    for (size_t a = 0; a < d->naxes; a++)
        json_object_set_new(axes, d->axes[a].name, json_integer((json_int_t)w->axes[a]));
    t->context = json_pack("{s:s, s:s, s:s?, s:s, s:o, s:f, s:f}", "task_path", o->task_path,
                           "definition", d->name, "solution", sol->name, "workload", w->uuid,
                           "axes", axes, "min_bytes", t->ctx.min_bytes, "flops", t->ctx.flops);
out:
    if (st)
        kh_profile_task_free(t);
    kh_task_set_free(S);
    kh_task_set_free(own);
    free(text);
    return st;
}
