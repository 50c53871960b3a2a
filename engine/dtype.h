/* dtype.h: the element types of FlashInfer-Bench tensors (fib-harness.md §1,
 * "DType"): names, sizes, and exact conversions between each type's bit
 * patterns and double.
 *
 * Conversion rules (double -> type), chosen to match PyTorch's `.to(dtype)`:
 *   float32, float16, bfloat16: round to nearest, ties to even; overflow -> inf.
 *   float8_e5m2: same (max 57344; the tie at 61440 goes to inf).
 *   float8_e4m3fn: ties to even; no inf: |x| > 464 and +-inf -> NaN (0x7F with
 *     the sign), as c10's fp8e4m3fn_from_fp32_value; 464 itself -> 448.  It
 *     does NOT saturate (torch's .to() does not; only scaled-mm paths do).
 *   float4_e2m1 (float4_e2m1fn): ties to even; no inf and no NaN, so overflow
 *     and +-inf saturate to +-6 and NaN becomes +0 (ml_dtypes' rules: PyTorch
 *     has no float -> float4_e2m1fn_x2 cast).
 *   NaN: quiet NaN with the sign kept, except bfloat16 -> 0x7FC0 (c10).
 *   Rounding is done once, from the double; PyTorch casts a double tensor to
 *   these types through float32 first, which differs only for doubles that
 *   are not float32 values (never the case for khlua's inputs, drawn in
 *   float32).
 *   int8/16/32/64: truncation toward zero, saturated to the type's range, NaN
 *     -> 0 (C++'s cast is undefined there; this is a defined stand-in).
 *   bool: x != 0 (NaN -> true, like bool(nan) in Python).
 *
 * float4_e2m1 packs two elements per byte, element 2i in the low nibble and
 * 2i+1 in the high nibble (PyTorch's float4_e2m1fn_x2, and safetensors' F4).
 * Shapes always count elements, not bytes: n elements take (n + 1) / 2 bytes.
 * Everything is little-endian, as on x86-64, aarch64 and the GPU. */
#ifndef KH_DTYPE_H
#define KH_DTYPE_H

#include "kh.h"

#include <stddef.h>
#include <stdint.h>

typedef enum kh_dtype {
    KH_DTYPE_F32 = 0,
    KH_DTYPE_F16,
    KH_DTYPE_BF16,
    KH_DTYPE_F8E4M3,
    KH_DTYPE_F8E5M2,
    KH_DTYPE_F4E2M1,
    KH_DTYPE_I64,
    KH_DTYPE_I32,
    KH_DTYPE_I16,
    KH_DTYPE_I8,
    KH_DTYPE_BOOL,
    KH_DTYPE_COUNT
} kh_dtype;

/* FlashInfer-Bench's name ("float8_e4m3fn"); "?" for an invalid value. */
const char *kh_dtype_name(kh_dtype t);
/* The safetensors name ("F8_E4M3", "F4", "BOOL"); "?" for an invalid value. */
const char *kh_dtype_st_name(kh_dtype t);
/* Parse a FlashInfer-Bench name; KH_EINVAL naming the bad name otherwise. */
kh_status kh_dtype_parse(const char *name, kh_dtype *out, kh_err *err);
/* Parse a safetensors name; KH_EUNSUPPORTED for a valid safetensors dtype
 * khlua does not hold (F64, U8, ...), KH_EINVAL for an unknown one. */
kh_status kh_dtype_parse_st(const char *name, kh_dtype *out, kh_err *err);

int kh_dtype_valid(int t);
/* Bits per element: 4, 8, 16, 32 or 64. */
int kh_dtype_bits(kh_dtype t);
/* Bytes for n elements (rounded up for float4_e2m1); SIZE_MAX on overflow. */
size_t kh_dtype_nbytes(kh_dtype t, uint64_t n);
int kh_dtype_is_float(kh_dtype t);
int kh_dtype_is_int(kh_dtype t); /* the signed integers, not bool */

/* Bit pattern (zero-extended) <-> double, by the rules above.  decode is exact
 * for every type (int64 beyond 2^53 rounds, as any double would). */
double kh_dtype_decode(kh_dtype t, uint64_t code);
uint64_t kh_dtype_encode(kh_dtype t, double x);

/* Element i of an array of type t at base (nibbles for float4_e2m1). */
uint64_t kh_dtype_get_code(kh_dtype t, const void *base, uint64_t i);
void kh_dtype_set_code(kh_dtype t, void *base, uint64_t i, uint64_t code);
static inline double kh_dtype_load(kh_dtype t, const void *base, uint64_t i)
{
    return kh_dtype_decode(t, kh_dtype_get_code(t, base, i));
}
static inline void kh_dtype_store(kh_dtype t, void *base, uint64_t i, double x)
{
    kh_dtype_set_code(t, base, i, kh_dtype_encode(t, x));
}

/* Distance in units in the last place between two codes of a float type:
 * codes are mapped to a monotonic integer line (-0 and +0 coincide).  NaN on
 * either side gives UINT64_MAX; inf is one step beyond the largest finite. */
uint64_t kh_dtype_ulp_distance(kh_dtype t, uint64_t a, uint64_t b);

#endif
