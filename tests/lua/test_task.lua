-- test_task.lua: kh.task and `khlua task check`: the real FlashInfer-Bench copy
-- passes; broken copies (of the real data where it is here, of the rmsnorm
-- fixture package otherwise) get their precise `file:line: field: message`.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local DATA = SRC .. "/../shared/data/flashinfer-trace"
local FIX = SRC .. "/tests/fixtures/task/rmsnorm"
local have_data = io.open(DATA .. "/README.md", "r")
if have_data then have_data:close() end

math.randomseed(T.seed())

local function need_data()
  if not have_data then T.skip(DATA .. " absent (the shared FlashInfer-Bench copy)") end
end

local function mkdirs(path) assert(os.execute("mkdir -p " .. T.quote(path))) end

local function lines_of(text)
  local t = {}
  for l in text:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

-- A string.gsub that must replace exactly once (plain text).
local function sub1(text, from, to)
  local i, j = text:find(from, 1, true)
  assert(i, "fixture text lacks " .. from)
  return text:sub(1, i - 1) .. to .. text:sub(j + 1)
end

-- out must hold this exact line (or a line starting with it).
local function has_line(out, want)
  for _, l in ipairs(lines_of(out)) do
    if l:sub(1, #want) == want then return end
  end
  error("no output line starting with:\n  " .. want .. "\noutput was:\n" .. out, 2)
end

-- A dataset holding the fixture package's files, in FlashInfer-Bench's layout.
local function fixture_dataset()
  local root = T.tmpdir()
  mkdirs(root .. "/definitions/rmsnorm")
  mkdirs(root .. "/workloads/rmsnorm")
  mkdirs(root .. "/solutions/khlua/rmsnorm/rmsnorm_h512")
  T.write(root .. "/definitions/rmsnorm/rmsnorm_h512.json", T.read(FIX .. "/definition.json"))
  T.write(root .. "/workloads/rmsnorm/rmsnorm_h512.jsonl", T.read(FIX .. "/workloads.jsonl"))
  for _, s in ipairs({ "rmsnorm_h512_cuda_v1", "rmsnorm_h512_ref_c" }) do
    T.write(root .. "/solutions/khlua/rmsnorm/rmsnorm_h512/" .. s .. ".json",
      T.read(FIX .. "/solutions/" .. s .. ".json"))
  end
  return root
end

-- A dataset with one real definition and its workloads.
local function real_copy(op, def)
  local root = T.tmpdir()
  mkdirs(root .. "/definitions/" .. op)
  mkdirs(root .. "/workloads/" .. op)
  local d = "/definitions/" .. op .. "/" .. def .. ".json"
  local w = "/workloads/" .. op .. "/" .. def .. ".jsonl"
  T.write(root .. d, T.read(DATA .. d))
  T.write(root .. w, T.read(DATA .. w))
  return root, root .. d, root .. w
end

local function rm(dir) os.execute("rm -rf " .. T.quote(dir)) end

-- safetensors file: tensors = { {key, dtype, shape}, ... } with random bytes.
local ST_BYTES = { F32 = 4, I32 = 4, BF16 = 2 }
local function write_safetensors(path, tensors)
  local hdr, off, order = {}, 0, {}
  for _, t in ipairs(tensors) do
    local n = ST_BYTES[t[2]]
    for _, dim in ipairs(t[3]) do n = n * dim end
    hdr[t[1]] = { dtype = t[2], shape = t[3], data_offsets = { off, off + n } }
    off = off + n
    order[#order + 1] = t[1]
  end
  local h = kh.json.encode(hdr)
  local bytes = {}
  for _, t in ipairs(tensors) do
    if t[4] then -- explicit int32 values
      for _, x in ipairs(t[4]) do bytes[#bytes + 1] = string.pack("<i4", x) end
    else
      local n = hdr[t[1]].data_offsets[2] - hdr[t[1]].data_offsets[1]
      for _ = 1, n do bytes[#bytes + 1] = string.char(math.random(0, 255)) end
    end
  end
  T.write(path, string.pack("<I8", #h) .. h .. table.concat(bytes))
end

---------------------------------------------------------------------------
T.test("the real FlashInfer-Bench copy passes, fast, with its summary", function()
  need_data()
  local t0 = kh.time and kh.time.now and kh.time.now() or os.clock()
  local out, code = T.khlua("task", "check", DATA)
  local dt = (kh.time and kh.time.now and kh.time.now() or os.clock()) - t0
  T.eq(code, 0, out)
  has_line(out, DATA .. ": dataset: 130 definitions, 627 workloads in 24 files, 0 traces, 0 solutions")
  has_line(out, "  constraints: 192; 105 from axes and shapes, evaluated 143 times over workloads; "
    .. "87 read tensor data, evaluated 0 times where the blobs are here, deferred elsewhere")
  has_line(out, "    deferred: total_seq_len == cu_seqlens[-1].item()")
  has_line(out, "  safetensors blobs: 0 checked, 651 absent")
  has_line(out, "  0 errors, 7 warnings")
  T.ok(dt < 5, "took " .. dt .. " s")
end)

T.test("--strict makes every absent blob an error; --json is one object", function()
  need_data()
  local out, code = T.khlua("task", "check", "--strict", DATA)
  T.eq(code, 1)
  has_line(out, "  651 errors, 0 warnings")
  has_line(out, "error: " .. DATA .. "/workloads/moe/moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048.jsonl:1: "
    .. "workload.inputs.routing_logits.path: safetensors file " .. DATA .. "/blob/workloads/moe/")
  out, code = T.khlua("task", "check", "--json", DATA)
  T.eq(code, 0)
  local r = kh.json.decode(out)
  T.eq(r.summary.definitions, 130)
  T.eq(r.summary.workloads, 627)
  T.eq(r.summary.deferred, 87)
  T.eq(#r.summary.deferred_constraints, 4)
  T.eq(#r.problems, 7)
  T.eq(r.problems[1].severity, "warning")
end)

T.test("one real workload file is checked against the dataset around it", function()
  need_data()
  local f = DATA .. "/workloads/gqa_paged/gqa_paged_prefill_causal_h32_kv4_d128_ps1.jsonl"
  local out, code = T.khlua("task", "check", f)
  T.eq(code, 0, out)
  has_line(out, f .. ": workloads: 0 definitions, 33 workloads in 1 file")
  has_line(out, "  (130 definitions loaded from the dataset or package around it, not checked)")
  has_line(out, "  constraints: 2; 0 from axes and shapes, evaluated 0 times over workloads; 2 read tensor data")
  has_line(out, "  0 errors, 1 warning")
end)

T.test("usage errors exit 2, unreadable paths 1", function()
  local out, code = T.khlua("task", "check")
  T.eq(code, 2)
  T.match(out, "missing PATH")
  out, code = T.khlua("task", "check", "--frobnicate", FIX)
  T.eq(code, 2)
  out, code = T.khlua("task", "frob")
  T.eq(code, 2)
  out, code = T.khlua("task", "check", "/nonexistent/x.json")
  T.eq(code, 1)
  T.match(out, "/nonexistent/x.json: No such file")
  out, code = T.khlua("task", "check", "--help")
  T.eq(code, 0)
  T.match(out, "usage: khlua task check")
end)

T.test("the fixture package, each of its files, and its dataset form pass", function()
  for _, p in ipairs({ FIX, FIX .. "/definition.json", FIX .. "/workloads.jsonl",
                       FIX .. "/solutions/rmsnorm_h512_cuda_v1.json" }) do
    local out, code = T.khlua("task", "check", p)
    T.eq(code, 0, out)
    has_line(out, "  0 errors, 0 warnings")
  end
  local root = fixture_dataset()
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 0, out)
  has_line(out, root .. ": dataset: 1 definition, 3 workloads in 1 file, 0 traces, 2 solutions (2 candidates)")
  rm(root)
end)

T.test("workload for an unknown definition", function()
  need_data()
  local root, _, w = real_copy("gqa_paged", "gqa_paged_decode_h32_kv4_d128_ps1")
  local l = lines_of(T.read(w))
  l[2] = sub1(l[2], '"definition": "gqa_paged_decode_h32_kv4_d128_ps1"', '"definition": "gqa_paged_decode_nope"')
  T.write(w, table.concat(l, "\n") .. "\n")
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1)
  has_line(out, "error: " .. w .. ':2: definition: expected the name of a known definition, got "gqa_paged_decode_nope"')
  has_line(out, "  1 error, 1 warning")
  rm(root)
end)

T.test("constraint violations name the constraint and the values", function()
  need_data()
  local root, _, w = real_copy("gqa_paged", "gqa_paged_decode_h32_kv4_d128_ps1")
  local l = lines_of(T.read(w))
  local k = math.random(1, #l)
  local bs = tonumber(l[k]:match('"batch_size": (%d+)'))
  local bad = bs + math.random(2, 9)
  l[k] = l[k]:gsub('"len_indptr": %d+', '"len_indptr": ' .. bad)
  T.write(w, table.concat(l, "\n") .. "\n")
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1)
  has_line(out, string.format("error: %s:%d: workload.axes: violates constraint 'len_indptr == batch_size + 1' "
    .. "of gqa_paged_decode_h32_kv4_d128_ps1 (len_indptr = %d, batch_size = %d)", w, k, bad, bs))
  rm(root)
end)

T.test("broken real definitions: unknown dtype, undefined axis, missing field, wrong type", function()
  need_data()
  local cases = {
    -- from, to, field, message
    { '"dtype": "bfloat16"', '"dtype": "bf16"', "inputs.q.dtype", 'expected one of float32, float16, bfloat16' },
    { '"num_qo_heads",', '"num_q_heads",', "inputs.q.shape[1]", 'expected an axis name defined in axes, got "num_q_heads"' },
    { '"op_type": "gqa_paged",', '', "op_type", "missing; expected a non-empty string" },
    { '"tags": [', '"tags": 7, "x": [', "tags", "expected an array of strings, got an integer" },
    { '"value": 128', '"value": -128', "axes.head_dim.value", "expected an integer >= 0, got -128" },
  }
  for _, c in ipairs(cases) do
    local root, d = real_copy("gqa_paged", "gqa_paged_decode_h32_kv4_d128_ps1")
    local text = sub1(T.read(d), c[1], c[2])
    T.write(d, text)
    -- the line the field is on: where the replacement went (or line 1 if removed)
    local at = text:find(c[2] ~= "" and c[2] or "{", 1, true)
    local line = select(2, text:sub(1, at):gsub("\n", "")) + 1
    local out, code = T.khlua("task", "check", root)
    T.eq(code, 1, out)
    has_line(out, string.format("error: %s:%d: %s: %s", d, line, c[3], c[4]))
    rm(root)
  end
end)

T.test("truncated JSON and duplicate names", function()
  need_data()
  local root, d, w = real_copy("gqa_paged", "gqa_paged_decode_h32_kv4_d128_ps1")
  local l = lines_of(T.read(w))
  local k = math.random(1, #l)
  l[k] = l[k]:sub(1, math.random(10, #l[k] - 2))
  T.write(w, table.concat(l, "\n") .. "\n")
  -- a second definition file with the same name
  T.write(root .. "/definitions/gqa_paged/copy.json", T.read(d))
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1)
  has_line(out, string.format("error: %s:%d: json: invalid JSON at column", w, k))
  has_line(out, "error: " .. root .. '/definitions/gqa_paged/gqa_paged_decode_h32_kv4_d128_ps1.json:2: name: '
    .. 'duplicate definition name "gqa_paged_decode_h32_kv4_d128_ps1" (also ' .. root .. "/definitions/gqa_paged/copy.json:1)")
  rm(root)

  -- duplicate workload uuid, duplicate JSON key
  root, d, w = real_copy("gqa_paged", "gqa_paged_decode_h32_kv4_d128_ps1")
  l = lines_of(T.read(w))
  local uuid = l[1]:match('"uuid": "([^"]+)"')
  l[3] = l[3]:gsub('"uuid": "[^"]+"', '"uuid": "' .. uuid .. '"')
  l[4] = sub1(l[4], '"axes": {', '"axes": {"batch_size": 1, ')
  T.write(w, table.concat(l, "\n") .. "\n")
  out, code = T.khlua("task", "check", root)
  T.eq(code, 1)
  has_line(out, string.format('error: %s:3: workload.uuid: duplicate uuid "%s" for gqa_paged_decode_h32_kv4_d128_ps1 (also %s:1)', w, uuid, w))
  has_line(out, string.format("error: %s:4: json: invalid JSON at column", w))
  T.match(out, "duplicate object key")
  rm(root)
end)

T.test("workload field errors: missing uuid, wrong types, const axis, unknown input", function()
  local root = fixture_dataset()
  local w = root .. "/workloads/rmsnorm/rmsnorm_h512.jsonl"
  local l = lines_of(T.read(w))
  l[1] = sub1(l[1], '"uuid": "5b0d7a8e-0001-4a57-9a3c-1d2e3f405161", ', "")
  l[2] = sub1(l[2], '"batch_size": 7', '"batch_size": "7"')
  l[3] = sub1(l[3], '"batch_size": 333', '"batch_size": 333, "hidden_size": 512')
  l[3] = sub1(l[3], '"weight": {"type": "random"}', '"wieght": {"type": "random"}')
  T.write(w, table.concat(l, "\n") .. "\n")
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1)
  has_line(out, "error: " .. w .. ":1: workload.uuid: missing; expected a non-empty string")
  has_line(out, "error: " .. w .. ":2: workload.axes.batch_size: expected an integer >= 0, got a string")
  has_line(out, "error: " .. w .. ":3: workload.axes.hidden_size: is a const axis of rmsnorm_h512 (value 512); expected var axes only")
  has_line(out, "error: " .. w .. ':3: workload.inputs.wieght: expected an input of rmsnorm_h512, got "wieght"')
  has_line(out, "warning: " .. w .. ":3: workload.inputs: input 'weight' not given; generated as random")
  rm(root)
end)

T.test("safetensors inputs: var axis bound inconsistently across inputs, dtype, LFS pointer", function()
  local root = T.tmpdir()
  mkdirs(root .. "/definitions/x")
  mkdirs(root .. "/workloads/x")
  mkdirs(root .. "/blob")
  T.write(root .. "/definitions/x/pair.json", [[
{"name": "pair", "op_type": "x",
 "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 4}},
 "inputs": {"a": {"shape": ["M", "N"], "dtype": "float32"},
            "b": {"shape": ["M"], "dtype": "float32"},
            "c": {"shape": ["N"], "dtype": "int32"}},
 "outputs": {"y": {"shape": ["M"], "dtype": "float32"}},
 "reference": "def run(a, b, c):\n    return a.sum(-1) + b\n"}
]])
  local m = math.random(2, 50)
  write_safetensors(root .. "/blob/ok.safetensors", { { "a", "F32", { m, 4 } }, { "b", "F32", { m } }, { "c", "I32", { 4 } } })
  write_safetensors(root .. "/blob/bad.safetensors", { { "a", "F32", { m, 4 } }, { "b", "F32", { m + 1 } }, { "c", "F32", { 4 } } })
  T.write(root .. "/blob/lfs.safetensors", "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n")
  local function wl(uuid, file)
    return string.format('{"definition": "pair", "solution": null, "evaluation": null, "workload": {"uuid": "%s", "axes": {"M": %d}, '
      .. '"inputs": {"a": {"type": "safetensors", "path": "./blob/%s", "tensor_key": "a"}, '
      .. '"b": {"type": "safetensors", "path": "./blob/%s", "tensor_key": "b"}, '
      .. '"c": {"type": "safetensors", "path": "./blob/%s", "tensor_key": "c"}}}}', uuid, m, file, file, file)
  end
  local w = root .. "/workloads/x/pair.jsonl"
  T.write(w, wl("u1", "ok.safetensors") .. "\n" .. wl("u2", "bad.safetensors") .. "\n" .. wl("u3", "lfs.safetensors") .. "\n")
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1, out)
  has_line(out, "  safetensors blobs: 6 checked, 0 absent")
  has_line(out, string.format('error: %s:2: workload.inputs.b.tensor_key: dimension 0 of "b" in %s/blob/bad.safetensors '
    .. "binds var axis M = %d, but workload.axes & input 'a' bind it to %d; expected one value across inputs", w, root, m + 1, m))
  has_line(out, string.format('error: %s:2: workload.inputs.c.tensor_key: tensor "c" in %s/blob/bad.safetensors has dtype F32; expected I32 (int32)', w, root))
  has_line(out, string.format("warning: %s:3: workload.inputs.a.path: %s/blob/lfs.safetensors is a Git LFS pointer", w, root))
  T.eq(out:find(w .. ":1:", 1, true), nil, "line 1 is clean")
  rm(root)
end)

T.test("constraints that read tensor data are evaluated when the blob is here", function()
  local root = T.tmpdir()
  mkdirs(root .. "/definitions/x")
  mkdirs(root .. "/workloads/x")
  mkdirs(root .. "/blob")
  T.write(root .. "/definitions/x/ragged.json", [[
{"name": "ragged", "op_type": "x",
 "axes": {"total": {"type": "var"}, "len_indptr": {"type": "var"}, "batch": {"type": "var"}, "D": {"type": "const", "value": 8}},
 "constraints": ["len_indptr == batch + 1", "total == indptr[-1].item()"],
 "inputs": {"x": {"shape": ["total", "D"], "dtype": "bfloat16"},
            "indptr": {"shape": ["len_indptr"], "dtype": "int32"}},
 "outputs": {"y": {"shape": ["total", "D"], "dtype": "bfloat16"}},
 "reference": "def run(x, indptr):\n    return x\n"}
]])
  -- random ragged lengths; the last offset is the total
  local batch = math.random(2, 9)
  local ptr, acc = { 0 }, 0
  for i = 1, batch do acc = acc + math.random(1, 50); ptr[i + 1] = acc end
  write_safetensors(root .. "/blob/p.safetensors", { { "indptr", "I32", { batch + 1 }, ptr } })
  local function wl(uuid, total, path)
    return string.format('{"definition": "ragged", "solution": null, "evaluation": null, "workload": {"uuid": "%s", '
      .. '"axes": {"total": %d, "len_indptr": %d, "batch": %d}, "inputs": {"x": {"type": "random"}, '
      .. '"indptr": {"type": "safetensors", "path": "./blob/%s", "tensor_key": "indptr"}}}}', uuid, total, batch + 1, batch, path)
  end
  local w = root .. "/workloads/x/ragged.jsonl"
  T.write(w, wl("u1", acc, "p.safetensors") .. "\n" .. wl("u2", acc + 3, "p.safetensors") .. "\n"
    .. wl("u3", acc + 5, "absent.safetensors") .. "\n")
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1, out)
  has_line(out, "  constraints: 2; 1 from axes and shapes, evaluated 3 times over workloads; "
    .. "1 read tensor data, evaluated 2 times where the blobs are here, deferred elsewhere")
  has_line(out, string.format("error: %s:2: workload.axes: violates constraint 'total == indptr[-1].item()' of ragged "
    .. "(total = %d, indptr[-1].item() = %d)", w, acc + 3, acc))
  T.eq(out:find(w .. ":1:", 1, true), nil, "line 1 holds")
  has_line(out, "  1 error, 1 warning")
  rm(root)
end)

T.test("solutions: entry point naming a missing source file, bad candidate manifests", function()
  local cases = {
    { '"entry_point": "rmsnorm.cu::rms_partial"', '"entry_point": "missing.cu::rms_partial"',
      "spec.entry_point", 'file "missing.cu" is not among sources (rmsnorm.cu); expected "<file>::<function>" naming a source file' },
    { '"entry_point": "rmsnorm.cu::rms_partial"', '"entry_point": "rmsnorm.cu"',
      "spec.entry_point", 'expected "<file>::<function>" with exactly one \'::\', got "rmsnorm.cu"' },
    { '"language": "cuda"', '"language": "fortran"', "spec.language", 'expected python, triton, cpp, cuda or tilelang, got "fortran"' },
    { '{"input": "weight"}', '{"input": "wieght"}', "spec.khlua.launches[1].args[1].input",
      'expected a tensor input of rmsnorm_h512, got "wieght"' },
    { '{"scalar": "eps"}', '{"input": "eps"}', "spec.khlua.launches[1].args[2].input",
      'expected a tensor input of rmsnorm_h512, got "eps" (a scalar: bind it with "scalar")' },
    { '"grid": ["batch_size", "ceil_div(hidden_size, 256)"]', '"grid": ["batch_size", "ceil_div(hidden, 256)"]',
      "spec.khlua.launches[0].grid[1]", "'ceil_div(hidden, 256)': column 10: 'hidden' is not an axis of rmsnorm_h512" },
    { '"shared_bytes": "4 * (256 / 32)"', '"shared_bytes": "4 * (256 / 32"', "spec.khlua.launches[0].shared_bytes",
      "'4 * (256 / 32': column 14: expected ')', found the end of the expression" },
    { '{"workspace": "row_sumsq"},\n            {"axis"', '{"workspace": "row_sums"},\n            {"axis"',
      "spec.khlua.launches[0].args[1].workspace", 'expected a buffer declared in spec.khlua.workspace, got "row_sums"' },
    { '"destination_passing_style": true', '"destination_passing_style": false', "spec.destination_passing_style",
      "a khlua candidate writes into preallocated outputs; expected true" },
  }
  for _, c in ipairs(cases) do
    local root = fixture_dataset()
    local f = root .. "/solutions/khlua/rmsnorm/rmsnorm_h512/rmsnorm_h512_cuda_v1.json"
    local text = sub1(T.read(f), c[1], c[2])
    T.write(f, text)
    -- the field's line: where the replaced text starts
    local at = text:find(c[2]:match('^[^\n]*'), 1, true)
    local line = select(2, text:sub(1, at):gsub("\n", "")) + 1
    local out, code = T.khlua("task", "check", root)
    T.eq(code, 1, out)
    has_line(out, string.format("error: %s:%d: %s: %s", f, line, c[3], c[4]))
    rm(root)
  end
end)

T.test("duplicate solution names and source paths", function()
  local root = fixture_dataset()
  local dir = root .. "/solutions/khlua/rmsnorm/rmsnorm_h512/"
  local f = dir .. "rmsnorm_h512_cuda_v1.json"
  T.write(dir .. "zz_copy.json", T.read(f))
  local text = T.read(dir .. "rmsnorm_h512_ref_c.json")
  text = sub1(text, '"sources": [\n', '"sources": [\n    {"path": "rmsnorm_ref.c", "content": ""},\n')
  T.write(dir .. "rmsnorm_h512_ref_c.json", text)
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1, out)
  has_line(out, "error: " .. dir .. 'zz_copy.json:2: name: duplicate solution name "rmsnorm_h512_cuda_v1" (also ' .. f .. ":1)")
  has_line(out, "error: " .. dir .. 'rmsnorm_h512_ref_c.json:25: sources[1].path: duplicate source path "rmsnorm_ref.c" (also sources[0]); expected unique paths')
  rm(root)
end)

T.test("candidate manifests are resolved on every workload", function()
  local root = fixture_dataset()
  local f = root .. "/solutions/khlua/rmsnorm/rmsnorm_h512/rmsnorm_h512_cuda_v1.json"
  T.write(f, sub1(T.read(f), '"block": 256,', '"block": "4 * batch_size",'))
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1, out)
  -- batch 1 and 7 fit, 333 does not: the first failing workload is named
  has_line(out, "error: " .. f .. ":1: spec.khlua: for workload 5b0d7a8e-0003-4a57-9a3c-1d2e3f405161 ("
    .. root .. "/workloads/rmsnorm/rmsnorm_h512.jsonl:3): launches[0].block.x = 1332; expected 1 to 1024")
  rm(root)
end)

T.test("khlua additions: unknown keys, bad tolerance, reference naming no solution", function()
  local root = fixture_dataset()
  local d = root .. "/definitions/rmsnorm/rmsnorm_h512.json"
  local text = T.read(d)
  text = sub1(text, '"reference": "rmsnorm_h512_ref_c"', '"reference": "rmsnorm_h512_ref_py"')
  text = sub1(text, '"rtol": 0.01', '"rtol": -1, "rtool": 2')
  text = sub1(text, '"speed_of_light": {"flops": "4 * batch_size * hidden_size"}',
    '"speed_of_light": {"flops": "4 * batch_size * hidden_size", "bytes": "qo_indptr[-1].item()"}')
  T.write(d, text)
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1, out)
  has_line(out, "error: " .. d .. ':24: khlua.reference: expected the name of a solution for rmsnorm_h512, got "rmsnorm_h512_ref_py"')
  has_line(out, "error: " .. d .. ":25: khlua.tolerance.rtol: expected a number >= 0, got -1")
  has_line(out, "error: " .. d .. ":25: khlua.tolerance.rtool: unknown key; expected atol, rtol, required_matched_ratio, "
    .. "sampling_validation_trials or sampling_tvd_threshold")
  has_line(out, "error: " .. d .. ":27: khlua.speed_of_light.bytes: 'qo_indptr[-1].item()': column 1: 'qo_indptr' is not an input or output")
  rm(root)
end)

T.test("traces: evaluation status and presence rules", function()
  local root = fixture_dataset()
  mkdirs(root .. "/traces/khlua/rmsnorm")
  local w = lines_of(T.read(FIX .. "/workloads.jsonl"))
  local env = '"environment": {"hardware": "NVIDIA H200", "libs": {"cuda": "13.0"}}, "timestamp": "2026-12-02T15:00:00"'
  local ok = w[1]:gsub('"solution": null, "evaluation": null',
    '"solution": "rmsnorm_h512_cuda_v1", "evaluation": {"status": "PASSED", ' .. env
    .. ', "correctness": {"max_relative_error": 0.001, "max_absolute_error": "inf"}, '
    .. '"performance": {"latency_ms": 0.01, "reference_latency_ms": 1.5, "speedup_factor": 150.0}}')
  local bad1 = w[2]:gsub('"solution": null, "evaluation": null',
    '"solution": "rmsnorm_h512_cuda_v1", "evaluation": {"status": "FAILED", ' .. env .. '}')
  local bad2 = w[3]:gsub('"solution": null, "evaluation": null',
    '"solution": "rmsnorm_h512_cuda_v1", "evaluation": {"status": "RUNTIME_ERROR", ' .. env
    .. ', "performance": {"latency_ms": 0.01, "reference_latency_ms": 1.5, "speedup_factor": 150.0}}')
  local t = root .. "/traces/khlua/rmsnorm/rmsnorm_h512.jsonl"
  T.write(t, ok .. "\n" .. bad1 .. "\n" .. bad2 .. "\n")
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1, out)
  has_line(out, root .. ": dataset: 1 definition, 3 workloads in 1 file, 3 traces, 2 solutions (2 candidates)")
  has_line(out, "error: " .. t .. ':2: evaluation.status: expected PASSED, INCORRECT_SHAPE, INCORRECT_NUMERICAL, INCORRECT_DTYPE, RUNTIME_ERROR, COMPILE_ERROR or TIMEOUT, got "FAILED"')
  has_line(out, "error: " .. t .. ":3: evaluation.performance: status RUNTIME_ERROR carries no performance; expected null")
  T.eq(out:find(t .. ":1:", 1, true), nil, "line 1 is a valid trace")
  rm(root)
end)

---------------------------------------------------------------------------
T.test("kh.task.expr and kh.task.eval", function()
  local e = assert(kh.task.expr("ceil_div(n * h, 128) + t.shape[-1]"))
  T.eq(e:vars(), { "n", "h", "t.shape[-1]" })
  T.eq(e:text(), "ceil_div(n * h, 128) + t.shape[-1]")
  T.eq(tostring(e), e:text())
  T.eq(e:needs_data(), false)
  for _ = 1, 100 do
    local n, h, d = math.random(1, 10000), math.random(1, 64), math.random(1, 512)
    T.eq(e:eval({ n = n, h = h, ["t.shape[-1]"] = d }), (n * h + 127) // 128 + d)
  end
  local v, msg, code = e:eval({ n = 1 })
  T.eq(v, nil)
  T.eq(code, "ENOTFOUND")
  T.match(msg, "unknown name 'h'")
  v, msg, code = kh.task.expr("a + (b")
  T.eq(v, nil)
  T.eq(code, "EPARSE")
  T.eq(msg, "column 7: expected ')', found the end of the expression")
  local a, b = math.random(-1000, 1000), math.random(1, 1000)
  T.eq(kh.task.eval("a / b", { a = a, b = b }), a // b)
  T.eq(kh.task.eval("a % b", { a = a, b = b }), a % b)
  v, msg, code = kh.task.eval("a / (b - b)", { a = a, b = b })
  T.eq(code, "EINVAL")
  T.match(msg, "division by zero")
  T.raises(function() kh.task.expr() end, "bad argument")
  T.raises(function() kh.task.eval("a", { a = "x" }) end, "name = integer")
end)

T.test("kh.task.load: definitions, workloads with resolved axes, speed of light, launches", function()
  local ts <close> = assert(kh.task.load(FIX))
  T.eq(ts:definitions(), { "rmsnorm_h512" })
  local d = ts:definition("rmsnorm_h512")
  T.eq(d.evaluator, "default")
  T.eq(d.tolerance.required_matched_ratio, 1.0)
  T.eq(d.reference, "rmsnorm_h512_ref_c")
  T.eq(d.inputs[1].shape, { "batch_size", "hidden_size" })
  T.eq(d.inputs[3].shape, nil)
  T.eq(d.axes[2], { name = "hidden_size", type = "const", value = 512 })
  T.eq(d.json.op_type, "rmsnorm")
  local ws = ts:workloads("rmsnorm_h512")
  T.eq(#ws, 3)
  T.eq(ws[3].axes, { batch_size = 333, hidden_size = 512 })
  T.eq(ws[1].inputs.eps.type, "scalar")
  T.eq(#ts:workloads("nope"), 0)
  local sols = ts:solutions()
  T.eq(#sols, 2)
  local b = math.random(1, 4096)
  T.eq(ts:eval("rmsnorm_h512", "hidden_states.shape[0] * output.shape[-1]", { batch_size = b }), b * 512)
  local sol = ts:speed_of_light("rmsnorm_h512", { batch_size = b })
  T.eq(sol.bytes, b * 512 * 2 * 2 + 512 * 2 + 4)
  T.eq(sol.flops, 4 * b * 512)
  T.eq(ts:speed_of_light("rmsnorm_h512", ws[2]).bytes, 7 * 512 * 4 + 1028)
  local l = assert(ts:launches("rmsnorm_h512_cuda_v1", { batch_size = b }))
  T.eq(l.backend, "cuda")
  T.eq(l.workspace[1], { name = "row_sumsq", bytes = 4 * b, zero = true })
  T.eq(l.launches[1].grid, { b, 2, 1 })
  T.eq(l.launches[1].shared_bytes, 32)
  T.eq(l.launches[2].grid, { (b * 512 + 1023) // 1024, 1, 1 })
  T.eq(l.launches[2].args[6], { kind = "value", value = b * 512, type = "int64" })
  T.eq(l.launches[2].args[3], { kind = "scalar", name = "eps" })
  local h = assert(ts:launches("rmsnorm_h512_ref_c", ws[3]))
  T.eq(h.backend, "host")
  T.eq(h["function"], "rmsnorm_ref")
  T.eq(h.args[5], { kind = "value", value = 333, type = "int64" })
  T.raises(function() ts:definition("nope") end, "no definition named 'nope'")
  T.raises(function() ts:eval("rmsnorm_h512", "1", {}) end, "var axis 'batch_size'")
  local v, msg, code = ts:eval("rmsnorm_h512", "1 / (batch_size - batch_size)", { batch_size = 3 })
  T.eq(code, "EINVAL")
  v, msg, code = kh.task.load("/nonexistent/dataset")
  T.eq(v, nil)
  T.eq(code, "ENOTFOUND")
  ts:close()
  T.raises(function() ts:definitions() end, "closed")
end)

T.test("kh.task.check returns the report as a table", function()
  local root = fixture_dataset()
  local w = root .. "/workloads/rmsnorm/rmsnorm_h512.jsonl"
  local l = lines_of(T.read(w))
  l[2] = sub1(l[2], '"batch_size": 7', '"batch_size": 0')
  T.write(w, table.concat(l, "\n") .. "\n")
  local r = assert(kh.task.check(root))
  T.eq(r.ok, false)
  -- the workload breaks a constraint, and the candidate's grid of 0 blocks
  T.eq(r.summary.errors, 2)
  T.eq(r.problems[2].field, "spec.khlua")
  T.match(r.problems[2].message, "launches%[0%]%.grid%.x = 0; expected 1 to 2147483647")
  T.eq(r.problems[1].file, w)
  T.eq(r.problems[1].line, 2)
  T.eq(r.problems[1].field, "workload.axes")
  T.match(r.problems[1].message, "violates constraint 'batch_size >= 1 and batch_size <= 4096'")
  T.match(r.problems[1].text, "^" .. w:gsub("%p", "%%%0") .. ":2: workload.axes: violates")
  rm(root)
end)

if have_data then
  T.test("kh.task over the real data: every constraint counted", function()
    local ts <close> = assert(kh.task.load(DATA))
    local s = ts:summary()
    T.eq(s.errors, 0)
    T.eq(s.constraints, 192)
    T.eq(s.deferred, 87)
    local n = 0
    for _, name in ipairs(ts:definitions()) do
      n = n + #ts:definition(name).constraints
    end
    T.eq(n, 192)
    local moe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
    T.eq(ts:definition(moe).evaluator, "lowbit")
    local ws = ts:workloads(moe)
    T.eq(#ws, 19)
    local w = ws[math.random(1, #ws)]
    T.eq(w.axes.hidden_size, 7168)
    T.ok(ts:speed_of_light(moe, w).bytes > 0)
  end)
end
