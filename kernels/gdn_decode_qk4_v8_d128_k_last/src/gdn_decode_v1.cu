// Baseline for gdn_decode_qk4_v8_d128_k_last: the first version a competent
// engineer writes.  One block of 8 warps per (batch, value head); each warp
// owns 16 rows v of the [V][K] state; a lane holds 4 consecutive k of a row
// (one float4 load, coalesced: a warp reads one 512-byte row).  Per row:
// old_v by a warp all-reduce, the rank-1 update in registers,
// h = g*S + k * (new_v - old_v), stored as float4, and the output dot
// product by a second all-reduce.  The state is read once and written once.
#include <cuda_bf16.h>

#define D 128
#define HV 8
#define HQ 4

static __device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

static __device__ __forceinline__ float4 load_bf16x4(const __nv_bfloat16 *p)
{
    const __nv_bfloat162 *p2 = reinterpret_cast<const __nv_bfloat162 *>(p);
    float2 lo = __bfloat1622float2(p2[0]), hi = __bfloat1622float2(p2[1]);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}

extern "C" __global__ void __launch_bounds__(256)
gdn_decode_v1(const __nv_bfloat16 *__restrict__ q, const __nv_bfloat16 *__restrict__ k,
              const __nv_bfloat16 *__restrict__ v, const float *__restrict__ state,
              const float *__restrict__ A_log, const __nv_bfloat16 *__restrict__ a,
              const float *__restrict__ dt_bias, const __nv_bfloat16 *__restrict__ b,
              float scale, __nv_bfloat16 *__restrict__ output, float *__restrict__ new_state)
{
    const int bh = blockIdx.x, bi = bh / HV, h = bh % HV, qh = h / (HV / HQ);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    const float x = __bfloat162float(a[bh]) + dt_bias[h];
    const float sp = x > 20.f ? x : log1pf(expf(x));
    const float g = expf(-expf(A_log[h]) * sp);
    const float beta = 1.f / (1.f + expf(-__bfloat162float(b[bh])));
    const float sc = scale == 0.f ? 0.08838834764831845f : scale;

    const float4 qf = load_bf16x4(q + (bi * HQ + qh) * D + lane * 4);
    const float4 kf = load_bf16x4(k + (bi * HQ + qh) * D + lane * 4);

    for (int r = 0; r < D / 8; r++) {
        const int vi = warp * (D / 8) + r;
        const long row = ((long)bh * D + vi) * D + lane * 4;
        float4 s = *reinterpret_cast<const float4 *>(state + row);
        s.x *= g;
        s.y *= g;
        s.z *= g;
        s.w *= g;
        const float old_v = warp_sum(kf.x * s.x + kf.y * s.y + kf.z * s.z + kf.w * s.w);
        const float new_v = beta * __bfloat162float(v[bh * D + vi]) + (1.f - beta) * old_v;
        const float d = new_v - old_v;
        s.x += kf.x * d;
        s.y += kf.y * d;
        s.z += kf.z * d;
        s.w += kf.w * d;
        *reinterpret_cast<float4 *>(new_state + row) = s;
        const float o = warp_sum(qf.x * s.x + qf.y * s.y + qf.z * s.z + qf.w * s.w);
        if (lane == 0)
            output[bh * D + vi] = __float2bfloat16_rn(sc * o);
    }
}
