/* host_req.c: the host role's `evaluate` request (docs/evaluation.md) read
 * into a req (host_int.h): the shared object, the tensors and how their
 * inputs are generated, the entry point's arguments, the trials, the checks
 * and the timing options.  Nothing runs here: the run is role_host.c's. */
#include "worker/host_int.h"
#include "worker/worker.h"

#include <stdio.h>
#include <string.h>

static int tensor_index(const req *r, const char *name)
{
    for (size_t i = 0; name && i < r->nt; i++)
        if (!strcmp(r->t[i].name, name))
            return (int)i;
    return -1;
}

static kh_status parse_tensor(req *r, const json_t *j, size_t i, kh_err *err)
{
    tspec *t = &r->t[i];
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *role = json_string_value(json_object_get(j, "role"));
    if (!name || strlen(name) >= sizeof t->name)
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].name: expected a string", i);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (role && !strcmp(role, "input"))
        t->role = T_INPUT;
    else if (role && !strcmp(role, "output"))
        t->role = T_OUTPUT;
    else if (role && !strcmp(role, "workspace"))
        t->role = T_WORKSPACE;
    else
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].role: expected input, output or workspace",
                          i);
    if (t->role == T_WORKSPACE) {
        json_t *b = json_object_get(j, "bytes");
        if (!json_is_integer(b) || json_integer_value(b) < 0)
            return kh_err_set(err, KH_EINVAL, "tensors[%zu].bytes: expected a size", i);
        t->nbytes = (size_t)json_integer_value(b);
        t->zero = json_is_true(json_object_get(j, "zero"));
        t->dtype = KH_DTYPE_I8;
        t->numel = t->nbytes;
        return KH_OK;
    }
    kh_status st = kh_dtype_parse(json_string_value(json_object_get(j, "dtype")) ?
                                      json_string_value(json_object_get(j, "dtype")) : "?",
                                  &t->dtype, err);
    if (st)
        return st;
    json_t *shape = json_object_get(j, "shape");
    if (!json_is_array(shape) || json_array_size(shape) > KH_TENSOR_MAX_DIMS)
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].shape: expected an array", i);
    t->ndim = (int)json_array_size(shape);
    for (int d = 0; d < t->ndim; d++)
        t->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
    if ((st = kh_tensor_shape_check(t->dtype, t->ndim, t->shape, &t->numel, &t->nbytes, err)))
        return st;
    if (t->role == T_OUTPUT)
        return KH_OK;
    json_t *gen = json_object_get(j, "gen");
    const char *kind = json_string_value(json_object_get(gen, "kind"));
    if (!kind)
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].gen.kind: required for an input", i);
    t->stream = (uint32_t)json_integer_value(json_object_get(gen, "stream"));
    if (!strcmp(kind, "random"))
        t->gen = G_RANDOM;
    else if (!strcmp(kind, "dsa_kcache"))
        t->gen = G_DSA_KCACHE;
    else if (!strcmp(kind, "scalar")) {
        t->gen = G_SCALAR;
        t->value = json_number_value(json_object_get(gen, "value"));
        if (t->numel != 1)
            return kh_err_set(err, KH_EINVAL, "tensors[%zu]: a scalar must have one element", i);
    } else if (!strcmp(kind, "bytes")) {
        t->gen = G_BYTES;
        char what[160];
        snprintf(what, sizeof what, "tensors[%zu] '%s'", i, name);
        if ((st = kh_worker_gen_bytes(gen, r->payload_len, t->nbytes, &t->bytes_off,
                                      &t->bytes_len, what, err)))
            return st;
    } else
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].gen.kind: unknown '%s'", i, kind);
    return KH_OK;
}

