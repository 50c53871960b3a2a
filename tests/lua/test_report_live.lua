-- test_report_live.lua: a run a person can watch (issue 23, "a live
-- report"): --report FILE is rewritten after every round with every
-- candidate (source, diff against the incumbent, verdict, the check that
-- decided), the best-so-far plot, and the run's state; the run's last line
-- names it; `khlua compare` gains the per-round table with rejected
-- candidates; the charts' fixes (value labels that do not overlap, one axis
-- per workload for the latency boxes, "over the reference" everywhere); the
-- line diff the report shows.  Evaluations come from the deterministic fake
-- (fake_eval.lua) over the replay ladder: a/01 slower (rejected by the
-- paired comparison), a/02 faster (promoted), a/03 wrong (rejected).
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
package.path = SRC .. "/policies/?.lua;" .. SRC .. "/tests/lua/lib/?.lua;" .. package.path
local ctl = require "lib.controller"
local ev = require "lib.evaluate"
local policy = require "lib.policy"
local cli = require "lib.cli"
local report = require "lib.report"
local diff = require "lib.diff"
local fake = require "fake_eval"

local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local LADDER = SRC .. "/tests/fixtures/replay/ctl/a"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local POLICY = SRC .. "/policies/plateau_switch.lua"
local NOKEYS = { ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "" }
math.randomseed(T.seed())

local function state_of(html)
  local status, rounds = html:match('<p id="state" data%-status="([^"]*)" data%-rounds="(%d+)"')
  return status, tonumber(rounds)
end

-- A run in this process; the policy's react hook reads the report as it
-- stands when round k is decided (rounds 1..k-1 are in it).
local function run_watched(dir, rounds, fail_at)
  local db = assert(kh.store.open(dir .. "/store", { nosync = true }))
  local P = assert(policy.load(SRC .. "/policies/agent_assisted.lua"))
  local path = dir .. "/out/live.html"
  local seen = {}
  local react = P.react
  P.react = function(view, outcome, st, ctx)
    local html = T.read(path)
    local status, n = state_of(html)
    seen[#seen + 1] = { round = outcome.round, status = status, rounds = n,
      refresh = html:find('http-equiv="refresh"', 1, true) ~= nil }
    if fail_at == outcome.round then error("policy failed on purpose in round " .. fail_at) end
    return react and react(view, outcome, st, ctx) or {}
  end
  local cfg = { task = TASK, model_specs = "replay:" .. LADDER, rounds = rounds, plateau = 5,
    db = db, quiet = true, gate = { seed = 77 }, report = path }
  assert(cli.resolve_models(cfg))
  ev.use(fake.evaluate)
  local ok, res, msg = pcall(ctl.run, P, cfg)
  ev.use(nil)
  db:close()
  return ok, res, msg, path, seen
end

local DIR = T.tmpdir()
local RES, PATH, SEEN

