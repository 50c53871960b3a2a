// Baseline for dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64: one block
// of 8 warps per (token, head).  Logits: a warp per slot, lanes across the 576
// dimensions (each lane reads 16 ckv + 2 kpe values with vector loads, so a
// gathered row is one coalesced read), shuffle reduction.  Softmax in shared
// memory; output: a thread per two columns, slots in order.  The 16 heads of a
// token re-read the same gathered rows (the obvious next step is to share
// them across heads).
#include <cuda_bf16.h>

#define NT 256
#define TOPK 2048
#define DC 512
#define DP 64
#define NH 16
#define NEG_INF (-__int_as_float(0x7f800000)) /* -inf: NVRTC has no math.h INFINITY */

static __device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

extern "C" __global__ void __launch_bounds__(NT)
dsa_attn_v1(const __nv_bfloat16 *__restrict__ q_nope, const __nv_bfloat16 *__restrict__ q_pe,
            const __nv_bfloat16 *__restrict__ ckv_cache, const __nv_bfloat16 *__restrict__ kpe_cache,
            const int *__restrict__ sparse_indices, float sm_scale,
            __nv_bfloat16 *__restrict__ output, float *__restrict__ lse)
{
    __shared__ float p[TOPK];
    __shared__ float wred[2][NT / 32];
    const int th = blockIdx.x, t = th / NH;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int *idx = sparse_indices + (long)t * TOPK;

    /* this lane's 16 q_nope values (columns lane*16 ..) and 2 q_pe values */
    float qn[16], qp[2];
    {
        const uint4 *src = reinterpret_cast<const uint4 *>(q_nope + (long)th * DC + lane * 16);
#pragma unroll
        for (int u = 0; u < 2; u++) {
            uint4 r = src[u];
            const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&r);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float2 f = __bfloat1622float2(h2[i]);
                qn[u * 8 + 2 * i] = f.x;
                qn[u * 8 + 2 * i + 1] = f.y;
            }
        }
        float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(q_pe + (long)th * DP + lane * 2));
        qp[0] = f.x;
        qp[1] = f.y;
    }

    float wmax = NEG_INF;
    for (int j = warp; j < TOPK; j += NT / 32) {
        const int i = idx[j];
        if (i == -1) {
            if (lane == 0)
                p[j] = NEG_INF;
            continue;
        }
        const uint4 *kc = reinterpret_cast<const uint4 *>(ckv_cache + (long)i * DC + lane * 16);
        float acc = 0.f;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            uint4 r = kc[u];
            const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&r);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 f = __bfloat1622float2(h2[k]);
                acc += qn[u * 8 + 2 * k] * f.x + qn[u * 8 + 2 * k + 1] * f.y;
            }
        }
        float2 kp = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(kpe_cache + (long)i * DP + lane * 2));
        acc += qp[0] * kp.x + qp[1] * kp.y;
        const float s = warp_sum(acc) * sm_scale;
        if (lane == 0)
            p[j] = s;
        wmax = fmaxf(wmax, s);
    }
    if (lane == 0)
        wred[0][warp] = wmax;
    __syncthreads();
    float m = NEG_INF;
#pragma unroll
    for (int w = 0; w < NT / 32; w++)
        m = fmaxf(m, wred[0][w]);

    if (m == NEG_INF) { /* no valid index */
        for (int d = threadIdx.x; d < DC; d += NT)
            output[(long)th * DC + d] = __float2bfloat16_rn(0.f);
        if (threadIdx.x == 0)
            lse[th] = NEG_INF;
        return;
    }
    float s = 0.f;
    for (int j = threadIdx.x; j < TOPK; j += NT) {
        const float e = p[j] == NEG_INF ? 0.f : __expf(p[j] - m);
        p[j] = e;
        s += e;
    }
    s = warp_sum(s);
    if (lane == 0)
        wred[1][warp] = s;
    __syncthreads();
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < NT / 32; w++)
        sum += wred[1][w];
    if (threadIdx.x == 0)
        lse[th] = (m + logf(sum)) * 1.4426950408889634f;
    const float inv = 1.f / sum;

    const int d = threadIdx.x * 2;
    float o0 = 0.f, o1 = 0.f;
    for (int j = 0; j < TOPK; j++) {
        const int i = idx[j];
        if (i == -1)
            continue;
        float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(ckv_cache + (long)i * DC + d));
        o0 += p[j] * f.x;
        o1 += p[j] * f.y;
    }
    *reinterpret_cast<__nv_bfloat162 *>(output + (long)th * DC + d) = __floats2bfloat162_rn(o0 * inv, o1 * inv);
}
