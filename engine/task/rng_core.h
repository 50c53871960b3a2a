/* rng_core.h: the arithmetic that must give the same bits on the host and on
 * the GPU: Philox4x32-10, the uniform and normal transforms of the input
 * generator, and the round-to-nearest-even encoder of the small float formats.
 * It is written once, inside KH_CORE_DEFINE(...), which both compiles it here
 * and keeps it as a string (kh_core_source()) that rng.c hands to NVRTC, so the
 * device runs the very same text.  Include only from dtype.c and rng.c.
 *
 * Rules for the text inside KH_CORE_DEFINE (it must stay valid C11 and CUDA):
 * no preprocessor lines, no // comments, no libm except sqrt and sqrtf; every
 * double operation goes through kh_dadd/kh_dsub/kh_dmul/kh_ddiv/kh_dsqrt and
 * every float operation through kh_fadd/kh_fsub/kh_fmul/kh_fdiv/kh_fsqrt,
 * which on the host keep each product rounded (an asm barrier, so no flag can
 * fuse a multiply and an add into an FMA) and on the device are __dadd_rn-
 * style intrinsics (never contracted); float constants are hexadecimal
 * literals (exact).  IEEE-754 makes each of these correctly rounded on both
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
#define KH_FP_BARRIER_F(r) __asm__("" : "+x"(r))
#elif defined(__GNUC__) && defined(__aarch64__)
#define KH_FP_BARRIER(r) __asm__("" : "+w"(r))
#define KH_FP_BARRIER_F(r) __asm__("" : "+w"(r))
#else
#define KH_FP_BARRIER(r)                                                                  \
    do {                                                                                  \
        volatile double kh_v_ = (r);                                                      \
        (r) = kh_v_;                                                                      \
    } while (0)
#define KH_FP_BARRIER_F(r)                                                                \
    do {                                                                                  \
        volatile float kh_v_ = (r);                                                       \
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
static inline float kh_fadd(float a, float b) { return a + b; }
static inline float kh_fsub(float a, float b) { return a - b; }
static inline float kh_fmul(float a, float b)
{
    float r = a * b;
    KH_FP_BARRIER_F(r);
    return r;
}
static inline float kh_fdiv(float a, float b) { return a / b; }
static inline float kh_fsqrt(float a) { return sqrtf(a); }
static inline uint32_t kh_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float kh_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
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

/* log(x) for x in [2^-24, 1] (float32): x = m 2^e with m in [sqrt(1/2),
   sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1) (m-1 exact), series to s^9
   (|s| < 0.172: the next term is below 3e-9 of the sum); e log 2 in two parts,
   the first exact for any e it meets. */
KH_FN float kh_logf(float x)
{
    uint32_t u = kh_f2u(x);
    int e = (int)((u >> 23) & 0xFFu) - 127;
    float m = kh_u2f((u & 0x7FFFFFu) | 0x3F800000u);
    if (m > 0x1.6a09e6p+0f) {
        m = kh_fmul(m, 0x1p-1f);
        e += 1;
    }
    float s = kh_fdiv(kh_fsub(m, 0x1p+0f), kh_fadd(m, 0x1p+0f));
    float s2 = kh_fmul(s, s);
    float p = 0x1.c71c72p-4f;
    p = kh_fadd(kh_fmul(p, s2), 0x1.24924ap-3f);
    p = kh_fadd(kh_fmul(p, s2), 0x1.99999ap-3f);
    p = kh_fadd(kh_fmul(p, s2), 0x1.555556p-2f);
    p = kh_fadd(kh_fmul(p, s2), 0x1p+0f);
    float lm = kh_fmul(kh_fmul(0x1p+1f, s), p);
    float de = (float)e;
    return kh_fadd(kh_fadd(kh_fmul(de, 0x1.62e4p-1f), lm), kh_fmul(de, 0x1.7f7d1cp-20f));
}

/* cos(2 pi u / 2^24) for an integer u in [0, 2^24): the nearest quarter turn
   q and the rest x = f pi/2, |f| <= 1/2, both from integers (exact); then the
   cosine's Taylor series of x (quarters 0 and 2) or the sine's (1 and 3), to
   x^10 and x^11 (|x| <= pi/4: the next terms are below 2e-10).  The two series
   have one shape (five terms by Horner in x^2, the sine's times x at the
   end), so one chain runs whichever the quarter needs, its coefficients
   picked per element: a GPU warp whose lanes fall in different quarters
   does not run both.  Near a zero of the cosine the sine's series of a small
   x keeps the result's relative precision. */
