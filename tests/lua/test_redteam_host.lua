-- test_redteam_host.lua: the host red team (tests/redteam/host/, written by
-- make_package.py).  Every cheating candidate gets its exact verdict and the
-- check that caught it; honest candidates and the trusted reference pass;
-- faulty candidates (segfault, infinite loop, out of memory, abort, stack
-- overflow, misaligned access) are each classified, the coordinator (this
-- process) survives them all, and the next honest candidate passes.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local PKG = SRC .. "/tests/redteam/host/rmsnorm"
local SOL = SRC .. "/tests/redteam/host/rmsnorm_sol"
local W1 = "7e0d7a8e-0001-4a57-9a3c-1d2e3f405161" -- batch 1
local W3 = "7e0d7a8e-0003-4a57-9a3c-1d2e3f405161" -- batch 64

math.randomseed(T.seed())

-- Small, fast settings; a fresh random base seed per run, so nothing below
-- depends on particular input values.
local function opts(extra)
  local o = {
    seed = math.random(1, 1 << 40), trials = 3, warmup = 1, iters = 6, timing_trials = 1,
    cold = false, rotate_inputs = 3, verify_timed_fraction = 1.0, deadline_s = 30,
    time_reference = false, record = false,
  }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function eval(pkg, name, o)
  local traces, msg, code = kh.eval(pkg, name, o)
  T.ok(traces, "kh.eval could not run: " .. tostring(msg) .. " " .. tostring(code))
  return traces
end

local function verdict(tr) return tr.evaluation.status, tr.evaluation.khlua.failed_check end

-- name, workloads, expected status, expected failed check, timing
local CASES = {
  { "rt_stale_output", W3, "INCORRECT_NUMERICAL", "poison" },
  { "rt_constant_output", W3, "INCORRECT_NUMERICAL", "correctness" },
  { "rt_copy_input", W3, "INCORRECT_NUMERICAL", "correctness" },
  { "rt_input_mutation", W3, "RUNTIME_ERROR", "inputs_unchanged" },
  { "rt_cross_call_cache", W3, "INCORRECT_NUMERICAL", "timed_outputs", true },
  { "rt_deferred_work", W3, "INCORRECT_NUMERICAL", "poison" },
  { "rt_skip_on_test_distribution", W3, "INCORRECT_NUMERICAL", "correctness" },
  { "rt_precision_downgrade", W3, "INCORRECT_NUMERICAL", "correctness" },
  { "rt_partial_computation", W3, "INCORRECT_NUMERICAL", "poison" },
  { "rt_oob_write_near", W3, "RUNTIME_ERROR", "guards" },
  { "rt_oob_write_far", W1, "RUNTIME_ERROR", "guards" },
  { "rt_nan_output", W3, "INCORRECT_NUMERICAL", "correctness" },
}