static kh_status parse_arg(req *r, const json_t *j, size_t i, kh_err *err)
{
    harg *a = &r->a[i];
    static const struct { const char *k; int kind; } vals[] = {
        {"i32", A_I32}, {"i64", A_I64}, {"u32", A_U32}, {"u64", A_U64}, {"f32", A_F32}, {"f64", A_F64}};
    const char *tn = json_string_value(json_object_get(j, "tensor"));
    const char *sn = json_string_value(json_object_get(j, "scalar"));
    if (tn || sn) {
        a->kind = tn ? A_PTR : A_SCALAR;
        a->tensor = tensor_index(r, tn ? tn : sn);
        if (a->tensor < 0)
            return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: no tensor '%s'", i, tn ? tn : sn);
        if (sn) {
            const tspec *t = &r->t[a->tensor];
            if (t->role != T_INPUT || t->numel != 1)
                return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: '%s' is not a scalar input",
                                  i, sn);
            if (t->dtype != KH_DTYPE_F32 && t->dtype != KH_DTYPE_I32 &&
                t->dtype != KH_DTYPE_I64 && t->dtype != KH_DTYPE_BOOL)
                return kh_err_set(err, KH_EUNSUPPORTED,
                                  "entry.args[%zu]: a %s scalar cannot be passed by value to a "
                                  "host function (float32, int32, int64, bool can)",
                                  i, kh_dtype_name(t->dtype));
        }
        return KH_OK;
    }
    for (size_t k = 0; k < KH_ARRAY_LEN(vals); k++) {
        json_t *v = json_object_get(j, vals[k].k);
        if (!v)
            continue;
        a->kind = vals[k].kind;
        if (a->kind == A_F32 || a->kind == A_F64) {
            if (!json_is_number(v))
                return kh_err_set(err, KH_EINVAL, "entry.args[%zu].%s: expected a number", i,
                                  vals[k].k);
            a->f = json_number_value(v);
        } else {
            if (!json_is_integer(v))
                return kh_err_set(err, KH_EINVAL, "entry.args[%zu].%s: expected an integer", i,
                                  vals[k].k);
            a->i = json_integer_value(v);
        }
        return KH_OK;
    }
    return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: expected tensor, scalar, i32, i64, u32, "
                      "u64, f32 or f64", i);
}

