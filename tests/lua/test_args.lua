-- Every kh function, called with wrong argument types, raises a Lua error or
-- returns nil, msg, code: never a crash or a C assertion (the test build runs
-- under AddressSanitizer and UndefinedBehaviorSanitizer, so a bad memory access
-- fails the test).  New modules are covered automatically.
local T = require "testlib"
local kh = require "kh"

-- Functions that must not be called blindly: they would block or do real
-- work on well-typed defaults.  Their argument checks are tested elsewhere.
-- kh.mkdir would make folders named by the bad arguments here; test_report_live
-- tests it.
local SKIP = { ["kh.doctor"] = true, ["kh.time.sleep"] = true, ["kh.mkdir"] = true }

local bad = {
  { }, { nil }, { 42 }, { -1 }, { 1e308 }, { 0 / 0 }, { "x" }, { "" }, { true },
  { {} }, { { 1, 2 } }, { { a = { b = {} } } }, { function() end }, { io.stdout },
  { coroutine.create(function() end) }, { "x", "y", "z" }, { {}, {}, {} },
  { 1, "x", {} }, { math.huge }, { -math.huge }, { math.mininteger },
  { string.rep("A", 100000) }, { "\0\255\254" },
}

local function collect(t, prefix, out, seen)
  seen = seen or {}
  if seen[t] then return out end
  seen[t] = true
  for k, v in pairs(t) do
    local name = prefix .. "." .. tostring(k)
    if type(v) == "function" then
      out[#out + 1] = { name = name, fn = v }
    elseif type(v) == "table" then
      collect(v, name, out, seen)
    end
  end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

T.test("the kh API has functions to check", function()
  local fns = collect(kh, "kh", {})
  T.ok(#fns >= 8, "expected at least 8 functions, found " .. #fns)
end)

T.test("wrong argument types never crash", function()
  local checked = 0
  for _, f in ipairs(collect(kh, "kh", {})) do
    if not SKIP[f.name] then
      for _, args in ipairs(bad) do
        local ok, err = pcall(f.fn, table.unpack(args, 1, 3))
        if not ok then
          T.ok(type(err) == "string", f.name .. " raised a non-string error")
        end
        checked = checked + 1
      end
    end
  end
  T.ok(checked > 100)
end)

T.test("argument errors name the function and the argument", function()
  local e = T.raises(function() kh.json.decode({}) end)
  T.match(e, "bad argument #1 to 'decode'")
  e = T.raises(function() kh.time.sleep("soon") end)
  T.match(e, "bad argument #1 to 'sleep'")
  e = T.raises(function() kh.time.sleep(-5) end)
  T.match(e, "seconds must be")
end)
