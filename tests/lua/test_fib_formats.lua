-- test_fib_formats.lua: khlua reads every file FlashInfer-Bench writes and
-- refuses what it refuses (issue 22, "FlashInfer-Bench round trip").  The
-- fixtures under tests/fixtures/fib/ were written by flashinfer-bench 0.1.2's
-- own writers (scripts/make_fib_fixtures.py): written/ is a dataset FIB wrote
-- and reads back ("description": null, non-finite errors as "NaN" /
-- "Infinity" strings and as bare NaN / Infinity tokens, a trace naming no
-- solution, axes without their default "type", khlua's own package and
-- export re-saved by FIB); rejected/ holds what FIB's loaders refuse, each
-- listed in rejected.json with FIB's error.  A FIB solution without a launch
-- manifest passes task check with a warning in eval's words.  Where
-- flashinfer-bench is installed ($KHLUA_FIB_PYTHON, else python3), the
-- fixtures are written afresh by it and checked the same way.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIB = SRC .. "/tests/fixtures/fib"
local WRITTEN = FIB .. "/written"
local REJECTED = FIB .. "/rejected"

math.randomseed(T.seed())

local function lines_of(text)
  local t = {}
  for l in text:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

-- out must hold this exact line (or a line starting with it).
local function has_line(out, want)
  for _, l in ipairs(lines_of(out)) do
    if l:sub(1, #want) == want then return end
  end
  error("no output line starting with:\n  " .. want .. "\noutput was:\n" .. out, 2)
end

local function rm(dir) os.execute("rm -rf " .. T.quote(dir)) end

-- a copy of a fixture dataset, to break or rewrite
local function copy(dir)
  local to = T.tmpdir() .. "/ds"
  assert(os.execute("cp -r " .. T.quote(dir) .. " " .. T.quote(to)))
  return to
end

-- every error of a check as "relative/file:line" (line 0 for a whole file)
local function errors_of(report, root)
  local got = {}
  for _, p in ipairs(report.problems) do
    if p.severity == "error" then
      got[p.file:sub(#root + 2) .. ":" .. p.line] = p
    end
  end
  return got
end

-- What rejected.json lists must be exactly the files and lines khlua refuses
-- (a file FIB refuses as a whole: at least one error in it).
local function same_refusals(root, listing)
  local r = assert(kh.task.check(root))
  local got = errors_of(r, root)
  local want = kh.json.decode(T.read(listing)).rejected
  T.ok(#want >= 18, "rejected.json lists " .. #want)
  local matched = {}
  for _, x in ipairs(want) do
    local hit
    for key in pairs(got) do
      local f, l = key:match("^(.*):(%d+)$")
      if f == x.file and (x.line == 0 or tonumber(l) == x.line) then
        hit = key
        matched[key] = true
      end
    end
    T.ok(hit, string.format("FIB refuses %s:%d (%s); khlua does not", x.file, x.line, x.fib))
  end
  for key, p in pairs(got) do
    T.ok(matched[key], "khlua refuses what FIB reads: " .. p.text)
  end
  return r
end

---------------------------------------------------------------------------
T.test("a dataset FIB's writers wrote is read without an error", function()
  local out, code = T.khlua("task", "check", WRITTEN)
  T.eq(code, 0, out)
  has_line(out, WRITTEN .. ": dataset: 4 definitions, 14 workloads in 4 files, 9 traces, 2 solutions (0 candidates)")
  has_line(out, "  0 errors, 2 warnings")
  has_line(out, "  references and constraints of 4 definitions parsed by Python")
  -- and each file alone, against the dataset around it
  local p = assert(io.popen("find " .. T.quote(WRITTEN) .. " -name '*.json*' | sort"))
  local n = 0
  for f in p:lines() do
    local r = assert(kh.task.check(f))
    T.eq(r.summary.errors, 0, f .. ": " .. (r.problems[1] and r.problems[1].text or ""))
    n = n + 1
  end
  p:close()
  T.eq(n, 13)
end)

T.test("description: null, as model_dump_json writes it for every optional field", function()
  local f = WRITTEN .. "/definitions/rmsnorm/fib_rmsnorm_h64_dumped.json"
  local text = T.read(f)
  local _, nulls = text:gsub('"description": null', "")
  T.ok(nulls >= 4, "the fixture writes " .. nulls .. " null descriptions")
  local r = assert(kh.task.check(f))
  T.eq(r.summary.errors, 0, r.problems[1] and r.problems[1].text)
  -- a description that is neither a string nor null is still refused
  local root = copy(WRITTEN)
  local g = root .. "/definitions/rmsnorm/fib_rmsnorm_h64_dumped.json"
  local broken = T.read(g):gsub('"description": null', '"description": 7', 1)
  T.write(g, broken)
  r = assert(kh.task.check(g))
  T.eq(r.summary.errors, 1)
  T.eq(r.problems[1].field, "axes.hidden_size.description")
  T.eq(r.problems[1].message, "expected a string or null, got an integer")
  rm(root)
end)

T.test("non-finite errors: \"NaN\" / \"Infinity\" strings and bare NaN / Infinity tokens", function()
  -- as FIB wrote them: pydantic's strings (model_dump_json), and Python's
  -- json module's bare tokens (json.dumps of model_dump())
  local strings = WRITTEN .. "/traces/rmsnorm/fib_rmsnorm_h64.jsonl"
  local tokens = WRITTEN .. "/traces/rmsnorm/fib_rmsnorm_h64_dumped.jsonl"
  T.ok(T.read(strings):find('"max_relative_error":"NaN","max_absolute_error":"Infinity"', 1, true))
  local raw = T.read(tokens)
  T.ok(raw:find('"max_relative_error": NaN, "max_absolute_error": Infinity', 1, true), raw)
  T.ok(raw:find('"latency_ms": Infinity', 1, true), raw)
  for _, f in ipairs({ strings, tokens }) do
    local r = assert(kh.task.check(f))
    T.eq(r.summary.errors, 0, r.problems[1] and r.problems[1].text)
    T.ok(r.summary.traces >= 2)
  end
  -- a negative infinity, as a token or a string, is refused (FIB: "must be
  -- non-negative or NaN"), on its own line
  local root = copy(WRITTEN)
  local t = root .. "/traces/rmsnorm/fib_rmsnorm_h64_dumped.jsonl"
  local l = lines_of(T.read(t))
  local k = math.random(1, #l)
  l[k] = l[k]:gsub('"max_absolute_error": %a+', '"max_absolute_error": -Infinity', 1)
  T.write(t, table.concat(l, "\n") .. "\n")
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1, out)
  has_line(out, string.format("error: %s:%d: evaluation.correctness.max_absolute_error: expected a number >= 0 or NaN, got -inf", t, k))
  has_line(out, "  1 error, ")
  rm(root)
end)

T.test("a bare token keeps line numbers and the column of a syntax error after it", function()
  local root = copy(WRITTEN)
  local t = root .. "/traces/rmsnorm/fib_rmsnorm_h64_dumped.jsonl"
  local l = lines_of(T.read(t))
  -- break line 2 after its tokens; the same line with numbers of the same
  -- length in their place gives the column jansson reports as written
  l[2] = l[2]:gsub('"log": "', '"log": ', 1)
  local same = l[2]:gsub("NaN", "0.0"):gsub("Infinity", "12345678")
  local _, msg = kh.json.decode(same)
  local col = msg and msg:match("col (%d+)")
  T.ok(col, tostring(msg))
  T.write(t, table.concat(l, "\n") .. "\n")
  local out, code = T.khlua("task", "check", root)
  T.eq(code, 1, out)
  has_line(out, string.format("error: %s:2: json: invalid JSON at column %s:", t, col))
  T.eq(out:find(t .. ":1:", 1, true), nil, "line 1 reads")
  rm(root)
end)

T.test("a trace naming no solution beside its evaluation; evaluation null beside a solution", function()
  local f = WRITTEN .. "/traces/rmsnorm/fib_rmsnorm_h64.jsonl"
  T.ok(lines_of(T.read(f))[3]:find('"solution":null,"evaluation":{', 1, true), "the fixture's line 3")
  local r = assert(kh.task.check(f))
  for _, p in ipairs(r.problems) do
    T.ok(p.line ~= 3, p.text)
  end
  T.eq(r.summary.traces, 3)
  local root = copy(WRITTEN)
  local t = root .. "/traces/rmsnorm/fib_rmsnorm_h64.jsonl"
  local l = lines_of(T.read(t))
  l[1] = l[1]:gsub('"evaluation":{.*}}$', '"evaluation":null}')
  T.ok(l[1]:find('"solution":"fib_rmsnorm_h64_python","evaluation":null}', 1, true), l[1])
  T.write(t, table.concat(l, "\n") .. "\n")
  r = assert(kh.task.check(t))
  for _, p in ipairs(r.problems) do
    T.ok(p.line ~= 1, p.text)
  end
  T.eq(r.summary.traces, 3)
  rm(root)
end)

T.test("axes without \"type\", as save_json_file writes them (exclude_unset)", function()
  local f = WRITTEN .. "/definitions/rmsnorm/fib_rmsnorm_h64_untyped.json"
  T.eq(T.read(f):find('"type"', 1, true), nil, "the fixture's axes carry no type")
  local r = assert(kh.task.check(WRITTEN .. "/workloads/rmsnorm/fib_rmsnorm_h64_untyped.jsonl"))
  T.eq(r.summary.errors, 0, r.problems[1] and r.problems[1].text)
  T.eq(r.summary.workloads, 2)
  local ts <close> = assert(kh.task.load(f))
  local d = ts:definition("fib_rmsnorm_h64_untyped")
  T.eq(d.axes[1], { name = "batch_size", type = "var" })
  T.eq(d.axes[2], { name = "hidden_size", type = "const", value = 64 })
  -- FIB reads {"value": -1} without a type as a var axis; khlua says so
  local root = copy(WRITTEN)
  local g = root .. "/definitions/rmsnorm/fib_rmsnorm_h64_untyped.json"
  T.write(g, T.read(g):gsub('"value": 64', '"value": -1', 1))
  r = assert(kh.task.check(g))
  local warned
  for _, p in ipairs(r.problems) do
    if p.field == "axes.hidden_size.value" then warned = p end
  end
  T.ok(warned and warned.severity == "warning", "no warning on the value")
  T.match(warned.message, "FlashInfer%-Bench reads this axis as var")
  rm(root)
end)

T.test("khlua's export, re-saved by FIB, and as khlua wrote it, read back", function()
  local t = WRITTEN .. "/traces/rmsnorm/host_rmsnorm_h1024.jsonl"
  local l = lines_of(T.read(t))
  T.eq(#l, 4)
  T.ok(l[4]:find('"max_relative_error":"NaN","max_absolute_error":"Infinity"', 1, true), l[4])
  T.eq(l[1]:find('"khlua"', 1, true), nil, "FIB drops khlua's additions")
  local r = assert(kh.task.check(t))
  T.eq(r.summary.errors, 0, r.problems[1] and r.problems[1].text)
  T.eq(r.summary.traces, 4)
  -- khlua's export as khlua wrote it, in the dataset FIB re-saved
  local root = copy(WRITTEN)
  local e = T.read(FIB .. "/khlua/host_rmsnorm_export.jsonl")
  local x = root .. "/traces/rmsnorm/khlua_export.jsonl"
  T.write(x, e)
  r = assert(kh.task.check(x))
  T.eq(r.summary.errors, 0, r.problems[1] and r.problems[1].text)
  T.eq(r.summary.traces, 3)
  -- from an evaluation without reference timing: no reference figures
  -- (FIB's default 0.0)
  local line = lines_of(e)[1]:gsub(',"reference_latency_ms":[%d.e-]+,"speedup_factor":[%d.e-]+', "", 1)
  T.ok(not line:find("speedup_factor", 1, true))
  T.write(x, line .. "\n")
  r = assert(kh.task.check(x))
  T.eq(r.summary.errors, 0, r.problems[1] and r.problems[1].text)
  T.eq(r.summary.traces, 1)
  rm(root)
end)

---------------------------------------------------------------------------
T.test("what FIB's loaders refuse, khlua refuses, and nothing else", function()
  local r = same_refusals(REJECTED, FIB .. "/rejected.json")
  T.eq(r.summary.warnings, 2) -- the two solutions without a manifest
end)

T.test("refusals name file:line, the field and what FIB expects", function()
  local out, code = T.khlua("task", "check", REJECTED)
  T.eq(code, 1, out)
  local D, S = REJECTED .. "/definitions/x/", REJECTED .. "/solutions/fib/x/fib_ok/"
  local W, TR = REJECTED .. "/workloads/x/fib_ok.jsonl", REJECTED .. "/traces/x/fib_ok.jsonl"
  for _, want in ipairs({
    D .. "bad_reference_syntax.json:39: reference: expected Python source (FlashInfer-Bench parses it with ast.parse), got a syntax error at line 2, column 27 of the reference: invalid syntax",
    D .. "bad_reference_run_in_string.json:39: reference: expected Python source with a top-level 'def run(...)'; Python's ast finds no top-level function run",
    D .. "bad_constraint_not_python.json:44: constraints[0]: 'batch_size >= 1 && batch_size <= 4096' is not a Python expression (FlashInfer-Bench parses constraints with ast.parse): invalid syntax at column 18",
    D .. 'bad_empty_tag.json:42: tags[1]: expected a non-empty string, got ""',
    D .. 'bad_empty_axis_name.json:4: axes: expected non-empty axis names, got ""',
    S .. 'bad_empty_content.json:18: sources[0].content: expected a non-empty string, got ""',
    S .. 'bad_empty_dependency.json:13: spec.dependencies[1]: expected a non-empty string, got ""',
    W .. ":2: solution: expected null in a workload file (FlashInfer-Bench loads every line of workloads/ as a workload, without solution or evaluation), got a string",
    W .. ":3: evaluation: expected null in a workload file",
    TR .. ":1: evaluation.performance.latency_ms: expected a number >= 0, got -0.01",
    TR .. ":2: evaluation.performance.speedup_factor: expected a number >= 0, got -5",
    TR .. ":3: evaluation.performance.reference_latency_ms: expected a number >= 0, got -0.05",
    TR .. ":4: evaluation.correctness.max_absolute_error: expected a number >= 0 or NaN, got -0.001",
    TR .. ":5: evaluation.correctness.max_relative_error: expected a number >= 0 or NaN, got -inf",
    TR .. ':6: evaluation.environment.hardware: expected a non-empty string, got ""',
    TR .. ":7: evaluation.environment.libs.cuda: expected a version string, got a number",
    TR .. ":8: evaluation.performance.latency_ms: expected a number >= 0, got NaN",
    TR .. ":9: solution: a trace names a solution or carries an evaluation, got neither",
  }) do
    has_line(out, "error: " .. want)
  end
end)

T.test("without Python, references and constraints are not parsed, and check says so", function()
  local out, code = T.khlua_env({ KHLUA_PYTHON = "/nonexistent/python3" }, "task", "check", REJECTED)
  T.eq(code, 1, out)
  has_line(out, "warning: " .. REJECTED .. ": reference: not parsed as Python: no interpreter "
    .. "(/nonexistent/python3 not found; $KHLUA_PYTHON names another); FlashInfer-Bench requires")
  -- a reference without a `def run(` line is still refused
  has_line(out, "  15 errors, 3 warnings")
  out = T.khlua_env({ KHLUA_PYTHON = "/bin/false" }, "task", "check", WRITTEN)
  has_line(out, "warning: " .. WRITTEN .. ": reference: not parsed as Python: /bin/false did not answer (exit 1);")
  -- loading a task for eval parses nothing (only a check does)
  local ts <close> = assert(kh.task.load(REJECTED))
  T.eq(ts:summary().python_checked, 0)
end)

---------------------------------------------------------------------------
T.test("FIB solutions khlua cannot run: task check warns in eval's words", function()
  local f = WRITTEN .. "/solutions/fib/rmsnorm/fib_rmsnorm_h64/"
  local why = "has no khlua manifest (spec.khlua): khlua runs candidates with a launch manifest, "
    .. "not Python or host code that launches itself"
  for name, kind in pairs({ fib_rmsnorm_h64_python = "python", fib_rmsnorm_h64_cuda = "cuda, tvm-ffi" }) do
    local out, code = T.khlua("task", "check", f .. name .. ".json")
    T.eq(code, 0, out)
    has_line(out, "  0 errors, 1 warning")
    has_line(out, "warning: " .. f .. name .. ".json:5: spec.khlua: solution '" .. name .. "' ("
      .. kind .. ") " .. why .. "; khlua eval refuses it")
  end
  for _, name in ipairs({ "fib_rmsnorm_h64_python", "fib_rmsnorm_h64_cuda" }) do
    local eout, ecode = T.khlua("eval", "--task", WRITTEN, "--solution", name, "--no-store")
    T.eq(ecode, 1, eout)
    T.match(eout, "solution '" .. name .. "' " .. why:gsub("%p", "%%%0"))
  end
end)

---------------------------------------------------------------------------
T.test("fixtures written afresh by the flashinfer-bench installed here", function()
  local py = os.getenv("KHLUA_FIB_PYTHON") or "python3"
  local probe = io.popen(T.quote(py) .. " -c 'import importlib.metadata as m; "
    .. "print(m.version(\"flashinfer-bench\"))' 2>/dev/null")
  local ver = probe and probe:read("l")
  if probe then probe:close() end
  if not ver then T.skip("flashinfer-bench is not installed for " .. py .. " ($KHLUA_FIB_PYTHON)") end
  local out = T.tmpdir()
  local p = assert(io.popen(T.quote(py) .. " " .. T.quote(SRC .. "/scripts/make_fib_fixtures.py")
    .. " --out " .. T.quote(out) .. " 2>&1"))
  local log = p:read("a")
  local ok = p:close()
  T.ok(ok, log)
  local r = assert(kh.task.check(out .. "/written"))
  T.eq(r.summary.errors, 0, r.problems[1] and r.problems[1].text)
  same_refusals(out .. "/rejected", out .. "/rejected.json")
  rm(out)
end)

T.test("a dataset's traces are not workloads to run (eval, the policies)", function()
  -- host_rmsnorm_h1024 has 7 workload lines and 4 trace lines: eval ran all 11
  local sol = SRC .. "/kernels/host_rmsnorm/solutions/host_rmsnorm_h1024_c_v1.json"
  local out, code = T.khlua("eval", "--task", WRITTEN, "--solution", sol, "--workloads", "99", "--no-store")
  T.ok(code ~= 0, out)
  T.match(out, "'host_rmsnorm_h1024' has 7 workloads")
  package.path = SRC .. "/policies/?.lua;" .. package.path
  local ctl = require "lib.controller"
  local task = ctl.load_task { task = WRITTEN, definition = "host_rmsnorm_h1024", seed_solution = sol }
  T.eq(#task.workloads, 7)
end)
