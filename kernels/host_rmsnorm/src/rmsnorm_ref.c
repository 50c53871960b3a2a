/* Trusted host reference for host_rmsnorm_h1024, following the definition's
 * Python reference: x in float32, mean of squares, rsqrt(mean + 1e-5f),
 * (x * inv_rms) * w, one round-to-nearest-even to bf16.  The sum of squares
 * is accumulated in double (exact enough that the float32 mean is the
 * correctly rounded one; torch's float32 sum differs from it by a few ulp). */
#include <math.h>
#include <stdint.h>
#include <string.h>

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);          /* round to nearest even */
    return (uint16_t)(u >> 16);
}

void rmsnorm_ref(const uint16_t *x, const uint16_t *w, uint16_t *out, int64_t rows, int64_t hidden)
{
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *xr = x + r * hidden;
        double s = 0.0;
        for (int64_t c = 0; c < hidden; c++) {
            float v = bf16_to_f32(xr[c]);
            s += (double)(v * v);
        }
        float mean = (float)(s / (double)hidden);
        float inv_rms = 1.0f / sqrtf(mean + 1e-5f);
        for (int64_t c = 0; c < hidden; c++)
            out[r * hidden + c] = f32_to_bf16((bf16_to_f32(xr[c]) * inv_rms) * bf16_to_f32(w[c]));
    }
}
