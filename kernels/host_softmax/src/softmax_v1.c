/* Baseline for host_softmax_f32_n2048: three passes per row (max, exp and
 * sum in float, scale by the reciprocal), written to let the compiler
 * vectorise the max and scale loops. */
#include <math.h>
#include <stdint.h>

void softmax_v1(const float *restrict x, float *restrict y, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float m = xr[0];
        for (int64_t c = 1; c < n; c++)
            m = fmaxf(m, xr[c]);
        float s = 0.f;
        for (int64_t c = 0; c < n; c++) {
            yr[c] = expf(xr[c] - m);
            s += yr[c];
        }
        float inv = 1.0f / s;
        for (int64_t c = 0; c < n; c++)
            yr[c] *= inv;
    }
}
