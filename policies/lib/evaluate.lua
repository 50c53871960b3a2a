-- evaluate.lua: the one place policies reach the evaluation harness.
--
--   local ev = require "lib.evaluate"
--   local v, msg, code = ev.run(task_path, solution, opts)
--
-- solution: a Solution table (a candidate) or the name of a solution in the
-- task package (the trusted reference, a baseline).  opts: workloads (a list
-- of uuids, a count, or "all"), protocol ("screen", "official", "precise"),
-- trials, seed, timing (false: correctness only).  Returns the traces as
-- kh.eval gives them (docs/evaluation.md: one FlashInfer-Bench Trace per
-- workload), or nil, msg, code when the evaluation could not run.
--
-- The harness is kh.eval, called with record = false: the controller stores
-- each verdict itself, linked to its run, round and purpose (a policy holds
-- the store open, and kh.eval's own recording would need a second open in
-- this process).  ev.use(fn) replaces it (tests inject a
-- deterministic fake with kh.eval's signature and verdict shape); ev.use(nil)
-- restores it.  Without kh.eval in this build and no replacement, every call
-- returns nil, "...", "EUNSUPPORTED".
local kh = require "kh"

local M = {}

local override = nil

function M.use(fn)
  assert(fn == nil or type(fn) == "function", "evaluate.use expects a function or nil")
  override = fn
end

function M.available()
  return override ~= nil or kh.eval ~= nil
end

-- The definition file of a task's definition (kh.eval reads a Solution file
-- with the definition beside it as its context).
local def_files = {}
local function definition_file(task_path, name)
  local key = task_path .. "\0" .. tostring(name)
  if def_files[key] then return def_files[key] end
  local ts <close>, msg, code = kh.task.load(task_path)
  if not ts then return nil, msg, code end
  local d = ts:definition(name)
  if not d then return nil, "no definition " .. tostring(name) .. " in " .. task_path, "ENOTFOUND" end
  def_files[key] = d.file
  return d.file
end

local function write(path, text)
  local f, err = io.open(path, "wb")
  if not f then return nil, err end
  f:write(text)
  f:close()
  return true
end

-- A scratch folder holding the definition and the solution; returns the
-- solution's path and a cleanup function.
local function scratch(task_path, solution)
  local def, msg, code = definition_file(task_path, solution.definition)
  if not def then return nil, msg, code end
  local f = io.open(def, "rb")
  if not f then return nil, "cannot read " .. def, "EIO" end
  local dtext = f:read("a")
  f:close()
  local p = io.popen("mktemp -d 2>/dev/null")
  local dir = p and p:read("l")
  if p then p:close() end
  if not dir or dir == "" then return nil, "cannot make a scratch folder", "EIO" end
  local sol_path = dir .. "/solution.json"
  local ok, err = write(dir .. "/definition.json", dtext)
  if ok then ok, err = write(sol_path, kh.json.encode(solution)) end
  local function cleanup()
    os.remove(sol_path)
    os.remove(dir .. "/definition.json")
    os.remove(dir)
  end
  if not ok then cleanup(); return nil, "cannot write the solution: " .. tostring(err), "EIO" end
  return sol_path, cleanup
end

function M.run(task_path, solution, opts)
  local fn = override or kh.eval
  if not fn then
    return nil, "kh.eval is not in this build (the evaluation harness is not merged yet)",
      "EUNSUPPORTED"
  end
  if override then return override(task_path, solution, opts) end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.record = false
  opts = o
  if type(solution) ~= "table" then return fn(task_path, solution, opts) end
  local path, cleanup, ecode = scratch(task_path, solution)
  if not path then return nil, cleanup, ecode end
  local r, msg, code = fn(task_path, path, opts)
  cleanup()
  return r, msg, code
end

-- The profiler for a candidate on one workload: kh.profile.run on the
-- solution (a table goes through the same scratch folder as ev.run).
-- opts: workload (uuid), store (a kh.Store to record the profile in), seed.
-- Returns kh.profile.run's report (state, signature, kernels, store_id), or
-- nil, msg, code.  ev.use_profile(fn) replaces it for tests.
local profile_override = nil

function M.use_profile(fn)
  assert(fn == nil or type(fn) == "function", "evaluate.use_profile expects a function or nil")
  profile_override = fn
end

function M.profile_available()
  return profile_override ~= nil or (kh.profile ~= nil and kh.profile.run ~= nil)
end

function M.profile(task_path, solution, opts)
  if profile_override then return profile_override(task_path, solution, opts) end
  if not M.profile_available() then
    return nil, "kh.profile is not in this build", "EUNSUPPORTED"
  end
  local args = { task_path = task_path, workload = opts and opts.workload,
    seed = opts and opts.seed, store = opts and opts.store }
  if type(solution) ~= "table" then
    args.solution = solution
    return kh.profile.run(args)
  end
  local path, cleanup, ecode = scratch(task_path, solution)
  if not path then return nil, cleanup, ecode end
  args.solution = path
  local ok, r, msg, code = pcall(kh.profile.run, args)
  cleanup()
  if not ok then return nil, tostring(r), "EINVAL" end
  return r, msg, code
end

-- A short view of traces: {ok = all PASSED, passed, total, failed = {status, check,
-- workload}, by_uuid = {[uuid] = {status, latency_ms, reference_latency_ms}}}.
function M.summary(traces)
  local s = { passed = 0, total = #traces, by_uuid = {} }
  for _, t in ipairs(traces) do
    local e = t.evaluation or {}
    local uuid = t.workload and t.workload.uuid or "?"
    local perf = e.performance or {}
    local kx = e.khlua or {}
    -- elements compared per trial (the figures add up every trial's)
    local el = kx.figures and tonumber(kx.figures.elements)
    local nt = type(kx.seeds) == "table" and #kx.seeds or 0
    s.by_uuid[uuid] = { status = e.status, latency_ms = perf.latency_ms,
      reference_latency_ms = perf.reference_latency_ms,
      elements = el and nt > 0 and el // nt or nil }
    if e.status == "PASSED" then
      s.passed = s.passed + 1
    elseif not s.failed then
      -- JSON null (a verdict no check decided: COMPILE_ERROR) is no check
      local chk = e.khlua and e.khlua.failed_check
      local log = e.log
      s.failed = { status = e.status, check = type(chk) == "string" and chk or nil,
        workload = uuid, log = type(log) == "string" and log or nil }
    end
  end
  s.ok = s.total > 0 and s.passed == s.total
  return s
end

return M
