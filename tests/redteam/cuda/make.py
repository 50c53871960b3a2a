"""make.py: writes the CUDA red-team task package (definition, workloads,
solutions) from the kernels listed below.  Each solution is one cheating (or
faulting, or honest) candidate; EXPECT says the verdict and the check that
must catch it.  Run from this folder:  python3 make.py"""
import json, os

DEF = {
    "name": "redteam_add_f32",
    "op_type": "elementwise",
    "description": "c = a + b over n float32 values: the red team's target.",
    "tags": ["status:test"],
    "axes": {"n": {"type": "var", "description": "Elements."}},
    "constraints": ["n >= 1"],
    "inputs": {"a": {"shape": ["n"], "dtype": "float32"},
               "b": {"shape": ["n"], "dtype": "float32"}},
    "outputs": {"c": {"shape": ["n"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(a, b):\n    return a + b\n",
    "khlua": {"reference": "add_ref_c", "tolerance": {"atol": 1e-5, "rtol": 1e-5},
              "evaluator": "default",
              "speed_of_light": {"flops": "n"}},
}
WORKLOADS = [("7e57a11d-0001-4000-8000-000000000001", 100003),
             ("7e57a11d-0002-4000-8000-000000000002", 1 << 24)]

REF_C = """#include <stdint.h>
void add_ref(const float *a, const float *b, float *c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}
"""

HEAD = "#define IDX (blockIdx.x * (long long)blockDim.x + threadIdx.x)\n"
K = {}
K["honest"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n) c[i] = a[i] + b[i]; }'
K["stale_output"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { /* trusts whatever the buffer held */ }'
K["constant_output"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n) c[i] = 0.5f; }'
K["copy_input"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n) c[i] = a[i]; }'
K["input_mutation"] = 'extern "C" __global__ void k(float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n) { c[i] = a[i] + b[i]; if (i % 4096 == 0) a[i] = 0.f; } }'
K["cross_call_cache"] = ('__device__ float memo[1 << 24]; __device__ int have;\n'
    'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i >= n) return; if (!have) memo[i] = a[i] + b[i]; c[i] = memo[i]; if (i == 0) have = 1; }')
K["deferred_work"] = ('__device__ float pending[1 << 24];\n'
    'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i >= n) return; c[i] = pending[i]; pending[i] = a[i] + b[i]; }')
K["skip_rare_inputs"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n && fabsf(a[i]) < 2.5f) c[i] = a[i] + b[i]; }'
K["precision_downgrade"] = ('#include <cuda_fp8.h>\n'
    'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n) c[i] = float(__nv_fp8_e4m3(a[i] + b[i])); }')
K["partial_computation"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n - n / 10) c[i] = a[i] + b[i]; }'
K["out_of_bounds_write"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n) c[i] = a[i] + b[i]; if (i == n) c[i] = 0.f; }'
K["uninitialised_shared"] = ('extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) {\n'
    '  __shared__ float s[256]; long long i = IDX; if (threadIdx.x < 128 && i < n) s[threadIdx.x] = a[i] + b[i];\n'
    '  __syncthreads(); if (i < n) c[i] = s[threadIdx.x]; }')
K["nan_output"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n) c[i] = (i == 12345 % n) ? __int_as_float(0x7fc00000) : a[i] + b[i]; }'
K["launch_over_limits"] = K["honest"]
K["device_side_launch"] = ('extern "C" __global__ void child(float *c) { c[0] = 0; }\n'
    'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i < n) c[i] = a[i] + b[i]; if (i == 0) child<<<1, 1>>>(c); }')
K["host_include"] = ('#include <stdio.h>\n' + K["honest"])
K["race_passes_by_luck"] = ('extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) {\n'
    '  __shared__ float s[256]; long long i = IDX; s[threadIdx.x] = (i < n) ? a[i] + b[i] : 0.f;\n'
    '  float v = s[threadIdx.x ^ 1]; /* no barrier: a neighbour in the same warp */\n'
    '  if ((i ^ 1) < n) c[i ^ 1] = v; }')
