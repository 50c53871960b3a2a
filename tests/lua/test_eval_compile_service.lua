-- test_eval_compile_service.lua: eval compiles through the compile service
-- (issue 20): a CUDA candidate's compile runs in a compile server, never in
-- the coordinator (gpu_coordinator_maps.lua checks its /proc/self/maps on a
-- GPU machine), and its verdict lands in the store as the compile record
-- `khlua compile` answers from.  Checked through what a user runs: after
-- `khlua eval` (which, without a GPU, stops after the compile for the lack of
-- one), the store holds one compile record of the candidate's source, and
-- `khlua compile` of that source is served from the store with the same key;
-- a second eval adds no compile record; a compile error is cached and
-- reported as COMPILE_ERROR naming its line, the same from the store.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIX = SRC .. "/tests/fixtures/task/rmsnorm"
local NAME = "rmsnorm_h512_cuda_v1"

math.randomseed(T.seed())

local function compile_records(store)
  local out, code = T.khlua("--store", store, "store", "ls", "--type", "compile", "--json",
    "--limit", "100")
  T.eq(code, 0, out)
  local n, ids = 0, {}
  for line in out:gmatch("[^\n]+") do
    if line:match("^[%[{]") then
      local j = kh.json.decode(line)
      local list = j.records or (j[1] and j) or { j }
      for _, r in ipairs(list) do
        if r.id then n = n + 1; ids[#ids + 1] = r.id end
      end
    end
  end
  return n, ids
end

-- the package with the candidate's source made unique (a trailing comment),
-- so no earlier compile anywhere can answer it; returns the folder and the
-- source's path
local function package(edit)
  local dir = T.tmpdir() .. "/pkg"
  os.execute("mkdir -p " .. T.quote(dir .. "/solutions"))
  for _, f in ipairs { "definition.json", "workloads.jsonl", "solutions/rmsnorm_h512_ref_c.json" } do
    T.write(dir .. "/" .. f, T.read(FIX .. "/" .. f))
  end
  local sol = kh.json.decode(T.read(FIX .. "/solutions/" .. NAME .. ".json"))
  sol.sources[1].content = sol.sources[1].content .. "\n// unique " .. math.random(1, 1 << 40) .. "\n"
  if edit then sol.sources[1].content = edit(sol.sources[1].content) end
  T.write(dir .. "/solutions/" .. NAME .. ".json", kh.json.encode(sol))
  local src = dir .. "/" .. sol.sources[1].path
  T.write(src, sol.sources[1].content)
  return dir, src
end

local function gpus() return #kh.doctor().gpus end

T.test("khlua eval's compile is the compile service's: its record answers khlua compile", function()
  local dir, src = package()
  local store = dir .. "/store"
  local out, code = T.khlua("--store", store, "eval", "--task", dir, "--solution", NAME,
    "--workloads", "1")
  if gpus() == 0 then
    T.ne(code, 0, out)
    T.match(out, "no gpu worker")
  else
    T.eq(code, 0, out)
  end
  T.ok(not out:find("COMPILE_ERROR", 1, true), out)
  local n, ids = compile_records(store)
  T.eq(n, 1, "one compile record after eval: " .. table.concat(ids, ", "))
  -- the same source through khlua compile: answered from the store, same key
  local cj, ccode = T.khlua("--store", store, "compile", src, "--json", "--kernel", "rms_partial")
  T.eq(ccode, 0, cj)
  local c = kh.json.decode(cj:match("{.*}"))
  T.eq(c.served_by, "store")
  T.eq(ids[1], "compile-" .. c.hash)
  -- a second eval: no new compile record
  T.khlua("--store", store, "eval", "--task", dir, "--solution", NAME, "--workloads", "1")
  T.eq((compile_records(store)), 1)
end)

T.test("a compile error through the service: COMPILE_ERROR naming the line, cached", function()
  local pad = math.random(1, 9)
  local dir = package(function(s) return s .. string.rep("\n", pad) .. "static int broken = ;\n" end)
  local store = dir .. "/store"
  for round = 1, 2 do
    local out, code = T.khlua("--store", store, "eval", "--task", dir, "--solution", NAME,
      "--workloads", "1")
    T.eq(code, 1, out)
    T.match(out, "COMPILE_ERROR")
    T.match(out, "rmsnorm%.cu%(%d+%): error")
    T.eq((compile_records(store)), 1, "round " .. round)
  end
end)
