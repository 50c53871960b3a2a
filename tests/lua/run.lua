-- run.lua: runs one Lua test file inside khlua (so the bindings are there).
--   khlua tests/lua/run.lua tests/lua/test_json.lua
-- The file registers tests with T.test(name, fn).  Each runs under xpcall with
-- a traceback, then a full GC and a leak check: engine objects still open
-- after a test (kh.stats().live_objects) fail it.  Prints TAP lines and the
-- closing line "N passed, N failed, N skipped"; exit 1 on any failure, 77 when
-- the whole file is skipped (a GPU test without a GPU).
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/lib/?.lua;" .. package.path
local T = require "testlib"
local file = assert(arg[1], "usage: khlua run.lua TEST.lua")
T.file = file
local chunk, err = loadfile(file)
if not chunk then
  io.stderr:write("cannot load ", file, ": ", err, "\n")
  os.exit(1)
end
local ok, e = xpcall(chunk, debug.traceback, table.unpack(arg, 2))
if not ok then
  if T.is_skip(e) then
    print("1..0 # SKIP " .. T.skip_reason(e))
    print("0 passed, 0 failed, 1 skipped")
    os.exit(77)
  end
  io.stderr:write("error loading ", file, ": ", tostring(e), "\n")
  print("0 passed, 1 failed")
  os.exit(1)
end
os.exit(T.run())
