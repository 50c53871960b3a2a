-- gpu_paired.lua: the engine's paired comparison on the cuda backend (issue
-- 20; on a GPU machine, skipped elsewhere).  kernels/rmsnorm_h4096's
-- baseline against a copy that first spins 200,000 clock cycles per block
-- (correct, and more than 50 us slower per call on any Hopper clock): one
-- kh.eval call, the candidate and the incumbent alternately on the same
-- GPU and inputs, gives a ratio far below 1 with an interval below 1; the
-- reverse far above; and the bootstrap replays in lib.stats.
local T = require "testlib"
local kh = require "kh"
local stats = require "lib.stats"

if not os.execute("nvidia-smi -L >/dev/null 2>&1") then T.skip_all("no GPU on this machine") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local PKG = SRC .. "/kernels/rmsnorm_h4096"
local BASE = "rmsnorm_h4096_cuda_v1"

math.randomseed(T.seed())

local function slowed()
  local s = kh.json.decode(T.read(PKG .. "/solutions/" .. BASE .. ".json"))
  s.name, s.author = "rmsnorm_spin", "test"
  local src, n = s.sources[1].content:gsub("(__shared__ float warp_sums%[32%];)",
    "%1\n    { long long t0_ = clock64(); while (clock64() - t0_ < 200000) { } }", 1)
  assert(n == 1, "the baseline's source changed: update gpu_paired.lua")
  s.sources[1].content = src
  return s
end

T.test("a spinning copy of the baseline: ratio below 1, the reverse above, in one call", function()
  local ts <close> = assert(kh.task.load(PKG))
  local o = { protocol = "paired", workloads = 3, reps = 3, trials = 1, record = false,
    seed = math.random(1, 1 << 40), time_reference = false }
  o.incumbent = BASE
  local t0 = kh.time.now()
  local r = assert(kh.eval(ts, slowed(), o))
  local dt = kh.time.now() - t0
  T.eq(r.failed, nil, r.failed and (r.failed.who .. " " .. r.failed.status))
  T.eq(#r.ratios, 9)
  T.ok(r.hi < 0.9, string.format("spin vs baseline: %.3f [%.3f, %.3f]", r.ratio, r.lo, r.hi))
  o.incumbent = slowed()
  local b = assert(kh.eval(ts, BASE, o))
  T.ok(b.lo > 1.1, string.format("baseline vs spin: %.3f [%.3f, %.3f]", b.ratio, b.lo, b.hi))
  for _, t in ipairs(r.candidate) do T.eq(t.evaluation.khlua.backend, "cuda") end
  local lo, hi = stats.bootstrap(b.ratios, stats.geomean, { resamples = b.resamples,
    alpha = b.alpha, seed = b.seed })
  T.near(b.lo, lo, 1e-12)
  T.near(b.hi, hi, 1e-12)
  io.write(string.format("# spin vs baseline %.3f [%.3f, %.3f] in %.1f s; baseline vs spin "
    .. "%.3f [%.3f, %.3f]\n", r.ratio, r.lo, r.hi, dt, b.ratio, b.lo, b.hi))
end)
