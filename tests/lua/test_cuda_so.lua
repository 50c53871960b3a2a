-- test_cuda_so.lua: the trusted shared-object backend ("cuda_so"): a package's
-- own solution whose C entry the gpu worker calls (a cuBLAS anchor).  Here,
-- without a GPU: the manifest parses and resolves, malformed ones are refused
-- with the field named, and kh.eval refuses a cuda_so Solution that comes as
-- a file (how candidates arrive) before anything runs.  The GPU side is in
-- gpu_kernels.lua (the GEMM package's cuBLAS anchor PASSES).
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIX = SRC .. "/tests/fixtures/task/rmsnorm"

local function solution(khlua, name)
  return {
    name = name or "rmsnorm_h512_vendor",
    definition = "rmsnorm_h512",
    author = "test",
    spec = { language = "cuda", target_hardware = { "cuda" }, entry_point = "vendor.cu::vendor_rmsnorm",
             destination_passing_style = true, khlua = khlua },
    sources = { { path = "vendor.cu", content = "extern \"C\" int vendor_rmsnorm(void) { return 0; }\n" } },
  }
end

local GOOD = {
  backend = "cuda_so", ["function"] = "vendor_rmsnorm", link = { "cublas" },
  args = { { input = "hidden_states" }, { input = "weight" }, { output = "output" },
           { axis = "batch_size", type = "int64" }, { value = "batch_size * hidden_size", type = "int64" } },
}

-- a copy of the fixture package with extra solutions
local function package(sols)
  local d = T.tmpdir()
  os.execute("cp -r " .. T.quote(FIX) .. "/. " .. T.quote(d))
  for _, s in ipairs(sols) do T.write(d .. "/solutions/" .. s.name .. ".json", kh.json.encode(s)) end
  return d
end

T.test("a cuda_so solution checks and resolves: one entry, its arguments, no launches", function()
  local d = package({ solution(GOOD) })
  local out, code = T.khlua("task", "check", d)
  T.eq(code, 0, out)
  T.match(out, " 0 errors")
  local ts <close> = assert(kh.task.load(d))
  local plan = assert(ts:launches("rmsnorm_h512_vendor", { batch_size = 333 }))
  T.eq(plan.backend, "cuda_so")
  T.eq(plan["function"], "vendor_rmsnorm")
  T.eq(#plan.args, 5)
  T.eq(plan.args[5].value, 333 * 512)
  T.eq(plan.launches, nil)
end)

T.test("malformed cuda_so manifests are refused, naming the field", function()
  local cases = {
    { "link: a flag, not a name", { backend = "cuda_so", ["function"] = "vendor_rmsnorm", link = { "-Wl,-rpath,/tmp" }, args = {} }, "link" },
    { "link on a launch-manifest candidate", { backend = "cuda", link = { "cublas" },
        launches = { { kernel = "vendor_rmsnorm", grid = 1, block = 32, args = {} } } }, "link" },
    { "launches on a cuda_so solution", { backend = "cuda_so", ["function"] = "vendor_rmsnorm", args = {},
        launches = { { kernel = "k", grid = 1, block = 32, args = {} } } }, "launches" },
    { "an unknown backend", { backend = "cuda_dll", args = {} }, "backend" },
  }
  for _, c in ipairs(cases) do
    local d = package({ solution(c[2]) })
    local out, code = T.khlua("task", "check", d)
    T.eq(code, 1, c[1] .. ":\n" .. out)
    T.match(out, "spec%.khlua%." .. c[3], c[1])
  end
end)

T.test("kh.eval refuses a cuda_so Solution given as a file (host code from outside the package)", function()
  if not kh.eval then T.skip("kh.eval is not in this build") end
  local d = package({})
  local f = T.tmpdir() .. "/vendor.json"
  T.write(f, kh.json.encode(solution(GOOD)))
  local traces, msg = kh.eval(d, f, { timing = false, record = false })
  T.eq(traces, nil)
  T.match(msg, "cuda_so")
  T.match(msg, "package's own solutions")
end)


-- The build: nvcc -shared with -l<lib>.  Made the reference of a copy of the
-- GEMM package, the cuBLAS anchor is built before any worker starts: without
-- a GPU the evaluation then stops at the worker, not at the build; a broken
-- source stops at the build, with nvcc's log.  (On a GPU machine the whole
-- path runs in gpu_kernels.lua.)
T.test("a cuda_so solution builds with nvcc -shared -lcublas; a broken one says so", function()
  if not kh.eval then T.skip("kh.eval is not in this build") end
  if #kh.doctor().gpus > 0 then T.skip("a GPU is here: gpu_kernels.lua runs the anchor") end
  if not os.execute("command -v nvcc >/dev/null 2>&1 || test -x /usr/local/cuda/bin/nvcc") then
    T.skip("no nvcc")
  end
  local d = T.tmpdir()
  os.execute("cp -r " .. T.quote(SRC .. "/kernels/gemm_n4096_k4096") .. "/. " .. T.quote(d))
  local def = kh.json.decode(T.read(d .. "/definition.json"))
  def.khlua.reference = "gemm_n4096_k4096_cublas"
  T.write(d .. "/definition.json", kh.json.encode(def))
  local traces, msg = kh.eval(d, "gemm_n4096_k4096_mma_v1", { timing = false, record = false, workloads = "1" })
  T.eq(traces, nil)
  T.ok(not tostring(msg):match("does not build"), msg)
  -- it stopped at the gpu worker: the reference's own request, or with
  -- device_compare the candidate's, which carries the reference
  T.match(msg, "worker")
  local sp = d .. "/solutions/gemm_n4096_k4096_cublas.json"
  local s = kh.json.decode(T.read(sp))
  s.sources[1].content = s.sources[1].content:gsub("cublasSetStream%(", "cublasSetStreamX(")
  T.write(sp, kh.json.encode(s))
  traces, msg = kh.eval(d, "gemm_n4096_k4096_mma_v1", { timing = false, record = false, workloads = "1" })
  T.eq(traces, nil)
  T.match(msg, "does not build")
  T.match(msg, "cublasSetStreamX")
end)
