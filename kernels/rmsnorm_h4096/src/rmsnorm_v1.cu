// Baseline for rmsnorm_h4096: what a competent engineer writes first.  One
// block per row with hidden/8 threads; each thread loads its 8 bf16 values in
// one 16-byte load, keeps them in registers, and the row's sum of squares is
// reduced by warp shuffles and one shared-memory pass, so the row is read once.
// Requires hidden == 8 * blockDim.x and 16-byte aligned rows (hidden % 8 == 0).
#include <cuda_bf16.h>

extern "C" __global__ void __launch_bounds__(1024)
rmsnorm_v1(const __nv_bfloat16 *__restrict__ hidden_states,
           const __nv_bfloat16 *__restrict__ weight,
           __nv_bfloat16 *__restrict__ output, int hidden)
{
    __shared__ float warp_sums[32];
    const long base = (long)blockIdx.x * hidden + threadIdx.x * 8;
    uint4 raw = *reinterpret_cast<const uint4 *>(hidden_states + base);
    uint4 wraw = *reinterpret_cast<const uint4 *>(weight + threadIdx.x * 8);
    const __nv_bfloat162 *xv = reinterpret_cast<const __nv_bfloat162 *>(&raw);
    const __nv_bfloat162 *wv = reinterpret_cast<const __nv_bfloat162 *>(&wraw);

    float v[8];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(xv[i]);
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
        s += f.x * f.x + f.y * f.y;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0)
        warp_sums[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < nwarps ? warp_sums[lane] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0)
            warp_sums[0] = s;
    }
    __syncthreads();
    const float inv_rms = rsqrtf(warp_sums[0] / (float)hidden + 1e-5f);

    uint4 packed;
    __nv_bfloat162 *ov = reinterpret_cast<__nv_bfloat162 *>(&packed);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 w = __bfloat1622float2(wv[i]);
        ov[i] = __floats2bfloat162_rn((v[2 * i] * inv_rms) * w.x, (v[2 * i + 1] * inv_rms) * w.y);
    }
    *reinterpret_cast<uint4 *>(output + base) = packed;
}
