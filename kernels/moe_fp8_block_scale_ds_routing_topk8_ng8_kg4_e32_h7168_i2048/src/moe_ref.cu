// Trusted CUDA reference for moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048,
// following the definition's Python reference step by step (T tokens):
//   s      = 1 / (1 + exp(-logits))              float32, as torch: exp, add, divide
//   swb    = s + float(bias)
//   group g (32 experts each): score = sum of its two largest swb
//   keep the 4 groups of largest score, then the 8 experts of largest swb among them
//   w_e    = s_e / (sum of the 8 s + 1e-20) * routed_scaling_factor
//   for each local expert le (global le + local_expert_offset) and token t that chose it:
//     A[t,k]   = float(fp8 hs[t,k]) * hs_scale[k/128, t]
//     W13[n,k] = float(fp8 w13[le,n,k]) * s13[le, n/128, k/128]      (each a float32 product)
//     G1 = A W13^T ; X1 = G1[:, :I], X2 = G1[:, I:] ; C = (X2 / (1 + exp(-X2))) * X1
//     W2[h,k]  = float(fp8 w2[le,h,k]) * s2[le, h/128, k/128]
//     O  = C W2^T ; output[t] += O * w_e        (local experts in increasing order)
//   output -> bfloat16, once.
// Ties in the top-k choices are broken towards the lower index (torch.topk's
// order is unspecified; with float32 random logits ties do not occur).
// Launches: route (one block per token; also the per-expert slot lists),
// gemm1 (64 x 64 float32 tiles, k in order, SwiGLU at the end), gemm2 (the
// weighted rows O * w_e into a workspace Y, one row per (token, choice)),
// combine (per output element, the token's local rows in expert order, bf16).
// Slow and obviously right: dequantisation per element as the Python does,
// float32 FMA on CUDA cores, no atomics on values (deterministic).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define E 256      /* num_experts */
#define EL 32      /* num_local_experts */
#define TOPK 8
#define NGROUP 8
#define KGROUP 4
#define H 7168     /* hidden_size */
#define I 2048     /* intermediate_size */
#define NHB 56     /* H / 128 */
#define NIB 16     /* I / 128 */
#define NG1B 32    /* 2I / 128 */
#define QB 128     /* quantisation block */
#define TM 64      /* GEMM tile rows (routed slots) */
#define TN 64      /* GEMM tile columns */
#define TK 32      /* GEMM tile depth */
#define NEG_INF (-__int_as_float(0x7f800000))

static __device__ __forceinline__ float fp8_to_float(unsigned char byte)
{
    __nv_fp8_e4m3 f;
    f.__x = byte;
    return float(f);
}

// ---- routing --------------------------------------------------------------------
// One block of 256 threads per token, thread = expert, warp = group.  Writes the
// token's 8 chosen experts in increasing expert order (slot t*8+j) with their
// weights, and appends each local choice's slot to its expert's list (the
// list order is free: every row is computed on its own).
extern "C" __global__ void __launch_bounds__(E)
moe_ref_route(const float *__restrict__ logits, const __nv_bfloat16 *__restrict__ bias,
              int local_expert_offset, float routed_scaling_factor, int *__restrict__ topk_idx,
              float *__restrict__ topk_w, int *__restrict__ counts, int *__restrict__ lists, int T)
{
    __shared__ float s_sig[E], s_wb[E], gscore[NGROUP];
    __shared__ int kept[E], chosen[E];
    const int t = blockIdx.x, e = threadIdx.x, lane = e & 31, g = e >> 5;

    const float l = logits[(long)t * E + e];
    const float s = __fdiv_rn(1.f, __fadd_rn(1.f, expf(-l)));
    const float wb = __fadd_rn(s, __bfloat162float(bias[e]));
    s_sig[e] = s;
    s_wb[e] = wb;

    // the group's two largest values (the first maximum removed once, so an
    // equal second value still counts, as torch.topk(k=2) returns it)
    float v1 = wb;
    for (int o = 16; o > 0; o >>= 1)
        v1 = fmaxf(v1, __shfl_xor_sync(0xffffffffu, v1, o));
    const int first = __ffs(__ballot_sync(0xffffffffu, wb == v1)) - 1;
    float v2 = lane == first ? NEG_INF : wb;
    for (int o = 16; o > 0; o >>= 1)
        v2 = fmaxf(v2, __shfl_xor_sync(0xffffffffu, v2, o));
    if (lane == 0)
        gscore[g] = __fadd_rn(v1, v2);
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

    __shared__ float wsum;
    if (e == 0) {
        float sum = 0.f;
        for (int j = 0; j < E; j++)
            if (chosen[j])
                sum = __fadd_rn(sum, s_sig[j]);
        wsum = __fadd_rn(sum, 1e-20f);
    }
    __syncthreads();
    if (chosen[e]) {
        int pos = 0;
        for (int j = 0; j < e; j++)
            pos += chosen[j];
        const int slot = t * TOPK + pos;
        topk_idx[slot] = e;
        topk_w[slot] = __fmul_rn(__fdiv_rn(s, wsum), routed_scaling_factor);
        const int le = e - local_expert_offset;
        if (le >= 0 && le < EL) {
            const int at = atomicAdd(&counts[le], 1);
            lists[(long)le * T + at] = slot;
        }
    }
}

