/* task_workload.c: workload and trace lines (FlashInfer-Bench's Trace):
 * axes, inputs, safetensors header checks (shape and dtype, and single index
 * elements for constraints such as indptr[-1].item(); loading tensors is
 * engine/task/safetensors.c's), constraints evaluated per workload, and a
 * trace's evaluation. */
#include "task/task_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_HEADER (100u << 20)

/* ---- workloads and traces ------------------------------------------------------ */
void task_wl_free(kh_task_workload *w)
{
    if (!w)
        return;
    free(w->definition);
    free(w->uuid);
    free(w->file);
    free(w->axes);
    json_decref(w->json);
    json_decref(w->record);
    free(w);
}

/* Axis bindings of one workload while its safetensors inputs are checked:
 * who bound each var axis first. */
typedef struct binder {
    int64_t value;
    int set;
    char who[96];
} binder;

static int64_t le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return (int64_t)v;
}

static void check_blob(vctx *v, const kh_task_def *d, const kh_task_tensor *t, const char *path,
                       const char *key, binder *bind, file_state *fs)
{
    kh_task_set *s = v->s;
    char *full = s->root ? task_path_join(s->root, path) : kh_strdup(path);
    if (!full)
        return;
    FILE *f = fopen(full, "rb");
    if (!f) {
        s->sum.blobs_missing++;
        if (s->opts.strict) {
            VERR(v, "path", "safetensors file %s is absent", full);
        } else if (!fs->missing++) {
            fs->first_line = task_field_line(v, "path");
            task_field_name(v, "path", fs->first_field, sizeof fs->first_field);
            snprintf(fs->first_path, sizeof fs->first_path, "%s", path);
        }
        free(full);
        return;
    }
    unsigned char head[8];
    json_t *hdr = NULL;
    char *buf = NULL;
    if (fread(head, 1, 8, f) != 8) {
        VERR(v, "path", "%s: shorter than a safetensors header", full);
        goto out;
    }
    if (!memcmp(head, "version ", 8)) {
        task_vproblem(v, s->opts.strict ? KH_TASK_ERROR : KH_TASK_WARNING, "path",
                      "%s is a Git LFS pointer, not the data; run git lfs pull", full);
        goto out;
    }
    int64_t n = le64(head);
    if (n <= 0 || n > (int64_t)MAX_HEADER) {
        VERR(v, "path", "%s: header length %lld; expected a safetensors file", full, (long long)n);
        goto out;
    }
    buf = malloc((size_t)n);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        VERR(v, "path", "%s: truncated safetensors header", full);
        goto out;
    }
    json_error_t je;
    hdr = json_loadb(buf, (size_t)n, 0, &je);
    if (!json_is_object(hdr)) {
        VERR(v, "path", "%s: safetensors header is not a JSON object (%s)", full, je.text);
        goto out;
    }
    s->sum.blobs_checked++;
    json_t *ent = json_object_get(hdr, key);
    if (!json_is_object(ent)) {
        VERR(v, "tensor_key", "\"%s\" is not a tensor in %s", key, full);
        goto out;
    }
    const char *dt = json_string_value(json_object_get(ent, "dtype"));
    if (!dt || strcmp(dt, task_dtype_st_name(t->dtype)))
        VERR(v, "tensor_key", "tensor \"%s\" in %s has dtype %s; expected %s (%s)", key, full,
             dt ? dt : "(none)", task_dtype_st_name(t->dtype), t->dtype);
    json_t *shape = json_object_get(ent, "shape");
    if (!json_is_array(shape) || json_array_size(shape) != t->rank) {
        VERR(v, "tensor_key", "tensor \"%s\" in %s has rank %zu; expected %zu", key, full,
             json_array_size(shape), t->rank);
        goto out;
    }
    for (size_t k = 0; k < t->rank; k++) {
        int64_t dim = json_integer_value(json_array_get(shape, k));
        size_t ax = t->dims[k];
        binder *b = &bind[ax];
        if (d->axes[ax].is_const) {
            if (dim != d->axes[ax].value)
                VERR(v, "tensor_key", "dimension %zu of \"%s\" in %s is %lld; expected const axis "
                                      "%s = %lld", k, key, full, (long long)dim, d->axes[ax].name,
                     (long long)d->axes[ax].value);
        } else if (!b->set) {
            b->set = 1;
            b->value = dim;
            snprintf(b->who, sizeof b->who, "input '%s'", t->name);
        } else if (b->value != dim) {
            VERR(v, "tensor_key", "dimension %zu of \"%s\" in %s binds var axis %s = %lld, but %s "
                                  "bind%s it to %lld; expected one value across inputs",
                 k, key, full, d->axes[ax].name, (long long)dim, b->who,
                 strchr(b->who, '&') ? "" : "s", (long long)b->value);
        } else if (!strchr(b->who, '&')) {
            /* a confirmation: name it too, so a later mismatch shows both */
            size_t used = strlen(b->who);
            snprintf(b->who + used, sizeof b->who - used, " & input '%s'", t->name);
        }
    }
    json_t *off = json_object_get(ent, "data_offsets");
    if (json_is_array(off) && json_array_size(off) == 2) {
        int64_t bytes = json_integer_value(json_array_get(off, 1)) -
                        json_integer_value(json_array_get(off, 0));
        int64_t want = t->dtype_bits;
        for (size_t k = 0; k < t->rank; k++)
            want *= json_integer_value(json_array_get(shape, k));
        want = want / 8 + (want % 8 != 0);
        if (bytes != want)
            VERR(v, "tensor_key", "tensor \"%s\" in %s holds %lld bytes; its shape and dtype need "
                                  "%lld", key, full, (long long)bytes, (long long)want);
    }
