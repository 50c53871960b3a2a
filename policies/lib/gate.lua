-- gate.lua: the promotion gate, as rules over engine measurements.
--
-- A candidate replaces the incumbent only after three steps, each returning
-- a plain table {pass, reason, ...figures, evidence = {evaluation ids}}:
--
-- 1. representative(): a paired comparison against the same-round incumbent
--    on sampled workloads, measured by the engine in one call (kh.eval with
--    protocol "paired", docs/evaluation.md): R repetitions, each measuring
--    candidate and incumbent back to back with the `screen` protocol on the
--    same workloads and inputs, the order alternating (A B, B A, ...) so a
--    slow drift of the machine falls on both; every (repetition, workload)
--    gives a ratio incumbent / candidate latency, and a percentile bootstrap
--    (seeded, so a decision replays from its evidence: lib.stats gives the
--    engine's figures) of their geometric mean gives a one-sided lower
--    bound.  Pass: correct everywhere sampled and lower bound > 1 + margin.
--    Both are measured in the repetition where one fails, so the
--    incumbent's same-round latencies always come back, for regression
--    detection.  On the host backend a timed call that
--    waited on the run queue (another process had the core) is taken again
--    by the engine (hostbench.h); when its retakes ran out and more than
--    max_contended (10%) of a measurement's timed calls still include such
--    a wait, a pass is refused (rejected_for "contended"): a busy machine's
--    numbers are no evidence of a gain.  A candidate slower than stop_below
--    (0.5: half the incumbent's speed) on every sampled workload of the
--    first two repetitions (both orders) is not measured further: its
--    interval from those ratios decides (stopped_after in the step), and a
--    kernel many times slower costs seconds per repetition.  0 measures
--    every repetition.
-- 2. sweep(): every workload, correct on all; the score
--    S_d = c_d * mean_w(b_w / l_w), c_d the pass rate, b the reference
--    (baseline) latency and l the candidate's.
-- 3. finalist(): correctness replayed with many seeds (no timing): every
--    workload gets finalist_trials (100) seeds while the element budget
--    lasts (finalist_elements output elements compared in all, shared out
--    from the smallest workload up), and never fewer than
--    finalist_min_trials (10); at least finalist_trials seeds in all.  The
--    first batch (finalist_min_trials on every workload) measures each
--    workload's size; later batches go to the workloads still short.  A
--    14-workload RMSNorm task with up to 59M-element outputs would
--    otherwise move 75 GB per finalist between worker and coordinator.
--    Then the sanitizer where the backend has one: on
--    CUDA, kh.eval's `sanitize` (compute-sanitizer memcheck, racecheck,
--    initcheck on `sanitize_workloads` workloads; an error in the
--    candidate's kernels rejects it, a machine without compute-sanitizer
--    records that and does not); recorded as unavailable on the host
--    backend.  `sanitize = false` skips it.
-- 4. official(): the finalist timed under the official protocol on every
--    workload (FlashInfer-Bench's timing; the sweep's is the cheaper
--    `screen`), correct on all.  These are the evaluations `khlua store
--    export --format fib-trace --run RUN` writes by default: the gate's own
--    screening measurements, which a candidate it rejected may have PASSED,
--    stay out of a leaderboard.  `official = false` skips it.
--
-- `measure(solution, opts, purpose)` is the caller's: it runs the evaluation
-- (lib.evaluate), stores the verdicts and returns {summary, ids} or nil, msg.
local kh = require "kh"
local stats = require "lib.stats"

local M = {}

M.defaults = { margin = 0.02, reps = 5, sample = 2, alpha = 0.05, resamples = 2000,
  stop_below = 0.5,
  finalist_trials = 100, finalist_batch = 25, finalist_min_trials = 10,
  finalist_elements = 2 ^ 31, shapes = 8, official = true, max_contended = 0.1,
  sanitize = { "memcheck", "racecheck", "initcheck" }, sanitize_workloads = 1 }

local function opt(o, k)
  if o and o[k] ~= nil then return o[k] end
  -- no seed given: one from the OS (the controller draws one per run and
  -- saves it, so a run is reproduced with --seed)
  -- once per options table (kept there), so one gate step uses one seed
  if k == "seed" then
    local s = assert(kh.secure_seed(40))
    if o then o.seed = s end
    return s
  end
  return M.defaults[k]
end
M.option = opt

-- Sampled workloads: `sample` of them, drawn with the gate's seed (the
-- same draw for candidate and incumbent).
function M.sample(workloads, n, seed)
  local idx = {}
  for i = 1, #workloads do idx[i] = i end
  local rand = stats.rng(seed)
  for i = #idx, 2, -1 do
    local j = 1 + math.floor(rand() * i)
    idx[i], idx[j] = idx[j], idx[i]
  end
  local out = {}
  for i = 1, math.min(n, #idx) do out[i] = workloads[idx[i]].uuid end
  table.sort(out)
  return out
end

local function fail_reason(who, s)
  local f = s.failed or {}
  return string.format("%s %s on workload %s%s", who, tostring(f.status), tostring(f.workload),
    type(f.check) == "string" and (" (check " .. f.check .. ")") or "")
end

function M.representative(measure, cand, inc, workloads, o)
  local reps, margin = opt(o, "reps"), opt(o, "margin")
  local uuids = M.sample(workloads, opt(o, "sample"), opt(o, "seed"))
  local g = { step = "representative", workloads = uuids, reps = reps, margin = margin }
  -- one call: the engine interleaves the two and returns the ratio with its interval
  local m, msg, code = measure(cand, { workloads = uuids, protocol = "paired", incumbent = inc,
    reps = reps, trials = 1, alpha = opt(o, "alpha"), resamples = opt(o, "resamples"),
    stop_below = opt(o, "stop_below"), seed = opt(o, "seed") }, "representative")
  if not m then return nil, msg, code end
  local p = m.paired
  g.evidence, g.ratios, g.seed = m.ids, p.ratios, p.seed
  g.stopped_after = p.stopped_after
  g.incumbent_ms, g.candidate_ms, g.contended = p.incumbent_ms, p.candidate_ms, p.contended
  if p.failed then
    -- both were measured: the incumbent's figures still serve regression detection
    g.pass = false
    g.reason = fail_reason(p.failed.who, { failed = p.failed })
    g.rejected_for = p.failed.who == "candidate" and "incorrect" or "incumbent_failed"
    return g
  end
  g.ratio, g.lo, g.hi = p.ratio, p.lo, p.hi
  g.pass = g.lo > 1 + margin
  local busy = opt(o, "max_contended")
  if g.pass and (g.contended or 0) > busy then
    -- samples that include another process's time are no evidence of a
    -- gain (a busy incumbent measurement looks like a faster candidate)
    g.pass = false
    g.rejected_for = "contended"
    g.reason = string.format("the machine was too busy to time it: %.0f%% of one measurement's "
      .. "timed calls waited on the run queue after the retakes ran out (at most %.0f%%); ratio "
      .. "%.3f not taken", 100 * g.contended, 100 * busy, g.ratio)
  elseif g.pass then
    g.reason = string.format("faster: ratio %.3f, %d%% lower bound %.3f > 1 + %.3f",
      g.ratio, math.floor((1 - opt(o, "alpha")) * 100 + 0.5), g.lo, margin)
  elseif g.hi < 1 - margin then
    -- slower beyond the same margin: a regression, not noise
    g.rejected_for = "slower"
    g.reason = string.format("slower than the incumbent: ratio %.3f, upper bound %.3f < 1 - %.3f",
      g.ratio, g.hi, margin)
  else
    g.rejected_for = "not_faster"
    g.reason = string.format("no gain beyond noise: ratio %.3f, lower bound %.3f <= 1 + %.3f",
      g.ratio, g.lo, margin)
  end
  if g.stopped_after then
    g.reason = g.reason .. string.format(" (after %d of %d repetitions: every ratio below %g)",
      g.stopped_after, reps, opt(o, "stop_below"))
  end
  return g
end

function M.sweep(measure, cand, workloads, o)
  local m, msg, code = measure(cand, { workloads = "all", protocol = "screen", trials = 3,
    seed = opt(o, "seed") }, "sweep")
  if not m then return nil, msg, code end
  local g = { step = "sweep", evidence = m.ids, workloads = #workloads }
  local s = m.summary
  g.correct = s.passed / math.max(s.total, 1)
  local rs = {}
  for _, w in ipairs(workloads) do
    local v = s.by_uuid[w.uuid]
    if v and v.status == "PASSED" and v.latency_ms and v.reference_latency_ms then
      rs[#rs + 1] = v.reference_latency_ms / v.latency_ms
    end
  end
  g.mean_speedup = #rs > 0 and stats.mean(rs) or 0
  g.score = g.correct * g.mean_speedup
  g.pass = s.ok and s.total == #workloads
  g.reason = g.pass and string.format("correct on all %d workloads, score %.3f", s.total, g.score)
    or fail_reason("candidate", s)
  if not g.pass then g.rejected_for = "incorrect" end
  return g
end

-- The finalist's official-protocol timing (step 4): every workload, its own
-- seed (seed * 1000 + 1001: the paired step's repetitions get seeds the
-- engine derives from seed by splitmix64).
function M.official(measure, cand, workloads, o)
  local m, msg, code = measure(cand, { workloads = "all", protocol = "official", trials = 1,
    seed = opt(o, "seed") * 1000 + 1001 }, "official")
  if not m then return nil, msg, code end
  local g = { step = "official", evidence = m.ids, workloads = #workloads }
  local s = m.summary
  local rs = {}
  for _, w in ipairs(workloads) do
    local v = s.by_uuid[w.uuid]
    if v and v.status == "PASSED" and v.latency_ms and v.reference_latency_ms then
      rs[#rs + 1] = v.reference_latency_ms / v.latency_ms
    end
  end
  g.mean_speedup = #rs > 0 and stats.mean(rs) or 0
  g.pass = s.ok and s.total == #workloads
  g.reason = g.pass and string.format("official protocol: correct on all %d workloads, mean speedup %.3f",
    s.total, g.mean_speedup) or fail_reason("candidate", s)
  if not g.pass then g.rejected_for = "incorrect" end
  return g
end

-- Seeds per workload (see the header): sizes[uuid] = elements per trial.
function M.finalist_plan(sizes, trials, min_trials, budget)
  local ws = {}
  for u, e in pairs(sizes) do ws[#ws + 1] = { uuid = u, e = math.max(e or 0, 0) } end
  table.sort(ws, function(a, b) if a.e ~= b.e then return a.e < b.e end return a.uuid < b.uuid end)
  local plan, left, total = {}, budget, 0
  for i, w in ipairs(ws) do
    local share = left / (#ws - i + 1)
    local t = w.e > 0 and math.floor(share / w.e) or trials
    t = math.max(min_trials, math.min(trials, t))
    plan[w.uuid] = t
    left = left - t * w.e
    total = total + t
  end
  -- at least `trials` seeds in all: the cheapest workloads take the rest
  for _, w in ipairs(ws) do
    if total >= trials then break end
    local add = math.min(trials - plan[w.uuid], trials - total)
    plan[w.uuid] = plan[w.uuid] + add
    total = total + add
  end
  return plan, total
end

-- kh.eval takes at most 64 trials a call: the seeds go in batches of at
-- most finalist_batch, each with its own base seed.
function M.finalist(measure, cand, backend, o)
  local trials, batch = opt(o, "finalist_trials"), opt(o, "finalist_batch")
  local min_trials = math.min(opt(o, "finalist_min_trials"), trials)
  local g = { step = "finalist", trials = trials, evidence = {},
    sanitizer = backend == "cuda" and "not run" or "unavailable on the host backend" }
  local call = 0
  local function run(workloads, n, shapes)
    call = call + 1
    local m, msg, code = measure(cand, { workloads = workloads, trials = n, timing = false,
      seed = opt(o, "seed") * 7919 + call, shapes = shapes }, "finalist")
    if not m then return nil, msg, code end
    for _, id in ipairs(m.ids) do g.evidence[#g.evidence + 1] = id end
    if not m.summary.ok then
      g.pass, g.rejected_for = false, "incorrect"
      g.reason = fail_reason("candidate", m.summary) .. string.format(" (seed batch %d)", call)
    end
    return m
  end
  -- first batch: every workload, which also gives their sizes, and
  -- `shapes` admissible shapes that are not in the workload list (a kernel
  -- correct only on the listed shapes fails there: docs/evaluation.md)
  local nshapes = opt(o, "shapes")
  local m, msg, code = run("all", math.min(min_trials, batch), nshapes > 0 and nshapes or nil)
  if not m then return nil, msg, code end
  if g.pass == false then return g end
  local sizes, done = {}, {}
  g.shapes = 0
  for u, w in pairs(m.summary.by_uuid or {}) do
    if u:match("^shape%-") then
      g.shapes = g.shapes + 1
    else
      sizes[u] = w.elements or 0
      done[u] = math.min(min_trials, batch)
    end
  end
  local plan, total = M.finalist_plan(sizes, trials, min_trials, opt(o, "finalist_elements"))
  if next(sizes) == nil then -- a measurer without per-workload figures: every seed everywhere
    local d = math.min(min_trials, batch)
    while d < trials do
      local n = math.min(batch, trials - d)
      m, msg, code = run("all", n)
      if not m then return nil, msg, code end
      if g.pass == false then return g end
      d = d + n
    end
    plan, total = nil, nil
  end
  while plan do
    local need, ws = math.huge, {}
    for u, t in pairs(plan) do
      if t > done[u] then
        ws[#ws + 1] = u
        need = math.min(need, t - done[u])
      end
    end
    if #ws == 0 then break end
    table.sort(ws)
    local n = math.min(batch, need)
    m, msg, code = run(ws, n)
    if not m then return nil, msg, code end
    if g.pass == false then return g end
    for _, u in ipairs(ws) do done[u] = done[u] + n end
  end
  if plan then
    g.seeds_by_workload, g.seeds_total = done, total
    local lo, hi = math.huge, 0
    for _, t in pairs(done) do lo, hi = math.min(lo, t), math.max(hi, t) end
    g.seeds_min, g.seeds_max = lo, hi
  end
  local tools = opt(o, "sanitize")
  if backend == "cuda" and tools and #tools > 0 then
    local t0 = kh.time.now()
    local m, msg, code = measure(cand, { workloads = opt(o, "sanitize_workloads"), trials = 1,
      timing = false, seed = opt(o, "seed") * 7919, sanitize = tools }, "sanitizer")
    -- of the step's seconds (the controller's), the sanitizer's
    g.sanitizer_s = kh.time.now() - t0
    if not m and code == "ENOTFOUND" and tostring(msg):find("compute%-sanitizer") then
      g.sanitizer = "not run: " .. tostring(msg)
    elseif not m then
      return nil, msg, code
    else
      for _, id in ipairs(m.ids) do g.evidence[#g.evidence + 1] = id end
      if not m.summary.ok then
        g.pass, g.rejected_for = false, "sanitizer"
        g.reason = fail_reason("candidate", m.summary)
        g.sanitizer = g.reason
        return g
      end
      g.sanitizer = string.format("%s: clean on %d workload(s)", table.concat(tools, ", "),
        m.summary.total)
    end
  end
  g.pass = true
  if g.seeds_min and g.seeds_min < g.seeds_max then
    g.reason = string.format("correct on every workload over %d to %d seeds each (%d in all; "
      .. "element budget %.3g)", g.seeds_min, g.seeds_max, g.seeds_total,
      opt(o, "finalist_elements"))
  else
    g.reason = string.format("correct over %d seeds on every workload", g.seeds_min or trials)
  end
  if g.shapes > 0 then
    g.reason = g.reason .. string.format(", and on %d admissible shapes not in the list", g.shapes)
  end
  return g
end

return M
