-- test_controller_host.lua: plateau_switch end to end on the host backend
-- with the real evaluation harness (kh.eval: the host worker compiles the
-- ladder's C candidates, checks them against the trusted reference and times
-- them) and the replay provider.  Timing on a shared machine is noisy, so the
-- assertions are about what the measurements cannot blur: the wrong and the
-- constant-writing candidates are caught, the 2x slower one is rejected as
-- slower, a plateau switches the model family, a promotion is stored with
-- its evidence (the faster candidate's modest gain may stay inside the
-- paired interval on a loaded machine: then it was judged on speed), and
-- the store is consistent.  Skipped without kh.eval.
local T = require "testlib"
local kh = require "kh"

if not kh.eval then T.skip_all("kh.eval is not in this build") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local LADDER = SRC .. "/tests/fixtures/replay/ctl"

T.test("plateau_switch with real host evaluation", function()
  local store = T.tmpdir() .. "/store"
  local out, code = T.khlua("--store", store, SRC .. "/policies/plateau_switch.lua", "--task",
    SRC .. "/tests/fixtures/task/rmsnorm", "--model",
    "replay:" .. LADDER .. "/a,replay:" .. LADDER .. "/b", "--rounds", "8", "--plateau", "2",
    "--seed", tostring(math.random(1, 1000)), "--json")
  T.eq(code, 0, out)
  local summary = kh.json.decode(out:match("(%b{})%s*$"))
  local db <close> = assert(kh.store.open(store, { readonly = true }))
  local rounds = db:query { run = summary.run, type = "round" }
  T.eq(#rounds, 8)
  local step = {}
  for _, c in ipairs(db:query { run = summary.run, type = "llm_call" }) do
    step[c.round_index] = c.replay_file:match("/(%a/%d%d)/reply%.json$")
  end
  local switched, promoted = false, 0
  for _, r in ipairs(rounds) do
    local v = r.verdicts[1]
    local s = step[r.index]
    if s == "a/03" or s == "b/01" then
      T.eq(v.rejected_for, "incorrect", s .. " is caught")
      T.match(v.reason, "INCORRECT_NUMERICAL")
    elseif s == "a/01" then
      -- rejected as slower, or as no faster beyond noise: on a loaded
      -- two-core machine (the candidate's jail and the warden each need a
      -- core, and ctest -j runs other tests beside) the paired interval can
      -- straddle 1 either way (a median ratio of 1.056 with a lower bound
      -- of 0.826 was seen); what must never happen is its promotion
      T.ok(v.rejected_for == "slower" or v.rejected_for == "not_faster",
           "a/01 (double, a square root per element): " .. tostring(v.rejected_for) .. ": " ..
           tostring(v.reason))
      T.ok(not r.decision.promoted, "a/01 is not promoted")
    end
    for _, a in ipairs(r.actions) do if a.kind == "switch_family" then switched = true end end
    if r.decision.promoted then promoted = promoted + 1 end
  end
  T.ok(switched, "a plateau switched the model family")
  if promoted == 0 then
    -- a/02's real gain is modest (about 1.1-1.2x on 3-9 us host workloads):
    -- timing noise on a loaded 2-core machine can keep it inside the paired
    -- interval.  Then it must have been judged on speed, never refused as
    -- wrong, in every round it came up
    local judged = 0
    for _, r in ipairs(rounds) do
      if step[r.index] == "a/02" then
        local v = r.verdicts[1]
        T.ok(v.rejected_for ~= "incorrect" and v.rejected_for ~= nil,
          "a/02 judged on speed: " .. tostring(v.rejected_for) .. ": " .. tostring(v.reason))
        judged = judged + 1
      end
    end
    T.ok(judged >= 1, "a/02 (correct and faster) was judged")
    io.write("# no promotion this run: a/02's gain stayed within the paired interval\n")
  end
  for _, p in ipairs(db:query { run = summary.run, type = "promotion" }) do
    T.ok(p.gate.representative.lo > 1 + p.gate.representative.margin)
    T.eq(p.gate.finalist.trials, 100)
    for _, id in ipairs(p.evidence) do T.eq(db:get(id).type, "evaluation") end
  end
  local v = db:verify()
  T.eq(#(v.problems or {}), 0)
end)
