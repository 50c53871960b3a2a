-- kh.json: what a policy relies on when it reads and writes records.
local T = require "testlib"
local kh = require "kh"
local json = kh.json

T.test("integers stay integers, floats stay floats", function()
  local v = json.decode('{"big": 9007199254740993, "f": 3.0, "neg": -42}')
  T.eq(math.type(v.big), "integer")
  T.eq(v.big, 9007199254740993)
  T.eq(math.type(v.f), "float")
  T.eq(json.encode(v.big), "9007199254740993")
  T.eq(json.encode(3), "3")
  T.eq(math.type(json.decode(json.encode(2 ^ 53))), "float")
end)

T.test("empty objects and arrays survive a round trip", function()
  local v = json.decode('{"a": {}, "b": [], "c": [{}]}')
  T.eq(json.encode(v, { sort_keys = true }), '{"a":{},"b":[],"c":[{}]}')
  T.eq(json.encode({}), "[]")
  T.eq(json.encode(json.object()), "{}")
  T.eq(json.encode(json.array({})), "[]")
end)

T.test("null is a distinct sentinel", function()
  local v = json.decode('[1, null, 3]')
  T.eq(#v, 3)
  T.ok(v[2] == json.null)
  T.eq(json.encode({ a = json.null }), '{"a":null}')
end)

T.test("random nested values round trip exactly", function()
  math.randomseed(T.seed())
  local function gen(depth)
    local r = math.random(6)
    if depth > 3 or r == 1 then return math.random(-1e9, 1e9) end
    if r == 2 then return math.random() * 1e6 end
    if r == 3 then return tostring(math.random()) .. "\u{263A}\n\"" end
    if r == 4 then return math.random(2) == 1 end
    if r == 5 then
      local t = {}
      for i = 1, math.random(0, 4) do t[i] = gen(depth + 1) end
      return json.array(t)
    end
    local t = json.object()
    for i = 1, math.random(0, 4) do t["k" .. i .. "_" .. math.random(100)] = gen(depth + 1) end
    return t
  end
  for _ = 1, 200 do
    local v = gen(0)
    local s = json.encode(v, { sort_keys = true })
    T.eq(json.encode(json.decode(s), { sort_keys = true }), s)
    T.eq(json.decode(s), v)
  end
end)

T.test("malformed JSON gives nil, a position and EPARSE", function()
  local v, msg, code = json.decode('{"a": [1, 2,, 3]}')
  T.eq(v, nil)
  T.match(msg, "line 1 col %d+")
  T.eq(code, "EPARSE")
  v, msg, code = json.decode('{"truncated": ')
  T.eq(v, nil)
  T.eq(code, "EPARSE")
  v, msg, code = json.decode('"\xff\xfe"')
  T.eq(v, nil)
  T.eq(code, "EPARSE")
end)

T.test("values JSON cannot hold raise with a path", function()
  T.raises(function() json.encode({ a = { b = function() end } }) end, "at %$%.a%.b: a function")
  T.raises(function() json.encode({ x = 0 / 0 }) end, "cannot be written")
  T.raises(function() json.encode({ 1, 2, [10] = 3 }) end, "sparse array")
  T.raises(function() json.encode({ 1, a = 2 }) end, "mixes")
  T.raises(function() json.encode("\xff") end, "UTF%-8")
  local cyc = {}
  cyc.self = cyc
  T.raises(function() json.encode(cyc) end, "deeper than")
end)

T.test("indent and sort_keys options", function()
  T.eq(json.encode({ b = 1, a = 2 }, { sort_keys = true }), '{"a":2,"b":1}')
  T.match(json.encode({ a = { 1 } }, { indent = 2 }), '\n  "a": %[')
  T.raises(function() json.encode({}, { indent = -1 }) end, "indent")
end)
