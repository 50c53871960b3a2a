-- test_controller.lua: the policy framework on the host rmsnorm task with the
-- replay ladder (tests/fixtures/replay/ctl): plateau -> model switch, a
-- slower candidate rejected, cheating and wrong candidates rejected, a
-- promotion with its evidence in the store, an incumbent regression, budgets,
-- the gate's statistics, kill-and-resume and Ctrl-C through a child khlua.
-- Evaluations come from a deterministic fake (tests/lua/lib/fake_eval.lua)
-- injected through lib.evaluate, the one adapter policies use.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
package.path = SRC .. "/policies/?.lua;" .. SRC .. "/tests/lua/lib/?.lua;" .. package.path
local ctl = require "lib.controller"
local ev = require "lib.evaluate"
local models = require "lib.models"
local gate = require "lib.gate"
local stats = require "lib.stats"
local policy = require "lib.policy"
local cli = require "lib.cli"
local fake = require "fake_eval"

local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local LADDER = SRC .. "/tests/fixtures/replay/ctl"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local BIN = os.getenv("KHLUA_BIN") or arg[-1]
local SPECS = "replay:" .. LADDER .. "/a,replay:" .. LADDER .. "/b"

local function run_policy(name, over)
  local P = assert(policy.load(SRC .. "/policies/" .. name .. ".lua"))
  local dir = T.tmpdir()
  -- closed by the caller, or by its __gc after a failed test
  local db = assert(kh.store.open(dir .. "/store", { nosync = true }))
  local lines = {}
  local cfg = { task = TASK, model_specs = SPECS, rounds = 8, plateau = 2, db = db,
    skills = SRC .. "/skills", out = function(l) lines[#lines + 1] = l end,
    gate = { seed = math.random(1, 1000) } }
  for k, v in pairs(over or {}) do cfg[k] = v end
  assert(cli.resolve_models(cfg))
  ev.use(fake.evaluate)
  local res, msg = ctl.run(P, cfg)
  ev.use(nil)
  T.ok(res, msg)
  local rounds = db:query { run = res.run, type = "round" }
  table.sort(rounds, function(a, b) return a.index < b.index end)
  return res, rounds, db:query { run = res.run, type = "promotion" }, lines, db, dir
end

local function keys_of(rounds, db)
  -- which ladder step each round's candidate was
  local out = {}
  for i, r in ipairs(rounds) do
    local c = r.candidates[1] and db:get(r.candidates[1])
    local src = c and db:get_blob(c.source_blob)
    out[i] = src and fake.behaviour(src).key or "-"
  end
  return out
end

T.test("plateau_switch: promotion, rejections, plateau and a model switch", function()
  local res, rounds, promos, lines = run_policy("plateau_switch")
  T.eq(res.status, "done")
  T.eq(#rounds, 8, "every round stored once")
  for i, r in ipairs(rounds) do T.eq(r.index, i) end
  -- round 1: correct but slower than the reference: rejected as slower
  T.eq(rounds[1].verdicts[1].rejected_for, "slower")
  T.eq(rounds[1].decision.promoted, nil)
  -- round 2: faster: promoted
  T.ok(rounds[2].decision.promoted, "round 2 promotes")
  -- round 3: wrong numerics; round 5: the constant writer: both caught
  T.eq(rounds[3].verdicts[1].rejected_for, "incorrect")
  T.eq(rounds[5].verdicts[1].rejected_for, "incorrect")
  T.match(rounds[5].verdicts[1].reason, "INCORRECT_NUMERICAL")
  -- round 4: no gain beyond noise -> plateau -> switch to family b
  T.eq(rounds[4].verdicts[1].rejected_for, "not_faster")
  T.ok(rounds[4].events.plateau, "plateau after round 4")
  T.eq(rounds[4].actions[1].kind, "switch_family")
  T.match(rounds[5].model, "/b$")
  T.match(rounds[4].model, "/a$")
  -- round 6: family b's faster kernel promoted over a/02
  T.ok(rounds[6].decision.promoted)
  T.eq(#promos, 2)
  T.eq(res.metrics.accepted, 2)
  T.eq(res.metrics.candidates, 8)
  T.ok(res.metrics.tokens > 0)
  -- after both families plateau on a direction: a new direction
  T.ok(rounds[8].events.plateau)
  local kinds = {}
  for _, a in ipairs(rounds[8].actions) do kinds[a.kind] = true end
  T.ok(kinds.switch_direction and kinds.add_reference, "direction switch on the second plateau")
  T.ok(#lines >= 9)
end)

T.test("a promotion carries its evidence: paired, sweep and finalist evaluations", function()
  local res, rounds, promos, _, db = run_policy("agent_assisted", { rounds = 2 })
  T.eq(#promos, 1)
  local p = promos[1]
  T.eq(p.candidate, rounds[2].decision.promoted)
  T.eq(p.run, res.run)
  T.ok(p.incumbent and p.incumbent ~= p.candidate, "the replaced incumbent is named")
  local g = p.gate.representative
  T.ok(g.lo > 1 + 0.02 and g.ratio > g.lo and g.hi >= g.ratio, "bootstrap bounds bracket the ratio")
  T.eq(p.gate.finalist.trials, 100)
  T.eq(p.gate.sweep.correct, 1)
  -- evidence: 5 reps x 2 solutions x 2 sampled workloads, 3 sweep, the
  -- finalist's 100 seeds on each of 3 small workloads (a first batch of 10,
  -- then 25, 25, 25, 15), and the official-protocol timing of the 3
  T.eq(#p.evidence, 5 * 2 * 2 + 3 + 5 * 3 + 3)
  local purposes = {}
  for _, id in ipairs(p.evidence) do
    local e = db:get(id)
    T.eq(e.type, "evaluation")
    purposes[e.purpose] = (purposes[e.purpose] or 0) + 1
  end
  T.eq(purposes["representative:candidate"], 10)
  T.eq(purposes["representative:incumbent"], 10)
  T.eq(purposes.sweep, 3)
  T.eq(purposes.finalist, 15)
  T.eq(purposes.official, 3)
  T.near(p.gate.official.mean_speedup, 1.4, 0.05)
  T.eq(#p.gate.official.evaluations, 3)
  -- the score: mean of reference / candidate latency over every workload
  T.near(p.score, 1.4, 0.05)
  -- the store is consistent
  local v = db:verify()
  T.eq(#(v.problems or {}), 0, "store verify")
end)

T.test("a round's record times each gate step; scripts/round_times.lua shows them", function()
  local res, rounds, _, _, db, dir = run_policy("agent_assisted", { rounds = 2 })
  local r = rounds[2]
  T.ok(r.decision.promoted, "round 2 promotes")
  local steps = r.verdicts[1].gate.steps
  T.ok(#steps >= 3, "representative, sweep and finalist at least")
  local sum = 0
  for _, g in ipairs(steps) do
    T.ok(type(g.seconds) == "number" and g.seconds >= 0, "step " .. tostring(g.step) .. " timed")
    sum = sum + g.seconds
  end
  local round_s = r.state_out.elapsed_s - rounds[1].state_out.elapsed_s
  T.ok(sum <= round_s + 1e-6, string.format("steps %.3f s within the round's %.3f s", sum, round_s))
  T.ok(type(r.decision.profile_s) == "number", "the promotion's profile timed")
  -- a rejected round has no profile
  T.eq(rounds[1].decision.profile_s, nil)
  db:close()
  local p = assert(io.popen(string.format("KHLUA_STORE=%s %s %s %s 2>&1", T.quote(dir .. "/store"),
    T.quote(BIN), T.quote(SRC .. "/scripts/round_times.lua"), T.quote(res.run))))
  local out = p:read("a")
  local _, _, code = p:close()
  T.eq(code, 0, out)
  T.match(out, "\n2 +[%d.]+  promoted")
  T.match(out, "candidate 1: representative [%d.]+, sweep [%d.]+, finalist [%d.]+")
  T.match(out, "profile of the new incumbent [%d.]+ s")
end)

T.test("an incumbent re-measured slower than its record is a regression", function()
  local res, rounds, _, _, db = run_policy("agent_assisted", { rounds = 2 })
  T.ok(rounds[2].decision.promoted)
  T.eq(rounds[2].events.regression, nil)
  -- the machine (or the incumbent) slows down; the run goes on (resumed in process)
  fake.slow["a/02"] = 1.5
  local cfg = { resume = res.run, rounds = 3, db = db, model_specs = SPECS, task = TASK,
    explicit = { rounds = true }, quiet = true }
  assert(cli.resolve_models(cfg))
  ev.use(fake.evaluate)
  local res2, msg = ctl.run(assert(policy.load(SRC .. "/policies/agent_assisted.lua")), cfg)
  ev.use(nil)
  fake.slow["a/02"] = nil
  T.ok(res2, msg)
  local r3 = db:get(string.format("round-%s-%04d", res.run:sub(5), 3))
  T.ok(r3.events.regression, "round 3 re-measures the incumbent a/02 slower")
  T.ok(r3.events.regression.ratio > 1.3)
  db:close()
end)

T.test("budgets stop a run: tokens", function()
  local res, rounds = run_policy("agent_assisted", { rounds = 20, budget = { tokens = 2500 } })
  T.eq(res.stop_reason, "token budget")
  T.ok(#rounds >= 1 and #rounds < 20)
end)

T.test("budgets stop a run: wall time", function()
  -- the seed's measurement counts toward the wall time: a budget it uses up
  -- leaves no round
  local res, rounds = run_policy("agent_assisted", { rounds = 20, budget = { wall_s = 1e-6 } })
  T.eq(res.stop_reason, "wall time budget")
  T.eq(#rounds, 0)
end)

T.test("actions: widen asks for more candidates per round, narrow for fewer", function()
  local P = assert(policy.load(SRC .. "/policies/agent_assisted.lua"))
  local W = { name = "widen_test", propose = P.propose }
  function W.react(view, outcome)
    if outcome.round == 1 then return { { kind = "widen", why = "test" } } end
    if outcome.round == 2 then return { { kind = "narrow", why = "test" } } end
    return {}
  end
  local dir = T.tmpdir()
  local db = assert(kh.store.open(dir .. "/store", { nosync = true }))
  local cfg = { task = TASK, model_specs = SPECS, rounds = 3, db = db, quiet = true }
  assert(cli.resolve_models(cfg))
  ev.use(fake.evaluate)
  local res, msg = ctl.run(W, cfg)
  ev.use(nil)
  T.ok(res, msg)
  local rounds = db:query { run = res.run, type = "round" }
  table.sort(rounds, function(a, b) return a.index < b.index end)
  T.eq(#rounds[1].llm_calls, 1)
  T.eq(#rounds[2].llm_calls, 2, "widened")
  T.eq(#rounds[3].llm_calls, 1, "narrowed")
  T.eq(res.metrics.candidates, 4)
  -- an unknown action is the policy's bug: the run says so
  W.react = function() return { { kind = "teleport" } } end
  cfg.resume, cfg.rounds, cfg.explicit = res.run, 4, { rounds = true }
  ev.use(fake.evaluate)
  local bad, why = ctl.run(W, cfg)
  ev.use(nil)
  T.eq(bad, nil)
  T.match(why, "unknown action teleport")
  T.eq(db:get(res.run).status, "failed")
  db:close()
end)

T.test("with no key in the environment a run uses the replay provider and says so", function()
  local dir = T.tmpdir()
  local cmd = string.format("env -u OPENAI_API_KEY -u ANTHROPIC_API_KEY %s --store %s %s --task %s "
    .. "--replay %s --rounds 1 --fake-evaluator %s 2>&1", T.quote(BIN), T.quote(dir .. "/s"),
    T.quote(SRC .. "/policies/agent_assisted.lua"), T.quote(TASK), T.quote(LADDER), T.quote(FAKE))
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local _, _, code = p:close()
  T.eq(code, 0, out)
  T.match(out, "no ANTHROPIC_API_KEY in the environment: anthropic:claude%-sonnet%-4%-5 runs on the replay provider")
  T.match(out, "no OPENAI_API_KEY in the environment: openai:gpt%-5 runs on the replay provider")
  T.match(out, "1 rounds, 1 candidates")
end)

T.test("full_agent sees the definition and its last score only", function()
  local _, rounds, _, _, db = run_policy("full_agent", { rounds = 2 })
  T.eq(rounds[1].direction, nil)
  local p1 = db:get_blob(rounds[1].prompt_blob)
  local p2 = db:get_blob(rounds[2].prompt_blob)
  T.match(p1, "none yet")
  T.match(p2, "status rejected")
  T.ok(not p2:find("Bottleneck", 1, true) and not p2:find("<skill", 1, true))
end)

T.test("a CUDA incumbent is profiled on its slowest workload and its counters make the state", function()
  local dir = T.tmpdir()
  local db <close> = assert(kh.store.open(dir .. "/store", { nosync = true }))
  local seen
  ev.use_profile(function(task_path, sol, opts)
    seen = { task = task_path, sol = sol, opts = opts }
    local dram = 60 + math.random() * 30
    return { counters = true, state = { counters = true, kind = "memory-bound", dram_pct = dram,
      sm_pct = 10, reread = 1.0, sol_fraction = dram / 100 }, signature = "memory-bound dram",
      store_id = "profile-TEST" }
  end)
  local lines = {}
  local ctx = { task = { backend = "cuda", path = TASK, workloads = {} },
    cfg = { gate = { seed = 3 }, out = function(l) lines[#lines + 1] = l end } }
  local a, b = math.random(), math.random()
  local inc = { name = "inc", solution = { name = "inc", spec = { khlua = {} } }, latency = { u1 = a, u2 = a + b },
    reference_latency = {} }
  ctl.profile_incumbent(db, ctx, inc)
  T.eq(seen.opts.workload, "u2", "the slowest workload")
  T.eq(seen.opts.store, db)
  T.eq(seen.sol, inc.solution)
  T.eq(inc.counters.bound, "memory")
  T.eq(inc.profile, "profile-TEST")
  T.match(lines[1], "memory%-bound")
  -- what make_view hands a policy: dirs.state over the incumbent's counters
  local dirs = require "lib.directions"
  local state = dirs.state("cuda", {}, inc.latency, inc.counters)
  T.eq(state.counters.bound, "memory", "the bottleneck state carries the counters")
  T.eq(state.counters.dram_pct, inc.counters.dram_pct)
  local d = dirs.pick(state)
  T.ok(d, "a direction applies to the profiled state")
  -- a profiler that cannot run: the state says why, the run goes on
  ev.use_profile(function() return nil, "no GPU on this machine", "ENODEV" end)
  ctl.profile_incumbent(db, ctx, inc)
  ev.use_profile(nil)
  T.eq(inc.counters, nil)
  T.match(inc.profile_error, "no GPU")
  -- the host backend is never profiled
  local called = false
  ev.use_profile(function() called = true end)
  ctx.task.backend = "host"
  ctl.profile_incumbent(db, ctx, inc)
  ev.use_profile(nil)
  T.ok(not called, "host tasks are not profiled")
end)

-- The engine's paired protocol over a per-measurement function one(sol,
-- opts) -> {summary, ids} (kh.eval's result shape for protocol "paired":
-- ratios per (repetition, workload), geometric mean, lib.stats bootstrap).
local function paired_of(one)
  return function(cand, opts)
    assert(opts.protocol == "paired", "the gate's paired step asks the engine once")
    local r = { ratios = {}, candidate_ms = {}, incumbent_ms = {}, contended = 0, seed = opts.seed }
    for rep = 1, opts.reps do
      local got = {}
      for _, who in ipairs { "cand", "inc" } do
        local m = one(who == "cand" and cand or opts.incumbent, { workloads = opts.workloads })
        r.contended = math.max(r.contended, m.summary.contended or 0)
        got[who] = m.summary.by_uuid
      end
      for _, u in ipairs(opts.workloads) do
        r.ratios[#r.ratios + 1] = got.inc[u].latency_ms / got.cand[u].latency_ms
      end
    end
    r.ratio = stats.geomean(r.ratios)
    r.lo, r.hi = stats.bootstrap(r.ratios, stats.geomean, { resamples = opts.resamples,
      alpha = opts.alpha, seed = opts.seed })
    return { paired = r, ids = {} }
  end
end

T.test("the paired gate: bootstrap bounds and decisions on random latencies", function()
  local rand = stats.rng(math.random(1, 1 << 30))
  for i = 1, 6 do
    local speed = i == 6 and 1 or 0.5 + rand() * 1.5
    local ws = { { uuid = "w1" }, { uuid = "w2" }, { uuid = "w3" } }
    local function measure(sol, opts)
      local by = {}
      for _, u in ipairs(opts.workloads) do
        local base = 1 + rand() * 0.01
        by[u] = { status = "PASSED", latency_ms = sol == "cand" and base / speed or base }
      end
      return { summary = { ok = true, by_uuid = by }, ids = {} }
    end
    local g = assert(gate.representative(paired_of(measure), "cand", "inc", ws,
      { reps = 6, sample = 3 }))
    T.near(g.ratio, speed, 0.02 * speed)
    T.ok(g.lo <= g.ratio and g.ratio <= g.hi)
    T.eq(g.pass, g.lo > 1.02)
    if speed > 1.1 then T.ok(g.pass, "speed " .. speed) end
    if speed < 0.95 then T.eq(g.rejected_for, "slower") end
    if speed > 0.99 and speed < 1.01 then T.eq(g.rejected_for, "not_faster") end
  end
end)

T.test("the paired gate refuses a gain measured on a busy machine", function()
  local ws = { { uuid = "w1" }, { uuid = "w2" } }
  -- the incumbent's host measurements kept 30% of their timed calls with a
  -- run-queue wait in them: it looks 2x slower than it is
  for _, share in ipairs { 0.3, 0.05 } do
    local function measure(sol, opts)
      local by = {}
      for _, u in ipairs(opts.workloads) do
        by[u] = { status = "PASSED", latency_ms = sol == "inc" and 2.0 or 1.0 }
      end
      return { summary = { ok = true, by_uuid = by, contended = sol == "inc" and share or 0 },
        ids = {} }
    end
    local g = assert(gate.representative(paired_of(measure), "cand", "inc", ws,
      { reps = 4, sample = 2 }))
    T.near(g.ratio, 2.0, 1e-9)
    if share > 0.1 then
      T.eq(g.pass, false)
      T.eq(g.rejected_for, "contended")
      T.match(g.reason, "too busy to time it: 30%%")
    else
      T.eq(g.pass, true, "a few retaken-and-kept calls do not block a clear gain")
    end
  end
  -- and the summary reads the share from the engine's timing
  local s = ev.summary { { workload = { uuid = "w1" }, evaluation = { status = "PASSED",
    performance = { latency_ms = 1 }, khlua = { timing = { n = 50, contended = { retaken = 50,
    kept = 20 } } } } } }
  T.near(s.contended, 0.4, 1e-12)
end)

T.test("the finalist step runs compute-sanitizer on cuda candidates", function()
  local calls
  local function measurer(sanitizer_result)
    calls = {}
    return function(sol, opts, purpose)
      calls[#calls + 1] = { purpose = purpose, opts = opts }
      if purpose == "sanitizer" then return sanitizer_result(opts) end
      return { summary = { ok = true, passed = 1, total = 1 }, ids = { "e" .. #calls } }
    end
  end
  local o = { finalist_trials = 4, finalist_batch = 2 }
  -- clean: the tools and the workload count reach kh.eval, the step records them
  local g = assert(gate.finalist(measurer(function(opts)
    T.eq(table.concat(opts.sanitize, ","), "memcheck,racecheck,initcheck")
    T.eq(opts.workloads, 1)
    T.eq(opts.timing, false)
    kh.time.sleep(0.05)
    return { summary = { ok = true, passed = 1, total = 1 }, ids = { "s1" } }
  end), "cand", "cuda", o))
  T.eq(g.pass, true)
  T.eq(#calls, 3) -- two seed batches, then the sanitizer
  T.ok(g.sanitizer_s and g.sanitizer_s >= 0.05, "the sanitizer's seconds: " .. tostring(g.sanitizer_s))
  T.eq(g.sanitizer, "memcheck, racecheck, initcheck: clean on 1 workload(s)")
  T.eq(g.evidence[#g.evidence], "s1")
  -- an error in the candidate's kernels rejects it
  g = assert(gate.finalist(measurer(function()
    return { summary = { ok = false, passed = 0, total = 1, failed = { status = "RUNTIME_ERROR",
      check = "sanitizer:racecheck", workload = "w1" } }, ids = { "s2" } }
  end), "cand", "cuda", o))
  T.eq(g.pass, false)
  T.eq(g.rejected_for, "sanitizer")
  T.match(g.reason, "check sanitizer:racecheck")
  -- no compute-sanitizer on this machine: recorded, not a rejection
  g = assert(gate.finalist(measurer(function()
    return nil, "sanitize: compute-sanitizer not found (looked in ...)", "ENOTFOUND"
  end), "cand", "cuda", o))
  T.eq(g.pass, true)
  T.match(g.sanitizer, "^not run: sanitize: compute%-sanitizer not found")
  -- another failure to run is the caller's error
  local r, msg = gate.finalist(measurer(function() return nil, "no gpu worker", "ENODEV" end),
    "cand", "cuda", o)
  T.eq(r, nil)
  T.eq(msg, "no gpu worker")
  -- host candidates, or sanitize = false: no sanitizer call
  g = assert(gate.finalist(measurer(function() error("not called") end), "cand", "host", o))
  T.eq(#calls, 2)
  T.eq(g.sanitizer, "unavailable on the host backend")
  g = assert(gate.finalist(measurer(function() error("not called") end), "cand", "cuda",
    { finalist_trials = 2, finalist_batch = 2, sanitize = false }))
  T.eq(#calls, 1)
  T.eq(g.pass, true)
end)

T.test("finalist seeds: 100 per workload while the element budget lasts, 10 at least", function()
  -- the plan: smallest first, each an equal share of what is left
  local plan, total = gate.finalist_plan({ a = 1000, b = 2000, c = 1e8, d = 5e7 }, 100, 10, 2e9)
  T.eq(plan.a, 100)
  T.eq(plan.b, 100)
  -- (2e9 - 3e5) / 2 = 999.85e6 each for c and d: d 19, c then 10.49 -> 10
  T.eq(plan.d, 19)
  T.eq(plan.c, 10)
  T.eq(total, 229)
  -- one huge workload still gets 100 seeds in all; a tight budget, 10 each
  -- topped up from the cheapest to 100 in all
  plan, total = gate.finalist_plan({ z = 1e12 }, 100, 10, 1e9)
  T.eq(plan.z, 100)
  plan, total = gate.finalist_plan({ p = 1e6, q = 2e6, r = 1e9 }, 100, 10, 1e6)
  T.eq(plan.r, 10)
  T.eq(plan.p + plan.q + plan.r, 100)
  T.eq(plan.p, 80)
  -- the step: a first batch on every workload gives the sizes, then only the
  -- workloads still short run, in batches that never overshoot
  local sizes = { w1 = 1000, w2 = 4e8, w3 = 3e8 }
  local calls = {}
  local function measure(_, opts, purpose)
    T.eq(purpose, "finalist")
    calls[#calls + 1] = opts
    local by = {}
    local ws = opts.workloads == "all" and { "w1", "w2", "w3" } or opts.workloads
    for _, u in ipairs(ws) do by[u] = { status = "PASSED", elements = sizes[u] } end
    return { summary = { ok = true, passed = #ws, total = #ws, by_uuid = by },
      ids = { "e" .. #calls } }
  end
  local g = assert(gate.finalist(measure, "cand", "host", { finalist_elements = 2e10 }))
  T.eq(g.pass, true)
  T.eq(calls[1].workloads, "all")
  T.eq(calls[1].trials, 10)
  local seen = {}
  for i, c in ipairs(calls) do
    T.ok(c.trials <= 25, "batch " .. i)
    local ws = c.workloads == "all" and { "w1", "w2", "w3" } or c.workloads
    for _, u in ipairs(ws) do seen[u] = (seen[u] or 0) + c.trials end
    T.ok(c.seed ~= (calls[i - 1] or {}).seed, "fresh seeds per batch")
  end
  T.eq(seen.w1, 100)
  T.eq(seen, g.seeds_by_workload)
  -- (2e10 - 1e5) / 2 for each large one: w3 33, w2 (2e10 - 1e5 - 9.9e9) / 4e8 = 25
  T.eq(seen.w3, 33)
  T.eq(seen.w2, 25)
  T.match(g.reason, "over 25 to 100 seeds each %(158 in all")
  -- a failure in a later batch rejects, naming the batch
  calls = {}
  g = assert(gate.finalist(function(s, opts, p)
    local r = measure(s, opts, p)
    if #calls == 3 then
      r.summary.ok = false
      r.summary.failed = { status = "INCORRECT_NUMERICAL", workload = "w1" }
    end
    return r
  end, "cand", "host", {}))
  T.eq(g.pass, false)
  T.match(g.reason, "seed batch 3")
end)

T.test("model specs: parsing, keys, replay fallback and the ladder", function()
  T.eq(select(2, models.parse("gpt-5")):match("expected") ~= nil, true)
  T.match(select(2, models.parse("nope:x")), "unknown provider")
  T.match(select(2, models.parse("compat:m")), "needs @BASE_URL")
  local list = assert(models.parse_list("openai:gpt-5,compat:q@http://127.0.0.1:1/v1"))
  local res, notes = models.resolve(list, LADDER, function() return nil end)
  T.eq(res[1].provider, "replay")
  T.match(notes[1], "no OPENAI_API_KEY in the environment")
  T.eq(res[2].provider, "compat", "compat needs no key")
  T.eq(#notes, 1)
  local r3 = models.request(res[1], { { role = "user", content = "x" } }, 3)
  T.match(r3.replay.dir, "/a/03$")
  local r9 = models.request(res[1], { { role = "user", content = "x" } }, 9)
  T.match(r9.replay.dir, "/a/04$", "the last step repeats")
  T.eq(select(2, models.resolve(assert(models.parse_list("anthropic:c")), nil, function() end)):match("no replay folder") ~= nil, true)
end)

T.test("the command line: usage errors exit 2, a missing evaluator says so", function()
  local out, code = T.khlua(SRC .. "/policies/plateau_switch.lua", "--rounds", "x")
  T.eq(code, 2)
  T.match(out, "%-%-rounds needs a non%-negative integer")
  out, code = T.khlua(SRC .. "/policies/plateau_switch.lua", "--help")
  T.eq(code, 0)
  T.match(out, "usage: khlua policies/plateau_switch.lua")
  if not kh.eval then
    local dir = T.tmpdir()
    out, code = T.khlua("--store", dir .. "/s", SRC .. "/policies/agent_assisted.lua", "--task", TASK,
      "--replay", LADDER, "--rounds", "1")
    T.eq(code, 1)
    T.match(out, "runs on the replay provider")
    T.match(out, "kh.eval is not in this build")
  end
end)

-- ---- child processes: kill and resume, Ctrl-C ----------------------------------------

local function spawn(store, args)
  local log = os.tmpname()
  local cmd = { T.quote(BIN), "--store", T.quote(store), T.quote(SRC .. "/policies/plateau_switch.lua") }
  for _, a in ipairs(args) do cmd[#cmd + 1] = T.quote(a) end
  local p = assert(io.popen("exec " .. table.concat(cmd, " ") .. " > " .. log .. " 2>&1 & echo $!"))
  local pid = tonumber(p:read("l"))
  p:close()
  return pid, log
end

local function wait_exit(pid)
  local t0 = kh.time.now()
  while kh.time.now() - t0 < 30 do
    if not os.execute("kill -0 " .. pid .. " 2>/dev/null") then return true end
    kh.time.sleep(0.05)
  end
  return false
end

-- Poll the store (read-only, as a second process may) until round k exists.
local function wait_round(store, k)
  local t0 = kh.time.now()
  while kh.time.now() - t0 < 30 do
    local db = kh.store.open(store, { readonly = true })
    if db then
      local rs = db:query { type = "round" }
      local runs = db:query { type = "run" }
      db:close()
      for _, r in ipairs(rs) do if r.index == k then return runs[1].id end end
    end
    kh.time.sleep(0.02)
  end
  return nil
end

local function child_args(extra)
  local a = { "--task", TASK, "--model", SPECS, "--plateau", "2", "--fake-evaluator", FAKE,
    "--seed", tostring(math.random(1, 1000)) }
  for _, x in ipairs(extra) do a[#a + 1] = x end
  return a
end

T.test("a killed run resumes from the store at the next round, every round once", function()
  local store = T.tmpdir() .. "/store"
  local k = math.random(2, 4)
  local pid, log = spawn(store, child_args({ "--rounds", "7", "--pace", "1.5" }))
  local run = wait_round(store, k)
  T.ok(run, "round " .. k .. " appeared")
  os.execute("kill -9 " .. pid)
  T.ok(wait_exit(pid))
  os.remove(log)
  local out, code = T.khlua("--store", store, SRC .. "/policies/plateau_switch.lua", "--resume", run,
    "--fake-evaluator", FAKE, "--json")
  T.eq(code, 0, out)
  T.ok(out:find("resuming " .. run .. " after round " .. k, 1, true), out)
  local db <close> = assert(kh.store.open(store))
  local rounds = db:query { run = run, type = "round" }
  table.sort(rounds, function(a, b) return a.index < b.index end)
  T.eq(#rounds, 7)
  for i, r in ipairs(rounds) do T.eq(r.index, i, "round " .. i .. " stored once") end
  T.eq(db:get(run).status, "done")
  T.eq(db:get(run).resumed, 1)
  -- the ladder continued where the killed process stopped (the step count
  -- comes from the store): round i replayed step want[i], before and after k
  local calls = db:query { run = run, type = "llm_call" }
  local files = {}
  for _, c in ipairs(calls) do files[c.round_index] = c.replay_file end
  local want = { "a/01", "a/02", "a/03", "a/04", "b/01", "b/02", "b/03" }
  for i, w in ipairs(want) do
    T.ok(files[i] and files[i]:find("/" .. w .. "/reply.json", 1, true),
      string.format("round %d replayed %s, want %s", i, tostring(files[i]), w))
  end
  T.eq(#db:query { run = run, type = "promotion" }, 2)
end)

T.test("Ctrl-C ends a run with exit 130 and the run marked interrupted", function()
  local store = T.tmpdir() .. "/store"
  local pid, log = spawn(store, child_args({ "--rounds", "50", "--pace", "0.5" }))
  local run = wait_round(store, 1)
  T.ok(run)
  os.execute("kill -INT " .. pid)
  T.ok(wait_exit(pid))
  -- the exit status of a background child is not ours to wait for: read the log and store
  local text = T.read(log)
  os.remove(log)
  T.match(text, "interrupted")
  local db <close> = assert(kh.store.open(store, { readonly = true }))
  T.eq(db:get(run).status, "interrupted")
end)

T.test("Ctrl-C exit code is 130", function()
  local store = T.tmpdir() .. "/store"
  local cmd = string.format("%s --store %s %s", T.quote(BIN), T.quote(store),
    T.quote(SRC .. "/policies/plateau_switch.lua"))
  for _, a in ipairs(child_args({ "--rounds", "50", "--pace", "0.3" })) do cmd = cmd .. " " .. T.quote(a) end
  -- a shell that interrupts its child after a second and reports the child's status
  local p = assert(io.popen("(" .. cmd .. " >/dev/null 2>&1 & c=$!; sleep 1.5; kill -INT $c; wait $c; echo $?)"))
  local code = tonumber(p:read("l"))
  p:close()
  T.eq(code, 130)
end)
