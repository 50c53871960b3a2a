-- test_eval_paired.lua: pairing in the engine (issue 20).  kh.eval with
-- protocol "paired" measures a candidate and an incumbent alternately (A B,
-- B A, ...), each repetition on the same inputs, and returns the ratio
-- (incumbent / candidate latency) with its bootstrap interval, every
-- measurement recorded and named by id.  Host backend (runs here): the
-- candidates are the fixture's C reference and a copy doing its work eight
-- times over (correct, about 8x slower).
local T = require "testlib"
local kh = require "kh"
local stats = require "lib.stats"

if not kh.eval then T.skip_all("kh.eval is not in this build") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local REF = "rmsnorm_h512_ref_c"
local BIG = "5b0d7a8e-0003-4a57-9a3c-1d2e3f405161" -- batch 333

math.randomseed(T.seed())

local function solution(name, body_times, wrong)
  local s = kh.json.decode(T.read(TASK .. "/solutions/" .. REF .. ".json"))
  s.name, s.author = name, "test"
  local src = s.sources[1].content
  -- the whole body body_times over: out may alias x (no restrict), so the
  -- compiler cannot drop the repeats
  src = src:gsub("(void rmsnorm_ref%b()%s*{)", "%1\n  for (int rep_ = 0; rep_ < " .. body_times
    .. "; rep_++)", 1)
  if wrong then src = src:gsub("k %* bf16_to_f32%(w%[c%]%)", "k * 1.5f * bf16_to_f32(w[c])", 1) end
  s.sources[1].content = src
  return s
end

