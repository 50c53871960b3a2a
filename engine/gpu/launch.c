/* launch.c: concrete launch lists in the gpu worker (see launch.h).  Owns
 * buffer allocation and filling, argument marshalling and launch-limit
 * checks; expression evaluation stays in the coordinator. */
#include "gpu/launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kh_status fill_random(kh_gpu *g, kh_gpu_buf *b, uint64_t seed, kh_err *err)
{
    size_t chunk = 64u << 20;
    uint32_t *h = malloc(chunk);
    if (!h)
        return kh_err_set(err, KH_ENOMEM, "out of memory filling a buffer");
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    kh_status st = KH_OK;
    for (size_t off = 0; off < b->bytes && !st; off += chunk) {
        size_t n = b->bytes - off < chunk ? b->bytes - off : chunk;
        for (size_t i = 0; i < (n + 3) / 4; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            /* A finite float in [-1, 1): sign, exponent 126 or less, mantissa. */
            uint32_t w = (uint32_t)(s >> 11);
            uint32_t e = 0x3F000000u - ((w >> 29) << 23); /* 2^-1 .. 2^-8 */
            h[i] = (w & 0x80000000u) | e | (w & 0x007FFFFFu);
        }
        st = kh_gpu_htod(g, b->ptr + off, h, n, err);
    }
    free(h);
    return st;
}

static int dims(const json_t *j, unsigned out[3])
{
    out[0] = out[1] = out[2] = 1;
    if (json_is_integer(j)) {
        json_int_t v = json_integer_value(j);
        if (v < 1 || v > 0x7fffffff)
            return 0;
        out[0] = (unsigned)v;
        return 1;
    }
    if (!json_is_array(j) || json_array_size(j) < 1 || json_array_size(j) > 3)
        return 0;
    for (size_t i = 0; i < json_array_size(j); i++) {
        json_t *v = json_array_get(j, i);
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > 0x7fffffff)
            return 0;
        out[i] = (unsigned)json_integer_value(v);
    }
    return 1;
}

static kh_launch_buf *find_buf(const kh_launch_list *l, const char *name)
{
    for (size_t i = 0; i < l->nbufs; i++)
        if (!strcmp(l->bufs[i].name, name))
            return &l->bufs[i];
    return NULL;
}

kh_status kh_launch_parse_args(const kh_launch_list *l, size_t k, const json_t *args,
                               kh_launch_one *o, kh_err *err)
{
    if (args && !json_is_array(args))
        return kh_err_set(err, KH_EINVAL, "launches[%zu].args: an array is required", k);
    if (json_array_size(args) > KH_LAUNCH_MAX_ARGS)
        return kh_err_set(err, KH_EINVAL, "launches[%zu].args: more than %d arguments", k,
                          KH_LAUNCH_MAX_ARGS);
    size_t i;
    json_t *a;
    json_array_foreach(args, i, a) {
        kh_arg_val *v = &o->vals[i];
        v->u64 = 0;
        o->scalar_of[i] = 0;
        const char *key;
        json_t *val;
        int ok = json_object_size(a) == 1;
        json_object_foreach(a, key, val) {
            if (!strcmp(key, "buf") || !strcmp(key, "tensor")) {
                const kh_launch_buf *b = find_buf(l, json_string_value(val) ? json_string_value(val)
                                                                      : "");
                if (!b)
                    return kh_err_set(err, KH_EINVAL, "launches[%zu].args[%zu]: no buffer "
                                      "named '%s'", k, i,
                                      json_string_value(val) ? json_string_value(val) : "?");
                v->ptr = b->buf.ptr;
            } else if (!strcmp(key, "i32") && json_is_integer(val)) {
                v->i32 = (int32_t)json_integer_value(val);
            } else if (!strcmp(key, "i64") && json_is_integer(val)) {
                v->i64 = (int64_t)json_integer_value(val);
            } else if (!strcmp(key, "u32") && json_is_integer(val)) {
                v->u32 = (uint32_t)json_integer_value(val);
            } else if (!strcmp(key, "u64") && json_is_integer(val)) {
                v->u64 = (uint64_t)json_integer_value(val);
            } else if (!strcmp(key, "f32") && json_is_number(val)) {
                v->f32 = (float)json_number_value(val);
            } else if (!strcmp(key, "f64") && json_is_number(val)) {
                v->f64 = json_number_value(val);
            } else if (!strcmp(key, "scalar")) {
                /* by value: the bits arrive with kh_launch_set_scalar once
                 * the buffer has been filled */
                const kh_launch_buf *b = find_buf(l, json_string_value(val) ? json_string_value(val)
                                                                      : "");
                if (!b)
                    return kh_err_set(err, KH_EINVAL, "launches[%zu].args[%zu]: no scalar input "
                                      "named '%s'", k, i,
                                      json_string_value(val) ? json_string_value(val) : "?");
                if (b->buf.bytes > 8)
                    return kh_err_set(err, KH_EINVAL, "launches[%zu].args[%zu]: '%s' holds %zu "
                                      "bytes; only a one-element input of at most 8 bytes can "
                                      "be passed by value", k, i, b->name, b->buf.bytes);
                o->scalar_of[i] = (unsigned short)(b - l->bufs + 1);
            } else {
                ok = 0;
            }
        }
        if (!ok)
            return kh_err_set(err, KH_EINVAL, "launches[%zu].args[%zu]: expected one of "
                              "{buf|tensor|scalar|i32|i64|u32|u64|f32|f64: value}", k, i);
        o->params[i] = v;
        o->nargs = (int)i + 1;
    }
    return KH_OK;
}

