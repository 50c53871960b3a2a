-- net_concurrency.lua: the asynchronous search (--concurrency K; issue 21).
-- A loopback model that takes 3 s per reply (tests/mock_llm.py, the replay
-- ladder of tests/fixtures/replay/ctl with --ladder-delay) and the
-- deterministic fake evaluator: with K = 4 the next rounds' calls are in
-- flight while a round is judged, so the run's wall time is well under the
-- sequential run's (model time + evaluation time per round), with the same
-- rounds and calls recorded, in order.
local T = require "testlib"
local kh = require "kh"
local mock = require "mockllm"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local LADDER = SRC .. "/tests/fixtures/replay/ctl"
local DELAY = 3
local srv, why = mock.start(300, { ladder = LADDER, ladder_delay = DELAY })
if not srv then T.skip_all(why) end

local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local POLICY = SRC .. "/policies/plateau_switch.lua"
local ROUNDS = 6

math.randomseed(T.seed())

local function run(k, tag)
  local store = T.tmpdir() .. "/store"
  local t0 = kh.time.now()
  local out, code = T.khlua_env({ KH_FAKE_EVAL_DELAY = "0.05" }, "--store", store, POLICY,
    "--task", TASK, "--model", "compat:a@" .. srv.base("ladder", 0, tag), "--rounds",
    tostring(ROUNDS), "--plateau", "10", "--fake-evaluator", FAKE, "--json", "--seed",
    tostring(math.random(1, 1000)), "--concurrency", tostring(k), "--report", "none")
  local wall = kh.time.now() - t0
  T.eq(code, 0, out)
  local summary = kh.json.decode(out:match("(%b{})%s*$"))
  return { wall = wall, summary = summary, store = store }
end

T.test("K = 4 calls in flight: the same rounds in well under the sequential wall time", function()
  local seq = run(1, "s" .. math.random(1, 1 << 30))
  local par = run(4, "p" .. math.random(1, 1 << 30))
  io.write(string.format("# %d rounds, model %d s per reply: K = 1 %.1f s, K = 4 %.1f s "
    .. "(ratio %.2f)\n", ROUNDS, DELAY, seq.wall, par.wall, par.wall / seq.wall))
  T.ok(seq.wall >= ROUNDS * DELAY, "the sequential run waits for every reply")
  T.ok(par.wall < 0.7 * seq.wall, string.format("K = 4: %.1f s against %.1f s", par.wall,
    seq.wall))
  for _, r in ipairs { seq, par } do
    T.eq(r.summary.metrics.rounds, ROUNDS)
    local db <close> = assert(kh.store.open(r.store, { readonly = true }))
    local rounds = db:query { run = r.summary.run, type = "round" }
    T.eq(#rounds, ROUNDS)
    T.eq(#db:query { run = r.summary.run, type = "llm_call" }, ROUNDS,
      "no call past the last round")
    table.sort(rounds, function(a, b) return a.index < b.index end)
    local ahead = 0
    for i, rd in ipairs(rounds) do
      T.eq(rd.index, i)
      T.eq(#rd.llm_calls, 1)
      if rd.state_in.planned_after_round then
        ahead = ahead + 1
        T.ok(rd.state_in.planned_after_round < i - 1, "planned before the previous round ended")
      end
    end
    if r == par then
      T.ok(ahead >= ROUNDS - 2, "rounds planned ahead: " .. ahead)
    else
      T.eq(ahead, 0, "K = 1 plans no round ahead")
    end
  end
  -- the same ladder replies (the server numbers concurrent requests as they
  -- arrive, so the order may differ): the same candidates
  local function cands(r)
    local db <close> = assert(kh.store.open(r.store, { readonly = true }))
    local rounds = db:query { run = r.summary.run, type = "round" }
    table.sort(rounds, function(a, b) return a.index < b.index end)
    local out = {}
    for _, rd in ipairs(rounds) do out[#out + 1] = rd.candidates[1] or "-" end
    table.sort(out)
    return table.concat(out, ",")
  end
  T.eq(cands(par), cands(seq))
end)


