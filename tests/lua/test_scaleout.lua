-- test_scaleout.lua: one candidate's workloads run in parallel on several
-- host workers (kh.eval opts.host_workers, issue 13): the traces come back
-- in workload order, several worker processes did the work, and every
-- verdict is the one a single worker gives (same seeds, same bits); a
-- candidate that crashes its workers crashes each workload's worker, each a
-- RUNTIME_ERROR verdict (parallel deaths do not make the pool give up), and
-- the next candidate passes on fresh workers.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local HOST = SRC .. "/kernels/host_rmsnorm"
local SOL = "host_rmsnorm_h1024_c_v1"
local RT = SRC .. "/tests/redteam/host/rmsnorm"

math.randomseed(T.seed())

local function uuids(path)
  local r = {}
  for line in io.lines(path) do
    local j = kh.json.decode(line)
    r[#r + 1] = (j.workload or j).uuid
  end
  return r
end

T.test("7 workloads on 3 host workers: workload order, 3 workers, the verdicts of one worker", function()
  local seed = math.random(1, 1 << 40)
  local par = assert(kh.eval(HOST, SOL, { seed = seed, timing = false, record = false, host_workers = 3 }))
  local one = assert(kh.eval(HOST, SOL, { seed = seed, timing = false, record = false, host_workers = 1 }))
  local want = uuids(HOST .. "/workloads.jsonl")
  T.eq(#par, #want)
  local pids, n = {}, 0
  for i, t in ipairs(par) do
    T.eq(t.workload.uuid, want[i])
    local e, e1 = t.evaluation, one[i].evaluation
    T.eq(e.status, "PASSED", tostring(e.khlua.detail))
    T.eq(e.khlua.seeds, e1.khlua.seeds)
    T.eq(e.khlua.hashes, e1.khlua.hashes)
    T.eq(e.khlua.figures, e1.khlua.figures)
    T.eq(e.khlua.placement.launch, "local")
    T.ok(e.khlua.placement.slot < 3)
    if not pids[e.khlua.placement.pid] then n = n + 1 end
    pids[e.khlua.placement.pid] = true
    T.eq(one[i].evaluation.khlua.placement.slot, 0)
  end
  T.eq(n, 3, "three worker processes shared the workloads")
end)

T.test("timed workloads in parallel: each PASSED with its speedup against the reference", function()
  local tr = assert(kh.eval(RT, "rt_honest_double", {
    seed = math.random(1, 1 << 40), warmup = 1, iters = 4, timing_trials = 1, cold = false,
    record = false, host_workers = 2, deadline_s = 60 }))
  T.eq(#tr, 3)
  for _, t in ipairs(tr) do
    local e = t.evaluation
    T.eq(e.status, "PASSED", tostring(e.khlua.detail))
    T.ok(e.performance.latency_ms > 0 and e.performance.reference_latency_ms > 0)
    T.ok(e.khlua.reference_placement, "the reference's timing says where it ran")
  end
end)

T.test("a crashing candidate on 2 workers: every workload RUNTIME_ERROR, then the next passes", function()
  local o = { seed = math.random(1, 1 << 40), timing = false, record = false, host_workers = 2,
              deadline_s = 60 }
  local tr = assert(kh.eval(RT, "rt_fault_segfault", o))
  T.eq(#tr, 3)
  for _, t in ipairs(tr) do
    T.eq(t.evaluation.status, "RUNTIME_ERROR", tostring(t.evaluation.khlua.detail))
    T.match(t.evaluation.khlua.detail, "SIGSEGV")
  end
  tr = assert(kh.eval(RT, "rt_honest_double", o))
  for _, t in ipairs(tr) do T.eq(t.evaluation.status, "PASSED") end
end)

T.test("a policy's --gpus, --workers-per-gpu, --host-workers, --launch, --hosts, --compare reach kh.eval", function()
  package.path = SRC .. "/policies/?.lua;" .. package.path
  local cli = require "lib.cli"
  local o = assert(cli.parse { "--task", HOST, "--gpus", "0,1", "--workers-per-gpu", "2",
    "--host-workers", "3", "--launch", "ssh", "--hosts", "a,b" })
  local cfg = cli.config(o)
  T.eq(cfg.placement, { gpus = "0,1", workers_per_gpu = 2, host_workers = 3, launch = "ssh",
    hosts = "a,b" })
  T.eq(cli.config(assert(cli.parse { "--task", HOST })).placement, nil)
  local bad, msg = cli.parse { "--task", HOST, "--workers-per-gpu", "two" }
  T.eq(bad, nil)
  T.match(msg, "workers%-per%-gpu")
  -- --compare: where every evaluation of the run compares (kh.eval's device_compare)
  T.eq(cli.config(assert(cli.parse { "--task", HOST, "--compare", "device" })).placement,
    { device_compare = true })
  T.eq(cli.config(assert(cli.parse { "--task", HOST, "--compare", "host" })).placement,
    { device_compare = false })
  bad, msg = cli.parse { "--task", HOST, "--compare", "gpu" }
  T.eq(bad, nil)
  T.match(msg, "%-%-compare needs device or host, got 'gpu'")
end)
