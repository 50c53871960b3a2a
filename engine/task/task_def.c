/* task_def.c: FlashInfer-Bench Definitions (and khlua's "khlua" additions):
 * dtypes, axes, tensors, constraints, the evaluator, speed-of-light bounds;
 * evaluating an expression against a definition and a workload's axes
 * (kh_task_eval).  The expression language itself is expr.c's. */
#include "task/task_int.h"

#include "eval/check.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- dtypes ----------------------------------------------------------------- */
static const struct {
    const char *name, *st; /* FlashInfer-Bench name, safetensors name */
    int bits;
} dtypes[] = {
    {"float32", "F32", 32},       {"float16", "F16", 16},      {"bfloat16", "BF16", 16},
    {"float8_e4m3fn", "F8_E4M3", 8}, {"float8_e5m2", "F8_E5M2", 8}, {"float4_e2m1", "F4", 4},
    {"int64", "I64", 64},         {"int32", "I32", 32},        {"int16", "I16", 16},
    {"int8", "I8", 8},            {"bool", "BOOL", 8},
};
int kh_task_dtype_bits(const char *dtype)
{
    for (size_t i = 0; dtype && i < KH_ARRAY_LEN(dtypes); i++)
        if (!strcmp(dtypes[i].name, dtype))
            return dtypes[i].bits;
    return 0;
}

const char *task_dtype_st_name(const char *dtype)
{
    for (size_t i = 0; i < KH_ARRAY_LEN(dtypes); i++)
        if (!strcmp(dtypes[i].name, dtype))
            return dtypes[i].st;
    return "?";
}

/* ---- definitions ------------------------------------------------------------- */
static void tensor_free(kh_task_tensor *t)
{
    free(t->name);
    free(t->dtype);
    free(t->dims);
}

void task_def_free(kh_task_def *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->naxes; i++)
        free(d->axes[i].name);
    for (size_t i = 0; i < d->ninputs; i++)
        tensor_free(&d->inputs[i]);
    for (size_t i = 0; i < d->noutputs; i++)
        tensor_free(&d->outputs[i]);
    for (size_t i = 0; i < d->nconstraints; i++) {
        free(d->constraints[i].text);
        kh_expr_free(d->constraints[i].expr);
    }
    free(d->axes);
    free(d->inputs);
    free(d->outputs);
    free(d->constraints);
    free(d->name);
    free(d->op_type);
    free(d->file);
    free(d->reference);
    free(d->baseline);
    free(d->evaluator);
    kh_expr_free(d->sol_bytes);
    kh_expr_free(d->sol_flops);
    json_decref(d->json);
    free(d);
}

int kh_task_axis_index(const kh_task_def *d, const char *name)
{
    for (size_t i = 0; i < d->naxes; i++)
        if (!strcmp(d->axes[i].name, name))
            return (int)i;
    return -1;
}

const kh_task_tensor *task_find_tensor(const kh_task_def *d, const char *name, int *is_output)
{
    for (size_t i = 0; i < d->ninputs; i++)
        if (!strcmp(d->inputs[i].name, name)) {
            if (is_output)
                *is_output = 0;
            return &d->inputs[i];
        }
    for (size_t i = 0; i < d->noutputs; i++)
        if (!strcmp(d->outputs[i].name, name)) {
            if (is_output)
                *is_output = 1;
            return &d->outputs[i];
        }
    return NULL;
}

const kh_task_tensor *task_find_input(const kh_task_def *d, const char *name)
{
    for (size_t i = 0; i < d->ninputs; i++)
        if (!strcmp(d->inputs[i].name, name))
            return &d->inputs[i];
    return NULL;
}

/* Check that every name of e means something in d; report under leaf.
 * Returns 0 when all resolve. */
