-- test_compile.lua: kh.compile from Lua and `khlua compile` from the shell:
-- artifacts as tables, nil, log, "ECOMPILE" on errors, misuse raises, the
-- static checks, resources read back from a cubin string, the trusted path.
local T = require "testlib"
local kh = require "kh"

if not kh.version.nvrtc then T.skip_all("NVRTC not available") end

math.randomseed(T.seed())

local function bf16_source(smem, bounds)
  return string.format([[
#include <cuda_bf16.h>
extern "C" __global__ void __launch_bounds__(%d) scale_bf16(
    const __nv_bfloat16 *x, __nv_bfloat16 *y, float s, int n) {
  __shared__ float t[%d];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  t[threadIdx.x %% %d] = i < n ? __bfloat162float(x[i]) : 0.f;
  __syncthreads();
  if (i < n) y[i] = __float2bfloat16(t[(threadIdx.x + 1) %% %d] * s);
}
]], bounds, smem, smem, smem)
end

T.test("build returns an artifact with resources", function()
  local smem, bounds = math.random(16, 2000), 32 * math.random(1, 32)
  local a = assert(kh.compile.build { source = bf16_source(smem, bounds), kernels = { "scale_bf16" } })
  T.eq(a.ok, true)
  T.eq(#a.hash, 32)
  T.eq(a.arch, kh.compile.default_arch)
  local k = a.kernels.scale_bf16
  T.eq(k.shared_static, 4 * smem)
  T.eq(k.max_threads, bounds)
  T.ok(k.registers > 0)
  T.eq(#a.cubin, a.cubin_bytes)
  T.eq(a.cubin:sub(1, 4), "\127ELF")
  T.ok(a.timings.compile > 0 and a.timings.total >= a.timings.compile)
  -- the cubin string reads back the same
  local r = assert(kh.compile.resources(a.cubin))
  T.eq(r.kernels.scale_bf16.registers, k.registers)
  T.eq(r.sm, a.sm)
end)

T.test("a repeat is a cache hit with the same key", function()
  local req = { source = bf16_source(math.random(16, 500), 128), trusted = true }
  local a = assert(kh.compile.build(req))
  local b = assert(kh.compile.build(req))
  T.eq(a.cache_hit, false)
  T.eq(b.cache_hit, true)
  T.eq(b.hash, a.hash)
  T.eq(b.cubin, a.cubin)
  T.eq(kh.compile.key(req), a.hash)
  T.ok(kh.compile.cache_stats().hits >= 1)
  req.options = { "--use_fast_math" }
  T.ne(kh.compile.key(req), a.hash)
end)

T.test("a syntax error gives nil, the log with its line, ECOMPILE", function()
  local pad = math.random(1, 40)
  local src = string.rep("// filler\n", pad) .. 'extern "C" __global__ void k(float *a) { a[0] = ; }\n'
  local a, log, code = kh.compile.build { source = src, name = "c.cu" }
  T.eq(a, nil)
  T.eq(code, "ECOMPILE")
  T.match(log, "c%.cu%(" .. (pad + 1) .. "%): error")
end)

T.test("static checks: nil, report naming the line, ECOMPILE", function()
  local pad = math.random(0, 20)
  local src = string.rep("\n", pad) .. "#include <stdio.h>\n"
  local a, log, code = kh.compile.build { source = src }
  T.eq(a, nil)
  T.eq(code, "ECOMPILE")
  T.match(log, "candidate%.cu:" .. (pad + 1) .. ": #include <stdio%.h> is not on the allowlist")
  -- check() alone
  T.eq(kh.compile.check('extern "C" __global__ void k() {}', { kernels = { "k" } }), true)
  local ok, rep = kh.compile.check("__global__ void k() {}", { kernels = { "k" } })
  T.eq(ok, nil)
  T.match(rep, "not declared extern \"C\"")
  local big = string.rep(" ", 2000)
  T.eq(select(3, kh.compile.check(big, { max_bytes = 1000 })), "ECOMPILE")
end)

-- a candidate of several files: the entry source includes the others by name
local function two_files(k)
  local entry = '#include <cuda_bf16.h>\n#include "util.cuh"\n'
    .. 'extern "C" __global__ void scale2(const float *x, float *y, int n) {\n'
    .. '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
    .. '  if (i < n) y[i] = scaled(x[i]);\n}\n'
  local util = '#pragma once\n#include "inc/sq.cuh"\n'
    .. string.format('__device__ float scaled(float v) { return %d.0f * sq(v); }\n', k)
  local sq = '#pragma once\n__device__ __forceinline__ float sq(float v) { return v * v; }\n'
  return entry, { ["util.cuh"] = util, ["inc/sq.cuh"] = sq }
end

T.test("a candidate of several files compiles; a header's change changes the hash", function()
  local k = math.random(2, 1000)
  local entry, headers = two_files(k)
  local req = { source = entry, name = "main.cu", headers = headers, kernels = { "scale2" } }
  local a = assert(kh.compile.build(req))
  T.eq(a.ok, true)
  T.ok(a.kernels.scale2, "the kernel is in the cubin")
  T.eq(kh.compile.key(req), a.hash)
  -- the same sources again: the same key; another header text: another key and cubin
  local _, same = two_files(k)
  T.eq(kh.compile.key { source = entry, name = "main.cu", headers = same, kernels = { "scale2" } }, a.hash)
  local _, other = two_files(k + 1)
  local b = assert(kh.compile.build { source = entry, name = "main.cu", headers = other, kernels = { "scale2" } })
  T.ne(b.hash, a.hash)
  T.ne(b.cubin, a.cubin)
  -- trusted, in this process (the PCH must not keep util.cuh): still the header's own cubin
  local t1 = assert(kh.compile.build { source = entry, headers = headers, trusted = true, cache = false })
  local t2 = assert(kh.compile.build { source = entry, headers = other, trusted = true, cache = false })
  T.eq(t1.pch, "off")
  T.ne(t1.cubin, t2.cubin)
  -- a compile error inside a header names it
  local broken = { ["util.cuh"] = "#pragma once\n\n__device__ float scaled(float v) { return v +; }\n" }
  local r, log, code = kh.compile.build { source = entry, name = "main.cu", headers = broken }
  T.eq(r, nil)
  T.eq(code, "ECOMPILE")
  T.match(log, "util%.cuh%(3%): error")
end)

T.test("a header's forbidden construct, bad name or absent include is refused, naming it", function()
  local entry, headers = two_files(3)
  local pad = math.random(0, 10)
  headers["util.cuh"] = "#pragma once\n" .. string.rep("// x\n", pad)
    .. "__device__ float scaled(float v) { cudaFree(0); return v; }\n"
  local r, log, code = kh.compile.build { source = entry, name = "main.cu", headers = headers }
  T.eq(r, nil)
  T.eq(code, "ECOMPILE")
  T.match(log, "util%.cuh:" .. (pad + 2) .. ": host API call 'cudaFree' is not allowed")
  -- kh.compile.check says the same
  local ok, rep = kh.compile.check(entry, { name = "main.cu", headers = headers })
  T.eq(ok, nil)
  T.match(rep, "util%.cuh:" .. (pad + 2) .. ": host API call")
  for _, bad in ipairs { "../x.h", "/etc/passwd", "./util.cuh", "a//b.h", "cuda_fp16.h" } do
    for _, trusted in ipairs { false, true } do
      local _, good = two_files(3)
      good[bad] = "// x\n"
      local a, msg, c = kh.compile.build { source = entry, name = "main.cu", headers = good, trusted = trusted }
      T.eq(a, nil, bad)
      T.eq(c, "ECOMPILE", bad)
      T.match(msg, "main%.cu: source '" .. bad:gsub("%p", "%%%0") .. "' cannot be a header", bad)
    end
  end
  -- a quoted include of a file that is none of the sources is still refused
  local _, good = two_files(3)
  local a, msg = kh.compile.build { source = '#include "absent.cuh"\n' .. entry, headers = good }
  T.eq(a, nil)
  T.match(msg, 'candidate%.cu:1: #include "absent%.cuh" is not on the allowlist')
  a, msg = kh.compile.build { source = '#include "absent.cuh"\n' .. entry, headers = good, trusted = true }
  T.eq(a, nil)
  T.match(msg, 'cannot open source file "absent%.cuh"')
  T.raises(function() kh.compile.build { source = entry, headers = "util.cuh" } end, "headers")
  T.raises(function() kh.compile.build { source = entry, headers = { "text" } } end, "headers")
end)

T.test("khlua compile --header: a candidate of several files from the shell", function()
  local dir = T.tmpdir()
  local k = math.random(2, 1000)
  local entry, headers = two_files(k)
  os.execute("mkdir -p " .. T.quote(dir .. "/inc"))
  T.write(dir .. "/main.cu", entry)
  for name, text in pairs(headers) do T.write(dir .. "/" .. name, text) end
  local args = { "--store", dir .. "/store", "compile", dir .. "/main.cu", "--header", dir .. "/util.cuh",
                 "--header", dir .. "/inc/sq.cuh", "--kernel", "scale2", "--json" }
  local out, code = T.khlua(table.unpack(args))
  T.eq(code, 0, out)
  local j = kh.json.decode(out)
  T.eq(j.hash, kh.compile.key { source = entry, name = "main.cu", headers = headers, kernels = { "scale2" } })
  T.ok(j.kernels.scale2)
  -- a changed header: another hash
  T.write(dir .. "/util.cuh", headers["util.cuh"] .. "// changed\n")
  local out2, code2 = T.khlua(table.unpack(args))
  T.eq(code2, 0, out2)
  T.ne(kh.json.decode(out2).hash, j.hash)
  -- without the nested header, its include is refused
  local out3, code3 = T.khlua("--store", dir .. "/store", "compile", dir .. "/main.cu", "--header", dir .. "/util.cuh")
  T.eq(code3, 1)
  T.match(out3, 'util%.cuh:2: #include "inc/sq%.cuh" is not on the allowlist')
  -- a header outside the entry's folder has no name to include it by
  local out4, code4 = T.khlua("compile", dir .. "/main.cu", "--header", "/etc/hostname")
  T.eq(code4, 1)
  T.match(out4, "%-%-header /etc/hostname: not in .*main%.cu's folder")
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("the recursion bomb stops at the deadline", function()
  local src = [[
template <int N, unsigned M> struct T {
  static constexpr unsigned long v = T<N - 1, M * 2u>::v + T<N - 1, M * 2u + 1u>::v;
};
template <unsigned M> struct T<0, M> { static constexpr unsigned long v = M; };
extern "C" __global__ void k(unsigned long *a) { a[0] = T<40, 1u>::v; }
]]
  local t0 = kh.time.now()
  local a, msg, code = kh.compile.build { source = src, deadline = 1.5 }
  local took = kh.time.now() - t0
  T.eq(a, nil)
  T.eq(code, "ETIMEOUT")
  T.match(msg, "deadline")
  T.ok(took < 3.5, "took " .. took)
end)

T.test("misuse raises", function()
  T.raises(function() kh.compile.build("source") end, "table expected")
  T.raises(function() kh.compile.build {} end, "source")
  T.raises(function() kh.compile.build { source = "x", kernels = "k" } end, "kernels")
  T.raises(function() kh.compile.build { source = "x", options = { 1 } } end, "options")
  T.raises(function() kh.compile.build { source = "x", deadline = -1 } end, "deadline")
  T.raises(function() kh.compile.build { source = "x", trusted = "yes" } end, "trusted")
  T.raises(function() kh.compile.trusted { kind = "fortran", source_path = "a", output = "b" } end,
    "invalid option")
  local r, msg, code = kh.compile.resources("not a cubin at all")
  T.eq(r, nil)
  T.eq(code, "EPARSE")
end)

T.test("bad request values return nil, msg, EINVAL", function()
  local a, msg, code = kh.compile.build { source = "x", arch = "sm_90a -o /tmp/x" }
  T.eq(a, nil)
  T.eq(code, "EINVAL")
  T.match(msg, "architecture")
end)

T.test("trusted cc path builds a shared object", function()
  local dir = T.tmpdir()
  local n = math.random(1, 1000000)
  T.write(dir .. "/h.c", "int khlua_entry(void) { return " .. n .. "; }\n")
  local r, msg, code = kh.compile.trusted { kind = "cc_so", source_path = dir .. "/h.c", output = dir .. "/h.so" }
  if not r and code == "ENOTFOUND" then os.execute("rm -rf " .. T.quote(dir)); T.skip("no C compiler") end
  assert(r, msg)
  T.match(r.command, "%-shared")
  T.ok(#r.version > 0)
  T.ok(io.open(dir .. "/h.so", "rb")):close()
  T.write(dir .. "/bad.c", "int x = ;\n")
  local r2, log, code2 = kh.compile.trusted { kind = "cc_so", source_path = dir .. "/bad.c", output = dir .. "/b.so" }
  T.eq(r2, nil)
  T.eq(code2, "ECOMPILE")
  T.match(log, "bad%.c:1")
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("khlua compile prints resources, JSON, exit codes", function()
  local dir = T.tmpdir()
  local smem = math.random(16, 1000)
  T.write(dir .. "/k.cu", bf16_source(smem, 256))
  local out, code = T.khlua("--store", dir .. "/store", "compile", dir .. "/k.cu", "--kernel", "scale_bf16")
  T.eq(code, 0, out)
  T.match(out, "scale_bf16%s+%d+%s+" .. (4 * smem))
  local js, code2 = T.khlua("--store", dir .. "/store", "compile", dir .. "/k.cu", "--json", "--out", dir .. "/k.cubin")
  T.eq(code2, 0, js)
  local j = kh.json.decode(js)
  T.eq(j.kernels.scale_bf16.shared_static, 4 * smem)
  T.eq(#T.read(dir .. "/k.cubin"), j.cubin_bytes)
  T.write(dir .. "/bad.cu", "\n\nextern \"C\" __global__ void k() { int = 3; }\n")
  local bad, code3 = T.khlua("--store", dir .. "/store", "compile", dir .. "/bad.cu")
  T.eq(code3, 1)
  T.match(bad, "bad%.cu%(3%): error")
  local _, code4 = T.khlua("compile", "--frobnicate")
  T.eq(code4, 2)
  local _, code5 = T.khlua("compile", dir .. "/missing.cu")
  T.eq(code5, 1)
  local help, code6 = T.khlua("compile", "--help")
  T.eq(code6, 0)
  T.match(help, "usage: khlua compile")
  os.execute("rm -rf " .. T.quote(dir))
end)
