// bf16: scale a vector
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(256) scale_bf16(const __nv_bfloat16 *x, __nv_bfloat16 *y, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __float2bfloat16(__bfloat162float(x[i]) * s);
}
