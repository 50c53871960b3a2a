-- test_kernels.lua: the task library under kernels/.  Every package passes
-- `khlua task check`; its packed solutions match their sources under src/;
-- every CUDA source compiles with NVRTC under the model-code checks; every
-- replay reply extracts, compiles and validates as its ladder says.  Where
-- kh.eval exists, the host packages' references and baselines PASS on every
-- workload and each host replay candidate gets the verdict (and the failed
-- check) its ladder promises.  The CUDA side of this is gpu_kernels.lua.
local T = require "testlib"
local kh = require "kh"
local L = require "ladder"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local KDIR = SRC .. "/kernels"
local lines, decode_file = L.lines, L.decode_file

local function base(path) return path:match("([^/]+)$") end

local PKGS = L.packages(KDIR)

T.test("the library holds the packages issue 12 asks for first", function()
  local have = {}
  for _, p in ipairs(PKGS) do have[base(p)] = true end
  for _, want in ipairs({ "rmsnorm_h4096", "fused_add_rmsnorm_h4096", "gemm_n4096_k4096",
                          "host_rmsnorm", "host_softmax" }) do
    T.ok(have[want], "kernels/" .. want .. " is missing")
  end
end)

T.test("the contest five are there, each with a trusted reference and a baseline packed", function()
  local have = {}
  for _, p in ipairs(PKGS) do have[base(p)] = p end
  for _, want in ipairs({ "gdn_decode_qk4_v8_d128_k_last", "gdn_prefill_qk4_v8_d128_k_last",
                          "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64",
                          "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64",
                          "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048" }) do
    T.ok(have[want], "kernels/" .. want .. " is missing")
  end
  for _, p in ipairs(PKGS) do
    local k = decode_file(p .. "/definition.json").khlua
    for _, role in ipairs({ "reference", "baseline" }) do
      T.ok(k[role], p .. ": definition.khlua." .. role .. " is not set")
      local f = io.open(p .. "/solutions/" .. tostring(k[role]) .. ".json", "r")
      T.ok(f, p .. ": the " .. role .. " '" .. tostring(k[role]) .. "' is not under solutions/")
      if f then f:close() end
    end
  end
end)

T.test("every package passes khlua task check with no errors", function()
  for _, p in ipairs(PKGS) do
    local out, code = T.khlua("task", "check", p)
    T.eq(code, 0, p .. ":\n" .. out)
    T.match(out, " 0 errors", p)
    local d = decode_file(p .. "/definition.json")
    local k = d.khlua
    T.ok(k, p .. ": no khlua block")
    -- a trusted reference, or a written plan for one
    local plan = io.open(p .. "/PLAN.md", "r")
    if plan then plan:close() end
    T.ok(k.reference or plan, p .. ": neither definition.khlua.reference nor PLAN.md")
    T.ok(k.speed_of_light and k.speed_of_light.bytes, p .. ": speed_of_light.bytes")
  end
end)

