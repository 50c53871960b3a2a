-- test_inputs_checked.lua: bad input is named where it is, in every command
-- (issue 23, "tasks in" and "options checked"): a JSON syntax error in
-- definition.json and a broken line of workloads.jsonl stop `khlua eval` and
-- a policy with file:line (they used to say "holds 0 definitions" or skip
-- the line without a word); --definition of a name the package lacks is one
-- line, not a traceback; a solution whose launch manifest names what its
-- definition lacks is refused with file:line, whether in the package or
-- from anywhere (it used to run with the binding left out); eval's numeric options out of range are usage
-- errors (exit 2); one failure's detail is printed once, not per workload; a
-- store this user may read but not write can be listed and verified, and an
-- eval that cannot record says so; the wall-time budget stops the gate
-- between its steps.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local POLICY = SRC .. "/policies/plateau_switch.lua"
local LADDER = SRC .. "/tests/fixtures/replay/ctl/a"
local NOKEYS = { ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "" }

-- a copy of the fixture package with one file changed by fn(text) -> text
local function broken(file, fn)
  local dir = T.tmpdir() .. "/pkg"
  os.execute("cp -r " .. T.quote(TASK) .. " " .. T.quote(dir))
  T.write(dir .. "/" .. file, fn(T.read(dir .. "/" .. file)))
  return dir
end

local function policy(task, ...)
  return T.khlua_env(NOKEYS, "--store", T.tmpdir() .. "/store", POLICY, "--task", task,
    "--fake-evaluator", FAKE, "--model", "replay:" .. LADDER, "--rounds", "1", ...)
end

T.test("a JSON syntax error in definition.json is named with file and line", function()
  local pkg = broken("definition.json", function(t)
    return t:gsub('"op_type": "rmsnorm",', '"op_type": "rmsnorm",,', 1)
  end)
  local out, code = T.khlua("eval", "--task", pkg, "--solution", "rmsnorm_h512_ref_c", "--no-store")
  T.eq(code, 1, out)
  T.match(out, "definition%.json:%d+: json: invalid JSON")
  out, code = policy(pkg)
  T.eq(code, 1, out)
  T.match(out, "definition%.json:%d+: json: invalid JSON")
  T.ok(not out:find("holds 0 definitions", 1, true), out)
end)

T.test("a broken line of workloads.jsonl is named, not skipped", function()
  local pkg = broken("workloads.jsonl", function(t)
    return t .. '{"definition": "rmsnorm_h512", "workload": {"uuid": "x", "axes": {\n'
  end)
  local out, code = T.khlua("eval", "--task", pkg, "--solution", "rmsnorm_h512_ref_c", "--no-store")
  T.eq(code, 1, out)
  T.match(out, "workloads%.jsonl:4: json: invalid JSON")
  out, code = policy(pkg)
  T.eq(code, 1, out)
  T.match(out, "workloads%.jsonl:4:")
end)

T.test("a solution whose manifest names what the definition lacks is refused with file:line", function()
  -- it used to run with the bad binding left out (every later argument one
  -- place off: INCORRECT_NUMERICAL), and a Solution file from outside the
  -- package was checked only at launch, by its first bad expression
  local bad = function(t) return (t:gsub('{"input": "weight"}', '{"input": "nope"}', 1)) end
  local pkg = broken("solutions/rmsnorm_h512_ref_c.json", bad)
  -- the candidate's verdict (a model's reply must not stop a run), the
  -- problem said once
  local out, code = T.khlua("eval", "--task", pkg, "--solution", "rmsnorm_h512_ref_c", "--no-store")
  T.eq(code, 1, out)
  T.match(out, 'solution rmsnorm_h512_ref_c is not usable: [^\n]*rmsnorm_h512_ref_c%.json:15: '
    .. 'spec%.khlua%.args%[1%]%.input: expected a tensor input of rmsnorm_h512, got "nope"')
  T.ok(not out:find("INCORRECT", 1, true), out)
  T.match(out, "3 workloads: 3 COMPILE_ERROR")
  T.eq(select(2, out:gsub("is not usable", "")), 1, out)
  local file = T.tmpdir() .. "/elsewhere.json"
  T.write(file, bad(T.read(TASK .. "/solutions/rmsnorm_h512_ref_c.json")))
  out, code = T.khlua("eval", "--task", TASK, "--solution", file, "--no-store")
  T.eq(code, 1, out)
  T.match(out, "elsewhere%.json:15: spec%.khlua%.args%[1%]%.input: expected a tensor input")
  -- an axis the definition lacks, from anywhere: named at load, one clean message
  T.write(file, (T.read(TASK .. "/solutions/rmsnorm_h512_ref_c.json"):gsub('"axis": "batch_size"',
    '"axis": "batch"', 1)))
  out, code = T.khlua("eval", "--task", TASK, "--solution", file, "--no-store")
  T.eq(code, 1, out)
  T.match(out, 'elsewhere%.json:%d+: spec%.khlua%.args%[%d%]%.axis: expected an axis of rmsnorm_h512, got "batch"')
  T.ok(not out:find(": :", 1, true), out)
