// Trusted CUDA reference for gdn_decode_qk4_v8_d128_k_last, following the
// definition's Python reference line by line, per (batch b, value head h):
//   x    = float(a[b,h]) + dt_bias[h]
//   g    = exp(-exp(A_log[h]) * softplus(x))      softplus: x > 20 ? x : log1p(exp(x))
//   beta = sigmoid(float(b[b,h]))
//   q_h, k_h = q, k of head h / (8 / 4)           (repeat_interleave over heads)
//   old_state[k][v] = g * state[b,h,v,k]          (k-last layout: state is [V][K])
//   old_v[v]  = sum_k k_h[k] * old_state[k][v]
//   new_v[v]  = beta * v[v] + (1 - beta) * old_v[v]
//   h[k][v]   = (old_state[k][v] - k_h[k] * old_v[v]) + k_h[k] * new_v[v]
//   output[v] = scale * sum_k q_h[k] * h[k][v]     -> bfloat16 (one rounding)
//   new_state[b,h,v,k] = h[k][v]                   (float32)
//   scale == 0 means 1 / sqrt(128).
// The element-wise steps use __fmul_rn / __fadd_rn / __fsub_rn, so that no
// multiply-add is fused where torch rounds twice; the two reductions over k
// accumulate in k order in float32 (torch's matmul order is its own).
// One block per (b, h), one thread per v: simple, not fast.
#include <cuda_bf16.h>

#define D 128   /* head_size */
#define HV 8    /* num_v_heads */
#define HQ 4    /* num_q_heads = num_k_heads */

extern "C" __global__ void __launch_bounds__(D)
gdn_decode_ref(const __nv_bfloat16 *__restrict__ q, const __nv_bfloat16 *__restrict__ k,
               const __nv_bfloat16 *__restrict__ v, const float *__restrict__ state,
               const float *__restrict__ A_log, const __nv_bfloat16 *__restrict__ a,
               const float *__restrict__ dt_bias, const __nv_bfloat16 *__restrict__ b,
               float scale, __nv_bfloat16 *__restrict__ output, float *__restrict__ new_state)
{
    __shared__ float qs[D], ks[D];
    const int bh = blockIdx.x;          /* b * HV + h */
    const int bi = bh / HV, h = bh % HV;
    const int qh = h / (HV / HQ);
    const int vi = threadIdx.x;

    qs[vi] = __bfloat162float(q[(bi * HQ + qh) * D + vi]);
    ks[vi] = __bfloat162float(k[(bi * HQ + qh) * D + vi]);

    const float x = __fadd_rn(__bfloat162float(a[bh]), dt_bias[h]);
    const float sp = x > 20.f ? x : log1pf(expf(x));
    const float g = expf(__fmul_rn(-expf(A_log[h]), sp));
    const float beta = 1.f / __fadd_rn(1.f, expf(-__bfloat162float(b[bh])));
    const float sc = scale == 0.f ? 0.08838834764831845f : scale;
    __syncthreads();

    const float *S = state + ((long)bh * D + vi) * D; /* row v of [V][K] */
    float *NS = new_state + ((long)bh * D + vi) * D;

    float old_v = 0.f;
    for (int kk = 0; kk < D; kk++)
        old_v = fmaf(ks[kk], __fmul_rn(g, S[kk]), old_v);
    const float new_v = __fadd_rn(__fmul_rn(beta, __bfloat162float(v[bh * D + vi])),
                                  __fmul_rn(__fsub_rn(1.f, beta), old_v));

    float out = 0.f;
    for (int kk = 0; kk < D; kk++) {
        const float os = __fmul_rn(g, S[kk]);
        const float hs = __fadd_rn(__fsub_rn(os, __fmul_rn(ks[kk], old_v)), __fmul_rn(ks[kk], new_v));
        NS[kk] = hs;
        out = fmaf(qs[kk], hs, out);
    }
    output[bh * D + vi] = __float2bfloat16_rn(__fmul_rn(sc, out));
}
