-- test_pyref.lua: reference outputs from a definition's Python run
-- (engine/eval/pyref.h) without torch: a stub interpreter (KHLUA_PYTHON, a shell
-- script running a Lua stand-in for the runner through khlua) reads the
-- inputs safetensors khlua wrote and writes outputs computed from them.
-- A host candidate then PASSES only if the stub saw the very bits its worker
-- generated (a random scalar included); the outputs are cached in the store
-- (a second process does not run the interpreter); --no-store recomputes;
-- a stub that computes something else makes INCORRECT_NUMERICAL; a missing
-- interpreter, a python without torch, a failing reference and outputs of
-- the wrong shape are errors that say so.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local BIN = os.getenv("KHLUA_BIN") or arg[-1]
local PKG = SRC .. "/tests/redteam/sanitize"

-- the package without its trusted reference: only the Python run is left
local dir = T.tmpdir()
local task = dir .. "/task"
os.execute("mkdir -p " .. T.quote(task .. "/solutions"))
-- (edited as text: a decode / encode round trip would reorder the inputs,
-- which are the signature of run)
local deftext, nsub = T.read(PKG .. "/definition.json"):gsub('"reference": "axpb_ref_c",%s*', "")
assert(nsub == 1)
T.write(task .. "/definition.json", deftext)
T.write(task .. "/workloads.jsonl", T.read(PKG .. "/workloads.jsonl"))
T.write(task .. "/solutions/axpb_ref_c.json", T.read(PKG .. "/solutions/axpb_ref_c.json"))

