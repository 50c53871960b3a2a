-- net_failfast.lua: a run whose model cannot answer stops at once, with the
-- reason and exit 1, instead of failing round after round and exiting 0
-- (issue 23, "fail fast"); options out of range are usage errors (exit 2);
-- --resume of a run that does not exist says so; records of replayed replies
-- name the replay.  Against the loopback mock server (tests/mock_llm.py);
-- evaluations come from the deterministic fake (fake_eval.lua).
local T = require "testlib"
local kh = require "kh"
local mock = require "mockllm"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local LADDER = SRC .. "/tests/fixtures/replay/ctl"
local srv, why = mock.start(240, { ladder = LADDER })
if not srv then T.skip_all(why) end

local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local POLICY = SRC .. "/policies/plateau_switch.lua"
-- no key in the environment: a family that needs one runs on replay
local NOKEYS = { ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "" }
math.randomseed(T.seed())

local function run(store, ...)
  local t0 = kh.time.now()
  local out, code = T.khlua_env(NOKEYS, "--store", store, POLICY, "--task", TASK,
    "--fake-evaluator", FAKE, "--seed", tostring(math.random(1, 1000)), ...)
  return out, code, kh.time.now() - t0
end

local function records(store, type_)
  local db = kh.store.open(store, { readonly = true })
  if not db then return {} end
  local out = {}
  for _, r in ipairs(db:query { type = type_ }) do out[#out + 1] = db:get(r.id or r) or r end
  db:close()
  return out
end

local function tag() return "f" .. math.random(1, 1 << 30) end

T.test("a server that is down stops the run before round 1", function()
  local store = T.tmpdir() .. "/store"
  local out, code, dt = run(store, "--model", "compat:x@http://127.0.0.1:9/v1", "--rounds", "3")
  T.eq(code, 1, out)
  T.match(out, "model probe failed: compat:x@http://127%.0%.0%.1:9/v1")
  T.ok(dt < 30, string.format("took %.1f s", dt))
  T.eq(#records(store, "run"), 0, "no run was recorded")
  T.eq(#records(store, "llm_call"), 0)
end)

T.test("a rejected key stops the run before round 1", function()
  local store = T.tmpdir() .. "/store"
  local out, code = run(store, "--model", "compat:a@" .. srv.base("401", 0, tag()), "--rounds", "3")
  T.eq(code, 1, out)
  T.match(out, "model probe failed: .*HTTP 401")
  T.eq(#records(store, "run"), 0)
end)

T.test("an unknown model stops the run before round 1", function()
  local store = T.tmpdir() .. "/store"
  local base = srv.base("ladder", 0, tag())
  local out, code = run(store, "--model", "compat:a@" .. base .. ",compat:nosuchmodel@" .. base)
  T.eq(code, 1, out)
  T.match(out, "model probe failed: compat:nosuchmodel@.*HTTP 404")
  T.eq(#records(store, "run"), 0)
end)

T.test("a replay folder that is missing or empty stops the run", function()
  local store = T.tmpdir() .. "/store"
  local out, code = run(store, "--model", "replay:/nonexistent/khlua-replay")
  T.eq(code, 1, out)
  T.match(out, "the replay folder /nonexistent/khlua%-replay does not exist")
  local empty = T.tmpdir()
  out, code = run(store, "--model", "replay:" .. empty)
  T.eq(code, 1, out)
  T.match(out, "no replies in")
  T.eq(#records(store, "run"), 0)
end)

T.test("calls that fail after a good probe stop the run after N in a row, exit 1", function()
  for _, n in ipairs({ 3, 5 }) do
    local store = T.tmpdir() .. "/store"
    local args = { "--model", "compat:a@" .. srv.base("fail_after_probe", 0, tag()), "--rounds", "20" }
    if n ~= 3 then args[#args + 1] = "--max-failed-calls"; args[#args + 1] = tostring(n) end
    local out, code = run(store, table.unpack(args))
    T.eq(code, 1, out)
    T.match(out, "model compat:a@.* answers")
    T.match(out, "model calls failing %(" .. n .. " in a row; the last: compat:a@.*HTTP 400")
    T.match(out, "no model call succeeded %(" .. n .. " made%)")
    local runs = records(store, "run")
    T.eq(#runs, 1)
    T.eq(runs[1].status, "failed")
    T.match(runs[1].error, "model calls failing")
    T.eq(runs[1].rounds_done, n)
    local calls = records(store, "llm_call")
    T.eq(#calls, n)
    for _, c in ipairs(calls) do T.eq(c.ok, false) end
  end
end)

T.test("a good run still exits 0 and says its model answered", function()
  local store = T.tmpdir() .. "/store"
  local base = srv.base("ladder", 0, tag())
  local out, code = run(store, "--model", "compat:a@" .. base .. ",compat:b@" .. base,
    "--rounds", "2")
  T.eq(code, 0, out)
  T.match(out, "model compat:a@.* answers")
  T.match(out, "model compat:b@.* answers")
  -- the probe took no step of the ladder: round 1 got step 1 (a slower candidate)
  local rounds = records(store, "round")
  T.eq(#rounds, 2)
  for _, r in ipairs(rounds) do
    if r.index == 1 then T.eq(r.verdicts[1].rejected_for, "slower") end
  end
end)

T.test("--resume of a run that does not exist says so", function()
  local store = T.tmpdir() .. "/store"
  local out, code = T.khlua("--store", store, POLICY, "--resume", "run-NOPE")
  T.eq(code, 1, out)
  T.match(out, "%-%-resume run%-NOPE: cannot open the store: no store at")
  local db = assert(kh.store.open(store))
  db:close()
  out, code = T.khlua("--store", store, POLICY, "--resume", "run-NOPE")
  T.eq(code, 1, out)
  T.match(out, "%-%-resume run%-NOPE: no such run in the store")
  T.ok(not out:find("API_KEY", 1, true), out)
end)

T.test("options out of range are usage errors", function()
  local cases = {
    { { "--margin", "-5" }, "%-%-margin must be between 0 and 10" },
    { { "--rounds", "0" }, "%-%-rounds must be between 1" },
    { { "--candidates", "9" }, "%-%-candidates must be between 1 and 4" },
    { { "--concurrency", "0" }, "%-%-concurrency must be between 1 and 64" },
    { { "--reps", "1" }, "%-%-reps must be between 2" },
    { { "--finalist-seeds", "0" }, "%-%-finalist%-seeds must be between 1" },
    { { "--max-failed-calls", "0" }, "%-%-max%-failed%-calls must be between 1" },
    { { "--budget", "wall=0" }, "%-%-budget: wall must be above 0" },
    { { "--pace", "-1" }, "%-%-pace must be between 0" },
  }
  for _, c in ipairs(cases) do
    local out, code = T.khlua(POLICY, "--task", TASK, table.unpack(c[1]))
    T.eq(code, 2, table.concat(c[1], " ") .. ": " .. out)
    T.match(out, c[2])
  end
end)

T.test("records of replayed replies name the replay, not the model", function()
  local store = T.tmpdir() .. "/store"
  local out, code = run(store, "--model", "anthropic:claude-sonnet-4-5", "--replay",
    LADDER .. "/a", "--rounds", "2")
  T.eq(code, 0, out)
  T.match(out, "runs on the replay provider")
  local calls = records(store, "llm_call")
  T.eq(#calls, 2)
  for _, c in ipairs(calls) do
    T.eq(c.provider, "replay")
    T.match(c.model, "^replay:")
    T.eq(c.family, "anthropic:claude-sonnet-4-5")
  end
end)

T.test("cleanup", function() srv.stop() end)