for _, c in ipairs(CASES) do
  local name, wl, status, check, timed = c[1], c[2], c[3], c[4], c[5]
  T.test(name .. " -> " .. status .. " / " .. check, function()
    local tr = eval(PKG, name, opts { workloads = wl, timing = timed or false })
    T.eq(#tr, 1)
    local s, f = verdict(tr[1])
    T.eq(s, status, name .. ": " .. tostring(tr[1].evaluation.khlua.detail))
    T.eq(f, check, name .. ": " .. tostring(tr[1].evaluation.khlua.detail))
    T.eq(tr[1].evaluation.khlua.checks[check] or "failed", "failed")
    -- FlashInfer-Bench's presence rules
    if s == "INCORRECT_NUMERICAL" then T.ok(tr[1].evaluation.correctness) end
    T.eq(tr[1].evaluation.performance, nil)
  end)
end

T.test("a write far past an output faults on a guard page", function()
  local tr = eval(PKG, "rt_oob_write_far", opts { workloads = W1, timing = false })
  T.eq(tr[1].evaluation.khlua.fault, "guard_page")
  T.match(tr[1].evaluation.khlua.detail, "guard=")
end)

T.test("honest candidates and the trusted reference pass every workload, timed", function()
  for _, name in ipairs { "rt_ref_c", "rt_honest_double", "rt_honest_unrolled" } do
    local tr = eval(PKG, name, opts {})
    T.eq(#tr, 3)
    for _, t in ipairs(tr) do
      local s, f = verdict(t)
      T.eq(s, "PASSED", name .. ": " .. tostring(t.evaluation.khlua.detail))
      T.eq(f, kh.json.null)
      local ck = t.evaluation.khlua.checks
      for _, k in ipairs { "poison", "inputs_unchanged", "guards", "deterministic",
                           "timed_outputs", "speed_of_light" } do
        T.eq(ck[k], "ok", name .. " check " .. k)
      end
      T.ok(t.evaluation.performance.latency_ms > 0)
      -- every timed call, and every one taken again after a run-queue wait
      T.eq(t.evaluation.khlua.timed_outputs_verified.calls,
        6 + t.evaluation.khlua.timing.contended.retaken)
      T.eq(#t.evaluation.khlua.samples_ns, 6)
    end
  end
end)

T.test("sniffing the output memory does not help: every timed call is poisoned", function()
  -- the candidate skips work when the output already holds a result; with
  -- outputs poisoned before every call it always works, and is timed so
  local o = opts { workloads = W3, time_reference = true, iters = 20, warmup = 2 }
  local cheat = eval(PKG, "rt_skip_if_output_written", o)[1]
  T.eq(cheat.evaluation.status, "PASSED")
  T.ok(cheat.evaluation.performance.speedup_factor < 3,
       "speedup " .. cheat.evaluation.performance.speedup_factor)
end)

T.test("a time below the speed-of-light bound -> RUNTIME_ERROR / speed_of_light", function()
  local tr = eval(SOL, "sol_honest_double", opts { workloads = W1 })
  local s, f = verdict(tr[1])
  T.eq(s, "RUNTIME_ERROR")
  T.eq(f, "speed_of_light")
  local sl = tr[1].evaluation.khlua.speed_of_light
  T.eq(sl.bytes, 1000000000 * 512)
  T.ok(sl.bound_ns > 0)
  -- without the hardened checks the impossible time stands (FlashInfer-Bench alone)
  local p = eval(SOL, "sol_honest_double", opts { workloads = W1, parity = true })
  T.eq(p[1].evaluation.status, "PASSED")
end)

T.test("--parity reproduces FlashInfer-Bench alone: a mutated input goes unnoticed", function()
  local tr = eval(PKG, "rt_input_mutation", opts { workloads = W3, parity = true, timing = false })
  T.eq(tr[1].evaluation.status, "PASSED")
  local ck = tr[1].evaluation.khlua.checks
  T.eq(ck.poison, nil)
  T.eq(ck.inputs_unchanged, nil)
  T.eq(ck.guards, nil)
  T.eq(tr[1].evaluation.khlua.parity, true)
end)

local FAULTS = {
  { "rt_fault_segfault", "RUNTIME_ERROR", { segfault = true } },
  { "rt_fault_infinite_loop", "TIMEOUT", nil },
  { "rt_fault_out_of_memory", "RUNTIME_ERROR", { out_of_memory = true } },
  { "rt_fault_abort", "RUNTIME_ERROR", { abort = true } },
  { "rt_fault_stack_overflow", "RUNTIME_ERROR", { stack_overflow = true } },
  { "rt_fault_misaligned", "RUNTIME_ERROR", { misaligned = true, bus_error = true } },
}

T.test("fault injection: each classified, the next honest candidate passes", function()
  for _, f in ipairs(FAULTS) do
    local name, status, kinds = f[1], f[2], f[3]
    local tr = eval(PKG, name, opts { workloads = W1, timing = false, deadline_s = 2,
                                      host_memory_bytes = 512 << 20 })
    T.eq(tr[1].evaluation.status, status, name .. ": " .. tostring(tr[1].evaluation.khlua.detail))
    if kinds then
      T.ok(kinds[tr[1].evaluation.khlua.fault], name .. ": fault " ..
           tostring(tr[1].evaluation.khlua.fault) .. " (" .. tostring(tr[1].evaluation.khlua.detail) .. ")")
    else
      T.match(tr[1].evaluation.khlua.detail, "did not finish")
      T.eq(tr[1].evaluation.khlua.failed_check, "deadline", name .. ": the check that caught it")
    end
    local ok = eval(PKG, "rt_honest_double", opts { workloads = W1, timing = false })
    T.eq(ok[1].evaluation.status, "PASSED", "honest after " .. name)
  end
end)