int task_check_expr_names(vctx *v, const kh_task_def *d, const kh_expr *e, int allow_data,
                          const char *leaf)
{
    int bad = 0;
    for (size_t i = 0; i < kh_expr_nvars(e); i++) {
        const kh_expr_var *x = kh_expr_var_at(e, i);
        if (x->kind == KH_EXPR_AXIS) {
            if (kh_task_axis_index(d, x->name) < 0) {
                VERR(v, leaf, "'%s': column %d: '%s' is not an axis of %s; expected one of its axes",
                     kh_expr_text(e), x->column, x->name, d->name ? d->name : "the definition");
                bad = 1;
            }
            continue;
        }
        const kh_task_tensor *t = task_find_tensor(d, x->name, NULL);
        if (!t) {
            VERR(v, leaf, "'%s': column %d: '%s' is not an input or output; expected a tensor name",
                 kh_expr_text(e), x->column, x->name);
            bad = 1;
        } else if (!t->valid) {
            bad = 1; /* its own problem is already reported */
        } else if (x->kind == KH_EXPR_SHAPE &&
                   (t->is_scalar || x->index >= (int64_t)t->rank || x->index < -(int64_t)t->rank)) {
            VERR(v, leaf, "'%s': column %d: %s has rank %zu; expected an index in [-%zu, %zu)",
                 kh_expr_text(e), x->column, x->name, t->rank, t->rank, t->rank);
            bad = 1;
        } else if (x->kind == KH_EXPR_DATA && !allow_data) {
            VERR(v, leaf, "'%s': column %d: '%s' reads tensor data; expected axes and shapes only",
                 kh_expr_text(e), x->column, x->text);
            bad = 1;
        }
    }
    return bad;
}

kh_expr *task_parse_expr_field(vctx *v, json_t *j, const char *leaf)
{
    char buf[32];
    const char *text;
    if (json_is_integer(j)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(j));
        text = buf;
    } else if (json_is_string(j)) {
        text = json_string_value(j);
    } else {
        VERR(v, leaf, "expected an integer expression (a string or an integer), got %s",
             task_jtype(j));
        return NULL;
    }
    kh_expr *e;
    kh_err err;
    if (kh_expr_parse(text, &e, &err)) {
        VERR(v, leaf, "'%s': %s", text, err.msg);
        return NULL;
    }
    return e;
}

static int parse_tensors(vctx *v, kh_task_def *d, json_t *root, const char *key,
                         kh_task_tensor **out, size_t *nout)
{
    json_t *obj = json_object_get(root, key);
    if (!obj) {
        VERR(v, key, "missing; expected an object of name: {shape, dtype}");
        return -1;
    }
    if (!json_is_object(obj)) {
        VERR(v, key, "expected an object of name: {shape, dtype}, got %s", task_jtype(obj));
        return -1;
    }
    if (!strcmp(key, "outputs") && json_object_size(obj) == 0)
        VERR(v, key, "expected at least one output, got an empty object");
    *out = calloc(json_object_size(obj) + 1, sizeof **out);
    if (!*out)
        return -1;
    const char *name;
    json_t *t;
    vpush(v, key);
    json_object_foreach(obj, name, t) {
        if (!*name) {
            VERR(v, NULL, "expected non-empty %s names, got \"\"",
                 strcmp(key, "outputs") ? "input" : "output");
            continue;
        }
        vpush(v, name);
        kh_task_tensor *ts = &(*out)[*nout];
        if (!json_is_object(t)) {
            VERR(v, NULL, "expected an object {shape, dtype}, got %s", task_jtype(t));
            vpop(v);
            continue;
        }
        static const char *const known[] = {"shape", "dtype", "description", "optional"};
        task_check_known_keys(v, t, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                              "FlashInfer-Bench ignores it");
        task_get_opt_str(v, t, "description");
        if (!strcmp(key, "outputs") && json_object_get(json_object_get(root, "inputs"), name))
            VERR(v, NULL, "'%s' is also an input; expected distinct input and output names", name);
        int ok = 1;
        json_t *shape = json_object_get(t, "shape");
        const char *dtype = task_get_str(v, t, "dtype", 1, 1);
        if (dtype && !kh_task_dtype_bits(dtype)) {
            VERR(v, "dtype", "expected one of %s, got \"%s\"", DTYPE_LIST, dtype);
            ok = 0;
        }
        if (!dtype)
            ok = 0;
        if (!shape) {
            VERR(v, "shape", "missing; expected an array of axis names, or null for a scalar");
            ok = 0;
        } else if (json_is_null(shape)) {
            ts->is_scalar = 1;
        } else if (!json_is_array(shape)) {
            VERR(v, "shape", "expected an array of axis names, or null for a scalar, got %s",
                 task_jtype(shape));
            ok = 0;
        } else {
            ts->rank = json_array_size(shape);
            ts->dims = calloc(ts->rank + 1, sizeof *ts->dims);
            if (!ts->dims)
                ok = 0;
            size_t i;
            json_t *a;
            vpush(v, "shape");
            json_array_foreach(shape, i, a) {
                vpush_i(v, (long)i);
                int ax = json_is_string(a) ? kh_task_axis_index(d, json_string_value(a)) : -1;
                if (!json_is_string(a)) {
                    VERR(v, NULL, "expected an axis name, got %s", task_jtype(a));
                    ok = 0;
                } else if (ax < 0) {
                    VERR(v, NULL, "expected an axis name defined in axes, got \"%s\"",
                         json_string_value(a));
                    ok = 0;
                } else if (ts->dims) {
                    ts->dims[i] = (size_t)ax;
                }
                vpop(v);
            }
            vpop(v);
        }
        /* a broken tensor is kept (invalid) so that workloads and manifests
         * naming it do not cascade into "unknown input" errors */
        ts->name = kh_strdup(name);
        ts->dtype = kh_strdup(dtype ? dtype : "?");
        ts->dtype_bits = dtype ? kh_task_dtype_bits(dtype) : 0;
        ts->valid = ok && ts->name && ts->dtype;
        if (!ts->valid) {
            free(ts->dims);
            ts->dims = NULL;
            ts->rank = 0;
        }
        (*nout)++;
        vpop(v);
    }
    vpop(v);
    return 0;
}