local function opts(extra)
  -- few timed calls: every one is verified, and under the sanitizers that is the cost
  local o = { protocol = "paired", workloads = { BIG }, trials = 1, reps = 4,
    seed = math.random(1, 1 << 40), cold = false, max_iters = 20 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- A comparison timed on a quiet enough machine: taken again (up to 6 times)
-- while another process had the cores (contended: the share of a
-- measurement's timed calls that waited on the run queue after retakes);
-- skipped, saying so, when the machine stays that busy.
local function quiet(ts, sol, o)
  local r
  for _ = 1, 6 do
    r = assert(kh.eval(ts, sol, o))
    if r.contended <= 0.1 then return r end
    o.seed = math.random(1, 1 << 40)
  end
  T.skip(string.format("the machine is too busy to time: %.0f%% of a measurement's timed "
    .. "calls waited on the run queue, 6 times over", 100 * r.contended))
end

T.test("an 8x slower candidate: ratio below 1 with its interval; the reverse above", function()
  local ts <close> = assert(kh.task.load(TASK))
  local slow = solution("slow8", 8)
  local r = quiet(ts, slow, opts { incumbent = REF })
  T.eq(r.protocol, "paired")
  T.eq(r.measure_protocol, "screen")
  T.eq(r.failed, nil)
  T.eq(#r.ratios, 4, "one ratio per (repetition, workload)")
  T.ok(r.ratio < 0.5 and r.hi < 0.7, string.format("ratio %.3f, interval %.3f to %.3f",
    r.ratio, r.lo, r.hi))
  T.ok(r.lo <= r.ratio and r.ratio <= r.hi)
  local back = quiet(ts, REF, opts { incumbent = slow })
  T.ok(back.lo > 2, string.format("reverse: ratio %.3f, lower bound %.3f", back.ratio, back.lo))
  io.write(string.format("# slow8 vs ref: %.3f [%.3f, %.3f]; ref vs slow8: %.3f [%.3f, %.3f]\n",
    r.ratio, r.lo, r.hi, back.ratio, back.lo, back.hi))
end)

T.test("stop_below: a candidate 8x slower everywhere stops after two repetitions; a faster one never", function()
  local ts <close> = assert(kh.task.load(TASK))
  local slow = solution("slow8s", 8)
  -- 8x the work: every ratio near 1/8, far below 0.5 (a contended measurement is taken again)
  local r = quiet(ts, slow, opts { incumbent = REF, stop_below = 0.5 })
  T.eq(r.stop_below, 0.5)
  T.eq(r.stopped_after, 2, string.format("ratios %s", table.concat(r.ratios, ", ")))
  T.eq(#r.ratios, 2, "one ratio per measured (repetition, workload)")
  T.eq(#r.order, 4, "two repetitions, both orders")
  T.eq(r.order, { "candidate", "incumbent", "incumbent", "candidate" })
  T.ok(r.hi < 0.5, string.format("interval %.3f to %.3f", r.lo, r.hi))
  local lo, hi = stats.bootstrap(r.ratios, stats.geomean, { resamples = 2000, alpha = 0.05,
    seed = r.seed })
  T.near(r.lo, lo, 1e-12)
  T.near(r.hi, hi, 1e-12)
  -- the reverse (every ratio near 8) runs every repetition
  local back = quiet(ts, REF, opts { incumbent = slow, stop_below = 0.5 })
  T.eq(back.stopped_after, nil)
  T.eq(#back.ratios, 4)
  -- off by default: the 8x slower candidate measured every repetition
  local all = quiet(ts, slow, opts { incumbent = REF })
  T.eq(all.stopped_after, nil)
  T.eq(#all.ratios, 4)
end)

T.test("alternating order, one seed per repetition for both, figures that replay", function()
  local ts <close> = assert(kh.task.load(TASK))
  local o = opts { incumbent = REF, workloads = 2, reps = 3, resamples = 500, alpha = 0.1 }
  local r = assert(kh.eval(ts, solution("slow2", 2), o))
  T.eq(r.order, { "candidate", "incumbent", "incumbent", "candidate", "candidate", "incumbent" })
  T.eq(#r.workloads, 2)
  T.eq(#r.candidate, 6)
  T.eq(#r.incumbent, 6)
  T.eq(r.seed, o.seed)
  -- repetition k of each: the same base seed (same inputs), another in each repetition
  local seen = {}
  for i = 1, 6 do
    local a, b = r.candidate[i].evaluation.khlua.base_seed, r.incumbent[i].evaluation.khlua.base_seed
    T.eq(a, b, "candidate and incumbent of one repetition share their inputs")
    seen[a] = true
  end
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  T.eq(n, 3, "three repetitions, three seeds")
  -- each ratio is the repetition's incumbent / candidate latency
  for k, x in ipairs(r.ratios) do
    local rep, w = (k - 1) // 2 + 1, (k - 1) % 2 + 1
    local u = r.workloads[w]
    T.near(x, r.incumbent_ms[u][rep] / r.candidate_ms[u][rep], 1e-12)
  end
  -- the interval replays from the ratios and the seed (lib.stats, as gate.lua's)
  T.near(r.ratio, stats.geomean(r.ratios), 1e-12)
  local lo, hi = stats.bootstrap(r.ratios, stats.geomean, { resamples = 500, alpha = 0.1,
    seed = r.seed })
  T.near(r.lo, lo, 1e-12)
  T.near(r.hi, hi, 1e-12)
end)

T.test("every measurement recorded, its purpose naming the side; evidence ids resolve", function()
  local db <close> = assert(kh.store.open((T.tmpdir() .. "/s"), { nosync = true }))
  local ts <close> = assert(kh.task.load(TASK))
  local run = assert(db:update(function(tx) return tx:put_run { policy = "by_hand" } end))
  local r = assert(kh.eval(ts, solution("slow2", 2), opts { incumbent = REF, reps = 2,
    store = db, run = run, round_index = 3, purpose = "representative" }))
  T.eq(#r.evidence, 4)
  local by = {}
  for _, id in ipairs(r.evidence) do
    local e = assert(db:get(id), id)
    T.eq(e.type, "evaluation")
    T.eq({ e.run, e.round_index, e.protocol }, { run, 3, "screen" })
    by[e.purpose] = (by[e.purpose] or 0) + 1
  end
  T.eq(by, { ["representative:candidate"] = 2, ["representative:incumbent"] = 2 })
end)

T.test("a wrong candidate: failed names it, the incumbent's figures still come back", function()
  local ts <close> = assert(kh.task.load(TASK))
  local r = assert(kh.eval(ts, solution("wrong", 1, true), opts { incumbent = REF }))
  T.ok(r.failed, "failed")
  T.eq(r.failed.who, "candidate")
  T.eq(r.failed.status, "INCORRECT_NUMERICAL")
  T.eq(r.failed.workload, BIG)
  T.eq(r.ratio, nil)
  T.eq(#r.order, 2, "the failing repetition is completed, none after it")
  T.eq(#r.incumbent_ms[BIG], 1)
  -- and a wrong incumbent is named as such
  local x = assert(kh.eval(ts, REF, opts { incumbent = solution("wrong", 1, true) }))
  T.eq(x.failed.who, "incumbent")
end)

T.test("bad paired options are refused by name", function()
  local ts <close> = assert(kh.task.load(TASK))
  local function err(o, pat)
    local ok, msg = pcall(kh.eval, ts, REF, o)
    T.eq(ok, false, "refused")
    T.match(tostring(msg), pat)
  end
  err({ protocol = "paired" }, "needs opts.incumbent")
  err({ protocol = "screen", incumbent = REF }, "opts.incumbent is the paired protocol's")
  err({ protocol = "official", reps = 3 }, "opts.reps is the paired protocol's")
  local r, msg = kh.eval(ts, REF, opts { incumbent = REF, reps = 0 })
  T.eq(r, nil)
  T.match(msg, "reps must be 1 to 100")
  for _, x in ipairs { -0.1, 1, 2 } do
    r, msg = kh.eval(ts, REF, opts { incumbent = REF, stop_below = x })
    T.eq(r, nil)
    T.match(msg, "stop_below must be in %[0, 1%)")
  end
  err({ protocol = "screen", stop_below = 0.5 }, "opts.stop_below is the paired protocol's")
  r, msg = kh.eval(ts, REF, opts { incumbent = REF, shapes = 2 })
  T.eq(r, nil)
  T.match(msg, "shapes are correctness only")
  r, msg = kh.eval(ts, REF, opts { incumbent = REF, timing = false })
  T.eq(r, nil)
  T.match(msg, "needs timing on")
  r, msg = kh.eval(ts, REF, opts { incumbent = "no_such_solution" })
  T.eq(r, nil)
  T.match(msg, "no_such_solution")
end)

T.test("khlua eval --incumbent: the table, --json, and its usage errors", function()
  local dir = T.tmpdir()
  T.write(dir .. "/slow8.json", kh.json.encode(solution("slow8", 8)))
  local out, code = T.khlua("eval", "--task", TASK, "--solution", dir .. "/slow8.json",
    "--incumbent", REF, "--workloads", BIG, "--reps", "2", "--warm", "--no-store", "--max-iters",
    "20")
  T.eq(code, 0, out)
  T.match(out, "paired comparison: .-slow8%.json %(candidate%) against " .. REF
    .. " %(incumbent%), 2 repetitions of screen")
  -- (the direction is the kh.eval tests'; here what is printed)
  local ratio, lo, hi = out:match("geometric mean of 2%): ([%d.]+); bootstrap 5%% to 95%% "
    .. "quantiles: ([%d.]+) to ([%d.]+)")
  T.ok(ratio, out)
  T.ok(tonumber(lo) <= tonumber(ratio) and tonumber(ratio) <= tonumber(hi))
  out, code = T.khlua("eval", "--task", TASK, "--solution", REF, "--incumbent",
    dir .. "/slow8.json", "--workloads", BIG, "--reps", "2", "--warm", "--no-store", "--json",
    "--max-iters", "20")
  T.eq(code, 0, out)
  local r = kh.json.decode(out:match("(%b{})%s*$"))
  T.eq(r.protocol, "paired")
  T.eq(#r.ratios, 2)
  T.ok(r.lo <= r.ratio and r.ratio <= r.hi)
  T.eq(#r.order, 4)
  -- a wrong candidate: named, exit 1
  T.write(dir .. "/wrong.json", kh.json.encode(solution("wrong", 1, true)))
  out, code = T.khlua("eval", "--task", TASK, "--solution", dir .. "/wrong.json", "--incumbent",
    REF, "--workloads", BIG, "--reps", "2", "--no-store", "--max-iters", "20")
  T.eq(code, 1, out)
  T.match(out, "candidate INCORRECT_NUMERICAL on workload " .. BIG:gsub("%-", "%%-"))
  out, code = T.khlua("eval", "--task", TASK, "--solution", REF, "--reps", "2")
  T.eq(code, 2)
  T.match(out, "%-%-reps is the paired comparison's")
  out, code = T.khlua("eval", "--task", TASK, "--solution", REF, "--incumbent", REF, "--reps", "0")
  T.eq(code, 2)
  T.match(out, "%-%-reps: expected an integer from 1 to 100")
  out, code = T.khlua("eval", "--task", TASK, "--solution", REF, "--incumbent", "no_such")
  T.eq(code, 1)
  T.match(out, "no_such")
end)
