-- evaluate.lua: the one place policies reach the evaluation harness.
--
--   local ev = require "lib.evaluate"
--   local v, msg, code = ev.run(task, solution, opts)
--
-- task: what kh.task.load gives (the run's task, loaded and fingerprinted
-- once: kh.eval reads nothing again), or a path.  solution: a Solution table
-- (a candidate, handed to the engine in memory: no scratch files) or the
-- name of a solution in the task package (the trusted reference, a
-- baseline).  opts: workloads (a list
-- of uuids, a count, or "all"), protocol ("screen", "official", "precise"),
-- trials, seed, timing (false: correctness only).  Returns the traces as
-- kh.eval gives them (docs/evaluation.md: one FlashInfer-Bench Trace per
-- workload), or nil, msg, code when the evaluation could not run.
--
-- The harness is kh.eval.  With opts.store (the policy's open kh.Store) it
-- records every verdict there itself, linked to opts.run, opts.round_index
-- and opts.purpose, and each trace carries its record id
-- (evaluation.khlua.record); without one it records nothing.  ev.use(fn)
-- replaces it (tests inject a deterministic fake with kh.eval's signature,
-- verdict shape and recording); ev.use(nil) restores it.  Without kh.eval in this build and no replacement, every call
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

function M.run(task, solution, opts)
  local fn = override or kh.eval
  if not fn then
    return nil, "kh.eval is not in this build (the evaluation harness is not merged yet)",
      "EUNSUPPORTED"
  end
  if override then return override(task, solution, opts) end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  -- the engine records each verdict into opts.store (with opts.run,
  -- round_index and purpose: the one writer of evaluation records); without
  -- a store nothing is recorded
  o.record = o.store ~= nil
  -- the task value and the Solution table go in as they are: nothing is
  -- written to disk, nothing parsed twice
  return fn(task, solution, o)
end

-- The profiler for a candidate on one workload: kh.profile.run on the
-- solution (a table, or a name), the task as ev.run takes it.
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

function M.profile(task, solution, opts)
  if profile_override then return profile_override(task, solution, opts) end
  if not M.profile_available() then
    return nil, "kh.profile is not in this build", "EUNSUPPORTED"
  end
  local args = { task_path = task, solution = solution, workload = opts and opts.workload,
    seed = opts and opts.seed, store = opts and opts.store }
  local ok, r, msg, code = pcall(kh.profile.run, args)
  if not ok then return nil, tostring(r), "EINVAL" end
  return r, msg, code
end

-- A short view of traces: {ok = all PASSED, passed, total, failed = {status, check,
-- workload}, contended (the largest share of timed calls kept although they
-- waited on the run queue), by_uuid = {[uuid] = {status, latency_ms,
-- reference_latency_ms, contended}}}.
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
    -- host timing: the share of timed calls kept although they waited on
    -- the run queue (the retakes ran out: the machine was busy)
    local tm = type(kx.timing) == "table" and kx.timing or {}
    local ct = type(tm.contended) == "table" and tm.contended or {}
    local contended = (tonumber(ct.kept) or 0) / math.max(tonumber(tm.n) or 0, 1)
    s.contended = math.max(s.contended or 0, contended)
    s.by_uuid[uuid] = { status = e.status, latency_ms = perf.latency_ms,
      reference_latency_ms = perf.reference_latency_ms,
      elements = el and nt > 0 and el // nt or nil, contended = contended }
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
