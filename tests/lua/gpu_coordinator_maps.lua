-- gpu_coordinator_maps.lua: the coordinator never loads the CUDA driver
-- (docs/design.md: processes; issue 20).  On a GPU machine (skipped
-- elsewhere), after kh.eval of a package whose trusted reference and baseline
-- are CUDA (kernels/rmsnorm_h4096: both compiled, the reference run, the
-- baseline checked and timed), this process's /proc/self/maps holds no
-- libcuda: every compile went to the compile service's worker processes and
-- every launch to the gpu workers.  NVRTC 13 loads and initialises the
-- driver during a compile in the calling process (seen on the H200), so an
-- in-process compile anywhere on that path fails this test.  The GPU is
-- found with nvidia-smi, not kh.doctor: nothing here may touch the driver.
local T = require "testlib"
local kh = require "kh"

if not os.execute("nvidia-smi -L >/dev/null 2>&1") then T.skip_all("no GPU on this machine") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local PKG = SRC .. "/kernels/rmsnorm_h4096"

math.randomseed(T.seed())

-- the mapped files of this process whose path matches pat
local function mapped(pat)
  local seen, list = {}, {}
  for line in io.lines("/proc/self/maps") do
    local path = line:match("%s(/%S+)$")
    if path and path:match(pat) and not seen[path] then
      seen[path] = true
      list[#list + 1] = path
    end
  end
  return list
end

T.test("no libcuda in the coordinator after an evaluation with a CUDA reference", function()
  T.eq(#mapped("libcuda%.so"), 0, "libcuda before anything ran")
  local def = kh.json.decode(T.read(PKG .. "/definition.json"))
  local tr = assert(kh.eval(PKG, def.khlua.baseline, {
    seed = math.random(1, 1 << 40), warmup = 2, iters = 10, trials = 1, record = false,
    time_reference = false,
  }))
  T.ok(#tr >= 1, "workloads evaluated")
  for _, t in ipairs(tr) do
    T.eq(t.evaluation.status, "PASSED", tostring(t.evaluation.khlua.detail))
    T.eq(t.evaluation.khlua.backend, "cuda")
  end
  local cuda = mapped("libcuda%.so")
  io.write("# mapped after kh.eval: libcuda ", #cuda, ", libnvrtc ", #mapped("libnvrtc"),
    ", libcupti ", #mapped("libcupti"), "\n")
  T.eq(#cuda, 0, "libcuda mapped in the coordinator: " .. table.concat(cuda, ", "))
  T.eq(#mapped("libcupti"), 0, "CUPTI is the gpu worker's")
end)

T.test("no libcuda in the coordinator after a policy run on a CUDA task", function()
  -- plateau_switch in this process: the seed measured and profiled, two
  -- rounds of replayed candidates through the gate (paired comparison,
  -- sweep, finalist, sanitizer, official timing where one is promoted)
  local cli = require "lib.cli"
  local P = assert(require("lib.policy").load(SRC .. "/policies/plateau_switch.lua"))
  local o = assert(cli.parse { "--task", PKG, "--rounds", "2", "--seed",
    tostring(math.random(1, 1000)), "--report", "none" })
  local cfg = cli.config(o)
  assert(cli.resolve_models(cfg))
  local lines = {}
  cfg.out = function(l) lines[#lines + 1] = l end
  local res, msg = require("lib.controller").run(P, cfg)
  T.ok(res, tostring(msg))
  T.eq(res.metrics.rounds, 2, table.concat(lines, "\n"))
  local cuda = mapped("libcuda%.so")
  io.write("# after a 2-round policy run (", res.metrics.candidates, " candidates, ",
    res.metrics.accepted, " accepted): libcuda ", #cuda, ", libcupti ", #mapped("libcupti"),
    ", libnvrtc ", #mapped("libnvrtc"), "\n")
  T.eq(#cuda, 0, "libcuda mapped in the coordinator: " .. table.concat(cuda, ", "))
  T.eq(#mapped("libcupti"), 0, "CUPTI is the gpu worker's")
end)
