-- test_best.lua: a run's best kernel out in one command (issue 23, "results
-- out"): the run's last line names the command; `khlua best RUN --out DIR`
-- writes the Solution JSON (the incumbent's launch manifest under
-- spec.khlua), its source and figures.json (score, the promotion's gate
-- figures and evidence); `khlua eval` takes that file from anywhere, and a
-- new run can start from it (--seed-solution FILE).  Errors: no run, a run
-- that does not exist.  Evaluations in the runs come from the deterministic
-- fake (fake_eval.lua); the eval of the exported file is real (host).
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local POLICY = SRC .. "/policies/plateau_switch.lua"
local LADDER = SRC .. "/tests/fixtures/replay/ctl/a"
local NOKEYS = { ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "" }

local store = T.tmpdir() .. "/store"
local run, incumbent, best_file, best_candidate

T.test("the run's last line says how to get its best kernel out", function()
  -- the ladder's second reply is promoted (net_controller.lua)
  local out, code = T.khlua_env(NOKEYS, "--store", store, POLICY, "--task", TASK,
    "--fake-evaluator", FAKE, "--model", "replay:" .. LADDER, "--rounds", "3", "--seed", "5")
  T.eq(code, 0, out)
  run, incumbent = out:match("run (run%-%w+) done .-incumbent (%S+) %(score")
  T.ok(run and incumbent, out)
  local last = out:match("([^\n]+)\n?$")
  T.eq(last, string.format("best kernel: %s (promoted); write it out with: khlua --store %s best "
    .. "%s --out best-%s; report: %s/reports/%s.html", incumbent, store, run, run,
    store:match("^(.*)/[^/]*$"), run))
end)

T.test("khlua best RUN --out DIR writes the Solution, its source and the figures", function()
  local dir = T.tmpdir() .. "/best"
  local out, code = T.khlua("--store", store, "best", run, "--out", dir, "--json")
  T.eq(code, 0, out)
  local sum = kh.json.decode(out:match("%b{}"))
  T.eq(sum.run, run)
  local sol = kh.json.decode(T.read(sum.solution))
  T.eq(sol.name, incumbent)
  T.eq(sol.definition, "rmsnorm_h512")
  T.eq(sol.spec.language, "cpp")
  T.eq(sol.spec.khlua.backend, "host")
  T.eq(sol.sources[1].path, "kernel.c")
  T.eq(T.read(sum.source), sol.sources[1].content)
  -- the source is the candidate's, byte for byte
  local db <close> = assert(kh.store.open(store, { readonly = true }))
  local cand = assert(db:get(sum.candidate))
  T.eq(db:get_blob(cand.source_blob), sol.sources[1].content)
  T.eq(db:get(run).incumbent_candidate, sum.candidate)
  local fig = kh.json.decode(T.read(sum.figures))
  T.eq(fig.origin, "model")
  T.ok(fig.promotion and fig.promotion.candidate == sum.candidate, "the promotion that made it")
  T.ok(#fig.promotion.evidence > 0, "the promotion's evidence ids")
  T.near(fig.score, db:get(run).metrics.incumbent_score, 1e-12)
  -- `best last` is the newest run; without --out the source goes to stdout
  local src = T.khlua("--store", store, "best", "last")
  T.ok(src:find(sol.sources[1].content, 1, true), src)
  best_file = sum.solution
  best_candidate = sum.candidate
end)

T.test("khlua eval takes the exported Solution from anywhere", function()
  local out, code = T.khlua("eval", "--task", TASK, "--solution", best_file, "--no-timing",
    "--no-store", "--json")
  T.eq(code, 0, out)
  local n = 0
  for line in out:gmatch("[^\n]+") do
    if line:match("^{") then
      local t = kh.json.decode(line)
      T.eq(t.evaluation.status, "PASSED", line)
      n = n + 1
    end
  end
  T.eq(n, 3)
  -- recorded by khlua eval, the same kernel has the id the policy run gave it
  out, code = T.khlua("--store", store, "eval", "--task", TASK, "--solution", best_file,
    "--no-timing", "--workloads", "1", "--json")
  T.eq(code, 0, out)
  local t = kh.json.decode(out:match("[^\n]*{[^\n]*"))
  local db <close> = assert(kh.store.open(store, { readonly = true }))
  T.eq(assert(db:get(t.evaluation.khlua.record)).candidate, best_candidate)
end)

T.test("a new run starts from the exported Solution (--seed-solution FILE)", function()
  local s2 = T.tmpdir() .. "/store"
  local out, code = T.khlua_env(NOKEYS, "--store", s2, POLICY, "--task", TASK, "--fake-evaluator",
    FAKE, "--model", "replay:" .. LADDER, "--rounds", "1", "--seed", "5", "--seed-solution",
    best_file)
  T.eq(code, 0, out)
  T.match(out, "incumbent " .. incumbent:gsub("%-", "%%-") .. " ")
  -- one identity: the second run's seed is the first run's best candidate,
  -- under the same id, and its record names no run or model
  local db <close> = assert(kh.store.open(s2, { readonly = true }))
  local run2 = db:query { type = "run" }[1]
  local r2 = assert(db:get(run2.id or run2))
  T.eq(r2.incumbent_candidate, best_candidate)
  local c = assert(db:get(best_candidate))
  for _, k in ipairs { "run", "model", "origin", "solution_name", "round_index", "llm_call" } do
    T.eq(c[k], nil, "a candidate record says nothing of " .. k)
  end
  -- a Solution of another definition is refused, by name
  local other = T.tmpdir() .. "/other.json"
  local sol = kh.json.decode(T.read(best_file))
  sol.definition = "something_else"
  T.write(other, kh.json.encode(sol))
  out, code = T.khlua_env(NOKEYS, "--store", s2, POLICY, "--task", TASK, "--fake-evaluator", FAKE,
    "--model", "replay:" .. LADDER, "--rounds", "1", "--seed-solution", other)
  T.eq(code, 1, out)
  T.match(out, "is a solution of something_else, not of rmsnorm_h512")
end)

T.test("errors: no run given, a run that does not exist", function()
  local out, code = T.khlua("--store", store, "best")
  T.eq(code, 2, out)
  T.match(out, "which run%?")
  out, code = T.khlua("--store", store, "best", "run-NOPE")
  T.eq(code, 1, out)
  T.match(out, "run%-NOPE: no such run in the store")
end)

T.test("the README's policy example runs from a folder of its own", function()
  -- the lua block of the README that defines greedy_family, saved outside policies/
  local readme = T.read(SRC .. "/README.md")
  local code
  for block in readme:gmatch("```lua\n(.-)```") do
    if block:find('name = "greedy_family"', 1, true) then code = block end
  end
  T.ok(code, "the README has the example")
  local dir = T.tmpdir()
  T.write(dir .. "/greedy_family.lua", code)
  local out, code_ = T.khlua_env(NOKEYS, "--store", T.tmpdir() .. "/store", dir .. "/greedy_family.lua",
    "--task", TASK, "--fake-evaluator", FAKE, "--model", "replay:" .. LADDER, "--rounds", "2",
    "--seed", "5")
  T.eq(code_, 0, out)
  T.match(out, "run run%-%w+ done")
end)
