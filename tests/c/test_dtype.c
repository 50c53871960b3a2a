/* test_dtype.c: element types.  Every code of every 8- and 16-bit float type
 * is decoded and re-encoded, and every tie between neighbours is rounded,
 * against independent oracles: ml_dtypes tables (tests/fixtures/dtype, made
 * by gen_tables.py) for the fp8/fp4 types, float16's definition (nearest
 * value by search) and, where the compiler has it, _Float16,
 * the float32 bit-shift definition of bfloat16, and C's own double->float cast
 * for float32 (random inputs). */
#include "kh_test.h"

#include "task/dtype.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng_state;
static uint64_t next_rand(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float f32_from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static void test_names_and_sizes(void **state)
{
    static const struct {
        const char *fib, *st;
        int bits;
    } want[] = {{"float32", "F32", 32},      {"float16", "F16", 16},
                {"bfloat16", "BF16", 16},    {"float8_e4m3fn", "F8_E4M3", 8},
                {"float8_e5m2", "F8_E5M2", 8}, {"float4_e2m1", "F4", 4},
                {"int64", "I64", 64},        {"int32", "I32", 32},
                {"int16", "I16", 16},        {"int8", "I8", 8},
                {"bool", "BOOL", 8}};
    assert_int_equal(KH_ARRAY_LEN(want), KH_DTYPE_COUNT);
    for (size_t i = 0; i < KH_ARRAY_LEN(want); i++) {
        kh_dtype t, u;
        kh_err err;
        assert_int_equal(kh_dtype_parse(want[i].fib, &t, &err), KH_OK);
        assert_int_equal(kh_dtype_parse_st(want[i].st, &u, &err), KH_OK);
        assert_int_equal(t, u);
        assert_string_equal(kh_dtype_name(t), want[i].fib);
        assert_string_equal(kh_dtype_st_name(t), want[i].st);
        assert_int_equal(kh_dtype_bits(t), want[i].bits);
    }
    kh_dtype t;
    kh_err err;
    assert_int_equal(kh_dtype_parse("float64", &t, &err), KH_EINVAL);
    assert_non_null(strstr(err.msg, "\"float64\""));
    assert_int_equal(kh_dtype_parse_st("F64", &t, &err), KH_EUNSUPPORTED);
    assert_int_equal(kh_dtype_parse_st("F65", &t, &err), KH_EINVAL);
    assert_int_equal(kh_dtype_nbytes(KH_DTYPE_F4E2M1, 7), 4);
    assert_int_equal(kh_dtype_nbytes(KH_DTYPE_F4E2M1, 8), 4);
    assert_int_equal(kh_dtype_nbytes(KH_DTYPE_BF16, 7), 14);
    assert_int_equal(kh_dtype_nbytes(KH_DTYPE_I64, UINT64_MAX / 4), SIZE_MAX);
}

static int same_value(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

/* Check one ml_dtypes table; returns the number of rows checked. */
static int check_table(kh_dtype t, const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/dtype/%s", kh_test_source_dir(), file);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char line[256];
    int rows = 0, decodes = 0;
    while (fgets(line, sizeof line, f)) {
        char kind, a[64], b[64];
        if (line[0] == '#' || sscanf(line, "%c %63s %63s", &kind, a, b) != 3)
            continue;
        if (kind == 'd') {
            uint64_t code = strtoull(a, NULL, 10);
            double want = strcmp(b, "nan") == 0 ? NAN : strtod(b, NULL);
            double got = kh_dtype_decode(t, code);
            if (!same_value(got, want))
                fail_msg("%s: decode(%llu) = %a, ml_dtypes says %a", file,
                         (unsigned long long)code, got, want);
            /* every non-NaN code survives a round trip */
            if (!isnan(want) && kh_dtype_encode(t, want) != code)
                fail_msg("%s: encode(decode(%llu)) = %llu", file, (unsigned long long)code,
                         (unsigned long long)kh_dtype_encode(t, want));
            decodes++;
        } else if (kind == 'e') {
            double x = strtod(a, NULL);
            uint64_t want = strtoull(b, NULL, 10);
            uint64_t got = kh_dtype_encode(t, x);
            if (got != want)
                fail_msg("%s: encode(%a) = %llu, ml_dtypes says %llu", file, x,
                         (unsigned long long)got, (unsigned long long)want);
        }
        rows++;
    }
    fclose(f);
    assert_int_equal(decodes, t == KH_DTYPE_F4E2M1 ? 16 : 256);
    return rows;
}

static void test_fp8_fp4_tables(void **state)
{
    assert_true(check_table(KH_DTYPE_F8E4M3, "float8_e4m3fn.txt") > 1000);
    assert_true(check_table(KH_DTYPE_F8E5M2, "float8_e5m2.txt") > 1000);
    assert_true(check_table(KH_DTYPE_F4E2M1, "float4_e2m1.txt") > 60);
}

/* The PyTorch rules where ml_dtypes is silent or differs (dtype.h). */
static void test_fp8_pytorch_rules(void **state)
{
    /* e4m3fn: no saturation; 464 is the tie 448 | NaN-code and goes to 448 */
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, 464.0), 0x7E);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, nextafter(464.0, 1e9)), 0x7F);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, -1e6), 0xFF);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, INFINITY), 0x7F);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, -NAN), 0xFF);
    /* e5m2: inf on overflow, NaN 0x7F with the sign (c10), not ml_dtypes' 0x7E */
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E5M2, 61440.0), 0x7C);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E5M2, nextafter(61440.0, 0)), 0x7B);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E5M2, NAN), 0x7F);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E5M2, -NAN), 0xFF);
    /* e2m1: saturates, NaN -> +0 */
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F4E2M1, 1e30), 0x7);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F4E2M1, -INFINITY), 0xF);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F4E2M1, NAN), 0x0);
    /* bf16 NaN is 0x7FC0 whatever the sign (c10 round_to_nearest_even) */
    assert_int_equal(kh_dtype_encode(KH_DTYPE_BF16, -NAN), 0x7FC0);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F16, -NAN), 0xFE00);
    /* the smallest values: half the least subnormal is a tie to 0 */
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, ldexp(1, -10)), 0x00);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, nextafter(ldexp(1, -10), 1)), 0x01);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, 1e-300), 0x00);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F8E4M3, -5e-324), 0x80);
}

