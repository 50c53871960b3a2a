// bf16: RMSNorm, one block per row, bf16x2 loads
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(512) rmsnorm_bf16(const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                                               __nv_bfloat16 *y, int d, float eps)
{
    __shared__ float red[32];
    const __nv_bfloat162 *x2 = reinterpret_cast<const __nv_bfloat162 *>(x + (size_t)blockIdx.x * d);
    float ss = 0.f;
    for (int i = threadIdx.x; i < d / 2; i += blockDim.x) {
        float2 v = __bfloat1622float2(x2[i]);
        ss += v.x * v.x + v.y * v.y;
    }
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        ss = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (threadIdx.x == 0)
            red[0] = rsqrtf(ss / d + eps);
    }
    __syncthreads();
    float r = red[0];
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        y[(size_t)blockIdx.x * d + i] =
            __float2bfloat16(__bfloat162float(x[(size_t)blockIdx.x * d + i]) * r * __bfloat162float(w[i]));
}
