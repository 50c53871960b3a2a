-- test_host_compile_guard.lua: what a host candidate's compile may read and
-- what its verdict may carry (engine/compile/ccguard.h, engine/core/scrub.h; issue 19,
-- "no leaks" and "host compiles take headers from an allowlist").  Written as
-- an adversary who has read khlua: a file outside the system headers reached
-- by an absolute path, a macro, a path relative to the source, a line
-- splice, a trigraph, __has_include or #include_next; asm written, pasted
-- together or smuggled into the assembly through a section name; #line and
-- line markers that would pass the candidate's text off as a header's.  Each
-- is a COMPILE_ERROR that says "not allowed", names what the candidate wrote
-- and quotes nothing of the other file.  An honest candidate that includes
-- pthread.h, math.h, immintrin.h (or arm_neon.h), omp.h and its own header
-- passes; a compile error quotes the candidate's own line; keys the candidate
-- prints (in #error, or on stderr before it dies) are redacted; an include of
-- an endless file (/dev/zero) fails in seconds.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local RT = SRC .. "/tests/redteam/host/rmsnorm"
local W1 = "7e0d7a8e-0001-4a57-9a3c-1d2e3f405161"
math.randomseed(T.seed())

-- the package, copied so that candidates are written beside its solutions
local dir = T.tmpdir()
os.execute("cp -r " .. T.quote(RT) .. " " .. T.quote(dir .. "/t"))
-- a file the candidate must not read: its text must never come back
local MARK = "KHLUA-GUARD-" .. math.random(1, 1 << 30)
local SECRET = dir .. "/secret.h"
T.write(SECRET, "const char *leak = \"" .. MARK .. "\";\n" .. MARK .. " is not C\n#define LEAK \""
        .. MARK .. "\"\n")
local HONEST = kh.json.decode(T.read(RT .. "/solutions/rt_honest_double.json")).sources[1].content
local PASSWD = T.read("/etc/passwd"):match("[^\n]+") -- a line it must not quote

local function eval(name, source, extra_sources)
  local sol = kh.json.decode(T.read(RT .. "/solutions/rt_honest_double.json"))
  sol.name = name
  sol.sources[1].content = source
  for _, s in ipairs(extra_sources or {}) do sol.sources[#sol.sources + 1] = s end
  local path = dir .. "/t/solutions/" .. name .. ".json"
  T.write(path, kh.json.encode(sol))
  local tr, msg = kh.eval(dir .. "/t", path, { seed = math.random(1, 1 << 40), workloads = W1,
                                               timing = false, record = false })
  os.remove(path)
  T.ok(tr, tostring(msg))
  return tr[1].evaluation
end

-- the verdict carries no text of the other file, anywhere
local function no_leak(e, name)
  local all = kh.json.encode(e)
  T.ok(not all:find(MARK, 1, true), name .. ": the other file's text leaked: " .. all)
  if PASSWD and #PASSWD > 0 then
    T.ok(not all:find(PASSWD, 1, true), name .. ": /etc/passwd leaked: " .. all)
  end
end

local function not_allowed(name, source, written)
  local e = eval(name, source)
  T.eq(e.status, "COMPILE_ERROR", name .. ": " .. tostring(e.khlua.detail))
  T.match(e.log, "not allowed", name)
  if written then T.ok(e.log:find(written, 1, true), name .. ": names '" .. written .. "': " .. e.log) end
  no_leak(e, name)
  return e
end

-- the secret file as a path relative to the build directory, a sibling of
-- this test's directory under the same TMPDIR
local REL = "../" .. dir:match("[^/]+$") .. "/secret.h"

T.test("a file outside the system headers cannot be included, however it is named", function()
  local cases = {
    { "abs", '#include "' .. SECRET .. '"\n', '#include "' .. SECRET .. '"' },
    { "macro", '#define X "' .. SECRET .. '"\n#include X\n', "#include X" },
    { "relative", '#include "' .. REL .. '"\n', REL },
    { "splice", '#inc\\\nlude "' .. SECRET .. '"\n', "#include" },
    { "trigraph", '??=include "' .. SECRET .. '"\n', "??=include" },
    { "has_include", '#if __has_include("' .. SECRET .. '")\n#include "' .. SECRET .. '"\n#endif\n',
      '#include "' .. SECRET .. '"' },
    { "include_next", '#include_next "' .. SECRET .. '"\n', "#include_next" },
    { "system_relative", "#include <../../" .. SECRET:sub(2) .. ">\n", "#include <../../" },
    { "passwd", '#include "/etc/passwd"\n', '#include "/etc/passwd"' },
    { "environ", '#include "/proc/self/environ"\n', "/proc/self/environ" },
    -- a fatal error after it: the preprocessor keeps no list, one is made again
    { "then_fatal", '#include "' .. SECRET .. '"\n#include "/no/such/header.h"\n', SECRET },
    -- a macro of the other file used in the candidate's own #if
    { "macro_value", '#include "' .. SECRET .. '"\n#if LEAK\n#endif\n', SECRET },
  }
  for _, c in ipairs(cases) do not_allowed(c[1], c[2] .. HONEST, c[3]) end
end)

T.test("asm is not allowed, however it is spelled, nor assembler directives", function()
  local cases = {
    { "asm", HONEST .. '\nint f(void) { __asm__ volatile("nop"); return 0; }\n', "asm" },
    { "asm_pasted", HONEST .. '\n#define CAT(a, b) a##b\nint f(void) { CAT(__as, m__) volatile("nop"); return 0; }\n', "asm" },
    { "incbin", HONEST .. '\n__asm__(".incbin \\"' .. SECRET .. '\\"");\n', "asm" },
    { "incbin_section", HONEST .. '\n__attribute__((section(".data\\n.incbin \\"' .. SECRET
      .. '\\"\\n.section .data"))) int x = 1;\n', ".incbin" },
    { "line", '#line 1 "/usr/include/stdio.h"\n' .. HONEST .. '\n__asm__("nop");\n', "#line" },
    { "marker", '# 1 "/usr/include/stdio.h" 3\n' .. HONEST .. '\n__asm__("nop");\n', "line markers" },
    { "pch", '_Pragma("GCC pch_preprocess \\"' .. SECRET .. '\\"")\n' .. HONEST, "pch_preprocess" },
  }
  for _, c in ipairs(cases) do not_allowed(c[1], c[2], c[3]) end
end)

T.test("an honest candidate with system headers and its own header passes", function()
  local headers = table.concat({
    "#include <pthread.h>", "#include <math.h>", "#include <stdint.h>", "#include <string.h>",
    "#include <stdlib.h>", "#include <stdio.h>",
    "#if defined(__x86_64__)", "#include <immintrin.h>",
    "#elif defined(__aarch64__)", "#include <arm_neon.h>", "#endif",
    "#if __has_include(<omp.h>)", "#include <omp.h>", "#endif",
    '#include "helper.h"', "" }, "\n")
  local e = eval("honest_headers", headers .. HONEST,
                 { { path = "helper.h", content = "static inline float sq(float x) { return x * x; }\n" } })
  T.eq(e.status, "PASSED", tostring(e.khlua.detail))
end)

T.test("a compile error quotes the candidate's own line, not the build directory", function()
  local e = eval("undeclared", HONEST .. "\nint f(void) { return nope_undeclared; }\n")
  T.eq(e.status, "COMPILE_ERROR")
  T.match(e.log, "honest_double%.c:%d+:%d+: error:")
  T.ok(e.log:find("| int f(void) { return nope_undeclared; }", 1, true), e.log)
  T.ok(not e.log:find("khlua-build-", 1, true), e.log)
end)

T.test("keys a candidate prints reach no verdict", function()
  local e = eval("error_key", "#error token=hunter2-secret sk-ant-api03-AAAABBBBCCCCDDDD\n" .. HONEST)
  T.eq(e.status, "COMPILE_ERROR")
  local all = kh.json.encode(e)
  T.ok(not all:find("hunter2", 1, true) and not all:find("sk-ant", 1, true), all)
  T.match(e.log, "%[redacted%]")

  local dies = "#include <stdio.h>\n#include <unistd.h>\n"
    .. HONEST:gsub("void rmsnorm%(", "void rmsnorm_unused(")
    .. "\nvoid rmsnorm(const uint16_t *x, const uint16_t *w, float eps, uint16_t *out,"
    .. " int64_t rows, int64_t h)\n{\n    (void)x; (void)w; (void)eps; (void)out; (void)rows; (void)h;\n"
    .. '    fprintf(stderr, "api_key=hunter3-secret sk-ant-khlua-canary-7f3a9c\\n");\n'
    .. "    fflush(stderr);\n    _exit(3);\n}\n"
  e = eval("stderr_key", dies)
  T.eq(e.status, "RUNTIME_ERROR", tostring(e.khlua.detail))
  all = kh.json.encode(e)
  T.ok(not all:find("hunter3", 1, true) and not all:find("canary", 1, true), all)
  T.match(e.khlua.detail, "last stderr: api_key=%[redacted%]")
end)

T.test("an endless include fails at once, not at the compile deadline", function()
  -- the compiler reads /dev/zero into memory until its address space (4 GiB
  -- for a candidate's compile) runs out: seconds, not the 120 s deadline
  local t0 = kh.time.now()
  local e = eval("dev_zero", '#include "/dev/zero"\n' .. HONEST)
  local dt = kh.time.now() - t0
  T.eq(e.status, "COMPILE_ERROR", tostring(e.khlua.detail))
  T.ok(dt < 60, string.format("took %.1f s", dt))
  no_leak(e, "dev_zero")
end)

T.test("cleanup", function() os.execute("rm -rf " .. T.quote(dir)) end)
