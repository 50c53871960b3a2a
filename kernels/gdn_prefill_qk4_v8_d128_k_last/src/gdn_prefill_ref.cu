// Trusted CUDA reference for gdn_prefill_qk4_v8_d128_k_last, following the
// definition's Python reference.  Per sequence s (tokens cu_seqlens[s] ..
// cu_seqlens[s+1]) and value head h, starting from state[s, h] ([V][K]):
// for each token t, exactly the decode step of
// ../gdn_decode_qk4_v8_d128_k_last/src/gdn_decode_ref.cu:
//   g = exp(-exp(A_log[h]) * softplus(a[t,h] + dt_bias[h])), beta = sigmoid(b[t,h])
//   old_state = g * S; old_v = k . old_state; new_v = beta * v + (1 - beta) * old_v
//   S = (old_state - k old_v^T) + k new_v^T;  output[t,h] = bf16(scale * q . S)
// with q/k head h / 2, element-wise steps unfused, k-order reductions; then
// new_state[s, h] = S.  An empty sequence leaves new_state[s] zero (the Python
// `continue`s past it).  scale == 0 means 1/sqrt(128).
// One block per (sequence, head), a thread per v; the state row lives in
// new_state (global, this thread's own row) and is updated in place per
// token.  Slow and simple: computed once.
#include <cuda_bf16.h>

#define D 128
#define HV 8
#define HQ 4

extern "C" __global__ void __launch_bounds__(D)
gdn_prefill_ref(const __nv_bfloat16 *__restrict__ q, const __nv_bfloat16 *__restrict__ k,
                const __nv_bfloat16 *__restrict__ v, const float *__restrict__ state,
                const float *__restrict__ A_log, const __nv_bfloat16 *__restrict__ a,
                const float *__restrict__ dt_bias, const __nv_bfloat16 *__restrict__ b,
                const long long *__restrict__ cu_seqlens, float scale,
                __nv_bfloat16 *__restrict__ output, float *__restrict__ new_state)
{
    __shared__ float qs[D], ks[D];
    const int sh = blockIdx.x, seq = sh / HV, h = sh % HV, qh = h / (HV / HQ);
    const int vi = threadIdx.x;
    const long long start = cu_seqlens[seq], end = cu_seqlens[seq + 1];
    float *S = new_state + ((long)sh * D + vi) * D; /* this thread's row v of [V][K] */
    const float *S0 = state + ((long)sh * D + vi) * D;
    const float sc = scale == 0.f ? 0.08838834764831845f : scale;

    if (end <= start) {
        for (int kk = 0; kk < D; kk++)
            S[kk] = 0.f;
        return;
    }
    for (int kk = 0; kk < D; kk++)
        S[kk] = S0[kk];

    for (long long t = start; t < end; t++) {
        __syncthreads(); /* the previous token's qs / ks are no longer read */
        qs[vi] = __bfloat162float(q[(t * HQ + qh) * D + vi]);
        ks[vi] = __bfloat162float(k[(t * HQ + qh) * D + vi]);
        const float x = __fadd_rn(__bfloat162float(a[t * HV + h]), dt_bias[h]);
        const float sp = x > 20.f ? x : log1pf(expf(x));
        const float g = expf(__fmul_rn(-expf(A_log[h]), sp));
        const float beta = 1.f / __fadd_rn(1.f, expf(-__bfloat162float(b[t * HV + h])));
        __syncthreads();

        float old_v = 0.f;
        for (int kk = 0; kk < D; kk++)
            old_v = fmaf(ks[kk], __fmul_rn(g, S[kk]), old_v);
        const float new_v = __fadd_rn(__fmul_rn(beta, __bfloat162float(v[(t * HV + h) * D + vi])),
                                      __fmul_rn(__fsub_rn(1.f, beta), old_v));
        float out = 0.f;
        for (int kk = 0; kk < D; kk++) {
            const float os = __fmul_rn(g, S[kk]);
            const float hs = __fadd_rn(__fsub_rn(os, __fmul_rn(ks[kk], old_v)), __fmul_rn(ks[kk], new_v));
            S[kk] = hs;
            out = fmaf(qs[kk], hs, out);
        }
        output[(t * HV + h) * D + vi] = __float2bfloat16_rn(__fmul_rn(sc, out));
    }
}
