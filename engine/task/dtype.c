/* dtype.c: element types (dtype.h): the name tables, sizes, element access
 * and the decode side of the conversions.  The encode side (rounding) is the
 * shared kh_fp_encode of rng_core.h, so the GPU input generator rounds with
 * the very same code. */
#include "task/dtype.h"

#include "task/rng_core.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name, *st;
    int bits, ebits, mbits, mode; /* ebits 0: not a float */
} T[KH_DTYPE_COUNT] = {
    [KH_DTYPE_F32] = {"float32", "F32", 32, 8, 23, KH_FPM_IEEE},
    [KH_DTYPE_F16] = {"float16", "F16", 16, 5, 10, KH_FPM_IEEE},
    [KH_DTYPE_BF16] = {"bfloat16", "BF16", 16, 8, 7, KH_FPM_IEEE},
    [KH_DTYPE_F8E4M3] = {"float8_e4m3fn", "F8_E4M3", 8, 4, 3, KH_FPM_FN_NAN},
    [KH_DTYPE_F8E5M2] = {"float8_e5m2", "F8_E5M2", 8, 5, 2, KH_FPM_IEEE},
    [KH_DTYPE_F4E2M1] = {"float4_e2m1", "F4", 4, 2, 1, KH_FPM_FN_SAT},
    [KH_DTYPE_I64] = {"int64", "I64", 64, 0, 0, 0},
    [KH_DTYPE_I32] = {"int32", "I32", 32, 0, 0, 0},
    [KH_DTYPE_I16] = {"int16", "I16", 16, 0, 0, 0},
    [KH_DTYPE_I8] = {"int8", "I8", 8, 0, 0, 0},
    [KH_DTYPE_BOOL] = {"bool", "BOOL", 8, 0, 0, 0},
};

int kh_dtype_valid(int t) { return t >= 0 && t < KH_DTYPE_COUNT; }
const char *kh_dtype_name(kh_dtype t) { return kh_dtype_valid((int)t) ? T[t].name : "?"; }
const char *kh_dtype_st_name(kh_dtype t) { return kh_dtype_valid((int)t) ? T[t].st : "?"; }
int kh_dtype_bits(kh_dtype t) { return kh_dtype_valid((int)t) ? T[t].bits : 0; }
int kh_dtype_is_float(kh_dtype t) { return kh_dtype_valid((int)t) && T[t].ebits > 0; }
int kh_dtype_is_int(kh_dtype t) { return t >= KH_DTYPE_I64 && t <= KH_DTYPE_I8; }

size_t kh_dtype_nbytes(kh_dtype t, uint64_t n)
{
    if (!kh_dtype_valid((int)t))
        return SIZE_MAX;
    if (t == KH_DTYPE_F4E2M1)
        return n >= (uint64_t)SIZE_MAX ? SIZE_MAX : (size_t)(n / 2 + (n & 1));
    uint64_t b = (uint64_t)T[t].bits / 8;
    if (n > (uint64_t)SIZE_MAX / b)
        return SIZE_MAX;
    return (size_t)(n * b);
}

kh_status kh_dtype_parse(const char *name, kh_dtype *out, kh_err *err)
{
    for (int i = 0; i < KH_DTYPE_COUNT; i++)
        if (name && strcmp(name, T[i].name) == 0) {
            *out = (kh_dtype)i;
            return KH_OK;
        }
    return kh_err_set(err, KH_EINVAL,
                      "unknown dtype \"%s\" (expected float32, float16, bfloat16, "
                      "float8_e4m3fn, float8_e5m2, float4_e2m1, int64, int32, int16, int8 "
                      "or bool)", name ? name : "(null)");
}

kh_status kh_dtype_parse_st(const char *name, kh_dtype *out, kh_err *err)
{
    for (int i = 0; i < KH_DTYPE_COUNT; i++)
        if (name && strcmp(name, T[i].st) == 0) {
            *out = (kh_dtype)i;
            return KH_OK;
        }
    static const char *const known[] = {"F64", "U8", "U16", "U32", "U64", "F8_E8M0",
                                        "E8M0", "F6_E2M3", "F6_E3M2", "C64"};
    for (size_t i = 0; name && i < KH_ARRAY_LEN(known); i++)
        if (strcmp(name, known[i]) == 0)
            return kh_err_set(err, KH_EUNSUPPORTED,
                              "safetensors dtype %s is valid but khlua does not hold it "
                              "(FlashInfer-Bench tensors are F32 F16 BF16 F8_E4M3 F8_E5M2 "
                              "F4 I64 I32 I16 I8 BOOL)", name);
    return kh_err_set(err, KH_EINVAL, "unknown safetensors dtype \"%s\"",
                      name ? name : "(null)");
}

uint64_t kh_dtype_encode(kh_dtype t, double x)
{
    switch (t) {
    case KH_DTYPE_I64:
    case KH_DTYPE_I32:
    case KH_DTYPE_I16:
    case KH_DTYPE_I8: {
        int bits = T[t].bits;
        uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1u;
        /* lo = -2^(bits-1) and hi = 2^(bits-1) are exact doubles */
        double hi = ldexp(1.0, bits - 1);
        int64_t v;
        if (isnan(x))
            v = 0;
        else if (x >= hi)
            v = (int64_t)(((uint64_t)1 << (bits - 1)) - 1u);
        else if (x <= -hi)
            v = (int64_t)(0 - ((uint64_t)1 << (bits - 1)));
        else
            v = (int64_t)x;
        return (uint64_t)v & mask;
    }
    case KH_DTYPE_BOOL:
        return x != 0.0 || isnan(x) ? 1u : 0u;
    default:
        if (!kh_dtype_is_float(t))
            return 0;
        return kh_fp_encode(x, T[t].ebits, T[t].mbits, T[t].mode);
    }
}

void kh_dtype_set_code(kh_dtype t, void *base, uint64_t i, uint64_t code)
{
    uint8_t *p = base;
    switch (t) {
    case KH_DTYPE_F4E2M1: {
        int sh = (int)(i & 1) * 4;
        p[i / 2] = (uint8_t)((p[i / 2] & ~(0xFu << sh)) | ((code & 0xFu) << sh));
        break;
    }
    case KH_DTYPE_F8E4M3:
    case KH_DTYPE_F8E5M2:
    case KH_DTYPE_I8:
    case KH_DTYPE_BOOL:
        p[i] = (uint8_t)code;
        break;
    case KH_DTYPE_F16:
    case KH_DTYPE_BF16:
    case KH_DTYPE_I16: {
        uint16_t v = (uint16_t)code;
        memcpy(p + i * 2, &v, 2);
        break;
    }
    case KH_DTYPE_F32:
    case KH_DTYPE_I32: {
        uint32_t v = (uint32_t)code;
        memcpy(p + i * 4, &v, 4);
        break;
    }
    case KH_DTYPE_I64:
        memcpy(p + i * 8, &code, 8);
        break;
    default:
        break;
    }
}

