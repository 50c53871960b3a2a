/* Baseline for host_rmsnorm_h1024: one pass for the sum of squares with four
 * float accumulators (so the compiler can vectorise), one pass to scale.
 * The first version a competent engineer writes for a CPU. */
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void rmsnorm_v1(const uint16_t *restrict x, const uint16_t *restrict w, uint16_t *restrict out,
                int64_t rows, int64_t hidden)
{
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *xr = x + r * hidden;
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
        int64_t c = 0;
        for (; c + 4 <= hidden; c += 4) {
            float a = bf16_to_f32(xr[c]), b = bf16_to_f32(xr[c + 1]);
            float d = bf16_to_f32(xr[c + 2]), e = bf16_to_f32(xr[c + 3]);
            s0 += a * a;
            s1 += b * b;
            s2 += d * d;
            s3 += e * e;
        }
        for (; c < hidden; c++) {
            float a = bf16_to_f32(xr[c]);
            s0 += a * a;
        }
        float inv_rms = 1.0f / sqrtf((s0 + s1 + s2 + s3) / (float)hidden + 1e-5f);
        for (c = 0; c < hidden; c++)
            out[r * hidden + c] = f32_to_bf16((bf16_to_f32(xr[c]) * inv_rms) * bf16_to_f32(w[c]));
    }
}
