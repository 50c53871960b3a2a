// Baseline for moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048: what a
// competent engineer writes first.
//   route:    one block per token (thread = expert, warp = group), DeepSeek-V3
//             no-aux routing; each local choice appended to its expert's slot list.
//   gemm1:    per local expert, a grouped GEMM over its routed tokens: 64 x 64
//             tiles of both halves of W13, fp8 bytes loaded 4 at a time and
//             widened to float in shared memory, the block scales applied once
//             per 128-deep block (partial sums times hs_scale * w_scale), SwiGLU
//             in the epilogue, C in float32.
//   gemm2:    the same over W2, the routing weight in the epilogue, atomicAdd
//             into a float32 [T, H] accumulator.
//   finalize: bf16.
// Left to the search (the obvious next steps): FP8 tensor-core MMA
// (mma.sync e4m3 / wgmma) instead of float FMA, double-buffered cp.async /
// TMA loads, C in bf16 or fp8, larger tiles for large T and split-K / more
// blocks for small T (where the weights dominate), one fused kernel for the
// two GEMMs, skipping experts that no token chose without empty blocks.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define E 256
#define EL 32
#define TOPK 8
#define NGROUP 8
#define KGROUP 4
#define H 7168
#define I 2048
#define NHB 56
#define NIB 16
#define NG1B 32
#define QB 128
#define TM 64
#define TN 64
#define TK 32
#define LD (TM + 4) /* shared row length: float4-aligned, fewer bank conflicts */
#define NEG_INF (-__int_as_float(0x7f800000))

static __device__ __forceinline__ float4 fp8x4_to_float4(unsigned int word)
{
    __nv_fp8x4_e4m3 v;
    v.__x = word;
    return float4(v);
}

extern "C" __global__ void __launch_bounds__(E)
moe_v1_route(const float *__restrict__ logits, const __nv_bfloat16 *__restrict__ bias,
             int local_expert_offset, float routed_scaling_factor, float *__restrict__ topk_w,
             int *__restrict__ counts, int *__restrict__ lists, int T)
{
    __shared__ float s_sig[E], s_wb[E], gscore[NGROUP];
    __shared__ int kept[E], chosen[E];
    __shared__ float wsum;
    const int t = blockIdx.x, e = threadIdx.x, lane = e & 31, g = e >> 5;

    const float l = logits[(long)t * E + e];
    const float s = 1.f / (1.f + expf(-l));
    const float wb = s + __bfloat162float(bias[e]);
    s_sig[e] = s;
    s_wb[e] = wb;
    float v1 = wb;
    for (int o = 16; o > 0; o >>= 1)
        v1 = fmaxf(v1, __shfl_xor_sync(0xffffffffu, v1, o));
    const int first = __ffs(__ballot_sync(0xffffffffu, wb == v1)) - 1;
    float v2 = lane == first ? NEG_INF : wb;
    for (int o = 16; o > 0; o >>= 1)
        v2 = fmaxf(v2, __shfl_xor_sync(0xffffffffu, v2, o));
    if (lane == 0)
        gscore[g] = v1 + v2;
    __syncthreads();
    int grank = 0;
    for (int j = 0; j < NGROUP; j++)
        grank += gscore[j] > gscore[g] || (gscore[j] == gscore[g] && j < g);
    kept[e] = grank < KGROUP;
    __syncthreads();
    int rank = 0;
    if (kept[e])
        for (int j = 0; j < E; j++)
            rank += kept[j] && (s_wb[j] > wb || (s_wb[j] == wb && j < e));
    chosen[e] = kept[e] && rank < TOPK;
    __syncthreads();
    if (e == 0) {
        float sum = 0.f;
        for (int j = 0; j < E; j++)
            if (chosen[j])
                sum += s_sig[j];
        wsum = sum + 1e-20f;
    }
    __syncthreads();
    if (chosen[e]) {
        int pos = 0;
        for (int j = 0; j < e; j++)
            pos += chosen[j];
        const int slot = t * TOPK + pos;
        topk_w[slot] = s / wsum * routed_scaling_factor;
        const int le = e - local_expert_offset;
        if (le >= 0 && le < EL)
            lists[(long)le * T + atomicAdd(&counts[le], 1)] = slot;
    }
}

