// Trusted CUDA reference for dsa_topk_indexer_fp8_h64_d128_topk2048_ps64,
// following the definition's Python reference, per batch row b:
//   K[pos]  = float(fp8 bytes of the token) * its float32 scale   (deep_gemm page
//             layout: 64*128 fp8 bytes, then 64 float32 scales, 8448 bytes a page)
//   score   = sum_h relu(q[b,h] . K[pos]) * weights[b,h]          positions < seq_len
//   the top min(2048, seq_len) positions, as global tokens
//   block_table[b, pos / 64] * 64 + pos % 64; the rest -1.
// Kernel 1 (indexer_scores): a block per (b, page), a thread per token of the
// page; dot products in d order, heads summed in h order; scores to a float
// workspace, -inf past seq_len.  Kernel 2 (indexer_topk): a block per b; the
// k-th largest score by a bitwise search over order-preserving keys, then the
// positions above it and, up to k, those equal to it, written in position
// order (deterministic; the evaluator compares scores, not order).
#include <cuda_fp8.h>

#define H 64      /* num_index_heads */
#define DI 128    /* index_head_dim */
#define PS 64     /* page_size */
#define TOPK 2048
#define PAGE_BYTES (PS * (DI + 4))
#define NT2 1024
#define NEG_INF (-__int_as_float(0x7f800000))

static __device__ __forceinline__ float fp8_to_float(unsigned char byte)
{
    __nv_fp8_e4m3 f;
    f.__x = byte;
    return (float)f;
}

extern "C" __global__ void __launch_bounds__(PS)
indexer_scores(const unsigned char *__restrict__ q_fp8, const unsigned char *__restrict__ kcache,
               const float *__restrict__ weights, const int *__restrict__ seq_lens,
               const int *__restrict__ block_table, float *__restrict__ scores, int max_num_pages)
{
    __shared__ float qs[H * DI];
    const int b = blockIdx.x, p = blockIdx.y, o = threadIdx.x;
    const int pos = p * PS + o;
    float *out = scores + (long)b * max_num_pages * PS;
    if (p * PS >= seq_lens[b]) { /* the whole page is past the sequence (block-uniform) */
        out[pos] = NEG_INF;
        return;
    }
    for (int i = threadIdx.x; i < H * DI; i += PS) /* every thread loads its share first */
        qs[i] = fp8_to_float(q_fp8[(long)b * H * DI + i]);
    __syncthreads();
    if (pos >= seq_lens[b]) {
        out[pos] = NEG_INF;
        return;
    }

    const unsigned char *page = kcache + (long)block_table[b * max_num_pages + p] * PAGE_BYTES;
    const float scale = reinterpret_cast<const float *>(page + PS * DI)[o];
    float k[DI];
    for (int d = 0; d < DI; d++)
        k[d] = __fmul_rn(fp8_to_float(page[o * DI + d]), scale);
    float total = 0.f;
    for (int h = 0; h < H; h++) {
        float s = 0.f;
        for (int d = 0; d < DI; d++)
            s = fmaf(qs[h * DI + d], k[d], s);
        total = __fadd_rn(total, __fmul_rn(fmaxf(s, 0.f), weights[b * H + h]));
    }
    out[pos] = total;
}

/* float -> uint32 with the same order (larger float, larger key) */
static __device__ __forceinline__ unsigned key_of(float f)
{
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* exclusive prefix count of flag over the block, and the block total */
static __device__ int block_scan(int flag, int *warp_tot, int *total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned bal = __ballot_sync(0xffffffffu, flag);
    const int before = __popc(bal & ((1u << lane) - 1u));
    __syncthreads();
    if (lane == 0)
        warp_tot[warp] = __popc(bal);
    __syncthreads();
    int off = 0, all = 0;
    for (int w = 0; w < NT2 / 32; w++) {
        if (w < warp)
            off += warp_tot[w];
        all += warp_tot[w];
    }
    *total = all;
    return off + before;
}

extern "C" __global__ void __launch_bounds__(NT2)
indexer_topk(const float *__restrict__ scores, const int *__restrict__ seq_lens,
             const int *__restrict__ block_table, int *__restrict__ topk_indices, int max_num_pages)
{
    __shared__ int warp_tot[NT2 / 32];
    __shared__ int count;
    const int b = blockIdx.x;
    const int n = seq_lens[b] < max_num_pages * PS ? seq_lens[b] : max_num_pages * PS;
    const int k = n < TOPK ? n : TOPK;
    const float *s = scores + (long)b * max_num_pages * PS;
    int *out = topk_indices + (long)b * TOPK;

    for (int i = threadIdx.x; i < TOPK; i += NT2)
        out[i] = -1;
    if (k <= 0)
        return;

    /* the largest key T with at least k keys >= T: the k-th largest */
    unsigned thr = 0;
    for (int bit = 31; bit >= 0; bit--) {
        const unsigned cand = thr | (1u << bit);
        if (threadIdx.x == 0)
            count = 0;
        __syncthreads();
        int c = 0;
        for (int i = threadIdx.x; i < n; i += NT2)
            c += key_of(s[i]) >= cand;
        atomicAdd(&count, c);
        __syncthreads();
        if (count >= k)
            thr = cand;
        __syncthreads();
    }

    /* positions with key > thr (fewer than k), then key == thr up to k, in position order */
    int written = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int base = 0; base < n; base += NT2) {
            const int i = base + threadIdx.x;
            const unsigned kk = i < n ? key_of(s[i]) : 0u;
            const int flag = i < n && (pass == 0 ? kk > thr : kk == thr);
            int total;
            const int slot = written + block_scan(flag, warp_tot, &total);
            if (flag && slot < k)
                out[slot] = block_table[b * max_num_pages + i / PS] * PS + i % PS;
            written += total;
            if (written >= k)
                break;
        }
        if (written >= k)
            break;
    }
}