end)

T.test("a model's reply whose manifest names what the definition lacks: rejected, the run goes on", function()
  local dir = T.tmpdir() .. "/replay"
  os.execute("mkdir -p " .. T.quote(dir .. "/01"))
  local rec = kh.json.decode(T.read(SRC .. "/tests/fixtures/replay/ctl/a/02/reply.json"))
  rec.text = rec.text:gsub('"input": "weight"', '"input": "nope"', 1)
  T.write(dir .. "/01/reply.json", kh.json.encode(rec))
  local store = T.tmpdir() .. "/store"
  local out, code = T.khlua_env(NOKEYS, "--store", store, POLICY, "--task", TASK, "--model",
    "replay:" .. dir, "--rounds", "1", "--seed", "3", "--report", "none", "--json")
  T.eq(code, 0, out)
  T.match(out, "round 1 .- rejected: candidate COMPILE_ERROR on workload")
  local res = kh.json.decode(out:match("\n(%b{})%s*$"))
  T.eq(res.status, "done")
  T.eq(res.metrics.candidates, 1)
  T.eq(res.metrics.accepted, 0)
end)

T.test("--definition of a name the package lacks: one line, no traceback", function()
  local out, code = policy(TASK, "--definition", "nope")
  T.eq(code, 1, out)
  T.match(out, "no definition 'nope' in .* %(it holds: rmsnorm_h512%)")
  T.ok(not out:find("traceback", 1, true), out)
end)

T.test("eval's numeric options out of range are usage errors", function()
  local cases = { { "--trials", "0" }, { "--trials", "65" }, { "--rotate", "9" },
    { "--verify", "1.5" }, { "--iters", "0" }, { "--deadline", "0" }, { "--ratio", "-1" } }
  for _, c in ipairs(cases) do
    local out, code = T.khlua("eval", "--task", TASK, "--solution", "rmsnorm_h512_ref_c",
      c[1], c[2])
    T.eq(code, 2, c[1] .. " " .. c[2] .. ": " .. out)
    T.match(out, c[1]:gsub("%-", "%%-") .. ": expected")
  end
end)

T.test("a failure's detail is printed once, not per workload", function()
  -- a compile error: its log used to be printed once per workload
  local sol = kh.json.decode(T.read(TASK .. "/solutions/rmsnorm_h512_ref_c.json"))
  sol.name = "bad_src"
  sol.sources[1].content = sol.sources[1].content .. "\nint broken(void) { return qqq_undeclared; }\n"
  local file = T.tmpdir() .. "/bad_src.json"
  T.write(file, kh.json.encode(sol))
  local out, code = T.khlua("eval", "--task", TASK, "--solution", file, "--no-store", "--no-timing")
  T.eq(code, 1, out)
  local n = 0
  for _ in out:gmatch("error: [^\n]*qqq_undeclared[^\n]* undeclared") do n = n + 1 end
  T.eq(n, 1, out)
  local same = 0
  for _ in out:gmatch("%(the same as above%)") do same = same + 1 end
  T.eq(same, 2, out)
end)