-- the stand-in for scripts/khlua_pyref.py: same job file, same exchange
local STUB_LUA = dir .. "/stub.lua"
T.write(STUB_LUA, [[
local kh = require "kh"
local job = kh.json.decode(assert(io.open(arg[1])):read("a"))
local mode = os.getenv("STUB_MODE") or "ok"
local log = assert(io.open(os.getenv("STUB_LOG"), "a"))
log:write(#job.cases, "\n")
log:close()
if mode == "fail" then
  io.stderr:write("Traceback (most recent call last):\nZeroDivisionError: the stub's reference broke\n")
  os.exit(1)
end
assert(job.version == 1 and job.definition.name == "sanitize_axpb_f32")
assert(job.inputs[3].name == "alpha" and job.inputs[3].shape == kh.json.null)
for _, case in ipairs(job.cases) do
  local ins = kh.tensor.load(case.inputs)
  local a, b = ins.a:totable(), ins.b:totable()
  assert(#ins.alpha:shape() == 0, "a random scalar travels as a 0-D tensor")
  local alpha = ins.alpha:get(1)
  local c = {}
  for i = 1, #a do
    c[i] = mode == "wrong" and a[i] - b[i] or alpha * a[i] + b[i]
  end
  local shape = job.outputs[1].shape
  if mode == "shape" then shape = { #c - 1 }; c[#c] = nil end
  local out = kh.tensor.new("float32", shape, c)
  kh.tensor.save(case.outputs, { c = out })
  out:close()
  for _, t in pairs(ins) do t:close() end
end
]])
local STUB = dir .. "/python-stub"
T.write(STUB, "#!/bin/sh\n# $1: the runner script (unused), $2: the job file\nexec "
  .. T.quote(BIN) .. " " .. T.quote(STUB_LUA) .. " \"$2\"\n")
os.execute("chmod +x " .. T.quote(STUB))
local LOG = dir .. "/stub.log"

local function lines(path)
  local f = io.open(path)
  if not f then return 0 end
  local n = 0
  for _ in f:lines() do n = n + 1 end
  f:close()
  return n
end

-- khlua eval in a child process with the given environment; returns the
-- first trace (decoded), the whole output and the exit code
local function eval(env, ...)
  local parts = {}
  for k, v in pairs(env) do parts[#parts + 1] = k .. "=" .. T.quote(v) end
  parts[#parts + 1] = T.quote(BIN)
  for _, a in ipairs({ "eval", "--task", task, "--solution", "axpb_ref_c", "--no-timing",
                       "--trials", "2", "--json", ... }) do
    parts[#parts + 1] = T.quote(a)
  end
  local p = assert(io.popen(table.concat(parts, " ") .. " 2>&1 </dev/null"))
  local out = p:read("a")
  local _, _, code = p:close()
  local first = out:match("^(%b{})")
  return first and kh.json.decode(first), out, code
end

local STORE = dir .. "/store"
local base_env = { KHLUA_PYTHON = STUB, STUB_LOG = LOG, KHLUA_STORE = STORE }

T.test("the stub's outputs from khlua's inputs pass; one interpreter run for both seeds", function()
  local tr, out, code = eval(base_env, "--seed", "777")
  T.ok(tr, out)
  T.eq(code, 0, out)
  local e = tr.evaluation
  T.eq(e.status, "PASSED", out)
  T.eq(e.khlua.reference.kind, "python")
  T.eq(e.khlua.reference.source, "python")
  T.eq(e.khlua.reference.python_runs, 1)
  T.eq(lines(LOG), 1)
  T.eq(T.read(LOG), "2\n") -- both trial seeds in one job
  T.eq(e.khlua.stored, "yes")
  T.eq(e.khlua.base_seed, 777)
end)

T.test("a second process finds them in the store and runs no interpreter", function()
  local tr, out, code = eval(base_env, "--seed", "777")
  T.eq(code, 0, out)
  T.eq(tr.evaluation.status, "PASSED")
  T.eq(tr.evaluation.khlua.reference.source, "store")
  T.eq(tr.evaluation.khlua.reference.store_hits, 2)
  T.eq(tr.evaluation.khlua.reference.python_runs, 0)
  T.eq(lines(LOG), 1)
  -- the cache is keyed by seed: a new seed runs it again
  tr = eval(base_env, "--seed", "12345")
  T.eq(tr.evaluation.status, "PASSED")
  T.eq(lines(LOG), 2)
  -- no --seed: each run draws its own base seed from the OS, so nothing
  -- an earlier run stored predicts its inputs
  local a = eval(base_env)
  local b = eval(base_env)
  T.eq(lines(LOG), 4)
  T.eq(a.evaluation.khlua.reference.source, "python")
  T.ok(a.evaluation.khlua.base_seed ~= b.evaluation.khlua.base_seed)
  T.ok(a.evaluation.khlua.base_seed ~= 777 and a.evaluation.khlua.base_seed ~= 12345)
  -- --no-store: nothing read from nor written to the store
  tr = eval(base_env, "--no-store", "--seed", "777")
  T.eq(tr.evaluation.khlua.reference.source, "python")
  T.eq(lines(LOG), 5)
end)

T.test("outputs that differ from the candidate's make INCORRECT_NUMERICAL", function()
  local env = { KHLUA_PYTHON = STUB, STUB_LOG = LOG, STUB_MODE = "wrong" }
  local tr, out, code = eval(env, "--no-store")
  T.eq(code, 1, out)
  T.eq(tr.evaluation.status, "INCORRECT_NUMERICAL")
  T.eq(tr.evaluation.khlua.failed_check, "correctness")
end)

T.test("could not run: no interpreter, no torch, a failing reference, a wrong shape", function()
  local _, out, code = eval({ KHLUA_PYTHON = "/nonexistent/python3" }, "--no-store")
  T.eq(code, 1)
  T.match(out, "needs python3 with torch; not found: /nonexistent/python3")
  -- a real python3 without torch (skipped where torch is installed)
  local py = io.popen("command -v python3 2>/dev/null"):read("l")
  if py and not os.execute(T.quote(py) .. " -c 'import torch' >/dev/null 2>&1") then
    _, out, code = eval({ KHLUA_PYTHON = py }, "--no-store")
    T.eq(code, 1)
    T.match(out, "needs python3 with torch; not found: torch %(import torch in")
  end
  _, out, code = eval({ KHLUA_PYTHON = STUB, STUB_LOG = LOG, STUB_MODE = "fail" }, "--no-store")
  T.eq(code, 1)
  T.match(out, "the Python reference of 'sanitize_axpb_f32' failed")
  T.match(out, "ZeroDivisionError: the stub's reference broke")
  _, out, code = eval({ KHLUA_PYTHON = STUB, STUB_LOG = LOG, STUB_MODE = "shape" }, "--no-store")
  T.eq(code, 1)
  T.match(out, "the Python reference of 'sanitize_axpb_f32' returned output 'c' as float32 %[4098%]; "
    .. "the definition says float32 %[4099%]")
end)

T.test("cleanup", function() os.execute("rm -rf " .. T.quote(dir)) end)
