-- The README's main job: examples/quickstart.lua runs and does real work.
local T = require "testlib"
local src = os.getenv("KH_SOURCE_DIR")

T.test("quickstart compiles a kernel, hits the cache and checks a dataset", function()
  local out, code = T.khlua(src .. "/examples/quickstart.lua", src .. "/tests/fixtures/task/rmsnorm")
  T.eq(code, 0, out)
  T.match(out, "rmsnorm_bf16 %(sm_%d+a?%): %d+ registers")
  T.match(out, "same compile again: cache hit")
  T.match(out, "0 errors")
end)

T.test("quickstart reports a missing dataset without failing", function()
  local out, code = T.khlua(src .. "/examples/quickstart.lua", "/nonexistent/dataset")
  T.eq(code, 0, out)
  T.match(out, "dataset check failed: .*/nonexistent/dataset")
end)

T.test("without a dataset, quickstart checks the task library in the repository", function()
  local out, code = T.khlua(src .. "/examples/quickstart.lua")
  T.eq(code, 0, out)
  T.match(out, "the task library %(.*kernels%): (%d+) packages, %d+ definitions, %d+ workloads, "
    .. "0 errors")
  T.ok(tonumber(out:match("(%d+) packages")) >= 10, out)
end)
