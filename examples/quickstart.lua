-- quickstart.lua: a first run of khlua on this machine.
--   khlua examples/quickstart.lua [DATASET]
-- 1. what the machine offers (the doctor report, in short);
-- 2. compiles a bf16 RMSNorm kernel with NVRTC and prints what its cubin says
--    (registers, shared memory, spills) and how long the compile took, cold,
--    then from the cache;
-- 3. checks khlua's task library (kernels/: FlashInfer-Bench definitions and
--    workloads with khlua's references and baselines), or the FlashInfer-Bench
--    dataset given as DATASET, and prints the summary.
local kh = require "kh"

-- 1. The machine.
local report = kh.doctor()
local gpus = #report.gpus
print(string.format("khlua %s: %s", kh.version.khlua,
  gpus > 0 and (gpus .. " GPU(s): " .. report.gpus[1].name) or "no GPU on this machine"))
for _, c in ipairs(report.checks) do
  if c.status ~= "ok" then print(string.format("  %-8s %-18s %s", c.status, c.name, c.detail)) end
end

-- 2. A kernel.
local source = [[
#include <cuda_bf16.h>
// y = x / rms(x) * w over rows of n bf16 values; one block of 256 threads a row.
extern "C" __global__ void __launch_bounds__(256)
rmsnorm_bf16(const __nv_bfloat16 *x, const __nv_bfloat16 *w, __nv_bfloat16 *y, int n, float eps)
{
    __shared__ float partial[8];
    const __nv_bfloat16 *row = x + (size_t)blockIdx.x * n;
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = __bfloat162float(row[i]);
        ss += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
    __syncthreads();
    float total = 0.f;
    for (int k = 0; k < 8; k++) total += partial[k];
    float inv = rsqrtf(total / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        y[(size_t)blockIdx.x * n + i] =
            __float2bfloat16(__bfloat162float(row[i]) * inv * __bfloat162float(w[i]));
}
]]
local art, log, code = kh.compile.build { source = source, kernels = { "rmsnorm_bf16" } }
if not art then
  io.stderr:write("compile failed (", code, "):\n", log, "\n")
  os.exit(1)
end
local k = art.kernels.rmsnorm_bf16
print(string.format("rmsnorm_bf16 (%s): %d registers, %d B static shared memory, %d B local, "
  .. "%d spill instructions; compiled in %.1f ms", art.arch, k.registers, k.shared_static,
  k.local_bytes, k.spills or 0, art.timings.total * 1e3))
local again = assert(kh.compile.build { source = source, kernels = { "rmsnorm_bf16" } })
print(string.format("the same compile again: %s in %.3f ms",
  again.cache_hit and "cache hit" or "recompiled", again.timings.total * 1e3))

-- 3. A dataset: the one given, else the task library beside this script.
local function summary(path, r)
  local s = r.summary
  return string.format("%s: %d definitions, %d workloads, %d constraints (%d deferred: they "
    .. "read tensor data), %d errors, %d warnings", path, s.definitions or 0, s.workloads or 0,
    s.constraints or 0, s.deferred or 0, s.errors or 0, s.warnings or 0)
end
if arg[1] then
  local r, msg = kh.task.check(arg[1])
  print(r and summary(arg[1], r) or ("dataset check failed: " .. tostring(msg)))
else
  local root = ((arg[0] or ""):match("^(.*)/examples/[^/]*$") or ".") .. "/kernels"
  local p = io.popen("ls -1 '" .. root:gsub("'", "'\\''") .. "' 2>/dev/null")
  local n, defs, wls, errs = 0, 0, 0, 0
  for name in p:lines() do
    local r = kh.task.check(root .. "/" .. name)
    if r and (r.summary.definitions or 0) > 0 then
      n, defs = n + 1, defs + r.summary.definitions
      wls, errs = wls + (r.summary.workloads or 0), errs + (r.summary.errors or 0)
    end
  end
  p:close()
  print(string.format("the task library (%s): %d packages, %d definitions, %d workloads, "
    .. "%d errors", root, n, defs, wls, errs))
end
