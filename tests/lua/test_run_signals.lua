-- test_run_signals.lua: a run stops cleanly however it is stopped (issue 23,
-- "clean stops").  50 runs of plateau_switch (the deterministic fake
-- evaluator, a replay ladder) each get SIGINT, SIGTERM or SIGHUP at a moment
-- drawn from a fixed seed, from before the Lua state exists to the middle of
-- a round: none may be left marked `running`, and each exits 128 + the
-- signal (or 0 when it had finished).  A run killed with SIGKILL keeps
-- `running` but `khlua store ls` shows it dead (its liveness mark names a
-- process that is gone).  A run on a flat replay folder, stopped and
-- resumed, continues with the reply after the last one it used.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local BIN = os.getenv("KHLUA_BIN") or arg[-1]
local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local POLICY = SRC .. "/policies/plateau_switch.lua"
local LADDER = SRC .. "/tests/fixtures/replay/ctl/a"

-- Start a run in the background; returns a handle {pid, rcfile, log}.
local function start(store, extra)
  local dir = T.tmpdir()
  local h = { pidfile = dir .. "/pid", rcfile = dir .. "/rc", log = dir .. "/log" }
  local args = { T.quote(BIN), "--store", T.quote(store), T.quote(POLICY), "--task", T.quote(TASK),
    "--fake-evaluator", T.quote(FAKE), "--model", T.quote("replay:" .. LADDER), "--seed", "7" }
  for _, a in ipairs(extra or {}) do args[#args + 1] = T.quote(a) end
  local inner = table.concat(args, " ") .. " > " .. T.quote(h.log) .. " 2>&1 & echo $! > "
    .. T.quote(h.pidfile) .. "; wait $!; echo $? > " .. T.quote(h.rcfile)
  os.execute("sh -c " .. T.quote(inner) .. " >/dev/null 2>&1 &")
  local t0 = kh.time.now()
  while kh.time.now() - t0 < 10 do
    local f = io.open(h.pidfile)
    local pid = f and tonumber(f:read("l"))
    if f then f:close() end
    if pid then h.pid = pid; return h end
    kh.time.sleep(0.005)
  end
  error("the run did not start")
end

local function wait(h, limit)
  local t0 = kh.time.now()
  while kh.time.now() - t0 < (limit or 60) do
    local f = io.open(h.rcfile)
    local rc = f and tonumber(f:read("l"))
    if f then f:close() end
    if rc then return rc end
    kh.time.sleep(0.01)
  end
  error("the run did not end within " .. tostring(limit or 60) .. " s")
end

local function runs(store)
  local db = kh.store.open(store, { readonly = true })
  if not db then return {} end
  local out = db:query { type = "run" }
  db:close()
  return out
end

T.test("SIGINT, SIGTERM and SIGHUP at 50 random moments never leave a run marked running", function()
  math.randomseed(1923)
  local sigs = { { "INT", 2 }, { "TERM", 15 }, { "HUP", 1 } }
  local seen = { interrupted = 0, none = 0, done = 0 }
  for i = 1, 50 do
    local store = T.tmpdir() .. "/store"
    local sig = sigs[(i - 1) % 3 + 1]
    local delay = math.random() * 2.5
    local h = start(store, { "--rounds", "200", "--pace", "0.02" })
    kh.time.sleep(delay)
    os.execute("kill -" .. sig[1] .. " " .. h.pid .. " 2>/dev/null")
    local rc = wait(h)
    local rs = runs(store)
    local label = string.format("run %d: SIG%s after %.2f s", i, sig[1], delay)
    T.ok(rc == 128 + sig[2] or rc == 0, label .. ": exit " .. rc .. "\n" .. T.read(h.log))
    T.ok(#rs <= 1, label)
    if #rs == 0 then
      seen.none = seen.none + 1
    else
      T.ok(rs[1].status == "interrupted" or rs[1].status == "done", label .. ": the run is "
        .. tostring(rs[1].status) .. "\n" .. T.read(h.log))
      T.eq(rs[1].live, nil, label .. ": a stopped run keeps no liveness mark")
      seen[rs[1].status] = (seen[rs[1].status] or 0) + 1
    end
  end
  print(string.format("# %d interrupted, %d before the run record, %d done", seen.interrupted,
    seen.none, seen.done))
  T.ok(seen.interrupted >= 25, "most signals land during a run")
end)

T.test("a run killed with SIGKILL shows as dead", function()
  local store = T.tmpdir() .. "/store"
  local h = start(store, { "--rounds", "200", "--pace", "0.05" })
  local t0 = kh.time.now()
  local rs = {}
  while kh.time.now() - t0 < 30 do
    rs = runs(store)
    if #rs == 1 and (rs[1].rounds_done or 0) >= 1 then break end
    kh.time.sleep(0.05)
  end
  T.eq(#rs, 1)
  local out = T.khlua("--store", store, "store", "ls", "--type", "run")
  T.match(out, "run%-%w+ +run +running ")
  local live = T.khlua("--store", store, "store", "ls", "--type", "run", "--json")
  T.eq(kh.json.decode(live:match("%b[]"))[1].alive, true)
  os.execute("kill -KILL " .. h.pid)
  T.eq(wait(h), 137)
  T.eq(runs(store)[1].status, "running")
  out = T.khlua("--store", store, "store", "ls", "--type", "run")
  T.match(out, "run%-%w+ +run +dead ")
  live = T.khlua("--store", store, "store", "ls", "--type", "run", "--json")
  T.eq(kh.json.decode(live:match("%b[]"))[1].alive, false)
end)

T.test("a resumed run on a flat replay folder continues with the next reply", function()
  -- a flat folder of four replies, in name order (the ladder's steps)
  local flat = T.tmpdir()
  local n = 0
  for _, step in ipairs({ "01", "02", "03", "04" }) do
    local f = io.open(LADDER .. "/" .. step .. "/reply.json")
    if f then
      n = n + 1
      T.write(string.format("%s/r%d.json", flat, n), f:read("a"))
      f:close()
    end
  end
  T.ok(n >= 3, "the ladder has at least 3 steps")
  local store = T.tmpdir() .. "/store"
  local out, code = T.khlua("--store", store, POLICY, "--task", TASK, "--fake-evaluator", FAKE,
    "--model", "replay:" .. flat, "--rounds", "2", "--seed", "3")
  T.eq(code, 0, out)
  local run = runs(store)[1].id
  out, code = T.khlua("--store", store, POLICY, "--resume", run, "--rounds", tostring(n),
    "--fake-evaluator", FAKE)
  T.eq(code, 0, out)
  local db <close> = assert(kh.store.open(store, { readonly = true }))
  local calls = db:query { run = run, type = "llm_call" }
  table.sort(calls, function(a, b) return a.round_index < b.round_index end)
  T.eq(#calls, n)
  for i, c in ipairs(calls) do
    T.match(tostring(c.replay_file), "r" .. i .. "%.json$", "round " .. i)
  end
end)
