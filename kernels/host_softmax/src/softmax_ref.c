/* Trusted host reference for host_softmax_f32_n2048: torch.softmax in
 * float32 over the last axis.  Subtract the row maximum (as torch does),
 * exp in float32 precision, sum in double, one float32 division per element. */
#include <math.h>
#include <stdint.h>

void softmax_ref(const float *x, float *y, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float m = -INFINITY;
        for (int64_t c = 0; c < n; c++)
            m = xr[c] > m ? xr[c] : m;
        double s = 0.0;
        for (int64_t c = 0; c < n; c++) {
            float e = expf(xr[c] - m);
            yr[c] = e;
            s += (double)e;
        }
        for (int64_t c = 0; c < n; c++)
            yr[c] = (float)((double)yr[c] / s);
    }
}