int kh_launch_set_scalar(kh_launch_list *l, const char *name, uint64_t code)
{
    int n = 0;
    for (size_t k = 0; k < l->nlaunches; k++) {
        kh_launch_one *o = &l->launches[k];
        for (int i = 0; i < o->nargs; i++)
            if (o->scalar_of[i] && o->scalar_of[i] <= l->nbufs &&
                !strcmp(l->bufs[o->scalar_of[i] - 1].name, name)) {
                o->vals[i].u64 = code;
                n++;
            }
    }
    return n;
}

static kh_status prepare_launch(kh_launch_list *l, CUmodule module, size_t k, const json_t *j,
                                kh_err *err)
{
    kh_gpu *g = l->g;
    const kh_cuda_api *cu = kh_gpu_api(g);
    kh_launch_one *o = &l->launches[k];
    const char *kernel = json_string_value(json_object_get(j, "kernel"));
    if (!kernel)
        return kh_err_set(err, KH_EINVAL, "launches[%zu].kernel: a string is required", k);
    snprintf(o->kernel, sizeof o->kernel, "%s", kernel);
    CUresult r = cu->cuModuleGetFunction(&o->fn, module, kernel);
    if (r == CUDA_ERROR_NOT_FOUND)
        return kh_err_set(err, KH_EINVAL,
                          "launches[%zu].kernel: no kernel named '%s' in the module (is it "
                          "extern \"C\"?)", k, kernel);
    if (kh_gpu_check(g, r, "cuModuleGetFunction", err))
        return err->code;
    if (!dims(json_object_get(j, "grid"), o->grid))
        return kh_err_set(err, KH_EINVAL, "launches[%zu].grid: 1 to 3 positive integers", k);
    if (!dims(json_object_get(j, "block"), o->block))
        return kh_err_set(err, KH_EINVAL, "launches[%zu].block: 1 to 3 positive integers", k);
    json_t *sm = json_object_get(j, "smem");
    json_int_t smem = sm ? json_integer_value(sm) : 0;
    if (sm && (!json_is_integer(sm) || smem < 0 || smem > 0x7fffffff))
        return kh_err_set(err, KH_EINVAL, "launches[%zu].smem: a non-negative integer", k);
    o->smem = (unsigned)smem;

    /* Limits, checked before the launch so a bad config is a clear verdict,
     * not an opaque CUDA error. */
    int max_threads = 0, static_smem = 0, optin = 0;
    cu->cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, o->fn);
    cu->cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, o->fn);
    json_t *info = kh_gpu_info(g);
    optin = (int)json_integer_value(json_object_get(info, "max_shared_per_block_optin"));
    json_decref(info);
    unsigned long long threads = (unsigned long long)o->block[0] * o->block[1] * o->block[2];
    if (threads > (unsigned long long)max_threads)
        return kh_err_set(err, KH_EINVAL,
                          "launches[%zu] (%s): block of %llu threads exceeds the kernel's "
                          "limit of %d", k, kernel, threads, max_threads);
    if (o->grid[1] > 65535 || o->grid[2] > 65535 || o->block[2] > 64)
        return kh_err_set(err, KH_EINVAL, "launches[%zu] (%s): grid or block over the device "
                          "limits (grid.y/z <= 65535, block.z <= 64)", k, kernel);
    if ((long long)o->smem + static_smem > optin)
        return kh_err_set(err, KH_EINVAL,
                          "launches[%zu] (%s): %u bytes of dynamic + %d static shared memory "
                          "exceed the device's %d per block", k, kernel, o->smem, static_smem,
                          optin);
    if (o->smem > 48 * 1024 &&
        kh_gpu_check(g, cu->cuFuncSetAttribute(o->fn,
                                               CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               (int)o->smem),
                     "cuFuncSetAttribute", err))
        return err->code;

    return kh_launch_parse_args(l, k, json_object_get(j, "args"), o, err);
}

