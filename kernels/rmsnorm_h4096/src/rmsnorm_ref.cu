// Trusted CUDA reference for rmsnorm_h4096, written to follow the definition's
// Python reference step by step:
//   x = hidden_states.to(float32)
//   inv_rms = rsqrt(mean(x^2, -1) + EPS)        EPS = 1e-5, applied in float32
//   y = (x * inv_rms) * weight.to(float32)      this order: (x * r) first
//   return y.to(bfloat16)                       round to nearest even, once
// One block per row; a fixed tree reduction, so the result is deterministic.
// Simplicity over speed: it is computed once per input set.
#include <cuda_bf16.h>

#define REF_THREADS 256

extern "C" __global__ void __launch_bounds__(REF_THREADS)
rmsnorm_ref(const __nv_bfloat16 *__restrict__ hidden_states,
            const __nv_bfloat16 *__restrict__ weight,
            __nv_bfloat16 *__restrict__ output, int hidden)
{
    __shared__ float partial[REF_THREADS];
    const __nv_bfloat16 *x = hidden_states + (long)blockIdx.x * hidden;
    __nv_bfloat16 *y = output + (long)blockIdx.x * hidden;

    float s = 0.f;
    for (int c = threadIdx.x; c < hidden; c += REF_THREADS) {
        float v = __bfloat162float(x[c]);
        s += v * v;
    }
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int stride = REF_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride)
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float mean = partial[0] / (float)hidden;
    const float inv_rms = rsqrtf(mean + 1e-5f);

    for (int c = threadIdx.x; c < hidden; c += REF_THREADS) {
        float v = __bfloat162float(x[c]);
        y[c] = __float2bfloat16_rn((v * inv_rms) * __bfloat162float(weight[c]));
    }
}
