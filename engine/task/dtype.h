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

#include "core/kh.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
 * for every type (int64 beyond 2^53 rounds, as any double would); it and
 * get_code are inline below, as comparison calls them for every element. */
static inline double kh_dtype_decode(kh_dtype t, uint64_t code);
uint64_t kh_dtype_encode(kh_dtype t, double x);

/* Element i of an array of type t at base (nibbles for float4_e2m1). */
static inline uint64_t kh_dtype_get_code(kh_dtype t, const void *base, uint64_t i);
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
 * either side gives UINT64_MAX; inf is one step beyond the largest finite.
 * For integer types and bool: the distance between the values. */
static inline uint64_t kh_dtype_ulp_distance(kh_dtype t, uint64_t a, uint64_t b);

/* ---- inline definitions ------------------------------------------------ */
/* Decoding is on the comparison's hot path (every element of every output),
 * so each float type gets a bit-level path with no libm call: the code is
 * widened to float32 bits (every type here is a subset of float32), except
 * subnormals, which are m * 2^-k exactly. */
static inline double kh_dtype_f32_bits_(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return (double)f;
}

static inline double kh_dtype_f16_(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F)
        return kh_dtype_f32_bits_(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        double v = (double)m * 5.9604644775390625e-08; /* 2^-24 */
        return sign ? -v : v;
    }
    return kh_dtype_f32_bits_(sign | ((e + 112u) << 23) | (m << 13));
}

static inline double kh_dtype_e4m3_(uint32_t c)
{
    uint32_t sign = (c & 0x80u) << 24, e = (c >> 3) & 0xFu, m = c & 7u;
    if (e == 15 && m == 7)
        return NAN;
    if (e == 0) {
        double v = (double)m * 0.001953125; /* 2^-9 */
        return sign ? -v : v;
    }
    return kh_dtype_f32_bits_(sign | ((e + 120u) << 23) | (m << 20));
}

static inline double kh_dtype_decode(kh_dtype t, uint64_t code)
{
    static const double e2m1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
    switch (t) {
    case KH_DTYPE_F32:
        return kh_dtype_f32_bits_((uint32_t)code);
    case KH_DTYPE_BF16:
        return kh_dtype_f32_bits_((uint32_t)(code & 0xFFFFu) << 16);
    case KH_DTYPE_F16:
        return kh_dtype_f16_((uint32_t)(code & 0xFFFFu));
    case KH_DTYPE_F8E5M2: /* the high byte of a float16 */
        return kh_dtype_f16_((uint32_t)(code & 0xFFu) << 8);
    case KH_DTYPE_F8E4M3:
        return kh_dtype_e4m3_((uint32_t)(code & 0xFFu));
    case KH_DTYPE_F4E2M1:
        return (code & 8u) ? -e2m1[code & 7u] : e2m1[code & 7u];
    case KH_DTYPE_I64:
        return (double)(int64_t)code;
    case KH_DTYPE_I32:
        return (double)(int32_t)(uint32_t)code;
    case KH_DTYPE_I16:
        return (double)(int16_t)(uint16_t)code;
    case KH_DTYPE_I8:
        return (double)(int8_t)(uint8_t)code;
    case KH_DTYPE_BOOL:
        return (code & 0xFF) ? 1.0 : 0.0;
    default:
        return NAN;
    }
}

static inline uint64_t kh_dtype_get_code(kh_dtype t, const void *base, uint64_t i)
{
    const uint8_t *p = base;
    switch (t) {
    case KH_DTYPE_F4E2M1:
        return (p[i / 2] >> ((i & 1) * 4)) & 0xFu;
    case KH_DTYPE_F8E4M3:
    case KH_DTYPE_F8E5M2:
    case KH_DTYPE_I8:
    case KH_DTYPE_BOOL:
        return p[i];
    case KH_DTYPE_F16:
    case KH_DTYPE_BF16:
    case KH_DTYPE_I16: {
        uint16_t v;
        memcpy(&v, p + i * 2, 2);
        return v;
    }
    case KH_DTYPE_F32:
    case KH_DTYPE_I32: {
        uint32_t v;
        memcpy(&v, p + i * 4, 4);
        return v;
    }
    case KH_DTYPE_I64: {
        uint64_t v;
        memcpy(&v, p + i * 8, 8);
        return v;
    }
    default:
        return 0;
    }
}

/* Sign-magnitude code -> a line where adjacent finite values are 1 apart. */
static inline int64_t kh_dtype_ordinal_(kh_dtype t, uint64_t code)
{
    int signbit = t == KH_DTYPE_F32                           ? 31
                  : (t == KH_DTYPE_F16 || t == KH_DTYPE_BF16) ? 15
                  : t == KH_DTYPE_F4E2M1                      ? 3
                                                              : 7;
    uint64_t mag = code & ((1ull << signbit) - 1u);
    return ((code >> signbit) & 1u) ? -(int64_t)mag : (int64_t)mag;
}

/* NaN straight from the code, without decoding. */
static inline int kh_dtype_code_is_nan(kh_dtype t, uint64_t c)
{
    switch (t) {
    case KH_DTYPE_F32: return (c & 0x7FFFFFFFu) > 0x7F800000u;
    case KH_DTYPE_F16: return (c & 0x7FFFu) > 0x7C00u;
    case KH_DTYPE_BF16: return (c & 0x7FFFu) > 0x7F80u;
    case KH_DTYPE_F8E5M2: return (c & 0x7Fu) > 0x7Cu;
    case KH_DTYPE_F8E4M3: return (c & 0x7Fu) == 0x7Fu;
    default: return 0;
    }
}

static inline uint64_t kh_dtype_ulp_distance(kh_dtype t, uint64_t a, uint64_t b)
{
    if (t <= KH_DTYPE_F4E2M1) { /* the float types */
        if (kh_dtype_code_is_nan(t, a) || kh_dtype_code_is_nan(t, b))
            return UINT64_MAX;
        int64_t x = kh_dtype_ordinal_(t, a), y = kh_dtype_ordinal_(t, b);
        return x > y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
    }
    /* integers and bool: the distance between the values, exact in 64 bits */
    int64_t x = (int64_t)kh_dtype_decode(t, a), y = (int64_t)kh_dtype_decode(t, b);
    if (t == KH_DTYPE_I64) {
        x = (int64_t)a;
        y = (int64_t)b;
    }
    return x > y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
}

#endif
