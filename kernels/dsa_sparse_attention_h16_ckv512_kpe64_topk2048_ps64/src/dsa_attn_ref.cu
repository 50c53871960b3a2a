// Trusted CUDA reference for dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64,
// following the definition's Python reference, per (token t, head h):
//   valid  = the entries of sparse_indices[t] that are not -1 (any position)
//   logits = (q_nope . Kc[idx]) + (q_pe . Kp[idx])     two float32 dot products, then the sum
//   s      = logits * sm_scale
//   lse    = logsumexp(s) / ln 2                        max + log(sum exp(s - max)), float32
//   p      = exp(s - max) / sum                         softmax
//   output = sum_j p_j * Kc[idx_j]  -> bfloat16          (Kc = ckv rows, as float32)
//   no valid index: output 0, lse -inf.
// One block per (t, h), 256 threads.  Logits: a thread per slot (strided
// rows: slow, simple); reductions by a fixed tree (deterministic); output: a
// thread per output column, slots in index order.
#include <cuda_bf16.h>

#define NT 256
#define TOPK 2048
#define DC 512 /* head_dim_ckv */
#define DP 64  /* head_dim_kpe */
#define NH 16  /* num_qo_heads */
#define NEG_INF (-__int_as_float(0x7f800000)) /* -inf: NVRTC has no math.h INFINITY */

static __device__ float block_reduce(float *red, float v, bool is_max)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            red[threadIdx.x] = is_max ? fmaxf(red[threadIdx.x], red[threadIdx.x + s])
                                      : __fadd_rn(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void __launch_bounds__(NT)
dsa_attn_ref(const __nv_bfloat16 *__restrict__ q_nope, const __nv_bfloat16 *__restrict__ q_pe,
             const __nv_bfloat16 *__restrict__ ckv_cache, const __nv_bfloat16 *__restrict__ kpe_cache,
             const int *__restrict__ sparse_indices, float sm_scale,
             __nv_bfloat16 *__restrict__ output, float *__restrict__ lse)
{
    __shared__ float p[TOPK];
    __shared__ float qn[DC], qp[DP];
    __shared__ float red[NT];
    const int th = blockIdx.x, t = th / NH; /* th = t * NH + h */
    const int *idx = sparse_indices + (long)t * TOPK;

    for (int d = threadIdx.x; d < DC; d += NT)
        qn[d] = __bfloat162float(q_nope[(long)th * DC + d]);
    for (int d = threadIdx.x; d < DP; d += NT)
        qp[d] = __bfloat162float(q_pe[(long)th * DP + d]);
    __syncthreads();

    float local_max = NEG_INF, local_valid = 0.f;
    for (int j = threadIdx.x; j < TOPK; j += NT) {
        const int i = idx[j];
        if (i == -1) {
            p[j] = NEG_INF;
            continue;
        }
        const __nv_bfloat16 *kc = ckv_cache + (long)i * DC, *kp = kpe_cache + (long)i * DP;
        float a = 0.f, b = 0.f;
        for (int d = 0; d < DC; d++)
            a = fmaf(qn[d], __bfloat162float(kc[d]), a);
        for (int d = 0; d < DP; d++)
            b = fmaf(qp[d], __bfloat162float(kp[d]), b);
        const float s = __fmul_rn(__fadd_rn(a, b), sm_scale);
        p[j] = s;
        local_max = fmaxf(local_max, s);
        local_valid += 1.f;
    }
    const float m = block_reduce(red, local_max, true);
    const float nvalid = block_reduce(red, local_valid, false);
    if (nvalid == 0.f) {
        for (int d = threadIdx.x; d < DC; d += NT)
            output[(long)th * DC + d] = __float2bfloat16_rn(0.f);
        if (threadIdx.x == 0)
            lse[th] = NEG_INF;
        return;
    }
    float local_sum = 0.f;
    for (int j = threadIdx.x; j < TOPK; j += NT)
        if (idx[j] != -1) {
            p[j] = expf(__fsub_rn(p[j], m));
            local_sum = __fadd_rn(local_sum, p[j]);
        }
    const float sum = block_reduce(red, local_sum, false);
    if (threadIdx.x == 0)
        lse[th] = __fdiv_rn(__fadd_rn(m, logf(sum)), 0.693147180559945309f);
    for (int j = threadIdx.x; j < TOPK; j += NT)
        if (idx[j] != -1)
            p[j] = __fdiv_rn(p[j], sum);
    __syncthreads();

    for (int d = threadIdx.x; d < DC; d += NT) {
        float o = 0.f;
        for (int j = 0; j < TOPK; j++) {
            const int i = idx[j];
            if (i != -1)
                o = fmaf(p[j], __bfloat162float(ckv_cache[(long)i * DC + d]), o);
        }
        output[(long)th * DC + d] = __float2bfloat16_rn(o);
    }
}
