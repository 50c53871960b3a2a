"""make.py: writes the compute-sanitizer test package (tests/lua/gpu_sanitize.lua):
c = alpha * a + b with alpha a *random* float32 scalar passed by value
({"scalar": "alpha"}), and candidates whose defect the hardened gate cannot
see but one compute-sanitizer tool can: an out-of-bounds read (memcheck; one
from the fifth call on, which only the timing phase reaches), a
shared-memory race that gives the right answer by luck (racecheck), a read
of workspace memory nobody wrote (initcheck); an honest one that every tool
passes, and one that ignores alpha (the random scalar must reach the kernel).
Run from this folder:  python3 make.py"""
import json, os

DEF = {
    "name": "sanitize_axpb_f32",
    "op_type": "elementwise",
    "description": "c = alpha * a + b over n float32 values, alpha a random scalar.",
    "tags": ["status:test"],
    "axes": {"n": {"type": "var", "description": "Elements."}},
    "constraints": ["n >= 1"],
    "inputs": {"a": {"shape": ["n"], "dtype": "float32"},
               "b": {"shape": ["n"], "dtype": "float32"},
               "alpha": {"shape": None, "dtype": "float32"}},
    "outputs": {"c": {"shape": ["n"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(a, b, alpha):\n    return alpha * a + b\n",
    "khlua": {"reference": "axpb_ref_c", "tolerance": {"atol": 1e-5, "rtol": 1e-5},
              "evaluator": "default"},
}
WORKLOADS = [("5a417e57-0001-4000-8000-000000000001", 4099)]

REF_C = """#include <stdint.h>
void axpb_ref(const float *a, const float *b, float alpha, float *c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        c[i] = alpha * a[i] + b[i];
}
"""

HEAD = "#define IDX (blockIdx.x * (long long)blockDim.x + threadIdx.x)\n"
SIG = "(const float *a, const float *b, float alpha, float *c, long long n, int *ws)"
K = {}
K["honest"] = 'extern "C" __global__ void k' + SIG + ' { long long i = IDX; if (i < n) c[i] = alpha * a[i] + b[i]; }'
K["ignores_alpha"] = 'extern "C" __global__ void k' + SIG + ' { long long i = IDX; if (i < n) c[i] = a[i] + b[i]; }'
# Reads one element past a: the value is never used (volatile keeps the load),
# the output is right and no guard band is damaged; memcheck sees the read.
K["oob_read"] = ('extern "C" __global__ void k' + SIG + ' { long long i = IDX; if (i >= n) return;\n'
                 '  if (i == n - 1) { float x = ((const volatile float *)a)[n]; (void)x; }\n'
                 '  c[i] = alpha * a[i] + b[i]; }')
# The same read, but only from the fifth call after the module was loaded: a
# promotion-time sanitizer run of one correctness trial (two calls) never
# sees it; the timing phase, which the sanitizer run now covers, does.
K["oob_read_timed"] = ('__device__ unsigned int calls;\n'
                       'extern "C" __global__ void k' + SIG + ' { long long i = IDX;\n'
                       '  unsigned int seen = *(volatile unsigned int *)&calls;\n'
                       '  if (i == n - 1 && seen >= 4) { float x = ((const volatile float *)a)[n]; (void)x; }\n'
                       '  if (i < n) c[i] = alpha * a[i] + b[i];\n'
                       '  if (i == 0) atomicAdd(&calls, 1u); }')
# Each thread writes shared memory, then reads what a thread of the next
# warp wrote, with no barrier between: a write-read race across warps that
# racecheck reports whatever the timing; the value read is unused, so the
# output is right every time.
K["shared_race"] = ('extern "C" __global__ void k' + SIG + ' {\n'
                    '  __shared__ volatile float s[256]; long long i = IDX;\n'
                    '  s[threadIdx.x] = i < n ? alpha * a[i] + b[i] : 0.f;\n'
                    '  float v = s[(threadIdx.x + 32) & 255]; (void)v;\n'
                    '  if (i < n) c[i] = alpha * a[i] + b[i]; }')
# Reads workspace it never wrote (zero: false): the value is unused, the
# output right; initcheck sees the uninitialised read.
K["uninit_read"] = ('extern "C" __global__ void k' + SIG + ' { long long i = IDX; if (i >= n) return;\n'
                    '  int t = ((volatile int *)ws)[i]; (void)t; ws[i] = 1;\n'
                    '  c[i] = alpha * a[i] + b[i]; }')

EXPECT = {  # without the sanitizer, with it: (status, failed_check)
    "honest": [["PASSED", None], ["PASSED", None]],
    "ignores_alpha": [["INCORRECT_NUMERICAL", "correctness"], ["INCORRECT_NUMERICAL", "correctness"]],
    "oob_read": [["PASSED", None], ["RUNTIME_ERROR", "sanitizer:memcheck"]],
    "oob_read_timed": [["PASSED", None], ["RUNTIME_ERROR", "sanitizer:memcheck"]],
    "shared_race": [["PASSED", None], ["RUNTIME_ERROR", "sanitizer:racecheck"]],
    "uninit_read": [["PASSED", None], ["RUNTIME_ERROR", "sanitizer:initcheck"]],
}


def solution(name):
    launch = {"kernel": "k", "grid": "ceil_div(n, 256)", "block": 256,
              "args": [{"input": "a"}, {"input": "b"}, {"scalar": "alpha"}, {"output": "c"},
                       {"axis": "n", "type": "int64"}, {"workspace": "ws"}]}
    khl = {"backend": "cuda", "launches": [launch],
           "workspace": {"ws": {"bytes": "n * 4", "zero": False}}}
    return {"name": "san_" + name, "definition": DEF["name"], "author": "khlua-tests",
            "description": "sanitizer test: " + name.replace("_", " "),
            "spec": {"language": "cuda", "target_hardware": ["cuda"],
                     "entry_point": "k.cu::k", "destination_passing_style": True, "khlua": khl},
            "sources": [{"path": "k.cu", "content": HEAD + K[name] + "\n"}]}


os.makedirs("solutions", exist_ok=True)
json.dump(DEF, open("definition.json", "w"), indent=2)
with open("workloads.jsonl", "w") as f:
    for uuid, n in WORKLOADS:
        f.write(json.dumps({"definition": DEF["name"], "solution": None, "evaluation": None,
                            "workload": {"uuid": uuid, "axes": {"n": n},
                                         "inputs": {"a": {"type": "random"}, "b": {"type": "random"},
                                                    "alpha": {"type": "random"}}}}) + "\n")
ref = {"name": "axpb_ref_c", "definition": DEF["name"], "author": "khlua-tests",
       "description": "Trusted host reference.",
       "spec": {"language": "cpp", "target_hardware": ["cpu"], "entry_point": "axpb_ref.c::axpb_ref",
                "khlua": {"backend": "host", "function": "axpb_ref",
                          "args": [{"input": "a"}, {"input": "b"}, {"scalar": "alpha"},
                                   {"output": "c"}, {"axis": "n", "type": "int64"}]}},
       "sources": [{"path": "axpb_ref.c", "content": REF_C}]}
json.dump(ref, open("solutions/axpb_ref_c.json", "w"), indent=2)
for name in K:
    json.dump(solution(name), open(f"solutions/san_{name}.json", "w"), indent=2)
json.dump(EXPECT, open("expect.json", "w"), indent=2)
print(f"{len(K)} candidates")