// grid (I / TN, ceil(T / TM), EL), 256 threads; thread (ty, tx): rows ty*4..,
// columns tx*4.. of the tile, for both halves of W13.
extern "C" __global__ void __launch_bounds__(256)
moe_v1_gemm1(const unsigned char *__restrict__ hs, const float *__restrict__ hs_scale,
             const unsigned char *__restrict__ w13, const float *__restrict__ s13,
             const int *__restrict__ counts, const int *__restrict__ lists,
             float *__restrict__ C, int T)
{
    __shared__ __align__(16) float As[TK][LD];
    __shared__ __align__(16) float W1s[TK][LD];
    __shared__ __align__(16) float W2s[TK][LD];
    __shared__ int tok[TM];
    __shared__ float sa[TM];
    const int le = blockIdx.z, cnt = counts[le], r0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    if (r0 >= cnt)
        return;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    if (tid < TM)
        tok[tid] = r0 + tid < cnt ? lists[(long)le * T + r0 + tid] / TOPK : -1;
    __syncthreads();
    const long wrow1 = (long)le * (2 * I) + n0, wrow2 = wrow1 + I;
    const float *sw1 = s13 + ((long)le * NG1B + n0 / QB) * NHB;
    const float *sw2 = s13 + ((long)le * NG1B + (I + n0) / QB) * NHB;

    float x1[4][4] = {}, x2[4][4] = {}, p1[4][4] = {}, p2[4][4] = {};
    for (int k0 = 0; k0 < H; k0 += TK) {
        if (k0 % QB == 0 && tid < TM)
            sa[tid] = tok[tid] < 0 ? 0.f : hs_scale[(long)(k0 / QB) * T + tok[tid]];
        for (int q = tid; q < TM * TK / 4; q += 256) {
            const int row = q / (TK / 4), c = (q % (TK / 4)) * 4, tk = tok[row];
            const float4 a = tk < 0 ? make_float4(0.f, 0.f, 0.f, 0.f)
                                    : fp8x4_to_float4(*(const unsigned int *)(hs + (long)tk * H + k0 + c));
            const float4 b1 = fp8x4_to_float4(*(const unsigned int *)(w13 + (wrow1 + row) * H + k0 + c));
            const float4 b2 = fp8x4_to_float4(*(const unsigned int *)(w13 + (wrow2 + row) * H + k0 + c));
            As[c][row] = a.x; As[c + 1][row] = a.y; As[c + 2][row] = a.z; As[c + 3][row] = a.w;
            W1s[c][row] = b1.x; W1s[c + 1][row] = b1.y; W1s[c + 2][row] = b1.z; W1s[c + 3][row] = b1.w;
            W2s[c][row] = b2.x; W2s[c + 1][row] = b2.y; W2s[c + 2][row] = b2.z; W2s[c + 3][row] = b2.w;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < TK; kk++) {
            const float4 a = *(const float4 *)&As[kk][ty * 4];
            const float4 b1 = *(const float4 *)&W1s[kk][tx * 4];
            const float4 b2 = *(const float4 *)&W2s[kk][tx * 4];
            const float av[4] = {a.x, a.y, a.z, a.w}, bv1[4] = {b1.x, b1.y, b1.z, b1.w},
                        bv2[4] = {b2.x, b2.y, b2.z, b2.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    p1[i][j] = fmaf(av[i], bv1[j], p1[i][j]);
                    p2[i][j] = fmaf(av[i], bv2[j], p2[i][j]);
                }
        }
        if ((k0 + TK) % QB == 0) { /* end of a 128-deep scale block */
            const int kb = k0 / QB;
            const float f1 = sw1[kb], f2 = sw2[kb];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float ra = sa[ty * 4 + i];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    x1[i][j] = fmaf(p1[i][j], ra * f1, x1[i][j]);
                    x2[i][j] = fmaf(p2[i][j], ra * f2, x2[i][j]);
                    p1[i][j] = 0.f;
                    p2[i][j] = 0.f;
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = r0 + ty * 4 + i;
        if (r >= cnt)
            continue;
        const long slot = lists[(long)le * T + r];
        float c[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            c[j] = x2[i][j] / (1.f + expf(-x2[i][j])) * x1[i][j];
        *(float4 *)&C[slot * I + n0 + tx * 4] = make_float4(c[0], c[1], c[2], c[3]);
    }
}

// grid (H / TN, ceil(T / TM), EL), 256 threads: acc[t, h] += w_slot * (C[slot] . W2[le, h]).
extern "C" __global__ void __launch_bounds__(256)
moe_v1_gemm2(const float *__restrict__ C, const unsigned char *__restrict__ w2,
             const float *__restrict__ s2, const float *__restrict__ topk_w,
             const int *__restrict__ counts, const int *__restrict__ lists,
             float *__restrict__ acc_out, int T)
{
    __shared__ __align__(16) float As[TK][LD];
    __shared__ __align__(16) float Ws[TK][LD];
    __shared__ int slots[TM];
    const int le = blockIdx.z, cnt = counts[le], r0 = blockIdx.y * TM, h0 = blockIdx.x * TN;
    if (r0 >= cnt)
        return;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    if (tid < TM)
        slots[tid] = r0 + tid < cnt ? lists[(long)le * T + r0 + tid] : -1;
    __syncthreads();
    const float *sw = s2 + ((long)le * NHB + h0 / QB) * NIB;
    const long wrow = (long)le * H + h0;

    float acc[4][4] = {}, p[4][4] = {};
    for (int k0 = 0; k0 < I; k0 += TK) {
        for (int q = tid; q < TM * TK / 4; q += 256) {
            const int row = q / (TK / 4), c = (q % (TK / 4)) * 4, sl = slots[row];
            const float4 a = sl < 0 ? make_float4(0.f, 0.f, 0.f, 0.f)
                                    : *(const float4 *)(C + (long)sl * I + k0 + c);
            const float4 b = fp8x4_to_float4(*(const unsigned int *)(w2 + (wrow + row) * I + k0 + c));
            As[c][row] = a.x; As[c + 1][row] = a.y; As[c + 2][row] = a.z; As[c + 3][row] = a.w;
            Ws[c][row] = b.x; Ws[c + 1][row] = b.y; Ws[c + 2][row] = b.z; Ws[c + 3][row] = b.w;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < TK; kk++) {
            const float4 a = *(const float4 *)&As[kk][ty * 4];
            const float4 b = *(const float4 *)&Ws[kk][tx * 4];
            const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    p[i][j] = fmaf(av[i], bv[j], p[i][j]);
        }
        if ((k0 + TK) % QB == 0) {
            const float f = sw[k0 / QB];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    acc[i][j] = fmaf(p[i][j], f, acc[i][j]);
                    p[i][j] = 0.f;
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int sl = slots[ty * 4 + i];
        if (sl < 0)
            continue;
        const float w = topk_w[sl];
        float *dst = acc_out + (long)(sl / TOPK) * H + h0 + tx * 4;
#pragma unroll
        for (int j = 0; j < 4; j++)
            atomicAdd(dst + j, acc[i][j] * w);
    }
}

extern "C" __global__ void __launch_bounds__(256)
moe_v1_finalize(const float *__restrict__ acc_out, __nv_bfloat16 *__restrict__ output, long n)
{
    const long i = (long)blockIdx.x * 256 + threadIdx.x;
    if (i < n)
        output[i] = __float2bfloat16_rn(acc_out[i]);
}
