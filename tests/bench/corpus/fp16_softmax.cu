// fp16: row softmax, one warp per row
#include <cuda_fp16.h>
extern "C" __global__ void softmax_f16(const __half *x, __half *y, int rows, int cols)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const __half *xr = x + (size_t)row * cols;
    float m = __int_as_float(0xff800000); // -inf
    for (int c = lane; c < cols; c += 32)
        m = fmaxf(m, __half2float(xr[c]));
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
    for (int c = lane; c < cols; c += 32)
        s += __expf(__half2float(xr[c]) - m);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    for (int c = lane; c < cols; c += 32)
        y[(size_t)row * cols + c] = __float2half(__expf(__half2float(xr[c]) - m) / s);
}
