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

# status, check that catches it (None: passes the gate; caught at promotion by the sanitizer)
EXPECT = {
    "honest": ("PASSED", None),
    "stale_output": ("INCORRECT_NUMERICAL", "poison"),
    "constant_output": ("INCORRECT_NUMERICAL", "tolerance"),
    "copy_input": ("INCORRECT_NUMERICAL", "tolerance"),
    "input_mutation": ("RUNTIME_ERROR", "inputs_unchanged"),
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
}

def solution(name):
    launch = {"kernel": "k", "grid": "ceil_div(n, 256)", "block": 256,
              "args": [{"input": "a"}, {"input": "b"}, {"output": "c"},
                       {"axis": "n", "type": "int64"}]}
    if name == "launch_over_limits":
        launch["shared_bytes"] = "300000"
    khl = {"backend": "cuda", "launches": [launch]}
    if name == "fault_out_of_memory":
        khl["workspace"] = {"huge": {"bytes": "1125899906842624"}}
    src = HEAD + K[name] + "\n"
    return {"name": "rt_" + name, "definition": DEF["name"], "author": "khlua-redteam",
            "description": "red team: " + name.replace("_", " ") + "; expect "
                           + EXPECT[name][0] + (" via " + EXPECT[name][1] if EXPECT[name][1] else ""),
            "spec": {"language": "cuda", "target_hardware": ["cuda"],
                     "entry_point": "k.cu::k", "destination_passing_style": True, "khlua": khl},
            "sources": [{"path": "k.cu", "content": src}]}

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
# expect.json (verdicts and the checks that may catch each candidate) is kept by hand
print(f"{len(K)} candidates")
