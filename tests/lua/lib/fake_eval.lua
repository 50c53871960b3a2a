-- fake_eval.lua: a deterministic stand-in for kh.eval, for the controller's
-- tests only (injected through lib.evaluate.use, or --fake-evaluator FILE).
-- It knows the replay ladder (tests/fixtures/replay/ctl/ladder.json): each
-- step's source is recognised by its text and gets the step's correctness
-- and speed; the task's trusted reference has speed 1.  Latency per workload
-- = base(batch) / speed, times 1 +- 1.5% noise drawn from (source, seed,
-- workload, protocol call), so paired figures vary like measurements do.
-- F.slow[key] = factor slows one source down (an incumbent that regressed).
-- A timed verdict carries 24 raw samples (khlua.samples_ns) around its latency.
local kh = require "kh"

local F = { slow = {}, calls = 0, log = {} }

local here = debug.getinfo(1, "S").source:gsub("^@", ""):match("^(.*)/[^/]*$") or "."
local root = here .. "/../../fixtures/replay/ctl"

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local ladder = kh.json.decode(read(root .. "/ladder.json"))
local by_source = {}
for key, b in pairs(ladder.steps) do
  local rec = kh.json.decode(read(root .. "/" .. key .. "/reply.json"))
  local x = kh.llm.extract(rec.text)
  assert(x.status == "ok", key .. ": " .. tostring(x.message))
  by_source[x.source] = { key = key, correct = b.correct, speed = b.speed }
end

local function hash_num(s)
  local h = kh.store.hash(s)
  return tonumber(h:sub(1, 12), 16)
end

local function noise(...)
  local u = (hash_num(table.concat({ ... }, "|")) % 1000000) / 1000000
  return 1 + (u - 0.5) * 0.03
end

-- task: a path, or the value kh.task.load gave (what the controller passes)
local function workloads(task)
  if type(task) ~= "string" then
    return task:workloads(task:definitions()[1])
  end
  local ts <close> = assert(kh.task.load(task))
  local name = ts:definitions()[1]
  return ts:workloads(name)
end

function F.behaviour(source)
  local b = by_source[source]
  if b then return b end
  -- the task's reference (or an unknown source): correct at reference speed
  return { key = "reference", correct = true, speed = ladder.reference.speed }
end