out:
    json_decref(hdr);
    free(buf);
    fclose(f);
    free(full);
}

/* Element index (negative from the end) of the rank-1 integer tensor key in
 * the safetensors file at full.  0 and *val on success; -1 when the file,
 * the tensor or its data is unavailable or not a rank-1 integer tensor (the
 * constraint reading it then stays deferred; check_blob reports why). */
static int blob_element(const char *full, const char *key, int64_t index, int64_t *val)
{
    FILE *f = fopen(full, "rb");
    if (!f)
        return -1;
    int rc = -1;
    char *buf = NULL;
    json_t *hdr = NULL;
    unsigned char head[8], el[8];
    if (fread(head, 1, 8, f) != 8)
        goto out;
    int64_t n = le64(head);
    if (n <= 0 || n > (int64_t)MAX_HEADER || !(buf = malloc((size_t)n)) ||
        fread(buf, 1, (size_t)n, f) != (size_t)n)
        goto out;
    hdr = json_loadb(buf, (size_t)n, 0, NULL);
    json_t *ent = json_object_get(hdr, key);
    const char *dt = json_string_value(json_object_get(ent, "dtype"));
    json_t *shape = json_object_get(ent, "shape");
    json_t *off = json_object_get(ent, "data_offsets");
    if (!dt || json_array_size(shape) != 1 || json_array_size(off) != 2)
        goto out;
    int size = !strcmp(dt, "I64") ? 8 : !strcmp(dt, "I32") ? 4 : !strcmp(dt, "I16") ? 2
             : !strcmp(dt, "I8") ? 1 : 0;
    int64_t numel = json_integer_value(json_array_get(shape, 0));
    int64_t start = json_integer_value(json_array_get(off, 0));
    if (!size || index >= numel || index < -numel)
        goto out;
    if (index < 0)
        index += numel;
    if (fseeko(f, (off_t)(8 + n + start + index * size), SEEK_SET) || fread(el, 1, (size_t)size, f) != (size_t)size)
        goto out;
    uint64_t u = 0;
    for (int i = size - 1; i >= 0; i--)
        u = (u << 8) | el[i];
    if (size < 8 && (u >> (size * 8 - 1)) & 1) /* sign-extend */
        u |= ~(uint64_t)0 << (size * 8);
    *val = (int64_t)u;
    rc = 0;
out:
    json_decref(hdr);
    free(buf);
    fclose(f);
    return rc;
}

/* Values of a data-reading constraint's t[i].item() vars, from blobs. */
typedef struct data_vals {
    const kh_expr *e;
    int64_t *vals;
} data_vals;

static int data_vals_lookup(void *ctx, const kh_expr_var *x, int64_t *val)
{
    data_vals *dv = ctx;
    for (size_t i = 0; i < kh_expr_nvars(dv->e); i++)
        if (kh_expr_var_at(dv->e, i) == x) {
            *val = dv->vals[i];
            return 0;
        }
    return -1;
}

/* Fetch every data var of e from the workload's safetensors inputs; 0 when
 * all are available. */
