-- test_records_engine.lua: the engine owns the store and every record (issue
-- 20): one writer per record type.  A plateau_switch run on the host rmsnorm
-- task (replay ladder, the deterministic fake evaluator of test_controller)
-- leaves every record type with the fields its readers use, written by the
-- engine's writers; ids name records that exist and a promotion names its
-- evidence by id.  kh.eval's own records join a run through the same
-- writers.  The generic tx:put refuses the engine's types, and no policy
-- calls it (nor put_blob).  Records of the previous controller
-- (tests/fixtures/store/legacy_run.jsonl: a 2-round plateau_switch run made
-- by the khlua before this change, exported with `khlua store export
-- --format jsonl`) stay readable by the report, `khlua best`, `store ls` and
-- `store verify`.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
package.path = SRC .. "/policies/?.lua;" .. SRC .. "/tests/lua/lib/?.lua;" .. package.path
local ctl = require "lib.controller"
local ev = require "lib.evaluate"
local policy = require "lib.policy"
local cli = require "lib.cli"
local report = require "lib.report"
local fake = require "fake_eval"

local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local LADDER = SRC .. "/tests/fixtures/replay/ctl"
local SPECS = "replay:" .. LADDER .. "/a,replay:" .. LADDER .. "/b"
local LEGACY = SRC .. "/tests/fixtures/store/legacy_run.jsonl"

math.randomseed(T.seed())

-- One run for the tests below.
local DIR = T.tmpdir()
local STORE = DIR .. "/store"
local RUN
do
  local db <close> = assert(kh.store.open(STORE, { nosync = true }))
  local cfg = { task = TASK, model_specs = SPECS, rounds = 3, plateau = 2, db = db, quiet = true,
    report = false, gate = { seed = math.random(1, 1000) } }
  assert(cli.resolve_models(cfg))
  ev.use(fake.evaluate)
  local res, msg = ctl.run(assert(policy.load(SRC .. "/policies/plateau_switch.lua")), cfg)
  ev.use(nil)
  RUN = assert(res, msg)
end

-- the record id names a record of that type
local function of_type(db, id, ty)
  T.eq(type(id), "string", "an id of a " .. ty)
  local r = db:get(id)
  T.ok(r, id .. " is in the store")
  T.eq(r.type, ty, id)
  return r
end

