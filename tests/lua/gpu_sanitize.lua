-- gpu_sanitize.lua: compute-sanitizer at promotion time and random scalars
-- passed by value, on a GPU machine (skipped elsewhere), with the package
-- tests/redteam/sanitize (make.py there): c = alpha * a + b, alpha a random
-- float32 scalar.  Without the sanitizer the out-of-bounds read, the shared-
-- memory race and the uninitialised read all PASS (the gate cannot see
-- them); with sanitize = {memcheck, racecheck, initcheck} each is a
-- RUNTIME_ERROR caught by its tool, and the honest candidate stays PASSED
-- under all three (the worker's own kernels must not be blamed).  A
-- candidate that ignores alpha fails: the random scalar reaches the kernel.
-- Prints the table: candidate, verdict, check, seconds.
local T = require "testlib"
local kh = require "kh"

if #kh.doctor().gpus == 0 then T.skip_all("no GPU on this machine") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local PKG = SRC .. "/tests/redteam/sanitize"
local expect = kh.json.decode(T.read(PKG .. "/expect.json"))
local TOOLS = { "memcheck", "racecheck", "initcheck" }
math.randomseed(T.seed())

local function eval(name, sanitize)
  local t0 = kh.time.now()
  local tr, msg, code = kh.eval(PKG, name, {
    seed = math.random(1, 1 << 40), trials = 2, timing = false, record = false,
    deadline_s = 60, sanitize = sanitize, sanitize_deadline_s = 300,
  })
  return tr, msg, code, kh.time.now() - t0
end

local rows = {}
local names = {}
for n in pairs(expect) do names[#names + 1] = n end
table.sort(names)

local function check_verdict(label, e, want)
  local fc = e.khlua.failed_check
  if fc == kh.json.null then fc = nil end
  T.eq(e.status, want[1], label .. ": " .. tostring(e.khlua.detail))
  if want[2] ~= kh.json.null then T.eq(fc, want[2], label .. ": " .. tostring(e.khlua.detail)) end
end

for _, name in ipairs(names) do
  T.test("san_" .. name .. " without the sanitizer", function()
    local tr, msg, code, dt = eval("san_" .. name, nil)
    T.ok(tr, tostring(code) .. " " .. tostring(msg))
    local e = tr[1].evaluation
    rows[#rows + 1] = string.format("%-18s %-10s %-20s %-22s %7.2f", name, "-", e.status,
      e.khlua.failed_check == kh.json.null and "-" or tostring(e.khlua.failed_check), dt)
    check_verdict(name, e, expect[name][1])
  end)
  T.test("san_" .. name .. " under memcheck, racecheck, initcheck", function()
    local tr, msg, code, dt = eval("san_" .. name, TOOLS)
    if not tr and code == "ENOTFOUND" and tostring(msg):find("compute%-sanitizer") then
      T.skip(msg)
    end
    T.ok(tr, tostring(code) .. " " .. tostring(msg))
    local e = tr[1].evaluation
    rows[#rows + 1] = string.format("%-18s %-10s %-20s %-22s %7.2f", name, "all", e.status,
      e.khlua.failed_check == kh.json.null and "-" or tostring(e.khlua.failed_check), dt)
    check_verdict(name, e, expect[name][2])
    local san = e.khlua.sanitizer
    if expect[name][1][1] == "PASSED" then
      T.ok(san, "khlua.sanitizer is missing")
      for tool, r in pairs(san) do
        rows[#rows + 1] = string.format("    %-10s %-10s errors %d, ignored %d, %.1f s (start %.1f, "
          .. "run %.1f); %s", tool, r.status, r.errors, r.ignored, r.seconds, r.start_s, r.run_s,
          (r.report or ""):gsub("\n", " | "):sub(1, 90))
        -- the tool's start and its request lie within its seconds
        T.ok(r.start_s > 0 and r.run_s > 0 and r.start_s + r.run_s <= r.seconds + 1e-6,
          tool .. string.format(": start_s %.3f + run_s %.3f > seconds %.3f", r.start_s,
            r.run_s, r.seconds))
      end
    end
    if name == "honest" then
      for _, tool in ipairs(TOOLS) do
        T.eq(san[tool].status, "clean", tool .. ": " .. tostring(san[tool].report))
        T.eq(e.khlua.checks["sanitizer:" .. tool], "ok")
      end
    elseif expect[name][2][1] == "RUNTIME_ERROR" then
      local tool = expect[name][2][2]:match("sanitizer:(%a+)")
      T.eq(san[tool].status, "errors")
      T.ok(san[tool].errors >= 1)
      T.match(e.khlua.detail, "compute%-sanitizer " .. tool)
      -- the report names the candidate's kernel
      T.match(san[tool].report, "%f[%w_]k%f[^%w_]")
    end
  end)
end

-- Timing: input sets rotate and sampled timed calls run on launch lists of
-- their own; each must get its set's alpha, or its outputs fail.
T.test("san_honest timed: every rotated set passes its own alpha", function()
  local tr, msg, code = kh.eval(PKG, "san_honest", {
    seed = math.random(1, 1 << 40), trials = 2, record = false, protocol = "screen",
    rotate_inputs = 3, verify_timed_fraction = 1, max_iters = 30, time_reference = false,
  })
  T.ok(tr, tostring(code) .. " " .. tostring(msg))
  local e = tr[1].evaluation
  T.eq(e.status, "PASSED", tostring(e.khlua.detail))
  T.eq(e.khlua.checks.timed_outputs, "ok")
  T.ok(e.khlua.timed_outputs_verified.calls >= 3)
  tr = assert(kh.eval(PKG, "san_ignores_alpha", {
    seed = math.random(1, 1 << 40), trials = 1, record = false, timing = false }))
  T.eq(tr[1].evaluation.status, "INCORRECT_NUMERICAL")
end)

T.test("table", function()
  print(string.format("%-18s %-10s %-20s %-22s %7s", "candidate", "sanitize", "verdict",
    "failed check", "seconds"))
  for _, r in ipairs(rows) do print(r) end
end)
