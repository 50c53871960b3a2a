// cooperative_groups + bf16: dot product
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_bf16.h>
namespace cg = cooperative_groups;
extern "C" __global__ void __launch_bounds__(256) cg_dot_bf16(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *out, int n)
{
    auto warp = cg::tiled_partition<32>(cg::this_thread_block());
    float v = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v += __bfloat162float(a[i]) * __bfloat162float(b[i]);
    v = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0)
        atomicAdd(out, v);
}