static int fetch_data_vars(kh_task_set *s, const kh_expr *e, json_t *inputs, int64_t *vals)
{
    for (size_t i = 0; i < kh_expr_nvars(e); i++) {
        const kh_expr_var *x = kh_expr_var_at(e, i);
        if (x->kind != KH_EXPR_DATA)
            continue;
        json_t *in = json_object_get(inputs, x->name);
        const char *type = json_string_value(json_object_get(in, "type"));
        const char *path = json_string_value(json_object_get(in, "path"));
        const char *key = json_string_value(json_object_get(in, "tensor_key"));
        if (!type || strcmp(type, "safetensors") || !path || !key || path[0] == '/' ||
            strstr(path, ".."))
            return -1;
        char *full = s->root ? task_path_join(s->root, path) : kh_strdup(path);
        int rc = full ? blob_element(full, key, x->index, &vals[i]) : -1;
        free(full);
        if (rc)
            return -1;
    }
    return 0;
}

static void check_evaluation(vctx *v, json_t *ev)
{
    if (!json_is_object(ev)) {
        VERR(v, "evaluation", "expected an Evaluation object, got %s", task_jtype(ev));
        return;
    }
    vpush(v, "evaluation");
    static const char *const known[] = {"status", "environment", "timestamp", "log",
                                        "correctness", "performance"};
    task_check_known_keys(v, ev, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                          "FlashInfer-Bench ignores it");
    const char *st = task_get_str(v, ev, "status", 1, 1);
    static const char *const statuses[] = {"PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL",
                                           "INCORRECT_DTYPE", "RUNTIME_ERROR", "COMPILE_ERROR",
                                           "TIMEOUT"};
    size_t i = 0;
    for (; st && i < KH_ARRAY_LEN(statuses) && strcmp(statuses[i], st); i++)
        ;
    if (st && i == KH_ARRAY_LEN(statuses)) {
        VERR(v, "status", "expected PASSED, INCORRECT_SHAPE, INCORRECT_NUMERICAL, INCORRECT_DTYPE, "
                          "RUNTIME_ERROR, COMPILE_ERROR or TIMEOUT, got \"%s\"", st);
        st = NULL;
    }
    json_t *env = json_object_get(ev, "environment");
    if (!env)
        VERR(v, "environment", "missing; expected an object {hardware, libs}");
    else if (!json_is_object(env))
        VERR(v, "environment", "expected an object {hardware, libs}, got %s", task_jtype(env));
    else {
        vpush(v, "environment");
        task_get_str(v, env, "hardware", 1, 1);
        json_t *libs = json_object_get(env, "libs");
        if (libs && !json_is_object(libs)) {
            VERR(v, "libs", "expected an object of library: version, got %s", task_jtype(libs));
        } else if (libs) {
            const char *lib;
            json_t *ver;
            vpush(v, "libs");
            json_object_foreach(libs, lib, ver) {
                if (!json_is_string(ver))
                    VERR(v, lib, "expected a version string, got %s", task_jtype(ver));
            }
            vpop(v);
        }
        vpop(v);
    }
    task_get_str(v, ev, "timestamp", 1, 1);
    task_get_str(v, ev, "log", 0, 0);
    json_t *corr = json_object_get(ev, "correctness");
    json_t *perf = json_object_get(ev, "performance");
    if (corr && json_is_null(corr))
        corr = NULL;
    if (perf && json_is_null(perf))
        perf = NULL;
    if (st) {
        int want_c = !strcmp(st, "PASSED") || !strcmp(st, "INCORRECT_NUMERICAL");
        int want_p = !strcmp(st, "PASSED");
        if (want_c && !corr)
            VERR(v, "correctness", "missing; status %s carries correctness", st);
        if (!want_c && corr)
            VERR(v, "correctness", "status %s carries no correctness; expected null", st);
        if (want_p && !perf)
            VERR(v, "performance", "missing; status PASSED carries performance");
        if (!want_p && perf)
            VERR(v, "performance", "status %s carries no performance; expected null", st);
    }
    if (corr) {
        if (!json_is_object(corr)) {
            VERR(v, "correctness", "expected an object, got %s", task_jtype(corr));
        } else {
            /* FlashInfer-Bench's Correctness: absent means 0.0; non-negative or NaN */
            vpush(v, "correctness");
            static const char *const ck[] = {"max_relative_error", "max_absolute_error"};
            for (size_t k = 0; k < 2; k++) {
                json_t *x = json_object_get(corr, ck[k]);
                double val;
                if (x && task_fib_float(x, &val))
                    VERR(v, ck[k], "expected a number (or \"NaN\" / \"Infinity\"), got %s",
                         task_jtype(x));
                else if (x && val < 0)
                    VERR(v, ck[k], "expected a number >= 0 or NaN, got %g", val);
            }
            json_t *extra = json_object_get(corr, "extra");
            if (extra && !json_is_null(extra) && !json_is_object(extra))
                VERR(v, "extra", "expected an object or null, got %s", task_jtype(extra));
            vpop(v);
        }
    }
    if (perf) {
        if (!json_is_object(perf)) {
            VERR(v, "performance", "expected an object, got %s", task_jtype(perf));
        } else {
            /* FlashInfer-Bench's Performance: absent means 0.0; >= 0, so
             * never NaN (khlua's eval leaves the reference figures out when
             * the reference was not timed) */
            vpush(v, "performance");
            static const char *const pk[] = {"latency_ms", "reference_latency_ms",
                                             "speedup_factor"};
            for (size_t k = 0; k < 3; k++) {
                json_t *x = json_object_get(perf, pk[k]);
                double val;
                if (x && task_fib_float(x, &val))
                    VERR(v, pk[k], "expected a number (or \"Infinity\"), got %s", task_jtype(x));
                else if (x && isnan(val))
                    VERR(v, pk[k], "expected a number >= 0, got NaN");
                else if (x && val < 0)
                    VERR(v, pk[k], "expected a number >= 0, got %g", val);
            }
            vpop(v);
        }
    }
    vpop(v);
}

