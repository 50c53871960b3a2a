-- The kh module as a script sees it: versions, configuration, doctor, clocks.
local T = require "testlib"
local kh = require "kh"

T.test("require returns the same module", function()
  T.ok(require "kh" == kh)
end)

T.test("version names every library", function()
  for _, k in ipairs({ "khlua", "lua", "lmdb", "curl", "jansson" }) do
    T.eq(type(kh.version[k]), "string", k)
  end
  T.match(kh.version.lua, "^Lua 5%.4")
  T.ok(kh.version.nvrtc == false or kh.version.nvrtc:match("^%d+%.%d+$"))
end)

T.test("the store path follows KHLUA_STORE and --store", function()
  local out, code = T.khlua("-e", "print(require('kh').config.store)")
  T.eq(code, 0)
  T.eq(out, (os.getenv("KHLUA_STORE") or ".khlua/store") .. "\n")
  out, code = T.khlua("--store", "/tmp/somewhere", "-e", "print(require('kh').config.store)")
  T.eq(code, 0)
  T.eq(out, "/tmp/somewhere\n")
end)

T.test("doctor reports checks and GPUs as tables", function()
  local r = kh.doctor()
  T.ok(#r.checks >= 10)
  local names = {}
  for _, c in ipairs(r.checks) do
    names[c.name] = c.status
    T.ok(c.status == "ok" or c.status == "missing" or c.status == "warn", c.name)
  end
  T.ok(names["cuda driver"])
  T.ok(names["nvrtc"])
  T.eq(type(r.gpus), "table")
  T.eq(names["cuda driver"] == "ok", #r.gpus > 0)
end)

T.test("monotonic clock and sleep", function()
  local t0 = kh.time.now()
  T.ok(kh.time.sleep(0.05))
  local dt = kh.time.now() - t0
  T.ok(dt >= 0.049 and dt < 2, "slept " .. dt)
  T.ok(math.abs(kh.time.wall() - os.time()) < 5)
end)
