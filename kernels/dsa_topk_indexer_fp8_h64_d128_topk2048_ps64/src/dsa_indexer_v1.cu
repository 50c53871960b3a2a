// Baseline for dsa_topk_indexer_fp8_h64_d128_topk2048_ps64: what one writes
// first after the reference, two launches and the same score workspace.
// Kernel 1 (topk_scores_v1): a block of 8 warps per (b, page).  The row's q
// (fp8, exact in half) goes to shared memory transposed and paired, q2[d][l]
// = (q[l][d], q[l+32][d]), so lane l reads its two heads for one d in one
// conflict-free 4-byte load; the page's fp8 keys go to shared memory as half
// (exact).  Each warp scores 8 tokens: per d, one q pair and 8 broadcast
// keys, 16 FMAs in float; then per token scale * dot, relu, times the
// head's weight, summed over the 64 heads by a warp reduction.
// Kernel 2 (topk_select_v1): a block per b; the k-th largest key by a radix
// select (4 passes of 8 bits with a shared histogram, instead of the
// reference's 32 single-bit passes), then slots handed out by shared atomics:
// the positions above it, then as many equal to it as are still needed.
// The evaluator compares the scores at the chosen indices, not their order.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#define H 64      /* num_index_heads */
#define DI 128    /* index_head_dim */
#define PS 64     /* page_size */
#define TOPK 2048
#define PAGE_BYTES (PS * (DI + 4))
#define NT1 256
#define TPW (PS / (NT1 / 32)) /* tokens per warp: 8 */
#define NT2 1024
#define NEG_INF (-__int_as_float(0x7f800000))

static __device__ __forceinline__ __half fp8_to_half(unsigned char byte)
{
    __nv_fp8_e4m3 f;
    f.__x = byte;
    return __half(f);
}

extern "C" __global__ void __launch_bounds__(NT1)
topk_scores_v1(const unsigned char *__restrict__ q_fp8, const unsigned char *__restrict__ kcache,
               const float *__restrict__ weights, const int *__restrict__ seq_lens,
               const int *__restrict__ block_table, float *__restrict__ scores, int max_num_pages)
{
    __shared__ __half2 q2[DI][32];  /* 16 KB */
    __shared__ __half ks[PS][DI];   /* 16 KB */
    const int b = blockIdx.x, p = blockIdx.y, tid = threadIdx.x;
    const int len = seq_lens[b];
    float *out = scores + (long)b * max_num_pages * PS + p * PS;
    if (p * PS >= len) { /* the whole page is past the sequence (block-uniform) */
        if (tid < PS)
            out[tid] = NEG_INF;
        return;
    }
    const unsigned char *q = q_fp8 + (long)b * H * DI;
    for (int i = tid; i < 32 * DI; i += NT1) { /* i = l * DI + d: coalesced reads */
        const int l = i / DI, d = i % DI;
        q2[d][l] = __halves2half2(fp8_to_half(q[l * DI + d]), fp8_to_half(q[(l + 32) * DI + d]));
    }
    const unsigned char *page = kcache + (long)block_table[b * max_num_pages + p] * PAGE_BYTES;
    for (int i = tid; i < PS * DI / 4; i += NT1) {
        const unsigned w = reinterpret_cast<const unsigned *>(page)[i];
        __half *dst = &ks[0][0] + 4 * i;
        dst[0] = fp8_to_half((unsigned char)w);
        dst[1] = fp8_to_half((unsigned char)(w >> 8));
        dst[2] = fp8_to_half((unsigned char)(w >> 16));
        dst[3] = fp8_to_half((unsigned char)(w >> 24));
    }
    __syncthreads();

    const int lane = tid & 31, t0 = (tid >> 5) * TPW;
    float a0[TPW], a1[TPW];
#pragma unroll
    for (int j = 0; j < TPW; j++)
        a0[j] = a1[j] = 0.f;
    for (int d = 0; d < DI; d++) {
        const float2 qq = __half22float2(q2[d][lane]);
#pragma unroll
        for (int j = 0; j < TPW; j++) {
            const float kv = __half2float(ks[t0 + j][d]);
            a0[j] = fmaf(qq.x, kv, a0[j]);
            a1[j] = fmaf(qq.y, kv, a1[j]);
        }
    }
    const float w0 = weights[b * H + lane], w1 = weights[b * H + lane + 32];
    const float *scale = reinterpret_cast<const float *>(page + PS * DI);
#pragma unroll
    for (int j = 0; j < TPW; j++) {
        const float sc = scale[t0 + j];
        float s = fmaxf(a0[j] * sc, 0.f) * w0 + fmaxf(a1[j] * sc, 0.f) * w1;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0)
            out[t0 + j] = p * PS + t0 + j < len ? s : NEG_INF;
    }
}

/* float -> uint32 with the same order (larger float, larger key) */
static __device__ __forceinline__ unsigned key_of(float f)
{
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

extern "C" __global__ void __launch_bounds__(NT2)
topk_select_v1(const float *__restrict__ scores, const int *__restrict__ seq_lens,
               const int *__restrict__ block_table, int *__restrict__ topk_indices,
               int max_num_pages)
{
    __shared__ unsigned hist[256];
    __shared__ unsigned s_prefix;
    __shared__ int s_need, n_above, n_equal;
    const int b = blockIdx.x, tid = threadIdx.x;
    const int n = seq_lens[b] < max_num_pages * PS ? seq_lens[b] : max_num_pages * PS;
    const int k = n < TOPK ? n : TOPK;
    const float *s = scores + (long)b * max_num_pages * PS;
    int *out = topk_indices + (long)b * TOPK;
    for (int i = k + tid; i < TOPK; i += NT2)
        out[i] = -1;
    if (k <= 0)
        return;

    /* radix select: after the pass at `shift`, the key's bits above shift
     * are known (prefix), and need = how many keys equal to the prefix so
     * far still belong in the top k */
    unsigned prefix = 0, mask = 0;
    int need = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += NT2)
            hist[i] = 0;
        __syncthreads();
        for (int i = tid; i < n; i += NT2) {
            const unsigned kk = key_of(s[i]);
            if ((kk & mask) == prefix)
                atomicAdd(&hist[(kk >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            int above = 0, bin = 255;
            for (; bin > 0 && above + (int)hist[bin] < need; bin--)
                above += (int)hist[bin];
            s_prefix = prefix | ((unsigned)bin << shift);
            s_need = need - above;
        }
        __syncthreads();
        prefix = s_prefix;
        need = s_need;
        mask |= 255u << shift;
        __syncthreads();
    }

    /* prefix is the k-th largest key: the keys above it (k - need of them)
     * take slots [0, k - need), then `need` keys equal to it */
    if (tid == 0)
        n_above = n_equal = 0;
    __syncthreads();
    for (int i = tid; i < n; i += NT2) {
        const unsigned kk = key_of(s[i]);
        int slot = -1;
        if (kk > prefix) {
            slot = atomicAdd(&n_above, 1);
        } else if (kk == prefix) {
            const int e = atomicAdd(&n_equal, 1);
            if (e < need)
                slot = k - need + e;
        }
        if (slot >= 0)
            out[slot] = block_table[b * max_num_pages + i / PS] * PS + i % PS;
    }
}
