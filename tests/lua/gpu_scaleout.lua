-- gpu_scaleout.lua: several gpu workers sharing one GPU (issue 13; on a GPU
-- machine, skipped with 77 elsewhere).  Four workers on GPU 0 evaluate
-- eight workloads of kernels/rmsnorm_h4096's reference in parallel: every
-- verdict PASSED, in workload order, by four distinct worker processes, each
-- trace naming the GPU (UUID) and clocks it ran on; the verdicts match one
-- worker's (same seeds, same reference bits).  With the GPU listed twice
-- ("0,0": two GPU groups of two workers) every workload's candidate and
-- reference timing ran in one group, the one its position in the package
-- gives, as a speedup (and a paired gate over two calls) must be measured on
-- one device; and a GPU that is not there is refused with the visible ones named.
local T = require "testlib"
local kh = require "kh"

local r = kh.doctor()
if #r.gpus == 0 then T.skip_all("no GPU on this machine") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local TASK = SRC .. "/kernels/rmsnorm_h4096"
local REF = "rmsnorm_h4096_ref_cuda"
math.randomseed(T.seed())

local function uuids(n)
  local r, i = {}, 0
  for line in io.lines(TASK .. "/workloads.jsonl") do
    i = i + 1
    if i > n then break end
    local j = kh.json.decode(line)
    r[#r + 1] = (j.workload or j).uuid
  end
  return r
end

T.test("4 workers on GPU 0, 8 workloads in parallel: all PASSED, 4 worker processes", function()
  local seed = math.random(1, 1 << 40)
  local want = uuids(8)
  local tr = assert(kh.eval(TASK, REF, { workloads = want, seed = seed, timing = false,
                                         record = false, gpus = "1", workers_per_gpu = 4 }))
  T.eq(#tr, 8)
  local pids, n, uuid = {}, 0, nil
  for i, t in ipairs(tr) do
    local e = t.evaluation
    T.eq(t.workload.uuid, want[i])
    T.eq(e.status, "PASSED", tostring(e.khlua.detail))
    T.eq(e.khlua.placement.gpu, "0")
    T.ok(e.khlua.placement.slot < 4)
    T.ok(e.khlua.gpu and e.khlua.gpu.uuid, "the trace names the GPU")
    uuid = uuid or e.khlua.gpu.uuid
    T.eq(e.khlua.gpu.uuid, uuid)
    if not pids[e.khlua.placement.pid] then n = n + 1 end
    pids[e.khlua.placement.pid] = true
  end
  T.eq(n, 4, "four workers shared the GPU")
  -- one worker, the same seeds: the same reference bits
  local one = assert(kh.eval(TASK, REF, { workloads = want, seed = seed, timing = false,
                                          record = false, gpus = "1", workers_per_gpu = 1 }))
  for i = 1, 8 do T.eq(one[i].evaluation.khlua.hashes, tr[i].evaluation.khlua.hashes) end
end)

T.test("timed: a workload's candidate and reference timing share one GPU group, clocks recorded", function()
  local tr = assert(kh.eval(TASK, REF, { workloads = 4, seed = math.random(1, 1 << 40),
    protocol = "screen", record = false, gpus = "0,0", workers_per_gpu = 2 }))
  T.eq(#tr, 4)
  local groups = {}
  for i, t in ipairs(tr) do
    local e = t.evaluation
    T.eq(e.status, "PASSED", tostring(e.khlua.detail))
    local pl, rp = e.khlua.placement, e.khlua.reference_placement
    T.ok(rp, "the reference timing's placement is recorded")
    T.eq(pl.slot // 2, rp.slot // 2)
    -- the GPU of a workload is its position mod the GPU groups, in every call
    T.eq(pl.slot // 2, (i - 1) % 2)
    groups[pl.slot // 2] = true
    T.ok(e.khlua.timing.clocks_before or e.khlua.timing.clocks_after, "clocks recorded")
    T.ok(e.performance.speedup_factor > 0)
  end
  T.ok(groups[0] and groups[1], "both GPU groups took workloads")
end)

T.test("--gpus naming a GPU that is not visible is refused, naming the visible ones", function()
  local tr, msg = kh.eval(TASK, REF, { workloads = 1, timing = false, record = false,
                                       gpus = tostring(#r.gpus + 7) })
  -- a count larger than the visible GPUs
  T.eq(tr, nil)
  T.match(msg, "visible")
  tr, msg = kh.eval(TASK, REF, { workloads = 1, timing = false, record = false,
                                 gpus = { "GPU-00000000-dead-beef" } })
  T.eq(tr, nil)
  T.match(msg, "is not visible")
end)