-- KH_FAKE_EVAL_DELAY=SECONDS: each evaluation of a ladder candidate takes
-- that long (a slow measurement, for the wall-time budget's tests; the
-- task's own solutions stay instant)
local DELAY = tonumber(os.getenv("KH_FAKE_EVAL_DELAY") or "")

-- protocol "paired" (kh.eval's, eval.h kh_eval_paired): the candidate and
-- the incumbent measured reps times, alternately, each measurement a
-- recorded screen, the ratios' geometric mean and bootstrap interval from
-- lib.stats (the engine's figures for the same ratios and seed).
local function paired(task_path, cand, opts)
  local stats = require "lib.stats"
  local seed = opts.seed or 1
  local out = { protocol = "paired", measure_protocol = opts.measure_protocol or "screen",
    reps = opts.reps or 5, seed = seed, alpha = opts.alpha or 0.05,
    resamples = opts.resamples or 2000, workloads = {}, ratios = {}, order = {}, evidence = {},
    candidate = {}, incumbent = {}, candidate_ms = {}, incumbent_ms = {}, contended = 0 }
  local purpose = opts.purpose or "paired"
  for r = 1, out.reps do
    local order = (r % 2 == 1) and { "candidate", "incumbent" } or { "incumbent", "candidate" }
    local ms = {}
    for _, who in ipairs(order) do
      local o = {}
      for k, v in pairs(opts) do o[k] = v end
      o.protocol, o.incumbent, o.reps, o.alpha, o.resamples = out.measure_protocol, nil, nil, nil, nil
      o.seed, o.purpose = seed * 1000 + r, purpose .. ":" .. who
      local traces = F.evaluate(task_path, who == "candidate" and cand or opts.incumbent, o)
      out.order[#out.order + 1] = who
      ms[who] = {}
      for _, t in ipairs(traces) do
        local u, e = t.workload.uuid, t.evaluation
        if r == 1 and who == order[1] then out.workloads[#out.workloads + 1] = u end
        table.insert(out[who], t)
        if e.khlua.record then out.evidence[#out.evidence + 1] = e.khlua.record end
        if e.status == "PASSED" then
          local k = who .. "_ms"
          out[k][u] = out[k][u] or {}
          table.insert(out[k][u], e.performance.latency_ms)
          ms[who][u] = e.performance.latency_ms
        elseif not out.failed then
          out.failed = { who = who, status = e.status, workload = u, check = e.khlua.failed_check }
        end
      end
    end
    if out.failed then return out end
    for _, u in ipairs(out.workloads) do
      out.ratios[#out.ratios + 1] = ms.incumbent[u] / ms.candidate[u]
    end
  end
  out.ratio = stats.geomean(out.ratios)
  out.lo, out.hi = stats.bootstrap(out.ratios, stats.geomean, { resamples = out.resamples,
    alpha = out.alpha, seed = seed })
  return out
end

function F.evaluate(task_path, sol, opts)
  opts = opts or {}
  if opts.protocol == "paired" then return paired(task_path, sol, opts) end
  F.calls = F.calls + 1
  local src = sol.sources[1].content
  local b = F.behaviour(src)
  if DELAY and b.key ~= "reference" then kh.time.sleep(DELAY) end
  F.log[#F.log + 1] = { key = b.key, purpose = opts.protocol, workloads = opts.workloads,
    trials = opts.trials }
  local want = nil
  if type(opts.workloads) == "table" then
    want = {}
    for _, u in ipairs(opts.workloads) do want[u] = true end
  end
  local out = {}
  for _, w in ipairs(workloads(task_path)) do
    if not want or want[w.uuid] then
      local base = 0.002 + 0.0001 * w.axes.batch_size
      -- the provenance kh.eval gives every verdict (the store requires it)
      local e = { status = b.correct and "PASSED" or "INCORRECT_NUMERICAL", khlua = {
        failed_check = (not b.correct) and "poison" or nil, protocol = opts.protocol or "official",
        hashes = { source = kh.store.hash(src) }, seeds = { opts.seed or 0 },
        host = "fake-evaluator", gpu_uuid = "GPU-fake-0",
        -- the GPU's kernel time on the workload (the busy fraction's
        -- numerator), and its active time (the timing batches whole)
        gpu_kernel_seconds = 0.002 * noise("kernel", src, opts.seed or 0, w.uuid, F.calls),
        gpu_active_seconds = 0.005 * noise("active", src, opts.seed or 0, w.uuid, F.calls) } }
      if b.correct then
        e.correctness = { max_absolute_error = 0.001, max_relative_error = 0.001 }
        if opts.timing ~= false then
          local n = noise(src, opts.seed or 0, w.uuid, F.calls)
          e.performance = { latency_ms = base / b.speed * n * (F.slow[b.key] or 1),
            reference_latency_ms = base * noise("ref", opts.seed or 0, w.uuid, F.calls) }
          e.performance.speedup_factor = e.performance.reference_latency_ms / e.performance.latency_ms
          -- raw samples (ns) around the latency, as kh.eval returns them with record = false
          local xs = {}
          for i = 1, 24 do
            xs[i] = e.performance.latency_ms * 1e6 * noise("sample", src, opts.seed or 0, w.uuid, F.calls, i)
          end
          e.khlua.samples_ns = xs
        end
      else
        e.correctness = { max_absolute_error = 3.5, max_relative_error = 2.0 }
      end
      out[#out + 1] = { definition = "rmsnorm_h512", solution = sol.name,
        workload = { uuid = w.uuid, axes = w.axes }, evaluation = e }
    end
  end
  if opts.store and opts.record ~= false then F.record(opts.store, sol, out, opts) end
  return out
end

-- What kh.eval does with opts.store: each verdict an evaluation record (its
-- candidate put by the engine, under its one identity), linked to the run,
-- round and purpose; the trace carries the id (khlua.record), the raw
-- samples a blob.
function F.record(db, sol, traces, opts)
  assert(db:update(function(tx)
    -- the engine's writers, as kh.eval's recorder calls them
    local task = assert(tx:put_task { name = sol.definition })
    local cand = tx:put_candidate(sol, task)
    for _, t in ipairs(traces) do
      local e, kx = t.evaluation, t.evaluation.khlua
      local blob = nil
      if kx.samples_ns then
        local parts = {}
        for i, x in ipairs(kx.samples_ns) do parts[i] = string.pack("<d", x) end
        blob = tx:put_blob(table.concat(parts))
        kx.samples_ns, kx.samples_blob = nil, blob
      end
      kx.record = assert(tx:put_evaluation(t, { task = task, candidate = cand,
        timing = opts.timing ~= false, purpose = opts.purpose, run = opts.run,
        round_index = opts.run and opts.round_index or nil, solution = sol.name,
        samples_blob = blob, definition = sol.definition }))
      kx.stored = "yes"
    end
  end))
end

return F