T.test("speed-of-light bounds are positive and never shrink as a workload grows", function()
  for _, p in ipairs(PKGS) do
    local ts <close> = assert(kh.task.load(p))
    local name = ts:definitions()[1]
    local wls = ts:workloads(name)
    T.ok(#wls > 0, p .. ": no workloads")
    local bytes = {}
    for i, w in ipairs(wls) do
      local sol = assert(ts:speed_of_light(name, w))
      T.ok(sol.bytes > 0, p .. ": bytes")
      bytes[i] = sol.bytes
    end
    -- w dominates v when every axis of w is at least v's: it moves at least as much
    for i, w in ipairs(wls) do
      for j, v in ipairs(wls) do
        local dominates = true
        for k, x in pairs(w.axes) do
          if x < v.axes[k] then dominates = false break end
        end
        if dominates then
          T.ok(bytes[i] >= bytes[j], p .. ": bytes shrink from " .. kh.json.encode(v.axes) ..
               " to " .. kh.json.encode(w.axes))
        end
      end
    end
  end
end)

-- kernels/verify.py (the GPU check) evaluates manifests and speed-of-light
-- expressions itself; its --plan mode must agree with kh.task on every workload.
T.test("verify.py --plan agrees with kh.task on every speed-of-light bound", function()
  local py = lines("command -v python3")[1]
  if not py then T.skip("python3 not installed") end
  local p = assert(io.popen(T.quote(py) .. " " .. T.quote(KDIR .. "/verify.py") .. " --plan --workloads 0 2>&1"))
  local out = p:read("a")
  local _, _, code = p:close()
  T.eq(code, 0, out)
  local got = {}
  for def, nbytes in out:gmatch("\n?([%w_]+) {[^\n]-}: (%d+) bytes") do
    got[def] = got[def] or {}
    table.insert(got[def], tonumber(nbytes))
  end
  for _, pk in ipairs(PKGS) do
    local ts <close> = assert(kh.task.load(pk))
    local name = ts:definitions()[1]
    local want = {}
    for _, w in ipairs(ts:workloads(name)) do want[#want + 1] = assert(ts:speed_of_light(name, w)).bytes end
    table.sort(want)
    local g = got[name] or {}
    table.sort(g)
    T.eq(#g, #want, name .. ": workloads in the plan")
    for i = 1, #want do T.eq(g[i], want[i], name .. ": bytes") end
  end
end)

T.test("packed solutions match their sources under src/", function()
  for _, p in ipairs(PKGS) do
    for _, skel in ipairs(lines("ls " .. T.quote(p) .. "/src/*.solution.json")) do
      local s = decode_file(skel)
      local packed_path = p .. "/solutions/" .. s.name .. ".json"
      local packed = decode_file(packed_path)
      T.eq(#packed.sources, #s.sources, packed_path)
      for i, src in ipairs(s.sources) do
        T.eq(packed.sources[i].path, src.path, packed_path)
        T.ok(packed.sources[i].content == T.read(p .. "/src/" .. src.path),
             packed_path .. " is stale: run python3 kernels/pack.py")
      end
      T.eq(kh.json.encode(packed.spec), kh.json.encode(s.spec), packed_path .. " spec differs")
    end
  end
end)

-- NVRTC is part of the CUDA toolkit this project builds against; without it
-- the compile checks are skipped, never passed.  Builds run as model code
-- (static checks included) but in this process with one warm compiler
-- (isolate = false: these sources are the library's own, and it halves the time).
local function build(source, name)
  if not kh.version.nvrtc then T.skip("NVRTC not available") end
  return kh.compile.build { source = source, name = name, isolate = false }
end

T.test("every CUDA source compiles with NVRTC under the model-code checks, no spills", function()
  local files = lines("ls " .. T.quote(KDIR) .. "/*/src/*.cu")
  T.ok(#files >= 6, "expected the CUDA sources of at least three packages")
  for _, f in ipairs(files) do
    local r, log = build(T.read(f), base(f))
    T.ok(r, f .. ":\n" .. tostring(log))
    local n = 0
    for name, k in pairs(r.kernels) do
      n = n + 1
      T.ok(k.registers > 0 and k.registers <= 255, f .. ": " .. name .. ": registers " .. tostring(k.registers))
      T.eq(k.spill_instructions, 0, f .. ": " .. name .. ": spills")
      T.eq(k.local_bytes, 0, f .. ": " .. name .. ": local memory")
    end
    T.ok(n >= 1, f .. ": no kernels")
  end
end)

-- ---- replay ladders -------------------------------------------------------------

local LADDERS = {}
for _, p in ipairs(PKGS) do
  local f = io.open(p .. "/replay/ladder.jsonl", "r")
  if f then f:close(); LADDERS[#LADDERS + 1] = p end
end

T.test("replay ladders cover every controller path", function()
  T.ok(#LADDERS >= 3, "expected the two host ladders and at least one CUDA ladder")
  for _, p in ipairs(LADDERS) do
    local kinds, files = {}, {}
    for _, e in ipairs(L.ladder(p .. "/replay")) do
      kinds[e.kind] = true
      files[e.file] = true
    end
    for _, k in ipairs({ "correct-slow", "faster", "wrong", "slower", "cheating", "compile-error" }) do
      T.ok(kinds[k], p .. ": no " .. k .. " reply")
    end
    -- every reply in the folder is in the ladder (the replay provider serves them all)
    for _, l in ipairs(lines("ls " .. T.quote(p .. "/replay"))) do
      if l:match("%.txt$") or l:match("%.json$") then T.ok(files[l], p .. ": " .. l .. " not in ladder.jsonl") end
    end
  end
end)

T.test("every reply extracts as its ladder says and makes the candidate it promises", function()
  for _, p in ipairs(LADDERS) do
    local def = decode_file(p .. "/definition.json")
    local valid = {}
    for _, e in ipairs(L.ladder(p .. "/replay")) do
      local where = p .. "/" .. e.file
      local text, finish = L.reply(p .. "/replay", e.file)
      local c = kh.llm.extract(text, { finish_reason = finish })
      T.eq(c.status, e.extract, where .. ": " .. tostring(c.message))
      if c.status == "ok" then
        local s = L.solution_of(def, "replay_" .. e.file:gsub("%.%w+$", ""):gsub("%-", "_"), c)
        if e.manifest == "invalid" then
          local dir = L.scratch_package(p, { s })
          local out, code = T.khlua("task", "check", dir)
          L.rmdir(dir)
          T.eq(code, 1, where .. ": the manifest should be refused:\n" .. out)
          T.match(out, "block", where)
        else
          valid[#valid + 1] = s
        end
        if e.compile and s.spec.language == "cuda" then
          local r, log = build(c.source, "candidate.cu")
          T.eq(r and "ok" or "error", e.compile, where .. ":\n" .. tostring(log))
        end
      end
    end
    local dir = L.scratch_package(p, valid)
    local out, code = T.khlua("task", "check", dir)
    L.rmdir(dir)
    T.eq(code, 0, p .. ": candidates from the replies:\n" .. out)
  end
end)

-- ---- evaluation (needs kh.eval: the evaluation merge) -----------------------------

local function need_eval()
  if type(kh.eval) == "nil" then T.skip("kh.eval is not in this build yet") end
end

local function backend_of(p)
  local d = decode_file(p .. "/definition.json")
  if not d.khlua.reference then return nil, d end -- a package with a PLAN.md only
  local ref = decode_file(p .. "/solutions/" .. d.khlua.reference .. ".json")
  return ref.spec.khlua.backend or (ref.spec.language == "cpp" and "host" or "cuda"), d
end

T.test("host references and baselines PASS on every workload", function()
  need_eval()
  local n = 0
  for _, p in ipairs(PKGS) do
    local backend, d = backend_of(p)
    if backend == "host" then
      for _, s in ipairs({ d.khlua.reference, d.khlua.baseline }) do
        local traces = assert(L.eval(p, s, { timing = false, record = false }))
        T.ok(#traces > 0, p .. " " .. s)
        for _, tr in ipairs(traces) do
          n = n + 1
          T.eq(tr.evaluation.status, "PASSED", p .. " " .. s .. " " .. tr.workload.uuid .. ": " ..
               tostring(tr.evaluation.khlua and tr.evaluation.khlua.detail))
        end
      end
    end
  end
  T.ok(n >= 20, "too few host verdicts: " .. n)
end)

T.test("host replay candidates get the verdicts their ladders promise", function()
  need_eval()
  for _, p in ipairs(LADDERS) do
    if backend_of(p) == "host" then L.check_verdicts(p, 3) end
  end
end)
