-- controller.lua: the run loop every policy shares.
--
--   local ctl = require "lib.controller"
--   local summary = ctl.run(policy, cfg)
--
-- A round: the view (task, incumbent and its measurements, bottleneck state,
-- trajectory memory, budget left) -> policy.propose(view, ps) -> model calls
-- -> candidates -> the promotion gate (lib.gate) -> decision -> events
-- (plateau, regression) -> policy.react(view, outcome, ps) -> actions.  One
-- store transaction per round writes the round record (state in, prompt,
-- model calls, candidates, verdicts, decision, actions, and the controller
-- state out) together with the run's state, so a killed run resumes from its
-- last whole round (`resume = RUN`): a round cut short is run again, and a
-- round is never stored twice (the engine derives its id from the run and
-- index).  Every record is the engine's to write (tx:put_run, tx:put_round,
-- tx:put_llm_call, tx:put_promotion, ...: docs/store.md, "Records"): the
-- controller gives it the facts and passes on the ids it gets back.
-- Ctrl-C raises "interrupted" through the loop; a to-be-closed guard marks
-- the run interrupted (or failed, on another error) before it propagates.
--
-- A policy is a table {name, propose(view, ps, ctx) -> plan, react(view,
-- outcome, ps, ctx) -> actions, init(ps, ctx)?}; ps is the policy's own
-- state (plain data, saved with every round).  plan: {messages, text,
-- direction = {name, title, why} | nil, family = index, n = candidates}.
-- Actions: {kind = "switch_family" | "switch_direction" | "add_reference" |
-- "widen" | "narrow", why}.
local kh = require "kh"
local llm = require "lib.llm"
local models = require "lib.models"
local ev = require "lib.evaluate"
local gate = require "lib.gate"
local dirs = require "lib.directions"
local skills = require "lib.skills"
local stats = require "lib.stats"
local progress = require "lib.progress"
local report = require "lib.report"

local M = {}

M.defaults = { rounds = 10, plateau = 3, regression_tol = 0.15, n = 1, n_max = 4,
  gate = {}, budget = {}, max_failed_calls = 3 }

-- ---- small helpers ----------------------------------------------------------

local function copy(t)
  if type(t) ~= "table" then return t end
  local o = {}
  for k, v in pairs(t) do o[k] = copy(v) end
  return o
end
M.copy = copy

local function say(cfg, fmt, ...)
  if cfg.quiet then return end
  local line = string.format(fmt, ...)
  local function put()
    if cfg.out then cfg.out(line) else io.stderr:write(line, "\n") end
  end
  -- the progress line (a terminal only) steps aside for the log line
  if cfg.progress_line then cfg.progress_line:around(put) else put() end
end

-- What the progress line says a measurement is for.
local PHASES = { seed = "measuring the seed", sweep = "gate: sweep over every workload",
  finalist = "gate: finalist seeds", representative = "gate: paired comparison",
  ["representative:candidate"] = "gate: paired comparison",
  ["representative:incumbent"] = "gate: paired comparison", official = "gate: official timing" }

local function must(v, msg, code)
  if v == nil then error({ ctl_error = true, msg = msg, code = code }, 0) end
  return v
end

-- ---- the task ---------------------------------------------------------------

