-- gpu_redteam.lua: the CUDA red team (tests/redteam/cuda) through kh.eval on
-- a GPU machine (skipped elsewhere).  Each candidate must get its verdict, and
-- a cheat must be caught by one of the checks built for it
-- (tests/redteam/cuda/expect.json); after every fault the next honest
-- candidate must pass.  Prints the table: candidate, verdict, check, time.
--
-- An entry of expect.json is keyed by the solution's name, or by any name
-- when it says which solution it runs, and may carry (all optional, so the
-- first entries read as before):
--   solution     the solution to run (default: the key), so one candidate can
--                have several entries ("rt_x@fixed_seed");
--   package      the task package under tests/redteam (default cuda):
--                cuda_device is the same task with a trusted CUDA reference;
--   opts         kh.eval options laid over the defaults below; a JSON null
--                removes a default (so the coordinator's own applies: "seed":
--                null runs under its default base seed);
--   failed_check khlua.failed_check must be one of these, exactly (caught_by
--                is matched anywhere in the trace, which the name of a check
--                that passed can satisfy);
--   slower_than  {"solution", "factor", "workload"}: a PASSED cheat whose shortcut
--                the rules must have taken away: its latency on that workload is
--                at least factor times that solution's, under the same options.
local T = require "testlib"
local kh = require "kh"

if #kh.doctor().gpus == 0 then T.skip_all("no GPU on this machine") end
if not kh.eval then T.skip_all("kh.eval is not in this build") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local PKG = SRC .. "/tests/redteam/cuda"
local expect = kh.json.decode(T.read(PKG .. "/expect.json"))
math.randomseed(T.seed())

local rows = {}
local function options(extra)
  local o = {
    seed = math.random(1, 1 << 40), warmup = 2, iters = 20, record = false, deadline_s = 10,
  }
  for k, v in pairs(extra or {}) do
    if v == kh.json.null then o[k] = nil else o[k] = v end
  end
  return o
end

-- The worst workload's evaluation (every one must pass for PASSED), the
-- seconds taken and the traces.
local function run(name, extra, pkg)
  local t0 = kh.time.now()
  local ok, tr, msg, code = pcall(kh.eval, pkg or PKG, name, options(extra))
  local dt = kh.time.now() - t0
  if not ok then return { status = "ERROR (kh.eval refused: " .. tostring(tr) .. ")" }, dt end
  if not tr then return { status = "ERROR " .. tostring(code), detail = msg }, dt end
  local worst
  for _, t in ipairs(tr) do
    local e = t.evaluation
    if not worst or (worst.status == "PASSED" and e.status ~= "PASSED") then worst = e end
  end
  return worst, dt, tr
end

-- Latency (ms) of a run's trace on one workload, or nil.
local function latency(traces, uuid)
  for _, t in ipairs(traces or {}) do
    if t.workload and t.workload.uuid == uuid then
      local p = t.evaluation.performance
      if p and p ~= kh.json.null and tonumber(p.latency_ms) then return tonumber(p.latency_ms) end
    end
  end
end

-- The check that caught a candidate: failed_check, else the fault, else the
-- detail or log (compile errors, CUDA errors); JSON nulls count as absent.
local function caught_by(e)
  local k = e.khlua or {}
  local function s(v) if v ~= nil and v ~= kh.json.null then return tostring(v) end end
  return s(k.failed_check) or s(k.fault) or s(k.detail) or s(e.log) or "-"
end

local names = {}
-- KH_RT_ONLY="rt_a rt_b": only those (a re-run of part of the corpus)
local only = os.getenv("KH_RT_ONLY")
for n in pairs(expect) do
  if not only or (" " .. only .. " "):find(" " .. n .. " ", 1, true) then names[#names + 1] = n end
end
table.sort(names)

local function list(v)
  if v == nil or v == kh.json.null then return nil end
  return type(v) == "table" and v or { v }
end

for _, name in ipairs(names) do
  T.test(name, function()
    local want = expect[name]
    local sol = want.solution or name
    local extra = want.opts ~= kh.json.null and want.opts or nil
    local pkg = want.package and (SRC .. "/tests/redteam/" .. want.package) or nil
    local e, dt, traces = run(sol, extra, pkg)
    local by = caught_by(e):gsub("\n", " ")
    rows[#rows + 1] = string.format("%-36s %-20s %-28s %6.2f s", name, tostring(e.status),
      tostring(by):sub(1, 28), dt)
    io.write("# ", rows[#rows], "\n")
    if tostring(e.status):match("^ERROR") then io.write("#   why: ", tostring(e.detail), "\n") end
    io.flush()
    T.eq(e.status, want.status, name .. " (" .. tostring(by) .. ")")
    -- the definition's reference runs on the GPU: a candidate whose trials
    -- were judged was compared in the coordinator, unless the entry asks for
    -- the device (device_compare)
    local cmp = e.khlua and e.khlua ~= kh.json.null and e.khlua.compare
    if cmp then
      local dev = extra and extra.device_compare == true
      T.eq(cmp, dev and "device" or "host", name .. ": where the outputs were compared")
    end
    if want.caught_by and want.caught_by ~= kh.json.null then
      local ok = false
      local all = kh.json.encode(e)
      for _, c in ipairs(want.caught_by) do
        if by:find(c, 1, true) or all:find(c, 1, true) then ok = true end
      end
      T.ok(ok, name .. ": caught by " .. tostring(by) .. ", expected one of "
        .. table.concat(want.caught_by, ", "))
    end
    local fc = list(want.failed_check)
    if fc then
      local got = e.khlua and e.khlua ~= kh.json.null and e.khlua.failed_check
      local ok = false
      for _, c in ipairs(fc) do if got == c then ok = true end end
      T.ok(ok, name .. ": failed_check " .. tostring(got) .. ", expected one of "
        .. table.concat(fc, ", "))
    end
    local sl = want.slower_than
    if sl and sl ~= kh.json.null then
      local mine = latency(traces, sl.workload)
      local _, _, base_tr = run(sl.solution, extra)
      local base = latency(base_tr, sl.workload)
      T.ok(mine and base, name .. ": no latency on workload " .. tostring(sl.workload)
        .. " (candidate " .. tostring(mine) .. " ms, " .. sl.solution .. " " .. tostring(base) .. " ms)")
      T.ok(mine >= sl.factor * base, string.format(
        "%s: %.4f ms on %s, not %g x %s's %.4f ms: its shortcut still works", name, mine,
        sl.workload, sl.factor, sl.solution, base))
    end
    local cuda_fault = want.caught_by and want.caught_by ~= kh.json.null
      and tostring(want.caught_by[1]):match("^CUDA_ERROR_")
    if sol:match("^rt_fault_") or cuda_fault then
      local h = run("rt_honest")
      T.eq(h.status, "PASSED", "the honest candidate after " .. name)
    end
  end)
end

-- The evaluation's buffers are islands (engine/gpu/gpu.h) where the GPU has
-- virtual memory management, as every GPU khlua runs on does: the third wave's
-- stray reads fault there.
if not only then
  T.test("buffers are islands", function()
    local e = run("rt_honest")
    T.eq(e.status, "PASSED")
    local w = e.khlua and e.khlua.worker
    T.eq(w and w ~= kh.json.null and w.buffers, "islands", "khlua.worker.buffers")
  end)
end

T.test("table", function()
  print(string.format("%-36s %-20s %-28s %8s", "candidate", "verdict", "caught by", "time"))
  for _, r in ipairs(rows) do print(r) end
end)
