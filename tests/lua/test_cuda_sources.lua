-- test_cuda_sources.lua: a CUDA candidate of several sources, as
-- docs/candidate-format.md ("CUDA backend") describes it: spec.entry_point's
-- file is the translation unit and the other sources are its headers, found
-- by #include "name".  Checked through what a user runs: khlua task check
-- accepts the package; khlua eval and kh.eval compile it (without a GPU they
-- then stop for the lack of one, never for its sources); a header's forbidden
-- call is eval's COMPILE_ERROR naming the header, a source path NVRTC cannot
-- take is task check's error and eval's COMPILE_ERROR alike; khlua profile --dry-run
-- compiles it, and a header's change changes the compile key and the cubin;
-- on a GPU it passes every workload (skipped elsewhere, saying so).
local T = require "testlib"
local kh = require "kh"

if not kh.version.nvrtc then T.skip_all("NVRTC not available") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIX = SRC .. "/tests/fixtures/task/rmsnorm"
local NAME = "rmsnorm_h512_cuda_2src"

math.randomseed(T.seed())

local LOOP = "    for (int o = 16; o; o >>= 1)\n        v += __shfl_down_sync(0xffffffffu, v, o);\n"

-- the fixture's CUDA solution with its warp reduction moved into a header,
-- rms_util.cuh, which the entry rmsnorm.cu includes; util(text) may edit the
-- header's text.  Returns the package folder.
local function package(util)
  local dir = T.tmpdir() .. "/pkg"
  os.execute("mkdir -p " .. T.quote(dir) .. " && cp -r " .. T.quote(FIX) .. "/. " .. T.quote(dir))
  local sol = kh.json.decode(T.read(FIX .. "/solutions/rmsnorm_h512_cuda_v1.json"))
  local src = sol.sources[1].content
  local at = src:find(LOOP, 1, true)
  assert(at, "the fixture's reduction loop moved: update this test")
  src = src:sub(1, at - 1) .. "    v = warp_sum(v);\n" .. src:sub(at + #LOOP)
  src = src:gsub("#include <cuda_bf16.h>\n", '#include <cuda_bf16.h>\n#include "rms_util.cuh"\n', 1)
  local header = "#pragma once\n\n__device__ __forceinline__ float warp_sum(float v)\n{\n"
    .. LOOP .. "    return v;\n}\n"
  sol.name = NAME
  sol.sources = { { path = "rmsnorm.cu", content = src },
                  { path = "rms_util.cuh", content = util and util(header) or header } }
  T.write(dir .. "/solutions/" .. NAME .. ".json", kh.json.encode(sol))
  return dir
end

local function quick()
  return { seed = math.random(1, 1 << 40), warmup = 1, iters = 5, timing_trials = 2,
           cold = false, record = false, time_reference = false, workloads = 1 }
end

local function gpus() return #kh.doctor().gpus end

T.test("khlua task check and khlua eval agree on a candidate of two sources", function()
  local dir = package()
  local out, code = T.khlua("task", "check", dir)
  T.eq(code, 0, out)
  T.match(out, "3 solutions %(3 candidates%)")
  T.match(out, "0 errors, 0 warnings")
  -- eval compiles it; without a GPU it then stops for that reason alone
  local ev, ecode = T.khlua("--store", dir .. "/store", "eval", "--task", dir, "--solution", NAME,
    "--workloads", "1")
  T.ok(not ev:find("several sources", 1, true), ev)
  T.ok(not ev:find("COMPILE_ERROR", 1, true), ev)
  local r, msg, rcode = kh.eval(dir, NAME, quick())
  if gpus() == 0 then
    T.ne(ecode, 0, ev)
    T.match(ev, "no gpu worker")
    T.eq(r, nil)
    T.eq(rcode, "ENODEV", msg)
    T.ok(not msg:find("several sources", 1, true), msg)
  else
    T.eq(ecode, 0, ev)
    T.eq(r[1].evaluation.status, "PASSED", tostring(r[1].evaluation.khlua.detail))
  end
  os.execute("rm -rf " .. T.quote(dir:match("^(.*)/pkg$")))
end)

T.test("a header's forbidden call is eval's COMPILE_ERROR naming the header", function()
  local pad = math.random(0, 5)
  local dir = package(function(h)
    return h:gsub("    return v;\n", string.rep("\n", pad) .. "    cudaDeviceReset();\n    return v;\n", 1)
  end)
  -- the static checks are the compile's, not the task check's: the package is valid
  local out, code = T.khlua("task", "check", dir)
  T.eq(code, 0, out)
  local line = 7 + pad
  local ev, ecode = T.khlua("--store", dir .. "/store", "eval", "--task", dir, "--solution", NAME,
    "--workloads", "1")
  T.eq(ecode, 1, ev)
  T.match(ev, "COMPILE_ERROR")
  T.match(ev, "rms_util%.cuh:" .. line .. ": host API call 'cudaDeviceReset' is not allowed")
  local r = assert(kh.eval(dir, NAME, quick()))
  T.eq(r[1].evaluation.status, "COMPILE_ERROR")
  T.match(r[1].evaluation.log, "rms_util%.cuh:" .. line .. ": host API call")
  os.execute("rm -rf " .. T.quote(dir:match("^(.*)/pkg$")))
end)

T.test("a path NVRTC cannot take: task check's error, eval's COMPILE_ERROR, in the same words", function()
  local dir = package()
  local f = dir .. "/solutions/" .. NAME .. ".json"
  local sol = kh.json.decode(T.read(f))
  sol.sources[2].path = "./rms_util.cuh"
  sol.sources[1].content = sol.sources[1].content:gsub('"rms_util%.cuh"', '"./rms_util.cuh"')
  T.write(f, kh.json.encode(sol))
  local why = '"%./rms_util%.cuh" cannot be a header of a CUDA candidate %(NVRTC finds it by this '
    .. "name%): it has a '%.' path component"
  local out, code = T.khlua("task", "check", dir)
  T.eq(code, 1, out)
  T.match(out, "sources%[1%]%.path: " .. why)
  local ev, ecode = T.khlua("--store", dir .. "/store", "eval", "--task", dir, "--solution", NAME,
    "--workloads", "1")
  T.eq(ecode, 1, ev)
  T.match(ev, "COMPILE_ERROR")
  T.match(ev, why)
  os.execute("rm -rf " .. T.quote(dir:match("^(.*)/pkg$")))
end)

T.test("khlua profile --dry-run compiles it; a header's change changes key and cubin", function()
  local function dry(dir)
    local out, code = T.khlua("profile", "--task", dir, "--solution", NAME, "--dry-run")
    T.eq(code, 0, out)
    T.ok(not out:find("several sources", 1, true), out)
    return kh.json.decode(out:sub((out:find("{", 1, true))))
  end
  local a = dry(package())
  T.eq(#a.spec.launches, 2)
  T.eq(#a.compile.key, 32)
  local b = dry(package(function(h) return h:gsub("    return v;", "    return v + 0.5f;", 1) end))
  T.ne(b.compile.key, a.compile.key)
  T.ne(b.cubin_hash, a.cubin_hash)
  T.ne(b.candidate, a.candidate)
  -- the same sources again: the same key
  T.eq(dry(package()).compile.key, a.compile.key)
end)

T.test("on a GPU: the two-source candidate passes every workload", function()
  if gpus() == 0 then T.skip("no GPU on this machine: eval stops before running kernels") end
  local dir = package()
  local o = quick()
  o.workloads = nil
  local tr = assert(kh.eval(dir, NAME, o))
  T.eq(#tr, 3)
  for _, t in ipairs(tr) do T.eq(t.evaluation.status, "PASSED", tostring(t.evaluation.khlua.detail)) end
  os.execute("rm -rf " .. T.quote(dir:match("^(.*)/pkg$")))
end)
