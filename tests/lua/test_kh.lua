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

T.test("doctor: the Python references' interpreter and its torch ($KHLUA_PYTHON)", function()
  local dir = T.tmpdir()
  local function fake(name, body)
    local path = dir .. "/" .. name
    T.write(path, "#!/bin/sh\n" .. body .. "\n")
    os.execute("chmod +x " .. T.quote(path))
    return path
  end
  local function check(py)
    local out = T.khlua_env({ KHLUA_PYTHON = py }, "doctor", "--json")
    local r = kh.json.decode(out)
    for _, c in ipairs(r.checks) do
      if c.name == "python + torch" then return c, r.python end
    end
    error("no python + torch check in " .. out)
  end
  local v = tostring(math.random(100, 999))
  local c, p = check(fake("with_torch", "echo 3.12.1 2." .. v .. ".0 12.8"))
  T.eq(c.status, "ok")
  T.match(c.detail, "Python 3%.12%.1, torch 2%." .. v .. "%.0 %(CUDA 12%.8%)")
  T.eq(p.torch, "2." .. v .. ".0")
  T.eq(p.torch_cuda, "12.8")
  c, p = check(fake("no_torch", "echo 3.12.1 none ModuleNotFoundError"))
  T.eq(c.status, "warn")
  T.match(c.detail, "without torch %(ModuleNotFoundError%)")
  T.match(c.fix, "KHLUA_PYTHON")
  T.eq(p.torch, kh.json.null)
  c = check(fake("broken", "exit 3"))
  T.eq(c.status, "warn")
  T.match(c.detail, "did not answer %(exit 3%)")
  c, p = check(dir .. "/nope")
  T.eq(c.status, "missing")
  T.match(c.detail, "/nope: not found")
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("monotonic clock and sleep", function()
  local t0 = kh.time.now()
  T.ok(kh.time.sleep(0.05))
  local dt = kh.time.now() - t0
  T.ok(dt >= 0.049 and dt < 2, "slept " .. dt)
  T.ok(math.abs(kh.time.wall() - os.time()) < 5)
end)
