-- test_kernels.lua: the task library under kernels/.  Every package passes
-- `khlua task check`; its packed solutions match their sources under src/;
-- every CUDA source compiles with NVRTC under the model-code checks; every
-- replay reply extracts as its ladder says and, where it extracts, makes a
-- candidate the package accepts.  Where kh.eval exists, the host packages'
-- references and baselines PASS on every workload and each host replay
-- candidate gets the verdict (and the failed check) its ladder promises.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local KDIR = SRC .. "/kernels"
local NULL = kh.json.null

local function lines(cmd)
  local p = assert(io.popen(cmd .. " 2>/dev/null", "r"))
  local t = {}
  for l in p:lines() do t[#t + 1] = l end
  p:close()
  return t
end

local function packages()
  local t = {}
  for _, l in ipairs(lines("ls -d " .. T.quote(KDIR) .. "/*/definition.json")) do
    t[#t + 1] = l:match("^(.*)/definition%.json$")
  end
  table.sort(t)
  return t
end

local function base(path) return path:match("([^/]+)$") end
local function decode_file(path) return assert(kh.json.decode(T.read(path))) end
local function is_null(v) return v == nil or v == NULL end

local PKGS = packages()

T.test("the library holds the packages issue 12 asks for first", function()
  local have = {}
  for _, p in ipairs(PKGS) do have[base(p)] = true end
  for _, want in ipairs({ "rmsnorm_h4096", "fused_add_rmsnorm_h4096", "gemm_n4096_k4096",
                          "host_rmsnorm", "host_softmax" }) do
    T.ok(have[want], "kernels/" .. want .. " is missing")
  end
end)

T.test("every package passes khlua task check with no errors", function()
  for _, p in ipairs(PKGS) do
    local out, code = T.khlua("task", "check", p)
    T.eq(code, 0, p .. ":\n" .. out)
    T.match(out, " 0 errors", p)
    local d = decode_file(p .. "/definition.json")
    local k = d.khlua
    T.ok(k and k.reference, p .. ": definition.khlua.reference")
    T.ok(k.speed_of_light and k.speed_of_light.bytes, p .. ": speed_of_light.bytes")
  end
end)

T.test("speed-of-light bounds are positive and grow with the workload", function()
  for _, p in ipairs(PKGS) do
    local ts <close> = assert(kh.task.load(p))
    local name = ts:definitions()[1]
    local prev_bytes, prev_size = nil, nil
    local wls = ts:workloads(name)
    T.ok(#wls > 0, p .. ": no workloads")
    -- order by the sum of the var axes: a bigger workload moves at least as many bytes
    table.sort(wls, function(a, b)
      local sa, sb = 0, 0
      for _, v in pairs(a.axes) do sa = sa + v end
      for _, v in pairs(b.axes) do sb = sb + v end
      return sa < sb
    end)
    for _, w in ipairs(wls) do
      local sol = assert(ts:speed_of_light(name, w))
      T.ok(sol.bytes > 0, p .. ": bytes")
      local size = 0
      for _, v in pairs(w.axes) do size = size + v end
      if prev_bytes and size > prev_size then
        T.ok(sol.bytes >= prev_bytes, p .. ": bytes shrink as the workload grows")
      end
      prev_bytes, prev_size = sol.bytes, size
    end
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
-- the compile check is skipped, never passed.
local function nvrtc_missing(out)
  return out:find("NVRTC", 1, true) and (out:find("not found", 1, true) or out:find("unavailable", 1, true)
    or out:find("cannot load", 1, true))
end

T.test("every CUDA source compiles with NVRTC under the model-code checks, no spills", function()
  local files = lines("ls " .. T.quote(KDIR) .. "/*/src/*.cu")
  T.ok(#files >= 6, "expected the CUDA sources of at least three packages")
  for _, f in ipairs(files) do
    local out, code = T.khlua("compile", f, "--json")
    if code ~= 0 and nvrtc_missing(out) then T.skip("NVRTC unavailable: " .. out) end
    T.eq(code, 0, f .. ":\n" .. out)
    local r = assert(kh.json.decode(out), out)
    T.ok(r.ok, f)
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

local function ladder(dir)
  local t = {}
  for l in T.read(dir .. "/ladder.jsonl"):gmatch("[^\n]+") do t[#t + 1] = assert(kh.json.decode(l)) end
  return t
end

local function reply(dir, file)
  local text = T.read(dir .. "/" .. file)
  if file:match("%.json$") then
    local r = assert(kh.json.decode(text))
    return r.text, r.finish_reason
  end
  return text, "stop"
end

-- A FlashInfer-Bench Solution from an extracted candidate, as a policy makes one.
local function solution_of(def, name, cand)
  local m = cand.manifest
  local host = m.backend == "host"
  local path = host and "candidate.c" or "candidate.cu"
  local fn = host and (m["function"] or "run") or (m.launches and m.launches[1] and m.launches[1].kernel or "k")
  return {
    name = name, definition = def.name, author = "replay",
    spec = { language = host and "cpp" or "cuda", target_hardware = { host and "cpu" or "cuda" },
             entry_point = path .. "::" .. fn, destination_passing_style = true, khlua = m },
    sources = { { path = path, content = cand.source } },
  }
end

-- A scratch package: the definition and workloads of p, plus the given solutions.
local function scratch_package(p, sols)
  local dir = T.tmpdir()
  assert(os.execute("mkdir -p " .. T.quote(dir .. "/solutions")))
  assert(os.execute("cp " .. T.quote(p .. "/definition.json") .. " " .. T.quote(p) .. "/*.jsonl " .. T.quote(dir)))
  for _, s in ipairs(sols) do
    T.write(dir .. "/solutions/" .. s.name .. ".json", kh.json.encode(s))
  end
  -- the trusted reference and baseline must be there for khlua.reference to resolve
  assert(os.execute("cp " .. T.quote(p) .. "/solutions/*.json " .. T.quote(dir .. "/solutions/")))
  return dir
end

local function rmdir(d) os.execute("rm -rf " .. T.quote(d)) end

local LADDERS = {}
for _, p in ipairs(PKGS) do
  local f = io.open(p .. "/replay/ladder.jsonl", "r")
  if f then f:close(); LADDERS[#LADDERS + 1] = p end
end

T.test("replay ladders cover every controller path", function()
  T.ok(#LADDERS >= 2, "expected at least the two host ladders")
  for _, p in ipairs(LADDERS) do
    local kinds, extracts = {}, {}
    local files = {}
    for _, e in ipairs(ladder(p .. "/replay")) do
      kinds[e.kind] = true
      extracts[e.extract] = true
      files[e.file] = true
    end
    for _, k in ipairs({ "correct-slow", "faster", "wrong", "slower", "cheating" }) do
      T.ok(kinds[k], p .. ": no " .. k .. " reply")
    end
    -- every reply in the folder is in the ladder (the replay provider serves them all)
    for _, l in ipairs(lines("ls " .. T.quote(p .. "/replay"))) do
      if l:match("%.txt$") or l:match("%.json$") then T.ok(files[l], p .. ": " .. l .. " not in ladder.jsonl") end
    end
  end
end)

T.test("every reply extracts as its ladder says and makes a candidate the package accepts", function()
  for _, p in ipairs(LADDERS) do
    local def = decode_file(p .. "/definition.json")
    local sols = {}
    for _, e in ipairs(ladder(p .. "/replay")) do
      local text, finish = reply(p .. "/replay", e.file)
      local c = kh.llm.extract(text, { finish_reason = finish })
      T.eq(c.status, e.extract, p .. "/" .. e.file .. ": " .. tostring(c.message))
      if c.status == "ok" then
        sols[#sols + 1] = solution_of(def, "replay_" .. e.file:gsub("%.%w+$", ""):gsub("%-", "_"), c)
      end
    end
    local dir = scratch_package(p, sols)
    local out, code = T.khlua("task", "check", dir)
    rmdir(dir)
    T.eq(code, 0, p .. ": candidates from the replies:\n" .. out)
  end
end)

-- ---- evaluation (needs kh.eval: the evaluation merge) -----------------------------

local function need_eval()
  if type(kh.eval) == "nil" then T.skip("kh.eval is not in this build yet") end
end

local function eval_run(task, sol, opts)
  local f = kh.eval
  if type(f) == "table" then f = f.run end
  return f(task, sol, opts)
end

local function host_packages()
  local t = {}
  for _, p in ipairs(PKGS) do
    local d = decode_file(p .. "/definition.json")
    local ref = decode_file(p .. "/solutions/" .. d.khlua.reference .. ".json")
    if ref.spec.khlua.backend == "host" then t[#t + 1] = p end
  end
  return t
end

T.test("host references and baselines PASS on every workload", function()
  need_eval()
  for _, p in ipairs(host_packages()) do
    local d = decode_file(p .. "/definition.json")
    for _, s in ipairs({ d.khlua.reference, d.khlua.baseline }) do
      local traces = assert(eval_run(p, s, { timing = false, record = false }))
      T.ok(#traces > 0, p .. " " .. s)
      for _, tr in ipairs(traces) do
        T.eq(tr.evaluation.status, "PASSED", p .. " " .. s .. " " .. tr.workload.uuid .. ": " ..
             tostring(tr.evaluation.khlua and tr.evaluation.khlua.detail))
      end
    end
  end
end)

T.test("host replay candidates get the verdicts their ladders promise", function()
  need_eval()
  for _, p in ipairs(LADDERS) do
    local def = decode_file(p .. "/definition.json")
    local ref = decode_file(p .. "/solutions/" .. def.khlua.reference .. ".json")
    if ref.spec.khlua.backend == "host" then
      for _, e in ipairs(ladder(p .. "/replay")) do
        if e.extract == "ok" then
          local text, finish = reply(p .. "/replay", e.file)
          local s = solution_of(def, "replay_candidate", kh.llm.extract(text, { finish_reason = finish }))
          local dir = scratch_package(p, { s })
          local where = p .. "/" .. e.file
          for _, parity in ipairs({ false, true }) do
            local want = parity and e.parity_status or e.status
            local traces, msg = eval_run(dir, "replay_candidate",
                                         { timing = false, record = false, parity = parity, workloads = 3 })
            T.ok(traces, where .. ": " .. tostring(msg))
            local got, check = "PASSED", nil
            for _, tr in ipairs(traces) do
              if tr.evaluation.status ~= "PASSED" then
                got = tr.evaluation.status
                check = tr.evaluation.khlua and tr.evaluation.khlua.failed_check
                break
              end
            end
            if not is_null(want) then T.eq(got, want, where .. (parity and " (parity)" or "")) end
            if not parity and not is_null(e.failed_check) then
              T.eq(check, e.failed_check, where .. ": failed check")
            end
          end
          rmdir(dir)
        end
      end
    end
  end
end)
