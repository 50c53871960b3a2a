-- test_policy_pyref.lua: a policy searches a definition that has no trusted
-- khlua reference, only its Python one (issue 22: "a policy cannot search a
-- definition that has only its Python reference"): the candidates and the
-- seed are checked against the definition's Python run (kh.eval's pyref,
-- here a stub interpreter standing in for python3 + torch, as in
-- test_pyref.lua), given a kernel to start from; without one, or without
-- any reference, or without the interpreter, the run stops before it starts
-- with an error naming what is missing.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local BIN = os.getenv("KHLUA_BIN") or arg[-1]
local PKG = SRC .. "/tests/redteam/sanitize"
local POLICY = SRC .. "/policies/plateau_switch.lua"
local NOKEYS = { ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "" }

local dir = T.tmpdir()
local task = dir .. "/task"
os.execute("mkdir -p " .. T.quote(task .. "/solutions"))
-- the package without its trusted reference (edited as text: the inputs'
-- order is run's signature)
local deftext, nsub = T.read(PKG .. "/definition.json"):gsub('"reference": "axpb_ref_c",%s*', "")
assert(nsub == 1)
T.write(task .. "/definition.json", deftext)
T.write(task .. "/workloads.jsonl", T.read(PKG .. "/workloads.jsonl"))
T.write(task .. "/solutions/axpb_ref_c.json", T.read(PKG .. "/solutions/axpb_ref_c.json"))

-- the Python reference's stand-in: alpha * a + b, from the inputs khlua wrote
local STUB_LUA = dir .. "/stub.lua"
T.write(STUB_LUA, [[
local kh = require "kh"
local job = kh.json.decode(assert(io.open(arg[1])):read("a"))
local log = assert(io.open(os.getenv("STUB_LOG"), "a"))
log:write(#job.cases, "\n")
log:close()
for _, case in ipairs(job.cases) do
  local ins = kh.tensor.load(case.inputs)
  local a, b = ins.a:totable(), ins.b:totable()
  local alpha = ins.alpha:get(1)
  local c = {}
  for i = 1, #a do c[i] = alpha * a[i] + b[i] end
  local out = kh.tensor.new("float32", job.outputs[1].shape, c)
  kh.tensor.save(case.outputs, { c = out })
  out:close()
  for _, t in pairs(ins) do t:close() end
end
]])
local STUB = dir .. "/python-stub"
T.write(STUB, "#!/bin/sh\nexec " .. T.quote(BIN) .. " " .. T.quote(STUB_LUA) .. " \"$2\"\n")
os.execute("chmod +x " .. T.quote(STUB))
local LOG = dir .. "/stub.log"

-- a replay folder: one reply, the seed's own kernel (correct, no faster)
local REPLAY = dir .. "/replay"
do
  local sol = kh.json.decode(T.read(PKG .. "/solutions/axpb_ref_c.json"))
  os.execute("mkdir -p " .. T.quote(REPLAY .. "/01"))
  local text = "The same kernel, to see it checked.\n\n```c\n" .. sol.sources[1].content
    .. "\n```\n\n```json\n" .. kh.json.encode(sol.spec.khlua) .. "\n```\n"
  T.write(REPLAY .. "/01/reply.json", kh.json.encode { dialect = "anthropic", text = text,
    finish_reason = "stop", usage = { input_tokens = 10, output_tokens = 10 } })
end

local function env(extra)
  local e = { ANTHROPIC_API_KEY = "", OPENAI_API_KEY = "", KHLUA_PYTHON = STUB, STUB_LOG = LOG }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

local function lines(path)
  local f = io.open(path)
  if not f then return 0 end
  local n = 0
  for _ in f:lines() do n = n + 1 end
  f:close()
  return n
end

T.test("a definition with only a Python reference: the seed and the candidates are checked by it", function()
  local store = dir .. "/store"
  local out, code = T.khlua_env(env(), "--store", store, POLICY, "--task", task, "--seed-solution",
    "axpb_ref_c", "--model", "replay:" .. REPLAY, "--rounds", "1", "--seed", "11", "--report", "none",
    "--json")
  T.eq(code, 0, out)
  local res = kh.json.decode(out:match("\n(%b{})%s*$"))
  T.eq(res.status, "done")
  T.eq(res.metrics.candidates, 1)
  T.ok(lines(LOG) > 0, "the Python reference's stand-in ran")
  -- every evaluation of the run was checked against the Python reference
  local db = assert(kh.store.open(store, { readonly = true }))
  local evals = db:query { run = res.run, type = "evaluation" }
  T.ok(#evals > 0)
  local seed, cand = 0, 0
  for _, e in ipairs(evals) do
    local k = e.evaluation and e.evaluation.khlua or {}
    T.eq(k.reference and k.reference.kind, "python", "reference of " .. e.id)
    if e.purpose == "seed" then seed = seed + 1 else cand = cand + 1 end
    T.eq(e.status, "PASSED", e.id)
  end
  db:close()
  T.ok(seed > 0 and cand > 0, "the seed and the candidate were measured")
  -- the candidate is the seed's own source: the gate's decision on it is
  -- timing noise (a 3-7 us host kernel), so only that the round was judged
  T.ok(out:match("round 1 .- rejected: ") or out:match("round 1 .- PROMOTED: "), out)
end)

T.test("what is missing is named: a kernel to start from, any reference, the interpreter", function()
  local out, code = T.khlua_env(env(), "--store", dir .. "/s2", POLICY, "--task", task,
    "--model", "replay:" .. REPLAY, "--rounds", "1")
  T.eq(code, 1, out)
  T.match(out, "has no khlua solution to start from .-%-%-seed%-solution NAME|FILE")
  -- no Python reference either
  local bare = dir .. "/bare"
  os.execute("cp -r " .. T.quote(task) .. " " .. T.quote(bare))
  local def = T.read(bare .. "/definition.json"):gsub('"reference": "import torch[^"]*",', '"reference": "",', 1)
  T.write(bare .. "/definition.json", def)
  out, code = T.khlua_env(env(), "--store", dir .. "/s3", POLICY, "--task", bare, "--seed-solution",
    "axpb_ref_c", "--model", "replay:" .. REPLAY, "--rounds", "1")
  T.eq(code, 1, out)
  T.match(out, "neither a trusted reference %(khlua%.reference%) nor a Python reference")
  -- no interpreter: the seed's measurement says what it needs
  out, code = T.khlua_env(env { KHLUA_PYTHON = "/nonexistent/python3" }, "--store", dir .. "/s4", POLICY,
    "--task", task, "--seed-solution", "axpb_ref_c", "--model", "replay:" .. REPLAY, "--rounds", "1")
  T.eq(code, 1, out)
  T.match(out, "needs python3 with torch")
  -- a trusted reference named but absent
  local gone = dir .. "/gone"
  os.execute("cp -r " .. T.quote(PKG) .. " " .. T.quote(gone) .. " && rm " .. T.quote(gone .. "/solutions/axpb_ref_c.json"))
  out, code = T.khlua_env(NOKEYS, "--store", dir .. "/s5", POLICY, "--task", gone, "--seed-solution",
    "san_honest", "--model", "replay:" .. REPLAY, "--rounds", "1")
  T.eq(code, 1, out)
  T.match(out, "names the trusted reference axpb_ref_c %(khlua%.reference%), which is not among")
end)