kh_status kh_host_parse_req(const json_t *p, const unsigned char *payload, size_t n, req *r,
                            kh_err *err)
{
    memset(r, 0, sizeof *r);
    r->payload = payload;
    r->payload_len = n;
    kh_status st;
    if (json_object_get(p, "launches"))
        return kh_err_set(err, KH_EINVAL,
                          "evaluate: 'launches' are for the gpu role; the host role takes 'entry'");
    json_t *art = json_object_get(p, "artifact");
    const char *kind = json_string_value(json_object_get(art, "kind"));
    if (!kind || strcmp(kind, "so"))
        return kh_err_set(err, KH_EINVAL, "evaluate: artifact.kind must be \"so\" on the host role");
    size_t off, len;
    if ((st = kh_worker_slice(json_object_get(art, "payload"), n, &off, &len, "artifact.payload",
                              err)))
        return st;
    r->so = payload + off;
    r->so_len = len;
    json_t *ts = json_object_get(p, "tensors");
    if (!json_is_array(ts) || json_array_size(ts) > MAX_TENSORS)
        return kh_err_set(err, KH_EINVAL, "evaluate: tensors: expected an array of at most %d",
                          MAX_TENSORS);
    r->nt = json_array_size(ts);
    for (size_t i = 0; i < r->nt; i++)
        if ((st = parse_tensor(r, json_array_get(ts, i), i, err)))
            return st;
    json_t *entry = json_object_get(p, "entry");
    r->symbol = json_string_value(json_object_get(entry, "symbol"));
    json_t *args = json_object_get(entry, "args");
    if (!r->symbol || !json_is_array(args) || json_array_size(args) > MAX_ARGS)
        return kh_err_set(err, KH_EINVAL, "evaluate: entry: expected {symbol, args}");
    if (strlen(r->symbol) >= sizeof ((kh_jail_ctl *)0)->symbol)
        return kh_err_set(err, KH_EINVAL, "evaluate: entry.symbol: longer than %zu bytes",
                          sizeof ((kh_jail_ctl *)0)->symbol - 1);
    r->na = json_array_size(args);
    int ni = 0, nf = 0;
    for (size_t i = 0; i < r->na; i++) {
        if ((st = parse_arg(r, json_array_get(args, i), i, err)))
            return st;
        int fp = r->a[i].kind == A_F32 || r->a[i].kind == A_F64 ||
                 (r->a[i].kind == A_SCALAR && r->t[r->a[i].tensor].dtype == KH_DTYPE_F32);
        fp ? nf++ : ni++;
    }
    if (ni > 6 || nf > 8)
        return kh_err_set(err, KH_EUNSUPPORTED,
                          "evaluate: the host entry takes %d integer/pointer and %d floating "
                          "arguments; at most 6 and 8 are supported (the registers of the C "
                          "calling convention)", ni, nf);
    json_t *trials = json_object_get(p, "trials");
    r->ntrials = json_array_size(trials);
    if (r->ntrials < 1 || r->ntrials > KH_ARRAY_LEN(r->seeds))
        return kh_err_set(err, KH_EINVAL, "evaluate: trials: expected 1 to %zu entries",
                          KH_ARRAY_LEN(r->seeds));
    for (size_t i = 0; i < r->ntrials; i++)
        r->seeds[i] = (uint64_t)json_integer_value(json_object_get(json_array_get(trials, i), "seed"));
    json_t *c = json_object_get(p, "checks");
    r->poison = json_is_true(json_object_get(c, "poison"));
    r->inputs_unchanged = json_is_true(json_object_get(c, "inputs_unchanged"));
    r->guards = json_is_true(json_object_get(c, "guards"));
    r->deterministic = json_is_true(json_object_get(c, "deterministic"));
    r->reload = json_is_true(json_object_get(c, "reload_before_timing"));
    r->deadline_s = json_number_value(json_object_get(p, "deadline_s"));
    r->trusted = json_is_true(json_object_get(p, "trusted"));
    json_t *tm = json_object_get(p, "timing");
    if (json_is_object(tm)) {
        r->timing = 1;
        kh_protocol proto = KH_PROTO_OFFICIAL;
        const char *ps = json_string_value(json_object_get(tm, "protocol"));
        if (ps && !kh_protocol_parse(ps, &proto))
            return kh_err_set(err, KH_EINVAL, "evaluate: timing.protocol: unknown '%s'", ps);
        kh_bench_defaults(proto, &r->bo);
        json_t *v;
        if ((v = json_object_get(tm, "warmup"))) r->bo.warmup = (int)json_integer_value(v);
        if ((v = json_object_get(tm, "iters"))) r->bo.iters = (int)json_integer_value(v);
        if ((v = json_object_get(tm, "trials"))) r->bo.trials = (int)json_integer_value(v);
        if ((v = json_object_get(tm, "max_iters"))) r->bo.max_iters = (int)json_integer_value(v);
        if ((v = json_object_get(tm, "cold"))) r->bo.cold_l2 = json_is_true(v);
        if ((v = json_object_get(tm, "rel_ci"))) r->bo.rel_ci = json_number_value(v);
        if ((v = json_object_get(tm, "min_time_s"))) r->bo.min_gpu_s = json_number_value(v);
        if ((v = json_object_get(tm, "max_rel_stdev"))) r->bo.max_rel_stdev = json_number_value(v);
        if ((v = json_object_get(tm, "timeout_s"))) r->bo.timeout_s = json_number_value(v);
        r->rotate = (int)json_integer_value(json_object_get(tm, "rotate_inputs"));
        r->verify_fraction = json_number_value(json_object_get(tm, "verify_timed_fraction"));
        r->max_verified = (v = json_object_get(tm, "max_verified")) ? (int)json_integer_value(v)
                                                                    : 1 << 30;
        r->timing_seed = (uint64_t)json_integer_value(json_object_get(tm, "seed"));
        r->sample_seed = (uint64_t)json_integer_value(json_object_get(tm, "sample_seed"));
    } else if (tm && !json_is_null(tm)) {
        return kh_err_set(err, KH_EINVAL, "evaluate: timing: expected an object or null");
    }
    return KH_OK;
}