/* What the sampling evaluator needs of a definition (eval.c refuses the
 * rest): said at load time, as warnings, so `khlua task check` tells. */
static void check_sampling_def(vctx *v, const kh_task_def *d)
{
    const kh_task_tensor *p = task_find_input(d, "probs");
    kh_sampling_method m = kh_check_sampling_method(d->name);
    if (!p || p->is_scalar || p->rank != 2 || strcmp(p->dtype, "float32")) {
        VWARN(v, "inputs", "the sampling evaluator needs an input 'probs', float32 "
              "[batch_size, vocab_size]: kh.eval will refuse this definition");
        return;
    }
    if (d->noutputs < 1 || d->outputs[0].is_scalar || d->outputs[0].rank != 1 ||
        d->outputs[0].dims[0] != p->dims[0] ||
        (strcmp(d->outputs[0].dtype, "int32") && strcmp(d->outputs[0].dtype, "int64")))
        VWARN(v, "outputs", "the sampling evaluator needs a first output of samples, int32 or "
              "int64 [batch_size] (the first axis of probs): kh.eval will refuse this definition");
    if ((m == KH_SAMPLING_TOP_K || m == KH_SAMPLING_TOP_K_TOP_P) && !task_find_input(d, "top_k"))
        VWARN(v, "inputs", "the name asks for top-k sampling (FlashInfer-Bench's thresholding) "
              "but there is no input 'top_k': kh.eval will refuse this definition");
    if ((m == KH_SAMPLING_TOP_P || m == KH_SAMPLING_TOP_K_TOP_P) && !task_find_input(d, "top_p"))
        VWARN(v, "inputs", "the name asks for top-p sampling (FlashInfer-Bench's thresholding) "
              "but there is no input 'top_p': kh.eval will refuse this definition");
    for (size_t i = 0; i < d->ninputs; i++)
        if (!d->inputs[i].is_scalar && d->inputs[i].dims[0] != p->dims[0])
            VWARN(v, "inputs", "input '%s' does not start with the batch axis: the sampling "
                  "evaluator's TVD test repeats every tensor input along it, and kh.eval will "
                  "refuse this definition", d->inputs[i].name);
}

