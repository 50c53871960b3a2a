-- test_compare.lua: `khlua policies/compare.lua` over two runs recorded in the
-- test (plateau_switch and agent_assisted on the host rmsnorm task, replay
-- ladder, deterministic fake evaluator): the table names both runs with the
-- figures the store holds, --json and --csv agree, the SVG is well-formed
-- XML with one polyline per run, the per-workload bars and latency boxes
-- carry the store's figures (recomputed here from the evaluation records and
-- the raw samples blobs), the HTML holds the tables, the charts, the settings
-- and each promotion's evidence.  The Chromium render: test_compare_render.lua.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
package.path = SRC .. "/policies/?.lua;" .. SRC .. "/tests/lua/lib/?.lua;" .. package.path
local ctl = require "lib.controller"
local ev = require "lib.evaluate"
local policy = require "lib.policy"
local cli = require "lib.cli"
local report = require "lib.report"
local llm = require "lib.llm"
local fake = require "fake_eval"

local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local LADDER = SRC .. "/tests/fixtures/replay/ctl"
local SPECS = "replay:" .. LADDER .. "/a,replay:" .. LADDER .. "/b"
local COMPARE = SRC .. "/policies/compare.lua"
local NW -- the task's workloads
do
  local ts <close> = assert(kh.task.load(TASK))
  NW = #ts:workloads(ts:definitions()[1])
end

-- Two runs in one store, made once for every test below.
local DIR = T.tmpdir()
local STORE = DIR .. "/store"
local RUNS = {}
do
  local db = assert(kh.store.open(STORE, { nosync = true }))
  for i, spec in ipairs({ { "plateau_switch", 6 }, { "agent_assisted", 3 }, { "agent_assisted", 1 } }) do
    local P = assert(policy.load(SRC .. "/policies/" .. spec[1] .. ".lua"))
    local cfg = { task = TASK, model_specs = SPECS, rounds = spec[2], plateau = 2, db = db,
      quiet = true, gate = { seed = math.random(1, 1000) } }
    assert(cli.resolve_models(cfg))
    -- the replay provider costs nothing: run A's calls get prices, as a priced
    -- model's would (every third of unknown price)
    local cost, calls = llm.cost, 0
    if i == 1 then
      llm.cost = function()
        calls = calls + 1
        if calls % 3 == 0 then return nil end
        return math.random(100, 9999) / 1e5
      end
    end
    ev.use(fake.evaluate)
    local res, msg = ctl.run(P, cfg)
    ev.use(nil)
    llm.cost = cost
    assert(res, msg)
    RUNS[i] = res
  end
  db:close()
end

local function compare(...)
  return T.khlua("--store", STORE, COMPARE, ...)
end

