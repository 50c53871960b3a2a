-- report.lua: compare recorded runs (issue #11).  Reads run, round,
-- promotion and evaluation records from the store and builds, per run, the
-- figures the paper's table needs (best speedup, S_d, correctness, rounds and
-- wall time to the best, candidates by outcome, tokens and money), then
-- renders them as markdown, CSV, JSON, a hand-written SVG of best-so-far
-- speedup per round, or one self-contained HTML file.  Pure Lua over kh.store.
local kh = require "kh"

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
  return s
end

-- ---- rendering -------------------------------------------------------------------

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

-- The rows of the detail table: {label, function(s) -> text}.
M.ROWS = {
  { "policy", function(s) return s.policy or "-" end },
  { "task", function(s) return s.task_name end },
  { "baseline speedup (seed)", function(s) return fmt(s.baseline) end },
  { "best speedup (mean over workloads)", function(s) return fmt(s.best_speedup) end },
  { "S_d", function(s) return fmt(s.best_sd) end },
  { "correctness of the best", function(s) return fmt(s.best_correct) end },
  { "evaluation pass rate", function(s) return fmt(s.eval_pass_rate) end },
  { "rounds", function(s) return fmt(s.rounds) end },
  { "rounds to the best", function(s) return fmt(s.rounds_to_best) end },
  { "wall time to the best (s)", function(s) return fmt(s.wall_to_best_s, 1) end },
  { "candidates proposed", function(s) return fmt(s.candidates) end },
  { "candidates compiled", function(s) return fmt(s.compiled) end },
  { "candidates evaluated", function(s) return fmt(s.evaluated) end },
  { "accepted", function(s) return fmt(s.accepted) end },
  { "rejected", function(s) return fmt(s.rejected) end },
  { "rejected by reason", reasons },
  { "tokens", function(s) return fmt(s.tokens) end },
  { "money (USD)", function(s) return fmt(s.usd + 0.0, 4) end },
  { "model calls of unknown price", function(s) return fmt(s.usd_unknown_calls) end },
  { "USD per accepted improvement", function(s) return fmt(s.usd_per_accepted, 4) end },
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
  return kh.json.encode({ runs = sums }, { sort_keys = true, indent = 2 })
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
  o[#o + 1] = string.format('<text x="15" y="%.1f" text-anchor="middle" transform="rotate(-90 15 %.1f)">best speedup vs baseline</text>', TOP + ph / 2, TOP + ph / 2)
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

local function md_to_html(md)
  -- the two markdown tables above as HTML tables
  local out, open = {}, false
  for line in (md .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^|") then
      if line:match("^|%-%-%-") then goto continue end
      local cells = {}
      for c in line:sub(2):gmatch("%s*(.-)%s*|") do cells[#cells + 1] = esc(c) end
      if not open then
        out[#out + 1] = "<table><tr><th>" .. table.concat(cells, "</th><th>") .. "</th></tr>"
        open = true
      else
        out[#out + 1] = "<tr><td>" .. table.concat(cells, "</td><td>") .. "</td></tr>"
      end
    elseif open then
      out[#out + 1] = "</table>"
      open = false
    end
    ::continue::
  end
  if open then out[#out + 1] = "</table>" end
  return table.concat(out, "\n")
end

function M.html(sums)
  return table.concat({ "<!DOCTYPE html>", '<html><head><meta charset="utf-8"><title>khlua compare</title>',
    "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
      .. "td,th{border:1px solid #999;padding:3px 8px;text-align:right}</style></head><body>",
    "<h1>Run comparison</h1>", md_to_html(M.markdown(sums)), M.svg(sums), "</body></html>", "" }, "\n")
end

return M
