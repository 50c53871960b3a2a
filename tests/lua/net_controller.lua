-- net_controller.lua: the controller's runs against the loopback mock model
-- server (tests/mock_llm.py, fault "ladder" serving the replay ladder of
-- tests/fixtures/replay/ctl over HTTP, OpenAI-compatible chat): plateau and
-- model switch, rejections, promotions with evidence, and a killed run that
-- resumes.  Evaluations come from the deterministic fake (fake_eval.lua).
local T = require "testlib"
local kh = require "kh"
local mock = require "mockllm"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local LADDER = SRC .. "/tests/fixtures/replay/ctl"
local srv, why = mock.start(180, { ladder = LADDER })
if not srv then T.skip_all(why) end

local BIN = os.getenv("KHLUA_BIN") or arg[-1]
local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local POLICY = SRC .. "/policies/plateau_switch.lua"

local function specs(tag)
  local base = srv.base("ladder", 0, tag)
  return "compat:a@" .. base .. ",compat:b@" .. base
end

local function sorted_rounds(db, run)
  local rs = db:query { run = run, type = "round" }
  table.sort(rs, function(a, b) return a.index < b.index end)
  return rs
end

T.test("plateau_switch over HTTP: promotion, rejections, plateau and model switch", function()
  local store = T.tmpdir() .. "/store"
  local tag = "c" .. math.random(1, 1 << 30)
  local out, code = T.khlua("--store", store, POLICY, "--task", TASK, "--model", specs(tag),
    "--rounds", "8", "--plateau", "2", "--fake-evaluator", FAKE, "--json",
    "--seed", tostring(math.random(1, 1000)))
  T.eq(code, 0, out)
  local summary = kh.json.decode(out:match("(%b{})%s*$"))
  T.eq(summary.metrics.accepted, 2)
  local db <close> = assert(kh.store.open(store, { readonly = true }))
  local rounds = sorted_rounds(db, summary.run)
  T.eq(#rounds, 8)
  T.eq(rounds[1].verdicts[1].rejected_for, "slower")
  T.ok(rounds[2].decision.promoted)
  T.eq(rounds[3].verdicts[1].rejected_for, "incorrect")
  T.ok(rounds[4].events.plateau)
  T.eq(rounds[4].actions[1].kind, "switch_family")
  T.match(rounds[5].model, "^compat:b@")
  T.eq(rounds[5].verdicts[1].rejected_for, "incorrect")
  T.ok(rounds[6].decision.promoted)
  local calls = db:query { run = summary.run, type = "llm_call" }
  T.eq(#calls, 8)
  for _, c in ipairs(calls) do
    T.eq(c.provider, "compat")
    T.ok(c.usage.input > 0, "usage recorded")
  end
  -- the server saw the prompts the store holds
  local p = io.popen("curl -s " .. srv.root .. "/__log/" .. tag)
  local log = p and p:read("a")
  if p then p:close() end
  if log and log ~= "" then
    local all = kh.json.decode(log)
    -- first the probe of each family (one tiny question), then the rounds' calls
    T.eq(#all, 10)
    local probe = "Reply with the single word OK."
    local seen = {}
    for i, r in ipairs(all) do
      local last = r.body.messages[#r.body.messages].content
      if i <= 2 then T.eq(last, probe); T.eq(r.body.max_tokens, 16)
      else seen[#seen + 1] = r end
    end
    T.eq(all[1].body.model, "a")
    T.eq(all[2].body.model, "b")
    T.eq(#seen, 8)
    T.eq(seen[1].body.model, "a")
    T.eq(seen[5].body.model, "b")
  end
  local promos = db:query { run = summary.run, type = "promotion" }
  T.eq(#promos, 2)
  for _, pr in ipairs(promos) do T.ok(#pr.evidence >= 20, "evidence stored") end
  -- the calls are recorded as the model client makes them (the raw stream, the
  -- fingerprint), so the run replays from the store: its oldest call answers first
  local first = calls[#calls]
  T.ok(first.fingerprint and db:has_blob(first.response_blob), "a client's record")
  local rout, rcode = T.khlua("--store", store, "llm", "ask", "--no-store", "--replay-run",
    summary.run, "any prompt")
  T.eq(rcode, 0, rout)
  T.ok(#first.text > 0 and rout:find(first.text, 1, true), rout)
end)

T.test("a run killed mid-way against the server resumes at the next round", function()
  local store = T.tmpdir() .. "/store"
  local tag = "k" .. math.random(1, 1 << 30)
  local log = os.tmpname()
  local cmd = table.concat({ T.quote(BIN), "--store", T.quote(store), T.quote(POLICY), "--task",
    T.quote(TASK), "--model", T.quote(specs(tag)), "--rounds", "6", "--plateau", "2",
    "--fake-evaluator", T.quote(FAKE), "--pace", "1.5" }, " ")
  local p = assert(io.popen("exec " .. cmd .. " > " .. log .. " 2>&1 & echo $!"))
  local pid = tonumber(p:read("l"))
  p:close()
  local run
  local t0 = kh.time.now()
  while kh.time.now() - t0 < 30 and not run do
    local db = kh.store.open(store, { readonly = true })
    if db then
      for _, r in ipairs(db:query { type = "round" }) do if r.index == 2 then run = r.run end end
      db:close()
    end
    if not run then kh.time.sleep(0.02) end
  end
  T.ok(run, "round 2 appeared")
  os.execute("kill -9 " .. pid)
  kh.time.sleep(0.2)
  os.remove(log)
  local out, code = T.khlua("--store", store, POLICY, "--resume", run, "--fake-evaluator", FAKE)
  T.eq(code, 0, out)
  T.ok(out:find("resuming " .. run .. " after round 2", 1, true), out)
  local db <close> = assert(kh.store.open(store, { readonly = true }))
  local rounds = sorted_rounds(db, run)
  T.eq(#rounds, 6)
  for i, r in ipairs(rounds) do T.eq(r.index, i) end
  T.eq(db:get(run).status, "done")
end)

T.test("priced models: money is counted per call and the money budget stops the run", function()
  package.path = SRC .. "/policies/?.lua;" .. SRC .. "/tests/lua/lib/?.lua;" .. package.path
  local ctl = require "lib.controller"
  local cli = require "lib.cli"
  local ev = require "lib.evaluate"
  local llm = require "lib.llm"
  local policy = require "lib.policy"
  local fake = require "fake_eval"
  local price = 0.5 + math.random()
  llm.prices.a = { input = price, output = 2 * price }
  llm.prices.b = { input = price, output = 2 * price }
  local db = assert(kh.store.open(T.tmpdir() .. "/store", { nosync = true }))
  local cfg = { task = TASK, model_specs = specs("p" .. math.random(1, 1 << 30)), rounds = 20,
    plateau = 2, db = db, quiet = true, budget = { usd = 0.01 } }
  assert(cli.resolve_models(cfg))
  ev.use(fake.evaluate)
  local res, msg = ctl.run(assert(policy.load(POLICY)), cfg)
  ev.use(nil)
  llm.prices.a, llm.prices.b = nil, nil
  T.ok(res, msg)
  T.eq(res.stop_reason, "money budget")
  local calls = db:query { run = res.run, type = "llm_call" }
  local sum = 0
  for _, c in ipairs(calls) do
    T.ok(c.cost_usd > 0)
    local want = (c.usage.input - (c.usage.cache_read or 0) - (c.usage.cache_write or 0)) * price / 1e6
      + (c.usage.cache_read or 0) * price / 1e6 + c.usage.output * 2 * price / 1e6
    T.near(c.cost_usd, want, 1e-12)
    sum = sum + c.cost_usd
  end
  T.near(res.metrics.usd, sum, 1e-12)
  T.ok(sum >= 0.01 and #calls < 20)
  if res.metrics.accepted > 0 then
    T.near(res.metrics.usd_per_accepted, sum / res.metrics.accepted, 1e-12)
  end
  db:close()
end)

T.test("stop the server", function() srv.stop() end)
