-- test_slurm.lua: workers started through Slurm's srun (issue 13).  Starts a
-- private single-node Slurm cluster on loopback (lib/slurm_cluster.sh:
-- munged, slurmctld and slurmd with their own config, ports and state in a
-- temporary folder, stopped at the end and by a watchdog if this process
-- dies), then runs real `khlua eval`s of a host task with `--launch srun`:
-- every verdict PASSED, each ran in a worker that is a Slurm job step (its
-- pid is not srun's, its hello names the job), two workers in parallel; a
-- candidate that crashes its worker behind srun is a RUNTIME_ERROR verdict
-- and the next candidate passes on a fresh one; one that hangs is a TIMEOUT
-- and its Slurm step is cancelled.  Skips (77) where the packages are
-- missing or the daemons cannot start as this user; runs for real in CI
-- (root, Debian 12, scripts/common.sh installs slurm-wlm and munge).
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local SCRIPT = SRC .. "/tests/lua/lib/slurm_cluster.sh"

local function self_pid()
  local f = assert(io.open("/proc/self/stat", "r"))
  local pid = f:read("n")
  f:close()
  return math.tointeger(pid)
end

local dir = T.tmpdir()
local p = assert(io.popen(string.format("bash %s start %s %d 2>&1", T.quote(SCRIPT), T.quote(dir .. "/c"),
  self_pid())))
local out = p:read("a")
local _, _, code = p:close()
if code == 77 then
  os.remove(dir)
  T.skip_all(out:gsub("%s+$", ""))
end
assert(code == 0, "could not start the Slurm cluster: " .. out)
local conf = assert(out:match("SLURM_CONF=(%S+)"), out)

local function stop_cluster()
  os.execute(string.format("bash %s stop %s", T.quote(SCRIPT), T.quote(dir .. "/c")))
  os.remove(dir)
end

local function sh(cmd)
  local q = assert(io.popen("SLURM_CONF=" .. T.quote(conf) .. " " .. cmd .. " 2>&1"))
  local s = q:read("a")
  local _, _, c = q:close()
  return s, c
end

local function khlua(...)
  local parts = { T.quote(os.getenv("KHLUA_BIN") or arg[-1]) }
  for _, a in ipairs({ ... }) do parts[#parts + 1] = T.quote(a) end
  return sh(table.concat(parts, " ") .. " </dev/null")
end

local function traces(text)
  local r = {}
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, 1) == "{" then r[#r + 1] = kh.json.decode(line) end
  end
  return r
end

local HOST = SRC .. "/kernels/host_rmsnorm"
local RT = SRC .. "/tests/redteam/host/rmsnorm"
math.randomseed(T.seed())
local seed = tostring(math.random(1, 1 << 40))

T.test("khlua eval --launch srun: every workload PASSED in Slurm job steps, two in parallel", function()
  local text, c = khlua("eval", "--task", HOST, "--solution", "host_rmsnorm_h1024_c_v1", "--no-timing",
    "--seed", seed, "--launch", "srun", "--host-workers", "2", "--no-store", "--json")
  T.eq(c, 0, text)
  local tr = traces(text)
  T.eq(#tr, 7, text)
  local jobs, pids = {}, {}
  for _, t in ipairs(tr) do
    local e = t.evaluation
    T.eq(e.status, "PASSED", tostring(e.khlua.detail))
    local pl = e.khlua.placement
    T.eq(pl.launch, "srun")
    T.ok(pl.slurm_job and pl.slurm_job:match("^%d+%.%d+$"), "no Slurm job step: " .. tostring(pl.slurm_job))
    T.ok(pl.pid > 0 and pl.pid ~= pl.launcher_pid, "the worker is srun itself")
    jobs[pl.slurm_job] = true
    pids[pl.pid] = true
  end
  local nj, np = 0, 0
  for _ in pairs(jobs) do nj = nj + 1 end
  for _ in pairs(pids) do np = np + 1 end
  T.eq(nj, 2, "two workers, two job steps")
  T.eq(np, 2)
  -- the workers left with the coordinator: no job of ours is still running
  local q
  for _ = 1, 50 do
    q = sh("squeue -h -p kh")
    if q == "" then break end
    os.execute("sleep 0.1")
  end
  T.eq(q, "", "jobs left running: " .. q)
end)

T.test("a candidate that crashes its srun worker is RUNTIME_ERROR; the next passes", function()
  local text, c = khlua("eval", "--task", RT, "--solution", "rt_fault_segfault", "--no-timing",
    "--workloads", "1", "--launch", "srun", "--no-store", "--json", "--deadline", "60")
  T.eq(c, 1, text)
  local tr = traces(text)
  T.eq(#tr, 1, text)
  T.eq(tr[1].evaluation.status, "RUNTIME_ERROR", text)
  text, c = khlua("eval", "--task", RT, "--solution", "rt_honest_double", "--no-timing",
    "--workloads", "1", "--launch", "srun", "--no-store", "--json")
  T.eq(c, 0, text)
  T.eq(traces(text)[1].evaluation.status, "PASSED")
end)

T.test("a candidate that hangs behind srun is a TIMEOUT and its job step is cancelled", function()
  local t0 = os.time()
  local text, c = khlua("eval", "--task", RT, "--solution", "rt_fault_infinite_loop", "--no-timing",
    "--workloads", "1", "--launch", "srun", "--no-store", "--json", "--deadline", "3")
  T.eq(c, 1, text)
  local tr = traces(text)
  T.eq(#tr, 1, text)
  T.eq(tr[1].evaluation.status, "TIMEOUT", text)
  T.ok(os.time() - t0 < 30, "the timeout took too long")
  local q
  for _ = 1, 80 do
    q = sh("squeue -h -p kh")
    if q == "" then break end
    os.execute("sleep 0.1")
  end
  T.eq(q, "", "the hung step is still running: " .. q)
end)

T.test("--gpus all with srun outside an allocation says to give a count", function()
  local text, c = khlua("eval", "--task", HOST, "--solution", "host_rmsnorm_h1024_c_v1",
    "--launch", "srun", "--gpus", "all", "--no-store")
  T.eq(c, 1, text)
  T.match(text, "no allocation says how many GPUs")
end)

-- Last: the cluster goes, whatever the tests above did (the watchdog started
-- with it covers a test process that dies first).
T.test("the private cluster stops and leaves nothing running", function()
  local pids = {}
  for _, f in ipairs { "slurmctld.pid", "slurmd.pid", "munge/pid" } do
    local h = io.open(dir .. "/c/" .. f)
    if h then pids[#pids + 1] = h:read("n"); h:close() end
  end
  T.eq(#pids, 3)
  stop_cluster()
  for _, pid in ipairs(pids) do
    local h = io.open("/proc/" .. math.tointeger(pid) .. "/stat")
    local st = h and h:read("a") or ""
    if h then h:close() end
    T.ok(not st:match("^%d+ %b() [^Z]"), "daemon " .. pid .. " still running")
  end
end)
