-- test_task_new.lua: `khlua task new` (issue 23, "tasks in"): a skeleton
-- that works as it is (task check clean, the reference PASSES every
-- workload, fresh uuids each time); from a FlashInfer-Bench definition: the
-- dataset's workloads beside it under the package's name and a C stub with
-- the definition's arguments; a folder that already holds a definition is
-- left alone; usage errors exit 2.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."

local function uuids(dir)
  local out = {}
  for line in T.read(dir .. "/workloads.jsonl"):gmatch("[^\n]+") do
    out[#out + 1] = kh.json.decode(line).workload.uuid
  end
  return out
end

T.test("a new task works as it is", function()
  local dir = T.tmpdir() .. "/my_op"
  local out, code = T.khlua("task", "new", dir)
  T.eq(code, 0, out)
  T.match(out, "khlua eval %-%-task " .. dir:gsub("%p", "%%%0") .. " %-%-solution my_op_ref_c")
  out, code = T.khlua("task", "check", dir)
  T.eq(code, 0, out)
  T.match(out, "0 errors, 0 warnings")
  out, code = T.khlua("eval", "--task", dir, "--solution", "my_op_ref_c", "--no-store",
    "--no-timing")
  T.eq(code, 0, out)
  T.match(out, "3 workloads: 3 PASSED")
  -- fresh uuids: two new tasks share none
  local dir2 = T.tmpdir() .. "/my_op"
  T.eq(select(2, T.khlua("task", "new", dir2)), 0)
  local a, b = uuids(dir), uuids(dir2)
  T.eq(#a, 3)
  for _, u in ipairs(a) do
    T.match(u, "^%x+%-%x+%-4%x+%-[89ab]%x+%-%x+$")
    for _, v in ipairs(b) do T.ok(u ~= v, "uuid " .. u .. " drawn twice") end
  end
  -- a folder that holds a definition is left alone
  local before = T.read(dir .. "/definition.json")
  out, code = T.khlua("task", "new", dir)
  T.eq(code, 1, out)
  T.match(out, "already holds a definition%.json")
  T.eq(T.read(dir .. "/definition.json"), before)
end)

T.test("a new task from a FlashInfer-Bench definition: its workloads and a stub", function()
  local root = T.tmpdir()
  os.execute("mkdir -p " .. T.quote(root .. "/definitions/rmsnorm") .. " "
    .. T.quote(root .. "/workloads/rmsnorm"))
  -- as it is (its khlua fields name solutions of that package: they are dropped)
  T.write(root .. "/definitions/rmsnorm/rmsnorm_h4096.json",
    T.read(SRC .. "/kernels/rmsnorm_h4096/definition.json"))
  os.execute("cp " .. T.quote(SRC .. "/kernels/rmsnorm_h4096/workloads.jsonl") .. " "
    .. T.quote(root .. "/workloads/rmsnorm/rmsnorm_h4096.jsonl"))
  local dir = T.tmpdir() .. "/t"
  local out, code = T.khlua("task", "new", dir, "--from",
    root .. "/definitions/rmsnorm/rmsnorm_h4096.json", "--name", "my_rmsnorm")
  T.eq(code, 0, out)
  T.match(out, "14 workloads from")
  out, code = T.khlua("task", "check", dir)
  T.eq(code, 0, out)
  T.match(out, "1 definition, 14 workloads")
  for line in T.read(dir .. "/workloads.jsonl"):gmatch("[^\n]+") do
    T.eq(kh.json.decode(line).definition, "my_rmsnorm")
  end
  local sol = kh.json.decode(T.read(dir .. "/solutions/my_rmsnorm_ref_c.json"))
  T.match(sol.sources[1].content, "void my_rmsnorm_ref%(const uint16_t %*hidden_states, "
    .. "const uint16_t %*weight, uint16_t %*output, int64_t batch_size%)")
  T.eq(#sol.spec.khlua.args, 4)
  T.eq(sol.spec.khlua.args[4].axis, "batch_size")
  T.eq(kh.json.decode(T.read(dir .. "/definition.json")).khlua, nil)
end)

T.test("usage errors", function()
  local out, code = T.khlua("task", "new")
  T.eq(code, 2, out)
  out, code = T.khlua("task", "new", T.tmpdir() .. "/x", "--bogus")
  T.eq(code, 2, out)
  out, code = T.khlua("task", "new", T.tmpdir() .. "/x", "--from", "/nonexistent.json")
  T.eq(code, 1, out)
  T.match(out, "/nonexistent%.json")
end)