/* float16 by its definition, independent of dtype.c's bit tricks: decode
 * as (1 + M/1024) 2^(E-15) (subnormals M 2^-24); encode as "the nearest value,
 * ties to the even code, inf from 65520 up", by binary search over all
 * positive finite codes. */
static double f16_def(uint32_t c)
{
    uint32_t E = (c >> 10) & 0x1F, M = c & 0x3FF;
    double v = E == 31 ? (M ? NAN : INFINITY)
               : E == 0 ? ldexp((double)M, -24)
                        : ldexp(1.0 + (double)M / 1024.0, (int)E - 15);
    return (c & 0x8000) ? -v : v;
}

static uint32_t f16_nearest(double x)
{
    uint32_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a >= 65520.0)
        return sign | 0x7C00;
    uint32_t lo = 0, hi = 0x7BFF; /* largest code with value <= a */
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (f16_def(mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0x7BFF)
        return sign | lo;
    double dl = a - f16_def(lo), du = f16_def(lo + 1) - a;
    if (du < dl || (du == dl && (lo & 1)))
        lo++;
    return sign | lo;
}

static void test_f16_exhaustive(void **state)
{
    int ties = 0;
    for (uint32_t c = 0; c < 65536; c++) {
        double want = f16_def(c);
        double got = kh_dtype_decode(KH_DTYPE_F16, c);
        if (!same_value(got, want))
            fail_msg("f16 decode(0x%04x) = %a, by definition %a", c, got, want);
#ifdef __FLT16_MAX__ /* the compiler's half type, where it has one */
        uint16_t h16 = (uint16_t)c;
        _Float16 h;
        memcpy(&h, &h16, 2);
        assert_true(same_value(got, (double)h));
#endif
        if (isnan(want))
            continue;
        assert_int_equal(kh_dtype_encode(KH_DTYPE_F16, want), c);
        if (isinf(want) || (c & 0x7FFF) == 0x7BFF)
            continue;
        /* the tie with the next code up in magnitude, and its neighbours */
        double up = f16_def(c + 1);
        double mid = (want + up) / 2;
        double probes[3] = {mid, nextafter(mid, 0), nextafter(mid, signbit(mid) ? -1e9 : 1e9)};
        for (int k = 0; k < 3; k++) {
            uint64_t enc = kh_dtype_encode(KH_DTYPE_F16, probes[k]);
            if (enc != f16_nearest(probes[k]))
                fail_msg("f16 encode(%a) = 0x%04llx, nearest is 0x%04x", probes[k],
                         (unsigned long long)enc, f16_nearest(probes[k]));
#ifdef __FLT16_MAX__
            _Float16 o = (_Float16)probes[k];
            uint16_t ob;
            memcpy(&ob, &o, 2);
            assert_int_equal(enc, ob);
#endif
        }
        ties++;
    }
    assert_true(ties > 60000);
    /* random doubles over float16's range and past it */
    for (int i = 0; i < 200000; i++) {
        double x = ldexp((double)(next_rand() >> 11) * 0x1p-53, (int)(next_rand() % 44) - 27);
        if (next_rand() & 1)
            x = -x;
        assert_int_equal(kh_dtype_encode(KH_DTYPE_F16, x), f16_nearest(x));
    }
    /* overflow: 65520 is the tie between 65504 and inf and goes to inf */
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F16, 65520.0), 0x7C00);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F16, nextafter(65520.0, 0)), 0x7BFF);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_F16, -1e300), 0xFC00);
}

