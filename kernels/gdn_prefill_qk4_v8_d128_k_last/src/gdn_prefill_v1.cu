// Baseline for gdn_prefill_qk4_v8_d128_k_last: one block of 8 warps per
// (sequence, value head); warp w owns state rows 16w .. 16w+15, each lane 4
// consecutive k of every row, so the whole [128][128] state stays in registers
// (64 floats per lane) across the sequence's tokens.  Per token: the gates, two
// warp all-reduces per row (old_v and the output), the rank-1 update in
// registers.  The state is read once and written once per sequence; the
// tokens are processed one after another (no chunked/parallel scan: that is
// what the search is for).
#include <cuda_bf16.h>

#define D 128
#define HV 8
#define HQ 4
#define ROWS 16 /* rows per warp */

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

extern "C" __global__ void __launch_bounds__(256, 1)
gdn_prefill_v1(const __nv_bfloat16 *__restrict__ q, const __nv_bfloat16 *__restrict__ k,
               const __nv_bfloat16 *__restrict__ v, const float *__restrict__ state,
               const float *__restrict__ A_log, const __nv_bfloat16 *__restrict__ a,
               const float *__restrict__ dt_bias, const __nv_bfloat16 *__restrict__ b,
               const long long *__restrict__ cu_seqlens, float scale,
               __nv_bfloat16 *__restrict__ output, float *__restrict__ new_state)
{
    const int sh = blockIdx.x, seq = sh / HV, h = sh % HV, qh = h / (HV / HQ);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long start = cu_seqlens[seq], end = cu_seqlens[seq + 1];
    const float sc = scale == 0.f ? 0.08838834764831845f : scale;
    const long base = ((long)sh * D + warp * ROWS) * D + lane * 4;

    if (end <= start) {
#pragma unroll
        for (int r = 0; r < ROWS; r++)
            *reinterpret_cast<float4 *>(new_state + base + r * D) = make_float4(0.f, 0.f, 0.f, 0.f);
        return;
    }
    float4 s[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
        s[r] = *reinterpret_cast<const float4 *>(state + base + r * D);

    const float ea = expf(A_log[h]), dtb = dt_bias[h];
    for (long long t = start; t < end; t++) {
        const float x = __bfloat162float(a[t * HV + h]) + dtb;
        const float g = expf(-ea * (x > 20.f ? x : log1pf(expf(x))));
        const float beta = 1.f / (1.f + expf(-__bfloat162float(b[t * HV + h])));
        const float4 qf = load_bf16x4(q + (t * HQ + qh) * D + lane * 4);
        const float4 kf = load_bf16x4(k + (t * HQ + qh) * D + lane * 4);
        const __nv_bfloat16 *vt = v + (t * HV + h) * D + warp * ROWS;
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            s[r].x *= g;
            s[r].y *= g;
            s[r].z *= g;
            s[r].w *= g;
            const float old_v = warp_sum(kf.x * s[r].x + kf.y * s[r].y + kf.z * s[r].z + kf.w * s[r].w);
            const float d = beta * (__bfloat162float(vt[r]) - old_v);
            s[r].x += kf.x * d;
            s[r].y += kf.y * d;
            s[r].z += kf.z * d;
            s[r].w += kf.w * d;
            const float o = warp_sum(qf.x * s[r].x + qf.y * s[r].y + qf.z * s[r].z + qf.w * s[r].w);
            if (lane == r) /* spread the stores over the lanes */
                output[(t * HV + h) * D + warp * ROWS + r] = __float2bfloat16_rn(sc * o);
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++)
        *reinterpret_cast<float4 *>(new_state + base + r * D) = s[r];
}
