-- gpu_pyref.lua: a real FlashInfer-Bench definition whose only reference is
-- its Python run (the dataset's rmsnorm_h4096, no khlua block), on the GPU
-- machine with python3 + torch (skipped elsewhere): khlua's CUDA rmsnorm
-- (kernels/rmsnorm_h4096) must PASS against the outputs torch computes from
-- the inputs khlua generated, timed outputs included (their seeds need more
-- Python runs); a second evaluation in the same process reuses them from
-- memory.  A candidate that is wrong on purpose (the weight ignored) must
-- fail, so the comparison is not vacuous.
local T = require "testlib"
local kh = require "kh"

if #kh.doctor().gpus == 0 then T.skip_all("no GPU on this machine") end
local py = os.getenv("KHLUA_PYTHON") or "python3"
if not os.execute(T.quote(py) .. " -c 'import torch' >/dev/null 2>&1") then
  T.skip_all(py .. " has no torch")
end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local DATA
for _, d in ipairs { os.getenv("KHLUA_FIB_DATA") or "", SRC .. "/shared/data/flashinfer-trace",
                     SRC .. "/../shared/data/flashinfer-trace", "/work/shared/data/flashinfer-trace" } do
  if d ~= "" and io.open(d .. "/definitions/rmsnorm/rmsnorm_h4096.json") then DATA = d break end
end
if not DATA then T.skip_all("the FlashInfer-Bench dataset is not here (set KHLUA_FIB_DATA)") end
local WL = DATA .. "/workloads/rmsnorm/rmsnorm_h4096.jsonl"
local SOL = SRC .. "/kernels/rmsnorm_h4096/solutions/rmsnorm_h4096_cuda_v1.json"
math.randomseed(T.seed())
local seed = math.random(1, 1 << 40)

local function opts(extra)
  local o = { seed = seed, workloads = 3, trials = 2, record = false, protocol = "screen",
              max_iters = 30, verify_timed_fraction = 0.5 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

T.test("rmsnorm_h4096 against its Python reference: PASSED on 3 workloads", function()
  local t0 = kh.time.now()
  local tr, msg, code = kh.eval(WL, SOL, opts())
  T.ok(tr, tostring(code) .. " " .. tostring(msg))
  for _, t in ipairs(tr) do
    local e = t.evaluation
    T.eq(e.status, "PASSED", t.workload.uuid .. ": " .. tostring(e.khlua.detail))
    T.eq(e.khlua.reference.kind, "python")
    T.eq(e.khlua.reference.source, "python")
    T.ok(e.khlua.reference.python_runs >= 1)
    print(string.format("# %s batch %d: max abs %.3g, %d python runs, %.2f s of python",
      t.workload.uuid, t.workload.axes.batch_size, e.correctness.max_absolute_error,
      e.khlua.reference.python_runs, e.khlua.reference.python_seconds))
  end
  print(string.format("# whole evaluation %.1f s", kh.time.now() - t0))
end)

T.test("the same seeds again: reference outputs from memory, no python", function()
  local tr = assert(kh.eval(WL, SOL, opts { timing = false }))
  for _, t in ipairs(tr) do
    T.eq(t.evaluation.status, "PASSED")
    T.eq(t.evaluation.khlua.reference.source, "memory")
    T.eq(t.evaluation.khlua.reference.python_runs, 0)
  end
end)

T.test("a candidate that ignores the weight fails against the Python outputs", function()
  local sol = kh.json.decode(T.read(SOL))
  local dir = T.tmpdir()
  -- the kernel multiplies by the weight: make it multiply by one instead
  local src = sol.sources[1].content
  local from = "float2 w = __bfloat1622float2(wv[i]);"
  local at = src:find(from, 1, true)
  if not at then T.skip("the kernel's weight read changed; update this edit") end
  sol.sources[1].content = src:sub(1, at - 1) .. "float2 w = make_float2(1.0f, 1.0f);"
    .. src:sub(at + #from)
  sol.name = "rmsnorm_h4096_no_weight"
  T.write(dir .. "/bad.json", kh.json.encode(sol))
  -- a Solution file is read with the definition beside it
  assert(os.execute("cp " .. T.quote(DATA .. "/definitions/rmsnorm/rmsnorm_h4096.json") .. " "
    .. T.quote(dir .. "/definition.json")))
  local tr, msg, code = kh.eval(WL, dir .. "/bad.json", opts { timing = false, workloads = 1 })
  os.execute("rm -rf " .. T.quote(dir))
  T.ok(tr, tostring(code) .. " " .. tostring(msg))
  T.eq(tr[1].evaluation.status, "INCORRECT_NUMERICAL")
end)
