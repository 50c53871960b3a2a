/* tensor.h: a host tensor: a dtype, a shape (element counts, up to
 * KH_TENSOR_MAX_DIMS dimensions; 0 dimensions is a 0-D scalar tensor), and
 * bytes in row-major order, either owned (freed by kh_tensor_free) or borrowed
 * (the caller keeps them alive and unchanged for the tensor's lifetime, e.g. a
 * slice of a mapped safetensors file). */
#ifndef KH_TENSOR_H
#define KH_TENSOR_H

#include "task/dtype.h"

#define KH_TENSOR_MAX_DIMS 16

typedef struct kh_tensor {
    kh_dtype dtype;
    int ndim;
    int64_t shape[KH_TENSOR_MAX_DIMS];
    uint64_t numel;
    size_t nbytes;
    void *data;
    int owned; /* 1: data is malloc'ed and freed with the tensor */
} kh_tensor;

/* Element count of a shape; KH_EINVAL for a negative dimension, too many
 * dimensions, or a count whose byte size overflows size_t. */
kh_status kh_tensor_shape_check(kh_dtype t, int ndim, const int64_t *shape, uint64_t *numel,
                                size_t *nbytes, kh_err *err);

/* A new owned tensor, zero-filled.  Free with kh_tensor_free. */
kh_status kh_tensor_new(kh_tensor **out, kh_dtype t, int ndim, const int64_t *shape,
                        kh_err *err);
/* A tensor over caller-owned bytes (nbytes must equal the shape's size). */
kh_status kh_tensor_borrow(kh_tensor **out, kh_dtype t, int ndim, const int64_t *shape,
                           void *data, size_t nbytes, kh_err *err);
/* A 0-D tensor holding x converted to t (dtype.h rules): a workload's
 * scalar input, or a random scalar's home. */
kh_status kh_tensor_new_scalar(kh_tensor **out, kh_dtype t, double x, kh_err *err);
/* An owned deep copy. */
kh_status kh_tensor_clone(kh_tensor **out, const kh_tensor *src, kh_err *err);
void kh_tensor_free(kh_tensor *t);

/* "[3, 4]" into buf (always NUL-terminated); returns buf. */
char *kh_tensor_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Element access in double (dtype.h rules). */
static inline double kh_tensor_get(const kh_tensor *t, uint64_t i)
{
    return kh_dtype_load(t->dtype, t->data, i);
}
static inline void kh_tensor_set(kh_tensor *t, uint64_t i, double x)
{
    kh_dtype_store(t->dtype, t->data, i, x);
}

#endif