kh_status kh_launch_prepare(kh_gpu *g, CUmodule module, const json_t *spec, size_t guard,
                            kh_launch_list *l, kh_err *err)
{
    memset(l, 0, sizeof *l);
    l->g = g;
    json_t *bufs = json_object_get(spec, "buffers");
    json_t *launches = json_object_get(spec, "launches");
    if ((bufs && !json_is_array(bufs)) || !json_is_array(launches) ||
        json_array_size(launches) == 0)
        return kh_err_set(err, KH_EINVAL, "a launch list needs \"launches\" (a non-empty "
                          "array) and optionally \"buffers\" (an array)");
    l->bufs = calloc(json_array_size(bufs) + 1, sizeof *l->bufs);
    l->launches = calloc(json_array_size(launches), sizeof *l->launches);
    if (!l->bufs || !l->launches) {
        kh_launch_free(l);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    size_t i;
    json_t *b;
    json_array_foreach(bufs, i, b) {
        const char *name = json_string_value(json_object_get(b, "name"));
        json_t *bytes = json_object_get(b, "bytes");
        if (!name || !json_is_integer(bytes) || json_integer_value(bytes) < 0) {
            kh_launch_free(l);
            return kh_err_set(err, KH_EINVAL, "buffers[%zu]: needs \"name\" and non-negative "
                              "integer \"bytes\"", i);
        }
        if (find_buf(l, name)) {
            kh_launch_free(l);
            return kh_err_set(err, KH_EINVAL, "buffers[%zu]: duplicate name '%s'", i, name);
        }
        kh_launch_buf *lb = &l->bufs[l->nbufs];
        snprintf(lb->name, sizeof lb->name, "%s", name);
        kh_status st = kh_gpu_buf_alloc(g, (size_t)json_integer_value(bytes), guard, &lb->buf,
                                        err);
        if (st) {
            kh_launch_free(l);
            return kh_err_prefix(err, "buffers[%zu] (%s)", i, name);
        }
        l->nbufs++;
        const char *init = json_string_value(json_object_get(b, "init"));
        if (!init || !strcmp(init, "random"))
            st = fill_random(g, &lb->buf,
                             (uint64_t)json_integer_value(json_object_get(b, "seed")) + i, err);
        else if (!strcmp(init, "zero"))
            st = kh_gpu_check(g, kh_gpu_api(g)->cuMemsetD8(lb->buf.ptr, 0, lb->buf.bytes),
                              "cuMemsetD8", err);
        else if (strcmp(init, "none"))
            st = kh_err_set(err, KH_EINVAL, "buffers[%zu].init: random, zero or none", i);
        if (st) {
            kh_launch_free(l);
            return st;
        }
    }
    json_t *lj;
    json_array_foreach(launches, i, lj) {
        kh_status st = prepare_launch(l, module, i, lj, err);
        if (st) {
            kh_launch_free(l);
            return st;
        }
        l->nlaunches++;
    }
    return KH_OK;
}

kh_status kh_launch_enqueue(kh_launch_list *l, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(l->g);
    for (size_t i = 0; i < l->nlaunches; i++) {
        kh_launch_one *o = &l->launches[i];
        CUresult r = cu->cuLaunchKernel(o->fn, o->grid[0], o->grid[1], o->grid[2], o->block[0],
                                        o->block[1], o->block[2], o->smem,
                                        kh_gpu_stream(l->g), o->nargs ? o->params : NULL, NULL);
        if (r != CUDA_SUCCESS) {
            kh_gpu_check(l->g, r, "cuLaunchKernel", err);
            return kh_err_prefix(err, "launch %zu (%s)", i, o->kernel);
        }
    }
    return KH_OK;
}

kh_status kh_launch_check_guards(kh_launch_list *l, kh_err *err)
{
    for (size_t i = 0; i < l->nbufs; i++) {
        const char *where = NULL;
        if (!kh_gpu_buf_guards_ok(l->g, &l->bufs[i].buf, &where, err))
            return kh_err_prefix(err, "buffer '%s'", l->bufs[i].name);
    }
    return KH_OK;
}

kh_status kh_launch_bind(kh_gpu *g, CUmodule module, const json_t *launches,
                         kh_launch_buf *bufs, size_t nbufs, kh_launch_list *l, kh_err *err)
{
    memset(l, 0, sizeof *l);
    l->g = g;
    l->bufs = bufs;
    l->nbufs = nbufs;
    l->borrowed = 1;
    if (!json_is_array(launches) || json_array_size(launches) == 0)
        return kh_err_set(err, KH_EINVAL, "launches: a non-empty array is required");
    l->launches = calloc(json_array_size(launches), sizeof *l->launches);
    if (!l->launches)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    size_t i;
    json_t *lj;
    json_array_foreach(launches, i, lj) {
        kh_status st = prepare_launch(l, module, i, lj, err);
        if (st) {
            kh_launch_free(l);
            return st;
        }
        l->nlaunches++;
    }
    return KH_OK;
}

void kh_launch_free(kh_launch_list *l)
{
    if (!l->borrowed) {
        for (size_t i = 0; i < l->nbufs; i++)
            kh_gpu_buf_free(l->g, &l->bufs[i].buf);
        free(l->bufs);
    }
    free(l->launches);
    memset(l, 0, sizeof *l);
}
