-- test_progress.lua: the progress line of a long run (lib/progress.lua, drawn
-- by lib/controller.lua, switched on by lib/cli.lua).  With a fake clock:
-- what the line says and its ETA.  Through a pseudo-terminal (`script` from
-- util-linux, else python3's pty module): a policy run shows it on stderr;
-- through a pipe, and with --json on a terminal, none of it.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
package.path = SRC .. "/policies/?.lua;" .. package.path
local progress = require "lib.progress"

local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local LADDER = SRC .. "/tests/fixtures/replay/ctl"
local FAKE = SRC .. "/tests/lua/lib/fake_eval.lua"
local BIN = os.getenv("KHLUA_BIN") or arg[-1]

local function sink()
  local s = { text = "" }
  function s:write(...) for _, x in ipairs({ ... }) do self.text = self.text .. x end end
  function s:flush() end
  return s
end

T.test("the line: round i/N, candidates, best speedup, phase, ETA from the rounds' pace", function()
  local t = 100.0
  local out = sink()
  local total = math.random(6, 20)
  local pg = progress.new { total = total, stream = out, now = function() return t end }
  pg:update { candidates = 0, phase = "measuring the seed" }
  T.match(out.text, "\r\27%[Kround 1/" .. total .. " | candidates 0 | measuring the seed | ETA %-%-$")
  local per = math.random(3, 9)
  t = t + 2 * per
  local best = 1 + math.random(1, 900) / 1000
  pg:update { done = 2, candidates = 3, best = best }
  local want_eta = per * (total - 2)
  local line = pg:line()
  T.eq(pg:eta(), want_eta)
  T.match(line, "^round 3/" .. total .. " | candidates 3 | best speedup " .. string.format("%.3f", best):gsub("%.", "%%.") .. "x | ETA ")
  T.ok(line:find("ETA " .. (want_eta >= 60 and string.format("%dm%02ds", want_eta // 60, want_eta % 60)
    or string.format("%ds", want_eta)), 1, true), line)
  -- a log line clears the progress line first and draws it again after
  out.text = ""
  pg:around(function() out:write("LOG\n") end)
  T.eq(out.text, "\r\27[KLOG\n\r\27[K" .. line)
  pg:finish()
  T.eq(out.text:sub(-4), "\r\27[K")
  -- a wall budget caps the ETA; a resumed run counts only the rounds it ran
  local pg2 = progress.new { total = 10, done = 4, wall_budget_s = 50, elapsed_s = 20, stream = sink(),
    now = function() return t end }
  T.eq(pg2:eta(), nil, "no round ended yet")
  t = t + 10
  pg2:update { done = 5 }
  T.eq(pg2:eta(), 20, "50 s budget - 20 s before - 10 s now; the pace alone says 50")
end)

T.test("kh.isatty: false for a pipe, raises on misuse", function()
  T.eq(kh.isatty(io.stdout), false)
  local p = assert(io.popen("true"))
  T.eq(kh.isatty(p), false)
  p:close()
  T.raises(function() kh.isatty(p) end, "closed file")
  T.raises(function() kh.isatty("stderr") end)
  T.eq(kh.isatty(12345), false)
end)

-- Run a shell command under a pseudo-terminal; returns its output, or nil
-- when this machine has no way to make one.
local function in_tty(cmd)
  local runner
  if os.execute("command -v script >/dev/null 2>&1") then
    runner = "script -qec " .. T.quote(cmd) .. " /dev/null"
  elseif os.execute("command -v python3 >/dev/null 2>&1") then
    runner = "python3 -c 'import pty, sys; pty.spawn(sys.argv[1:])' sh -c " .. T.quote(cmd)
  else
    return nil
  end
  local p = assert(io.popen(runner .. " </dev/null 2>&1"))
  local out = p:read("a")
  p:close()
  return out
end

local function policy_cmd(store, rounds, ...)
  local parts = { T.quote(BIN), "--store", T.quote(store), T.quote(SRC .. "/policies/agent_assisted.lua"),
    "--task", T.quote(TASK), "--model", T.quote("replay:" .. LADDER .. "/a"), "--rounds", tostring(rounds),
    "--fake-evaluator", T.quote(FAKE) }
  for _, a in ipairs({ ... }) do parts[#parts + 1] = T.quote(a) end
  return table.concat(parts, " ")
end

T.test("on a terminal a run shows its progress; through a pipe or with --json, none", function()
  local probe = in_tty(T.quote(BIN) .. " " .. T.quote(SRC .. "/tests/lua/lib/isatty_probe.lua"))
  if not probe then T.skip("neither script nor python3 to make a pseudo-terminal") end
  T.match(probe, "stderr tty: true", "kh.isatty sees the terminal")
  local dir = T.tmpdir()
  local rounds = math.random(2, 4)
  local out = in_tty(policy_cmd(dir .. "/a", rounds))
  T.match(out, "\r\27%[Kround 1/" .. rounds .. " | candidates 0 |", "the first round")
  T.match(out, "measuring the seed")
  T.match(out, "gate: paired comparison")
  T.match(out, "\r\27%[Kround " .. rounds .. "/" .. rounds .. " | candidates %d+ | best speedup [%d.]+x | ETA ")
  -- the last progress line counts what the summary line reports
  local cands = tonumber(out:match("run run%-%S+ done %(rounds%): %d+ rounds, (%d+) candidates"))
  T.ok(cands, out)
  local last
  for c in out:gmatch("\27%[Kround " .. rounds .. "/" .. rounds .. " | candidates (%d+)") do last = tonumber(c) end
  T.eq(last, cands)
  -- the round log lines are whole: none starts in the middle of a progress line
  T.match(out, "\r\27%[Kround 1  replay:")
  -- --json on a terminal: nothing of it
  local js = in_tty(policy_cmd(dir .. "/b", rounds, "--json"))
  T.ok(not js:find("\27[K", 1, true) and not js:find("ETA", 1, true), js)
  T.match(js, '"stop_reason":"rounds"')
  -- through a pipe: nothing of it
  local piped, code = T.khlua("--store", dir .. "/c", SRC .. "/policies/agent_assisted.lua", "--task", TASK,
    "--model", "replay:" .. LADDER .. "/a", "--rounds", tostring(rounds), "--fake-evaluator", FAKE)
  T.eq(code, 0, piped)
  T.ok(not piped:find("\27[K", 1, true) and not piped:find("ETA", 1, true), piped)
  T.match(piped, "round 1  replay:")
end)

T.test("with the real evaluator the line counts the workloads of each step", function()
  local probe = in_tty(T.quote(BIN) .. " " .. T.quote(SRC .. "/tests/lua/lib/isatty_probe.lua"))
  if not probe then T.skip("neither script nor python3 to make a pseudo-terminal") end
  local dir = T.tmpdir()
  local cmd = table.concat({ T.quote(BIN), "--store", T.quote(dir .. "/s"),
    T.quote(SRC .. "/policies/agent_assisted.lua"), "--task", T.quote(TASK), "--model",
    T.quote("replay:" .. LADDER .. "/a"), "--rounds", "1" }, " ")
  local out = in_tty(cmd)
  -- the seed is measured on the task's 3 workloads: 1/3, 2/3, 3/3
  for k = 1, 3 do
    T.match(out, "\27%[Kround 1/1 | candidates 0 | measuring the seed " .. k .. "/3 | ETA ")
  end
  T.match(out, "run run%-%S+ done")
end)

T.test("khlua eval on a terminal: workloads done, verdicts, ETA; none with --json or a pipe",
       function()
  local probe = in_tty(T.quote(BIN) .. " " .. T.quote(SRC .. "/tests/lua/lib/isatty_probe.lua"))
  if not probe then T.skip("neither script nor python3 to make a pseudo-terminal") end
  local RT = SRC .. "/tests/redteam/host/rmsnorm"
  local function cmd(...)
    local parts = { T.quote(BIN), "eval", "--task", T.quote(RT), "--no-store", "--no-timing" }
    for _, a in ipairs({ ... }) do parts[#parts + 1] = T.quote(a) end
    return table.concat(parts, " ")
  end
  local out = in_tty(cmd("--solution", "rt_input_mutation"))
  local n = tonumber(out:match("workloads %d+/(%d+)"))
  T.ok(n and n >= 1, out)
  T.match(out, "\r\27%[Kworkloads 1/" .. n .. " | ")
  T.match(out, "\r\27%[Kworkloads " .. n .. "/" .. n .. " | 0 PASSED, " .. n .. " not | %d+s | ETA 0s")
  -- the table follows on a clean line
  T.match(out, "\r\27%[Kworkload%s+status")
  local js = in_tty(cmd("--solution", "rt_input_mutation", "--json"))
  T.ok(not js:find("\27[K", 1, true) and not js:find("ETA", 1, true), js)
  local piped = T.khlua("eval", "--task", RT, "--no-store", "--no-timing", "--solution",
                        "rt_input_mutation")
  T.ok(not piped:find("\27[K", 1, true) and not piped:find("ETA", 1, true), piped)
  T.match(piped, "RUNTIME_ERROR%s+inputs_unchanged")
end)