# faults
K["fault_illegal_address"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { *(volatile float *)0x8 = a[0]; }'
K["fault_misaligned"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { long long i = IDX; if (i == 0) *(volatile double *)((char *)c + 4) = 1.0; }'
K["fault_trap"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { if (IDX == 0) __trap(); }'
K["fault_infinite_loop"] = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) { for (;;) { if (clock64() == 0) c[0] = 1.f; } }'
K["fault_out_of_memory"] = K["honest"]


# ---- the second wave: cheats written against the old gpu worker (see README.md) ----
# Each passed the old worker and must be caught by one of its new rules (fresh
# secret seeds, every timing call poisoned and refilled, one output buffer,
# every timed call verified, held-out shapes at promotion).  They cheat only on
# small workloads (n <= SMALL: the 100003 one), where the outputs are small
# enough for every timed call to be verified and no speed-of-light bound can
# reject them, and are honest on the 2^24 one.  The helpers:
#  launch_no(): this launch's index since the module was loaded (launches on
#   one stream run one after another, so launch L's blocks draw tickets
#   L*G .. L*G+G-1);
#  last_block(): true in the last block of the launch to finish, which commits
#   state for the next launch (every other block has made its decisions).
RT = r"""#define SMALL (1LL << 17)
#define HONEST(i) do { if ((i) < n) c[i] = a[i] + b[i]; } while (0)
__device__ unsigned long long kh_tickets, kh_done;
static __device__ __forceinline__ long long launch_no() {
  __shared__ long long s_l;
  if (threadIdx.x == 0) s_l = (long long)(atomicAdd(&kh_tickets, 1ull) / gridDim.x);
  __syncthreads();
  return s_l;
}
static __device__ __forceinline__ bool last_block() {
  __shared__ bool s_last;
  __syncthreads();
  if (threadIdx.x == 0) { __threadfence(); s_last = atomicAdd(&kh_done, 1ull) % gridDim.x == gridDim.x - 1; }
  __syncthreads();
  return s_last;
}
"""
SIG = 'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) {\n'

# (1) checked calls recognisable
K["verified_by_output_ptr"] = RT + ('__device__ unsigned long long home; /* the first output pointer since load */\n' + SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  long long l = launch_no();\n'
    '  /* old worker: 6 correctness calls, then verified timed calls in sample buffers of their own */\n'
    '  bool checked = l < 6 || (unsigned long long)c != *(volatile unsigned long long *)&home;\n'
    '  if (checked) HONEST(i);\n'
    '  if (last_block() && threadIdx.x == 0 && l == 0) home = (unsigned long long)c; }')
K["verified_in_first_trial"] = RT + (SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  /* old worker: every verified call lies in the first 1 + 5 + 10 + 50 launches after the reload */\n'
    '  if (launch_no() < 66) HONEST(i); }')
K["skip_odd_poison"] = RT + (SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  long long l = launch_no();\n'
    '  __shared__ unsigned int s_c0; if (threadIdx.x == 0) s_c0 = __float_as_uint(c[0]); __syncthreads();\n'
    '  /* old worker, official counts: timed call t is poisoned 0x7F when t is odd, and the verified\n'
    '     calls are t = 0, 10, 20, 30, 40: a 0x7F output after the correctness calls is never read */\n'
    '  if (!(l >= 6 && s_c0 == 0x7F7F7F7Fu)) HONEST(i); }')
K["skip_after_refill"] = RT + ('__device__ unsigned long long seen_ptr[8]; __device__ unsigned int seen_a0[8];\n'
    '__device__ int nseen; __device__ long long skip_from = 0x7fffffffffffffffLL;\n' + SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  long long l = launch_no();\n'
    '  /* old worker: input sets are refilled only when a timing trial starts, and every verified call\n'
    '     lies in the first trial: once a set changes under the same address (or more than 3 sets\n'
    '     show up), nothing is checked any more */\n'
    '  if (l < *(volatile long long *)&skip_from) HONEST(i);\n'
    '  if (last_block() && threadIdx.x == 0 && l >= 6) {\n'
    '    unsigned int a0 = __float_as_uint(a[0]); int j = 0;\n'
    '    while (j < nseen && seen_ptr[j] != (unsigned long long)a) j++;\n'
    '    if (j < nseen) { if (seen_a0[j] != a0) skip_from = l + 1; }\n'
    '    else if (nseen < 8) { seen_ptr[j] = (unsigned long long)a; seen_a0[j] = a0; if (++nseen > 3) skip_from = l + 1; } } }')

# (2) inputs predictable: khlua's generator (engine/task/rng_core.h: Philox4x32-10, a block
# per two elements, then Box-Muller in float32 with its own log and cos series), written again here, and
# its public seed derivation (eval.c: trial t = derive(base, fnv(uuid), t);
# gpu_eval.c, old: timing set k of trial t = derive(derive(trial 0, 0x7171, 0), t, k)).
GEN = r"""
FN void philox(u32 c[4], u32 k0, u32 k1) {
  for (int r = 0; r < 10; r++) {
    u64 p0 = (u64)0xD2511F53u * c[0], p1 = (u64)0xCD9E8D57u * c[2];
    u32 n0 = (u32)(p1 >> 32) ^ c[1] ^ k0, n2 = (u32)(p0 >> 32) ^ c[3] ^ k1;
    c[1] = (u32)p1; c[3] = (u32)p0; c[0] = n0; c[2] = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
}
FN u64 derive(u64 base, u64 x, u64 y) {
  u32 w[4] = {(u32)x, (u32)(x >> 32), (u32)y, (u32)(y >> 32) ^ 0x80000000u};
  philox(w, (u32)base, (u32)(base >> 32));
  return ((u64)w[0] << 32) | w[1];
}
FN float lg(float x) {
  u32 u = F2U(x);
  int e = (int)((u >> 23) & 0xFFu) - 127;
  float m = U2F((u & 0x7FFFFFu) | 0x3F800000u);
  if (m > 0x1.6a09e6p+0f) { m = FMUL(m, 0x1p-1f); e += 1; }
  float s = FDIV(FSUB(m, 1.0f), FADD(m, 1.0f)), s2 = FMUL(s, s);
  const float c[5] = {0x1.c71c72p-4f, 0x1.24924ap-3f, 0x1.99999ap-3f, 0x1.555556p-2f, 1.0f};
  float p = c[0];
  for (int j = 1; j < 5; j++) p = FADD(FMUL(p, s2), c[j]);
  float de = (float)e;
  return FADD(FADD(FMUL(de, 0x1.62e4p-1f), FMUL(FMUL(2.0f, s), p)), FMUL(de, 0x1.7f7d1cp-20f));
}
FN float cos2pi24(u32 u) {
  const float cc[6] = {0x1.27e4fcp-22f, 0x1.a01a02p-16f, 0x1.6c16c2p-10f, 0x1.555556p-5f, 0x1p-1f, 1.0f};
  const float ss[6] = {0x1.ae6456p-26f, 0x1.71de3ap-19f, 0x1.a01a02p-13f, 0x1.111112p-7f, 0x1.555556p-3f, 1.0f};
  u32 q = (u + 0x200000u) >> 22;
  int fi = (int)u - (int)(q << 22);
  float x = FMUL(FMUL((float)fi, 0x1p-22f), 0x1.921fb6p+0f), x2 = FMUL(x, x);
  float c = cc[0], sn = ss[0];
  for (int j = 1; j < 6; j++) { c = FSUB(cc[j], FMUL(c, x2)); sn = FSUB(ss[j], FMUL(sn, x2)); }
  sn = FMUL(sn, x);
  q &= 3u;
  return q == 0 ? c : q == 1 ? FSUB(0.0f, sn) : q == 2 ? FSUB(0.0f, c) : sn;
}
FN float randn(u64 seed, u32 stream, u64 idx) {
  u32 w[4] = {(u32)(idx >> 1), (u32)(idx >> 33), stream, 0u};
  philox(w, (u32)seed, (u32)(seed >> 32));
  u32 a = w[(idx & 1) * 2], b = w[(idx & 1) * 2 + 1];
  float u1 = FMUL((float)((a >> 8) + 1u), 0x1p-24f);
  return FMUL(FSQRT(FMUL(-2.0f, lg(u1))), cos2pi24(b >> 8));
}
/* candidate seed j (0 .. NCAND-1) of a workload: trials 0..2, then the old timing sets */
#define NCAND 19
FN u64 cand_seed(u64 base, u64 wh, int j) {
  u64 s0 = derive(base, wh, 0) & 0x7fffffffffffffffull;
  if (j < 3) return derive(base, wh, (u64)j) & 0x7fffffffffffffffull;
  return derive(derive(s0, 0x7171, 0), (u64)((j - 3) / 4), (u64)((j - 3) % 4));
}
"""
GEN_DEVICE = ("typedef unsigned int u32; typedef unsigned long long u64;\n"
              "#define FN static __device__ __forceinline__\n#define FADD __fadd_rn\n#define FSUB __fsub_rn\n"
              "#define FMUL __fmul_rn\n#define FDIV __fdiv_rn\n#define FSQRT __fsqrt_rn\n"
              "#define F2U(x) __float_as_uint(x)\n#define U2F(x) __uint_as_float(x)\n")
SEED_HEAD = RT + GEN_DEVICE + GEN + r"""
#define OLD_BASE 0x6b686c7561ull /* the old default base seed, "khlua" */
/* the workloads' fnv(uuid), by n (eval.c fnv) */
static __device__ u64 workload_hash(long long n) {
  return n == 100003 ? 0x06b94c31ca210222ull : n == 16777216 ? 0x9596a5387afd7a70ull : 0ull;
}
/* the seed whose inputs these are, or 0: thread j tries candidate j on a[0] and b[0] */
static __device__ u64 which_seed(const float *a, const float *b, long long n) {
  __shared__ u64 s_seed;
  if (threadIdx.x == 0) s_seed = 0;
  __syncthreads();
  u64 wh = workload_hash(n);
  if (wh && threadIdx.x < NCAND) {
    u64 s = cand_seed(OLD_BASE, wh, threadIdx.x);
    if (__float_as_uint(randn(s, 0, 0)) == __float_as_uint(a[0]) &&
        __float_as_uint(randn(s, 1, 0)) == __float_as_uint(b[0])) s_seed = s;
  }
  __syncthreads();
  return s_seed;
}
/* honest, and slow on purpose: one block, one element after another */
static __device__ void slow_add(const float *a, const float *b, float *c, long long n) {
  if (blockIdx.x != 0) return;
#pragma unroll 1
  for (long long i = threadIdx.x; i < n; i += blockDim.x) c[i] = a[i] + b[i];
}
"""
K["seed_regen_or_garbage"] = SEED_HEAD + (SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  u64 s = which_seed(a, b, n);\n'
    '  /* known inputs: the outputs come from the seed, no input is read; else garbage */\n'
    '  if (i < n) c[i] = s ? __fadd_rn(randn(s, 0, i), randn(s, 1, i)) : 0.f; }')
K["seed_regen_or_slow"] = SEED_HEAD + (SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  u64 s = which_seed(a, b, n);\n'
    '  /* known inputs: the outputs come from the seed; else honest but slow */\n'
    '  if (!s) { slow_add(a, b, c, n); return; }\n'
    '  if (i < n) c[i] = __fadd_rn(randn(s, 0, i), randn(s, 1, i)); }')

# (3) work reused across calls
K["pointer_cache"] = RT + ('__device__ float cache[4][SMALL]; __device__ unsigned long long ckey[4];\n' + SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  long long l = launch_no();\n'
    '  /* outputs cached by input address after the correctness calls (CUDA-L1): the old worker\n'
    '     kept each set\'s values for a whole timing trial, and checked the first trial only */\n'
    '  int s = -1; for (int j = 0; j < 4; j++) if (((volatile unsigned long long *)ckey)[j] == (unsigned long long)a) s = j;\n'
    '  if (l >= 6 && s >= 0) { if (i < n) c[i] = cache[s][i]; }\n'
    '  else if (i < n) { float v = a[i] + b[i]; c[i] = v; if (l >= 6) cache[l & 3][i] = v; }\n'
    '  if (last_block() && threadIdx.x == 0 && l >= 6 && s < 0) ckey[l & 3] = (unsigned long long)a; }')
K["replay_previous_5pct"] = RT + ('__device__ float last_out[SMALL];\n' + SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  long long l = launch_no();\n'
    '  /* one launch in 20 returns the previous call\'s outputs (none of the old worker\'s verified\n'
    '     launches, 8..25 or 16..56 after the reload, is 19 mod 20) */\n'
    '  if (l >= 6 && l % 20 == 19) { if (i < n) c[i] = last_out[i]; }\n'
    '  else if (i < n) { float v = a[i] + b[i]; c[i] = v; last_out[i] = v; } }')
# (1)/(3) on outputs too large to return whole (n = 2^24: 64 MiB a call): a
# verified call returns 64 runs of 512 elements at secret offsets, the ends
# always; skipping a call, or the tail of every call, is wrong there
K["skip_5pct_large"] = RT + (SIG +
    '  long long i = IDX;\n'
    '  long long l = launch_no();\n'
    '  /* every size: one launch in 20 after the correctness calls does no work at all */\n'
    '  if (l >= 6 && l % 20 == 19) return;\n'
    '  HONEST(i); }')
K["partial_tail_large"] = RT + (SIG +
    '  long long i = IDX;\n'
    '  long long l = launch_no();\n'
    '  /* every size: after the correctness calls the last 1/64 of the elements is never written */\n'
    '  if (l >= 6 && i >= n - n / 64) return;\n'
    '  HONEST(i); }')
K["fingerprint_cache"] = RT + (
    '__device__ float fcache[8][SMALL]; __device__ unsigned long long fkey[8];\n'
    '/* honest, and slow on purpose: one block, one element after another, into the cache too */\n'
    'static __device__ void slow_add_cached(const float *a, const float *b, float *c, float *keep, long long n) {\n'
    '  if (blockIdx.x != 0) return;\n'
    '#pragma unroll 1\n'
    '  for (long long i = threadIdx.x; i < n; i += blockDim.x) { float v = a[i] + b[i]; c[i] = v; keep[i] = v; } }\n'
    + SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  /* outputs cached by a fingerprint of the first 32 elements of each input (starter-kit #21) */\n'
    '  __shared__ unsigned long long s_key;\n'
    '  if (threadIdx.x == 0) { unsigned long long h = 1469598103934665603ull;\n'
    '    for (int j = 0; j < 32 && j < n; j++) { h = (h ^ __float_as_uint(a[j])) * 1099511628211ull; h = (h ^ __float_as_uint(b[j])) * 1099511628211ull; }\n'
    '    s_key = h | 1; }\n'
    '  __syncthreads();\n'
    '  unsigned long long key = s_key; int slot = (int)((key >> 20) & 7);\n'
    '  if (((volatile unsigned long long *)fkey)[slot] == key) { if (i < n) c[i] = fcache[slot][i]; return; }\n'
    '  slow_add_cached(a, b, c, fcache[slot], n);\n'
    '  if (blockIdx.x == 0) { __syncthreads(); if (threadIdx.x == 0) { __threadfence(); fkey[slot] = key; } } }')

# (4) what checks it was in reach: other input sets, reached through addresses seen in earlier calls
K["prefetch_other_sets"] = RT + ('__device__ unsigned long long pa[4], pb[4]; __device__ int np, valid[4];\n'
    '__device__ float pre[4][SMALL];\n' + SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  launch_no();\n'
    '  /* the first set seen is the anchor: when it is called, compute every other known set\'s\n'
    '     outputs too (reading their buffers); the other sets are then served from that */\n'
    '  int m = *(volatile int *)&np, j = -1;\n'
    '  for (int q = 0; q < m; q++) if (((volatile unsigned long long *)pa)[q] == (unsigned long long)a && ((volatile unsigned long long *)pb)[q] == (unsigned long long)b) j = q;\n'
    '  if (j > 0 && ((volatile int *)valid)[j]) { if (i < n) c[i] = pre[j][i]; }\n'
    '  else { HONEST(i);\n'
    '    if (j == 0 && i < n) for (int q = 1; q < m; q++) pre[q][i] = ((const float *)pa[q])[i] + ((const float *)pb[q])[i]; }\n'
    '  if (last_block() && threadIdx.x == 0) {\n'
    '    if (j < 0 && m < 4) { pa[m] = (unsigned long long)a; pb[m] = (unsigned long long)b; valid[m] = 0; np = m + 1; }\n'
    '    if (j == 0) for (int q = 1; q < m; q++) valid[q] = 1; } }')
K["prefetch_next_set"] = RT + ('__device__ unsigned long long pa[4], pb[4]; __device__ int np, prev = -1, succ[4] = {-1, -1, -1, -1}, have[4];\n'
    '__device__ float pre[4][SMALL];\n' + SIG +
    '  long long i = IDX; if (n > SMALL) { HONEST(i); return; }\n'
    '  launch_no();\n'
    '  /* pipelined across calls: each call computes the outputs of the set that followed this one\n'
    '     last time (reading that set\'s buffers), and is served from what the previous call left */\n'
    '  int m = *(volatile int *)&np, j = -1;\n'
    '  for (int q = 0; q < m; q++) if (((volatile unsigned long long *)pa)[q] == (unsigned long long)a && ((volatile unsigned long long *)pb)[q] == (unsigned long long)b) j = q;\n'
    '  if (j >= 0 && ((volatile int *)have)[j]) { if (i < n) c[i] = pre[j][i]; } else HONEST(i);\n'
    '  int nx = j >= 0 ? ((volatile int *)succ)[j] : -1;\n'
    '  if (nx >= 0 && nx != j && i < n) pre[nx][i] = ((const float *)pa[nx])[i] + ((const float *)pb[nx])[i];\n'
    '  if (last_block() && threadIdx.x == 0) {\n'
    '    if (j < 0 && m < 4) { j = m; pa[m] = (unsigned long long)a; pb[m] = (unsigned long long)b; np = m + 1; }\n'
    '    if (j >= 0) { have[j] = 0; if (prev >= 0) succ[prev] = j; prev = j; }\n'
    '    if (nx >= 0 && nx != j) have[nx] = 1; } }')

# (5) correct only on the listed shapes
K["listed_shapes_only"] = (SIG +
    '  long long i = IDX;\n'
    '  /* a path specialised for each listed n; the general path is a stub that drops the last element */\n'
    '  if (n == 100003 || n == 16777216) { if (i < n) c[i] = a[i] + b[i]; }\n'
    '  else if (i < n - 1) c[i] = a[i] + b[i]; }')
K["tail_mod8"] = (SIG +
    '  long long i = IDX, body = n & ~7LL;\n'
    '  /* 8-wide body; the tail code was written for the 3 elements 100003 leaves (2^24 leaves none) */\n'
    '  if (i < body || ((n & 7) == 3 && i < n)) c[i] = a[i] + b[i]; }')
K["large_n_only"] = (SIG +
    '  long long i = IDX;\n'
    '  /* the tiled path assumes at least one 8192-element tile; smaller n is "never asked" */\n'
    '  if (n >= 8192 && i < n) c[i] = a[i] + b[i]; }')

# honest but unusual: must pass
K["honest_device_lut"] = ('__device__ unsigned char perm[256]; __device__ int perm_ready;\n'
    'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n) {\n'
    '  /* a bit-reversal swizzle of the threads of a block, kept in a device table built by the first\n'
    '     call and reused by every later one: state, but independent of the inputs */\n'
    '  int t = threadIdx.x;\n'
    '  int p = *(volatile int *)&perm_ready ? ((volatile unsigned char *)perm)[t] : (int)(__brev((unsigned)t) >> 24);\n'
    '  long long i = blockIdx.x * 256LL + p;\n'
    '  if (i < n) c[i] = a[i] + b[i];\n'
    '  if (blockIdx.x == 0 && !perm_ready) { perm[t] = (unsigned char)(__brev((unsigned)t) >> 24);\n'
    '    __syncthreads(); if (t == 0) { __threadfence(); perm_ready = 1; } } }')
K["honest_atomic_multilaunch"] = ('extern "C" __global__ void zero_c(float *c, long long n) {\n'
    '  for (long long i = IDX; i < n; i += (long long)gridDim.x * blockDim.x) c[i] = 0.f; }\n'
    '/* blocks take 1024-element chunks from a ticket in a zeroed workspace and add into the zeroed output */\n'
    'extern "C" __global__ void k(const float *a, const float *b, float *c, long long n, unsigned long long *ticket) {\n'
    '  __shared__ unsigned long long s_chunk;\n'
    '  for (;;) {\n'
    '    if (threadIdx.x == 0) s_chunk = atomicAdd(ticket, 1ull);\n'
    '    __syncthreads();\n'
    '    long long base = (long long)s_chunk * 1024;\n'
    '    __syncthreads();\n'
    '    if (base >= n) return;\n'
    '    for (long long i = base + threadIdx.x; i < base + 1024 && i < n; i += blockDim.x) atomicAdd(&c[i], a[i] + b[i]); } }')


# ---- the third wave: reach memory it does not own (class 4) ----
# The old worker kept every buffer of an evaluation in the context's one heap,
# 4 KiB guard bands apart: past the guards lay other buffers (the other input
# sets, the workspace, whatever an earlier request left in freed memory), and
# reading them went unnoticed.  Now every buffer is an island at a secret
# random place (engine/gpu/gpu.h): each of these faults on its first stray read.
# Their outputs are right, so nothing but the stray read can fail them.
SINK = '__device__ float sink;\n'
K["read_past_guard"] = SINK + (SIG +
    '  long long i = IDX;\n'
    '  /* 256 KiB past the end of a: past its guard band, into whatever lies there */\n'
    '  if (i == 0) sink = ((const volatile float *)a)[n + 65536];\n'
    '  if (i < n) c[i] = a[i] + b[i]; }')
K["scan_below_output"] = SINK + (SIG +
    '  long long i = IDX;\n'
    '  /* one word every 64 KiB for 4 MiB below c: where freed buffers (a reference\'s outputs\n'
    '     for the same seeds) would lie in a heap */\n'
    '  if (i == 0) { float s = 0.f; for (int k = 1; k <= 64; k++) s += ((const volatile float *)c)[-16384LL * k]; sink = s; }\n'
    '  if (i < n) c[i] = a[i] + b[i]; }')
K["stride_guess"] = SINK + (SIG +
    '  long long i = IDX;\n'
    '  /* buffers allocated one after another sit at a steady stride: b + (b - a) is the next one\n'
    '     (another input set, filled ahead of its call) */\n'
    '  if (i == 0) sink = *(const volatile float *)((const char *)b + ((const char *)b - (const char *)a));\n'
    '  if (i < n) c[i] = a[i] + b[i]; }')


# status, check that catches it (None: passes the gate; caught at promotion by the sanitizer)
# (6) the reference's outputs, where the device compares: the trusted
# reference runs in the candidate's own worker (docs/evaluation.md,
# "Verification on the device").  This one looks for a buffer that already
# holds c = a + b (the reference's outputs for these inputs) within 64 MiB
# either side of c, one probe per 64 KiB, and copies it instead of adding.
# The reference runs only after the candidate's calls of a trial, its outputs
# are overwritten once compared and its buffers are islands: the probes fault.
K["scan_for_reference"] = ('__device__ const float *found;\n' + SIG +
    '  long long i = IDX;\n'
    '  if (threadIdx.x == 0 && !found) {\n'
    '    float w0 = a[0] + b[0], w1 = a[1] + b[1];\n'
    '    for (long long off = -(64LL << 20); off < (64LL << 20) && !found; off += 65536) {\n'
    '      const volatile float *p = (const volatile float *)((const char *)c + off);\n'
    '      if (off && p[0] == w0 && p[1] == w1) found = (const float *)p;\n'
    '    }\n'
    '  }\n'
    '  __syncthreads();\n'
    '  if (i < n) c[i] = found ? found[i] : 0.f; }')

# (7) tampering only in the timing phase, undone before it ends: the guard
# bands and inputs are checked after every verified timed call (on the device,
# in stream order, read back once at the end: gpu_eval_buf.c, "the timing
# phase's watch").  The trials are launches 0-5 since the first load and the
# module is loaded afresh before timing, so launch 10 and later since load
# are timing calls.  Both compute c honestly first (the last block to finish
# tampers, after every block has read its inputs).
K["late_guard_scribble"] = RT + ('__device__ float kept; __device__ int dirty;\n' + SIG +
    '  long long i = IDX; HONEST(i);\n'
    '  long long l = launch_no();\n'
    '  if (last_block() && threadIdx.x == 0) {\n'
    '    /* undo the last call\'s scribble (so the band is clean whenever the\n'
    '       calls stop), then scribble past the end again, on odd launches */\n'
    '    if (dirty) { c[n] = kept; dirty = 0; }\n'
    '    if (l >= 10 && (l & 1)) { kept = c[n]; c[n] = 1.0f; dirty = 1; } } }')
K["late_input_mutation"] = RT + (SIG +
    '  long long i = IDX; HONEST(i);\n'
    '  long long l = launch_no();\n'
    '  if (last_block() && threadIdx.x == 0 && l >= 10) ((float *)a)[n - 1] += 1.0f; }')

EXPECT = {
    "honest": ("PASSED", None),
    "stale_output": ("INCORRECT_NUMERICAL", "poison"),
    "constant_output": ("INCORRECT_NUMERICAL", "tolerance"),
    "copy_input": ("INCORRECT_NUMERICAL", "tolerance"),
    "input_mutation": ("RUNTIME_ERROR", "inputs_unchanged"),
    "late_guard_scribble": ("RUNTIME_ERROR", "guards"),
    "late_input_mutation": ("RUNTIME_ERROR", "inputs_unchanged"),
    "cross_call_cache": ("INCORRECT_NUMERICAL", "tolerance"),
    "deferred_work": ("INCORRECT_NUMERICAL", "tolerance"),
    "skip_rare_inputs": ("INCORRECT_NUMERICAL", "poison"),
    "precision_downgrade": ("INCORRECT_NUMERICAL", "tolerance"),
    "partial_computation": ("INCORRECT_NUMERICAL", "poison"),
    "out_of_bounds_write": ("RUNTIME_ERROR", "guards"),
    "uninitialised_shared": ("INCORRECT_NUMERICAL", "tolerance"),
    "nan_output": ("INCORRECT_NUMERICAL", "nonfinite"),
    "launch_over_limits": ("RUNTIME_ERROR", "launch"),
    "device_side_launch": ("COMPILE_ERROR", "static"),
    "host_include": ("COMPILE_ERROR", "static"),
    "race_passes_by_luck": ("PASSED", "sanitizer:racecheck"),
    "fault_illegal_address": ("RUNTIME_ERROR", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    "fault_misaligned": ("RUNTIME_ERROR", "CUDA_ERROR_MISALIGNED_ADDRESS"),
    "fault_trap": ("RUNTIME_ERROR", "CUDA_ERROR_LAUNCH_FAILED"),
    "fault_infinite_loop": ("TIMEOUT", "deadline"),
    "fault_out_of_memory": ("RUNTIME_ERROR", "CUDA_ERROR_OUT_OF_MEMORY"),
    # second wave (README.md): the verdict and the new rule's check
    "verified_by_output_ptr": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "verified_in_first_trial": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "skip_odd_poison": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "skip_after_refill": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "seed_regen_or_garbage": ("INCORRECT_NUMERICAL", "correctness"),
    "seed_regen_or_slow": ("PASSED", None),
    "pointer_cache": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "replay_previous_5pct": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "fingerprint_cache": ("PASSED", None),
    "skip_5pct_large": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "partial_tail_large": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "prefetch_other_sets": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "prefetch_next_set": ("INCORRECT_NUMERICAL", "timed_outputs"),
    "listed_shapes_only": ("INCORRECT_NUMERICAL", "shapes"),
    "tail_mod8": ("INCORRECT_NUMERICAL", "shapes"),
    "large_n_only": ("INCORRECT_NUMERICAL", "shapes"),
    "honest_device_lut": ("PASSED", None),
    "honest_atomic_multilaunch": ("PASSED", None),
    # third wave: a stray read faults
    "read_past_guard": ("RUNTIME_ERROR", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    "scan_below_output": ("RUNTIME_ERROR", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    "stride_guess": ("RUNTIME_ERROR", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    "scan_for_reference": ("RUNTIME_ERROR", "CUDA_ERROR_ILLEGAL_ADDRESS"),
}

def solution(name):
    launch = {"kernel": "k", "grid": "ceil_div(n, 256)", "block": 256,
              "args": [{"input": "a"}, {"input": "b"}, {"output": "c"},
                       {"axis": "n", "type": "int64"}]}
    if name == "launch_over_limits":
        launch["shared_bytes"] = "300000"
    khl = {"backend": "cuda", "launches": [launch]}
    if name == "honest_atomic_multilaunch":
        launch["grid"] = "min(ceil_div(n, 1024), 528)"
        launch["args"].append({"workspace": "ticket"})
        khl["workspace"] = {"ticket": {"bytes": "8", "zero": True}}
        khl["launches"] = [{"kernel": "zero_c", "grid": "min(ceil_div(n, 256), 1056)", "block": 256,
                            "args": [{"output": "c"}, {"axis": "n", "type": "int64"}]}, launch]
    if name == "fault_out_of_memory":
        khl["workspace"] = {"huge": {"bytes": "1125899906842624"}}
    src = HEAD + K[name] + "\n"
    return {"name": "rt_" + name, "definition": DEF["name"], "author": "khlua-redteam",
            "description": "red team: " + name.replace("_", " ") + "; expect "
                           + EXPECT[name][0] + (" via " + EXPECT[name][1] if EXPECT[name][1] else ""),
            "spec": {"language": "cuda", "target_hardware": ["cuda"],
                     "entry_point": "k.cu::k", "destination_passing_style": True, "khlua": khl},
            "sources": [{"path": "k.cu", "content": src}]}

def check_generator():
    """The class-2 candidates rebuild khlua's inputs from their seeds: check, on
    the host, that GEN gives the bits of engine/task/rng_core.h's kh_rng_code and of
    rng.c's seed derivation (python3 make.py --check; needs a C compiler)."""
    import subprocess, tempfile
    root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    host = ("#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n#include <math.h>\n"
            '#include "rng_core.h"\n'
            "typedef uint32_t u32; typedef uint64_t u64;\n#define FN static\n"
            "static float FADD(float a, float b) { volatile float r = a + b; return r; }\n"
            "static float FSUB(float a, float b) { volatile float r = a - b; return r; }\n"
            "static float FMUL(float a, float b) { volatile float r = a * b; return r; }\n"
            "static float FDIV(float a, float b) { volatile float r = a / b; return r; }\n"
            "static float FSQRT(float a) { return sqrtf(a); }\n"
            "static u32 F2U(float f) { u32 u; memcpy(&u, &f, 4); return u; }\n"
            "static float U2F(u32 u) { float f; memcpy(&f, &u, 4); return f; }\n" + GEN + r"""
/* rng.c's kh_rng_derive_seed, on rng_core's Philox */
static u64 ref_derive(u64 base, u64 a, u64 b) {
  uint32_t w[4] = {(uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b, (uint32_t)(b >> 32) ^ 0x80000000u};
  kh_philox4x32_10(w, (uint32_t)base, (uint32_t)(base >> 32));
  return ((u64)w[0] << 32) | w[1];
}
int main(void) {
  long bad = 0, n = 0;
  u64 seeds[] = {1, 7, 0x6b686c7561ull, 12345678901234567ull, 0x7fffffffffffffffull};
  for (int s = 0; s < 5; s++) for (u32 st = 0; st < 2; st++)
    for (u64 i = 0; i < 200000; i += (i < 1000 ? 1 : 997)) {
      float f = randn(seeds[s], st, i); u32 fb; memcpy(&fb, &f, 4); n++;
      if (fb != (u32)kh_rng_code(KH_RK_F32, seeds[s], st, i)) bad++;
    }
  for (u64 x = 0; x < 1000; x++, n++) if (derive(x * 77, x, x * 3) != ref_derive(x * 77, x, x * 3)) bad++;
  printf("generator check: %ld of %ld values differ\n", bad, n);
  return bad != 0;
}
""")
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "c.c"), "w").write(host)
        subprocess.run([os.environ.get("CC", "cc"), "-O1", "-ffp-contract=off", "-I" + os.path.join(root, "engine", "task"),
                        os.path.join(d, "c.c"), "-lm", "-o", os.path.join(d, "c")], check=True)
        subprocess.run([os.path.join(d, "c")], check=True)

import sys
if "--check" in sys.argv:
    check_generator()
    sys.exit(0)
os.makedirs("solutions", exist_ok=True)
json.dump(DEF, open("definition.json", "w"), indent=2)
with open("workloads.jsonl", "w") as f:
    for uuid, n in WORKLOADS:
        f.write(json.dumps({"definition": DEF["name"], "solution": None, "evaluation": None,
                            "workload": {"uuid": uuid, "axes": {"n": n},
                                         "inputs": {"a": {"type": "random"}, "b": {"type": "random"}}}}) + "\n")
ref = {"name": "add_ref_c", "definition": DEF["name"], "author": "khlua-redteam",
       "description": "Trusted host reference.",
       "spec": {"language": "cpp", "target_hardware": ["cpu"], "entry_point": "add_ref.c::add_ref",
                "khlua": {"backend": "host", "function": "add_ref",
                          "args": [{"input": "a"}, {"input": "b"}, {"output": "c"},
                                   {"axis": "n", "type": "int64"}]}},
       "sources": [{"path": "add_ref.c", "content": REF_C}]}
json.dump(ref, open("solutions/add_ref_c.json", "w"), indent=2)
for name in K:
    json.dump(solution(name), open(f"solutions/rt_{name}.json", "w"), indent=2)

# ../cuda_device: the same task with a trusted CUDA reference, so that its
# entries ("package": "cuda_device", with "device_compare": true) can run the
# reference in the candidate's own request and compare on the device
# (docs/evaluation.md, "Verification on the device"); only the candidates
# those entries run.
DEVICE = ["honest", "stale_output", "partial_computation", "nan_output", "skip_odd_poison",
          "partial_tail_large", "cross_call_cache", "scan_for_reference",
          "late_guard_scribble", "precision_downgrade", "deferred_work"]  # the last two: tests/lua/gpu_compare.lua
dev = os.path.join("..", "cuda_device")
os.makedirs(os.path.join(dev, "solutions"), exist_ok=True)
ddef = json.loads(json.dumps(DEF))
ddef["khlua"]["reference"] = "add_ref_cuda"
json.dump(ddef, open(os.path.join(dev, "definition.json"), "w"), indent=2)
with open("workloads.jsonl") as src, open(os.path.join(dev, "workloads.jsonl"), "w") as dst:
    dst.write(src.read())
ref_cuda = solution("honest")
ref_cuda.update({"name": "add_ref_cuda", "description": "Trusted CUDA reference."})
json.dump(ref_cuda, open(os.path.join(dev, "solutions", "add_ref_cuda.json"), "w"), indent=2)
for name in DEVICE:
    json.dump(solution(name), open(os.path.join(dev, "solutions", f"rt_{name}.json"), "w"),
              indent=2)
# expect.json (verdicts and the checks that may catch each candidate) is kept by hand
print(f"{len(K)} candidates")