-- the figures straight from the store, computed here independently of report.lua
local function expected(run_id)
  local db = assert(kh.store.open(STORE))
  local run = db:get(run_id)
  local promos = db:query { run = run_id, type = "promotion" }
  table.sort(promos, function(a, b) return a.round_index < b.round_index end)
  local rounds = db:query { run = run_id, type = "round" }
  db:close()
  local cands, acc, rej = 0, 0, {}
  for _, r in ipairs(rounds) do
    for _, p in ipairs(r.verdicts) do
      if p.candidate then cands = cands + 1 end
      if p.accepted then acc = acc + 1 elseif p.rejected_for then rej[p.rejected_for] = (rej[p.rejected_for] or 0) + 1 end
    end
  end
  local last = promos[#promos]
  -- the GPU's kernel time over the run's evaluations
  local db2 = assert(kh.store.open(STORE))
  local kern, act = 0, 0
  for _, e in ipairs(db2:query { run = run_id, type = "evaluation" }) do
    kern = kern + e.evaluation.khlua.gpu_kernel_seconds
    act = act + e.evaluation.khlua.gpu_active_seconds
  end
  db2:close()
  return { run = run, last = last, rounds = #rounds, candidates = cands, accepted = acc, rejected = rej,
    kernel_s = kern, active_s = act }
end

-- the median of a list, and the samples of evaluation records as ms, here
-- independently of report.lua
local function med(xs)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local n = #t
  return n % 2 == 1 and t[(n + 1) // 2] or (t[n // 2] + t[n // 2 + 1]) / 2
end

local function samples(db, recs, into)
  for _, e in ipairs(recs) do
    local b = assert(db:get_blob(assert(e.samples_blob, "a timed evaluation keeps its samples")))
    for k = 1, #b // 8 do into[#into + 1] = string.unpack("<d", b, k * 8 - 7) / 1e6 end
  end
  return into
end

-- Per workload from the store: the last promotion's sweep records, the seed's
-- records, and their raw samples.
local function per_workload(run_id)
  local e = expected(run_id)
  local db = assert(kh.store.open(STORE))
  local out = {}
  for _, id in ipairs(e.last and e.last.evidence or {}) do
    local r = assert(db:get(id))
    if r.purpose == "sweep" then
      local u = r.workload.uuid
      out[u] = out[u] or { seed = {}, seed_samples = {} }
      out[u].sweep = r
      out[u].best_samples = samples(db, { r }, {})
    end
  end
  for _, r in ipairs(db:query { run = run_id, type = "evaluation" }) do
    if r.purpose == "seed" then
      local u = r.workload.uuid
      out[u] = out[u] or { seed = {}, seed_samples = {} }
      table.insert(out[u].seed, r)
      samples(db, { r }, out[u].seed_samples)
    end
  end
  db:close()
  return out, e
end

local function attr(tag, name)
  return tag:match(name:gsub("%-", "%%-") .. '="([^"]*)"')
end

local function cells(md, label)
  for line in md:gmatch("[^\n]+") do
    if line:sub(1, #label + 4) == "| " .. label .. " |" then
      local out = {}
      for c in line:sub(#label + 5):gmatch("%s*(.-)%s*|") do out[#out + 1] = c end
      return out
    end
  end
end

T.test("markdown: both runs, the per-task table with A/B, figures from the store", function()
  local out, code = compare(RUNS[1].run, RUNS[2].run)
  T.eq(code, 0, out)
  T.ok(out:find(RUNS[1].run, 1, true), "run A named")
  T.ok(out:find(RUNS[2].run, 1, true), "run B named")
  T.match(out, "| task | A speedup | B speedup | ratio A/B |", "the paper's table")
  local a, b = expected(RUNS[1].run), expected(RUNS[2].run)
  T.ok(a.last and b.last, "both runs promoted at least once")
  local row = cells(out, (a.run.task:gsub("^task%-", "")))
  T.ok(row, out)
  local sa, sb = a.last.gate.sweep.mean_speedup, b.last.gate.sweep.mean_speedup
  T.near(tonumber(row[1]), sa, 1e-3)
  T.near(tonumber(row[2]), sb, 1e-3)
  T.near(tonumber(row[3]), sa / sb, 2e-3)
  T.near(tonumber(cells(out, "S_d")[1]), a.last.score, 1e-3)
  T.near(tonumber(cells(out, "S_d")[2]), b.last.score, 1e-3)
  -- the GPU busy fraction: kernel time over the run's wall time
  T.ok(a.kernel_s > 0)
  T.eq(cells(out, "GPU busy fraction (kernel time over wall; active)")[1],
    string.format("%.1f%% (%.1f%%)", 100 * a.kernel_s / a.run.metrics.elapsed_s,
      100 * a.active_s / a.run.metrics.elapsed_s))
  T.eq(tonumber(cells(out, "rounds")[1]), a.rounds)
  T.eq(tonumber(cells(out, "rounds")[2]), b.rounds)
  T.eq(tonumber(cells(out, "rounds to the best")[1]), a.last.round_index)
  T.eq(tonumber(cells(out, "candidates proposed")[1]), a.candidates)
  -- the fake evaluator compiles everything: every candidate compiled and evaluated
  T.eq(tonumber(cells(out, "candidates compiled")[1]), a.candidates)
  T.eq(tonumber(cells(out, "candidates evaluated")[1]), a.candidates)
  T.eq(tonumber(cells(out, "accepted")[1]), a.accepted)
  T.eq(tonumber(cells(out, "accepted")[2]), b.accepted)
  T.eq(tonumber(cells(out, "tokens")[1]), a.run.metrics.tokens)
  T.eq(tonumber(cells(out, "tokens")[2]), b.run.metrics.tokens)
  T.near(tonumber(cells(out, "money (USD)")[1]), a.run.metrics.usd, 1e-4)
  T.eq(tonumber(cells(out, "model calls of unknown price")[1]), a.run.metrics.usd_unknown_calls)
  T.near(tonumber(cells(out, "USD per accepted improvement")[1]), a.run.metrics.usd / a.accepted, 1e-4)
  T.ok(a.run.metrics.usd > 0)
  -- every rejection reason the rounds recorded, with its count
  for k, n in pairs(a.rejected) do T.match(cells(out, "rejected by reason")[1], k .. " " .. n) end
end)

T.test("--json carries the same figures; --csv one column per run", function()
  local out, code = compare(RUNS[1].run, RUNS[2].run, "--json")
  T.eq(code, 0, out)
  local j = kh.json.decode(out)
  T.eq(#j.runs, 2)
  for i = 1, 2 do
    local e = expected(RUNS[i].run)
    local s = j.runs[i]
    T.eq(s.run, RUNS[i].run)
    T.near(s.best_speedup, e.last.gate.sweep.mean_speedup, 1e-9)
    T.near(s.best_sd, e.last.score, 1e-9)
    T.eq(s.accepted, e.accepted)
    T.eq(s.candidates, e.candidates)
    T.eq(s.compiled, e.candidates)
    T.eq(s.tokens, e.run.metrics.tokens)
    T.eq(#s.gpu_busy, 1, "one GPU")
    T.eq(s.gpu_busy[1].gpu, "GPU-fake-0")
    T.near(s.gpu_busy[1].kernel_s, e.kernel_s, 1e-9)
    T.near(s.gpu_busy[1].fraction, e.kernel_s / e.run.metrics.elapsed_s, 1e-9)
    T.near(s.gpu_busy[1].active_s, e.active_s, 1e-9)
    T.near(s.gpu_busy[1].active_fraction, e.active_s / e.run.metrics.elapsed_s, 1e-9)
    T.eq(#s.curve, e.rounds + 1, "round 0 (the seed) and every round")
    -- best-so-far never falls and ends at the best
    for k = 2, #s.curve do T.ok(s.curve[k].speedup >= s.curve[k - 1].speedup - 1e-12) end
    -- per workload: the last promotion's sweep; the mean of it is the best speedup
    local wl = per_workload(RUNS[i].run)
    local sum, n = 0, 0
    for _, w in ipairs(s.workloads) do
      local perf = wl[w.uuid].sweep.evaluation.performance
      T.near(w.speedup, perf.reference_latency_ms / perf.latency_ms, 1e-12)
      T.near(w.latency_ms, perf.latency_ms, 1e-15)
      T.eq(w.seed_dist.n, #wl[w.uuid].seed_samples)
      T.eq(w.best_dist.n, #wl[w.uuid].best_samples)
      T.near(w.best_dist.median, med(wl[w.uuid].best_samples), 1e-12)
      T.ok(w.best_dist.q1 <= w.best_dist.median and w.best_dist.median <= w.best_dist.q3)
      T.ok(w.best_dist.p5 <= w.best_dist.q1 and w.best_dist.q3 <= w.best_dist.p95)
      sum, n = sum + w.speedup, n + 1
    end
    T.eq(n, NW, "every workload of the task")
    T.near(sum / n, s.best_speedup, 1e-12)
    -- promotions: the records' figures and evidence
    T.eq(#s.promotions, e.accepted)
    local p = s.promotions[#s.promotions]
    T.eq(p.id, e.last.id)
    T.near(p.ratio, e.last.gate.representative.ratio, 1e-12)
    T.eq(p.evidence, e.last.evidence)
    T.eq(#p.sweep, NW)
    T.eq(p.finalist.evaluations, p.finalist.passed)
    T.ok(p.finalist.evaluations > 0)
    -- settings
    T.eq(s.settings.model_specs, e.run.config.model_specs)
    T.eq(s.settings.versions.git, kh.version.git)
    T.eq(s.settings.gate_seed, e.run.seed)
  end
  local csv = compare(RUNS[1].run, RUNS[2].run, "--csv")
  T.match(csv, "^metric," .. RUNS[1].run:gsub("%-", "%%-") .. "," .. RUNS[2].run:gsub("%-", "%%-") .. "\n")
  T.match(csv, "\ntokens," .. j.runs[1].tokens .. "," .. j.runs[2].tokens .. "\n")
end)

-- A small XML well-formedness check: tags nest and close, attributes quoted.
local function xml_ok(s)
  local stack = {}
  s = s:gsub("<%?.-%?>", ""):gsub("<!DOCTYPE.->", "")
  for slash, name, attrs, selfclose in s:gmatch("<(/?)([%w:]+)(.-)(/?)>") do
    if slash == "/" then
      if table.remove(stack) ~= name then return false, "mismatched </" .. name .. ">" end
    else
      local rest = attrs:gsub('%s+[%w:%-]+="[^"<]*"', "")
      if rest:match("%S") then return false, "bad attributes in <" .. name .. ">: " .. rest end
      if selfclose == "" then stack[#stack + 1] = name end
    end
  end
  if #stack > 0 then return false, "unclosed <" .. stack[#stack] .. ">" end
  if s:find("&[^#%w]") then return false, "a bare &" end
  return true
end

T.test("--svg: well-formed XML, one polyline per run, axes and legend", function()
  local dir = T.tmpdir()
  local out, code = compare(RUNS[1].run, RUNS[2].run, "--svg", dir .. "/charts")
  T.eq(code, 0, out)
  local svg = T.read(dir .. "/charts/compare.svg")
  T.ok(xml_ok(svg))
  local _, polylines = svg:gsub("<polyline", "")
  T.eq(polylines, 2)
  for i = 1, 2 do
    local pts = svg:match('data%-run="' .. RUNS[i].run:gsub("%-", "%%-") .. '"[^>]-points="([^"]*)"')
    T.ok(pts, "a polyline for run " .. i)
    local _, n = pts:gsub("[%d.]+,[%d.]+", "")
    T.eq(n, expected(RUNS[i].run).rounds + 1, "one point per round and the seed")
  end
  T.match(svg, ">round<")
  T.match(svg, "plateau_switch")
  T.match(svg, "agent_assisted")
  T.ok(svg:find(">" .. RUNS[2].run .. "</text>", 1, true), "the legend names the run")
  if os.execute("command -v xmllint >/dev/null 2>&1") then
    local ok = os.execute("xmllint --noout " .. T.quote(dir .. "/charts/compare.svg") .. " 2>/dev/null")
    T.ok(ok, "xmllint accepts the SVG")
  end
  -- per-workload speedup bars: one per run and workload plus the mean, the
  -- figures of the last promotion's sweep records
  local j = kh.json.decode((compare(RUNS[1].run, RUNS[2].run, "--json")))
  local task = j.runs[1].task_name
  local bars = T.read(dir .. "/charts/speedup-" .. task .. ".svg")
  T.ok(xml_ok(bars))
  T.match(bars, "1%.0 = reference")
  T.match(bars, "speedup over the reference")
  local nbars = 0
  for i = 1, 2 do
    local wl = per_workload(RUNS[i].run)
    local nw = 0
    for u, x in pairs(wl) do
      nw = nw + 1
      local tag = bars:match('<rect class="bar" data%-run="' .. RUNS[i].run:gsub("%-", "%%-")
        .. '" data%-workload="' .. u:gsub("%-", "%%-") .. '"[^>]*>')
      T.ok(tag, "a bar for run " .. i .. " on " .. u)
      local perf = x.sweep.evaluation.performance
      T.near(tonumber(attr(tag, "data-speedup")), perf.reference_latency_ms / perf.latency_ms, 1e-9)
      T.ok(bars:find(">" .. x.sweep.workload.axes.batch_size .. "<", 1, true) or
        bars:find("batch_size=" .. x.sweep.workload.axes.batch_size, 1, true), "the workload's axes label it")
    end
    local mean = bars:match('data%-run="' .. RUNS[i].run:gsub("%-", "%%-") .. '" data%-workload="mean" data%-speedup="([^"]*)"')
    T.near(tonumber(mean), expected(RUNS[i].run).last.gate.sweep.mean_speedup, 1e-9)
    nbars = nbars + nw + 1
  end
  local _, nrect = bars:gsub('<rect class="bar"', "")
  T.eq(nrect, nbars)
  -- latency distributions: a box for the seed and the best of each run and
  -- workload, medians and counts of the raw samples
  local lat = T.read(dir .. "/charts/latency-" .. task .. ".svg")
  T.ok(xml_ok(lat))
  T.match(lat, "each workload on its own scale")
  local nbox = 0
  for i = 1, 2 do
    for u, x in pairs(per_workload(RUNS[i].run)) do
      for kind, xs in pairs({ seed = x.seed_samples, best = x.best_samples }) do
        local tag = lat:match('<g class="box" data%-run="' .. RUNS[i].run:gsub("%-", "%%-")
          .. '" data%-kind="' .. kind .. '" data%-workload="' .. u:gsub("%-", "%%-") .. '"[^>]*>')
        T.ok(tag, kind .. " box of run " .. i .. " on " .. u)
        T.eq(tonumber(attr(tag, "data-n")), #xs)
        T.ok(#xs > 1, "several samples")
        T.near(tonumber(attr(tag, "data-median-ms")), med(xs), 1e-12)
        nbox = nbox + 1
      end
      T.ok(lat:find('class="reference" data-workload="' .. u .. '"', 1, true), "the reference tick")
    end
  end
  local _, ng = lat:gsub('<g class="box"', "")
  T.eq(ng, nbox)
  -- the checker itself rejects broken XML
  T.ok(not xml_ok("<svg><g></svg>"))
  T.ok(not xml_ok('<svg a=1></svg>'))
end)

T.test("--html: tables, every chart, settings, promotions linked to their evidence", function()
  local dir = T.tmpdir()
  local out, code = compare(RUNS[1].run, RUNS[2].run, "--html", dir .. "/r.html")
  T.eq(code, 0, out)
  local html = T.read(dir .. "/r.html")
  T.match(html, "^<!DOCTYPE html>")
  T.match(html, '<table id="by%-task">')
  T.ok(html:find(RUNS[1].run, 1, true) and html:find(RUNS[2].run, 1, true), "both runs in the HTML")
  local nsvg = 0
  for svg in html:gmatch("<svg.-</svg>") do
    nsvg = nsvg + 1
    T.ok(xml_ok(svg))
  end
  T.eq(nsvg, 3, "best-so-far, speedup bars, latency distributions")
  T.ok(not html:find("<script") and not html:find('src="') and not html:find("https?://[^\"]*%.css"),
    "self-contained")
  local db = assert(kh.store.open(STORE))
  for i = 1, 2 do
    local run = db:get(RUNS[i].run)
    -- the settings, as recorded
    T.ok(html:find(">" .. run.config.model_specs .. "<", 1, true), "model specs")
    T.ok(run.versions and run.versions.khlua, "the run records the khlua version")
    T.ok(html:find(">" .. run.versions.git .. "<", 1, true), "the commit")
    T.ok(html:find(">gate seed<", 1, true) and html:find(">" .. run.seed .. "<", 1, true), "the seed")
    T.ok(html:find(">" .. run.config.rounds .. "<", 1, true))
    -- each promotion: a link to its evidence section, which lists its records
    for _, p in ipairs(db:query { run = RUNS[i].run, type = "promotion" }) do
      T.ok(html:find('href="#ev-' .. p.id .. '"', 1, true), "a link to " .. p.id)
      local sec = html:match('<section class="evidence" id="ev%-' .. p.id:gsub("%-", "%%-") .. '">(.-)</section>')
      T.ok(sec, "an evidence section for " .. p.id)
      T.ok(#p.evidence > 0)
      for _, id in ipairs(p.evidence) do T.ok(sec:find(id, 1, true), "evidence " .. id .. " listed") end
      T.eq(tonumber(sec:match('data%-key="ratio">([^<]*)<')), tonumber(string.format("%.3f", p.gate.representative.ratio)))
      T.eq(tonumber(sec:match('data%-key="lo">([^<]*)<')), tonumber(string.format("%.3f", p.gate.representative.lo)))
      T.eq(tonumber(sec:match('data%-key="hi">([^<]*)<')), tonumber(string.format("%.3f", p.gate.representative.hi)))
      T.ok(sec:find(p.candidate, 1, true) and sec:find(p.incumbent, 1, true))
      T.ok(sec:find('href="#promotions-' .. RUNS[i].run .. '"', 1, true), "a link back")
      T.ok(html:find('id="promotions-' .. RUNS[i].run .. '"', 1, true))
    end
  end
  db:close()
end)

T.test("--task filters; bad input is a clear error", function()
  local out, code = compare(RUNS[1].run, RUNS[2].run, "--task", "no_such_task")
  T.eq(code, 1)
  T.match(out, "no run on task no_such_task")
  out, code = compare(RUNS[1].run, "run-doesnotexist")
  T.eq(code, 1)
  T.match(out, "no run run%-doesnotexist")
  out, code = compare(RUNS[1].run)
  T.eq(code, 2)
  T.match(out, "at least two runs")
  out, code = compare(RUNS[1].run, RUNS[2].run, "--bogus")
  T.eq(code, 2)
  T.match(out, "unknown option %-%-bogus")
  -- a record that is not a run
  local db = assert(kh.store.open(STORE))
  local task = db:get(RUNS[1].run).task
  db:close()
  out, code = compare(RUNS[1].run, task)
  T.eq(code, 1)
  T.match(out, "is not a run")
end)

T.test("khlua compare is the script under another name", function()
  local a, ca = compare(RUNS[1].run, RUNS[2].run, "--json")
  local b, cb = T.khlua("--store", STORE, "compare", RUNS[1].run, RUNS[2].run, "--json")
  T.eq(ca, 0, a)
  T.eq(cb, 0, b)
  T.eq(b, a)
  local h, ch = T.khlua("compare", "--help")
  T.eq(ch, 0)
  T.match(h, "usage: khlua")
  local _, cu = T.khlua("--store", STORE, "compare", RUNS[1].run)
  T.eq(cu, 2, "usage error passed through")
  local help = T.khlua("--help")
  T.match(help, "compare")
end)

T.test("three runs: a column and an A/x ratio for each", function()
  local out, code = compare(RUNS[1].run, RUNS[2].run, RUNS[1].run, "--json")
  T.eq(code, 0, out)
  local j = kh.json.decode(out)
  out, code = compare(RUNS[1].run, RUNS[2].run, RUNS[1].run)
  T.eq(code, 0, out)
  T.match(out, "| task | A speedup | B speedup | C speedup | ratio A/B | ratio A/C |", "one ratio per other run")
  local row = cells(out, j.runs[1].task_name)
  T.near(tonumber(row[4]), j.runs[1].best_speedup / j.runs[2].best_speedup, 2e-3)
  T.eq(row[5], "1.000", "a run against itself")
end)

T.test("a run with no promotion: its best is the seed, reached at round 0", function()
  -- run C: one round, whose candidate (the ladder's first step) is slower
  local e = expected(RUNS[3].run)
  T.eq(e.last, nil)
  local out, code = compare(RUNS[1].run, RUNS[3].run, "--json")
  T.eq(code, 0, out)
  local c = kh.json.decode(out).runs[2]
  T.eq(c.accepted, 0)
  T.eq(c.rounds_to_best, 0)
  T.near(c.best_speedup, c.baseline, 0)
  T.ok(c.baseline > 0.9 and c.baseline < 1.1, "the seed is the reference, give or take noise")
  T.eq(c.usd_per_accepted, nil)
  -- per workload its bars are the seed's, and their mean is the baseline
  local sum = 0
  for _, w in ipairs(c.workloads) do
    T.eq(w.best_is_seed, true)
    T.eq(w.speedup, w.seed_speedup)
    sum = sum + w.speedup
  end
  T.eq(#c.workloads, NW)
  T.near(sum / NW, c.baseline, 1e-12)
  local dir = T.tmpdir()
  T.eq(select(2, compare(RUNS[1].run, RUNS[3].run, "--svg", dir)), 0)
  local lat = T.read(dir .. "/latency-" .. c.task_name .. ".svg")
  local _, seeds = lat:gsub('data%-run="' .. RUNS[3].run:gsub("%-", "%%-") .. '" data%-kind="seed"', "")
  local _, bests = lat:gsub('data%-run="' .. RUNS[3].run:gsub("%-", "%%-") .. '" data%-kind="best"', "")
  T.eq(seeds, NW)
  T.eq(bests, 0, "no best box where the seed stayed")
  out = compare(RUNS[1].run, RUNS[3].run)
  T.eq(cells(out, "USD per accepted improvement")[2], "-")
end)

T.test("--task keeps the runs on that task; CSV quotes fields with commas", function()
  local name = kh.json.decode((compare(RUNS[1].run, RUNS[2].run, "--json"))).runs[1].task_name
  local out, code = compare(RUNS[1].run, RUNS[2].run, "--task", name, "--json")
  T.eq(code, 0, out)
  T.eq(#kh.json.decode(out).runs, 2)
  out, code = compare(RUNS[1].run, RUNS[2].run, "--task", "task-" .. name, "--json")
  T.eq(#kh.json.decode(out).runs, 2, "the task's record id works too")
  local csv = compare(RUNS[1].run, RUNS[2].run, "--csv")
  local line = csv:match("\nrejected by reason,([^\n]*)")
  T.ok(line, csv)
  T.match(line, '^"[^"]*, [^"]*",', "a list of reasons is one quoted CSV field")
end)

T.test("summarize: compile errors, failed model calls and empty replies are counted apart", function()
  local path = T.tmpdir() .. "/s"
  local db = assert(kh.store.open(path, { nosync = true }))
  -- hand-made records, as a run would leave them
  local task, run = "task-synthetic", "run-SYNTHETIC" .. math.random(1000, 9999)
  local recs = { { type = "task", id = task, name = "synthetic" },
    { type = "run", id = run, policy = "handmade", task = task,
      metrics = { tokens = math.random(10, 999), usd = 0.5, elapsed_s = 3.5 } } }
  local ok, bad = 0, 0
  local verdicts = {}
  local n = math.random(2, 5)
  for i = 1, n do
    local c = "candidate-syn" .. i
    recs[#recs + 1] = { type = "candidate", id = c, task = task,
      provenance = { source_hash = kh.store.hash("syn" .. i) } }
    -- odd candidates do not compile
    local st = i % 2 == 1 and "COMPILE_ERROR" or "INCORRECT_NUMERICAL"
    if st == "COMPILE_ERROR" then bad = bad + 1 else ok = ok + 1 end
    recs[#recs + 1] = { type = "evaluation", task = task, candidate = c, run = run, status = st,
      purpose = "representative:candidate", provenance = { hashes = { source =
        kh.store.hash("syn" .. i) }, host = "test-host", seeds = { math.random(1, 1000) } } }
    verdicts[#verdicts + 1] = { candidate = c, rejected_for = "incorrect" }
  end
  verdicts[#verdicts + 1] = { reason = "model call failed: quota" }
  verdicts[#verdicts + 1] = { reason = "no candidate (empty): nothing" }
  recs[#recs + 1] = { type = "round", run = run, index = 1, verdicts = verdicts,
    state_out = { incumbent = { score = 1.0 }, elapsed_s = 3.5 } }
  T.import(path, recs)
  local s = assert(report.summarize(db, run))
  -- a script anywhere gets the same library with require "lib.report" (khlua's
  -- policies/ is on every script's path); the kh module itself does not load
  -- policies (the direction is policies -> bindings)
  T.eq(kh.report, nil)
  local out, code = T.khlua("-e", "local r = require 'lib.report'; print(type(r.summarize), "
    .. "type(r.markdown), package.searchpath('lib.report', package.path))")
  T.eq(code, 0, out)
  T.match(out, "^function\tfunction\t.*/policies/lib/report%.lua\n$")
  T.eq(s.candidates, n)
  T.eq(s.evaluated, n)
  T.eq(s.compiled, ok)
  T.eq(s.rejected, n + 2)
  T.eq(s.rejected_by.compile_error, bad)
  T.eq(s.rejected_by.incorrect, ok > 0 and ok or nil)
  T.eq(s.rejected_by.model_failed, 1)
  T.eq(s.rejected_by.no_candidate, 1)
  T.eq(s.eval_pass_rate, 0.0)
  T.eq(s.baseline, nil, "no seed measurements")
  local nope, msg = report.summarize(db, "run-nothere")
  T.eq(nope, nil)
  T.match(msg, "no run run%-nothere")
  -- the renderers cope with a run that has no figures
  T.match(report.markdown({ s, s }), "| synthetic | %- | %- | %- |")
  T.ok(report.svg({ s }):find("</svg>", 1, true))
  T.ok(xml_ok(report.svg_speedup({ s, s })))
  T.ok(xml_ok(report.svg_latency({ s, s })))
  local html = report.html({ s, s })
  T.match(html, "No promotion: the seed stayed the incumbent")
  T.match(html, "not recorded")
  db:close()
end)