static const char *default_evaluator(const char *name, const char *op_type)
{
    /* FlashInfer-Bench's evaluators/registry.py matching rules */
    if (name && strstr(name, "moe_fp8_block_scale"))
        return "lowbit";
    if (name && (!strcmp(name, "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps1") ||
                 !strcmp(name, "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64")))
        return "dsa_sparse_attention";
    if (name && !strncmp(name, "dsa_topk_indexer", 16))
        return "dsa_topk_indexer";
    if (op_type && !strcmp(op_type, "sampling"))
        return "sampling";
    return "default";
}

static void parse_def_khlua(vctx *v, kh_task_def *d, json_t *k)
{
    if (!json_is_object(k)) {
        VERR(v, "khlua", "expected an object, got %s", task_jtype(k));
        return;
    }
    vpush(v, "khlua");
    static const char *const known[] = {"reference", "baseline", "tolerance", "evaluator",
                                        "speed_of_light"};
    task_check_known_keys(v, k, known, KH_ARRAY_LEN(known), KH_TASK_ERROR,
                          "expected reference, baseline, tolerance, evaluator or speed_of_light");
    const char *s;
    if ((s = task_get_str(v, k, "reference", 0, 1)))
        d->reference = kh_strdup(s);
    if ((s = task_get_str(v, k, "baseline", 0, 1)))
        d->baseline = kh_strdup(s);
    if ((s = task_get_str(v, k, "evaluator", 0, 1))) {
        static const char *const ev[] = {"default", "lowbit", "dsa_sparse_attention",
                                         "dsa_topk_indexer", "sampling"};
        size_t i;
        for (i = 0; i < KH_ARRAY_LEN(ev) && strcmp(ev[i], s); i++)
            ;
        if (i == KH_ARRAY_LEN(ev))
            VERR(v, "evaluator",
                 "expected default, lowbit, dsa_sparse_attention, dsa_topk_indexer or sampling, "
                 "got \"%s\"", s);
        else {
            free(d->evaluator);
            d->evaluator = kh_strdup(s);
        }
    }
    json_t *tol = json_object_get(k, "tolerance");
    if (tol && !json_is_object(tol)) {
        VERR(v, "tolerance", "expected an object {atol, rtol, required_matched_ratio}, got %s",
             task_jtype(tol));
    } else if (tol) {
        vpush(v, "tolerance");
        static const char *const tk[] = {"atol", "rtol", "required_matched_ratio",
                                         "sampling_validation_trials", "sampling_tvd_threshold"};
        task_check_known_keys(v, tol, tk, KH_ARRAY_LEN(tk), KH_TASK_ERROR,
                              "expected atol, rtol, required_matched_ratio, "
                              "sampling_validation_trials or sampling_tvd_threshold");
        json_t *st = json_object_get(tol, "sampling_validation_trials");
        if (st && (!json_is_integer(st) || json_integer_value(st) < 1 ||
                   json_integer_value(st) > KH_TASK_MAX_SAMPLING_TRIALS))
            VERR(v, "sampling_validation_trials", "expected an integer from 1 to %d",
                 KH_TASK_MAX_SAMPLING_TRIALS);
        else if (st)
            d->sampling_validation_trials = (int)json_integer_value(st);
        json_t *tv = json_object_get(tol, "sampling_tvd_threshold");
        if (tv && (!json_is_number(tv) || json_number_value(tv) < 0 || json_number_value(tv) > 1))
            VERR(v, "sampling_tvd_threshold", "expected a number in [0, 1]");
        else if (tv)
            d->sampling_tvd_threshold = json_number_value(tv);
        double *dst[] = {&d->atol, &d->rtol, &d->required_matched_ratio};
        for (size_t i = 0; i < 3; i++) {
            json_t *x = json_object_get(tol, tk[i]);
            if (!x)
                continue;
            double val = json_number_value(x);
            if (!json_is_number(x))
                VERR(v, tk[i], "expected a number, got %s", task_jtype(x));
            else if (val < 0 || (i == 2 && val > 1))
                VERR(v, tk[i], "expected a number %s, got %g", i == 2 ? "in [0, 1]" : ">= 0", val);
            else
                *dst[i] = val;
        }
        vpop(v);
    }
    json_t *sol = json_object_get(k, "speed_of_light");
    if (sol && !json_is_object(sol)) {
        VERR(v, "speed_of_light", "expected an object {bytes, flops} of expressions, got %s",
             task_jtype(sol));
    } else if (sol) {
        vpush(v, "speed_of_light");
        static const char *const sk[] = {"bytes", "flops"};
        task_check_known_keys(v, sol, sk, KH_ARRAY_LEN(sk), KH_TASK_ERROR,
                              "expected bytes or flops");
        kh_expr **dst[] = {&d->sol_bytes, &d->sol_flops};
        for (size_t i = 0; i < 2; i++) {
            json_t *x = json_object_get(sol, sk[i]);
            if (!x)
                continue;
            kh_expr *e = task_parse_expr_field(v, x, sk[i]);
            if (e && task_check_expr_names(v, d, e, 0, sk[i])) {
                kh_expr_free(e);
                e = NULL;
            }
            *dst[i] = e;
        }
        vpop(v);
    }
    vpop(v);
}

