-- test_redteam_host_confine.lua: the host red team by class (issue 19, "What
-- got through, by class"; tests/redteam/host/README.md has the table).  The
-- candidates were written against the jail (engine/worker/jail.h, jail.c) and the
-- warden (engine/worker/role_host.c) by reading them: each cheating one gets its
-- exact verdict, the check that caught it and, where there is one, the fault;
-- an attack the defences make degenerate into honest work PASSES and is
-- shown to gain nothing; a candidate that cheats only when a probe of the
-- warden succeeds PASSES (it fails the day confinement breaks); two honest
-- but unusual controls pass on every workload, timed.
--
-- CMakeLists.txt runs this file with ANTHROPIC_API_KEY and
-- KHLUA_REDTEAM_CANARY set to canaries: no verdict nor any part of a trace
-- may carry them, plain, hex-encoded or spaced out.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local W1 = "7e0d7a8e-0001-4a57-9a3c-1d2e3f405161" -- batch 1
local W3 = "7e0d7a8e-0003-4a57-9a3c-1d2e3f405161" -- batch 64
local KEY, CANARY = "sk-ant-khlua-canary-7f3a9c", "khlua-canary-env-51d2"

-- A copy of the package, with the class-6 candidates aimed at a directory
-- this test makes (their default, /nonexistent/khlua-redteam, does not exist).
local dir = T.tmpdir()
local PKG, RT = dir .. "/pkg", dir .. "/rt"
os.execute("cp -r " .. T.quote(SRC .. "/tests/redteam/host/rmsnorm") .. " " .. T.quote(PKG) ..
           " && mkdir " .. T.quote(RT))
T.write(RT .. "/a", "a\n")
T.write(RT .. "/victim", "victim\n")
do
  local p = assert(io.popen("ls " .. T.quote(PKG .. "/solutions")))
  for f in p:lines() do
    if f:match("^rt_sys_") then
      local path = PKG .. "/solutions/" .. f
      local s = kh.json.decode(T.read(path))
      s.sources[1].content = s.sources[1].content:gsub('#define RTDIR "[^"]*"',
                                                       '#define RTDIR "' .. RT .. '"', 1)
      T.write(path, kh.json.encode(s))
    end
  end
  p:close()
end

math.randomseed(T.seed())

-- Small, fast settings, as test_redteam_host.lua's.  No seed: kh.eval draws
-- one from the OS (the class-2 candidates depend on that); a test that needs
-- one sets it.
local function opts(extra)
  local o = {
    trials = 3, warmup = 1, iters = 6, timing_trials = 1, cold = false, rotate_inputs = 3,
    verify_timed_fraction = 1.0, deadline_s = 30, time_reference = false, record = false,
  }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function eval(name, o)
  local traces, msg, code = kh.eval(PKG, name, o)
  T.ok(traces, "kh.eval could not run: " .. tostring(msg) .. " " .. tostring(code))
  return traces
end

local function detail(t) return tostring(t.evaluation.khlua.detail) end

local function expect(t, name, status, check, fault)
  local k = t.evaluation.khlua
  T.eq(t.evaluation.status, status, name .. ": " .. detail(t))
  T.eq(k.failed_check, check or kh.json.null, name .. ": " .. detail(t))
  if fault then T.eq(k.fault, fault, name .. ": " .. detail(t)) end
  if check then T.eq(k.checks[check] or "failed", "failed", name) end
  T.eq(t.evaluation.performance, nil, name)
end

local function passed_timed(t, name)
  T.eq(t.evaluation.status, "PASSED", name .. ": " .. detail(t))
  T.eq(t.evaluation.khlua.failed_check, kh.json.null, name)
  for _, c in ipairs { "poison", "inputs_unchanged", "guards", "deterministic", "timed_outputs",
                       "speed_of_light" } do
    T.eq(t.evaluation.khlua.checks[c], "ok", name .. " check " .. c)
  end
  T.ok(t.evaluation.performance.latency_ms > 0, name)
  T.eq(t.evaluation.khlua.timed_outputs_verified.calls,
    #t.evaluation.khlua.samples_ns + t.evaluation.khlua.timing.contended.retaken, name)
end

-- The fastest timed call: preemption on a loaded machine only adds time, so
-- the minimum is the fairest figure to compare two candidates by.
local function min_ns(t)
  local m = math.huge
  for _, v in ipairs(t.evaluation.khlua.samples_ns) do m = math.min(m, v) end
  return m
end

-- Candidate name against the honest rt_ref_c, both PASSED and timed, in
-- rounds that time both again: holds(cheat_ns, honest_ns) on their fastest
-- calls over the rounds so far (after each round when early, else after
-- the last).  Other work on a small machine can slow every call of a run (a
-- spinning jail that is not on a CPU when the warden says "go" waits for
-- its next time slice), so one run of each says little.
local function race(name, o, rounds, early, holds, what)
  local best_c, best_h = math.huge, math.huge
  for _ = 1, rounds do
    local honest, cheat = eval("rt_ref_c", o)[1], eval(name, o)[1]
    passed_timed(honest, "rt_ref_c")
    passed_timed(cheat, name)
    best_c, best_h = math.min(best_c, min_ns(cheat)), math.min(best_h, min_ns(honest))
    if early and holds(best_c, best_h) then return end
  end
  T.ok(holds(best_c, best_h),
       string.format("%s %s: %.0f ns against the honest %.0f ns", name, what, best_c, best_h))
end

-- An attack that the defences turn into honest work: it PASSES, and its
-- fastest timed call is no faster than half the honest candidate's, in one
-- of up to five rounds.  (A run whose every call was slowed can hide a
-- gain: on a quiet machine the first round decides; under heavy load an
-- attack that does gain still fails here most of the time.)
local function gains_nothing(name, o)
  race(name, o, 5, true, function(c, h) return c >= 0.5 * h end, "gained")
end

-- controls --------------------------------------------------------------------
T.test("controls: a lazy thread pool and a busy constructor pass every workload, timed", function()
  for _, name in ipairs { "rt_ctl_lazy_pool", "rt_ctl_ctor_stdio" } do
    local tr = eval(name, opts {})
    T.eq(#tr, 3)
    for _, t in ipairs(tr) do passed_timed(t, name) end
  end
end)

-- class 1: checked calls recognisable ---------------------------------------------
-- Every timed call is verified (verify_timed_fraction 1, the default): a
-- candidate that tells timing from correctness is caught on its first cheat.
local CLASS1 = {
  { "rt_cheat_after_6_calls", "INCORRECT_NUMERICAL", "timed_outputs", true },
  { "rt_cheat_on_fresh_streak", "INCORRECT_NUMERICAL", "timed_outputs", true },
  { "rt_cheat_after_reload", "INCORRECT_NUMERICAL", "timed_outputs", true },
  -- a trial's second call (the other poison) is on the first's buffers
  { "rt_cheat_on_seen_output", "INCORRECT_NUMERICAL", "poison", true },
}
for _, c in ipairs(CLASS1) do
  T.test("class 1: " .. c[1] .. " -> " .. c[2] .. " / " .. c[3], function()
    local tr = eval(c[1], opts { workloads = W3, timing = c[4] })
    expect(tr[1], c[1], c[2], c[3])
  end)
end

-- class 2: predictable inputs ---------------------------------------------------------
T.test("class 2: outputs precomputed for base seed 1 -> INCORRECT_NUMERICAL / correctness", function()
  expect(eval("rt_predict_seed1", opts { workloads = W3, timing = false })[1], "rt_predict_seed1",
         "INCORRECT_NUMERICAL", "correctness")
  -- the prediction itself is exact: with the seed known, every call (trials
  -- and timed calls) is replayed and passes; only the seed's secrecy defends
  passed_timed(eval("rt_predict_seed1", opts { workloads = W3, seed = 1 })[1], "rt_predict_seed1")
end)

T.test("class 2: recognising a weak base seed gains nothing against a secret one", function()
  gains_nothing("rt_predict_weak_seeds", opts { workloads = W3, iters = 20 })
  -- with a weak seed, the replay is much faster than the work
  race("rt_predict_weak_seeds", opts { workloads = W3, iters = 20, seed = 5 }, 5, true,
       function(c, h) return c < 0.5 * h end, "replayed no faster than the work on seed 5")
end)

-- class 3: work reuse across calls --------------------------------------------------------
T.test("class 3: a cache keyed on all the inputs never hits in timing, gains nothing", function()
  gains_nothing("rt_cache_full_fingerprint", opts { workloads = W3, iters = 20 })
end)

T.test("class 3: a cache keyed on each row's first element -> INCORRECT_NUMERICAL / correctness",
       function()
  -- ~20 colliding rows are expected over the three trials; none, ~1e-9
  expect(eval("rt_cache_row_first_element", opts { workloads = W3, timing = false })[1],
         "rt_cache_row_first_element", "INCORRECT_NUMERICAL", "correctness")
end)

-- class 4: the verifier within reach ----------------------------------------------------------
T.test("class 4: a probe of the warden's /proc/<ppid>/{mem,environ,maps} fails: PASSED", function()
  local tr = eval("rt_probe_warden_memory", opts { workloads = W1 })
  passed_timed(tr[1], "rt_probe_warden_memory")
end)

T.test("class 4: process_vm_readv on the warden -> RUNTIME_ERROR / sandbox", function()
  local t = eval("rt_process_vm_readv", opts { workloads = W1, timing = false })[1]
  expect(t, "rt_process_vm_readv", "RUNTIME_ERROR", "sandbox", "forbidden_syscall")
  T.match(detail(t), "syscall=process_vm_readv")
end)

T.test("class 4: \"done\" written early, the work left to a thread -> INCORRECT_NUMERICAL / poison",
       function()
  expect(eval("rt_done_early_thread", opts { workloads = W3 })[1], "rt_done_early_thread",
         "INCORRECT_NUMERICAL", "poison")
end)

T.test("class 4: a guard page made writable and written -> RUNTIME_ERROR / guards", function()
  expect(eval("rt_unguard_write_past", opts { workloads = W1, timing = false })[1],
         "rt_unguard_write_past", "RUNTIME_ERROR", "guards")
end)

T.test("class 4: work done while the warden waits for \"armed\" -> INCORRECT_NUMERICAL / timed_outputs",
       function()
  -- the timed call's inputs are written only after the jail answered
  -- "armed": what it computed then was the slot's previous inputs
  for _, t in ipairs(eval("rt_arm_window_hijack", opts { workloads = { W1, W3 } })) do
    expect(t, "rt_arm_window_hijack", "INCORRECT_NUMERICAL", "timed_outputs")
  end
end)

T.test("class 4: a thread that works on the inputs before the clock starts gains nothing", function()
  -- cold: the cache flush before each timed call used to be a window with
  -- the inputs in place; they are published after it now
  gains_nothing("rt_spy_thread", opts { workloads = W3, iters = 20, cold = true })
end)

-- class 5: shapes ---------------------------------------------------------------------------
local function split(tr)
  local listed, drawn = {}, {}
  for _, t in ipairs(tr) do
    if t.evaluation.khlua.shape_of then drawn[#drawn + 1] = t else listed[#listed + 1] = t end
  end
  return listed, drawn
end

T.test("class 5: correct only on the listed batch sizes -> caught on every drawn shape", function()
  local listed, drawn = split(eval("rt_shape_listed_only", opts { shapes = 4, timing = false }))
  T.eq(#listed, 3)
  T.eq(#drawn, 4)
  for _, t in ipairs(listed) do T.eq(t.evaluation.status, "PASSED", detail(t)) end
  for _, t in ipairs(drawn) do
    expect(t, "rt_shape_listed_only", "INCORRECT_NUMERICAL", "shapes")
    T.match(detail(t), "^on shape shape%-%x+ %(from workload [%x-]+%)")
  end
end)

T.test("class 5: blocks of 8 rows -> caught on every drawn batch >= 8 that 8 does not divide",
       function()
  -- the drawn shapes come from the base seed: fixed here, so at least one
  -- of them is such a batch
  local listed, drawn = split(eval("rt_shape_blocks_of_8", opts { shapes = 4, timing = false,
                                                                  seed = 4242 }))
  for _, t in ipairs(listed) do T.eq(t.evaluation.status, "PASSED", detail(t)) end
  local caught = 0
  for _, t in ipairs(drawn) do
    local b = t.workload.axes.batch_size
    if b >= 8 and b % 8 ~= 0 then
      expect(t, "rt_shape_blocks_of_8 batch " .. b, "INCORRECT_NUMERICAL", "shapes")
      caught = caught + 1
    else
      T.eq(t.evaluation.status, "PASSED", "batch " .. b .. ": " .. detail(t))
    end
  end
  T.ok(caught >= 1, "seed 4242 draws a batch the kernel gets wrong")
  -- and the honest pool passes the same shapes
  for _, t in ipairs(eval("rt_ctl_lazy_pool", opts { shapes = 4, timing = false, seed = 4242 })) do
    T.eq(t.evaluation.status, "PASSED", detail(t))
  end
end)

-- class 6: host confinement --------------------------------------------------------------------
-- the call each is trapped on; system()'s posix_spawn blocks every signal
-- around its clone, so the trap kills it without the jail's description
local SYS = {
  system = false, fork_daemon = "clone", execve = "execve", connect = "socket",
  write_file = "open", rename = "rename", unlink = "unlink", kill_warden = "kill", ptrace = "ptrace",
}

T.test("class 6: forbidden calls, in a constructor and in the call -> RUNTIME_ERROR / sandbox", function()
  local names = {}
  for k in pairs(SYS) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    for _, where in ipairs { "ctor", "call" } do
      local name = "rt_sys_" .. k .. "_" .. where
      local t = eval(name, opts { workloads = W1, timing = false })[1]
      expect(t, name, "RUNTIME_ERROR", "sandbox", "forbidden_syscall")
      T.match(detail(t), SYS[k] and "syscall=" .. SYS[k] or "SIGSYS", name)
    end
  end
  -- nothing happened to the files they aimed at
  T.eq(T.read(RT .. "/a"), "a\n")
  T.eq(T.read(RT .. "/victim"), "victim\n")
  for _, f in ipairs { "b", "written", "system", "execve" } do
    T.eq(io.open(RT .. "/" .. f, "r"), nil, RT .. "/" .. f .. " was made")
  end
  -- and the next candidate runs as before
  passed_timed(eval("rt_ref_c", opts { workloads = W1 })[1], "rt_ref_c after them")
end)

T.test("class 6: hooking libm and LD_PRELOAD in its own jail leaves the reference's time alone",
       function()
  -- the reference runs in a jail of its own: its time beside a hooking
  -- candidate is its time beside an honest one (the best of up to five
  -- rounds: a slowed round says little)
  local o = opts { workloads = W3, iters = 20, time_reference = true }
  for _, name in ipairs { "rt_hook_libm_ctor", "rt_hook_libm_call" } do
    local ref0, ref = math.huge, math.huge
    for _ = 1, 5 do
      local base, t = eval("rt_ctl_ctor_stdio", o)[1], eval(name, o)[1]
      passed_timed(base, "rt_ctl_ctor_stdio")
      passed_timed(t, name)
      ref0 = math.min(ref0, base.evaluation.performance.reference_latency_ms)
      ref = math.min(ref, t.evaluation.performance.reference_latency_ms)
      if ref < 3 * ref0 then break end
    end
    T.ok(ref < 3 * ref0, string.format("%s: the reference took %.4f ms, %.4f ms beside an honest "
                                       .. "candidate", name, ref, ref0))
  end
end)

-- class 7: leaks ------------------------------------------------------------------------------------
local function hex(s) return (s:gsub(".", function(ch) return string.format("%02x", ch:byte()) end)) end
local function spaced(s) return (s:gsub(".", "%0 "):sub(1, -2)) end

T.test("class 7: no verdict or trace carries the key or the canary", function()
  T.eq(os.getenv("ANTHROPIC_API_KEY"), KEY, "run through ctest: CMakeLists.txt sets the canaries")
  T.eq(os.getenv("KHLUA_REDTEAM_CANARY"), CANARY, "run through ctest")
  local LEAKS = {
    { "rt_leak_getenv_call", "RUNTIME_ERROR", "abort" },
    { "rt_leak_getenv_ctor", "RUNTIME_ERROR", "abort" },
    { "rt_leak_proc_environ", "RUNTIME_ERROR", "exit" },
    -- the jail's "could not load" message is the candidate's to write
    { "rt_leak_load_message", "COMPILE_ERROR", nil },
    -- a host candidate may include system headers and its own sources only
    { "rt_leak_include_environ", "COMPILE_ERROR", nil },
  }
  for _, l in ipairs(LEAKS) do
    local name = l[1]
    local tr = eval(name, opts { workloads = W1, timing = false })
    local t = tr[1]
    T.eq(t.evaluation.status, l[2], name .. ": " .. detail(t))
    if l[3] then T.eq(t.evaluation.khlua.fault, l[3], name .. ": " .. detail(t)) end
    local all = kh.json.encode(tr)
    -- a scrubber redacts key shapes and long hex runs; a key spaced out is
    -- none of them: nothing but confinement keeps it out
    for _, secret in ipairs { KEY, CANARY, hex(KEY), hex(CANARY), spaced(KEY), spaced(CANARY) } do
      T.eq(all:find(secret, 1, true), nil, name .. " leaked " .. secret .. ": " .. detail(t))
      T.eq(detail(t):find(secret, 1, true), nil, name)
    end
  end
end)
