-- test_eval_values.lua: values in, values out (issue 20).  kh.eval takes the
-- task as kh.task.load gives it and a candidate as a Solution table: the
-- package is read once for any number of evaluations, the candidate never
-- goes through a file, and the verdicts are those of the path-and-file form.
-- Policies never shell out.  Host backend (runs here); correctness only.
local T = require "testlib"
local kh = require "kh"

if not kh.eval then T.skip_all("kh.eval is not in this build") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local REF = TASK .. "/solutions/rmsnorm_h512_ref_c.json"

local function candidate(name)
  local s = kh.json.decode(T.read(REF))
  s.name = name
  s.author = "test"
  return s
end

local function statuses(traces)
  local out = {}
  for _, t in ipairs(traces) do out[#out + 1] = t.evaluation.status end
  return table.concat(out, ",")
end

local OPTS = { timing = false, workloads = 2, record = false, trials = 2 }

T.test("a task value and a Solution table: read once, verdicts as from the path and a file", function()
  local ts = assert(kh.task.load(TASK))
  local loads = kh.task.loads()
  local a = assert(kh.eval(ts, candidate("cand_a"), OPTS))
  local b = assert(kh.eval(ts, candidate("cand_b"), OPTS))
  local r = assert(kh.eval(ts, "rmsnorm_h512_ref_c", OPTS))
  T.eq(kh.task.loads(), loads, "three evaluations of a loaded task read no file of it again")
  T.eq(statuses(a), "PASSED,PASSED")
  T.eq(statuses(b), "PASSED,PASSED")
  T.eq(statuses(r), "PASSED,PASSED")
  T.eq(a[1].solution, "cand_a")
  -- the same candidate as a file, the task as a path: the same verdicts,
  -- the same task hash (the fingerprint taken when the value was loaded)
  local dir = T.tmpdir()
  local f = assert(io.open(dir .. "/cand_a.json", "w"))
  f:write(kh.json.encode(candidate("cand_a")))
  f:close()
  local p = assert(kh.eval(TASK, dir .. "/cand_a.json", OPTS))
  T.eq(statuses(p), statuses(a))
  T.eq(p[1].evaluation.khlua.hashes.task, a[1].evaluation.khlua.hashes.task)
  T.ok(kh.task.loads() > loads, "the path form reads the task")
end)

T.test("a file changed after the load is named, and the loaded version is used", function()
  local dir = T.tmpdir() .. "/pkg"
  T.ok(os.execute("cp -r '" .. TASK .. "' '" .. dir .. "'"))
  local ts = assert(kh.task.load(dir))
  -- the tolerance loosened on disk after the load: not what is used
  local def = kh.json.decode(T.read(dir .. "/definition.json"))
  def.khlua.tolerance = { atol = 1e9, rtol = 1e9 }
  local f = assert(io.open(dir .. "/definition.json", "w"))
  f:write(kh.json.encode(def))
  f:close()
  -- a candidate half a unit off everywhere: wrong under the loaded
  -- tolerance (0.01), right under the one now on disk
  local off = candidate("half_off")
  local src = off.sources[1].content
  local n
  off.sources[1].content, n = src:gsub("%* bf16_to_f32%(w%[c%]%)%)", "* bf16_to_f32(w[c]) + 0.5f)")
  T.eq(n, 1)
  local tr = assert(kh.eval(ts, off, OPTS))
  T.eq(tr[1].evaluation.status, "INCORRECT_NUMERICAL")
  T.match(tr[1].evaluation.khlua.task_changed or "", "definition%.json changed on disk")
  -- and the version on disk is what a fresh load takes
  local fresh = assert(kh.task.load(dir))
  T.eq(statuses(assert(kh.eval(fresh, off, OPTS))), "PASSED,PASSED")
end)

T.test("a Solution table that is not one, or names what the task lacks, is refused by name", function()
  local ts = assert(kh.task.load(TASK))
  local s = candidate("nodef")
  s.definition = "no_such_definition"
  local r, msg = kh.eval(ts, s, OPTS)
  T.eq(r, nil)
  T.match(msg, "solution .nodef.")
  T.match(msg, "no_such_definition")
  r, msg = kh.eval(ts, { name = "x" }, OPTS)
  T.eq(r, nil)
  T.match(msg, "solution x")
  T.match(msg, "not a Solution")
  -- a manifest binding an input the definition lacks: the candidate's verdict
  local b = candidate("badbind")
  b.spec.khlua.args[1] = { input = "no_such_input" }
  local tr = assert(kh.eval(ts, b, OPTS))
  T.eq(tr[1].evaluation.status, "COMPILE_ERROR")
  T.match(tr[1].evaluation.log, "solution badbind")
  -- a closed task value is an error, not a crash
  ts:close()
  T.ok(not pcall(kh.eval, ts, candidate("y"), OPTS))
end)

T.test("policies never shell out and write no scratch files", function()
  local p = assert(io.popen("find '" .. SRC .. "/policies' -name '*.lua'"))
  local n = 0
  for file in p:lines() do
    n = n + 1
    local text = T.read(file)
    for _, pat in ipairs { "io%.popen", "os%.execute", "mktemp", "os%.tmpname" } do
      T.ok(not text:find(pat), file .. " uses " .. pat)
    end
  end
  p:close()
  T.ok(n > 10, "policies found: " .. n)
end)

T.test("a policy run reads its task once and hands candidates over as tables", function()
  package.path = SRC .. "/policies/?.lua;" .. SRC .. "/tests/lua/lib/?.lua;" .. package.path
  local ctl = require "lib.controller"
  local ev = require "lib.evaluate"
  local policy = require "lib.policy"
  local cli = require "lib.cli"
  local fake = require "fake_eval"
  local LADDER = SRC .. "/tests/fixtures/replay/ctl"
  local P = assert(policy.load(SRC .. "/policies/plateau_switch.lua"))
  local db <close> = assert(kh.store.open(T.tmpdir() .. "/store", { nosync = true }))
  local cfg = { task = TASK, model_specs = "replay:" .. LADDER .. "/a", rounds = 3, plateau = 2,
    db = db, skills = SRC .. "/skills", out = function() end, gate = { seed = 7 } }
  assert(cli.resolve_models(cfg))
  local seen = { calls = 0, tasks = {}, kinds = {} }
  ev.use(function(task, sol, opts)
    seen.calls = seen.calls + 1
    seen.tasks[task] = true
    seen.kinds[type(sol)] = true
    return fake.evaluate(task, sol, opts)
  end)
  local loads = kh.task.loads()
  local res, msg = ctl.run(P, cfg)
  ev.use(nil)
  T.ok(res, msg)
  T.eq(kh.task.loads() - loads, 1, "the run read its task package once")
  T.ok(seen.calls >= 3, "evaluations: " .. seen.calls)
  local n = 0
  for t in pairs(seen.tasks) do
    n = n + 1
    T.eq(type(t), "userdata", "every evaluation got the task value, not a path")
  end
  T.eq(n, 1, "one task value for the whole run")
  T.ok(seen.kinds.table, "candidates went in as Solution tables")
end)