T.test("a run leaves every record type, with its fields, ids that resolve", function()
  local db <close> = assert(kh.store.open(STORE, { readonly = true }))
  local run = of_type(db, RUN.run, "run")
  T.eq(run.policy, "plateau_switch")
  T.eq(run.status, "done")
  T.eq(run.stop_reason, "rounds")
  T.eq(run.live, nil, "the liveness mark goes when the run stops")
  T.eq(run.rounds_done, 3)
  T.eq(math.type(run.seed), "integer")
  T.eq(run.models, { "replay:" .. LADDER .. "/a", "replay:" .. LADDER .. "/b" })
  T.eq(run.config.rounds, 3)
  T.eq(run.versions.khlua, kh.version.khlua)
  T.eq(run.metrics.rounds, 3)
  local task = of_type(db, run.task, "task")
  T.eq(task.name, "rmsnorm_h512")
  T.eq(task.path, TASK)
  of_type(db, run.incumbent_candidate, "candidate")
  -- rounds: one per index, the engine's id, what each names exists
  local rounds = db:query { run = RUN.run, type = "round" }
  table.sort(rounds, function(a, b) return a.index < b.index end)
  T.eq(#rounds, 3)
  local calls = 0
  for i, r in ipairs(rounds) do
    T.eq(r.index, i)
    T.eq(r.id, string.format("round-%s-%04d", RUN.run:sub(5), i))
    T.ok(db:has_blob(r.prompt_blob), "the round's prompt is a blob")
    T.match(r.model, "^replay:")
    T.ok(r.state_in and r.state_out, "the controller's state before and after")
    T.eq(#r.llm_calls, 1)
    for _, id in ipairs(r.llm_calls) do
      local c = of_type(db, id, "llm_call")
      calls = calls + 1
      -- the call as the client made it, with the run's facts
      T.eq(c.run, RUN.run)
      T.eq(c.round_index, i)
      T.eq(c.family, r.model)
      T.eq(c.provider, "replay")
      T.match(c.model, "^replay:[ab]$")
      T.eq({ c.ok, c.status }, { true, "ok" })
      T.eq(c.cost_usd, 0)
      T.match(c.fingerprint, "^%x+$")
      T.ok(db:has_blob(c.request_blob) and db:has_blob(c.response_blob))
      T.match(c.replay_file, "/reply%.json$")
      T.ok(c.usage.total > 0)
    end
    for _, id in ipairs(r.candidates) do of_type(db, id, "candidate") end
    for _, v in ipairs(r.verdicts) do
      if v.candidate then of_type(db, v.candidate, "candidate") end
      if v.llm_call then of_type(db, v.llm_call, "llm_call") end
      if v.promotion then of_type(db, v.promotion, "promotion") end
    end
  end
  T.eq(#db:query { run = RUN.run, type = "llm_call" }, calls)
  -- the promotion names its evidence by id: the run's measurements of the
  -- candidate and of the incumbent it replaced
  local promos = db:query { run = RUN.run, type = "promotion" }
  T.eq(#promos, 1)
  local p = promos[1]
  T.eq(p.run, RUN.run)
  of_type(db, p.candidate, "candidate")
  of_type(db, p.incumbent, "candidate")
  T.ne(p.candidate, p.incumbent)
  T.eq(rounds[p.round_index].decision.promotion, p.id)
  T.eq(rounds[p.round_index].decision.promoted, p.candidate)
  T.eq(run.incumbent_candidate, p.candidate)
  T.ok(#p.evidence > 10)
  local measured = {}
  for _, id in ipairs(p.evidence) do
    local e = of_type(db, id, "evaluation")
    T.eq(e.run, RUN.run)
    T.eq(e.round_index, p.round_index)
    T.ok(e.candidate == p.candidate or e.candidate == p.incumbent, id)
    measured[e.candidate] = true
  end
  T.ok(measured[p.candidate] and measured[p.incumbent], "both sides of the paired comparison")
  T.ok(p.gate.representative.ratio > 1 and p.score > 0)
  -- every evaluation: linked to the run, its round and purpose, with provenance
  for _, e in ipairs(db:query { run = RUN.run, type = "evaluation" }) do
    of_type(db, e.task, "task")
    of_type(db, e.candidate, "candidate")
    T.eq(math.type(e.round_index), "integer")
    T.ok(e.purpose, e.id)
    T.ok(e.provenance.hashes.source and e.provenance.seeds and e.provenance.host, e.id)
  end
  T.eq(db:verify().problems, {})
end)

T.test("readers: the report, khlua best, store ls", function()
  local db <close> = assert(kh.store.open(STORE, { readonly = true }))
  local s = assert(report.summarize(db, RUN.run))
  T.eq(s.rounds, 3)
  T.eq(s.accepted, 1)
  T.eq(s.best_candidate, RUN.incumbent)
  -- the calls by provider and model, from the engine's call records
  T.ok(s.settings.models_called["replay:a"] >= 1, "models called")
  local out, code = T.khlua("--store", STORE, "best", RUN.run, "--json")
  T.eq(code, 0, out)
  T.eq(kh.json.decode(out).figures.candidate, RUN.incumbent)
  out, code = T.khlua("store", "ls", "--store", STORE, "--type", "run", "--json")
  T.eq(code, 0, out)
  local ls = kh.json.decode(out:match("^(%b[])"))
  T.eq(#ls, 1)
  T.eq({ ls[1].id, ls[1].status }, { RUN.run, "done" })
end)

T.test("the generic put refuses the engine's record types, naming the writer", function()
  local db <close> = assert(kh.store.open((T.tmpdir() .. "/s")))
  local writers = { task = "tx:put_task", candidate = "tx:put_candidate",
    evaluation = "kh.eval", run = "tx:put_run", round = "tx:put_round",
    llm_call = "tx:put_llm_call", promotion = "tx:put_promotion" }
  for ty, writer in pairs(writers) do
    local rec = { type = ty, policy = "p", name = "n", model = "m" }
    local plain = writer:gsub("%p", "%%%0")
    T.raises(function() db:update(function(tx) tx:put(rec) end) end, plain, "tx:put " .. ty)
    T.raises(function() db:put(rec) end, "written by the engine alone", "db:put " .. ty)
    T.raises(function() db:put_many { { type = "profile", tool = "t" }, rec } end, plain,
      "db:put_many " .. ty)
    T.raises(function() db:update(function(tx) tx:put_many { rec } end) end, plain)
  end
  T.eq(db:stats().records_total, 0, "nothing was written")
  -- the types the engine does not write this way are still put
  T.match(assert(db:put { type = "profile", tool = "ncu" }), "^profile%-")
  -- and the run's own writer takes it, refusing what a run record does not hold
  local id = assert(db:update(function(tx) return tx:put_run { policy = "p" } end))
  T.match(id, "^run%-")
  local v, msg, code = db:update(function(tx)
    assert(tx:put_run { policy = "q" })
    return tx:put_run { policy = "p", colour = "red" }
  end)
  T.eq({ v, code }, { nil, "EINVAL" })
  T.match(msg, "has no field 'colour'")
  T.eq(#db:query { type = "run" }, 1, "a refusal aborts its transaction")
  v, msg = db:update(function(tx) return tx:update_run(id, { status = "done" }) end)
  T.ok(v, msg)
  v, msg = db:update(function(tx) return tx:update_run(id, { rounds_done = 1 }) end)
  T.eq(v, nil)
  T.match(msg, "it has stopped %(done%): only resume = true runs it again")
end)

T.test("kh.eval records a run's evaluation through the same writers", function()
  if not kh.eval then T.skip("kh.eval is not in this build") end
  local db <close> = assert(kh.store.open((T.tmpdir() .. "/s"), { nosync = true }))
  local ts <close> = assert(kh.task.load(TASK))
  local run = assert(db:update(function(tx) return tx:put_run { policy = "by_hand" } end))
  local traces = assert(kh.eval(ts, "rmsnorm_h512_ref_c", { timing = false, workloads = 1,
    trials = 1, store = db, run = run, round_index = 1, purpose = "sweep" }))
  local id = traces[1].evaluation.khlua.record
  local e = of_type(db, id, "evaluation")
  T.eq({ e.run, e.round_index, e.purpose, e.protocol }, { run, 1, "sweep", "none" })
  T.eq(e.status, "PASSED")
  local task = of_type(db, e.task, "task")
  T.eq(task.name, "rmsnorm_h512")
  T.ok(task.definition, "the task record holds its definition")
  of_type(db, e.candidate, "candidate")
end)

-- Lua source without its comments and string contents, line by line.
local function code_lines(text)
  local out, long = {}, false
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if long then
      if line:find("]]", 1, true) then long = false end
      line = ""
    end
    line = line:gsub('"[^"]*"', '""'):gsub("'[^']*'", "''")
    local c = line:find("--", 1, true)
    if c then
      if line:sub(c, c + 3) == "--[[" and not line:find("]]", c, true) then long = true end
      line = line:sub(1, c - 1)
    end
    out[#out + 1] = line
  end
  return out
end

T.test("no policy writes records through the generic writer, or blobs", function()
  local p = assert(io.popen("find " .. T.quote(SRC .. "/policies") .. " -name '*.lua' | sort"))
  local files = {}
  for f in p:lines() do files[#files + 1] = f end
  p:close()
  T.ok(#files >= 10, "found the policies")
  local bad = {}
  for _, f in ipairs(files) do
    for i, line in ipairs(code_lines(T.read(f))) do
      if line:find("[:.]put%s*[({\"']") or line:find("put_blob", 1, true)
        or line:find("put_many", 1, true) or line:find("[:.]bulk%s*%(") then
        bad[#bad + 1] = f:sub(#SRC + 2) .. ":" .. i .. ": " .. line
      end
    end
  end
  T.eq(bad, {}, "generic record or blob writes under policies/")
  -- the scan sees such a call, and not one in a comment
  T.eq(code_lines("x = 1 -- tx:put{...}")[1], "x = 1 ")
  T.ok(code_lines("  assert(tx:put { type = 'run' })")[1]:find("[:.]put%s*[({\"']"))
end)

T.test("records of the previous controller stay readable", function()
  local path = T.tmpdir() .. "/legacy"
  local out, code = T.khlua("store", "import", LEGACY, "--store", path)
  T.eq(code, 0, out)
  T.match(out, "imported 80 records")
  out, code = T.khlua("store", "verify", "--store", path)
  T.eq(code, 0, out)
  local db <close> = assert(kh.store.open(path, { readonly = true }))
  local runs = db:query { type = "run" }
  T.eq(#runs, 1)
  local run = runs[1]
  -- written by the controller itself: llm_call records with its prompt_blob
  local call = db:query { run = run.id, type = "llm_call" }[1]
  T.ok(call.prompt_blob and not call.fingerprint, "a call record of the old shape")
  local s = assert(report.summarize(db, run.id))
  T.eq(s.rounds, 2)
  T.eq(s.accepted, 1)
  T.eq(s.best_candidate, run.incumbent_candidate)
  T.eq(#s.promotions, 1)
  T.ok(#s.promotions[1].sweep > 0, "the promotion's evidence read back")
  T.ok(s.settings.models_called["replay:a"], "models called, from the old call records")
  local md = report.markdown({ s })
  T.ok(md:find(run.id, 1, true), md)
  out, code = T.khlua("--store", path, "best", run.id, "--json")
  T.eq(code, 0, out)
  T.eq(kh.json.decode(out).figures.candidate, run.incumbent_candidate)
  out, code = T.khlua("store", "ls", "--store", path, "--type", "run")
  T.eq(code, 0, out)
  T.ok(out:find(run.id, 1, true) and out:find("done", 1, true), out)
  db:close()
  -- the engine's writer updates an old run record: resumed, then stopped
  local w <close> = assert(kh.store.open(path))
  assert(w:update(function(tx) return tx:update_run(run.id, { resume = true, config = run.config }) end))
  local r = w:get(run.id)
  T.eq({ r.status, r.resumed, r.policy }, { "running", 1, "plateau_switch" })
  T.ok(r.live and r.live.heartbeat, "a liveness mark")
  assert(w:update(function(tx) return tx:update_run(run.id, { status = "interrupted" }) end))
  T.eq(w:get(run.id).live, nil)
end)

T.test("clean up", function() os.execute("rm -rf " .. T.quote(DIR)) end)