// ---- GEMM1 + SwiGLU -------------------------------------------------------------
// grid (I / TN, ceil(T / TM), EL), 256 threads; thread (ty, tx) owns rows
// ty*4.. and columns tx*4.. of the tile, for X1 (W13 rows n) and X2 (rows I + n).
extern "C" __global__ void __launch_bounds__(256)
moe_ref_gemm1(const unsigned char *__restrict__ hs, const float *__restrict__ hs_scale,
              const unsigned char *__restrict__ w13, const float *__restrict__ s13,
              const int *__restrict__ counts, const int *__restrict__ lists,
              float *__restrict__ C, int T)
{
    __shared__ float As[TK][TM + 1], W1s[TK][TN + 1], W2s[TK][TN + 1];
    __shared__ int tok[TM];
    const int le = blockIdx.z, cnt = counts[le], r0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    if (r0 >= cnt)
        return;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    if (tid < TM)
        tok[tid] = r0 + tid < cnt ? lists[(long)le * T + r0 + tid] / TOPK : -1;
    __syncthreads();

    float x1[4][4] = {}, x2[4][4] = {};
    for (int k0 = 0; k0 < H; k0 += TK) {
        for (int q = tid; q < TM * TK; q += 256) {
            const int row = q / TK, kk = q % TK, k = k0 + kk, tk = tok[row];
            As[kk][row] = tk < 0 ? 0.f
                                 : __fmul_rn(fp8_to_float(hs[(long)tk * H + k]),
                                             hs_scale[(long)(k / QB) * T + tk]);
            const int n = n0 + row;
            const long r1 = (long)le * (2 * I) + n, r2 = r1 + I;
            W1s[kk][row] = __fmul_rn(fp8_to_float(w13[r1 * H + k]),
                                     s13[((long)le * NG1B + n / QB) * NHB + k / QB]);
            W2s[kk][row] = __fmul_rn(fp8_to_float(w13[r2 * H + k]),
                                     s13[((long)le * NG1B + (I + n) / QB) * NHB + k / QB]);
        }
        __syncthreads();
        for (int kk = 0; kk < TK; kk++)
            for (int i = 0; i < 4; i++) {
                const float a = As[kk][ty * 4 + i];
                for (int j = 0; j < 4; j++) {
                    x1[i][j] = fmaf(a, W1s[kk][tx * 4 + j], x1[i][j]);
                    x2[i][j] = fmaf(a, W2s[kk][tx * 4 + j], x2[i][j]);
                }
            }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        const int r = r0 + ty * 4 + i;
        if (r >= cnt)
            continue;
        const long slot = lists[(long)le * T + r];
        for (int j = 0; j < 4; j++) {
            const float silu = __fdiv_rn(x2[i][j], __fadd_rn(1.f, expf(-x2[i][j])));
            C[slot * I + n0 + tx * 4 + j] = __fmul_rn(silu, x1[i][j]);
        }
    }
}

// ---- GEMM2, weighted -------------------------------------------------------------
// grid (H / TN, ceil(T / TM), EL), 256 threads: Y[slot, h] = (C[slot] . W2[le, h]) * w_slot.
extern "C" __global__ void __launch_bounds__(256)
moe_ref_gemm2(const float *__restrict__ C, const unsigned char *__restrict__ w2,
              const float *__restrict__ s2, const float *__restrict__ topk_w,
              const int *__restrict__ counts, const int *__restrict__ lists,
              float *__restrict__ Y, int T)
{
    __shared__ float As[TK][TM + 1], Ws[TK][TN + 1];
    __shared__ int slots[TM];
    const int le = blockIdx.z, cnt = counts[le], r0 = blockIdx.y * TM, h0 = blockIdx.x * TN;
    if (r0 >= cnt)
        return;
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    if (tid < TM)
        slots[tid] = r0 + tid < cnt ? lists[(long)le * T + r0 + tid] : -1;
    __syncthreads();

    float acc[4][4] = {};
    for (int k0 = 0; k0 < I; k0 += TK) {
        for (int q = tid; q < TM * TK; q += 256) {
            const int row = q / TK, kk = q % TK, k = k0 + kk, sl = slots[row];
            As[kk][row] = sl < 0 ? 0.f : C[(long)sl * I + k];
            const long h = h0 + row;
            Ws[kk][row] = __fmul_rn(fp8_to_float(w2[((long)le * H + h) * I + k]),
                                    s2[((long)le * NHB + h / QB) * NIB + k / QB]);
        }
        __syncthreads();
        for (int kk = 0; kk < TK; kk++)
            for (int i = 0; i < 4; i++) {
                const float a = As[kk][ty * 4 + i];
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a, Ws[kk][tx * 4 + j], acc[i][j]);
            }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        const int sl = slots[ty * 4 + i];
        if (sl < 0)
            continue;
        const float w = topk_w[sl];
        for (int j = 0; j < 4; j++)
            Y[(long)sl * H + h0 + tx * 4 + j] = __fmul_rn(acc[i][j], w);
    }
}

// ---- combine ----------------------------------------------------------------------
// One thread per output element: 0 + the token's local rows in increasing
// expert order (the Python's index_add_ per local expert), bf16 once.
extern "C" __global__ void __launch_bounds__(256)
moe_ref_combine(const int *__restrict__ topk_idx, const float *__restrict__ Y,
                int local_expert_offset, __nv_bfloat16 *__restrict__ output, long n)
{
    const long i = (long)blockIdx.x * 256 + threadIdx.x;
    if (i >= n)
        return;
    const long t = i / H, h = i % H;
    float acc = 0.f;
    for (int j = 0; j < TOPK; j++) {
        const int le = topk_idx[t * TOPK + j] - local_expert_offset;
        if (le >= 0 && le < EL)
            acc = __fadd_rn(acc, Y[(t * TOPK + j) * H + h]);
    }
    output[i] = __float2bfloat16_rn(acc);
}