/* A line starting `def run(` in the reference source: what a load looks
 * for; a check asks Python's ast, as FlashInfer-Bench does (task_check_python). */
int task_has_run(const char *src)
{
    for (const char *p = src; p; p = strchr(p, '\n')) {
        if (*p == '\n')
            p++;
        if (!strncmp(p, "def run(", 8) || !strncmp(p, "def run (", 9))
            return 1;
    }
    return 0;
}

kh_task_def *task_parse_definition(vctx *v, json_t *root)
{
    if (!json_is_object(root)) {
        VERR(v, NULL, "expected a Definition object, got %s", task_jtype(root));
        return NULL;
    }
    kh_task_def *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->json = json_incref(root);
    d->file = kh_strdup(v->file);
    d->line = v->base_line;
    d->atol = 1e-2;
    d->rtol = 1e-2;
    d->required_matched_ratio = 1.0;
    d->sampling_validation_trials = 100;
    d->sampling_tvd_threshold = 0.2;
    static const char *const known[] = {"name", "op_type", "description", "tags", "axes",
                                        "inputs", "outputs", "reference", "constraints", "khlua"};
    task_check_known_keys(v, root, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                          "FlashInfer-Bench ignores it (khlua's additions go under \"khlua\")");
    const char *s;
    if ((s = task_get_str(v, root, "name", 1, 1)))
        d->name = kh_strdup(s);
    if ((s = task_get_str(v, root, "op_type", 1, 1)))
        d->op_type = kh_strdup(s);
    task_get_opt_str(v, root, "description");
    task_check_str_array(v, root, "tags", 0, 1);
    const char *ref = task_get_str(v, root, "reference", 1, 1);
    if (ref && !v->s->opts.python && !task_has_run(ref)) /* else task_check_python decides */
        VERR(v, "reference", "expected Python source with a top-level 'def run(...)'");

    json_t *axes = json_object_get(root, "axes");
    if (!axes) {
        VERR(v, "axes", "missing; expected an object of axis name: {type, value}");
    } else if (!json_is_object(axes)) {
        VERR(v, "axes", "expected an object of axis name: {type, value}, got %s", task_jtype(axes));
    } else if ((d->axes = calloc(json_object_size(axes) + 1, sizeof *d->axes))) {
        const char *name;
        json_t *a;
        vpush(v, "axes");
        json_object_foreach(axes, name, a) {
            if (!*name) {
                VERR(v, NULL, "expected non-empty axis names, got \"\"");
                continue;
            }
            vpush(v, name);
            if (!task_is_ident(name))
                VWARN(v, NULL, "not an identifier; expressions cannot name this axis");
            const char *type = NULL;
            json_t *tj = json_object_get(a, "type"), *tv = json_object_get(a, "value");
            if (json_is_object(a) && !tj) {
                /* FlashInfer-Bench's save_json_file leaves the default "type"
                 * out (exclude_unset); its union then reads an axis whose
                 * value is an integer >= 0 as const, any other as var */
                type = json_is_integer(tv) && json_integer_value(tv) >= 0 ? "const" : "var";
                if (tv && !strcmp(type, "var"))
                    VWARN(v, "value", "no \"type\" and not an integer >= 0: FlashInfer-Bench reads "
                          "this axis as var, its value ignored; expected an integer >= 0 (const) "
                          "or no value (var)");
            } else if (json_is_object(a)) {
                type = task_get_str(v, a, "type", 1, 1);
            }
            if (!json_is_object(a)) {
                VERR(v, NULL, "expected an object {\"type\": \"const\"|\"var\"}, got %s",
                     task_jtype(a));
            } else if (type && strcmp(type, "const") && strcmp(type, "var")) {
                VERR(v, "type", "expected \"const\" or \"var\", got \"%s\"", type);
            } else if (type) {
                json_t *val = json_object_get(a, "value");
                int is_const = !strcmp(type, "const");
                int ok = 1;
                if (is_const && !val) {
                    VERR(v, "value", "missing; expected an integer >= 0 for a const axis");
                    ok = 0;
                } else if (is_const && (!json_is_integer(val) || json_integer_value(val) < 0)) {
                    if (json_is_integer(val))
                        VERR(v, "value", "expected an integer >= 0, got %lld",
                             (long long)json_integer_value(val));
                    else
                        VERR(v, "value", "expected an integer >= 0, got %s", task_jtype(val));
                    ok = 0;
                }
                task_get_opt_str(v, a, "description");
                if (ok) {
                    kh_task_axis *ax = &d->axes[d->naxes++];
                    ax->name = kh_strdup(name);
                    ax->is_const = is_const;
                    ax->value = is_const ? (int64_t)json_integer_value(val) : 0;
                }
            }
            vpop(v);
        }
        vpop(v);
    }
    parse_tensors(v, d, root, "inputs", &d->inputs, &d->ninputs);
    parse_tensors(v, d, root, "outputs", &d->outputs, &d->noutputs);

    json_t *cons = json_object_get(root, "constraints");
    if (cons && !json_is_array(cons)) {
        VERR(v, "constraints", "expected an array of expression strings, got %s", task_jtype(cons));
    } else if (cons && (d->constraints = calloc(json_array_size(cons) + 1, sizeof *d->constraints))) {
        size_t i;
        json_t *c;
        vpush(v, "constraints");
        json_array_foreach(cons, i, c) {
            vpush_i(v, (long)i);
            if (!json_is_string(c)) {
                VERR(v, NULL, "expected an expression string, got %s", task_jtype(c));
                vpop(v);
                continue;
            }
            kh_task_constraint *k = &d->constraints[d->nconstraints++];
            k->text = kh_strdup(json_string_value(c));
            kh_err err;
            if (kh_expr_parse(k->text, &k->expr, &err)) {
                VERR(v, NULL, "'%s': %s", k->text, err.msg);
            } else if (task_check_expr_names(v, d, k->expr, 1, NULL)) {
                kh_expr_free(k->expr);
                k->expr = NULL;
            } else if (!kh_expr_is_predicate(k->expr)) {
                VWARN(v, NULL, "'%s' is not a comparison; expected a condition (nonzero = true)",
                      k->text);
            }
            vpop(v);
        }
        vpop(v);
    }
    d->evaluator = kh_strdup(default_evaluator(d->name, d->op_type));
    if (!strcmp(d->evaluator, "lowbit"))
        d->required_matched_ratio = 0.95;
    json_t *k = json_object_get(root, "khlua");
    if (k)
        parse_def_khlua(v, d, k);
    if (d->evaluator && !strcmp(d->evaluator, "sampling"))
        check_sampling_def(v, d);
    if (!d->file || !d->evaluator) {
        task_def_free(d);
        return NULL;
    }
    return d;
}

