// Baseline for gemm_n4096_k4096 (C = A @ B.T, float16 in and out, float32
// accumulation): the first tensor-core kernel a competent engineer writes.
// 128 x 128 block tile, BK = 32, 8 warps (2 along M x 4 along N, 64 x 32 each),
// mma.sync m16n8k16 with fragments read from padded shared memory by 32-bit
// loads; single-buffered (load, sync, compute, sync); rows past M are
// zero-filled on load and skipped on store.
// Requires N % 128 == 0 and K % 32 == 0 (true for N = K = 4096) and 16-byte
// aligned rows (K % 8 == 0).  No cp.async, no ldmatrix, no pipelining, no
// split-K: those are what the search is for.
#include <cuda_fp16.h>

#define BM 128
#define BN 128
#define BK 32
#define LDS (BK + 8) /* halves per shared row: 80 bytes, 16-byte aligned, conflict-free fragment reads */

static __device__ __forceinline__ void mma_16816(float c[4], const unsigned a[4], const unsigned b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(256)
gemm_mma_v1(const __half *__restrict__ A, const __half *__restrict__ B,
            __half *__restrict__ C, int M, int N, int K)
{
    __shared__ __align__(16) __half As[BM * LDS]; /* [m][k] */
    __shared__ __align__(16) __half Bs[BN * LDS]; /* [n][k]: B is K-contiguous, the "col" operand */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
    const int g = lane >> 2, t = lane & 3; /* mma fragment coordinates */
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[i][j][c] = 0.f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        /* 128 rows x 32 halves = 512 chunks of 16 bytes per operand: 2 per thread */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int chunk = tid + i * 256;
            const int r = chunk >> 2, c = (chunk & 3) * 8;
            uint4 va = make_uint4(0u, 0u, 0u, 0u), vb = make_uint4(0u, 0u, 0u, 0u);
            if (m0 + r < M)
                va = *reinterpret_cast<const uint4 *>(A + (long)(m0 + r) * K + k0 + c);
            if (n0 + r < N)
                vb = *reinterpret_cast<const uint4 *>(B + (long)(n0 + r) * K + k0 + c);
            *reinterpret_cast<uint4 *>(&As[r * LDS + c]) = va;
            *reinterpret_cast<uint4 *>(&Bs[r * LDS + c]) = vb;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[4][4], b[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                const __half *p = &As[(wm + mi * 16 + g) * LDS + kk + t * 2];
                a[mi][0] = *reinterpret_cast<const unsigned *>(p);                /* row g,   k 2t..   */
                a[mi][1] = *reinterpret_cast<const unsigned *>(p + 8 * LDS);      /* row g+8, k 2t..   */
                a[mi][2] = *reinterpret_cast<const unsigned *>(p + 8);            /* row g,   k 2t+8.. */
                a[mi][3] = *reinterpret_cast<const unsigned *>(p + 8 * LDS + 8);  /* row g+8, k 2t+8.. */
            }
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const __half *q = &Bs[(wn + ni * 8 + g) * LDS + kk + t * 2];
                b[ni][0] = *reinterpret_cast<const unsigned *>(q);     /* col g, k 2t..   */
                b[ni][1] = *reinterpret_cast<const unsigned *>(q + 8); /* col g, k 2t+8.. */
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
                    mma_16816(acc[mi][ni], a[mi], b[ni]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const int row = m0 + wm + mi * 16 + g, col = n0 + wn + ni * 8 + t * 2;
            if (row < M)
                *reinterpret_cast<__half2 *>(&C[(long)row * N + col]) =
                    __floats2half2_rn(acc[mi][ni][0], acc[mi][ni][1]);
            if (row + 8 < M)
                *reinterpret_cast<__half2 *>(&C[(long)(row + 8) * N + col]) =
                    __floats2half2_rn(acc[mi][ni][2], acc[mi][ni][3]);
        }
}
