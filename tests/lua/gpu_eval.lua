-- gpu_eval.lua: kh.eval through the gpu worker (on a GPU machine; skipped,
-- exit 77, elsewhere).  The fixture's CUDA candidate (two launches, a zeroed
-- workspace, atomics) is compared with the host C reference: the inputs are
-- drawn on the device and on the host from the same seeds, so they must be
-- the same bits; it passes every workload with the hardened checks and a
-- timed, verified run; the same candidate under --parity passes too; a CUDA
-- top-k / top-p sampler passes FIB's mask and TVD test (its repeated batch
-- copied on the device: gen.tile).
local T = require "testlib"
local kh = require "kh"

local r = kh.doctor()
if #r.gpus == 0 then T.skip_all("no GPU on this machine") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIX = SRC .. "/tests/fixtures/task/rmsnorm"

math.randomseed(T.seed())

T.test("the cuda example passes every workload against the host reference", function()
  local tr = assert(kh.eval(FIX, "rmsnorm_h512_cuda_v1", {
    seed = math.random(1, 1 << 40), warmup = 2, iters = 20, record = false,
    verify_timed_fraction = 0.5,
  }))
  T.eq(#tr, 3)
  for _, t in ipairs(tr) do
    local e = t.evaluation
    T.eq(e.status, "PASSED", tostring(e.khlua.detail))
    T.eq(e.khlua.backend, "cuda")
    T.ok(e.khlua.timer == "cupti" or e.khlua.timer == "events")
    T.eq(e.khlua.checks.poison, "ok")
    T.eq(e.khlua.checks.inputs_unchanged, "ok")
    T.eq(e.khlua.checks.guards, "ok")
    T.eq(e.khlua.checks.deterministic, "off") -- atomics: off by default for cuda
    T.ok(e.khlua.checks.timed_outputs == "ok", tostring(e.khlua.checks.timed_outputs))
    T.ok(e.khlua.checks.speed_of_light == "ok" or e.khlua.checks.speed_of_light == "unknown")
    T.ok(e.performance.latency_ms > 0)
    -- the GPU's kernel time: at least the timed calls' (20 iterations), at
    -- most the workers' time on the workload
    local ks, ws = e.khlua.gpu_kernel_seconds, 0
    for _, p in pairs(e.khlua.phases) do ws = ws + (p.worker_s or 0) end
    T.ok(e.khlua.phases.candidate.kernel_s > 0)
    T.ok(ks >= 20 * e.performance.latency_ms * 1e-3 * 0.9 and ks <= ws,
      ("kernel %.6f s, timed calls %.6f s, workers %.6f s"):format(ks, 20 * e.performance.latency_ms * 1e-3, ws))
    -- the active time adds the timing batches' own work (refills, L2
    -- flushes, kept outputs: CUPTI records them) to the one-kernel calls
    local as = e.khlua.gpu_active_seconds
    T.ok(as <= ws, ("active %.6f s, workers %.6f s"):format(as, ws))
    if e.khlua.timer == "cupti" then
      T.ok(as > ks, ("active %.6f s, kernel %.6f s"):format(as, ks))
    else
      T.ok(as >= ks * 0.999, ("active %.6f s, kernel %.6f s"):format(as, ks))
    end
    T.ok(e.correctness.max_absolute_error <= 0.01 + 1e-9 or e.correctness.max_relative_error <= 0.01)
  end
end)

T.test("khlua eval shows the GPU busy fraction: kernel time over wall", function()
  local out, code = T.khlua("eval", "--task", FIX, "--solution", "rmsnorm_h512_cuda_v1", "--workloads",
                            "1", "--warmup", "2", "--iters", "20", "--no-store")
  T.eq(code, 0, out)
  local pct, ks, wall = out:match("GPU %S+: busy ([%d.]+)%% %(kernel time ([%d.]+) s over ([%d.]+) s wall%)")
  T.ok(pct, out)
  T.ok(tonumber(ks) > 0 and tonumber(wall) > tonumber(ks), out)
  T.near(tonumber(pct), 100 * tonumber(ks) / tonumber(wall), 0.06)
  local apct, as = out:match("wall%), active ([%d.]+)%% %(([%d.]+) s%)")
  T.ok(apct, out)
  T.ok(tonumber(as) >= tonumber(ks) * 0.999, out)
  T.near(tonumber(apct), 100 * tonumber(as) / tonumber(wall), 0.06)
end)

T.test("--parity: FlashInfer-Bench's checks alone", function()
  local tr = assert(kh.eval(FIX, "rmsnorm_h512_cuda_v1", { workloads = 1, timing = false,
                                                           parity = true, record = false }))
  T.eq(tr[1].evaluation.status, "PASSED", tostring(tr[1].evaluation.khlua.detail))
  T.eq(tr[1].evaluation.khlua.checks.poison, nil)
end)

T.test("a cuda sampler: FIB's mask and TVD test through the gpu worker (gen.tile)", function()
  local TFIX = SRC .. "/tests/fixtures/task/sampling_topk_small"
  local tr = assert(kh.eval(TFIX, "topk_cuda", { seed = math.random(1, 1 << 40), record = false,
                                                 warmup = 2, iters = 10 }))
  T.eq(#tr, 3)
  for _, t in ipairs(tr) do
    local e = t.evaluation
    T.eq(e.status, "PASSED", t.workload.uuid .. " " .. tostring(e.khlua.detail))
    T.eq(e.khlua.backend, "cuda")
    local x = e.correctness.extra
    T.eq(x.thresholding, "top_k_top_p")
    T.ok(x.tvd < 0.02, tostring(x.tvd))
    T.eq(x.tvd_samples_per_row, x.tvd_calls * x.tvd_repeat)
    T.near(x.repeat_rate, x.repeat_rate_expected, 0.01)
    T.eq(e.khlua.checks.fresh_samples, "ok")
    T.ok(e.performance.latency_ms > 0)
  end
end)