/* ---- evaluation against a definition --------------------------------------------- */
int task_def_lookup(void *vctx_, const kh_expr_var *x, int64_t *val)
{
    eval_ctx *c = vctx_;
    if (x->kind == KH_EXPR_AXIS) {
        int i = kh_task_axis_index(c->d, x->name);
        if (i < 0)
            return -1;
        *val = c->axes[i];
        return 0;
    }
    if (x->kind == KH_EXPR_DATA)
        return c->data_lookup ? c->data_lookup(c->data_ctx, x, val) : -1;
    const kh_task_tensor *t = task_find_tensor(c->d, x->name, NULL);
    if (!t || t->is_scalar || !t->valid)
        return -1;
    int64_t idx = x->index < 0 ? x->index + (int64_t)t->rank : x->index;
    if (idx < 0 || idx >= (int64_t)t->rank)
        return -1;
    *val = c->axes[t->dims[idx]];
    return 0;
}

kh_status kh_task_eval(const kh_task_def *d, const int64_t *axes, const kh_expr *e,
                       kh_expr_lookup_fn data_lookup, void *data_ctx, int64_t *out, kh_err *err)
{
    if (kh_expr_needs_data(e) && !data_lookup) {
        for (size_t i = 0; i < kh_expr_nvars(e); i++)
            if (kh_expr_var_at(e, i)->kind == KH_EXPR_DATA)
                return kh_err_set(err, KH_EUNSUPPORTED, "'%s' reads tensor data (%s)",
                                  kh_expr_text(e), kh_expr_var_at(e, i)->text);
    }
    eval_ctx c = {d, axes, data_lookup, data_ctx};
    return kh_expr_eval_lookup(e, task_def_lookup, &c, out, err);
}

