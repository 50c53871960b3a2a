// bf16 + fp16: SiLU(gate) * up, bf16 in, fp16 out
#include <cuda_bf16.h>
#include <cuda_fp16.h>
extern "C" __global__ void silu_mul(const __nv_bfloat16 *gate, const __nv_bfloat16 *up, __half *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = __bfloat162float(gate[i]);
        out[i] = __float2half(g / (1.f + __expf(-g)) * __bfloat162float(up[i]));
    }
}
