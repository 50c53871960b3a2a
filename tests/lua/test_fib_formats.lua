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

---------------------------------------------------------------------------
T.test("refusals name file:line, the field and what FIB expects", function()
  local out, code = T.khlua("task", "check", REJECTED)
  T.eq(code, 1, out)
  local D, S = REJECTED .. "/definitions/x/", REJECTED .. "/solutions/fib/x/fib_ok/"
  local W, TR = REJECTED .. "/workloads/x/fib_ok.jsonl", REJECTED .. "/traces/x/fib_ok.jsonl"
  for _, want in ipairs({
    W .. ":2: solution: expected null in a workload file (FlashInfer-Bench loads every line of workloads/ as a workload, without solution or evaluation), got a string",
    W .. ":3: evaluation: expected null in a workload file",
    TR .. ":9: solution: a trace names a solution or carries an evaluation, got neither",
  }) do
    has_line(out, "error: " .. want)
  end
end)