T.test("--report FILE is rewritten after every round (the folder is made)", function()
  local ok, res, msg, path, seen = run_watched(DIR, 3)
  T.ok(ok, tostring(res))
  T.ok(res, msg)
  RES, PATH, SEEN = res, path, seen
  T.eq(res.report, path, "the result names the report")
  T.eq(#seen, 3, "read at every round")
  for k, x in ipairs(seen) do
    T.eq(x.round, k)
    T.eq(x.rounds, k - 1, "round " .. k .. " sees the rounds before it")
    T.eq(x.status, "running")
    T.ok(x.refresh, "a page under way reloads itself")
  end
  local html = T.read(path)
  local status, n = state_of(html)
  T.eq(status, "done")
  T.eq(n, 3)
  T.ok(not html:find('http-equiv="refresh"', 1, true), "a finished run's page stays still")
  T.ok(not io.open(path .. ".tmp", "rb"), "no half-written file left")
end)

T.test("the report holds every candidate: verdict, deciding check, source, diff against the incumbent", function()
  local html = T.read(PATH)
  local rows = {}
  for tr in html:gmatch('<tr class="%a+" data%-round="%d+">.-</tr>') do
    local cells = {}
    for c in tr:gmatch("<td[^>]*>(.-)</td>") do cells[#cells + 1] = c:gsub("<[^>]*>", "") end
    rows[#rows + 1] = cells
  end
  T.eq(#rows, 3, "one row per model call")
  -- round, model, candidate, verdict, decided by, ratio, interval, S_d, reason
  T.match(rows[1][4], "^rejected %(slower%)$")
  T.eq(rows[1][5], "representative")
  T.ok(tonumber(rows[1][6]) < 1, "a/01 is slower: ratio " .. rows[1][6])
  T.match(rows[1][7], "^%d%.%d+ to %d%.%d+$")
  T.eq(rows[2][4], "promoted")
  T.eq(rows[2][5], "every gate step passed")
  T.ok(tonumber(rows[2][6]) > 1.2, "a/02 is faster: ratio " .. rows[2][6])
  T.ok(tonumber(rows[2][8]) > 1, "the promoted candidate's S_d")
  T.match(rows[3][4], "^rejected %(incorrect%)$")
  -- the details: each candidate's source as the store holds it, and its diff
  local db = assert(kh.store.open(DIR .. "/store", { readonly = true }))
  local sum = assert(report.summarize(db, RES.run))
  db:close()
  T.eq(#sum.round_rows, 3)
  for _, r in ipairs(sum.round_rows) do
    local id = string.format("cand-%s-%d-%d", RES.run, r.round, r.index)
    local det = html:match('<details class="candidate" id="' .. id:gsub("%-", "%%-") .. '">(.-)</details>')
    T.ok(det, "details of round " .. r.round)
    local src = sum.sources[r.candidate]
    T.ok(src and #src > 100, "the candidate's source is in the store")
    local function unesc(s)
      return (s:gsub("&lt;", "<"):gsub("&gt;", ">"):gsub("&quot;", '"'):gsub("&amp;", "&"))
    end
    T.eq(unesc(det:match("<p>Source:</p><pre>(.-)</pre>")), src, "the source, whole")
    local d = det:match('<pre class="diff">(.-)</pre>')
    T.ok(d, "a diff against the incumbent")
    local want = diff.unified(sum.sources[r.incumbent], src)
    T.eq(unesc(d:gsub("<[^>]*>", "")), want:sub(1, -2), "the diff of incumbent and candidate")
    T.ok(d:find('<span class="a">+', 1, true) or d:find('<span class="d">-', 1, true), "lines marked")
  end
  -- round 3 was measured against a/02, the incumbent round 2 promoted
  T.eq(sum.round_rows[3].incumbent, sum.round_rows[2].candidate)
  T.ok(html:find('<figure id="plot-best-so-far">', 1, true), "the best-so-far plot")
end)

T.test("a run that fails leaves a report that says so", function()
  local dir = T.tmpdir()
  local ok, err, _, path, seen = run_watched(dir, 3, 2)
  T.ok(not ok, "the run raised")
  T.match(tostring(err), "on purpose")
  T.eq(#seen, 2)
  local status, n = state_of(T.read(path))
  T.eq(status, "failed")
  T.eq(n, 1, "the round that completed")
end)

T.test("the run's last line names the report; default beside the store; 'none'; a bad path", function()
  local dir = T.tmpdir()
  local store = dir .. "/st/store"
  local out, code = T.khlua_env(NOKEYS, "--store", store, POLICY, "--task", TASK, "--fake-evaluator", FAKE,
    "--model", "replay:" .. LADDER, "--rounds", "2", "--seed", "5")
  T.eq(code, 0, out)
  local run = out:match("run (run%-%w+) done")
  local last = out:match("([^\n]+)\n?$")
  local want = dir .. "/st/reports/" .. run .. ".html"
  T.ok(last:find("; report: " .. want, 1, true), last)
  T.eq(state_of(T.read(want)), "done")
  out, code = T.khlua_env(NOKEYS, "--store", store, POLICY, "--task", TASK, "--fake-evaluator", FAKE,
    "--model", "replay:" .. LADDER, "--rounds", "1", "--seed", "5", "--report", "none")
  T.eq(code, 0, out)
  T.match(out:match("([^\n]+)\n?$"), "; report: none$")
  -- a folder that cannot be made: the run does not start
  T.write(dir .. "/plain", "x")
  out, code = T.khlua_env(NOKEYS, "--store", store, POLICY, "--task", TASK, "--fake-evaluator", FAKE,
    "--model", "replay:" .. LADDER, "--rounds", "1", "--report", dir .. "/plain/r.html")
  T.eq(code, 1, out)
  T.match(out, "plain is not a folder")
  out = T.khlua("--store", store, "store", "ls", "--type", "run")
  local _, nruns = out:gsub("run%-%w+", "")
  T.eq(nruns, 2, "no run was made for the bad path: " .. out)
  out, code = T.khlua_env(NOKEYS, POLICY, "--task", TASK, "--report")
  T.eq(code, 2, out)
end)

T.test("khlua compare: the per-round table with rejected candidates", function()
  local out, code = T.khlua("--store", DIR .. "/store", "compare", RES.run, RES.run, "--markdown")
  T.eq(code, 0, out)
  T.match(out, "| run | round | model | candidate | verdict | decided by |", "the table's head")
  T.match(out, "| A | 1 | [^|]+ | candidate%-%x+ | rejected %(slower%) | representative |")
  T.match(out, "| A | 2 | [^|]+ | candidate%-%x+ | promoted | every gate step passed |")
  T.match(out, "| B | 3 | [^|]+ | candidate%-%x+ | rejected %(incorrect%) |")
  local j = kh.json.decode(T.khlua("--store", DIR .. "/store", "compare", RES.run, RES.run, "--json"))
  T.eq(#j.runs[1].round_rows, 3)
  T.eq(j.runs[1].sources, nil, "sources stay out of --json")
end)

-- Synthetic summaries for the charts: two runs, equal speedups (their value
-- labels sit side by side), workloads three decades apart in latency.
local function dist(m, spread)
  return { n = 24, min = m * (1 - 2 * spread), p5 = m * (1 - 1.5 * spread), q1 = m * (1 - spread / 2),
    median = m, q3 = m * (1 + spread / 2), p95 = m * (1 + 1.5 * spread), max = m * (1 + 2 * spread), mean = m }
end
local function synthetic()
  local sums = {}
  for i = 1, 2 do
    local ws = {}
    for k, ms in ipairs({ 0.004, 0.09, 5.0 }) do
      ws[k] = { uuid = "w" .. k, axes = { batch_size = 10 ^ k }, label = "batch_size=" .. 10 ^ k,
        speedup = 1.44, reference_ms = ms * 1.44, seed_dist = dist(ms * 1.5, 0.05), best_dist = dist(ms, 0.05) }
    end
    sums[i] = { run = "run-" .. i, policy = "p" .. i, task_name = "t", best_speedup = 1.44,
      promotions = { {} }, workloads = ws, curve = { { round = 0, speedup = 1 }, { round = 1, speedup = 1.44 } } }
  end
  return sums
end

T.test("speedup bars: value labels do not overlap, even when equal", function()
  local svg = report.svg_speedup(synthetic())
  local boxes = {}
  for x, y, size, v in svg:gmatch('<text class="value" x="([%d.]+)" y="([%d.]+)" font%-size="(%d+)" '
    .. 'transform="rotate%(%-90 [%d.]+ [%d.]+%)">([^<]*)</text>') do
    -- written upwards from (x, y): font-size wide, about 0.6 em a character tall
    local fs = tonumber(size)
    boxes[#boxes + 1] = { x0 = x - fs, x1 = tonumber(x), y0 = y - 0.6 * fs * #v, y1 = tonumber(y) }
  end
  T.eq(#boxes, 8, "a label per bar (3 workloads and the mean, 2 runs)")
  for i = 1, #boxes do
    for j = i + 1, #boxes do
      local a, b = boxes[i], boxes[j]
      local apart = a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0
      T.ok(apart, string.format("labels %d and %d overlap", i, j))
    end
  end
  T.ok(not svg:find("1.441.44", 1, true))
end)

T.test("latency boxes: one axis per workload, so a 5% spread is drawn wide at any latency", function()
  local svg = report.svg_latency(synthetic())
  local n = 0
  for w in svg:gmatch('<g class="box".-<rect x="[%d.]+" y="[%d.]+" width="([%d.]+)"') do
    n = n + 1
    T.ok(tonumber(w) >= 15, "box width " .. w .. " px")
  end
  T.eq(n, 12, "seed and best, 2 runs, 3 workloads")
  T.match(svg, "each workload on its own scale")
  local best = report.svg(synthetic())
  T.match(best, "speedup over the reference")
  T.ok(not best:find("vs baseline", 1, true))
end)

T.test("diff: lines rebuild both texts; as few changed lines as diff --minimal finds", function()
  local has_diff = os.execute("command -v diff >/dev/null 2>&1")
  local words = { "a", "b", "c", "d", "e" }
  local function text(n)
    local t = {}
    for i = 1, n do t[i] = words[math.random(#words)] end
    return table.concat(t, "\n") .. "\n"
  end
  local dir = T.tmpdir()
  for trial = 1, 40 do
    local a, b = text(math.random(0, 40)), text(math.random(0, 40))
    if trial % 4 == 0 then b = a end
    local ops = diff.lines(a, b)
    local xa, xb, changed = {}, {}, 0
    for _, o in ipairs(ops) do
      if o[1] ~= "+" then xa[#xa + 1] = o[2] end
      if o[1] ~= "-" then xb[#xb + 1] = o[2] end
      if o[1] ~= " " then changed = changed + 1 end
    end
    T.eq(#xa > 0 and table.concat(xa, "\n") .. "\n" or "", a, "rebuilds a")
    T.eq(#xb > 0 and table.concat(xb, "\n") .. "\n" or "", b, "rebuilds b")
    if a == b then T.eq(diff.unified(a, b), "") end
    if has_diff then
      T.write(dir .. "/a", a)
      T.write(dir .. "/b", b)
      local p = io.popen("diff --minimal " .. dir .. "/a " .. dir .. "/b")
      local out = p:read("a")
      p:close()
      local _, nl = out:gsub("\n[<>] ", "")
      if out:sub(1, 2) == "< " or out:sub(1, 2) == "> " then nl = nl + 1 end
      T.eq(changed, nl, "changed lines, trial " .. trial)
    end
  end
  -- hunks: heads with line numbers, 3 lines of context
  local a, b = {}, {}
  for i = 1, 16 do a[i] = tostring(i); b[i] = i == 6 and "six" or tostring(i) end
  b[17] = "17"
  a, b = table.concat(a, "\n") .. "\n", table.concat(b, "\n") .. "\n"
  T.eq(diff.unified(a, b), "@@ -3,7 +3,7 @@\n 3\n 4\n 5\n-6\n+six\n 7\n 8\n 9\n"
    .. "@@ -14,3 +14,4 @@\n 14\n 15\n 16\n+17\n", "as diff -u writes them")
  -- changes 2n lines apart share a hunk (as in diff -u)
  T.eq(select(2, diff.unified(a, (b:gsub("\n12\n", "\ntwelve\n"))):gsub("@@ %-", "")), 1)
end)
