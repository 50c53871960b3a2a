// Trusted CUDA reference for gemm_n4096_k4096: C = A @ B.T in float16 with
// float32 accumulation, rounded once to float16 (what torch.matmul computes
// for float16 on CUDA; the definition's reference is that call).  A is
// [M, K], B is [N, K], both K-contiguous; C is [M, N].
// The classic 16 x 16 shared-memory tiling: each thread owns one C element and
// adds the K products in increasing k order, in float32 (fused multiply-add).
// Slow (CUDA cores, no tensor cores) and obviously right; computed once.
#include <cuda_fp16.h>

#define TILE 16

extern "C" __global__ void __launch_bounds__(TILE * TILE)
gemm_ref(const __half *__restrict__ A, const __half *__restrict__ B,
         __half *__restrict__ C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE + 1]; /* [m][k]; +1 avoids bank conflicts */
    __shared__ float Bs[TILE][TILE + 1]; /* [n][k] */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m = blockIdx.y * TILE + ty;          /* this thread's C row */
    const int n = blockIdx.x * TILE + tx;          /* this thread's C column */
    const int bn = blockIdx.x * TILE + ty;         /* the B row this thread loads */

    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int k = k0 + tx;
        As[ty][tx] = (m < M && k < K) ? __half2float(A[(long)m * K + k]) : 0.f;
        Bs[ty][tx] = (bn < N && k < K) ? __half2float(B[(long)bn * K + k]) : 0.f;
        __syncthreads();
        for (int kk = 0; kk < TILE; kk++)
            acc = fmaf(As[ty][kk], Bs[tx][kk], acc);
        __syncthreads();
    }
    if (m < M && n < N)
        C[(long)m * N + n] = __float2half_rn(acc);
}
