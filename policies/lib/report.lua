-- report.lua: compare recorded runs (issue #11).  Reads run, round,
-- promotion, evaluation and llm_call records (and the raw timing samples
-- blobs) from the store and builds, per run, the figures the paper's table
-- needs (best speedup, S_d, correctness, rounds and wall time to the best,
-- candidates by outcome, tokens and money), the per-workload speedups and
-- latency distributions, the run's settings, and every promotion with its
-- gate evidence.  It renders them as markdown, CSV, JSON, hand-written SVG
-- charts (best-so-far speedup per round, per-workload speedup bars, latency
-- distributions) and one self-contained HTML file.  Pure Lua over kh.store.
local kh = require "kh"
local diff = require "lib.diff"

local M = {}

local function median(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  if n == 0 then return nil end
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

-- The q-quantile (0..1) of a sorted list, interpolating between ranks.
local function quantile(sorted, q)
  local n = #sorted
  if n == 0 then return nil end
  local h = (n - 1) * q + 1
  local lo = math.floor(h)
  if lo >= n then return sorted[n] end
  return sorted[lo] + (h - lo) * (sorted[lo + 1] - sorted[lo])
end
M.quantile = quantile

-- Raw samples (float64 LE ns per timed call, lib.controller) as ms.
local function samples_ms(db, hash, into)
  local b = hash and db:get_blob(hash)
  if not b then return into end
  for i = 1, #b // 8 do into[#into + 1] = string.unpack("<d", b, (i - 1) * 8 + 1) / 1e6 end
  return into
end

-- The distribution a box plot shows: n, min, p5, q1, median, q3, p95, max, mean (ms).
local function distribution(xs)
  if #xs == 0 then return nil end
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local sum = 0
  for _, x in ipairs(t) do sum = sum + x end
  return { n = #t, min = t[1], max = t[#t], p5 = quantile(t, 0.05), q1 = quantile(t, 0.25),
    median = quantile(t, 0.5), q3 = quantile(t, 0.75), p95 = quantile(t, 0.95), mean = sum / #t }
end
M.distribution = distribution

-- A workload's label: its axes, "batch_size=33" (several: sorted by name).
local function axes_label(axes)
  local ks = {}
  for k in pairs(axes or {}) do ks[#ks + 1] = k end
  table.sort(ks)
  local out = {}
  for _, k in ipairs(ks) do out[#out + 1] = k .. "=" .. tostring(axes[k]) end
  return #out > 0 and table.concat(out, ", ") or "?"
end

-- Workloads in axis order (numbers as numbers), then by uuid.
local function workload_order(a, b)
  local ks = {}
  for k in pairs(a.axes or {}) do ks[#ks + 1] = k end
  table.sort(ks)
  for _, k in ipairs(ks) do
    local x, y = (a.axes or {})[k], (b.axes or {})[k]
    if x ~= y and type(x) == type(y) and (type(x) == "number" or type(x) == "string") then
      return x < y
    end
  end
  return a.uuid < b.uuid
end

-- The seed incumbent's score, as the controller computes it: per workload the
-- median latency and median reference latency of the seed measurements, then
-- the mean of reference / latency.
local function seed_score(evals)
  local by = {}
  for _, e in ipairs(evals) do
    local perf = e.purpose == "seed" and e.evaluation and e.evaluation.performance
    if perf and perf.latency_ms and e.workload and e.workload.uuid then
      local u = e.workload.uuid
      by[u] = by[u] or { l = {}, b = {} }
      table.insert(by[u].l, perf.latency_ms)
      if perf.reference_latency_ms then table.insert(by[u].b, perf.reference_latency_ms) end
    end
  end
  -- in workload order, so the sum (and the printed figure) is the same every time
  local us = {}
  for u in pairs(by) do us[#us + 1] = u end
  table.sort(us)
  local rs = {}
  for _, u in ipairs(us) do
    local x = by[u]
    if #x.b > 0 then rs[#rs + 1] = median(x.b) / median(x.l) end
  end
  if #rs == 0 then return nil end
  local s = 0
  for _, r in ipairs(rs) do s = s + r end
  return s / #rs
end

-- A promotion and its gate evidence, read back from the evaluation records
-- the promotion names: the paired comparison (per sampled workload, the
-- median latency of candidate and incumbent over the repetitions), the sweep
-- (per workload: latency, reference latency, speedup, the record), and the
-- finalist's correctness trials.
local function promotion_evidence(db, pr)
  local g = pr.gate or {}
  local rep, sw, fin = g.representative or {}, g.sweep or {}, g.finalist or {}
  local p = { id = pr.id, round = pr.round_index, candidate = pr.candidate,
    incumbent = pr.incumbent, score = pr.score, mean_speedup = sw.mean_speedup,
    correct = sw.correct, ratio = rep.ratio, lo = rep.lo, hi = rep.hi, margin = rep.margin,
    reps = rep.reps, sampled = rep.workloads, finalist_trials = fin.trials,
    sanitizer = fin.sanitizer, reason = pr.reason, evidence = pr.evidence or {},
    paired = {}, sweep = {}, finalist = { evaluations = 0, passed = 0 } }
  local paired = {}
  for _, id in ipairs(p.evidence) do
    local e = db:get(id)
    if e and e.type == "evaluation" then
      local perf = e.evaluation and e.evaluation.performance or {}
      local w = e.workload or {}
      local who = tostring(e.purpose):match("^representative:(%a+)$")
      if who and w.uuid and perf.latency_ms then
        local x = paired[w.uuid] or { uuid = w.uuid, axes = w.axes, candidate = {}, incumbent = {} }
        paired[w.uuid] = x
        if x[who] then table.insert(x[who], perf.latency_ms) end
      elseif e.purpose == "sweep" and w.uuid then
        p.sweep[#p.sweep + 1] = { uuid = w.uuid, axes = w.axes, status = e.status,
          latency_ms = perf.latency_ms, reference_ms = perf.reference_latency_ms,
          speedup = perf.latency_ms and perf.reference_latency_ms
            and perf.reference_latency_ms / perf.latency_ms or nil,
          evaluation = e.id, samples_blob = e.samples_blob }
      elseif e.purpose == "finalist" then
        p.finalist.evaluations = p.finalist.evaluations + 1
        if e.status == "PASSED" then p.finalist.passed = p.finalist.passed + 1 end
      end
    end
  end
  for _, x in pairs(paired) do
    local c, i = median(x.candidate), median(x.incumbent)
    p.paired[#p.paired + 1] = { uuid = x.uuid, axes = x.axes, label = axes_label(x.axes),
      candidate_ms = c, incumbent_ms = i, ratio = c and i and i / c or nil, n = #x.candidate }
  end
  table.sort(p.paired, workload_order)
  table.sort(p.sweep, workload_order)
  for _, x in ipairs(p.sweep) do x.label = axes_label(x.axes) end
  return p
end

-- Per workload: the seed's and the best's speedup and latency, and the
-- distribution of their raw timing samples (the seed's three measurements;
-- the best's sweep).  A run without a promotion: the best is the seed.
local function per_workload(db, s, evals)
  local by = {}
  local function get(w)
    if not (w and w.uuid) then return nil end
    by[w.uuid] = by[w.uuid] or { uuid = w.uuid, axes = w.axes, lat = {}, ref = {}, refs = {},
      seed_samples = {}, best_samples = {} }
    return by[w.uuid]
  end
  for _, e in ipairs(evals) do
    local perf = e.purpose == "seed" and e.evaluation and e.evaluation.performance
    local x = perf and perf.latency_ms and get(e.workload)
    if x then
      table.insert(x.lat, perf.latency_ms)
      if perf.reference_latency_ms then
        table.insert(x.ref, perf.reference_latency_ms)
        table.insert(x.refs, perf.reference_latency_ms)
      end
      samples_ms(db, e.samples_blob, x.seed_samples)
    end
  end
  local last = s.promotions[#s.promotions]
  for _, sw in ipairs(last and last.sweep or {}) do
    local x = get(sw)
    x.best = sw
    if sw.reference_ms then table.insert(x.refs, sw.reference_ms) end
    samples_ms(db, sw.samples_blob, x.best_samples)
  end
  local out, labels = {}, {}
  for _, x in pairs(by) do
    local sl, sr = median(x.lat), median(x.ref)
    local w = { uuid = x.uuid, axes = x.axes, label = axes_label(x.axes),
      seed_latency_ms = sl, seed_reference_ms = sr,
      seed_speedup = sl and sr and sr / sl or nil, reference_ms = median(x.refs),
      seed_dist = distribution(x.seed_samples) }
    if last then
      w.latency_ms = x.best and x.best.latency_ms
      w.speedup = x.best and x.best.speedup
      w.best_reference_ms = x.best and x.best.reference_ms
      w.best_dist = distribution(x.best_samples)
    else
      w.best_is_seed = true
      w.latency_ms, w.speedup, w.best_reference_ms = sl, w.seed_speedup, sr
      w.best_dist = w.seed_dist
    end
    labels[w.label] = (labels[w.label] or 0) + 1
    out[#out + 1] = w
  end
  table.sort(out, workload_order)
  -- two workloads with the same axes (different inputs): the uuid tells them apart
  for _, w in ipairs(out) do
    if labels[w.label] > 1 then w.label = w.label .. " (" .. w.uuid:sub(1, 8) .. ")" end
  end
  return out
end

-- How the run was set up, as its records say.
local function settings(db, run)
  local cfg = run.config or {}
  local called = {}
  for _, c in ipairs(db:query { run = run.id, type = "llm_call" } or {}) do
    local prov, model = tostring(c.provider or "?"), tostring(c.model or "?")
    -- the replay provider's model names already carry the provider
    local k = model:sub(1, #prov + 1) == prov .. ":" and model or prov .. ":" .. model
    called[k] = (called[k] or 0) + 1
  end
  return { policy = run.policy, task = run.task, task_path = cfg.task, definition = cfg.definition,
    status = run.status, stop_reason = run.stop_reason, error = run.error,
    created_at = run.created_at, rounds = cfg.rounds, plateau = cfg.plateau,
    budget = cfg.budget, candidates_per_round = cfg.n, gate = cfg.gate, gate_seed = run.seed,
    seed_solution = cfg.seed_solution, model_specs = cfg.model_specs, models_called = called,
    resumed = run.resumed, versions = run.versions }
end

-- The source text of a candidate record, or nil.
local function source_of(db, cid)
  local c = cid and db:get(cid)
  return c and c.source_blob and db:get_blob(c.source_blob) or nil
end

-- Every model call of every round: its candidate (if the reply held one),
-- the verdict and the check that decided it, rejected candidates included.
-- sources: candidate id -> source text, filled for each candidate and the
-- incumbent it was measured against.
local function round_rows(db, rounds, evaluated, built, sources)
  local rows = {}
  for _, r in ipairs(rounds) do
    local inc = r.state_in and r.state_in.incumbent
    for i, p in ipairs(r.verdicts or {}) do
      local c = p.candidate
      local steps = p.gate and p.gate.steps or {}
      local last = steps[#steps]
      local verdict, check
      if p.accepted then
        verdict, check = "promoted", "every gate step passed"
      elseif not c then
        local failed = tostring(p.reason):find("^model call failed")
        verdict, check = failed and "model call failed" or "no candidate", failed and "model call" or "reply"
      else
        verdict = "rejected"
        if evaluated[c] and not built[c] then check = "compile"
        elseif p.rejected_for == "budget" then check = "budget"
        elseif last then check = last.step
        else check = "-" end
      end
      local f = p.figures or {}
      rows[#rows + 1] = { round = r.index, index = i, model = p.model, direction = p.direction,
        plan = p.plan, candidate = c, incumbent = inc, verdict = verdict, check = check,
        rejected_for = c and not p.accepted and (check == "compile" and "compile_error"
          or p.rejected_for) or nil,
        reason = p.reason, ratio = f.ratio, lo = f.lo, hi = f.hi, score = f.score,
        promotion = p.promotion, llm_call = p.llm_call }
      for _, id in ipairs({ c or false, inc or false }) do
        if id and sources[id] == nil then sources[id] = source_of(db, id) or false end
      end
    end
  end
  return rows
end

-- One run's figures.  Returns a table, or nil, msg.
function M.summarize(db, run_id)
  local run = db:get(run_id)
  if not run then return nil, "no run " .. tostring(run_id) .. " in the store" end
  if run.type ~= "run" then return nil, run_id .. " is not a run (type " .. tostring(run.type) .. ")" end
  local rounds = db:query { run = run_id, type = "round" } or {}
  table.sort(rounds, function(a, b) return a.index < b.index end)
  local promos = db:query { run = run_id, type = "promotion" } or {}
  table.sort(promos, function(a, b) return a.round_index < b.round_index end)
  local evals = db:query { run = run_id, type = "evaluation" } or {}
  local m = run.metrics or {}
  local s = { run = run_id, policy = run.policy, task = run.task, status = run.status,
    rounds = #rounds, tokens = m.tokens or 0, usd = m.usd or 0, wall_s = m.elapsed_s or 0,
    usd_unknown_calls = m.usd_unknown_calls or 0 }
  s.task_name = s.task and s.task:gsub("^task%-", "") or "?"
  s.baseline = seed_score(evals)
  -- per candidate: evaluated at all, and whether any evaluation got past the compiler
  local evaluated, built = {}, {}
  for _, e in ipairs(evals) do
    if e.purpose ~= "seed" and e.candidate then
      evaluated[e.candidate] = true
      if e.status ~= "COMPILE_ERROR" then built[e.candidate] = true end
    end
  end
  -- candidates by outcome, from the rounds' verdicts (a probe is one model
  -- call: with or without a candidate)
  s.candidates, s.compiled, s.evaluated, s.accepted, s.rejected, s.rejected_by = 0, 0, 0, 0, 0, {}
  for _, r in ipairs(rounds) do
    for _, p in ipairs(r.verdicts or {}) do
      local c = p.candidate
      if c then s.candidates = s.candidates + 1 end
      if c and evaluated[c] then s.evaluated = s.evaluated + 1 end
      if c and built[c] then s.compiled = s.compiled + 1 end
      if p.accepted then
        s.accepted = s.accepted + 1
      else
        s.rejected = s.rejected + 1
        local why
        if c and evaluated[c] and not built[c] then why = "compile_error"
        elseif c then why = p.rejected_for or "other"
        elseif tostring(p.reason):find("^model call failed") then why = "model_failed"
        else why = "no_candidate" end
        s.rejected_by[why] = (s.rejected_by[why] or 0) + 1
      end
    end
  end
  -- correctness pass rate over every evaluation of the run's candidates
  local n, pass = 0, 0
  for _, e in ipairs(evals) do
    if e.purpose ~= "seed" then
      n = n + 1
      if e.status == "PASSED" then pass = pass + 1 end
    end
  end
  s.eval_pass_rate = n > 0 and pass / n or nil
  -- the GPU busy fraction: per GPU, the kernel time of the run's evaluations
  -- over the run's wall time (evaluations recorded before gpu_kernel_seconds
  -- existed, and host tasks, have none: no figure); beside it the active
  -- fraction, the GPU's active time (gpu_active_seconds: the timing
  -- batches whole, the evaluator's own work in them included) over the same
  local kern, act = {}, {}
  for _, e in ipairs(evals) do
    local kl = e.evaluation and e.evaluation.khlua
    local u = (e.provenance and e.provenance.gpu_uuid) or (kl and kl.gpu_uuid)
    local ks = kl and kl.gpu_kernel_seconds
    if type(u) == "string" and type(ks) == "number" then
      kern[u] = (kern[u] or 0) + ks
      local as = kl.gpu_active_seconds
      if type(as) == "number" then act[u] = (act[u] or 0) + as end
    end
  end
  s.gpu_busy = {}
  for u, ks in pairs(kern) do
    if s.wall_s > 0 then
      s.gpu_busy[#s.gpu_busy + 1] = { gpu = u, kernel_s = ks, fraction = ks / s.wall_s,
        active_s = act[u], active_fraction = act[u] and act[u] / s.wall_s }
    end
  end
  table.sort(s.gpu_busy, function(a, b) return a.gpu < b.gpu end)
  -- the best: the last promotion (each one beats the incumbent before it)
  local last = promos[#promos]
  if last then
    local sw = last.gate and last.gate.sweep or {}
    s.best_speedup = sw.mean_speedup
    s.best_correct = sw.correct
    s.best_sd = last.score
    s.best_candidate = last.candidate
    s.rounds_to_best = last.round_index
    for _, r in ipairs(rounds) do
      if r.index == last.round_index then s.wall_to_best_s = r.state_out and r.state_out.elapsed_s end
    end
  else
    s.best_speedup, s.best_correct, s.best_sd = s.baseline, 1, s.baseline
    s.best_candidate = run.incumbent_candidate
    s.rounds_to_best, s.wall_to_best_s = 0, 0
  end
  s.usd_per_accepted = s.accepted > 0 and s.usd / s.accepted or nil
  -- best-so-far per round (round 0: the seed)
  s.curve = { { round = 0, speedup = s.baseline } }
  for _, r in ipairs(rounds) do
    local sc = r.state_out and r.state_out.incumbent and r.state_out.incumbent.score
    s.curve[#s.curve + 1] = { round = r.index, speedup = sc }
  end
  s.promotions = {}
  for _, pr in ipairs(promos) do s.promotions[#s.promotions + 1] = promotion_evidence(db, pr) end
  s.workloads = per_workload(db, s, evals)
  s.settings = settings(db, run)
  -- the sources stay out of --json (M.json): the report shows them
  s.sources = {}
  s.round_rows = round_rows(db, rounds, evaluated, built, s.sources)
  s.incumbent = run.incumbent_candidate
  s.rounds_budget = run.config and run.config.rounds
  return s
end

-- ---- rendering -------------------------------------------------------------------

local function letter(i) return string.char(64 + i) end

local function fmt(x, p)
  if x == nil then return "-" end
  if math.type(x) == "integer" then return tostring(x) end
  return string.format("%." .. (p or 3) .. "f", x)
end

local function reasons(s)
  local ks = {}
  for k in pairs(s.rejected_by) do ks[#ks + 1] = k end
  table.sort(ks)
  local out = {}
  for _, k in ipairs(ks) do out[#out + 1] = k .. " " .. s.rejected_by[k] end
  return #out > 0 and table.concat(out, ", ") or "-"
end

-- The rows of the detail table: {label, function(s) -> text, the figure's key in --json}.
M.ROWS = {
  { "policy", function(s) return s.policy or "-" end, "policy" },
  { "task", function(s) return s.task_name end, "task_name" },
  { "seed's speedup over the reference", function(s) return fmt(s.baseline) end, "baseline" },
  { "best speedup over the reference (mean over workloads)", function(s) return fmt(s.best_speedup) end,
    "best_speedup" },
  { "S_d", function(s) return fmt(s.best_sd) end, "best_sd" },
  { "correctness of the best", function(s) return fmt(s.best_correct) end, "best_correct" },
  { "evaluation pass rate", function(s) return fmt(s.eval_pass_rate) end, "eval_pass_rate" },
  { "GPU busy fraction (kernel time over wall; active)", function(s)
      local out = {}
      for _, b in ipairs(s.gpu_busy or {}) do
        out[#out + 1] = (#s.gpu_busy > 1 and (b.gpu:sub(1, 12) .. " ") or "")
          .. string.format("%.1f%%", 100 * b.fraction)
          .. (b.active_fraction and string.format(" (%.1f%%)", 100 * b.active_fraction) or "")
      end
      return #out > 0 and table.concat(out, ", ") or "-"
    end, "gpu_busy" },
  { "rounds", function(s) return fmt(s.rounds) end, "rounds" },
  { "rounds to the best", function(s) return fmt(s.rounds_to_best) end, "rounds_to_best" },
  { "wall time to the best (s)", function(s) return fmt(s.wall_to_best_s, 1) end, "wall_to_best_s" },
  { "candidates proposed", function(s) return fmt(s.candidates) end, "candidates" },
  { "candidates compiled", function(s) return fmt(s.compiled) end, "compiled" },
  { "candidates evaluated", function(s) return fmt(s.evaluated) end, "evaluated" },
  { "accepted", function(s) return fmt(s.accepted) end, "accepted" },
  { "rejected", function(s) return fmt(s.rejected) end, "rejected" },
  { "rejected by reason", reasons, "rejected_by" },
  { "tokens", function(s) return fmt(s.tokens) end, "tokens" },
  { "money (USD)", function(s) return fmt(s.usd + 0.0, 4) end, "usd" },
  { "model calls of unknown price", function(s) return fmt(s.usd_unknown_calls) end, "usd_unknown_calls" },
  { "USD per accepted improvement", function(s) return fmt(s.usd_per_accepted, 4) end, "usd_per_accepted" },
}

-- The paper's table: per task, each run's best speedup, and A/B for two runs.
function M.by_task(sums)
  local tasks, order = {}, {}
  for _, s in ipairs(sums) do
    if not tasks[s.task_name] then tasks[s.task_name] = {}; order[#order + 1] = s.task_name end
    tasks[s.task_name][s.run] = s
  end
  return tasks, order
end

function M.markdown(sums)
  local out = {}
  local tasks, order = M.by_task(sums)
  local head = { "task" }
  for i, s in ipairs(sums) do head[#head + 1] = string.char(64 + i) .. " speedup" end
  -- the ratio of run A's best to each other run's (the paper: A/B)
  for i = 2, #sums do head[#head + 1] = "ratio A/" .. string.char(64 + i) end
  out[#out + 1] = "| " .. table.concat(head, " | ") .. " |"
  out[#out + 1] = "|" .. string.rep("---|", #head)
  for _, t in ipairs(order) do
    local row = { t }
    for _, s in ipairs(sums) do row[#row + 1] = tasks[t][s.run] and fmt(s.best_speedup) or "-" end
    for i = 2, #sums do
      local a, b = tasks[t][sums[1].run], tasks[t][sums[i].run]
      row[#row + 1] = (a and b and a.best_speedup and b.best_speedup and b.best_speedup ~= 0)
        and fmt(a.best_speedup / b.best_speedup) or "-"
    end
    out[#out + 1] = "| " .. table.concat(row, " | ") .. " |"
  end
  out[#out + 1] = ""
  head = { "metric" }
  for i, s in ipairs(sums) do head[#head + 1] = string.char(64 + i) .. ": " .. s.run end
  out[#out + 1] = "| " .. table.concat(head, " | ") .. " |"
  out[#out + 1] = "|" .. string.rep("---|", #head)
  for _, r in ipairs(M.ROWS) do
    local row = { r[1] }
    for _, s in ipairs(sums) do row[#row + 1] = r[2](s) end
    out[#out + 1] = "| " .. table.concat(row, " | ") .. " |"
  end
  out[#out + 1] = ""
  out[#out + 1] = M.rounds_markdown(sums)
  return table.concat(out, "\n")
end

-- A candidate id as the tables show it: "candidate-" and 12 hex digits.
local function short(id) return id and (id:gsub("^(candidate%-%x%x%x%x%x%x%x%x%x%x%x%x)%x+$", "%1")) or "-" end
M.short = short

-- A paired ratio: 3 decimals, and 3 significant digits below 0.001 (a
-- candidate thousands of times slower is not "0.000").
local function ratio(x)
  if type(x) == "number" and x > 0 and x < 0.001 then return string.format("%.3g", x) end
  return fmt(x)
end

-- The interval of a paired ratio, "0.981 to 1.020".
local function interval(x)
  return (x.lo and x.hi) and (ratio(x.lo) .. " to " .. ratio(x.hi)) or "-"
end

-- Every round's candidates, rejected ones included: the verdict and the
-- gate step that decided it.
function M.rounds_markdown(sums)
  local out = { "| run | round | model | candidate | verdict | decided by | paired ratio | interval | S_d |",
    "|---|---|---|---|---|---|---|---|---|" }
  for i, s in ipairs(sums) do
    for _, r in ipairs(s.round_rows or {}) do
      out[#out + 1] = string.format("| %s | %d | %s | %s | %s | %s | %s | %s | %s |", letter(i), r.round,
        r.model or "-", short(r.candidate), r.verdict .. (r.rejected_for and (" (" .. r.rejected_for .. ")") or ""),
        r.check, ratio(r.ratio), interval(r), fmt(r.score))
    end
  end
  if #out == 2 then out[#out + 1] = "| - | - | - | - | no rounds | - | - | - | - |" end
  return table.concat(out, "\n") .. "\n"
end

local function csv_field(x)
  x = tostring(x)
  if x:find('[,"\n]') then x = '"' .. x:gsub('"', '""') .. '"' end
  return x
end

function M.csv(sums)
  local out = {}
  local head = { "metric" }
  for _, s in ipairs(sums) do head[#head + 1] = s.run end
  out[1] = table.concat(head, ",")
  for _, r in ipairs(M.ROWS) do
    local row = { csv_field(r[1]) }
    for _, s in ipairs(sums) do row[#row + 1] = csv_field(r[2](s)) end
    out[#out + 1] = table.concat(row, ",")
  end
  return table.concat(out, "\n") .. "\n"
end

function M.json(sums)
  local out = {}
  for i, s in ipairs(sums) do
    local c = {}
    for k, v in pairs(s) do c[k] = v end
    c.sources = nil
    out[i] = c
  end
  return kh.json.encode({ runs = out }, { sort_keys = true, indent = 2 })
end

local function esc(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local COLORS = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b" }

-- Best-so-far speedup per round, one polyline per run, axes, labels, legend.
function M.svg(sums)
  local W, H, L, R, TOP, B = 640, 400, 60, 170, 30, 50
  local maxr, lo, hi = 1, math.huge, -math.huge
  for _, s in ipairs(sums) do
    for _, p in ipairs(s.curve) do
      if p.round > maxr then maxr = p.round end
      if p.speedup then lo, hi = math.min(lo, p.speedup), math.max(hi, p.speedup) end
    end
  end
  if lo == math.huge then lo, hi = 0, 1 end
  lo = math.min(lo, 1) * 0.95
  hi = math.max(hi, 1) * 1.05
  if hi - lo < 1e-9 then hi = lo + 1 end
  local pw, ph = W - L - R, H - TOP - B
  local function X(r) return L + pw * r / maxr end
  local function Y(v) return TOP + ph * (1 - (v - lo) / (hi - lo)) end
  local o = {}
  o[#o + 1] = string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">', W, H, W, H)
  o[#o + 1] = '<title>best-so-far speedup per round</title>'
  o[#o + 1] = string.format('<rect x="0" y="0" width="%d" height="%d" fill="white"/>', W, H)
  -- axes
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>', L, TOP + ph, L + pw, TOP + ph)
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>', L, TOP, L, TOP + ph)
  local step = math.max(1, math.ceil(maxr / 10))
  for r = 0, maxr, step do
    o[#o + 1] = string.format('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/>', X(r), TOP + ph, X(r), TOP + ph + 4)
    o[#o + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle">%d</text>', X(r), TOP + ph + 17, r)
  end
  for i = 0, 5 do
    local v = lo + (hi - lo) * i / 5
    o[#o + 1] = string.format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>', L, Y(v), L + pw, Y(v))
    o[#o + 1] = string.format('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>', L - 6, Y(v) + 4, v)
  end
  o[#o + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle">round</text>', L + pw / 2, H - 10)
  o[#o + 1] = string.format('<text x="15" y="%.1f" text-anchor="middle" transform="rotate(-90 15 %.1f)">best S_d: speedup over the reference (×)</text>', TOP + ph / 2, TOP + ph / 2)
  -- one polyline per run (a round without a score keeps the previous one)
  for i, s in ipairs(sums) do
    local c = COLORS[(i - 1) % #COLORS + 1]
    local pts, prev = {}, nil
    for _, p in ipairs(s.curve) do
      local v = p.speedup or prev
      if v then pts[#pts + 1] = string.format("%.1f,%.1f", X(p.round), Y(v)); prev = v end
    end
    o[#o + 1] = string.format('<polyline class="run" data-run="%s" fill="none" stroke="%s" stroke-width="2" points="%s"/>',
      esc(s.run), c, table.concat(pts, " "))
    -- legend: letter and policy, the run id below it (two runs may share a policy)
    local ly = TOP + 10 + (i - 1) * 32
    o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>', L + pw + 10, ly, L + pw + 30, ly, c)
    o[#o + 1] = string.format('<text x="%d" y="%d">%s %s</text>', L + pw + 35, ly + 4, string.char(64 + i), esc(s.policy or "?"))
    o[#o + 1] = string.format('<text x="%d" y="%d" font-size="9">%s</text>', L + pw + 35, ly + 16, esc(s.run))
  end
  o[#o + 1] = '</svg>'
  return table.concat(o, "\n") .. "\n"
end

-- ---- per-workload charts ----------------------------------------------------------

-- Tick values for [lo, hi]: about n steps of 1, 2 or 5 times a power of ten.
local function ticks(lo, hi, n)
  local raw = (hi - lo) / (n or 5)
  if raw <= 0 then return { lo } end
  local p = 10 ^ math.floor(math.log(raw, 10))
  local step = p
  for _, m in ipairs({ 1, 2, 5, 10 }) do
    if p * m >= raw then step = p * m; break end
  end
  local out = {}
  for k = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9) do out[#out + 1] = k * step end
  return out
end

-- Log-scale ticks (1, 2, 5 per decade) within [lo, hi].
local function log_ticks(lo, hi)
  local out = {}
  for e = math.floor(math.log(lo, 10)), math.ceil(math.log(hi, 10)) do
    for _, m in ipairs({ 1, 2, 5 }) do
      local v = m * 10 ^ e
      if v >= lo * 0.999 and v <= hi * 1.001 then out[#out + 1] = v end
    end
  end
  return out
end

local function num_label(v)
  if v >= 100 or v == math.floor(v) then return string.format("%g", v) end
  return string.format("%.3g", v)
end

local function svg_open(o, W, H, title)
  o[#o + 1] = string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
    .. 'viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">', W, H, W, H)
  o[#o + 1] = "<title>" .. esc(title) .. "</title>"
  o[#o + 1] = string.format('<rect x="0" y="0" width="%d" height="%d" fill="white"/>', W, H)
  o[#o + 1] = string.format('<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>', 10, esc(title))
end

-- The workloads of every run, once each, in axis order.
local function union_workloads(sums)
  local ws, seen = {}, {}
  for _, s in ipairs(sums) do
    for _, w in ipairs(s.workloads or {}) do
      if not seen[w.uuid] then seen[w.uuid] = true; ws[#ws + 1] = w end
    end
  end
  table.sort(ws, workload_order)
  return ws
end

local function find_workload(s, uuid)
  for _, w in ipairs(s.workloads or {}) do if w.uuid == uuid then return w end end
end

-- Per-workload speedup of each run's best against the task's reference
-- (reference latency / latency, the b_w / l_w of S_d; a run without a
-- promotion shows its seed), one group per workload and a last group with
-- the mean over workloads; a dashed line at 1.0, the reference.  sums: runs
-- on one task.
function M.svg_speedup(sums)
  local ws = union_workloads(sums)
  local groups = {}
  for _, w in ipairs(ws) do groups[#groups + 1] = { uuid = w.uuid, label = w.label } end
  groups[#groups + 1] = { uuid = "mean", label = "mean over workloads" }
  local nr = #sums
  local BW, GAP = 18, 16
  -- a group is wide enough for its label, one axis a line ("batch_size=33",
  -- about 6 px a character at 10 px)
  local nl, longest = 1, 0
  for _, g in ipairs(groups) do
    local _, commas = g.label:gsub(", ", "")
    nl = math.max(nl, commas + 1)
    for part in (g.label .. ", "):gmatch("(.-), ") do longest = math.max(longest, utf8.len(part) or #part) end
  end
  local gw = math.max(nr * BW + GAP, 6 * longest + 14, 60)
  local L, R, TOP, B = 64, 230, 44, 44 + 13 * nl
  local pw = math.max(#groups * gw, 240)
  local W, H = L + pw + R, TOP + 260 + B
  local ph = H - TOP - B
  local function value(s, g)
    if g.uuid == "mean" then return s.best_speedup end
    local w = find_workload(s, g.uuid)
    return w and w.speedup
  end
  local hi = 1
  for _, s in ipairs(sums) do
    for _, g in ipairs(groups) do
      local v = value(s, g)
      if v and v > hi then hi = v end
    end
  end
  hi = hi * 1.15
  local function Y(v) return TOP + ph * (1 - v / hi) end
  local o = {}
  svg_open(o, W, H, "Speedup per workload: " .. (sums[1] and sums[1].task_name or "?"))
  for _, v in ipairs(ticks(0, hi, 5)) do
    o[#o + 1] = string.format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>', L, Y(v), L + pw, Y(v))
    o[#o + 1] = string.format('<text x="%d" y="%.1f" text-anchor="end">%s</text>', L - 6, Y(v) + 4, num_label(v))
  end
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>', L, TOP + ph, L + pw, TOP + ph)
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>', L, TOP, L, TOP + ph)
  o[#o + 1] = string.format('<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">'
    .. 'speedup over the reference (×)</text>', TOP + ph / 2, TOP + ph / 2)
  o[#o + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle">workload (axes)</text>', L + pw / 2, H - 8)
  for gi, g in ipairs(groups) do
    local x0 = L + (gi - 1) * gw + (gw - nr * BW) / 2
    for i, s in ipairs(sums) do
      local v = value(s, g)
      if v then
        local c = COLORS[(i - 1) % #COLORS + 1]
        local x = x0 + (i - 1) * BW
        o[#o + 1] = string.format('<rect class="bar" data-run="%s" data-workload="%s" data-speedup="%.17g" '
          .. 'x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"%s><title>%s %s, %s: speedup %.3f</title></rect>',
          esc(s.run), esc(g.uuid), v, x, Y(v), BW - 2, TOP + ph - Y(v), c,
          g.uuid == "mean" and ' fill-opacity="0.7"' or "", letter(i), esc(s.policy or "?"), esc(g.label), v)
        -- the value above its bar, written upwards: a bar is narrower than "10.25"
        local tx, ty = x + (BW - 2) / 2 + 3, Y(v) - 3
        o[#o + 1] = string.format('<text class="value" x="%.1f" y="%.1f" font-size="9" '
          .. 'transform="rotate(-90 %.1f %.1f)">%.2f</text>', tx, ty, tx, ty, v)
      end
    end
    local cx = x0 + nr * BW / 2
    local li = 0
    for part in (g.label .. ", "):gmatch("(.-), ") do
      o[#o + 1] = string.format('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>',
        cx, TOP + ph + 14 + 13 * li, esc(part))
      li = li + 1
    end
  end
  -- the reference: speedup 1.0
  o[#o + 1] = string.format('<line class="reference" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" '
    .. 'stroke-dasharray="6 4"/>', L, Y(1), L + pw, Y(1))
  o[#o + 1] = string.format('<text x="%d" y="%.1f" font-size="10">1.0 = reference</text>', L + pw + 4, Y(1) + 4)
  for i, s in ipairs(sums) do
    local c = COLORS[(i - 1) % #COLORS + 1]
    local ly = TOP + 24 + (i - 1) * 32
    local note = #s.promotions == 0 and " (no promotion: seed)" or " (best)"
    o[#o + 1] = string.format('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>', L + pw + 10, ly - 9, c)
    o[#o + 1] = string.format('<text x="%d" y="%d">%s %s%s</text>', L + pw + 27, ly + 1, letter(i),
      esc(s.policy or "?"), note)
    o[#o + 1] = string.format('<text x="%d" y="%d" font-size="9">%s</text>', L + pw + 27, ly + 13, esc(s.run))
  end
  o[#o + 1] = "</svg>"
  return table.concat(o, "\n") .. "\n"
end

-- Latency distributions per workload from the raw timing samples: for each
-- run, the seed (first incumbent, light) and the best (dark) as box plots,
-- and the reference's median latency as a dashed line.  Each workload has
-- its own axis, fitted to its own samples (linear; logarithmic where they
-- span more than 3x): latencies of different workloads differ by orders of
-- magnitude, and one shared axis would draw every box a few pixels wide.
-- sums: runs on one task.
function M.svg_latency(sums)
  local ws = union_workloads(sums)
  local BOX, STEP, ROWGAP, TICKH = 10, 13, 12, 16
  local L, R, TOP, B = 210, 250, 44, 44
  local pw = 460
  local per_row = 0
  for _, s in ipairs(sums) do per_row = per_row + (#s.promotions == 0 and 1 or 2) end
  local rowh = per_row * STEP + ROWGAP + TICKH
  local ph = math.max(#ws * rowh, 60)
  local W, H = L + pw + R, TOP + ph + B
  local o = {}
  svg_open(o, W, H, "Latency per workload: " .. (sums[1] and sums[1].task_name or "?"))
  o[#o + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle">latency per call (each workload on its '
    .. 'own scale)</text>', L + pw / 2, TOP + ph + 18)
  o[#o + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle" font-size="10">box: quartiles, '
    .. 'bar: median, whiskers: 5th to 95th percentile of the raw samples; dashed: the reference</text>',
    L + pw / 2, TOP + ph + 34)
  for wi, w in ipairs(ws) do
    local y0 = TOP + (wi - 1) * rowh + ROWGAP / 2
    -- this workload's range: every box's whiskers and the reference
    local lo, hi = math.huge, -math.huge
    local function widen(v) if v and v > 0 then lo, hi = math.min(lo, v), math.max(hi, v) end end
    for _, s in ipairs(sums) do
      local sw = find_workload(s, w.uuid)
      if sw then
        for _, d in ipairs({ sw.seed_dist or false, sw.best_dist or false }) do
          if d then widen(d.p5); widen(d.p95) end
        end
      end
    end
    widen(w.reference_ms)
    if lo == math.huge then lo, hi = 1e-3, 1 end
    local scale, unit = 1, "ms"
    if hi < 1 then scale, unit = 1000, "µs" end
    local logx = hi / lo > 3
    local a, b
    if logx then
      a, b = math.log(lo * scale, 10) - 0.05, math.log(hi * scale, 10) + 0.05
    else
      local pad = math.max((hi - lo) * 0.08, hi * 0.01)
      a, b = math.max((lo - pad) * scale, 0), (hi + pad) * scale
    end
    local function X(ms)
      local v = ms * scale
      if logx then return L + pw * (math.log(v, 10) - a) / (b - a) end
      return L + pw * (v - a) / (b - a)
    end
    if wi > 1 then
      o[#o + 1] = string.format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#bbb"/>', 10, y0 - ROWGAP / 2,
        L + pw, y0 - ROWGAP / 2)
    end
    o[#o + 1] = string.format('<text x="%d" y="%.1f" text-anchor="end" font-size="11">%s</text>', L - 8,
      y0 + per_row * STEP / 2 + 4, esc(w.label))
    -- the row's axis: grid lines and tick labels under it, the unit at its end
    local ty = y0 + per_row * STEP + 2
    local tv = logx and log_ticks(10 ^ a, 10 ^ b) or ticks(a, b, 4)
    for _, v in ipairs(tv) do
      local x = X(v / scale)
      o[#o + 1] = string.format('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>', x, y0 - 3, x, ty)
      o[#o + 1] = string.format('<text class="tick" x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>',
        x, ty + 10, num_label(v))
    end
    o[#o + 1] = string.format('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#888"/>', L, ty, L + pw, ty)
    o[#o + 1] = string.format('<text x="%d" y="%.1f" font-size="9">%s%s</text>', L + pw + 4, ty + 10, unit,
      logx and " (log)" or "")
    local k = 0
    for i, s in ipairs(sums) do
      local c = COLORS[(i - 1) % #COLORS + 1]
      local sw = find_workload(s, w.uuid)
      local kinds = #s.promotions == 0 and { "seed" } or { "seed", "best" }
      for _, kind in ipairs(kinds) do
        local d = sw and (kind == "seed" and sw.seed_dist or sw.best_dist)
        local y = y0 + k * STEP
        k = k + 1
        if d then
          local light = kind == "seed"
          o[#o + 1] = string.format('<g class="box" data-run="%s" data-kind="%s" data-workload="%s" '
            .. 'data-median-ms="%.17g" data-n="%d"><title>%s %s %s, %s: median %.4g %s, quartiles %.4g to %.4g, '
            .. '%d samples</title>', esc(s.run), kind, esc(w.uuid), d.median, d.n, letter(i), esc(s.policy or "?"),
            kind, esc(w.label), d.median * scale, unit, d.q1 * scale, d.q3 * scale, d.n)
          o[#o + 1] = string.format('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>',
            X(d.p5), y + BOX / 2, X(d.p95), y + BOX / 2, c)
          o[#o + 1] = string.format('<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" '
            .. 'fill-opacity="%s" stroke="%s"/>', X(d.q1), y, math.max(X(d.q3) - X(d.q1), 1), BOX, c,
            light and "0.25" or "0.85", c)
          o[#o + 1] = string.format('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"/>',
            X(d.median), y - 1, X(d.median), y + BOX + 1, light and c or "black")
          o[#o + 1] = "</g>"
          o[#o + 1] = string.format('<text x="%.1f" y="%.1f" font-size="8">%s %s</text>', X(d.p95) + 4, y + 8,
            letter(i), kind)
        end
      end
    end
    if w.reference_ms then
      local x = X(w.reference_ms)
      o[#o + 1] = string.format('<line class="reference" data-workload="%s" data-ms="%.17g" x1="%.1f" y1="%.1f" '
        .. 'x2="%.1f" y2="%.1f" stroke="#444" stroke-width="1.5" stroke-dasharray="3 2"/>', esc(w.uuid),
        w.reference_ms, x, y0 - 3, x, y0 + per_row * STEP)
    end
  end
  -- legend
  local ly = TOP + 10
  for i, s in ipairs(sums) do
    local c = COLORS[(i - 1) % #COLORS + 1]
    o[#o + 1] = string.format('<rect x="%d" y="%d" width="12" height="10" fill="%s" fill-opacity="0.25" stroke="%s"/>',
      L + pw + 30, ly - 8, c, c)
    o[#o + 1] = string.format('<text x="%d" y="%d">%s seed (first incumbent)</text>', L + pw + 47, ly + 1, letter(i))
    ly = ly + 16
    if #s.promotions > 0 then
      o[#o + 1] = string.format('<rect x="%d" y="%d" width="12" height="10" fill="%s" fill-opacity="0.85" stroke="%s"/>',
        L + pw + 30, ly - 8, c, c)
      o[#o + 1] = string.format('<text x="%d" y="%d">%s best (last promotion)</text>', L + pw + 47, ly + 1, letter(i))
      ly = ly + 16
    end
    o[#o + 1] = string.format('<text x="%d" y="%d" font-size="9">%s: %s</text>', L + pw + 47, ly, esc(s.policy or "?"),
      esc(s.run))
    ly = ly + 22
  end
  o[#o + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444" stroke-width="1.5" '
    .. 'stroke-dasharray="3 2"/>', L + pw + 36, ly - 10, L + pw + 36, ly + 2)
  o[#o + 1] = string.format('<text x="%d" y="%d">reference (median)</text>', L + pw + 47, ly)
  o[#o + 1] = "</svg>"
  return table.concat(o, "\n") .. "\n"
end

-- Runs grouped by task, in the order they were given: {{name, sums}, ...}.
function M.tasks(sums)
  local by, out = {}, {}
  for _, s in ipairs(sums) do
    if not by[s.task_name] then by[s.task_name] = {}; out[#out + 1] = { name = s.task_name, sums = by[s.task_name] } end
    table.insert(by[s.task_name], s)
  end
  return out
end

-- ---- the HTML report ----------------------------------------------------------------

local CSS = [[
body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.2em}
td,th{border:1px solid #999;padding:3px 8px;text-align:right;vertical-align:top}
td:first-child{white-space:nowrap}
th{background:#f0f0f0}td.l,th.l{text-align:left}
figure svg{max-width:100%;height:auto}
figure{margin:1em 0}figcaption{font-size:0.9em;color:#444;max-width:900px}
section.evidence{border-left:4px solid #1f77b4;padding-left:1em;margin:1.5em 0}
code{font-size:0.9em}nav a{margin-right:1em}
tr.promoted td{background:#e8f5e9}
details.candidate{margin:0.4em 0;border:1px solid #ddd;padding:0.3em 0.8em}
pre{background:#f8f8f8;padding:0.5em;overflow-x:auto;font-size:0.85em}
pre.diff span.a{color:#1a7f37;background:#e6ffec}pre.diff span.d{color:#b3261e;background:#ffebe9}
pre.diff span.h{color:#6f42c1}
]]

local function td(text, attrs, class)
  return "<td" .. (class and (' class="' .. class .. '"') or "") .. (attrs or "") .. ">" .. text .. "</td>"
end

local function data(run, key) return string.format(' data-run="%s" data-key="%s"', esc(run), esc(key)) end

local function ev_anchor(pid) return "ev-" .. pid end

local function html_tables(sums, h)
  local tasks, order = M.by_task(sums)
  h[#h + 1] = '<h2 id="table">Best speedup per task</h2>'
  h[#h + 1] = "<p>Each run's best: the mean over workloads of reference latency / latency of the last "
    .. "promoted candidate (a run without a promotion: its seed). A number links to the promotion's "
    .. "gate evidence.</p>"
  h[#h + 1] = '<table id="by-task"><tr><th class="l">task</th>'
  for i, s in ipairs(sums) do
    h[#h + 1] = string.format("<th>%s speedup<br><small>%s</small></th>", letter(i), esc(s.policy or "?"))
  end
  for i = 2, #sums do h[#h + 1] = "<th>ratio A/" .. letter(i) .. "</th>" end
  h[#h + 1] = "</tr>"
  for _, t in ipairs(order) do
    h[#h + 1] = "<tr>" .. td(esc(t), nil, "l")
    for _, s in ipairs(sums) do
      local x = tasks[t][s.run]
      local text = x and fmt(x.best_speedup) or "-"
      local last = x and x.promotions[#x.promotions]
      if last then text = '<a href="#' .. ev_anchor(last.id) .. '">' .. text .. "</a>" end
      h[#h + 1] = td(text, x and data(s.run, "best_speedup") or nil)
    end
    for i = 2, #sums do
      local a, b = tasks[t][sums[1].run], tasks[t][sums[i].run]
      local ok = a and b and a.best_speedup and b.best_speedup and b.best_speedup ~= 0
      h[#h + 1] = td(ok and fmt(a.best_speedup / b.best_speedup) or "-",
        string.format(' data-key="ratio" data-task="%s" data-runs="%s %s"', esc(t), esc(sums[1].run),
          esc(sums[i].run)))
    end
    h[#h + 1] = "</tr>"
  end
  h[#h + 1] = "</table>"
  h[#h + 1] = '<h2 id="figures">Figures per run</h2>'
  h[#h + 1] = '<table id="figures-table"><tr><th class="l">figure</th>'
  for i, s in ipairs(sums) do
    h[#h + 1] = string.format('<th>%s: <a href="#settings">%s</a></th>', letter(i), esc(s.run))
  end
  h[#h + 1] = "</tr>"
  for _, r in ipairs(M.ROWS) do
    h[#h + 1] = "<tr>" .. td(esc(r[1]), nil, "l")
    for _, s in ipairs(sums) do h[#h + 1] = td(esc(r[2](s)), data(s.run, r[3])) end
    h[#h + 1] = "</tr>"
  end
  h[#h + 1] = "</table>"
end

local function html_plots(sums, h)
  h[#h + 1] = '<h2 id="plots">Plots</h2>'
  h[#h + 1] = '<figure id="plot-best-so-far">' .. M.svg(sums)
  h[#h + 1] = "<figcaption>Best-so-far speedup (the incumbent's S_d) after each round; round 0 is the "
    .. "seed. A step up is a promotion.</figcaption></figure>"
  for _, t in ipairs(M.tasks(sums)) do
    local id = t.name:gsub("[^%w_%-]", "_")
    h[#h + 1] = string.format('<figure id="plot-speedup-%s">%s', id, M.svg_speedup(t.sums))
    h[#h + 1] = "<figcaption>" .. esc(t.name) .. ": per workload, the speedup of each run's best over "
      .. "the task's reference (reference latency / latency, from the last promotion's sweep); the "
      .. "last group is the mean over workloads, the table's figure.</figcaption></figure>"
    h[#h + 1] = string.format('<figure id="plot-latency-%s">%s', id, M.svg_latency(t.sums))
    h[#h + 1] = "<figcaption>" .. esc(t.name) .. ": the raw timing samples of every timed call: the "
      .. "seed's three measurements and the best's sweep, per workload.</figcaption></figure>"
  end
end

local function show(v)
  if v == nil then return "-" end
  if type(v) == "table" then
    if next(v) == nil then return "none" end
    local ks = {}
    for k in pairs(v) do ks[#ks + 1] = k end
    table.sort(ks, function(x, y) return tostring(x) < tostring(y) end)
    local out = {}
    for _, k in ipairs(ks) do out[#out + 1] = tostring(k) .. " " .. show(v[k]) end
    return table.concat(out, ", ")
  end
  if type(v) == "number" then return fmt(v, 3) end
  return tostring(v)
end

local function html_settings(sums, h)
  h[#h + 1] = '<h2 id="settings">Settings</h2>'
  h[#h + 1] = "<p>As the run records hold them (<code>run.config</code>, the models called, the "
    .. "versions of the khlua that made the run).</p>"
  h[#h + 1] = '<table id="settings-table"><tr><th class="l">setting</th>'
  for i, s in ipairs(sums) do h[#h + 1] = "<th>" .. letter(i) .. "</th>" end
  h[#h + 1] = "</tr>"
  local rows = {
    { "run", function(s) return s.run end },
    { "policy", function(x) return x.policy end },
    { "task", function(x) return x.task end },
    { "task package", function(x) return x.task_path end },
    { "definition", function(x) return x.definition end },
    { "status", function(x) return x.status end },
    { "stopped by", function(x) return x.stop_reason end },
    { "error", function(x) return x.error end },
    { "started", function(x) return x.created_at end },
    { "resumed (times)", function(x) return x.resumed end },
    { "rounds (budget)", function(x) return x.rounds end },
    { "budget (wall s, tokens, USD)", function(x) return x.budget end },
    { "plateau (rounds)", function(x) return x.plateau end },
    { "candidates per round", function(x) return x.candidates_per_round end },
    { "gate options", function(x)
      return (x.gate == nil or next(x.gate) == nil) and "defaults (lib/gate.lua)" or x.gate
    end },
    { "gate seed", function(x) return x.gate_seed or "drawn from the OS per evaluation (not saved)" end },
    { "seed solution", function(x) return x.seed_solution end },
    { "model families", function(x) return x.model_specs end },
    { "model calls by model", function(x) return x.models_called end },
    { "khlua version", function(x) return x.versions and x.versions.khlua end },
    { "git commit", function(x) return x.versions and x.versions.git end },
    { "libraries", function(x)
      local v = x.versions
      -- Lua's and LMDB's version strings name themselves
      return v and string.format("%s, %s, curl %s, jansson %s, NVRTC %s", show(v.lua),
        show(v.lmdb), show(v.curl), show(v.jansson), v.nvrtc and show(v.nvrtc) or "none")
    end },
  }
  for ri, r in ipairs(rows) do
    h[#h + 1] = "<tr>" .. td(esc(r[1]), nil, "l")
    for _, s in ipairs(sums) do
      local v = ri == 1 and r[2](s) or r[2](s.settings or {})
      if v == nil and r[1] == "khlua version" then v = "not recorded (a run made before versions were kept)" end
      h[#h + 1] = td(esc(show(v)), nil, "l")
    end
    h[#h + 1] = "</tr>"
  end
  h[#h + 1] = "</table>"
end

local function ms(v) return v and string.format("%.4f", v) or "-" end

local function html_promotions(sums, h)
  h[#h + 1] = '<h2 id="promotions">Promotions</h2>'
  h[#h + 1] = "<p>Each promotion passed the gate: a paired comparison with the incumbent on sampled "
    .. "workloads (lower bound of the ratio's confidence interval above 1 + margin), a sweep over "
    .. "every workload, and the finalist's correctness seeds. The evidence link lists its figures "
    .. "and the evaluation records behind them.</p>"
  for i, s in ipairs(sums) do
    h[#h + 1] = string.format('<h3 id="promotions-%s">%s: %s (%s)</h3>', esc(s.run), letter(i),
      esc(s.policy or "?"), esc(s.run))
    if #s.promotions == 0 then
      h[#h + 1] = "<p>No promotion: the seed stayed the incumbent.</p>"
    else
      h[#h + 1] = '<table><tr><th>round</th><th class="l">candidate</th><th>paired ratio</th>'
        .. "<th>95% interval</th><th>mean speedup</th><th>S_d</th><th>evidence</th></tr>"
      for _, p in ipairs(s.promotions) do
        h[#h + 1] = "<tr>" .. td(fmt(p.round)) .. td("<code>" .. esc(p.candidate) .. "</code>", nil, "l")
          .. td(fmt(p.ratio)) .. td(fmt(p.lo) .. " to " .. fmt(p.hi)) .. td(fmt(p.mean_speedup))
          .. td(fmt(p.score)) .. td('<a href="#' .. ev_anchor(p.id) .. '">' .. esc(p.id) .. "</a>") .. "</tr>"
      end
      h[#h + 1] = "</table>"
    end
  end
  h[#h + 1] = '<h2 id="evidence">Gate evidence</h2>'
  for i, s in ipairs(sums) do
    for _, p in ipairs(s.promotions) do
      local pa = string.format(' data-promotion="%s"', esc(p.id))
      h[#h + 1] = string.format('<section class="evidence" id="%s">', ev_anchor(p.id))
      h[#h + 1] = string.format("<h3>%s, round %s: %s</h3>", letter(i), fmt(p.round), esc(p.id))
      h[#h + 1] = string.format("<p>Candidate <code>%s</code> replaced <code>%s</code>: %s</p>",
        esc(p.candidate), esc(p.incumbent or "?"), esc(p.reason or "-"))
      h[#h + 1] = "<table><tr><th class=\"l\">paired comparison</th><th>ratio (incumbent / candidate latency, "
        .. "geometric mean)</th><th>lower bound</th><th>upper bound</th><th>margin</th><th>repetitions</th>"
        .. "<th class=\"l\">sampled workloads</th></tr><tr>" .. td("representative", nil, "l")
        .. td(fmt(p.ratio), pa .. ' data-key="ratio"') .. td(fmt(p.lo), pa .. ' data-key="lo"')
        .. td(fmt(p.hi), pa .. ' data-key="hi"') .. td(fmt(p.margin)) .. td(fmt(p.reps))
        .. td(esc(#(p.sampled or {}) .. " workloads"), nil, "l") .. "</tr></table>"
      h[#h + 1] = "<table><tr><th class=\"l\">sampled workload</th><th>candidate median (ms)</th>"
        .. "<th>incumbent median (ms)</th><th>ratio of medians</th><th>repetitions</th></tr>"
      for _, x in ipairs(p.paired) do
        h[#h + 1] = "<tr>" .. td(esc(x.label), nil, "l") .. td(ms(x.candidate_ms)) .. td(ms(x.incumbent_ms))
          .. td(fmt(x.ratio)) .. td(fmt(x.n)) .. "</tr>"
      end
      h[#h + 1] = "</table>"
      h[#h + 1] = "<table><tr><th class=\"l\">sweep workload</th><th>status</th><th>latency (ms)</th>"
        .. "<th>reference (ms)</th><th>speedup</th><th class=\"l\">evaluation record</th></tr>"
      for _, x in ipairs(p.sweep) do
        h[#h + 1] = "<tr>" .. td(esc(x.label), nil, "l") .. td(esc(x.status or "?")) .. td(ms(x.latency_ms))
          .. td(ms(x.reference_ms))
          .. td(fmt(x.speedup), pa .. string.format(' data-workload="%s" data-key="speedup"', esc(x.uuid)))
          .. td("<code>" .. esc(x.evaluation or "?") .. "</code>", nil, "l") .. "</tr>"
      end
      h[#h + 1] = string.format("<tr>%s%s%s%s%s%s</tr></table>", td("mean (S_d with correctness " ..
        fmt(p.correct) .. ")", nil, "l"), td(""), td(""), td(""), td(fmt(p.mean_speedup), pa ..
        ' data-key="mean_speedup"'), td(""))
      h[#h + 1] = string.format("<p>Finalist: %d of %d correctness evaluations passed (%s seeds per "
        .. "workload); sanitizer: %s.</p>", p.finalist.passed, p.finalist.evaluations,
        fmt(p.finalist_trials), esc(p.sanitizer or "-"))
      h[#h + 1] = string.format("<details><summary>%d evaluation records</summary><p>", #p.evidence)
      for _, id in ipairs(p.evidence) do h[#h + 1] = "<code>" .. esc(id) .. "</code> " end
      h[#h + 1] = "</p></details>"
      h[#h + 1] = string.format('<p><a href="#promotions-%s">back to %s\'s promotions</a></p></section>',
        esc(s.run), letter(i))
    end
  end
end

local function cand_anchor(run, r) return string.format("cand-%s-%d-%d", run, r.round, r.index) end

-- A unified diff as HTML: added lines, removed lines and hunk heads marked.
local function html_diff(text)
  local out = {}
  for line in text:gmatch("([^\n]*)\n") do
    local c = line:sub(1, 1)
    local class = c == "+" and "a" or c == "-" and "d" or c == "@" and "h" or nil
    out[#out + 1] = class and ('<span class="' .. class .. '">' .. esc(line) .. "</span>") or esc(line)
  end
  return table.concat(out, "\n")
end

-- Every round of every run: a table of its candidates (verdict, the check
-- that decided, the paired figures), then each candidate's source and its
-- diff against the incumbent it was measured against.
local function html_rounds(sums, h)
  h[#h + 1] = '<h2 id="rounds">Rounds</h2>'
  h[#h + 1] = "<p>Every model call of every round: the candidate it gave (if any), the verdict, the "
    .. "gate step that decided it (paired comparison with the incumbent, sweep over every workload, "
    .. "finalist correctness and sanitizer; or compile, budget), the paired ratio (incumbent / "
    .. "candidate latency) with its 95% interval, and S_d of a candidate that passed the sweep. A "
    .. "candidate links to its source and its diff against the incumbent.</p>"
  for i, s in ipairs(sums) do
    local rows = s.round_rows or {}
    h[#h + 1] = string.format('<h3 id="rounds-%s">%s: %s (%s)</h3>', esc(s.run), letter(i),
      esc(s.policy or "?"), esc(s.run))
    if #rows == 0 then
      h[#h + 1] = "<p>No round yet: the seed is the incumbent.</p>"
    else
      h[#h + 1] = string.format('<table class="rounds" data-run="%s"><tr><th>round</th><th class="l">model</th>'
        .. '<th class="l">candidate</th><th class="l">verdict</th><th class="l">decided by</th>'
        .. '<th>paired ratio</th><th>95%% interval</th><th>S_d</th><th class="l">reason</th></tr>', esc(s.run))
      for _, r in ipairs(rows) do
        local cand = r.candidate and string.format('<a href="#%s"><code>%s</code></a>',
          cand_anchor(s.run, r), esc(short(r.candidate))) or "-"
        local verdict = esc(r.verdict) .. (r.rejected_for and (" (" .. esc(r.rejected_for) .. ")") or "")
        if r.promotion then verdict = '<a href="#' .. ev_anchor(r.promotion) .. '">' .. verdict .. "</a>" end
        local reason = tostring(r.reason or "")
        if #reason > 240 then reason = reason:sub(1, 240) .. "…" end
        h[#h + 1] = string.format('<tr class="%s" data-round="%d">', r.verdict == "promoted" and "promoted"
          or "rejected", r.round) .. td(fmt(r.round)) .. td(esc(r.model or "-"), nil, "l") .. td(cand, nil, "l")
          .. td(verdict, nil, "l") .. td(esc(r.check), nil, "l") .. td(ratio(r.ratio)) .. td(esc(interval(r)))
          .. td(fmt(r.score)) .. td(esc(reason), nil, "l") .. "</tr>"
      end
      h[#h + 1] = "</table>"
      for _, r in ipairs(rows) do
        if r.candidate then
          local src = s.sources and s.sources[r.candidate]
          local inc = r.incumbent and s.sources and s.sources[r.incumbent]
          h[#h + 1] = string.format('<details class="candidate" id="%s"><summary>round %d, call %d: '
            .. "<code>%s</code> %s (%s)</summary>", cand_anchor(s.run, r), r.round, r.index,
            esc(short(r.candidate)), esc(r.verdict), esc(r.check))
          if r.plan and r.plan ~= "" then h[#h + 1] = "<p>The model's plan: " .. esc(r.plan) .. "</p>" end
          if r.reason then h[#h + 1] = "<p>Verdict: " .. esc(r.reason) .. "</p>" end
          if src and inc then
            local d = diff.unified(inc, src)
            h[#h + 1] = string.format("<p>Diff against the incumbent <code>%s</code>:</p>", esc(short(r.incumbent)))
            h[#h + 1] = d == "" and "<p>(the same source)</p>" or ('<pre class="diff">' .. html_diff(d) .. "</pre>")
          end
          h[#h + 1] = src and ("<p>Source:</p><pre>" .. esc(src) .. "</pre>") or "<p>(source not in the store)</p>"
          h[#h + 1] = "</details>"
        end
      end
    end
  end
end

-- opts.live: the report of one run under way (khlua policies/X.lua --report
-- FILE): a heading with its state, and the page reloads itself every 30 s
-- while the run is running.
function M.html(sums, opts)
  opts = opts or {}
  local h = { "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">' }
  local live = opts.live and sums[1]
  if live and live.status == "running" then h[#h + 1] = '<meta http-equiv="refresh" content="30">' end
  local names = {}
  for i, s in ipairs(sums) do names[i] = letter(i) .. " " .. (s.policy or "?") end
  if live then
    h[#h + 1] = "<title>khlua run " .. esc(live.run) .. " (" .. esc(live.status or "?") .. ")</title>"
  else
    h[#h + 1] = "<title>khlua compare: " .. esc(table.concat(names, " vs ")) .. "</title>"
  end
  h[#h + 1] = "<style>" .. CSS .. "</style></head><body>"
  if live then
    h[#h + 1] = string.format('<h1>Run <code>%s</code></h1><p id="state" data-status="%s" data-rounds="%d">'
      .. "Policy %s on task %s: <b>%s</b>%s, %d of %s rounds, %d candidates, %d promoted; best speedup "
      .. "over the reference %s (incumbent <code>%s</code>). Written %s.</p>", esc(live.run),
      esc(live.status or "?"), live.rounds, esc(live.policy or "?"), esc(live.task_name), esc(live.status or "?"),
      live.settings and live.settings.stop_reason and (" (" .. esc(live.settings.stop_reason) .. ")") or "",
      live.rounds, tostring(live.rounds_budget or "?"), live.candidates, live.accepted, fmt(live.best_speedup),
      esc(short(live.incumbent)), os.date("!%Y-%m-%d %H:%M:%S UTC"))
    h[#h + 1] = "<ul>"
  else
    h[#h + 1] = "<h1>Run comparison</h1><ul>"
  end
  for i, s in ipairs(sums) do
    h[#h + 1] = string.format("<li>%s: <code>%s</code>, policy %s, task %s</li>", letter(i), esc(s.run),
      esc(s.policy or "?"), esc(s.task_name))
  end
  h[#h + 1] = '</ul><nav><a href="#table">table</a><a href="#figures">figures</a><a href="#plots">plots</a>'
    .. '<a href="#rounds">rounds</a><a href="#settings">settings</a><a href="#promotions">promotions</a>'
    .. '<a href="#evidence">evidence</a></nav>'
  html_tables(sums, h)
  html_plots(sums, h)
  html_rounds(sums, h)
  html_settings(sums, h)
  html_promotions(sums, h)
  h[#h + 1] = "</body></html>"
  return table.concat(h, "\n") .. "\n"
end

-- The live report of one run (--report FILE): its summary as HTML, written
-- beside FILE and renamed over it, so a browser or a script reading FILE sees
-- the previous page or the new one, never half of one.  true, or nil, msg.
function M.write_live(db, run_id, path)
  local s, msg = M.summarize(db, run_id)
  if not s then return nil, msg end
  local html = M.html({ s }, { live = true })
  local tmp = path .. ".tmp"
  local f, e = io.open(tmp, "wb")
  if not f then return nil, tostring(e) end
  local ok, e2 = f:write(html)
  local closed, e3 = f:close()
  if not ok or not closed then
    os.remove(tmp)
    return nil, tmp .. ": " .. tostring(e2 or e3)
  end
  local moved, e4 = os.rename(tmp, path)
  if not moved then os.remove(tmp); return nil, tostring(e4) end
  return true
end

return M
