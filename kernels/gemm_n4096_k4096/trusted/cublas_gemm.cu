// cuBLAS anchor for gemm_n4096_k4096 (C = A @ B.T, float16, float32
// accumulation), for the trusted nvcc path: a shared object with a C entry,
// written by people, never model code.  Solution gemm_n4096_k4096_cublas
// (cublas_gemm.solution.json, backend "cuda_so", link ["cublas"]): `khlua
// eval` builds it with nvcc -shared and the gpu worker calls
// gemm_cublas(A, B, C, M, N, K, stream) with device pointers and its own
// stream (docs/candidate-format.md), then gemm_cublas_fini before unloading.
// It is an anchor to measure against, not the search's baseline (a search
// starts from a launch-manifest candidate); kernels/verify.py times
// torch.matmul (cuBLAS) beside the GEMM baseline as well.
//
// By hand: nvcc -shared -Xcompiler -fPIC -O3 -std=c++17 -arch=sm_90a \
//            -o cublas_gemm.so cublas_gemm.cu -lcublas
//
// Row-major C[M,N] = A[M,K] . B[N,K]^T is, in cuBLAS's column-major terms,
// C^T[N,M] = B[N,K] . A^T: op(B) = T on a K x N column-major view of B, op(A)
// = N on the K x M view of A.  The handle is created on the first call after
// each load of the object, bound to the caller's stream on every call, and
// destroyed by gemm_cublas_fini.
#include <cublas_v2.h>
#include <cuda_fp16.h>

static cublasHandle_t handle;

extern "C" int gemm_cublas_init(void)
{
    if (handle)
        return 0;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
        return -1;
    /* float32 accumulation, no reduced-precision shortcuts */
    if (cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
        return -1;
    return 0;
}

extern "C" int gemm_cublas(const void *A, const void *B, void *C, int M, int N, int K,
                           cudaStream_t stream)
{
    if (gemm_cublas_init())
        return -1;
    if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS)
        return -1;
    const float alpha = 1.f, beta = 0.f;
    cublasStatus_t st = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha,
                                     B, CUDA_R_16F, K, A, CUDA_R_16F, K, &beta,
                                     C, CUDA_R_16F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}

extern "C" void gemm_cublas_fini(void)
{
    if (handle)
        cublasDestroy(handle);
    handle = 0;
}
