-- round_times.lua: where a search run's wall time went, round by round, from
-- its records (issue 21's round targets): the seed's measurement and profile
-- (before round 1), then per round its seconds, whether it promoted, its
-- candidates and the gate step that decided.
--   khlua [--store PATH] scripts/round_times.lua RUN
local kh = require "kh"
local run_id = arg[1]
if not run_id then
  io.stderr:write("usage: khlua scripts/round_times.lua RUN\n")
  os.exit(2)
end
local db = assert(kh.store.open(os.getenv("KHLUA_STORE") or ".khlua/store"))
local rounds = db:query { run = run_id, type = "round" } or {}
if #rounds == 0 then
  io.stderr:write("round_times: no rounds of " .. run_id .. "\n")
  os.exit(1)
end
table.sort(rounds, function(a, b) return a.index < b.index end)
local prev, first = nil, rounds[1]
print(string.format("%-6s %9s  %-9s %-10s  %s", "round", "seconds", "outcome", "candidates", "reason"))
for _, r in ipairs(rounds) do
  local e = r.state_out and r.state_out.elapsed_s or 0
  local cands = 0
  for _, v in ipairs(r.verdicts or {}) do if v.candidate then cands = cands + 1 end end
  local d = r.decision or {}
  if not prev then
    -- the seed's measurement and profile: the run's time before round 1 began
    local seed = r.state_out and r.state_out.seed_s
    if seed then print(string.format("%-6s %9.2f  %-9s", "seed", seed, "measured")); prev = seed end
  end
  print(string.format("%-6d %9.2f  %-9s %-10d  %.90s", r.index, e - (prev or 0),
    d.promoted and "promoted" or "rejected", cands, tostring(d.reason or "")))
  -- where the round's time went: each candidate's gate steps (their seconds
  -- are in records from 2026-12-07 on), then a promotion's profile
  for i, v in ipairs(r.verdicts or {}) do
    local parts = {}
    for _, g in ipairs(v.gate and v.gate.steps or {}) do
      if g.seconds then
        parts[#parts + 1] = string.format("%s %.2f", g.step or "?", g.seconds)
          .. (g.sanitizer_s and string.format(" (sanitizer %.2f)", g.sanitizer_s) or "")
      end
    end
    if #parts > 0 then
      print(string.format("       candidate %d: %s s", i, table.concat(parts, ", ")))
    end
  end
  if d.profile_s then print(string.format("       profile of the new incumbent %.2f s", d.profile_s)) end
  prev = e
end
-- each sanitizer run's tools: start (the tool and its CUDA context), the
-- request under it, and the whole (exit included); records from 2026-12-07 on
for _, ev in ipairs(db:query { run = run_id, type = "evaluation" } or {}) do
  local k = ev.evaluation and ev.evaluation.khlua
  if type(k) == "table" and type(k.sanitizer) == "table" then
    local parts = {}
    for tool, t in pairs(k.sanitizer) do
      parts[#parts + 1] = string.format("%s %s: start %.2f, run %.2f, all %.2f s", tool,
        t.status or "?", t.start_s or -1, t.run_s or -1, t.seconds or -1)
    end
    table.sort(parts)
    print(string.format("sanitizer %s: %s", tostring(ev.solution or ev.id or "?"),
      table.concat(parts, "; ")))
  end
end
db:close()