/* workload.axes: a value for every var axis of d (none for a const one)
 * into w->axes; 1 when they are all there and usable. */
static int parse_axes(vctx *v, kh_task_workload *w, const kh_task_def *d, json_t *axes)
{
    if (d)
        w->axes = calloc(d->naxes + 1, sizeof *w->axes);
    int axes_ok = d && w->axes;
    if (!axes) {
        VERR(v, "axes", "missing; expected an object of var axis: integer");
        axes_ok = 0;
    } else if (!json_is_object(axes)) {
        VERR(v, "axes", "expected an object of var axis: integer, got %s", task_jtype(axes));
        axes_ok = 0;
    } else {
        const char *an;
        json_t *av;
        vpush(v, "axes");
        json_object_foreach(axes, an, av) {
            int ai = d ? kh_task_axis_index(d, an) : -1;
            if (!json_is_integer(av)) {
                VERR(v, an, "expected an integer >= 0, got %s", task_jtype(av));
                axes_ok = 0;
            } else if (json_integer_value(av) < 0) {
                VERR(v, an, "expected an integer >= 0, got %lld", (long long)json_integer_value(av));
                axes_ok = 0;
            } else if (d && ai < 0) {
                VERR(v, an, "expected a var axis of %s, got \"%s\"", d->name, an);
            } else if (d && d->axes[ai].is_const) {
                VERR(v, an, "is a const axis of %s (value %lld); expected var axes only", d->name,
                     (long long)d->axes[ai].value);
            } else if (d && w->axes) {
                w->axes[ai] = json_integer_value(av);
            }
        }
        vpop(v);
        for (size_t i = 0; d && i < d->naxes; i++) {
            if (d->axes[i].is_const) {
                if (w->axes)
                    w->axes[i] = d->axes[i].value;
            } else if (!json_object_get(axes, d->axes[i].name)) {
                VERR(v, "axes", "missing var axis '%s'; expected a value for every var axis of %s",
                     d->axes[i].name, d->name);
                axes_ok = 0;
            }
        }
    }
    return axes_ok;
}

/* workload.inputs: each a random, scalar or safetensors input of d (a
 * blob's header checked against the tensor's dtype and shape, its dims
 * against the workload's axes when they are all known: axes_ok); a warning
 * for each input not given. */
