-- compile_bf16.lua: compile a bf16 kernel with NVRTC and print what the
-- cubin says about it.  No GPU needed.   khlua examples/compile_bf16.lua
local kh = require "kh"

local source = [[
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(256)
scale_bf16(const __nv_bfloat16 *x, __nv_bfloat16 *y, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16(__bfloat162float(x[i]) * s);
}
]]

local art, log, code = kh.compile.build { source = source, kernels = { "scale_bf16" } }
if not art then
  io.stderr:write(code, ": ", log, "\n")
  os.exit(1)
end
local k = art.kernels.scale_bf16
print(string.format("scale_bf16 for %s: %d registers, %d B static shared, %d B local, "
  .. "max %d threads; compiled in %.1f ms (NVRTC %.1f ms, first-time PCH warm-up %.1f ms), "
  .. "cubin %d bytes, hash %s", art.arch, k.registers, k.shared_static, k.local_bytes,
  k.max_threads, art.timings.total * 1e3, art.timings.compile * 1e3, art.timings.warm * 1e3,
  #art.cubin, art.hash))

-- the same request again is a cache hit
local again = assert(kh.compile.build { source = source, kernels = { "scale_bf16" } })
print(string.format("again: cache hit %s in %.3f ms", tostring(again.cache_hit),
  again.timings.total * 1e3))
