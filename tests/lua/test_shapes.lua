-- test_shapes.lua: kh.eval{shapes = N} (engine/eval/shapes.h, docs/evaluation.md
-- "Shapes at promotion"): a kernel correct only on the workload list's shapes
-- passes every listed workload and fails on the admissible shapes khlua
-- draws beyond them; honest kernels pass those too; the shapes come from the
-- base seed (the same seed draws the same shapes), are checked for
-- correctness alone, and name the listed workload they came from.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local PKG = SRC .. "/kernels/host_rmsnorm"

local dir = T.tmpdir()
os.execute("cp -r " .. T.quote(PKG) .. " " .. T.quote(dir .. "/pkg"))
local TASK = dir .. "/pkg"
local base = kh.json.decode(T.read(PKG .. "/solutions/host_rmsnorm_h1024_c_v1.json"))
local honest_src = base.sources[1].content

-- a variant of the baseline: `guard` is C that returns early (leaving the
-- output unwritten) on shapes the attacker did not see listed
local function variant(name, guard)
  local s = kh.json.decode(kh.json.encode(base))
  s.name = name
  s.sources[1].content = honest_src:gsub("(int64_t rows, int64_t hidden%)\n{\n)", "%1" .. guard .. "\n", 1)
  T.ok(s.sources[1].content ~= honest_src, "the guard went in")
  T.write(TASK .. "/solutions/" .. name .. ".json", kh.json.encode(s))
end
-- (5a) correct only for the listed batch sizes
variant("shape_listed_only",
  "    if (!(rows == 1 || rows == 2 || rows == 7 || rows == 16 || rows == 33 || rows == 64 ||\n"
  .. "          rows == 128)) return;")
-- (5b) a fixed row limit equal to the largest listed batch
variant("shape_row_limit", "    if (rows > 128) rows = 128;")

local function run(sol, seed)
  return assert(kh.eval(TASK, sol, { shapes = 8, seed = seed, timing = false, record = false }))
end

local function split(tr)
  local listed, drawn = {}, {}
  for _, t in ipairs(tr) do
    if t.evaluation.khlua.shape_of then drawn[#drawn + 1] = t else listed[#listed + 1] = t end
  end
  return listed, drawn
end

T.test("the honest baseline passes the listed workloads and 8 drawn shapes", function()
  local tr = run("host_rmsnorm_h1024_c_v1", 4242)
  local listed, drawn = split(tr)
  T.eq(#listed, 7)
  T.eq(#drawn, 8)
  local seen = {}
  for _, t in ipairs(listed) do seen[t.workload.axes.batch_size] = true end
  for _, t in ipairs(tr) do T.eq(t.evaluation.status, "PASSED", t.workload.uuid) end
  for _, t in ipairs(drawn) do
    local k = t.evaluation.khlua
    T.match(t.workload.uuid, "^shape%-%x+$")
    T.ok(not seen[t.workload.axes.batch_size], "a drawn batch is not a listed one")
    T.eq(k.protocol, "none") -- correctness alone
    T.eq(k.shapes.asked, 8)
    T.eq(k.shapes.drawn, 8)
    T.ok(k.shape_of and #k.shape_of > 0)
  end
end)

T.test("kernels correct only on the listed shapes fail on the drawn ones", function()
  for _, sol in ipairs { "shape_listed_only", "shape_row_limit" } do
    local listed, drawn = split(run(sol, 4242))
    for _, t in ipairs(listed) do T.eq(t.evaluation.status, "PASSED", sol) end
    local failed = 0
    for _, t in ipairs(drawn) do
      if t.evaluation.status ~= "PASSED" then
        failed = failed + 1
        T.eq(t.evaluation.status, "INCORRECT_NUMERICAL", sol)
        T.eq(t.evaluation.khlua.failed_check, "shapes", sol)
        T.match(t.evaluation.khlua.detail, "^on shape shape%-%x+ %(from workload [%x-]+%)", sol)
      end
    end
    T.ok(failed >= 1, sol .. ": caught on at least one drawn shape")
  end
end)

T.test("the base seed decides the shapes", function()
  local function batches(seed)
    local _, drawn = split(run("host_rmsnorm_h1024_c_v1", seed))
    local b = {}
    for _, t in ipairs(drawn) do b[#b + 1] = t.workload.axes.batch_size end
    return table.concat(b, ",")
  end
  local a = batches(11)
  T.eq(batches(11), a)
  T.ne(batches(12), a)
end)

T.test("misuse: shapes out of range", function()
  T.raises(function() kh.eval(TASK, "host_rmsnorm_h1024_c_v1", { shapes = -1 }) end, "shapes")
  T.raises(function() kh.eval(TASK, "host_rmsnorm_h1024_c_v1", { shapes = 65 }) end, "shapes")
end)

T.test("cleanup", function() os.execute("rm -rf " .. T.quote(dir)) end)
