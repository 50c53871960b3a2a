-- testlib.lua: a small TAP test library for khlua's Lua tests.
--   local T = require "testlib"
--   T.test("name", function() T.eq(1 + 1, 2) end)
-- Assertions raise; T.skip(reason) skips the current test, T.skip_all(reason)
-- the whole file (call it at top level, before any T.test runs).
local kh = require "kh"
local T = { tests = {} }

local SKIP = setmetatable({}, { __name = "skip" })

function T.test(name, fn)
  T.tests[#T.tests + 1] = { name = name, fn = fn }
end

function T.skip(reason) error({ [SKIP] = true, reason = reason }, 0) end
T.skip_all = T.skip
function T.is_skip(e) return type(e) == "table" and e[SKIP] == true end
function T.skip_reason(e) return e.reason or "" end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) ~= "table" then return tostring(v) end
  local ok, s = pcall(kh.json.encode, v, { sort_keys = true })
  return ok and s or tostring(v)
end

local function deep_eq(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in pairs(a) do if not deep_eq(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function fail(msg, level) error(msg, (level or 1) + 2) end

function T.ok(v, msg) if not v then fail(msg or "expected a true value, got " .. show(v)) end return v end
function T.eq(got, want, msg)
  if not deep_eq(got, want) then
    fail((msg and msg .. ": " or "") .. "expected " .. show(want) .. ", got " .. show(got))
  end
end
function T.ne(got, other, msg)
  if deep_eq(got, other) then fail((msg and msg .. ": " or "") .. "expected anything but " .. show(other)) end
end
function T.near(got, want, tol, msg)
  if type(got) ~= "number" or math.abs(got - want) > tol then
    fail((msg and msg .. ": " or "") .. string.format("expected %s within %s, got %s", want, tol, show(got)))
  end
end
function T.match(s, pattern, msg)
  if type(s) ~= "string" or not s:find(pattern) then
    fail((msg and msg .. ": " or "") .. "expected a string matching " .. show(pattern) .. ", got " .. show(s))
  end
end
-- fn must raise an error whose message matches pattern (if given).
function T.raises(fn, pattern, msg)
  local ok, e = pcall(fn)
  if ok then fail((msg and msg .. ": " or "") .. "expected an error, none was raised") end
  if pattern and not tostring(e):find(pattern) then
    fail((msg and msg .. ": " or "") .. "error " .. show(tostring(e)) .. " does not match " .. show(pattern))
  end
  return e
end

-- Run the khlua under test with a shell-quoted argument list; returns
-- output (stdout+stderr), exit code.
function T.quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
function T.khlua(...) return T.khlua_env({}, ...) end

-- The same with environment variables set for that run: env = {NAME = value}.
function T.khlua_env(env, ...)
  local bin = os.getenv("KHLUA_BIN") or arg[-1]
  local parts = {}
  for k, v in pairs(env) do parts[#parts + 1] = T.quote(k .. "=" .. v) end
  if #parts > 0 then table.insert(parts, 1, "env") end
  parts[#parts + 1] = T.quote(bin)
  for _, a in ipairs({ ... }) do parts[#parts + 1] = T.quote(a) end
  local p = assert(io.popen(table.concat(parts, " ") .. " 2>&1 </dev/null", "r"))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

-- The seed for a test file's math.random: fixed, so every run draws the same
-- base seeds and inputs and a failure reproduces; KH_TEST_SEED=N explores
-- others.  Printed as a TAP comment.
function T.seed()
  local s = tonumber(os.getenv("KH_TEST_SEED") or "") or 20261204
  io.write("# test seed ", s, " (KH_TEST_SEED)\n")
  return s
end

function T.tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local d = p:read("l")
  p:close()
  return d
end

function T.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

function T.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- Records as another writer left them (a store of an older khlua, a
-- hand-made one), brought into the store at path the way archived records
-- come in: `khlua store import` (the engine writes task, run, round,
-- llm_call, promotion, candidate and evaluation records; kh.store's generic
-- put refuses them).  Each record carries its own id where another names it;
-- the blobs they name must be in the store already (db:put_blob).
function T.import(path, records)
  local lines = {}
  for i, r in ipairs(records) do lines[i] = kh.json.encode { record = r } end
  local dir = T.tmpdir()
  local file = dir .. "/records.jsonl"
  T.write(file, table.concat(lines, "\n") .. "\n")
  local out, code = T.khlua("store", "import", file, "--store", path)
  if code ~= 0 then error("khlua store import: " .. out, 2) end
  os.remove(file)
  os.remove(dir)
end

function T.run()
  local passed, failed, skipped = 0, 0, 0
  print("1.." .. #T.tests)
  for i, t in ipairs(T.tests) do
    local before = kh.stats().live_objects
    local ok, e = xpcall(t.fn, function(m)
      if T.is_skip(m) then return m end
      return debug.traceback(tostring(m), 2)
    end)
    collectgarbage("collect")
    collectgarbage("collect")
    if ok then
      local after = kh.stats().live_objects
      if after ~= before then
        ok, e = false, string.format("leak: %d engine object(s) still open after the test",
          after - before)
      end
    end
    if ok then
      passed = passed + 1
      print(string.format("ok %d - %s", i, t.name))
    elseif T.is_skip(e) then
      skipped = skipped + 1
      print(string.format("ok %d - %s # SKIP %s", i, t.name, e.reason or ""))
    else
      failed = failed + 1
      print(string.format("not ok %d - %s", i, t.name))
      for line in tostring(e):gmatch("[^\n]+") do print("#   " .. line) end
    end
  end
  print(string.format("%d passed, %d failed, %d skipped", passed, failed, skipped))
  if failed > 0 then return 1 end
  if passed == 0 and skipped > 0 then return 77 end
  return 0
end

return T
