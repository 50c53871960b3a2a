/* rng_core.h: the arithmetic that must give the same bits on the host and on
 * the GPU: Philox4x32-10, the uniform and normal transforms of the input
 * generator, and the round-to-nearest-even encoder of the small float formats.
 * It is written once, inside KH_CORE_DEFINE(...), which both compiles it here
 * and keeps it as a string (kh_core_source()) that rng.c hands to NVRTC, so the
 * device runs the very same text.  Include only from dtype.c and rng.c.
 *
 * Rules for the text inside KH_CORE_DEFINE (it must stay valid C11 and CUDA):
 * no preprocessor lines, no // comments, no float type, no libm except sqrt;
 * every double operation goes through kh_dadd/kh_dsub/kh_dmul/kh_ddiv/kh_dsqrt,
 * which on the host keep each product rounded (an asm barrier, so no flag can
 * fuse a multiply and an add into an FMA) and on the device are __dadd_rn-
 * style intrinsics (never contracted).  IEEE-754 makes each of these correctly rounded on both
 * sides, so the same sequence of them gives the same bits. */
#ifndef KH_RNG_CORE_H
#define KH_RNG_CORE_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Double operations must round to double, not to a wider format (x87). */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "khlua's generator needs FLT_EVAL_METHOD == 0 (SSE2 or any 64-bit target)"
#endif

/* An empty asm that claims to change r: the product must exist, rounded, in
 * a register, so no compiler flag (-ffp-contract=fast, -march with FMA) can
 * fuse it into a following add. */
#if defined(__GNUC__) && defined(__x86_64__)
#define KH_FP_BARRIER(r) __asm__("" : "+x"(r))
#elif defined(__GNUC__) && defined(__aarch64__)
#define KH_FP_BARRIER(r) __asm__("" : "+w"(r))
#else
#define KH_FP_BARRIER(r)                                                                  \
    do {                                                                                  \
        volatile double kh_v_ = (r);                                                      \
        (r) = kh_v_;                                                                      \
    } while (0)
#endif

#define KH_FN static inline
static inline double kh_dadd(double a, double b) { return a + b; }
static inline double kh_dsub(double a, double b) { return a - b; }
static inline double kh_dmul(double a, double b)
{
    double r = a * b;
    KH_FP_BARRIER(r);
    return r;
}
static inline double kh_ddiv(double a, double b) { return a / b; }
static inline double kh_dsqrt(double a) { return sqrt(a); }
static inline uint64_t kh_d2u(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}
static inline double kh_u2d(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* Compile the text, then define kh_core_source() returning it verbatim. */
#define KH_CORE_DEFINE(...)                                                           \
    __VA_ARGS__                                                                       \
    static inline const char *kh_core_source(void) { return #__VA_ARGS__; }

KH_CORE_DEFINE(

/* Float formats the encoder knows.  mode: 0 IEEE-like (inf, NaN = all-ones
   exponent), 1 "fn" with NaN only at all-ones (float8_e4m3fn), 2 "fn" with
   neither inf nor NaN (float4_e2m1fn). */
enum { KH_FPM_IEEE = 0, KH_FPM_FN_NAN = 1, KH_FPM_FN_SAT = 2 };

/* Round x to nearest, ties to even, into a format with ebits exponent bits and
   mbits mantissa bits; returns the code (sign at bit ebits+mbits).  Overflow:
   IEEE -> inf (the tie at max + half an ulp goes to inf, as max's mantissa is
   odd); e4m3fn -> NaN for |x| > 464 (PyTorch c10 fp8e4m3fn_from_fp32_value:
   464 is the tie between 448 and the NaN code and goes to the even 448);
   e2m1fn -> saturates to +-6 (ml_dtypes; PyTorch has no float->fp4 cast).
   NaN: e2m1fn -> +0 (it has no NaN), bfloat16 (mode 0, ebits 8, mbits 7) ->
   0x7FC0 whatever the sign (c10 round_to_nearest_even), float8_e5m2 -> 0x7F
   with the sign (c10 fp8e5m2_from_fp32_value), the others -> the quiet NaN
   with the input's sign. */
KH_FN uint32_t kh_fp_encode(double x, int ebits, int mbits, int mode)
{
    uint64_t u = kh_d2u(x);
    uint32_t sign = (uint32_t)(u >> 63) << (ebits + mbits);
    int de = (int)((u >> 52) & 0x7FF);
    uint64_t dm = u & 0xFFFFFFFFFFFFFull;
    uint32_t emask = (1u << ebits) - 1u;
    uint32_t nan_code, max_code;
    if (mode == KH_FPM_IEEE) {
        nan_code = (emask << mbits) | (1u << (mbits - 1));
        max_code = (emask << mbits) - 1u;
    } else if (mode == KH_FPM_FN_NAN) {
        nan_code = (emask << mbits) | ((1u << mbits) - 1u);
        max_code = nan_code - 1u;
    } else {
        nan_code = 0u;
        max_code = (emask << mbits) | ((1u << mbits) - 1u);
    }
    if (de == 0x7FF && dm != 0) {
        if (mode == KH_FPM_FN_SAT)
            return 0u;
        if (mode == KH_FPM_IEEE && ebits == 8 && mbits == 7)
            return 0x7FC0u;
        if (mode == KH_FPM_IEEE && mbits == 2)
            return sign | (emask << mbits) | 3u;
        return sign | nan_code;
    }
    if (de == 0x7FF) {
        if (mode == KH_FPM_IEEE)
            return sign | (emask << mbits);
        return sign | (mode == KH_FPM_FN_NAN ? nan_code : max_code);
    }
    if (de == 0)
        return sign;
    int bias = (1 << (ebits - 1)) - 1;
    int e = de - 1023;
    int emin = 1 - bias;
    uint64_t sig = dm | (1ull << 52);
    int shift = 52 - mbits;
    if (e < emin)
        shift += emin - e;
    if (shift > 62)
        return sign;
    uint64_t q = sig >> shift;
    uint64_t rem = sig & ((1ull << shift) - 1ull);
    uint64_t half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1ull)))
        q += 1ull;
    uint64_t code;
    if (e < emin) {
        code = q;
    } else {
        uint64_t lim = (uint64_t)max_code + 1u;
        uint64_t ef = (uint64_t)(e + bias);
        if (ef > (lim >> mbits) + 1u)
            code = lim;
        else
            code = (ef << mbits) + (q - (1ull << mbits));
    }
    if (code > max_code) {
        if (mode == KH_FPM_IEEE)
            return sign | (emask << mbits);
        if (mode == KH_FPM_FN_NAN)
            return sign | nan_code;
        return sign | max_code;
    }
    return sign | (uint32_t)code;
}

