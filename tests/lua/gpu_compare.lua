-- gpu_compare.lua: a candidate's outputs compared on the device (its trusted
-- reference runs in the candidate's own request, after the candidate's calls)
-- give the verdict the coordinator's host comparison gives on the same seeds:
-- the same status, figures, reason and failed check, bit for bit, when the
-- candidate passes and when it fails; and the device's reply carries the
-- comparison's parts, not the outputs.  On a GPU machine (skipped elsewhere).
local T = require "testlib"
local kh = require "kh"

if #kh.doctor().gpus == 0 then T.skip_all("no GPU on this machine") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local PKG = SRC .. "/kernels/rmsnorm_h4096"
math.randomseed(T.seed())

local RT = SRC .. "/tests/redteam/cuda_device" -- its reference runs on the GPU

-- The same evaluation with the outputs compared on the device, then on the host.
local function both(pkg, sol, extra)
  local seed = math.random(1, 1 << 40)
  local function run(on_device)
    local o = { seed = seed, record = false, timing = false, device_compare = on_device }
    for k, v in pairs(extra) do o[k] = v end
    return assert(kh.eval(pkg, sol, o))
  end
  return run(true), run(false)
end

local function same(d, h, n, want_status)
  T.eq(#d, n)
  T.eq(#h, #d)
  for i = 1, #d do
    local a, b = d[i].evaluation, h[i].evaluation
    local u = d[i].solution .. " " .. d[i].workload.uuid
    T.eq(a.khlua.compare, "device", u)
    T.eq(b.khlua.compare, "host", u)
    T.eq(a.status, want_status, u .. " " .. tostring(a.khlua.detail))
    T.eq(a.status, b.status, u)
    T.eq(a.khlua.failed_check, b.khlua.failed_check, u)
    T.eq(a.khlua.detail, b.khlua.detail, u)
    for _, k in ipairs({ "max_absolute_error", "max_relative_error" }) do
      T.eq(a.correctness[k], b.correctness[k], u .. " " .. k)
    end
    for _, k in ipairs({ "matched_ratio", "norm_error", "max_ulp_error", "elements" }) do
      T.eq(a.khlua.figures[k], b.khlua.figures[k], u .. " " .. k)
    end
    for _, k in ipairs({ "poison", "inputs_unchanged", "guards", "deterministic", "correctness" }) do
      T.eq(a.khlua.checks[k], b.khlua.checks[k], u .. " " .. k)
    end
    T.ok(type(a.khlua.hashes.reference) == "string", u .. ": a reference hash")
    -- the host's way needs the reference's own request; the device's does not
    T.eq(a.khlua.phases.reference, nil, u)
    T.ok(b.khlua.phases.reference.requests == 1, u)
    local ab, bb = a.khlua.phases.candidate.bytes_back, b.khlua.phases.candidate.bytes_back
    T.ok(ab * 20 < bb, string.format("%s: %d bytes back on the device's way, %d on the host's",
                                     u, ab, bb))
  end
end

T.test("a passing candidate: the same verdict and figures either way", function()
  local d, h = both(PKG, "rmsnorm_h4096_cuda_v1", { workloads = "5" })
  same(d, h, 5, "PASSED")
end)

T.test("deterministic = true: the two poisoned calls compared on the device", function()
  local d, h = both(PKG, "rmsnorm_h4096_cuda_v1", { workloads = "5", deterministic = true })
  same(d, h, 5, "PASSED")
end)

-- Failing candidates (tests/redteam/cuda_device, whose reference runs on the GPU):
-- wrong values (fp8 rounding), elements left unwritten (the poison), a NaN
-- (a final verdict), the previous call's outputs.
for _, c in ipairs({ { "rt_precision_downgrade", "correctness" },
                     { "rt_partial_computation", "poison" },
                     { "rt_nan_output", "correctness" },
                     { "rt_deferred_work", nil } }) do
  T.test(c[1] .. ": the same failure, figures and reason either way", function()
    local d, h = both(RT, c[1], {})
    same(d, h, 2, "INCORRECT_NUMERICAL")
    if c[2] then T.eq(d[1].evaluation.khlua.failed_check, c[2]) end
  end)
end

-- Timed: the verified timed calls kept on the device and judged there after
-- the timing phase (no reference request for their seeds), every one of them
-- verified and right, as on the host's way; the big workloads' calls by their
-- element ranges.
T.test("timed: verified calls judged on the device, none wrong, no timed-refs request", function()
  local d, h = both(PKG, "rmsnorm_h4096_cuda_v1", { timing = true, warmup = 2, iters = 10,
                                                    protocol = "official" })
  T.eq(#d, 14)
  for i = 1, #d do
    local a, b = d[i].evaluation, h[i].evaluation
    local u = d[i].workload.uuid
    T.eq(a.status, "PASSED", u .. " " .. tostring(a.khlua.detail))
    T.eq(b.status, "PASSED", u)
    T.eq(a.khlua.checks.timed_outputs, "ok", u)
    local va, vb = a.khlua.timed_outputs_verified, b.khlua.timed_outputs_verified
    T.ok(va.calls > 0 and va.failed == 0, u .. " " .. kh.json.encode(va))
    T.eq(va.calls, vb.calls, u .. ": as many calls verified either way")
    T.eq(a.khlua.phases.timed_refs and a.khlua.phases.timed_refs.requests or 0, 0, u)
    T.ok(b.khlua.phases.timed_refs.requests == 1, u)
  end
end)
