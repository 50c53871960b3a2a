-- test_tensor.lua: kh.tensor and kh.check from Lua: tensors from tables and
-- from the seeded generator, dtype conversions, safetensors round trips and
-- refusals, and comparison verdicts.
local kh = require "kh"
local T = require "testlib"

local seed = T.seed()

T.test("dtypes and conversions", function()
  T.eq(#kh.tensor.dtypes(), 11)
  local i = kh.tensor.dtype("float8_e4m3fn")
  T.eq(i.bits, 8); T.eq(i.safetensors, "F8_E4M3"); T.eq(i.float, true)
  T.eq(kh.tensor.dtype("int16").int, true)
  T.raises(function() kh.tensor.dtype("float64") end, "unknown dtype \"float64\"")
  -- e4m3fn: 464 ties to 448, above it NaN (no saturation); bf16 RNE
  T.eq(kh.tensor.encode("float8_e4m3fn", 464), 0x7E)
  T.eq(kh.tensor.encode("float8_e4m3fn", 470), 0x7F)
  T.ok(kh.tensor.decode("float8_e4m3fn", 0x7F) ~= kh.tensor.decode("float8_e4m3fn", 0x7F))
  T.eq(kh.tensor.decode("bfloat16", kh.tensor.encode("bfloat16", 1 + 2^-8)), 1.0)
  T.eq(kh.tensor.decode("bfloat16", kh.tensor.encode("bfloat16", 1 + 3 * 2^-8)), 1 + 2^-6)
end)

T.test("tensor from a table, element access", function()
  local vals = {}
  for k = 1, 6 do vals[k] = (k - 3) * 0.5 end
  local t = kh.tensor.new("float16", { 2, 3 }, vals)
  T.eq(t:dtype(), "float16"); T.eq(t:shape(), { 2, 3 }); T.eq(#t, 6); T.eq(t:nbytes(), 12)
  T.eq(t:totable(), vals)
  t:set(6, 65520) -- rounds to inf in float16
  T.eq(t:get(6), math.huge)
  T.eq(t:code(6), 0x7C00)
  T.match(tostring(t), "kh.Tensor%(float16, %[2, 3%]%)")
  local i64 = kh.tensor.new("int64", { 2 }, { math.maxinteger, -7 })
  T.eq(i64:totable(), { math.maxinteger, -7 })
  local b = kh.tensor.new("bool", { 3 }, { true, false, 2 })
  T.eq(b:totable(), { true, false, true })
  local f4 = kh.tensor.new("float4_e2m1", { 3 }, { 0.5, -6, 9 })
  T.eq(f4:nbytes(), 2); T.eq(f4:totable(), { 0.5, -6, 6 })
  T.raises(function() t:get(7) end, "out of range")
  T.raises(function() kh.tensor.new("float32", { 2 }, { 1 }) end, "1 values for 2 elements")
  T.raises(function() kh.tensor.new("float32", { 2 }, { 1, "x" }) end, "not a number")
  T.raises(function() kh.tensor.new("float32", { -1 }) end, "non%-negative")
  t:close(); t:close()
  T.raises(function() t:get(1) end, "closed")
end)

T.test("seeded generator: deterministic, FlashInfer-Bench ranges", function()
  local a = kh.tensor.random("bfloat16", { 64, 33 }, seed, 1)
  local b = kh.tensor.random("bfloat16", { 64, 33 }, seed, 1)
  local c = kh.tensor.random("bfloat16", { 64, 33 }, seed, 2)
  T.eq(a:bytes(), b:bytes())
  T.ne(a:bytes(), c:bytes())
  local s, s2 = 0, 0
  for _, v in ipairs(a:totable()) do s = s + v; s2 = s2 + v * v end
  local n = #a
  T.near(s / n, 0, 0.1); T.near(math.sqrt(s2 / n), 1, 0.06)
  local f8 = kh.tensor.random("float8_e4m3fn", { 4096 }, seed)
  local lo, hi = 0, 0
  for _, v in ipairs(f8:totable()) do lo = math.min(lo, v); hi = math.max(hi, v) end
  T.eq(lo, -2.0); T.eq(hi, 2.0)
  local i8 = kh.tensor.random("int8", { 4096 }, seed)
  local ilo, ihi = 0, 0
  for _, v in ipairs(i8:totable()) do
    T.eq(math.type(v), "integer"); ilo = math.min(ilo, v); ihi = math.max(ihi, v)
  end
  T.ok(ilo >= -128 and ihi <= 127 and ilo < -120 and ihi > 120)
  local i32 = kh.tensor.random("int32", { 4096 }, seed)
  for _, v in ipairs(i32:totable()) do T.ok(v >= -1024 and v < 1024) end
  local sc = kh.tensor.random("float32", {}, seed, 9)
  T.eq(#sc, 1)
  local kc = kh.tensor.dsa_kcache({ 3, 4, 1, 12 }, seed, 2)
  T.eq(kc:dtype(), "int8"); T.eq(kc:nbytes(), 3 * 4 * 12)
  T.eq(kc:bytes(), kh.tensor.dsa_kcache({ 3, 4, 1, 12 }, seed, 2):bytes())
  T.raises(function() kh.tensor.dsa_kcache({ 3, 4, 12 }, seed) end, "page_size")
end)

T.test("safetensors round trip and refusals", function()
  local dir = T.tmpdir()
  local path = dir .. "/x.safetensors"
  local ins = {
    q = kh.tensor.random("bfloat16", { 3, 5 }, seed, 1),
    idx = kh.tensor.random("int32", { 7 }, seed, 2),
    w = kh.tensor.random("float8_e5m2", { 2, 2, 2 }, seed, 3),
  }
  T.eq(kh.tensor.save(path, ins, { seed = tostring(seed) }), true)
  local got, meta = kh.tensor.load(path)
  T.eq(meta.seed, tostring(seed))
  -- the recipe of each generated input is recorded beside it
  T.eq(meta["khlua.seed.q"], string.format("%d 1 random", seed))
  T.eq(meta["khlua.seed.idx"], string.format("%d 2 random", seed))
  local s1, s2, how = ins.w:seed()
  T.eq({ s1, s2, how }, { seed, 3, "random" })
  T.eq(got.q:seed(), nil)
  for name, t in pairs(ins) do
    T.eq(got[name]:dtype(), t:dtype()); T.eq(got[name]:shape(), t:shape())
    T.eq(got[name]:bytes(), t:bytes(), name)
  end
  local one = kh.tensor.load(path, "idx")
  T.eq(one:totable(), ins.idx:totable())
  local t, msg, code = kh.tensor.load(path, "nope")
  T.eq(t, nil); T.eq(code, "ENOTFOUND"); T.match(msg, "'nope'")
  t, msg, code = kh.tensor.load(dir .. "/missing.safetensors")
  T.eq(code, "ENOTFOUND")
  -- a truncated copy is refused with the reason
  local bytes = T.read(path)
  T.write(dir .. "/cut.safetensors", bytes:sub(1, #bytes - 3))
  t, msg, code = kh.tensor.load(dir .. "/cut.safetensors")
  T.eq(code, "EINVAL"); T.match(msg, "past the")
  T.raises(function() kh.tensor.save(path, { a = 1 }) end, "kh.Tensor")
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("check.compare: statuses in FlashInfer-Bench's order", function()
  local ref = kh.tensor.random("float32", { 16, 8 }, seed, 4)
  local out = kh.tensor.new("float32", { 16, 8 }, ref:totable())
  local v = kh.check.compare(out, ref)
  T.eq(v.status, "PASSED"); T.eq(v.passed, true); T.eq(v.matched_ratio, 1.0)
  T.eq(v.max_abs_error, 0.0); T.eq(v.max_ulp_error, 0)
  T.eq(kh.check.compare(kh.tensor.new("float32", { 8, 16 }), ref).status, "INCORRECT_SHAPE")
  T.eq(kh.check.compare(kh.tensor.new("float16", { 16, 8 }), ref).status, "INCORRECT_DTYPE")
  out:set(5, 0 / 0)
  v = kh.check.compare(out, ref)
  T.eq(v.status, "INCORRECT_NUMERICAL"); T.match(v.reason, "NaN"); T.eq(v.final, true)
  out:set(5, ref:get(5) + 0.5)
  v = kh.check.compare(out, ref)
  T.eq(v.status, "INCORRECT_NUMERICAL"); T.eq(v.fails, 1); T.eq(v.first_fail_element, 4)
  T.eq(v.final, false)
  T.near(v.max_abs_error, 0.5, 1e-6)
  -- one failing element of 128 passes a 0.99 ratio, not a 0.995 one
  T.eq(kh.check.compare(out, ref, { required_ratio = 0.99 }).status, "PASSED")
  T.eq(kh.check.compare(out, ref, { required_ratio = 0.995 }).status, "INCORRECT_NUMERICAL")
  -- loose tolerances pass it (the AND rule: abs within atol is enough)
  T.eq(kh.check.compare(out, ref, { atol = 0.6 }).status, "PASSED")
  T.eq(kh.check.compare(out, ref, { atol = 0, rtol = 1e9 }).status, "PASSED")
  T.raises(function() kh.check.compare(out, ref, { atol = "x" }) end, "atol must be a number")
  T.raises(function() kh.check.compare(out, ref, { precision = "single" }) end, "precision")
  T.raises(function() kh.check.compare(out, 3) end, "kh.Tensor")
  local name, opts = kh.check.evaluator("moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048")
  T.eq(name, "lowbit"); T.eq(opts.required_ratio, 0.95)
end)

T.test("check.dsa_topk: order-free, duplicates refused", function()
  local B, H, D, PS, P = 1, 2, 4, 4, 4
  local q = kh.tensor.random("float8_e4m3fn", { B, H, D }, seed, 5)
  local kc = kh.tensor.new("int8", { P, PS, 1, D + 4 })
  -- fp8 data 0x38 (= 1.0) everywhere, scale 1.0f (0x3F800000) per token
  for p = 0, P - 1 do
    for k = 1, PS * D do kc:set(p * PS * (D + 4) + k, 0x38) end
    for o = 0, PS - 1 do
      local base = p * PS * (D + 4) + PS * D + o * 4
      kc:set(base + 3, 0x80 - 256); kc:set(base + 4, 0x3F)
    end
  end
  local w = kh.tensor.new("float32", { B, H }, { 1, 1 })
  local sl = kh.tensor.new("int32", { B }, { 8 })
  local bt = kh.tensor.new("int32", { B, 2 }, { 2, 0 })
  local inputs = { q = q, k_cache = kc, weights = w, seq_lens = sl, block_table = bt }
  local ref = kh.tensor.new("int32", { B, 3 }, { 8, 9, 1 })
  local sol = kh.tensor.new("int32", { B, 3 }, { 1, 8, 9 })
  T.eq(kh.check.dsa_topk(sol, ref, inputs).status, "PASSED")
  local dup = kh.tensor.new("int32", { B, 3 }, { 1, 1, 9 })
  local v = kh.check.dsa_topk(dup, ref, inputs)
  T.eq(v.status, "INCORRECT_NUMERICAL"); T.match(v.reason, "duplicate index 1")
  local far = kh.tensor.new("int32", { B, 3 }, { 1, 8, 13 }) -- page 3 not in the table
  T.match(kh.check.dsa_topk(far, ref, inputs).reason, "block_table")
  inputs.weights = nil
  T.raises(function() kh.check.dsa_topk(sol, ref, inputs) end, "inputs.weights is required")
end)