static void check_inputs(vctx *v, const kh_task_workload *w, const kh_task_def *d, json_t *inputs,
                         int axes_ok, file_state *fs)
{
    binder *bind = d ? calloc(d->naxes + 1, sizeof *bind) : NULL;
    if (bind && axes_ok)
        for (size_t i = 0; i < d->naxes; i++)
            if (!d->axes[i].is_const) {
                bind[i].set = 1;
                bind[i].value = w->axes[i];
                snprintf(bind[i].who, sizeof bind[i].who, "workload.axes");
            }
    if (!inputs) {
        VERR(v, "inputs", "missing; expected an object of input name: {type, ...}");
    } else if (!json_is_object(inputs)) {
        VERR(v, "inputs", "expected an object of input name: {type, ...}, got %s",
             task_jtype(inputs));
    } else {
        const char *in;
        json_t *iv;
        vpush(v, "inputs");
        json_object_foreach(inputs, in, iv) {
            vpush(v, in);
            const kh_task_tensor *t = d ? task_find_input(d, in) : NULL;
            if (d && !t) {
                VERR(v, NULL, "expected an input of %s, got \"%s\"", d->name, in);
                vpop(v);
                continue;
            }
            if (!json_is_object(iv)) {
                VERR(v, NULL, "expected an object {\"type\": ...}, got %s", task_jtype(iv));
                vpop(v);
                continue;
            }
            const char *type = task_get_str(v, iv, "type", 1, 1);
            if (!type) {
            } else if (!strcmp(type, "random")) {
            } else if (!strcmp(type, "scalar")) {
                json_t *val = json_object_get(iv, "value");
                if (!val)
                    VERR(v, "value", "missing; expected a number or a boolean");
                else if (!json_is_number(val) && !json_is_boolean(val))
                    VERR(v, "value", "expected a number or a boolean, got %s", task_jtype(val));
                else if (t && is_int_dtype(t->dtype) && !json_is_integer(val))
                    VERR(v, "value", "expected an integer for %s input '%s', got %s", t->dtype, in,
                         task_jtype(val));
                if (t && !t->is_scalar)
                    VERR(v, "type", "\"scalar\" given for a tensor input (rank %zu); expected "
                                    "\"random\" or \"safetensors\"", t->rank);
            } else if (!strcmp(type, "safetensors")) {
                const char *p = task_get_str(v, iv, "path", 1, 1);
                const char *key = task_get_str(v, iv, "tensor_key", 1, 1);
                if (t && t->is_scalar)
                    VERR(v, "type", "\"safetensors\" given for a scalar input; expected \"scalar\" "
                                    "or \"random\"");
                else if (p && (p[0] == '/' || strstr(p, "..")))
                    VERR(v, "path", "expected a path relative to the dataset root without '..', "
                                    "got \"%s\"", p);
                else if (p && key && t && t->valid && bind)
                    check_blob(v, d, t, p, key, bind, fs);
            } else {
                VERR(v, "type", "expected \"random\", \"scalar\" or \"safetensors\", got \"%s\"",
                     type);
            }
            vpop(v);
        }
        vpop(v);
        for (size_t i = 0; d && i < d->ninputs; i++)
            if (!json_object_get(inputs, d->inputs[i].name))
                VWARN(v, "inputs", "input '%s' not given; generated as random (FlashInfer-Bench's "
                                   "validate requires every input)", d->inputs[i].name);
    }
    free(bind);
}

/* d's constraints for a workload with every axis known (those that read
 * tensor data only when the blobs they read are present), and its
 * speed-of-light bounds. */
static void check_constraints(vctx *v, const kh_task_workload *w, const kh_task_def *d,
                              json_t *inputs)
{
    kh_task_set *s = v->s;
    for (size_t i = 0; i < d->nconstraints; i++) {
        const kh_task_constraint *c = &d->constraints[i];
        if (!c->expr)
            continue;
        int64_t r, dvals[64] = {0};
        data_vals dv = {c->expr, dvals};
        kh_err err;
        if (kh_expr_needs_data(c->expr)) {
            /* only when every tensor it reads is in a present blob */
            if (kh_expr_nvars(c->expr) > KH_ARRAY_LEN(dvals) ||
                fetch_data_vars(s, c->expr, inputs, dvals))
                continue;
            s->sum.data_checks++;
        } else {
            s->sum.constraint_checks++;
        }
        if (kh_task_eval(d, w->axes, c->expr, data_vals_lookup, &dv, &r, &err)) {
            VERR(v, "axes", "constraint '%s' of %s cannot be evaluated: %s", c->text, d->name,
                 err.msg);
        } else if (!r) {
            char vals[300] = "";
            size_t used = 0;
            for (size_t k = 0; k < kh_expr_nvars(c->expr) && used < sizeof vals; k++) {
                const kh_expr_var *x = kh_expr_var_at(c->expr, k);
                int64_t xv = 0;
                eval_ctx ec = {d, w->axes, data_vals_lookup, &dv};
                task_def_lookup(&ec, x, &xv);
                used += (size_t)snprintf(vals + used, sizeof vals - used, "%s%s = %lld",
                                         used ? ", " : "", x->text, (long long)xv);
            }
            VERR(v, "axes", "violates constraint '%s' of %s (%s)", c->text, d->name, vals);
        }
    }
    int64_t b, f;
    kh_err err;
    if (!d->errors && kh_task_speed_of_light(d, w->axes, &b, &f, &err))
        VERR(v, "axes", "speed of light: %s", err.msg);
}