/* bfloat16: decode is "the float32 with these 16 high bits"; encode of any
 * float32 is c10's round_to_nearest_even on its bits. */
static uint16_t bf16_oracle(float f)
{
    if (isnan(f))
        return 0x7FC0;
    uint32_t b = f32_bits(f);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

static void test_bf16_exhaustive(void **state)
{
    for (uint32_t c = 0; c < 65536; c++) {
        double want = (double)f32_from_bits(c << 16);
        double got = kh_dtype_decode(KH_DTYPE_BF16, c);
        if (!same_value(got, want))
            fail_msg("bf16 decode(0x%04x) = %a, want %a", c, got, want);
        if (isnan(want))
            continue;
        assert_int_equal(kh_dtype_encode(KH_DTYPE_BF16, want), c);
        /* every float32 between this code and the next: the tie and its
         * float32 neighbours */
        uint32_t mid = (c << 16) | 0x8000u;
        uint32_t probes[3] = {mid, mid - 1, mid + 1};
        for (int k = 0; k < 3; k++) {
            float f = f32_from_bits(probes[k]);
            if (isnan(f))
                continue;
            uint64_t got2 = kh_dtype_encode(KH_DTYPE_BF16, (double)f);
            if (got2 != bf16_oracle(f))
                fail_msg("bf16 encode(%a) = 0x%04llx, want 0x%04x", (double)f,
                         (unsigned long long)got2, bf16_oracle(f));
        }
    }
    for (int i = 0; i < 1000000; i++) {
        float f = f32_from_bits((uint32_t)next_rand());
        if (kh_dtype_encode(KH_DTYPE_BF16, (double)f) != bf16_oracle(f))
            fail_msg("bf16 encode(%a) differs from the oracle", (double)f);
    }
}

/* float32: C's double -> float conversion is IEEE round-to-nearest-even with
 * overflow to inf; compare on random doubles of every magnitude. */
static void test_f32_random(void **state)
{
    for (int i = 0; i < 1000000; i++) {
        uint64_t r = next_rand();
        /* exponents spread over float32's range and a little past it */
        uint64_t ex = 1023 - 160 + (r >> 52) % 330;
        uint64_t bits = (r & 0x800FFFFFFFFFFFFFull) | (ex << 52);
        if (i % 7 == 0) /* exact ties: 24 mantissa bits then a lone 1 */
            bits = (bits & ~0x000000001FFFFFFFull) | 0x10000000ull;
        double d;
        memcpy(&d, &bits, 8);
        float want = (float)d;
        uint64_t got = kh_dtype_encode(KH_DTYPE_F32, d);
        if (got != f32_bits(want))
            fail_msg("f32 encode(%a) = 0x%08llx, C says 0x%08x", d, (unsigned long long)got,
                     f32_bits(want));
        assert_true(same_value(kh_dtype_decode(KH_DTYPE_F32, got), (double)want));
    }
}

static void test_integers_and_bool(void **state)
{
    assert_int_equal(kh_dtype_encode(KH_DTYPE_I8, 127.9), 127);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_I8, 300), 127);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_I8, -300), 0x80);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_I8, -2.7), 0xFE);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_I16, NAN), 0);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_I64, 1e300), (uint64_t)INT64_MAX);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_I64, -1e300), (uint64_t)INT64_MIN);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_BOOL, -0.5), 1);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_BOOL, -0.0), 0);
    assert_int_equal(kh_dtype_encode(KH_DTYPE_BOOL, NAN), 1);
    for (int i = 0; i < 10000; i++) {
        int64_t v = (int64_t)(next_rand() % 65536) - 32768;
        assert_true(kh_dtype_decode(KH_DTYPE_I16, kh_dtype_encode(KH_DTYPE_I16, (double)v)) ==
                    (double)v);
        int64_t w = (int64_t)(next_rand() >> 12) - ((int64_t)1 << 51);
        assert_true(kh_dtype_decode(KH_DTYPE_I64, kh_dtype_encode(KH_DTYPE_I64, (double)w)) ==
                    (double)w);
    }
    for (uint32_t c = 0; c < 256; c++)
        assert_true(kh_dtype_decode(KH_DTYPE_I8, c) == (double)(int8_t)c);
}