static kh_status tensor_bytes(const kh_task_tensor *t, const int64_t *axes, int64_t *out,
                              kh_err *err)
{
    int64_t bits = t->dtype_bits;
    for (size_t k = 0; k < t->rank; k++)
        if (__builtin_mul_overflow(bits, axes[t->dims[k]], &bits))
            return kh_err_set(err, KH_EINVAL, "size of %s overflows 64 bits", t->name);
    *out = bits / 8 + (bits % 8 != 0);
    return KH_OK;
}

kh_status kh_task_io_bytes(const kh_task_def *d, const int64_t *axes, int64_t *bytes, kh_err *err)
{
    int64_t sum = 0, b = 0;
    kh_status st;
    for (size_t i = 0; i < d->ninputs + d->noutputs; i++) {
        const kh_task_tensor *t = i < d->ninputs ? &d->inputs[i] : &d->outputs[i - d->ninputs];
        if (!t->valid)
            return kh_err_set(err, KH_EINVAL, "tensor %s of %s is malformed", t->name, d->name);
        if ((st = tensor_bytes(t, axes, &b, err)))
            return st;
        if (__builtin_add_overflow(sum, b, &sum))
            return kh_err_set(err, KH_EINVAL, "total tensor size overflows 64 bits");
    }
    *bytes = sum;
    return KH_OK;
}

kh_status kh_task_speed_of_light(const kh_task_def *d, const int64_t *axes, int64_t *bytes,
                                 int64_t *flops, kh_err *err)
{
    kh_status st;
    *flops = -1;
    if (d->sol_bytes) {
        if ((st = kh_task_eval(d, axes, d->sol_bytes, NULL, NULL, bytes, err)))
            return kh_err_prefix(err, "khlua.speed_of_light.bytes");
    } else if ((st = kh_task_io_bytes(d, axes, bytes, err))) {
        return st;
    }
    if (d->sol_flops && (st = kh_task_eval(d, axes, d->sol_flops, NULL, NULL, flops, err)))
        return kh_err_prefix(err, "khlua.speed_of_light.flops");
    return KH_OK;
}

const kh_task_def *kh_task_find_def(const kh_task_set *s, const char *name)
{
    for (size_t i = 0; name && i < s->ndefs; i++)
        if (s->defs[i]->name && !strcmp(s->defs[i]->name, name))
            return s->defs[i];
    return s->borrow ? kh_task_find_def(s->borrow, name) : NULL;
}
