-- gpu_redteam.lua: the CUDA red team (tests/redteam/cuda) through kh.eval on
-- a GPU machine (skipped elsewhere).  Each candidate must get its verdict, and
-- a cheat must be caught by one of the checks built for it
-- (tests/redteam/cuda/expect.json); after every fault the next honest
-- candidate must pass.  Prints the table: candidate, verdict, check, time.
local T = require "testlib"
local kh = require "kh"

if #kh.doctor().gpus == 0 then T.skip_all("no GPU on this machine") end
if not kh.eval then T.skip_all("kh.eval is not in this build") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local PKG = SRC .. "/tests/redteam/cuda"
local expect = kh.json.decode(T.read(PKG .. "/expect.json"))
math.randomseed(os.time())

local rows = {}
local function run(name)
  local t0 = kh.time.now()
  local tr, msg, code = kh.eval(PKG, name, {
    seed = math.random(1, 1 << 40), warmup = 2, iters = 20, record = false,
    verify_timed_fraction = 0.5, deadline_s = 10,
  })
  local dt = kh.time.now() - t0
  if not tr then return { status = "ERROR " .. tostring(code), detail = msg }, dt end
  -- the worst workload decides (every one must pass for PASSED)
  local worst
  for _, t in ipairs(tr) do
    local e = t.evaluation
    if not worst or (worst.status == "PASSED" and e.status ~= "PASSED") then worst = e end
  end
  return worst, dt
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

for _, name in ipairs(names) do
  T.test(name, function()
    local want = expect[name]
    local e, dt = run(name)
    local by = caught_by(e):gsub("\n", " ")
    rows[#rows + 1] = string.format("%-26s %-20s %-28s %6.2f s", name, tostring(e.status),
      tostring(by):sub(1, 28), dt)
    io.write("# ", rows[#rows], "\n")
    io.flush()
    T.eq(e.status, want.status, name .. " (" .. tostring(by) .. ")")
    if want.caught_by and want.caught_by ~= kh.json.null then
      local ok = false
      local all = kh.json.encode(e)
      for _, c in ipairs(want.caught_by) do
        if by:find(c, 1, true) or all:find(c, 1, true) then ok = true end
      end
      T.ok(ok, name .. ": caught by " .. tostring(by) .. ", expected one of "
        .. table.concat(want.caught_by, ", "))
    end
    if name:match("^rt_fault_") then
      local h = run("rt_honest")
      T.eq(h.status, "PASSED", "the honest candidate after " .. name)
    end
  end)
end

T.test("table", function()
  print(string.format("%-26s %-20s %-28s %8s", "candidate", "verdict", "caught by", "time"))
  for _, r in ipairs(rows) do print(r) end
end)