/* float4_e2m1 packs element 2i in the low nibble, 2i+1 in the high one. */
static void test_fp4_packing(void **state)
{
    uint8_t buf[5];
    memset(buf, 0xAA, sizeof buf);
    double vals[9];
    for (int i = 0; i < 9; i++) {
        vals[i] = kh_dtype_decode(KH_DTYPE_F4E2M1, next_rand() & 0xF);
        kh_dtype_store(KH_DTYPE_F4E2M1, buf, (uint64_t)i, vals[i]);
    }
    for (int i = 0; i < 9; i++)
        assert_true(same_value(kh_dtype_load(KH_DTYPE_F4E2M1, buf, (uint64_t)i), vals[i]));
    assert_int_equal(buf[0] & 0xF, kh_dtype_encode(KH_DTYPE_F4E2M1, vals[0]));
    assert_int_equal(buf[0] >> 4, kh_dtype_encode(KH_DTYPE_F4E2M1, vals[1]));
    assert_int_equal(buf[4] >> 4, 0xA); /* the spare nibble is left alone */
    kh_dtype_store(KH_DTYPE_F4E2M1, buf, 3, -6.0);
    assert_int_equal(buf[1] >> 4, 0xF);
}

static void test_ulp_distance(void **state)
{
    /* 1.0 and its neighbours in bf16, across zero, and NaN */
    uint64_t one = kh_dtype_encode(KH_DTYPE_BF16, 1.0);
    assert_int_equal(kh_dtype_ulp_distance(KH_DTYPE_BF16, one, one + 3), 3);
    uint64_t pz = 0x0000, nz = 0x8000, pmin = 0x0001, nmin = 0x8001;
    assert_int_equal(kh_dtype_ulp_distance(KH_DTYPE_BF16, pz, nz), 0);
    assert_int_equal(kh_dtype_ulp_distance(KH_DTYPE_BF16, nmin, pmin), 2);
    assert_int_equal(kh_dtype_ulp_distance(KH_DTYPE_BF16, 0x7FC0, one), UINT64_MAX);
    assert_int_equal(kh_dtype_ulp_distance(KH_DTYPE_F8E4M3, 0x7E, 0xFE), 252);
    assert_int_equal(kh_dtype_ulp_distance(KH_DTYPE_I64, (uint64_t)INT64_MIN,
                                           (uint64_t)INT64_MAX),
                     UINT64_MAX);
    assert_int_equal(kh_dtype_ulp_distance(KH_DTYPE_I32, 0xFFFFFFFFu, 5), 6);
}

int main(void)
{
    rng_state = (uint64_t)time(NULL);
    printf("# random seed %llu\n", (unsigned long long)rng_state);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),   cmocka_unit_test(test_fp8_fp4_tables),
        cmocka_unit_test(test_fp8_pytorch_rules), cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive),   cmocka_unit_test(test_f32_random),
        cmocka_unit_test(test_integers_and_bool), cmocka_unit_test(test_fp4_packing),
        cmocka_unit_test(test_ulp_distance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
