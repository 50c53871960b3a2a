/* tensor.c: host tensors (tensor.h): shape arithmetic with overflow checks,
 * owned and borrowed storage.  Element types and conversions live in
 * dtype.c; files in safetensors.c; random contents in rng.c. */
#include "task/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *kh_tensor_shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t used = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld",
                                 (long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

kh_status kh_tensor_shape_check(kh_dtype t, int ndim, const int64_t *shape, uint64_t *numel,
                                size_t *nbytes, kh_err *err)
{
    if (!kh_dtype_valid((int)t))
        return kh_err_set(err, KH_EINVAL, "invalid dtype %d", (int)t);
    if (ndim < 0 || ndim > KH_TENSOR_MAX_DIMS)
        return kh_err_set(err, KH_EINVAL, "%d dimensions (at most %d)", ndim,
                          KH_TENSOR_MAX_DIMS);
    uint64_t n = 1;
    int overflow = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return kh_err_set(err, KH_EINVAL, "dimension %d is negative (%lld)", i,
                              (long long)shape[i]);
        if (shape[i] != 0 && n > UINT64_MAX / (uint64_t)shape[i])
            overflow = 1;
        else
            n *= (uint64_t)shape[i];
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) {
            n = 0;
            overflow = 0;
        }
    size_t b = overflow ? SIZE_MAX : kh_dtype_nbytes(t, n);
    if (b == SIZE_MAX) {
        char s[256];
        return kh_err_set(err, KH_EINVAL, "shape %s of %s is too large to address",
                          kh_tensor_shape_str(ndim, shape, s, sizeof s), kh_dtype_name(t));
    }
    *numel = n;
    *nbytes = b;
    return KH_OK;
}

static kh_status make(kh_tensor **out, kh_dtype t, int ndim, const int64_t *shape,
                      kh_err *err)
{
    *out = NULL;
    uint64_t n = 0;
    size_t b = 0;
    kh_status st = kh_tensor_shape_check(t, ndim, shape, &n, &b, err);
    if (st)
        return st;
    kh_tensor *x = calloc(1, sizeof *x);
    if (!x)
        return kh_err_set(err, KH_ENOMEM, "out of memory for a tensor header");
    x->dtype = t;
    x->ndim = ndim;
    if (ndim)
        memcpy(x->shape, shape, (size_t)ndim * sizeof *shape);
    x->numel = n;
    x->nbytes = b;
    *out = x;
    return KH_OK;
}

kh_status kh_tensor_new(kh_tensor **out, kh_dtype t, int ndim, const int64_t *shape,
                        kh_err *err)
{
    kh_status st = make(out, t, ndim, shape, err);
    if (st)
        return st;
    kh_tensor *x = *out;
    x->data = calloc(1, x->nbytes ? x->nbytes : 1);
    if (!x->data) {
        size_t nb = x->nbytes;
        free(x);
        *out = NULL;
        return kh_err_set(err, KH_ENOMEM, "out of memory for a %zu-byte tensor", nb);
    }
    x->owned = 1;
    return KH_OK;
}

kh_status kh_tensor_borrow(kh_tensor **out, kh_dtype t, int ndim, const int64_t *shape,
                           void *data, size_t nbytes, kh_err *err)
{
    kh_status st = make(out, t, ndim, shape, err);
    if (st)
        return st;
    if ((*out)->nbytes != nbytes) {
        size_t want = (*out)->nbytes;
        free(*out);
        *out = NULL;
        return kh_err_set(err, KH_EINVAL, "%zu bytes given for a tensor that needs %zu",
                          nbytes, want);
    }
    (*out)->data = data;
    return KH_OK;
}

kh_status kh_tensor_new_scalar(kh_tensor **out, kh_dtype t, double x, kh_err *err)
{
    kh_status st = kh_tensor_new(out, t, 0, NULL, err);
    if (st == KH_OK)
        kh_tensor_set(*out, 0, x);
    return st;
}

kh_status kh_tensor_clone(kh_tensor **out, const kh_tensor *src, kh_err *err)
{
    kh_status st = kh_tensor_new(out, src->dtype, src->ndim, src->shape, err);
    if (st)
        return st;
    if (src->nbytes)
        memcpy((*out)->data, src->data, src->nbytes);
    return KH_OK;
}

void kh_tensor_free(kh_tensor *t)
{
    if (!t)
        return;
    if (t->owned)
        free(t->data);
    free(t);
}
