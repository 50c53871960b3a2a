-- test_eval.lua: kh.eval and `khlua eval` (engine/eval/eval.h, docs/evaluation.md):
-- the trusted reference evaluated as a candidate passes every workload under
-- each protocol; verdict tables carry FlashInfer-Bench's fields and khlua's;
-- seeds decide the inputs; workload selection; misuse raises, could-not-run
-- returns nil, msg, code; the CLI prints a table or Trace JSONL, stores every
-- verdict with its raw samples, and exits 0 / 1 / 2.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIX = SRC .. "/tests/fixtures/task/rmsnorm"
local RT = SRC .. "/tests/redteam/host/rmsnorm"

math.randomseed(T.seed())

local function quick(extra)
  local o = { seed = math.random(1, 1 << 40), warmup = 1, iters = 5, timing_trials = 2,
              cold = false, record = false, time_reference = false }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

T.test("the fixture's trusted reference passes every workload (official protocol)", function()
  local tr = assert(kh.eval(FIX, "rmsnorm_h512_ref_c", quick { time_reference = true }))
  T.eq(#tr, 3)
  local batches = {}
  for _, t in ipairs(tr) do
    T.eq(t.definition, "rmsnorm_h512")
    T.eq(t.solution, "rmsnorm_h512_ref_c")
    local e = t.evaluation
    T.eq(e.status, "PASSED", tostring(e.khlua.detail))
    -- itself against itself: bit-identical
    T.eq(e.correctness.max_absolute_error, 0)
    T.eq(e.correctness.max_relative_error, 0)
    T.ok(e.performance.latency_ms > 0)
    T.ok(e.performance.reference_latency_ms > 0)
    T.near(e.performance.speedup_factor,
           e.performance.reference_latency_ms / e.performance.latency_ms, 1e-9)
    T.eq(e.khlua.protocol, "official")
    T.eq(e.khlua.timer, "monotonic")
    T.eq(#e.khlua.seeds, 3)
    T.eq(#e.khlua.hashes.artifact, 32)
    T.eq(#e.khlua.hashes.reference, 32)
    T.eq(e.khlua.timing.trials, 2)
    T.eq(#e.khlua.samples_ns, 10) -- 2 trials x 5 timed calls, kept raw
    batches[#batches + 1] = t.workload.axes.batch_size
  end
  T.eq(batches, { 1, 7, 333 })
end)

T.test("screen and precise protocols run and keep their samples", function()
  for _, p in ipairs { "screen", "precise" } do
    local tr = assert(kh.eval(FIX, "rmsnorm_h512_ref_c",
                              quick { protocol = p, workloads = 1, max_iters = 40, timing_timeout_s = 2 }))
    T.eq(tr[1].evaluation.status, "PASSED")
    T.eq(tr[1].evaluation.khlua.protocol, p)
    T.ok(#tr[1].evaluation.khlua.samples_ns >= 10, p)
  end
end)

T.test("seeds decide the inputs: same seed same reference, another seed other inputs", function()
  local s = math.random(1, 1 << 40)
  local o = quick { seed = s, workloads = "5b0d7a8e-0002-4a57-9a3c-1d2e3f405161", timing = false }
  local a = assert(kh.eval(FIX, "rmsnorm_h512_ref_c", o))[1].evaluation.khlua
  local b = assert(kh.eval(FIX, "rmsnorm_h512_ref_c", o))[1].evaluation.khlua
  T.eq(a.seeds, b.seeds)
  T.eq(a.hashes.reference, b.hashes.reference)
  o.seed = s + 1
  local c = assert(kh.eval(FIX, "rmsnorm_h512_ref_c", o))[1].evaluation.khlua
  T.ne(c.seeds[1], a.seeds[1])
  T.ne(c.hashes.reference, a.hashes.reference)
end)

T.test("workload selection: a count, uuids (string or array), unknown uuid", function()
  T.eq(#assert(kh.eval(FIX, "rmsnorm_h512_ref_c", quick { workloads = 2, timing = false })), 2)
  local u3 = "5b0d7a8e-0003-4a57-9a3c-1d2e3f405161"
  local u1 = "5b0d7a8e-0001-4a57-9a3c-1d2e3f405161"
  local tr = assert(kh.eval(FIX, "rmsnorm_h512_ref_c", quick { workloads = { u3, u1 }, timing = false }))
  T.eq(#tr, 2)
  T.eq(tr[1].workload.uuid, u1) -- workload order, not the order asked
  local r, msg, code = kh.eval(FIX, "rmsnorm_h512_ref_c", quick { workloads = "nope", timing = false })
  T.eq(r, nil)
  T.eq(code, "ENOTFOUND")
  T.match(msg, "workload 'nope'")
end)

T.test("opts.progress: called as each verdict is made; its error raised after the run", function()
  local calls = {}
  local tr = assert(kh.eval(RT, "rt_input_mutation", quick { timing = false, progress =
    function(done, total, uuid, status) calls[#calls + 1] = { done, total, uuid, status } end }))
  T.eq(#calls, #tr)
  local seen = {}
  for i, c in ipairs(calls) do
    T.eq(c[1], i)
    T.eq(c[2], #tr)
    T.eq(c[4], "RUNTIME_ERROR")
    seen[c[3]] = true
  end
  for _, t in ipairs(tr) do T.ok(seen[t.workload.uuid], t.workload.uuid) end
  local n = 0
  T.raises(function()
    kh.eval(RT, "rt_input_mutation", quick { timing = false, progress = function()
      n = n + 1
      error("boom")
    end })
  end, "opts.progress failed: .*boom")
  T.eq(n, 1) -- not called again after its error
  T.raises(function() kh.eval(RT, "rt_input_mutation", quick { progress = 1 }) end,
           "opts.progress must be a function")
end)

T.test("a Solution file outside the task, and a compile error as a verdict", function()
  local dir = T.tmpdir()
  local sol = kh.json.decode(T.read(RT .. "/solutions/rt_honest_double.json"))
  sol.name = "broken"
  sol.sources[1].content = "this is not C"
  -- a file next to the package's solutions resolves its definition from there
  local path = RT .. "/solutions/zz_broken_tmp.json"
  T.write(path, kh.json.encode(sol))
  local tr, msg = kh.eval(RT, path, quick { workloads = 1 })
  os.remove(path)
  T.ok(tr, msg)
  T.eq(tr[1].evaluation.status, "COMPILE_ERROR")
  T.match(tr[1].evaluation.log, "error")
  T.eq(tr[1].evaluation.correctness, nil)
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("an empty batch (batch_size 0): empty outputs pass, they are not 'missing'", function()
  local dir = T.tmpdir()
  os.execute("cp -r " .. T.quote(FIX) .. " " .. T.quote(dir .. "/t"))
  local first = T.read(dir .. "/t/workloads.jsonl"):match("[^\n]+")
  local w = kh.json.decode(first)
  w.workload.uuid = "00000000-0000-4000-8000-000000000000"
  w.workload.axes.batch_size = 0
  local f = assert(io.open(dir .. "/t/workloads.jsonl", "a"))
  f:write(kh.json.encode(w) .. "\n")
  f:close()
  local tr, msg = kh.eval(dir .. "/t", "rmsnorm_h512_ref_c", { timing = false, record = false,
                                                              workloads = { w.workload.uuid } })
  T.ok(tr, tostring(msg))
  local e = tr[1].evaluation
  T.eq(e.status, "PASSED", tostring(e.khlua.detail))
  T.eq(e.khlua.figures.elements, 0)
  T.eq(e.khlua.checks.poison, "ok")
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("every verdict carries the hash of the package as loaded; an edit changes it", function()
  local dir = T.tmpdir()
  os.execute("cp -r " .. T.quote(FIX) .. " " .. T.quote(dir .. "/t"))
  local o = { timing = false, record = false, workloads = 1, trials = 1 }
  local h1 = assert(kh.eval(dir .. "/t", "rmsnorm_h512_ref_c", o))[1].evaluation.khlua
  local h2 = assert(kh.eval(dir .. "/t", "rmsnorm_h512_ref_c", o))[1].evaluation.khlua
  T.ok(h1.hashes.task:match("^%x+$") and #h1.hashes.task == 16, tostring(h1.hashes.task))
  T.eq(h1.hashes.task, h2.hashes.task)
  T.eq(h1.task_changed, nil)
  local f = assert(io.open(dir .. "/t/workloads.jsonl", "a"))
  f:write("\n")
  f:close()
  local h3 = assert(kh.eval(dir .. "/t", "rmsnorm_h512_ref_c", o))[1].evaluation.khlua
  T.ok(h3.hashes.task ~= h1.hashes.task, "an edited workloads file changes the hash")
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("verdicts recorded into an open kh.Store given as opts.store", function()
  local dir = T.tmpdir()
  local db <close> = assert(kh.store.open(dir .. "/s"))
  local tr = assert(kh.eval(FIX, "rmsnorm_h512_ref_c", quick { workloads = 1, record = true, store = db }))
  local k = tr[1].evaluation.khlua
  T.eq(k.stored, "yes")
  local rec = assert(db:get(k.record))
  T.eq(rec.solution, "rmsnorm_h512_ref_c")
  T.eq(rec.evaluation.status, "PASSED")
  T.eq(#assert(db:get_blob(k.samples_blob)), 8 * #rec.evaluation.khlua.timing.trial_median_ns * 5)
  T.raises(function() kh.eval(FIX, "rmsnorm_h512_ref_c", { store = 5 }) end)
  db:close()
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("could not run: nil, msg, code; misuse raises", function()
  local r, msg, code = kh.eval(FIX, "no_such_solution")
  T.eq(r, nil)
  T.eq(code, "ENOTFOUND")
  T.match(msg, "no_such_solution")
  r, msg, code = kh.eval(SRC .. "/tests/fixtures/nope", "x")
  T.eq(r, nil)
  T.ok(code)
  -- the cuda example needs a gpu worker; without a GPU that is "could not
  -- run" (ENODEV), never a verdict against the candidate
  r, msg, code = kh.eval(FIX, "rmsnorm_h512_cuda_v1", quick { workloads = 1, timing = false })
  if r == nil then
    T.ok(code == "ENODEV" or code == "ECOMPILE", tostring(code) .. " " .. tostring(msg))
  else
    T.eq(r[1].evaluation.khlua.backend, "cuda") -- a GPU is here: a real verdict
  end
  r, msg, code = kh.eval(FIX, "rmsnorm_h512_ref_c", quick { protocol = "fastest" })
  T.eq(r, nil)
  T.eq(code, "EINVAL")
  T.raises(function() kh.eval(FIX) end, "bad argument")
  T.raises(function() kh.eval(FIX, "rmsnorm_h512_ref_c", 5) end, "bad argument")
  T.raises(function() kh.eval(FIX, "rmsnorm_h512_ref_c", { trials = "many" }) end, "trials")
  T.raises(function() kh.eval(FIX, "rmsnorm_h512_ref_c", { workloads = { 1 } }) end, "uuid")
  T.raises(function() kh.eval(FIX, "rmsnorm_h512_ref_c", { deadline = 10 }) end, "unknown option .deadline.")
  T.eq(kh.eval.run, kh.eval.run) -- kh.eval.run is the same call
end)

T.test("sanitize: tools checked by name; host candidates n/a; a string or an array", function()
  local r, msg, code = kh.eval(FIX, "rmsnorm_h512_ref_c", quick { sanitize = "memcheck,helgrind" })
  T.eq(r, nil)
  T.eq(code, "EINVAL")
  T.match(msg, "unknown sanitizer tool 'helgrind'")
  T.raises(function() kh.eval(FIX, "rmsnorm_h512_ref_c", { sanitize = 3 }) end, "sanitize")
  T.raises(function() kh.eval(FIX, "rmsnorm_h512_ref_c", { sanitize = { 3 } }) end, "sanitize")
  for _, s in ipairs { "memcheck,initcheck", { "memcheck", "initcheck" } } do
    local tr = assert(kh.eval(FIX, "rmsnorm_h512_ref_c", quick { workloads = 1, timing = false,
                                                                  sanitize = s }))
    local ck = tr[1].evaluation.khlua.checks
    T.eq(tr[1].evaluation.status, "PASSED")
    T.eq(ck["sanitizer:memcheck"], "n/a (host)")
    T.eq(ck["sanitizer:initcheck"], "n/a (host)")
    T.eq(ck["sanitizer:racecheck"], nil)
  end
  local out, code = T.khlua("eval", "--task", FIX, "--solution", "rmsnorm_h512_ref_c", "--workloads",
                            "1", "--no-timing", "--no-store", "--sanitize", "racecheck,nope")
  T.eq(code, 1)
  T.match(out, "unknown sanitizer tool 'nope'")
end)

T.test("khlua eval: table, --json Trace JSONL, stored verdicts and samples, exit codes", function()
  local dir = T.tmpdir()
  local store = dir .. "/store"
  local out, code = T.khlua("--store", store, "eval", "--task", FIX, "--solution", "rmsnorm_h512_ref_c",
                            "--workloads", "2", "--warmup", "1", "--iters", "5", "--timing-trials", "1",
                            "--warm")
  T.eq(code, 0, out)
  T.match(out, "workload%s+status")
  T.match(out, "5b0d7a8e%-0002%-4a57%-9a3c%-1d2e3f405161%s+PASSED")
  T.match(out, "\n2 workloads: 2 PASSED; mean latency [%d.]+ ms; speedup %(geometric mean%) [%d.]+x\n")
  out, code = T.khlua("--store", store, "eval", "--task", FIX, "--solution", "rmsnorm_h512_ref_c",
                      "--workloads", "1", "--warmup", "1", "--iters", "5", "--json", "--warm")
  T.eq(code, 0, out)
  local lines = {}
  -- (a busy machine's warning goes to stderr, which T.khlua merges in)
  for l in out:gmatch("[^\n]+") do
    if not l:find("^khlua eval: warning: ") then lines[#lines + 1] = l end
  end
  T.eq(#lines, 1)
  local t = kh.json.decode(lines[1])
  T.eq(t.evaluation.status, "PASSED")
  T.ok(t.evaluation.performance.reference_latency_ms > 0)
  T.ok(t.evaluation.performance.speedup_factor > 0)
  T.eq(t.evaluation.khlua.stored, "yes")
  -- --no-reference-timing: the solution's latency alone
  local o2, c2 = T.khlua("eval", "--task", FIX, "--solution", "rmsnorm_h512_ref_c", "--workloads",
                         "1", "--warmup", "1", "--iters", "5", "--json", "--warm", "--no-store",
                         "--no-reference-timing")
  T.eq(c2, 0, o2)
  local t2
  for l in o2:gmatch("[^\n]+") do -- past a busy machine's warnings, as above
    if not t2 and not l:find("^khlua eval: warning: ") then t2 = kh.json.decode(l) end
  end
  T.ok(t2, "no Trace line in: " .. o2)
  T.ok(t2.evaluation.performance.latency_ms > 0)
  T.eq(t2.evaluation.performance.reference_latency_ms, nil)
  T.eq(t2.evaluation.performance.speedup_factor, nil)
  T.eq(#t.evaluation.khlua.samples_blob, 32)
  -- the record and its samples are in the store
  local db <close> = assert(kh.store.open(store))
  local rec = assert(db:get(t.evaluation.khlua.record))
  T.eq(rec.type, "evaluation")
  T.eq(rec.status, "PASSED")
  T.eq(rec.task, "task-rmsnorm_h512")
  local blob = assert(db:get_blob(t.evaluation.khlua.samples_blob))
  T.eq(#blob, 8 * 5 * 3) -- float64 per timed call: 3 official trials x 5
  T.eq(#db:query { type = "evaluation" }, 3)
  -- a failing candidate: exit 1, with the check named
  out, code = T.khlua("--store", store, "eval", "--task", RT, "--solution", "rt_input_mutation",
                      "--workloads", "1", "--no-timing")
  T.eq(code, 1, out)
  T.match(out, "RUNTIME_ERROR%s+inputs_unchanged")
  T.match(out, "\n1 workload: 1 RUNTIME_ERROR\n")
  -- usage errors: exit 2
  out, code = T.khlua("eval", "--task", FIX)
  T.eq(code, 2)
  T.match(out, "required")
  out, code = T.khlua("eval", "--task", FIX, "--solution", "x", "--protocol", "fast")
  T.eq(code, 2)
  out, code = T.khlua("eval", "--task", FIX, "--solution", "x", "--iters", "many")
  T.eq(code, 2)
  out, code = T.khlua("eval", "--help")
  T.eq(code, 0)
  T.match(out, "usage: khlua eval")
  -- could not run: exit 1 with the reason
  out, code = T.khlua("--store", store, "eval", "--task", FIX, "--solution", "nope")
  T.eq(code, 1)
  T.match(out, "no solution named 'nope'")
  os.execute("rm -rf " .. T.quote(dir))
end)