kh_task_workload *task_parse_workload_line(vctx *v, json_t *rec, jl_kind kind, file_state *fs)
{
    kh_task_set *s = v->s;
    if (!json_is_object(rec)) {
        VERR(v, NULL, "expected a Trace object {definition, workload, solution, evaluation}, got %s",
             task_jtype(rec));
        return NULL;
    }
    static const char *const known[] = {"definition", "workload", "solution", "evaluation"};
    task_check_known_keys(v, rec, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                          "FlashInfer-Bench ignores it");
    kh_task_workload *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->record = json_incref(rec);
    w->file = kh_strdup(v->file);
    w->line = v->base_line;
    const char *dn = task_get_str(v, rec, "definition", 1, 1);
    if (dn) {
        w->definition = kh_strdup(dn);
        w->def = kh_task_find_def(s, dn);
        if (w->def)
            ((kh_task_def *)w->def)->used = 1; /* the set owns it; const only to users */
        if (!w->def)
            VERR(v, "definition", "expected the name of a known definition, got \"%s\" (%zu "
                                  "definitions loaded)", dn, s->ndefs);
    }
    /* FlashInfer-Bench's Trace: solution is a name or null (a trace may
     * name none), evaluation an Evaluation or null */
    json_t *sol = json_object_get(rec, "solution");
    json_t *ev = json_object_get(rec, "evaluation");
    int has_sol = sol && !json_is_null(sol), has_ev = ev && !json_is_null(ev);
    if (has_sol && !json_is_string(sol))
        VERR(v, "solution", "expected a solution name or null, got %s", task_jtype(sol));
    if (kind == JL_WORKLOADS) {
        if (has_sol || has_ev)
            VERR(v, has_sol ? "solution" : "evaluation",
                 "expected null in a workload file (FlashInfer-Bench loads every line of "
                 "workloads/ as a workload, without solution or evaluation), got %s%s",
                 task_jtype(has_sol ? sol : ev), has_sol && has_ev ? " (and an evaluation)" : "");
    } else if (kind == JL_TRACES && !has_sol && !has_ev) {
        VERR(v, "solution", "a trace names a solution or carries an evaluation, got neither; "
                            "expected a trace (a workload belongs in workloads/)");
    }
    w->is_trace = kind == JL_TRACES || (kind == JL_EITHER && (has_sol || has_ev));
    if (w->is_trace && has_ev)
        check_evaluation(v, ev);
    json_t *wl = json_object_get(rec, "workload");
    if (!wl) {
        VERR(v, "workload", "missing; expected an object {uuid, axes, inputs}");
        return w;
    }
    if (!json_is_object(wl)) {
        VERR(v, "workload", "expected an object {uuid, axes, inputs}, got %s", task_jtype(wl));
        return w;
    }
    w->json = json_incref(wl);
    vpush(v, "workload");
    static const char *const wk[] = {"uuid", "axes", "inputs"};
    task_check_known_keys(v, wl, wk, KH_ARRAY_LEN(wk), KH_TASK_WARNING,
                          "FlashInfer-Bench ignores it");
    const char *uuid = task_get_str(v, wl, "uuid", 1, 1);
    w->uuid = kh_strdup(uuid);
    const kh_task_def *d = w->def;
    int axes_ok = parse_axes(v, w, d, json_object_get(wl, "axes"));
    w->axes_ok = axes_ok;

    json_t *inputs = json_object_get(wl, "inputs");
    check_inputs(v, w, d, inputs, axes_ok, fs);

    if (axes_ok)
        check_constraints(v, w, d, inputs);
    vpop(v);
    return w;
}