T.test("a store this user may read but not write: listed, verified; eval says it did not record",
       function()
  local p = io.popen("id -u")
  local uid = p and tonumber(p:read("l"))
  if p then p:close() end
  local bin = os.getenv("KHLUA_BIN") or arg[-1]
  if uid ~= 0 or not os.execute("command -v runuser >/dev/null 2>&1") then
    T.skip("needs root and runuser to act as another user")
  end
  local top = T.tmpdir()
  local store = top .. "/store"
  local out, code = T.khlua("--store", store, "eval", "--task", TASK, "--solution",
    "rmsnorm_h512_ref_c", "--no-timing")
  T.eq(code, 0, out)
  os.execute("chmod -R a-w " .. T.quote(store) .. " && chmod a+rx " .. T.quote(top) .. " "
    .. T.quote(store))
  local function as_nobody(...)
    local args = { "runuser", "-u", "nobody", "--", T.quote(bin) }
    for _, a in ipairs({ ... }) do args[#args + 1] = T.quote(a) end
    local q = assert(io.popen("cd / && " .. table.concat(args, " ") .. " 2>&1"))
    local o = q:read("a")
    local _, _, c = q:close()
    return o, c
  end
  local probe, pc = as_nobody("--version")
  if pc ~= 0 then T.skip("nobody cannot run " .. bin .. ": " .. probe) end
  out, code = as_nobody("--store", store, "store", "ls", "--type", "evaluation")
  T.eq(code, 0, out)
  T.match(out, "3 records")
  out, code = as_nobody("--store", store, "store", "verify")
  T.eq(code, 0, out)
  out, code = as_nobody("--store", store, "eval", "--task", TASK, "--solution",
    "rmsnorm_h512_ref_c", "--no-timing")
  T.eq(code, 0, out)
  T.match(out, "the verdicts were not recorded: .*Permission denied")
  os.execute("chmod -R u+w " .. T.quote(top))
end)

T.test("--workloads N beyond the workloads there are is said, not silently fewer", function()
  local out, code = T.khlua("eval", "--task", TASK, "--solution", "rmsnorm_h512_ref_c",
    "--workloads", "99", "--no-store", "--no-timing")
  T.eq(code, 1, out)
  T.match(out, "%-%-workloads 99: 'rmsnorm_h512' has 3 workloads")
  out, code = T.khlua("eval", "--task", TASK, "--solution", "rmsnorm_h512_ref_c",
    "--workloads", "3", "--no-store", "--no-timing")
  T.eq(code, 0, out)
end)

T.test("--gpus on a host task is said, not ignored", function()
  local out, code = T.khlua("eval", "--task", TASK, "--solution", "rmsnorm_h512_ref_c",
    "--gpus", "0", "--no-store")
  T.eq(code, 1, out)
  T.match(out, "%-%-gpus 0: solution 'rmsnorm_h512_ref_c' runs on the host backend")
  out, code = policy(TASK, "--gpus", "0")
  T.eq(code, 1, out)
  T.match(out, "%-%-gpus 0: rmsnorm_h512 runs on the host backend")
end)

T.test("the wall-time budget stops the gate between its steps", function()
  -- one reply, the ladder's promoted one; each evaluation of it takes 1 s
  -- (the fake evaluator's delay): the budget (0.5 s) runs out during the
  -- gate's first step, so the sweep and the finalist never start
  local flat = T.tmpdir()
  T.write(flat .. "/r.json", T.read(LADDER:gsub("/a$", "") .. "/a/02/reply.json"))
  local store = T.tmpdir() .. "/store"
  local t0 = kh.time.now()
  local env = { KH_FAKE_EVAL_DELAY = "1", ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "" }
  local out, code = T.khlua_env(env, "--store", store, POLICY, "--task", TASK, "--fake-evaluator",
    FAKE, "--model", "replay:" .. flat, "--rounds", "10", "--budget", "wall=0.5", "--seed", "5")
  local dt = kh.time.now() - t0
  T.eq(code, 0, out)
  T.match(out, "the gate stopped: the wall time budget ran out")
  T.match(out, "done %(wall time budget%): 1 rounds, 1 candidates, 0 accepted")
  -- without the budget the same reply is promoted (sweep and finalist run too)
  local out2, code2 = T.khlua_env({ ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "" }, "--store",
    T.tmpdir() .. "/store", POLICY, "--task", TASK, "--fake-evaluator", FAKE, "--model",
    "replay:" .. flat, "--rounds", "1", "--seed", "5")
  T.eq(code2, 0, out2)
  T.match(out2, "PROMOTED")
  T.ok(dt < 30, string.format("took %.1f s", dt))
end)

T.test("eval's table shows each workload's axes, GB/s and fraction of speed of light", function()
  local out, code = T.khlua("eval", "--task", TASK, "--solution", "rmsnorm_h512_ref_c",
    "--no-store", "--protocol", "screen")
  T.eq(code, 0, out)
  T.match(out, "latency ms +GB/s +SoL %% +speedup +axes")
  local rows = 0
  for gbs, sol, axes in out:gmatch("PASSED[^\n]-([%d.e+-]+) +([%d.e+-]+) +[%d.]+ +(batch_size=%d+)") do
    rows = rows + 1
    T.ok(tonumber(gbs) > 0 and tonumber(sol) > 0, gbs .. " " .. sol)
  end
  T.eq(rows, 3, out)
end)