function M.load_task(cfg)
  -- the task as a value for the whole run: every evaluation and profile
  -- takes it (kh.eval reads and parses nothing again; a file changed on
  -- disk meanwhile is named in the verdicts, not used)
  local ts = must(kh.task.load(cfg.task))
  -- a package with a file or line that does not parse is refused, the
  -- first named with file and line
  local first, nerr = nil, 0
  for _, p in ipairs(ts:problems()) do
    if p.severity == "error" and p.field == "json" then
      nerr = nerr + 1
      first = first or p.text
    end
  end
  if first then
    must(nil, first .. (nerr > 1 and string.format(" (and %d more unreadable: khlua task check "
      .. "%s lists them)", nerr - 1, cfg.task) or ""), "EPARSE")
  end
  local names = ts:definitions()
  local name = cfg.definition or names[1]
  local known = false
  for _, n in ipairs(names) do known = known or n == name end
  if cfg.definition and not known then
    must(nil, string.format("no definition '%s' in %s (it holds: %s)", cfg.definition, cfg.task,
      #names > 0 and table.concat(names, ", ") or "none"), "ENOTFOUND")
  end
  if not cfg.definition and #names ~= 1 then
    must(nil, string.format("%s holds %d definitions: choose one with --definition", cfg.task,
      #names), "EINVAL")
  end
  local d = must(ts:definition(name), "no definition " .. tostring(name) .. " in " .. cfg.task)
  local task = { path = cfg.task, set = ts, name = d.name, op_type = d.op_type, axes = d.axes,
    inputs = d.inputs, outputs = d.outputs, constraints = d.constraints, tolerance = d.tolerance,
    description = d.json.description, reference_code = d.json.reference, workloads = {} }
  for _, w in ipairs(ts:workloads(name)) do
    -- a dataset's traces name workloads that were run, not ones to run
    if not w.trace then
      task.workloads[#task.workloads + 1] = { uuid = w.uuid, axes = w.axes,
        sol = ts:speed_of_light(name, w) }
    end
  end
  local sols = {}
  for _, s in ipairs(ts:solutions(name)) do sols[s.name] = s end
  -- candidates are checked against the trusted khlua reference, else the
  -- definition's Python reference (kh.eval runs it with python3 and torch)
  local ref = d.reference and sols[d.reference]
  if d.reference and not ref then
    must(nil, string.format("definition %s names the trusted reference %s (khlua.reference), which "
      .. "is not among the task's solutions", name, d.reference), "ENOTFOUND")
  end
  local pyref = type(d.json.reference) == "string" and d.json.reference:find("%S") ~= nil
  if not ref and not pyref then
    must(nil, string.format("definition %s has neither a trusted reference (khlua.reference) nor a "
      .. "Python reference (\"reference\"): nothing to check candidates against", name), "ENOTFOUND")
  end
  local seed_name = cfg.seed_solution or (d.json.khlua and d.json.khlua.baseline) or d.reference
  if not seed_name then
    must(nil, string.format("definition %s has no khlua solution to start from (no trusted reference, "
      .. "no khlua.baseline): give the first incumbent with --seed-solution NAME|FILE, a kernel with "
      .. "a launch manifest (khlua task new DIR --from DEFINITION writes a reference stub to fill "
      .. "in); candidates are checked against the definition's Python reference", name), "EINVAL")
  end
  local seed = sols[seed_name]
  if not seed and cfg.seed_solution and cfg.seed_solution:match("%.json$") then
    -- a Solution file from anywhere (`khlua best` writes one)
    local fs <close> = must(kh.task.load(cfg.seed_solution))
    local list = fs:solutions()
    must(#list == 1 and list[1] or nil, string.format("%s: expected one Solution, found %d",
      cfg.seed_solution, #list), "EINVAL")
    must(list[1].definition == name and list[1] or nil, string.format(
      "%s is a solution of %s, not of %s", cfg.seed_solution, tostring(list[1].definition), name),
      "EINVAL")
    seed = list[1]
  end
  must(seed, "no solution " .. tostring(seed_name) .. " in the task (nor a Solution file)")
  task.reference_solution = ref and ref.json
  task.seed_solution = seed.json
  task.backend = cfg.backend or (ref or seed).backend
  if ref and seed.backend ~= task.backend then
    -- the seed incumbent must run where candidates run: fall back to the reference
    task.seed_solution = ref.json
  end
  return task
end

-- A Solution from extracted source + manifest.
local function solution(task, name, author, source, manifest)
  local host = task.backend == "host"
  local file = host and "kernel.c" or "kernel.cu"
  local fn = host and (manifest["function"] or "run")
    or (manifest.launches and manifest.launches[1] and manifest.launches[1].kernel or "kernel")
  manifest = copy(manifest)
  manifest.backend = manifest.backend or task.backend
  return { name = name, definition = task.name, author = author,
    spec = { language = host and "cpp" or "cuda", target_hardware = { host and "cpu" or "cuda" },
      entry_point = file .. "::" .. fn, destination_passing_style = true, khlua = manifest },
    sources = { { path = file, content = source } } }
end
M.solution = solution

local function source_of(sol)
  return sol.sources and sol.sources[1] and sol.sources[1].content or ""
end

-- ---- the store ----------------------------------------------------------------

local function ensure_task(db, task)
  return must(db:update(function(tx) return tx:put_task { name = task.name, path = task.path } end))
end

-- The candidate record of a solution: put by the engine (tx:put_candidate,
-- candidate.h), under the one id its content gives it whoever evaluates it;
-- who proposed it, in which run and round, is the round's record, not the
-- candidate's.  Returns its id.
local function put_candidate(db, ctx, sol)
  local id = kh.store.candidate_id(sol)
  if db:get(id) then return id end
  return must(db:update(function(tx) return tx:put_candidate(sol, ctx.task_id) end))
end

-- measure(sol, opts, purpose) for the gate: evaluate, store each trace as an
-- evaluation record, return {summary, ids}.
local function measurer(db, ctx, round_index)
  return function(sol, opts, purpose)
    local o = copy(opts)
    local line = ctx.cfg.progress_line
    if line then
      local phase = PHASES[purpose] or purpose
      line:update { phase = phase }
      -- workloads done within the step (a sweep of 128 workloads is long)
      o.progress = function(done, total)
        if total > 1 then line:update { phase = string.format("%s %d/%d", phase, done, total) } end
      end
    end
    for k, v in pairs(ctx.eval_defaults) do if o[k] == nil then o[k] = v end end
    -- the engine records each verdict (the one writer of evaluation
    -- records), linked to this run, round and purpose
    o.store, o.run, o.round_index, o.purpose = db, ctx.run_id, round_index, purpose
    local traces, msg, code = ev.run(ctx.task.set or ctx.task.path, sol, o)
    if not traces then return nil, msg, code end
    if o.protocol == "paired" then
      -- one result: the ratio, its interval and every measurement's record id
      local n = #traces.candidate + #traces.incumbent
      must(#traces.evidence == n and n > 0 or nil, string.format("the paired comparison of %s "
        .. "recorded %d of its %d verdicts", tostring(sol.name), #traces.evidence, n), "ESTORE")
      return { paired = traces, ids = traces.evidence }
    end
    local ids = {}
    for _, t in ipairs(traces) do
      local kx = t.evaluation and t.evaluation.khlua or {}
      must(type(kx.record) == "string" and kx.record or nil, string.format(
        "the verdict on %s (workload %s) was not recorded: %s", tostring(sol.name),
        tostring(t.workload and t.workload.uuid), tostring(kx.stored)), "ESTORE")
      ids[#ids + 1] = kx.record
    end
    return { summary = ev.summary(traces), ids = ids }
  end
end

-- ---- state ------------------------------------------------------------------------

local function budget_left(cfg, st)
  local b = cfg.budget or {}
  return { rounds = cfg.rounds - st.round,
    wall_s = b.wall_s and (b.wall_s - st.elapsed_s) or nil,
    tokens = b.tokens and (b.tokens - st.tokens) or nil,
    usd = b.usd and (b.usd - st.usd) or nil }
end

local function stop_reason(cfg, st)
  local left = budget_left(cfg, st)
  if left.rounds <= 0 then return "rounds" end
  if left.wall_s and left.wall_s <= 0 then return "wall time budget" end
  if left.tokens and left.tokens <= 0 then return "token budget" end
  if left.usd and left.usd <= 0 then return "money budget" end
  if (st.failed_streak or 0) >= cfg.max_failed_calls then
    return string.format("model calls failing (%d in a row; the last: %s)", st.failed_streak,
      tostring(st.last_call_error))
  end
  return nil
end

local function bottleneck(ctx, st)
  return dirs.state(ctx.task.backend, ctx.task.workloads, st.incumbent.latency, st.incumbent.counters,
    ctx.peaks)
end

-- ---- profiler evidence ----------------------------------------------------------------

-- The incumbent's bottleneck state from the profiler (CUDA tasks): on the
-- workload where it spends longest, recorded in the store and linked from
-- the incumbent.  Where there is no profiler (no GPU, no counters) the state
-- says why and the run goes on with timings alone.
local function profile_incumbent(db, ctx, inc)
  if ctx.task.backend ~= "cuda" or ctx.cfg.profile == false or not ev.profile_available() then
    return
  end
  local wl, worst = nil, -1
  for u, l in pairs(inc.latency or {}) do
    if l > worst or (l == worst and u < wl) then wl, worst = u, l end
  end
  local rep, msg = ev.profile(ctx.task.set or ctx.task.path, inc.solution,
    { workload = wl, store = db, seed = ctx.cfg.gate.seed })
  if not rep then
    inc.counters, inc.profile_error = nil, tostring(msg)
    say(ctx.cfg, "profiler: %s (the state goes on timings alone)", tostring(msg))
    return
  end
  inc.counters = dirs.counters_from_profile(rep.state)
  inc.profile, inc.profile_workload = rep.store_id, wl
  inc.profile_error = not inc.counters and tostring(rep.why or "no counters") or nil
  say(ctx.cfg, "profiler: %s on %s: %s", inc.name, tostring(wl),
    tostring(rep.signature or inc.profile_error))
end
M.profile_incumbent = profile_incumbent

-- What a policy sees.
local function make_view(ctx, st)
  local inc = st.incumbent
  local ws = {}
  for _, w in ipairs(ctx.task.workloads) do
    ws[#ws + 1] = { uuid = w.uuid, axes = w.axes, incumbent_ms = inc.latency[w.uuid],
      reference_ms = inc.reference_latency[w.uuid] }
  end
  local negatives = {}
  for _, p in ipairs(st.memory) do
    if not p.accepted then negatives[#negatives + 1] = p end
  end
  while #negatives > (ctx.cfg.max_negatives or 8) do table.remove(negatives, 1) end
  return {
    round = st.round + 1, task = ctx.task, workloads = ws,
    incumbent = { name = inc.name, candidate = inc.candidate, source = source_of(inc.solution),
      lang = ctx.task.backend == "host" and "c" or "cuda", manifest = inc.solution.spec.khlua,
      score = inc.score, latency = inc.latency },
    state = bottleneck(ctx, st), memory = st.memory, negatives = negatives,
    budget_left = budget_left(ctx.cfg, st), families = ctx.models, family = st.family,
    direction_name = st.direction, excluded = st.excluded, n = st.n,
    add_reference = st.add_reference, since_improvement = st.since_improvement,
  }
end
M.make_view = make_view

-- ---- one round ------------------------------------------------------------------

-- The requests of a plan: plan.n (or st.n) calls to its family, numbered
-- per family in the order they are made (the replay ladder's step).
local function requests(ctx, st, plan, round_index)
  local fam = ctx.models[plan.family or st.family]
  local reqs = {}
  for i = 1, plan.n or st.n do
    st.calls[fam.spec] = (st.calls[fam.spec] or 0) + 1
    reqs[i] = models.request(fam, plan.messages, st.calls[fam.spec],
      { label = ctx.run_id .. "/" .. round_index .. "/" .. i, options = ctx.cfg.llm_options })
  end
  return reqs, fam
end

-- Each call's result ({record, msg, code, record of a failure}, as
-- llm.request returns it) into the store and the run's counters.
local function record_calls(db, ctx, st, fam, results, round_index)
  local out = {}
  for i, r in ipairs(results) do
    local rec, msg = r[1], r[2]
    rec = rec or r[4]
    local usage = rec and rec.usage or {}
    local cost = rec and llm.cost(rec) or nil
    st.tokens = st.tokens + (usage.total or 0)
    if cost then st.usd = st.usd + cost else st.usd_unknown = st.usd_unknown + 1 end
    -- the engine records the call as the client made it (its request and raw
    -- reply as blobs); a request refused before it was sent has no record
    local id = rec and must(db:update(function(tx)
      return tx:put_llm_call(rec, { run = ctx.run_id, round_index = round_index,
        family = fam.spec, cost_usd = cost })
    end))
    out[i] = { record = rec, ok = r[1] ~= nil, msg = msg, call_id = id, family = fam }
    -- fail fast: failed calls in a row stop the run (stop_reason)
    if r[1] ~= nil then
      st.calls_ok, st.failed_streak = (st.calls_ok or 0) + 1, 0
    else
      st.failed_streak = (st.failed_streak or 0) + 1
      st.last_call_error = string.format("%s: %s", fam.spec, tostring(msg)):sub(1, 300)
    end
    st.calls_made = (st.calls_made or 0) + 1
  end
  return out
end

local function call_models(db, ctx, st, plan, round_index)
  local reqs, fam = requests(ctx, st, plan, round_index)
  return record_calls(db, ctx, st, fam, llm.gather(reqs), round_index)
end

-- ---- asynchronous search (--concurrency K) ---------------------------------------
-- With K > 1 the next rounds' model calls are proposed and sent before this
-- round's candidates are judged, up to K calls in flight, so the models
-- work while the GPU does: a round planned ahead sees the state as it was
-- when it was planned (state_in.planned_after_round says which), and its
-- calls are collected when its turn comes.  Rounds stay the unit of record,
-- in order.  Budgets are checked per round, so up to K calls may be made
-- past a budget that runs out meanwhile.
local function in_flight(ctx)
  local n = 0
  for _, a in pairs(ctx.ahead) do n = n + #a.tickets end
  return n
end

local function plan_ahead(ctx, policy, st, from)
  local K = ctx.cfg.concurrency or 1
  if K <= 1 then return end
  local j = from or st.round + 2 -- by default the round after the one being judged
  while ctx.ahead[j] do j = j + 1 end
  while j <= ctx.cfg.rounds and (in_flight(ctx) < K or j == from) do
    local view = make_view(ctx, st)
    view.round = j
    local state_in = { incumbent = st.incumbent.candidate, bottleneck = view.state,
      budget_left = view.budget_left, family = ctx.models[st.family].spec,
      direction = st.direction, planned_after_round = j > st.round + 1 and st.round or nil }
    local plan = must(policy.propose(view, st.policy, ctx))
    local reqs, fam = requests(ctx, st, plan, j)
    local tickets = {}
    for i, r in ipairs(reqs) do
      tickets[i] = must(llm.submit(r))
    end
    ctx.ahead[j] = { plan = plan, fam = fam, tickets = tickets, state_in = state_in, view = view }
    j = j + 1
  end
end

-- The calls planned ahead for round idx, once they are back.
local function collect_ahead(db, ctx, st, a, idx)
  local results = {}
  for i, t in ipairs(a.tickets) do results[i] = { llm.collect(t) } end
  return record_calls(db, ctx, st, a.fam, results, idx)
end

-- The run's wall time so far, the round under way included.
local function wall_now(ctx, st)
  return st.elapsed_s + (ctx.round_t0 and (kh.time.now() - ctx.round_t0) or 0)
end

-- True when the wall-time budget ran out: the gate stops between its steps
-- (a measurement under way is not cut, the next one does not start).
local function out_of_wall(ctx, st)
  local b = ctx.cfg.budget
  return b and b.wall_s and wall_now(ctx, st) >= b.wall_s
end

-- The gate, in order; returns {pass, reason, rejected_for, steps = {...}, evidence, score}.
local function judge(ctx, measure, cand, st)
  local inc = st.incumbent.solution
  local o = ctx.cfg.gate
  local out = { steps = {}, evidence = {} }
  -- each step's wall seconds go with it into the round's record
  -- (scripts/round_times.lua shows where a promotion's time went)
  local t_step = kh.time.now()
  local function add(g)
    local now = kh.time.now()
    g.seconds, t_step = now - t_step, now
    out.steps[#out.steps + 1] = g
    for _, id in ipairs(g.evidence or {}) do out.evidence[#out.evidence + 1] = id end
    out.reason, out.rejected_for = g.reason, g.rejected_for
  end
  local function budget_stop()
    out.pass = false
    out.reason = (out.reason and (out.reason .. "; ") or "")
      .. "the gate stopped: the wall time budget ran out"
    out.rejected_for = "budget"
    return out
  end
  if out_of_wall(ctx, st) then return budget_stop() end
  local r = must(gate.representative(measure, cand, inc, ctx.task.workloads, o))
  add(r)
  out.representative = r
  if not r.pass then return out end
  if out_of_wall(ctx, st) then return budget_stop() end
  local s = must(gate.sweep(measure, cand, ctx.task.workloads, o))
  add(s)
  out.sweep = s
  if not s.pass then return out end
  if out_of_wall(ctx, st) then return budget_stop() end
  local f = must(gate.finalist(measure, cand, ctx.task.backend, o))
  add(f)
  if not f.pass then return out end
  local off
  if gate.option(o, "official") then
    if out_of_wall(ctx, st) then return budget_stop() end
    off = must(gate.official(measure, cand, ctx.task.workloads, o))
    add(off)
    out.official = off
    if not off.pass then return out end
  end
  out.pass, out.score = true, s.score
  out.reason = string.format("%s; %s; %s%s", r.reason, s.reason, f.reason, off and ("; " .. off.reason) or "")
  return out
end

-- Incumbent re-measured slower than its record (same-round paired figures):
-- the geometric mean over the sampled workloads of median / record, so one
-- noisy workload does not raise it.
local function regression(ctx, st, rep)
  if not rep or not rep.incumbent_ms then return nil end
  local rs, worst, wu = {}, 0, nil
  for u, xs in pairs(rep.incumbent_ms) do
    local rec = st.incumbent.latency[u]
    if rec and #xs > 0 then
      local r = stats.median(xs) / rec
      rs[#rs + 1] = r
      if r > worst then worst, wu = r, u end
    end
  end
  if #rs == 0 then return nil end
  local g = stats.geomean(rs)
  if g > 1 + ctx.cfg.regression_tol then
    return { kind = "regression", ratio = g, workload = wu,
      why = string.format("incumbent re-measured %.0f%% slower than its record (geometric mean "
        .. "over %d sampled workloads; worst %s)", (g - 1) * 100, #rs, wu) }
  end
  return nil
end

local function apply_actions(ctx, st, actions)
  for _, a in ipairs(actions or {}) do
    if a.kind == "switch_family" then
      st.family = a.to or (st.family % #ctx.models + 1)
    elseif a.kind == "switch_direction" then
      if st.direction then st.excluded[st.direction] = true end
      st.direction = nil
    elseif a.kind == "add_reference" then
      st.add_reference = true
    elseif a.kind == "widen" then
      st.n = math.min(st.n + 1, ctx.cfg.n_max)
    elseif a.kind == "narrow" then
      st.n = math.max(st.n - 1, 1)
    else
      must(nil, "policy returned an unknown action " .. tostring(a.kind), "EINVAL")
    end
  end
end

local function round(db, ctx, policy, st)
  local idx = st.round + 1
  local t0 = kh.time.now()
  ctx.round_t0 = t0
  local view = make_view(ctx, st)
  -- --concurrency: this round's calls and the next ones' go out together
  plan_ahead(ctx, policy, st, idx)
  local ahead = ctx.ahead[idx]
  ctx.ahead[idx] = nil
  local state_in, plan, calls
  if ahead then
    -- planned while an earlier round was judged (--concurrency)
    state_in, plan = ahead.state_in, ahead.plan
    if plan.direction then st.direction = plan.direction.name end
    calls = collect_ahead(db, ctx, st, ahead, idx)
  else
    state_in = { incumbent = st.incumbent.candidate, bottleneck = view.state,
      budget_left = view.budget_left, family = ctx.models[st.family].spec, direction = st.direction }
    plan = must(policy.propose(view, st.policy, ctx))
    if plan.direction then st.direction = plan.direction.name end
    calls = call_models(db, ctx, st, plan, idx)
  end
  -- the next rounds' calls go out now: the models work while this round is judged
  plan_ahead(ctx, policy, st)
  local measure = measurer(db, ctx, idx)
  local probes, cands, best = {}, {}, nil
  for i, c in ipairs(calls) do
    local probe = { round = idx, direction = plan.direction and plan.direction.name,
      model = c.family.spec, llm_call = c.call_id }
    local x = c.ok and llm.candidate(c.record) or nil
    if c.ok then
      -- the reply's first line: what the model says it changed (its plan)
      probe.plan = ((c.record.text or ""):match("^%s*([^\n]*)") or ""):sub(1, 200)
    end
    if not c.ok then
      probe.reason = "model call failed: " .. tostring(c.msg)
    elseif x.status ~= "ok" then
      probe.reason = "no candidate (" .. x.status .. "): " .. tostring(x.message)
    else
      local sol = solution(ctx.task, string.format("%s_r%d_%d", ctx.run_id, idx, i),
        c.family.model, x.source, x.manifest)
      local cid = put_candidate(db, ctx, sol)
      ctx.cand_of[sol] = cid
      probe.candidate = cid
      cands[#cands + 1] = cid
      st.candidates = st.candidates + 1
      local v = judge(ctx, measure, sol, st)
      probe.reason, probe.rejected_for = v.reason, v.rejected_for
      probe.figures = { ratio = v.representative and v.representative.ratio,
        lo = v.representative and v.representative.lo, hi = v.representative and v.representative.hi,
        score = v.score }
      probe.gate = v
      if v.pass and (not best or v.score > best.verdict.score) then
        best = { sol = sol, verdict = v, probe = probe }
      end
      probe._regression = regression(ctx, st, v.representative)
    end
    probes[#probes + 1] = probe
  end
  -- decision
  local decision = { promoted = nil }
  local events = {}
  for _, p in ipairs(probes) do
    if p._regression and not events.regression then
      events.regression = p._regression
    end
    p._regression = nil
  end
  if best then
    local v = best.verdict
    local old = st.incumbent.candidate
    local lat, ref = {}, {}
    local rep = v.representative
    -- the incumbent's figures: the sweep's (every workload), from its evidence
    for _, id in ipairs(v.sweep.evidence) do
      local e = db:get(id)
      local perf = e and e.evaluation and e.evaluation.performance
      if perf then
        lat[e.workload.uuid] = perf.latency_ms
        ref[e.workload.uuid] = perf.reference_latency_ms
      end
    end
    -- the promotion names its evidence by id: the engine checks that each is
    -- this run's measurement of the candidate or of the incumbent
    local pid = must(db:update(function(tx) return tx:put_promotion {
      candidate = best.probe.candidate, run = ctx.run_id,
      incumbent = old, round_index = idx, score = v.score, evidence = v.evidence,
      gate = { representative = { ratio = rep.ratio, lo = rep.lo, hi = rep.hi, margin = rep.margin,
        reps = rep.reps, workloads = rep.workloads },
        sweep = { score = v.score, correct = v.sweep.correct, mean_speedup = v.sweep.mean_speedup },
        finalist = { trials = v.steps[3].trials, sanitizer = v.steps[3].sanitizer,
          seeds_min = v.steps[3].seeds_min, seeds_max = v.steps[3].seeds_max,
          seeds_total = v.steps[3].seeds_total, reason = v.steps[3].reason },
        official = v.official and { mean_speedup = v.official.mean_speedup,
          evaluations = v.official.evidence } or nil },
      reason = v.reason } end))
    best.probe.accepted = true
    best.probe.promotion = pid
    decision.promoted, decision.promotion, decision.reason = best.probe.candidate, pid, v.reason
    st.incumbent = { name = best.sol.name, candidate = best.probe.candidate, solution = best.sol,
      latency = lat, reference_latency = ref, score = v.score }
    local tp = kh.time.now()
    profile_incumbent(db, ctx, st.incumbent)
    decision.profile_s = kh.time.now() - tp
    st.accepted = st.accepted + 1
    st.since_improvement = 0
  else
    st.since_improvement = st.since_improvement + 1
    decision.reason = #probes > 0 and probes[#probes].reason or "no probe"
    if events.regression then
      -- keep the record honest: the incumbent's figures are what it does now
      for u, xs in pairs(probes[1].gate and probes[1].gate.representative
        and probes[1].gate.representative.incumbent_ms or {}) do
        st.incumbent.latency[u] = stats.median(xs)
      end
    end
  end
  if st.since_improvement >= ctx.cfg.plateau then
    events.plateau = { rounds = st.since_improvement,
      why = string.format("%d rounds without an accepted improvement beyond noise",
        st.since_improvement) }
  end
  for _, p in ipairs(probes) do
    local mem = copy(p)
    mem.gate = nil
    st.memory[#st.memory + 1] = mem
  end
  local outcome = { round = idx, probes = probes, decision = decision, events = events }
  local actions = policy.react and policy.react(view, outcome, st.policy, ctx) or {}
  apply_actions(ctx, st, actions)
  if events.plateau and #actions > 0 then st.since_improvement = 0 end
  st.round = idx
  st.elapsed_s = st.elapsed_s + (kh.time.now() - t0)
  ctx.round_t0 = nil
  -- one transaction: the round and the run
  must(db:update(function(tx)
    local calls_ids = {}
    for _, c in ipairs(calls) do calls_ids[#calls_ids + 1] = c.call_id end
    local ok, msg, code = tx:put_round { run = ctx.run_id, index = idx, state_in = state_in,
      direction = plan.direction, model = (ahead and ahead.fam or ctx.models[plan.family or view.family]).spec,
      prompt = plan.text, llm_calls = calls_ids, candidates = cands, verdicts = probes,
      decision = decision, events = events, actions = actions, state_out = copy(st) }
    if ok then
      -- still running: the engine renews the liveness mark (the heartbeat)
      ok, msg, code = tx:update_run(ctx.run_id, { rounds_done = idx,
        incumbent_candidate = st.incumbent.candidate, metrics = M.metrics(st) })
    end
    return must(ok, msg, code)
  end))
  return outcome, actions
end

function M.metrics(st)
  local h = st.elapsed_s / 3600
  return { rounds = st.round, candidates = st.candidates, accepted = st.accepted,
    tokens = st.tokens, usd = st.usd, usd_unknown_calls = st.usd_unknown,
    elapsed_s = st.elapsed_s, candidates_per_hour = h > 0 and st.candidates / h or 0,
    usd_per_accepted = st.accepted > 0 and st.usd / st.accepted or nil,
    incumbent_score = st.incumbent.score }
end

-- ---- the run ------------------------------------------------------------------------

local function initial_state(db, ctx, policy)
  local t_init = kh.time.now()
  local task = ctx.task
  local sol = copy(task.seed_solution)
  local cid = put_candidate(db, ctx, sol)
  ctx.cand_of[sol] = cid
  local measure = measurer(db, ctx, 0)
  -- the incumbent's record: the median of three screen measurements
  local lat, ref, rs, all = {}, {}, {}, {}
  for r = 1, 3 do
    local m = must(measure(sol, { workloads = "all", protocol = "screen", trials = 1,
      seed = ctx.cfg.gate.seed * 1000 + r }, "seed"))
    if not m.summary.ok then
      must(nil, "the seed incumbent " .. sol.name .. " does not pass: " ..
        tostring(m.summary.failed and m.summary.failed.status), "ESTATE")
    end
    for u, v in pairs(m.summary.by_uuid) do
      all[u] = all[u] or { l = {}, b = {} }
      table.insert(all[u].l, v.latency_ms)
      if v.reference_latency_ms then table.insert(all[u].b, v.reference_latency_ms) end
    end
  end
  for u, x in pairs(all) do
    lat[u] = stats.median(x.l)
    ref[u] = #x.b > 0 and stats.median(x.b) or nil
    if ref[u] then rs[#rs + 1] = ref[u] / lat[u] end
  end
  local score = 0
  for _, r in ipairs(rs) do score = score + r / #rs end
  local st = { round = 0, incumbent = { name = sol.name, candidate = cid, solution = sol,
      latency = lat, reference_latency = ref, score = score },
    memory = {}, family = 1, direction = nil, excluded = {}, n = ctx.cfg.n, add_reference = false,
    since_improvement = 0, calls = {}, tokens = 0, usd = 0, usd_unknown = 0, candidates = 0,
    accepted = 0, elapsed_s = 0, policy = {} }
  profile_incumbent(db, ctx, st.incumbent)
  if policy.init then policy.init(st.policy, ctx) end
  -- the seed's measurement counts toward the run's wall time (its budget);
  -- seed_s keeps what it cost (the seed's measurement and profile)
  st.elapsed_s = kh.time.now() - t_init
  st.seed_s = st.elapsed_s
  return st
end

-- Rebuild the state from a run's last whole round.
local function resume_state(db, ctx, run_id)
  local rounds = must(db:query { run = run_id, type = "round" })
  local last = nil
  for _, r in ipairs(rounds) do
    local rec = db:get(r.id or r)
    if rec and (not last or rec.index > last.index) then last = rec end
  end
  return last and last.state_out or nil
end

-- Rewrite the run's live report (cfg.report; lib.report.write_live).  A
-- report that cannot be written is said once; the run goes on.
local function write_report(db, ctx)
  if not ctx.report then return end
  local ok, why = report.write_live(db, ctx.run_id, ctx.report)
  if not ok and not ctx.report_warned then
    ctx.report_warned = true
    say(ctx.cfg, "the report %s could not be written: %s", ctx.report, tostring(why))
  end
end

-- Where the run's report goes: cfg.report (false: nowhere), by default
-- reports/RUN.html beside the store's folder.  Its folder is made now, so a
-- path that cannot hold it stops the run before it starts.
local function report_path(db, cfg, run_id)
  if cfg.report == false then return nil end
  local path = cfg.report
  if not path then
    local base = db:path():gsub("/+$", ""):match("^(.*)/[^/]*$") or "."
    path = base .. "/reports/" .. run_id .. ".html"
  end
  local dir = path:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then must(kh.mkdir(dir)) end
  return path
end

-- cfg: task, definition, models (parsed + resolved), rounds, plateau, budget {wall_s,
-- tokens, usd}, gate {margin, reps, sample, finalist_trials, seed}, n, store (path) or db,
-- resume (run id), skills (root), peaks, out (line printer), quiet.
function M.run(policy, cfg)
  for k, v in pairs(M.defaults) do if cfg[k] == nil then cfg[k] = copy(v) end end
  local db = cfg.db
  local own = nil
  if not db then
    local err, code
    db, err, code = kh.store.open(cfg.store)
    if not db then return nil, "store: " .. tostring(err), code end
    own = db
  end
  local ok, res, msg, code = pcall(function()
    local ctx = { cfg = cfg, policy = policy.name, cand_of = setmetatable({}, { __mode = "k" }),
      ahead = {} }
    local st
    if cfg.resume then
      local run = must(db:get(cfg.resume), "no run " .. cfg.resume .. " in the store", "ENOTFOUND")
      must(run.type == "run" and run or nil, cfg.resume .. " is not a run", "EINVAL")
      if run.policy ~= policy.name then
        must(nil, string.format("run %s was made by policy %s, not %s", cfg.resume,
          tostring(run.policy), policy.name), "EINVAL")
      end
      -- the run's own configuration, except what the caller extends
      for k, v in pairs(run.config or {}) do
        if cfg.explicit == nil or not cfg.explicit[k] then cfg[k] = v end
      end
      for k, v in pairs(M.defaults) do if cfg[k] == nil then cfg[k] = copy(v) end end
      ctx.run_id = cfg.resume
    end
    -- the gate's seed decides every evaluation's inputs and which timed calls
    -- are verified: drawn from the OS when the user gave none (40 bits: the
    -- gate derives seeds by multiplying it), saved with the run's
    -- configuration so a resumed run uses the same, and --seed N reproduces it
    cfg.gate = cfg.gate or {}
    if cfg.gate.seed == nil then cfg.gate.seed = must(kh.secure_seed(40)) end
    ctx.task = M.load_task(cfg)
    if ctx.task.backend == "host" and cfg.placement and cfg.placement.gpus then
      must(nil, string.format("--gpus %s: %s runs on the host backend (use --host-workers N)",
        tostring(cfg.placement.gpus), ctx.task.name), "EINVAL")
    end
    ctx.task_id = ensure_task(db, ctx.task)
    ctx.models = must(cfg.models, "no model families", "EINVAL")
    -- each family answers before round 1, or the run does not start
    if cfg.probe ~= false then
      for _, m in ipairs(ctx.models) do
        local okp, why = models.probe(m)
        must(okp, "model probe failed: " .. tostring(why), "ENET")
        say(cfg, "model %s answers (%.1f s)", m.spec, why)
      end
    end
    local sk = cfg.skills and must(skills.load(cfg.skills)) or {}
    ctx.skills = skills.select(sk, { backend = ctx.task.backend, op_type = ctx.task.op_type })
    ctx.peaks = cfg.peaks
    -- Options every evaluation gets unless the gate sets them.  On the host
    -- backend timed calls run warm: flushing the CPU caches before each
    -- call costs seconds per evaluation on a small machine and the gate
    -- compares candidate and incumbent under the same conditions anyway.
    ctx.eval_defaults = cfg.eval_opts or (ctx.task.backend == "host" and { cold = false } or {})
    if cfg.placement then -- --gpus, --launch, ...: every evaluation of the run
      local d = {}
      for k, v in pairs(ctx.eval_defaults) do d[k] = v end
      for k, v in pairs(cfg.placement) do d[k] = v end
      ctx.eval_defaults = d
    end
    local saved = {}
    for _, k in ipairs({ "task", "definition", "rounds", "plateau", "budget", "gate", "n",
      "model_specs", "regression_tol", "skills", "backend", "replay", "seed_solution", "report" }) do
      saved[k] = cfg[k]
    end
    -- the run's id comes before its record: the guard below needs it
    ctx.run_id = ctx.run_id or db:new_id("run")
    ctx.report = report_path(db, cfg, ctx.run_id)
    -- from here on a stop of any kind (an error, Ctrl-C, SIGTERM, SIGHUP)
    -- marks the run, which keeps its state (its id is chosen before its
    -- record is written: no moment is left where a run exists unguarded); a
    -- kill -9 leaves the liveness mark, by which `khlua store ls` tells that
    -- the run is dead
    local guard <close> = setmetatable({}, { __close = function(_, err)
      if err == nil then return end
      local m = type(err) == "table" and err.msg or tostring(err)
      local status = m:find("interrupted", 1, true) and "interrupted" or "failed"
      -- the engine drops the liveness mark; a run not written yet, or
      -- already stopped, is left as it is
      db:update(function(tx)
        if tx:get(ctx.run_id) then
          tx:update_run(ctx.run_id, { status = status,
            error = status == "failed" and m or nil })
        end
      end)
      -- the report says how the run ended (it must not raise here)
      pcall(write_report, db, ctx)
    end })
    if cfg.resume then
      st = resume_state(db, ctx, ctx.run_id)
      if st then
        say(cfg, "resuming %s after round %d", ctx.run_id, st.round)
      end
      must(db:update(function(tx)
        return tx:update_run(ctx.run_id, { resume = true, config = saved })
      end))
    else
      -- the versions make a comparison of two runs say what code produced each
      local specs = {}
      for i, m in ipairs(ctx.models) do specs[i] = m.spec end
      must(db:update(function(tx)
        return tx:put_run { id = ctx.run_id, policy = policy.name, task = ctx.task_id,
          config = saved, seed = cfg.gate.seed, models = specs, versions = copy(kh.version) }
      end))
      say(cfg, "run %s: policy %s, task %s, %d workloads", ctx.run_id, policy.name, ctx.task.name,
        #ctx.task.workloads)
    end
    for _, n in ipairs(cfg.notes or {}) do say(cfg, "%s", n) end
    if cfg.progress then
      cfg.progress_line = progress.new { total = cfg.rounds, done = st and st.round or 0,
        wall_budget_s = cfg.budget and cfg.budget.wall_s, elapsed_s = st and st.elapsed_s or 0 }
      cfg.progress_line:update { candidates = st and st.candidates or 0,
        best = st and st.incumbent.score }
    end
    st = st or initial_state(db, ctx, policy)
    ctx.cand_of[st.incumbent.solution] = st.incumbent.candidate
    write_report(db, ctx)
    local final = "done"
    local why
    while true do
      why = stop_reason(cfg, st)
      if why then break end
      if cfg.progress_line then
        cfg.progress_line:update { done = st.round, candidates = st.candidates,
          best = st.incumbent.score, phase = "asking the model" }
      end
      local outcome, actions = round(db, ctx, policy, st)
      local d = outcome.decision
      local p = outcome.probes[1] or {}
      say(cfg, "round %d  %s  %s  %s: %s", outcome.round, p.model or "-", p.direction or "-",
        d.promoted and "PROMOTED" or "rejected", d.reason or "")
      for _, k in ipairs({ "regression", "plateau" }) do
        if outcome.events[k] then say(cfg, "  %s: %s", k, outcome.events[k].why) end
      end
      for _, a in ipairs(actions) do say(cfg, "  action %s: %s", a.kind, a.why or "") end
      write_report(db, ctx)
      if cfg.progress_line then
        cfg.progress_line:update { done = st.round, candidates = st.candidates,
          best = st.incumbent.score }
      end
      if cfg.pace and cfg.pace > 0 then kh.time.sleep(cfg.pace) end
    end
    if cfg.progress_line then cfg.progress_line:finish() end
    -- calls planned ahead for rounds that will not run
    for _, a in pairs(ctx.ahead) do
      for _, t in ipairs(a.tickets) do llm.cancel(t) end
    end
    ctx.ahead = {}
    if why:find("^model calls failing") then final = "failed" end
    local metrics = M.metrics(st)
    must(db:update(function(tx)
      return tx:update_run(ctx.run_id, { status = final, stop_reason = why, metrics = metrics,
        error = final == "failed" and why or nil, incumbent_candidate = st.incumbent.candidate })
    end))
    write_report(db, ctx)
    return { run = ctx.run_id, status = final, stop_reason = why, metrics = metrics,
      calls_made = st.calls_made or 0, calls_ok = st.calls_ok or 0, store = db:path(),
      incumbent = st.incumbent.candidate, incumbent_name = st.incumbent.name,
      report = not ctx.report_warned and ctx.report or nil }
  end)
  if own then own:close() end
  if cfg.progress_line then cfg.progress_line:finish(); cfg.progress_line = nil end
  if not ok then
    if type(res) == "table" and res.ctl_error then return nil, res.msg, res.code end
    error(res, 0)
  end
  return res, msg, code
end

return M