/* The float32 value nearest x (ties to even), as a double.  Every random float
   passes through float32 first, as torch.randn draws in float32. */
KH_FN double kh_round_f32(double x)
{
    uint32_t b = kh_fp_encode(x, 8, 23, KH_FPM_IEEE);
    uint64_t s = (uint64_t)(b >> 31) << 63;
    uint32_t ex = (b >> 23) & 0xFFu;
    uint64_t m = b & 0x7FFFFFu;
    if (ex == 0xFFu)
        return m ? x : kh_u2d(s | 0x7FF0000000000000ull);
    if (ex == 0u) {
        if (m == 0u)
            return kh_u2d(s);
        return kh_dmul(kh_u2d(s | 0x3FF0000000000000ull), kh_dmul((double)m, 1.4012984643248171e-45));
    }
    return kh_u2d(s | ((uint64_t)(ex - 127u + 1023u) << 52) | (m << 29));
}

/* Philox4x32-10 (Salmon et al., SC'11): counter c[4], key k[2]. */
KH_FN void kh_philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    int r;
    for (r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c[1] ^ k0;
        uint32_t n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* The four words for element idx of stream `stream` under seed: counter
   (idx low, idx high, stream, 0), key (seed low, seed high). */
KH_FN void kh_rng_words(uint64_t seed, uint32_t stream, uint64_t idx, uint32_t w[4])
{
    w[0] = (uint32_t)idx;
    w[1] = (uint32_t)(idx >> 32);
    w[2] = stream;
    w[3] = 0u;
    kh_philox4x32_10(w, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* log(x) for x > 0 finite: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
   log m = 2 atanh(s), s = (m-1)/(m+1), series to s^23 (|s| < 0.172). */
KH_FN double kh_log(double x)
{
    uint64_t u = kh_d2u(x);
    int e = (int)((u >> 52) & 0x7FF) - 1023;
    double m = kh_u2d((u & 0xFFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
    if (m > 1.4142135623730951) {
        m = kh_dmul(m, 0.5);
        e += 1;
    }
    double s = kh_ddiv(kh_dsub(m, 1.0), kh_dadd(m, 1.0));
    double s2 = kh_dmul(s, s);
    double p = 1.0 / 23.0;
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 21.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 19.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 17.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 15.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 13.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 11.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 9.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 7.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 5.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0 / 3.0);
    p = kh_dadd(kh_dmul(p, s2), 1.0);
    double lm = kh_dmul(kh_dmul(2.0, s), p);
    double de2 = (double)e;
    return kh_dadd(kh_dadd(kh_dmul(de2, 6.93147180369123816490e-01), lm),
                   kh_dmul(de2, 1.90821492927058770002e-10));
}

/* cos(2 pi t) for t in [0, 1): quadrant, then Taylor on [0, pi/2): the
   cosine's series in quadrants 0 and 2, the sine's in 1 and 3.  The two
   series have one shape (eleven terms by Horner in x^2, the sine's times x
   at the end), so one chain runs whichever the quadrant needs, its
   coefficients picked per element (the sine's first): a GPU warp whose
   lanes fall in different quadrants does not run both series (the same
   operations on the same values as evaluating each in full, so the same
   bits). */
KH_FN double kh_cos2pi(double t)
{
    double r = kh_dmul(t, 4.0);
    int q = (int)r;
    double f = kh_dsub(r, (double)q);
    double x = kh_dmul(f, 1.5707963267948966);
    double x2 = kh_dmul(x, x);
    int odd = q & 1;
    double v = odd ? 1.0 / 51090942171709440000.0 : 1.0 / 2432902008176640000.0;
    v = kh_dsub(odd ? 1.0 / 121645100408832000.0 : 1.0 / 6402373705728000.0, kh_dmul(v, x2));
    v = kh_dsub(odd ? 1.0 / 355687428096000.0 : 1.0 / 20922789888000.0, kh_dmul(v, x2));
    v = kh_dsub(odd ? 1.0 / 1307674368000.0 : 1.0 / 87178291200.0, kh_dmul(v, x2));
    v = kh_dsub(odd ? 1.0 / 6227020800.0 : 1.0 / 479001600.0, kh_dmul(v, x2));
    v = kh_dsub(odd ? 1.0 / 39916800.0 : 1.0 / 3628800.0, kh_dmul(v, x2));
    v = kh_dsub(odd ? 1.0 / 362880.0 : 1.0 / 40320.0, kh_dmul(v, x2));
    v = kh_dsub(odd ? 1.0 / 5040.0 : 1.0 / 720.0, kh_dmul(v, x2));
    v = kh_dsub(odd ? 1.0 / 120.0 : 1.0 / 24.0, kh_dmul(v, x2));
    v = kh_dsub(odd ? 1.0 / 6.0 : 0.5, kh_dmul(v, x2));
    v = kh_dsub(1.0, kh_dmul(v, x2));
    if (odd)
        v = kh_dmul(v, x);
    /* q 0: cos; 1: -sin; 2: -cos; 3: sin */
    return (q == 1 || q == 2) ? kh_dsub(0.0, v) : v;
}

/* A standard normal from four words (Box-Muller, cosine branch only, so each
   element depends on its own counter alone): u1 in (0, 1] from w0:w1, u2 in
   [0, 1) from w2:w3, 53 bits each. */
KH_FN double kh_rng_normal(const uint32_t w[4])
{
    uint64_t a = ((((uint64_t)w[0]) << 32) | w[1]) >> 11;
    uint64_t b = ((((uint64_t)w[2]) << 32) | w[3]) >> 11;
    double u1 = kh_dmul((double)(a + 1u), 1.1102230246251565e-16);
    double u2 = kh_dmul((double)b, 1.1102230246251565e-16);
    double rad = kh_dsqrt(kh_dmul(-2.0, kh_log(u1)));
    return kh_dmul(rad, kh_cos2pi(u2));
}

/* What the generator draws, by kind (rng.c maps dtypes to kinds). */
enum {
    KH_RK_F32 = 0, KH_RK_F16, KH_RK_BF16, KH_RK_F8E4M3, KH_RK_F8E5M2, KH_RK_F4E2M1,
    KH_RK_I64, KH_RK_I32, KH_RK_I16, KH_RK_I8, KH_RK_BOOL
};

/* The longest DSA k-cache token (head_dim) whose codes are kept between the
   two passes of kh_rng_dsa_kcache_token instead of being drawn again. */
enum { KH_DSA_KEEP = 256 };

/* The code (bit pattern, zero-extended) of element idx.  FlashInfer-Bench's
   distributions (fib-harness.md, "Inputs (gen_inputs / _rand_tensor)"):
   floats randn (drawn as float32, then rounded to the dtype); fp8/fp4
   randn(float32).clamp(-2, 2).to(dtype); int8 in [-128, 128); int16/32/64 in
   [-1024, 1024); bool 0/1.  Integers: lo + floor(w0 * range / 2^32), a bias
   below range / 2^32 (< 1e-6). */
KH_FN uint64_t kh_rng_code(int kind, uint64_t seed, uint32_t stream, uint64_t idx)
{
    uint32_t w[4];
    kh_rng_words(seed, stream, idx, w);
    if (kind <= KH_RK_F4E2M1) {
        double v = kh_round_f32(kh_rng_normal(w));
        if (kind >= KH_RK_F8E4M3) {
            if (v > 2.0)
                v = 2.0;
            if (v < -2.0)
                v = -2.0;
        }
        if (kind == KH_RK_F32)
            return kh_fp_encode(v, 8, 23, KH_FPM_IEEE);
        if (kind == KH_RK_F16)
            return kh_fp_encode(v, 5, 10, KH_FPM_IEEE);
        if (kind == KH_RK_BF16)
            return kh_fp_encode(v, 8, 7, KH_FPM_IEEE);
        if (kind == KH_RK_F8E4M3)
            return kh_fp_encode(v, 4, 3, KH_FPM_FN_NAN);
        if (kind == KH_RK_F8E5M2)
            return kh_fp_encode(v, 5, 2, KH_FPM_IEEE);
        return kh_fp_encode(v, 2, 1, KH_FPM_FN_SAT);
    }
    int64_t lo = -1024;
    uint64_t range = 2048u;
    if (kind == KH_RK_I8) {
        lo = -128;
        range = 256u;
    } else if (kind == KH_RK_BOOL) {
        lo = 0;
        range = 2u;
    }
    int64_t v = lo + (int64_t)(((uint64_t)w[0] * range) >> 32);
    return (uint64_t)v;
}

/* FlashInfer-Bench's DSA top-k indexer k cache (fib-harness.md, Special
   evaluators, DsaTopkIndexerEvaluator; _pack_fp8_k_cache): per token, D
   values randn as bfloat16 (element token*D + d of the stream), then
   amax = max |k| clamped to >= float32(1e-4), scale = amax / 448,
   fp8 = e4m3fn(k * (1 / scale)), all in float32 as torch does.  Writes the
   token's D fp8 bytes and its float32 scale (little-endian) into its page,
   laid out [page_size * D fp8 bytes | page_size * 4 scale bytes]. */
/* A finite bfloat16 code as a double (the generator never draws inf/NaN). */
KH_FN double kh_bf16_value(uint64_t c)
{
    uint32_t e = (uint32_t)(c >> 7) & 0xFFu;
    uint64_t m = c & 0x7Fu;
    double v;
    if (e == 0u)
        v = kh_dmul((double)m, 9.183549615799121e-41);
    else
        v = kh_u2d(((uint64_t)(e - 127u + 1023u) << 52) | (m << 45));
    return (c & 0x8000u) ? kh_dsub(0.0, v) : v;
}

KH_FN void kh_rng_dsa_kcache_token(uint64_t seed, uint32_t stream, uint64_t token,
                                   uint32_t page_size, uint32_t D, unsigned char *cache)
{
    uint64_t page = token / page_size, off = token % page_size;
    unsigned char *pg = cache + page * (uint64_t)page_size * (D + 4u);
    double amax = 0.0;
    uint32_t d;
    /* each code drawn once when the token fits (every real head_dim does),
       twice otherwise: the draw is nearly all of the cost */
    uint32_t codes[KH_DSA_KEEP];
    int keep = D <= (uint32_t)KH_DSA_KEEP;
    for (d = 0; d < D; d++) {
        uint64_t c = kh_rng_code(KH_RK_BF16, seed, stream, token * D + d);
        double v;
        if (keep)
            codes[d] = (uint32_t)c;
        v = kh_bf16_value(c);
        if (v < 0.0)
            v = kh_dsub(0.0, v);
        if (v > amax)
            amax = v;
    }
    if (amax < 9.99999974737875163555e-05)
        amax = 9.99999974737875163555e-05;
    double scale = kh_round_f32(kh_ddiv(amax, 448.0));
    double inv = kh_round_f32(kh_ddiv(1.0, scale));
    for (d = 0; d < D; d++) {
        double v = kh_bf16_value(keep ? (uint64_t)codes[d]
                                      : kh_rng_code(KH_RK_BF16, seed, stream, token * D + d));
        pg[off * D + d] = (unsigned char)kh_fp_encode(kh_round_f32(kh_dmul(v, inv)), 4, 3,
                                                      KH_FPM_FN_NAN);
    }
    uint32_t sb = kh_fp_encode(scale, 8, 23, KH_FPM_IEEE);
    unsigned char *sp = pg + (uint64_t)page_size * D + off * 4u;
    sp[0] = (unsigned char)sb;
    sp[1] = (unsigned char)(sb >> 8);
    sp[2] = (unsigned char)(sb >> 16);
    sp[3] = (unsigned char)(sb >> 24);
}

)

#endif
