-- test_export_traces.lua: a run's traces for FlashInfer-Bench (issue 22,
-- "exported traces mislead FIB"): `khlua store export --format fib-trace`
-- writes official-protocol timings only (the gate's last step, on every
-- finalist, and khlua eval --protocol official), so a candidate the gate
-- rejected never reaches a leaderboard through traces of its screening
-- (a cheating one had 10 PASSED screening traces and FIB's get_best_trace
-- picked it, at 74x); --run keeps one run's; --gate adds the gate's
-- measurements, each marked at the head of its log.  Evaluations come from
-- the deterministic fake over the replay ladder (a/01 slower: rejected with
-- PASSED screening traces; a/02 promoted; a/03 wrong).
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local POLICY = SRC .. "/policies/plateau_switch.lua"
local LADDER = SRC .. "/tests/fixtures/replay/ctl/a"
local NOKEYS = { ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "" }

local store = T.tmpdir() .. "/store"
local function run()
  local out, code = T.khlua_env(NOKEYS, "--store", store, POLICY, "--task", TASK, "--fake-evaluator",
    FAKE, "--model", "replay:" .. LADDER, "--rounds", "3", "--seed", "9", "--report", "none", "--json")
  T.eq(code, 0, out)
  return kh.json.decode(out:match("\n(%b{})%s*$"))
end
local A, B = run(), run()

local function traces(...)
  local out, code = T.khlua("--store", store, "store", "export", "--format", "fib-trace", ...)
  local list = {}
  for line in out:gmatch("[^\n]+") do
    if line:sub(1, 1) == "{" then list[#list + 1] = kh.json.decode(line) end
  end
  return list, out, code
end

-- the run's candidates by their solution names, from its rounds
local function names(res)
  local db <close> = assert(kh.store.open(store, { readonly = true }))
  local by = {}
  for _, r in ipairs(db:query { run = res.run, type = "round" }) do
    for _, v in ipairs(r.verdicts or {}) do
      if v.candidate then by[r.index] = v end
    end
  end
  return by
end

T.test("by default a run's export holds only the official timing of what it promoted", function()
  local list, out, code = traces("--run", A.run)
  T.eq(code, 0, out)
  T.eq(#list, 3, "one trace per workload: " .. out)
  for _, t in ipairs(list) do
    T.eq(t.solution, A.run .. "_r2_1", "the promoted candidate")
    T.eq(t.evaluation.status, "PASSED")
    T.ok(t.evaluation.performance and t.evaluation.performance.latency_ms > 0)
    T.ok(not tostring(t.evaluation.log):find("gate measurement", 1, true))
  end
  T.match(out, "exported 3 traces %(3 official%-protocol timings; %-%-gate adds")
  -- a/01 PASSED its screening and was rejected: none of its traces
  T.ok(not out:find(A.run .. "_r1_1", 1, true), "the rejected candidate stays out")
  local v = names(A)
  T.eq(v[1].rejected_for, "slower")
  T.eq(v[2].accepted, true)
end)

T.test("--gate adds every other measurement of the run, marked; other runs stay out", function()
  local list, out, code = traces("--run", A.run, "--gate")
  T.eq(code, 0, out)
  local official, marked, r1 = 0, 0, 0
  for _, t in ipairs(list) do
    -- run A's candidates, and the seed it measured (the task's reference)
    T.ok(t.solution:sub(1, #A.run) == A.run or t.solution == "rmsnorm_h512_ref_c",
      "only run A: " .. t.solution)
    local log = tostring(t.evaluation.log)
    if log:find("^%[khlua gate measurement, not an official%-protocol timing: purpose ") then
      marked = marked + 1
    else
      official = official + 1
    end
    if t.solution == A.run .. "_r1_1" and t.evaluation.status == "PASSED" then r1 = r1 + 1 end
  end
  T.eq(official, 3)
  T.ok(marked > 30, "the gate's measurements: " .. marked)
  T.ok(r1 > 0, "the rejected candidate's PASSED screening, marked")
  T.match(out, "exported " .. #list .. " traces %(3 official%-protocol timings, the rest gate measurements")
  -- the whole store, no --run: both runs' official timings
  list = traces()
  T.eq(#list, 6)
end)

T.test("a run that is not there, or --run with jsonl, is said", function()
  local _, out, code = traces("--run", "run-NOPE")
  T.eq(code, 1, out)
  T.match(out, "no run run%-NOPE in the store")
  out, code = T.khlua("--store", store, "store", "export", "--format", "jsonl", "--run", A.run)
  T.eq(code, 1, out)
  T.match(out, "go with %-%-format fib%-trace")
  local cand = names(A)[2].candidate
  _, out, code = traces("--run", cand)
  T.eq(code, 1, out)
  T.match(out, "is a candidate record, not a run")
  T.ok(B.run ~= A.run)
end)
