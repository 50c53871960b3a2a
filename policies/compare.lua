-- compare.lua: compare recorded runs (issue #11).
--   khlua policies/compare.lua RUN_A RUN_B [RUN_C ...] [--store PATH] [--task NAME]
--                              [--json | --csv | --markdown] [--svg DIR] [--html FILE]
-- Default output: markdown (per task: each run's best speedup and A/B; then
-- one column per run with every figure).  The logic lives in lib/report.lua.
package.path = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or ".") .. "/?.lua;" .. package.path
local kh = require "kh"
local report = require "lib.report"

local USAGE = [[
usage: khlua compare RUN_A RUN_B [RUN_C ...] [options]
   (the same: khlua policies/compare.lua RUN_A RUN_B ... [options])
  --store PATH    the store (default: KHLUA_STORE or the engine's default)
  --task NAME     keep only runs on this task (name, or task-<name>)
  --markdown      markdown tables (default)
  --json          every figure as JSON
  --csv           one row per figure, one column per run
  --svg DIR       also write SVG charts into DIR: compare.svg (best-so-far
                  speedup per round), and per task speedup-TASK.svg (speedup
                  per workload) and latency-TASK.svg (latency distributions)
  --html FILE     also write one self-contained HTML file: the tables, every
                  chart, the runs' settings, each promotion's gate evidence
exit: 0 ok, 1 a run could not be read, 2 usage error]]

local function main(argv)
  local runs, o = {}, { format = "markdown" }
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then print(USAGE); return 0
    elseif a == "--json" or a == "--csv" or a == "--markdown" then o.format = a:sub(3)
    elseif a == "--store" or a == "--task" or a == "--svg" or a == "--html" then
      if not argv[i + 1] then io.stderr:write("compare: " .. a .. " needs a value\n"); return 2 end
      o[a:sub(3)] = argv[i + 1]
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      io.stderr:write("compare: unknown option " .. a .. "\n" .. USAGE .. "\n"); return 2
    else runs[#runs + 1] = a end
    i = i + 1
  end
  if #runs < 2 then io.stderr:write("compare: give at least two runs\n" .. USAGE .. "\n"); return 2 end
  local db, err = kh.store.open(o.store)
  if not db then io.stderr:write("compare: store: " .. tostring(err) .. "\n"); return 1 end
  local sums = {}
  for _, id in ipairs(runs) do
    local s, msg = report.summarize(db, id)
    if not s then db:close(); io.stderr:write("compare: " .. msg .. "\n"); return 1 end
    if not o.task or s.task_name == o.task or s.task == o.task then sums[#sums + 1] = s end
  end
  db:close()
  if #sums == 0 then io.stderr:write("compare: no run on task " .. o.task .. "\n"); return 1 end
  io.write(report[o.format](sums))
  local function write(path, text)
    local f, e = io.open(path, "wb")
    if not f then io.stderr:write("compare: " .. tostring(e) .. "\n"); return false end
    local ok, e2 = f:write(text)
    f:close()
    if not ok then io.stderr:write("compare: " .. path .. ": " .. tostring(e2) .. "\n"); return false end
    return true
  end
  if o.svg then
    local made, merr = kh.mkdir(o.svg)
    if not made then io.stderr:write("compare: " .. tostring(merr) .. "\n"); return 1 end
    if not write(o.svg .. "/compare.svg", report.svg(sums)) then return 1 end
    for _, t in ipairs(report.tasks(sums)) do
      local name = t.name:gsub("[^%w_.%-]", "_")
      if not write(o.svg .. "/speedup-" .. name .. ".svg", report.svg_speedup(t.sums))
        or not write(o.svg .. "/latency-" .. name .. ".svg", report.svg_latency(t.sums)) then
        return 1
      end
    end
  end
  if o.html and not write(o.html, report.html(sums)) then return 1 end
  return 0
end

local rc = main({ ... })
if rc ~= 0 then os.exit(rc, true) end
