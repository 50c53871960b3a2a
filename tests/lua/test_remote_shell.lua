-- test_remote_shell.lua: workers on other hosts through a remote shell (the
-- "ssh" launch preset, issue 13), with a fake ssh that runs the command here
-- and logs the host it was asked for.  A real `khlua eval` of a host task
-- spreads its workloads over two "hosts", every verdict PASSED, each
-- worker got its environment as arguments; through a connection that breaks
-- at once, the request is lost as a crash and the evaluator recovers on a
-- fresh connection; misuse (ssh without hosts, an unknown preset) is a
-- usage error naming the problem.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local HOST = SRC .. "/kernels/host_rmsnorm"
local SOL = "host_rmsnorm_h1024_c_v1"
math.randomseed(T.seed())

local dir = T.tmpdir()
local LOG = dir .. "/ssh.log"
os.execute("mkdir -p " .. T.quote(dir .. "/bin"))
-- ssh [-T] [-o OPT]... HOST COMMAND...
local PROLOG = "#!/bin/sh\n"
  .. "while [ $# -gt 0 ]; do case \"$1\" in -T) shift;; -o) shift 2;; *) break;; esac; done\n"
  .. "host=$1; shift\necho \"$host $*\" >> " .. T.quote(LOG) .. "\n"
T.write(dir .. "/bin/ssh", PROLOG .. "exec \"$@\"\n")
-- the first connection breaks as soon as it is made (the worker keeps
-- running, orphaned, until the supervisor kills its process group); later
-- ones work
T.write(dir .. "/bin/ssh-flaky", PROLOG
  .. "if mkdir " .. T.quote(dir .. "/broke") .. " 2>/dev/null; then\n"
  .. "  exec 3<&0; \"$@\" <&3 & exit 255\nfi\nexec \"$@\"\n")
os.execute("chmod +x " .. T.quote(dir .. "/bin/ssh") .. " " .. T.quote(dir .. "/bin/ssh-flaky"))

local function khlua(...)
  local parts = { "PATH=" .. T.quote(dir .. "/bin") .. ":\"$PATH\"",
    T.quote(os.getenv("KHLUA_BIN") or arg[-1]) }
  for _, a in ipairs({ ... }) do parts[#parts + 1] = T.quote(a) end
  local p = assert(io.popen(table.concat(parts, " ") .. " </dev/null 2>&1"))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

local function traces(text)
  local r = {}
  for line in text:gmatch("[^\n]+") do
    if line:sub(1, 1) == "{" then r[#r + 1] = kh.json.decode(line) end
  end
  return r
end

T.test("khlua eval --launch ssh --hosts alpha,beta: workloads spread over both, all PASSED", function()
  os.remove(LOG)
  local text, code = khlua("eval", "--task", HOST, "--solution", SOL, "--no-timing", "--seed",
    tostring(math.random(1, 1 << 40)), "--launch", "ssh", "--hosts", "alpha,beta", "--no-store",
    "--json")
  T.eq(code, 0, text)
  local tr = traces(text)
  T.eq(#tr, 7, text)
  local targets = {}
  for _, t in ipairs(tr) do
    T.eq(t.evaluation.status, "PASSED", tostring(t.evaluation.khlua.detail))
    local pl = t.evaluation.khlua.placement
    T.eq(pl.launch, "ssh")
    targets[pl.target] = (targets[pl.target] or 0) + 1
  end
  T.ok(targets.alpha and targets.beta, "both hosts ran workloads")
  local log = T.read(LOG)
  -- one connection per worker, the environment passed as arguments
  T.match(log, "alpha env KHLUA_HOST_AS_BYTES=%d+ .*KHLUA_WIRE_NEWLINE=1 %S+ worker %-%-role host")
  T.match(log, "beta env KHLUA_HOST_AS_BYTES=%d+")
end)

T.test("a connection that breaks is a lost worker; the evaluator recovers on a new one", function()
  os.remove(dir .. "/broke")
  local tpl = dir .. "/bin/ssh-flaky {host} env {env} {exe} worker --role {role}"
  local o = { workloads = 1, timing = false, record = false, launch = tpl, hosts = { "gamma" } }
  local tr, msg = kh.eval(HOST, SOL, o)
  -- the first request (the reference's outputs) went down with the connection
  T.eq(tr, nil)
  T.match(msg, "the connection to the worker was lost")
  T.match(msg, "exited with code 255")
  tr = assert(kh.eval(HOST, SOL, o))
  T.eq(tr[1].evaluation.status, "PASSED", tostring(tr[1].evaluation.khlua.detail))
  T.eq(tr[1].evaluation.khlua.placement.target, "gamma")
  T.eq(tr[1].evaluation.khlua.placement.launch, "template")
end)

T.test("misuse of the placement options is a usage error naming it", function()
  local text, code = khlua("eval", "--task", HOST, "--solution", SOL, "--launch", "ssh", "--no-store")
  T.eq(code, 1, text)
  T.match(text, "needs hosts")
  text, code = khlua("eval", "--task", HOST, "--solution", SOL, "--launch", "pbs", "--no-store")
  T.eq(code, 1, text)
  T.match(text, "neither a preset")
  text, code = khlua("eval", "--task", HOST, "--solution", SOL, "--workers-per-gpu", "0")
  T.eq(code, 2, text)
  T.raises(function() kh.eval(HOST, SOL, { hosts = true }) end, "opts.hosts")
  T.raises(function() kh.eval(HOST, SOL, { gpus = { 0, {} } }) end, "opts.gpus%[2%]")
  T.raises(function() kh.eval(HOST, SOL, { launch = 1 }) end, "opts.launch")
  T.raises(function() kh.eval(HOST, SOL, { workers_per_gpu = -1 }) end, "workers_per_gpu")
end)

T.test("cleanup", function()
  os.execute("rm -rf " .. T.quote(dir))
end)