KH_FN float kh_cos2pi24(uint32_t u)
{
    uint32_t q = (u + 0x200000u) >> 22;
    int fi = (int)u - (int)(q << 22);
    float x = kh_fmul(kh_fmul((float)fi, 0x1p-22f), 0x1.921fb6p+0f);
    float x2 = kh_fmul(x, x);
    int odd = (int)(q & 1u);
    float v = odd ? 0x1.ae6456p-26f : 0x1.27e4fcp-22f;
    v = kh_fsub(odd ? 0x1.71de3ap-19f : 0x1.a01a02p-16f, kh_fmul(v, x2));
    v = kh_fsub(odd ? 0x1.a01a02p-13f : 0x1.6c16c2p-10f, kh_fmul(v, x2));
    v = kh_fsub(odd ? 0x1.111112p-7f : 0x1.555556p-5f, kh_fmul(v, x2));
    v = kh_fsub(odd ? 0x1.555556p-3f : 0x1p-1f, kh_fmul(v, x2));
    v = kh_fsub(0x1p+0f, kh_fmul(v, x2));
    if (odd)
        v = kh_fmul(v, x);
    /* quarter 0: cos x; 1: -sin x; 2: -cos x; 3 (and 4, a full turn): sin x, cos x */
    q &= 3u;
    return (q == 1u || q == 2u) ? kh_fsub(0x0p+0f, v) : v;
}

/* A standard normal (float32) from two words (Box-Muller, cosine branch
   only): u1 = (a's top 24 bits + 1) 2^-24 in (0, 1], the angle from b's top
   24 bits.  One Philox block gives two: (w0, w1) and (w2, w3). */
KH_FN float kh_rng_normal2(uint32_t a, uint32_t b)
{
    float u1 = kh_fmul((float)((a >> 8) + 1u), 0x1p-24f);
    float rad = kh_fsqrt(kh_fmul(-0x1p+1f, kh_logf(u1)));
    return kh_fmul(rad, kh_cos2pi24(b >> 8));
}

/* The float element idx of stream `stream` under seed: the Philox block of
   counter (idx / 2 low, idx / 2 high, stream, 0), its first half for an even
   idx, its second for an odd one. */
KH_FN float kh_rng_normal_idx(uint64_t seed, uint32_t stream, uint64_t idx)
{
    uint32_t w[4];
    kh_rng_words(seed, stream, idx >> 1, w);
    return (idx & 1u) ? kh_rng_normal2(w[2], w[3]) : kh_rng_normal2(w[0], w[1]);
}

/* What the generator draws, by kind (rng.c maps dtypes to kinds). */
enum {
    KH_RK_F32 = 0, KH_RK_F16, KH_RK_BF16, KH_RK_F8E4M3, KH_RK_F8E5M2, KH_RK_F4E2M1,
    KH_RK_I64, KH_RK_I32, KH_RK_I16, KH_RK_I8, KH_RK_BOOL
};

/* The longest DSA k-cache token (head_dim) whose codes are kept between the
   two passes of kh_rng_dsa_kcache_token instead of being drawn again. */
enum { KH_DSA_KEEP = 256 };

/* The code of a float kind for the float32 draw z: z rounded to the dtype
   (fp8 and fp4 after clamping to [-2, 2]). */
KH_FN uint64_t kh_rng_float_code(int kind, float z)
{
    double v = (double)z;
    if (kind >= KH_RK_F8E4M3) {
        if (v > 2.0)
            v = 2.0;
        if (v < -2.0)
            v = -2.0;
    }
    if (kind == KH_RK_F32)
        return kh_f2u(z);
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

/* The code (bit pattern, zero-extended) of element idx.  FlashInfer-Bench's
   distributions (fib-harness.md, "Inputs (gen_inputs / _rand_tensor)"):
   floats randn (drawn as float32, then rounded to the dtype); fp8/fp4
   randn(float32).clamp(-2, 2).to(dtype); int8 in [-128, 128); int16/32/64 in
   [-1024, 1024); bool 0/1.  Integers: lo + floor(w0 * range / 2^32), a bias
   below range / 2^32 (< 1e-6). */
KH_FN uint64_t kh_rng_code(int kind, uint64_t seed, uint32_t stream, uint64_t idx)
{
    if (kind <= KH_RK_F4E2M1)
        return kh_rng_float_code(kind, kh_rng_normal_idx(seed, stream, idx));
    uint32_t w[4];
    kh_rng_words(seed, stream, idx, w);
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
