-- ladder.lua: the task library's replay ladders (kernels/<pkg>/replay/), shared by
-- test_kernels.lua (host, everywhere) and gpu_kernels.lua (CUDA, on a GPU).
-- A ladder.jsonl line: {file, kind, extract, compile?, manifest?, status?,
-- failed_check?, parity_status?, speed?, note}; null means "not asserted".
local T = require "testlib"
local kh = require "kh"

local L = {}
L.NULL = kh.json.null

function L.is_null(v) return v == nil or v == L.NULL end

function L.lines(cmd)
  local p = assert(io.popen(cmd .. " 2>/dev/null", "r"))
  local t = {}
  for l in p:lines() do t[#t + 1] = l end
  p:close()
  return t
end

function L.decode_file(path) return assert(kh.json.decode(T.read(path))) end

-- Every package folder (holding definition.json) under kdir, sorted.
function L.packages(kdir)
  local t = {}
  for _, l in ipairs(L.lines("ls -d " .. T.quote(kdir) .. "/*/definition.json")) do
    t[#t + 1] = l:match("^(.*)/definition%.json$")
  end
  table.sort(t)
  return t
end

function L.ladder(dir)
  local t = {}
  for l in T.read(dir .. "/ladder.jsonl"):gmatch("[^\n]+") do t[#t + 1] = assert(kh.json.decode(l)) end
  return t
end

-- The reply text and finish reason of a recorded reply (.txt: finished normally).
function L.reply(dir, file)
  local text = T.read(dir .. "/" .. file)
  if file:match("%.json$") then
    local r = assert(kh.json.decode(text))
    return r.text, r.finish_reason
  end
  return text, "stop"
end

-- A FlashInfer-Bench Solution from an extracted candidate, as a policy makes one.
function L.solution_of(def, name, cand)
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

-- A scratch package: the definition, workloads and solutions of p, plus sols.
function L.scratch_package(p, sols)
  local dir = T.tmpdir()
  assert(os.execute("mkdir -p " .. T.quote(dir .. "/solutions")))
  assert(os.execute("cp " .. T.quote(p .. "/definition.json") .. " " .. T.quote(p) .. "/*.jsonl " .. T.quote(dir)))
  assert(os.execute("cp " .. T.quote(p) .. "/solutions/*.json " .. T.quote(dir .. "/solutions/")))
  -- Workloads name their safetensors inputs relative to the package.
  os.execute("[ -d " .. T.quote(p .. "/blob") .. " ] && ln -s \"$(cd " .. T.quote(p) .. " && pwd)/blob\" " .. T.quote(dir .. "/blob"))
  for _, s in ipairs(sols) do
    T.write(dir .. "/solutions/" .. s.name .. ".json", kh.json.encode(s))
  end
  return dir
end

function L.rmdir(d) os.execute("rm -rf " .. T.quote(d)) end

function L.eval(task, sol, opts)
  local f = kh.eval
  if type(f) == "table" then f = f.run end
  return f(task, sol, opts)
end

-- The first non-PASSED verdict over the traces (or PASSED) and its failed check.
function L.verdict(traces)
  for _, tr in ipairs(traces) do
    if tr.evaluation.status ~= "PASSED" then
      local k = tr.evaluation.khlua
      return tr.evaluation.status, k and k.failed_check, tr
    end
  end
  return "PASSED", nil, traces[1]
end

-- Evaluate every extractable, valid reply of the ladder at p and check its
-- verdict (hardened, then parity) against the ladder.
function L.check_verdicts(p, workloads)
  local def = L.decode_file(p .. "/definition.json")
  for _, e in ipairs(L.ladder(p .. "/replay")) do
    if e.extract == "ok" and e.manifest ~= "invalid" then
      local text, finish = L.reply(p .. "/replay", e.file)
      local s = L.solution_of(def, "replay_candidate", kh.llm.extract(text, { finish_reason = finish }))
      local dir = L.scratch_package(p, { s })
      local where = p .. "/" .. e.file
      for _, parity in ipairs({ false, true }) do
        local want = parity and e.parity_status or e.status
        if not L.is_null(want) then
          local traces, msg = L.eval(dir, "replay_candidate",
                                     { timing = false, record = false, parity = parity, workloads = workloads })
          T.ok(traces, where .. ": " .. tostring(msg))
          local got, check = L.verdict(traces)
          T.eq(got, want, where .. (parity and " (parity)" or ""))
          if not parity and not L.is_null(e.failed_check) then
            T.eq(check, e.failed_check, where .. ": failed check")
          end
        end
      end
      L.rmdir(dir)
    end
  end
end

return L
