/* safetensors.h: read and write the safetensors format
 * (https://github.com/huggingface/safetensors, "Format"): an 8-byte
 * little-endian header length N, N bytes of JSON, then the byte buffer.
 * FlashInfer-Bench workloads name inputs in such files (fib-harness.md §1,
 * InputSpec "safetensors").
 *
 * Reading validates everything before any tensor is handed out:
 *   - the length field: at least 2 bytes of header, at most 100 MB and
 *     within the file; a Git LFS pointer is recognised and named as such;
 *   - the header: valid UTF-8 JSON, one object starting with '{' (trailing
 *     spaces allowed), no duplicate keys; "__metadata__", if present, maps
 *     strings to strings;
 *   - every entry: an object with exactly dtype, shape and data_offsets; a
 *     dtype khlua holds (dtype.h; F64, U8, ... are refused as unsupported);
 *     shape a list of at most 16 non-negative integers whose byte size fits;
 *     data_offsets [begin, end] integers with begin <= end; end - begin ==
 *     the shape's byte size (float4: an even element count, as safetensors
 *     requires whole bytes);
 *   - the offsets, sorted, tile the byte buffer exactly: no overlap, no hole,
 *     nothing past the end and nothing unindexed after it (the format's rule
 *     against polyglot files).
 * Every rejection names the file (or "buffer"), the tensor, and the field. */
#ifndef KH_SAFETENSORS_H
#define KH_SAFETENSORS_H

#include "task/tensor.h"

typedef struct kh_st_file kh_st_file;

/* Largest header accepted (the reference implementation's limit). */
#define KH_ST_MAX_HEADER (100u * 1000u * 1000u)

/* Parse and validate a file held in memory.  The buffer is borrowed: it must
 * stay alive and unchanged until kh_st_close, and tensors point into it. */
kh_status kh_st_parse(const void *buf, size_t len, kh_st_file **out, kh_err *err);
/* Map a file (private, copy-on-write: writing to a tensor never changes the
 * file) and validate it.  KH_ENOTFOUND if it does not exist, KH_EIO on other
 * system errors, KH_EINVAL / KH_EUNSUPPORTED for a bad file. */
kh_status kh_st_open(const char *path, kh_st_file **out, kh_err *err);
void kh_st_close(kh_st_file *f);

/* Tensors in the header's order.  Names live until kh_st_close. */
size_t kh_st_count(const kh_st_file *f);
const char *kh_st_name(const kh_st_file *f, size_t i);
/* A tensor borrowing the file's bytes (valid until kh_st_close; free the
 * header with kh_tensor_free).  KH_ENOTFOUND naming the keys present. */
kh_status kh_st_get(const kh_st_file *f, const char *name, kh_tensor **out, kh_err *err);
/* kh_st_get, then FIB's load check (fib-harness.md §1, InputSpec): the
 * tensor must have exactly this dtype and shape, else KH_EINVAL naming the
 * input (label), what was expected and what the file holds. */
kh_status kh_st_get_expect(const kh_st_file *f, const char *name, const char *label,
                           kh_dtype dtype, int ndim, const int64_t *shape, kh_tensor **out,
                           kh_err *err);
/* An owned copy, safe after close. */
kh_status kh_st_get_copy(const kh_st_file *f, const char *name, kh_tensor **out, kh_err *err);
/* A __metadata__ value, or NULL. */
const char *kh_st_metadata(const kh_st_file *f, const char *key);
/* The whole __metadata__ object (jansson, strings to strings), or NULL when
 * the file has none.  Borrowed: valid until kh_st_close. */
struct json_t;
const struct json_t *kh_st_metadata_all(const kh_st_file *f);

/* Write n named tensors (and optional string metadata: meta_keys/meta_values,
 * n_meta pairs) to path, atomically (a temporary file renamed into place).
 * Data follow the header in the given order; the header is padded with
 * spaces so the buffer starts 8-byte aligned.  Names must be distinct, non-
 * empty, valid UTF-8 and not "__metadata__"; float4 tensors need an even
 * element count. */
kh_status kh_st_write(const char *path, size_t n, const char *const *names,
                      const kh_tensor *const *tensors, size_t n_meta,
                      const char *const *meta_keys, const char *const *meta_values,
                      kh_err *err);

#endif
