-- test_profile.lua: kh.profile from Lua and `khlua profile` from the shell:
-- classify is pure and agrees with ncu's rule on random metric sets, names
-- the occupancy limiter from launch context, says "no counters" and why;
-- parse_ncu_csv reads the hand-written fixture; misuse raises; run and the
-- CLI fail clearly without a GPU; --task/--solution build the launch list
-- (--dry-run shows it); the
-- store options are checked and a failed run records nothing.
local T = require "testlib"
local kh = require "kh"

math.randomseed(T.seed())

local SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
local MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
local DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"

local function rule(sm, mem)
  if sm >= 80 or mem >= 80 then return mem >= sm and "memory-bound" or "compute-bound" end
  if sm < 60 and mem < 60 then return "latency-bound" end
  if math.abs(sm - mem) >= 10 then return mem > sm and "memory-bound" or "compute-bound" end
  return "balanced"
end

T.test("classify follows ncu's rule on random metric sets", function()
  for _ = 1, 500 do
    local sm, mem = math.random() * 100, math.random() * 100
    local s = kh.profile.classify({ [SM] = sm, [MEM] = mem, [DRAM] = mem })
    T.eq(s.kind, rule(sm, mem), string.format("sm %.3f mem %.3f", sm, mem))
    T.eq(s.counters, true)
  end
end)

T.test("classify: re-read, SOL, occupancy limiter, small grid", function()
  local bytes = math.random(1, 8) * 1e9
  local t_ns = bytes / 4e12 * 1e9 * (1 + math.random())   -- slower than the bound
  local m = { [SM] = 5, [MEM] = 82, [DRAM] = 82, ["gpu__time_duration.sum"] = t_ns,
              ["dram__bytes_read.sum"] = bytes, ["dram__bytes_write.sum"] = bytes }
  local device = { sms = 132, regs_per_sm = 65536, smem_per_sm = 233472,
                   reserved_smem_per_block = 1024, max_threads_per_sm = 2048,
                   max_blocks_per_sm = 32 }
  local s = kh.profile.classify(m, {
    min_bytes = bytes, copy_bytes_per_s = 4e12, device = device,
    launch = { blocks = 132 * 8, threads_per_block = 256, regs_per_thread = 128 },
  })
  T.eq(s.kind, "memory-bound")
  T.near(s.reread, 2.0, 1e-12)
  T.near(s.sol_fraction, bytes / 4e12 * 1e9 / t_ns, 1e-9)
  T.eq(s.occupancy_limiter, "registers")
  T.match(s.signature, "^memory%-bound dram 82%% sol %d+%% reread 2%.0x occupancy:registers$")
  -- one block, both sides idle: small grid
  local g = kh.profile.classify({ [SM] = 0.1, [MEM] = 0.2 },
    { device = device, launch = { blocks = 1, threads_per_block = 32, regs_per_thread = 16 } })
  T.eq(g.kind, "small-grid")
  T.ok(g.waves < 1)
end)

T.test("classify without counters says why, and keeps the bound", function()
  local s = kh.profile.classify(nil, { why = "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
                                       min_bytes = 4e9, copy_bytes_per_s = 4e12,
                                       measured_ns = 2e6 })
  T.eq(s.counters, false)
  T.eq(s.kind, "no-counters")
  T.eq(s.why, "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")
  T.near(s.sol_fraction, 0.5, 1e-12)
  T.eq(s.reread, nil)   -- unknown values are absent
end)

T.test("misuse raises", function()
  T.raises(function() kh.profile.classify("x") end)
  T.raises(function() kh.profile.classify({}, { min_bytes = "many" }) end, "min_bytes")
  T.raises(function() kh.profile.classify({}, { min_bytes = -1 }) end, "min_bytes")
  T.raises(function() kh.profile.parse_ncu_csv() end)
  T.raises(function() kh.profile.run() end)
  T.raises(function() kh.profile.run { spec = { launches = {} } } end, "cubin")
  T.raises(function() kh.profile.run { cubin = "x", spec = { launches = {} }, replay = "sometimes" } end,
    "replay")
  T.raises(function() kh.profile.run { cubin = "x", spec = { launches = {} }, candidate = "c" } end,
    "store")
  T.raises(function() kh.profile.run { cubin = "x", spec = { launches = {} }, store = {} } end)
  T.raises(function() kh.profile.run { task_path = "t" } end, "solution")
  T.raises(function() kh.profile.run { task_path = "t", solution = "s", cubin = "x" } end, "exclude")
  T.raises(function() kh.profile.run { cubin = "x", spec = {}, workload = "w" } end, "task_path")
end)

T.test("parse_ncu_csv reads the fixture; a bad CSV returns nil, msg, code", function()
  local f = assert(io.open(os.getenv("KH_SOURCE_DIR") .. "/tests/fixtures/ncu/raw_copy_fma.csv", "rb"))
  local text = f:read("a")
  f:close()
  local ks = assert(kh.profile.parse_ncu_csv(text))
  T.eq(#ks, 2)
  T.eq(ks[1].kernel, "copy_f4")
  T.eq(ks[1].metrics["gpu__time_duration.sum"], 534848)
  local s = kh.profile.classify(ks[1].metrics)
  T.eq(s.signature, "memory-bound dram 83%")
  local nothing, msg, code = kh.profile.parse_ncu_csv("==PROF== no kernels\n")
  T.eq(nothing, nil)
  T.match(msg, "no header")
  T.eq(code, "EPARSE")
end)

T.test("default metrics: the classifier's eight and a tensor-pipe metric", function()
  local m = kh.profile.default_metrics()
  local set = {}
  for _, n in ipairs(m) do set[n] = true end
  for _, n in ipairs { SM, MEM, DRAM, "gpu__time_duration.sum", "dram__bytes_read.sum",
                       "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct",
                       "sm__warps_active.avg.pct_of_peak_sustained_active" } do
    T.ok(set[n], n)
  end
  local tensor = false
  for _, n in ipairs(m) do tensor = tensor or n:find("pipe_tensor", 1, true) ~= nil end
  T.ok(tensor)
end)

T.test("khlua profile --task: the candidate's launch list; bad arguments are usage errors", function()
  local task = os.getenv("KH_SOURCE_DIR") .. "/tests/fixtures/task/rmsnorm"
  local out, code = T.khlua("profile", "--task", task .. "-missing", "--solution", "y")
  T.eq(code, 1)
  T.match(out, "rmsnorm%-missing")
  out, code = T.khlua("profile", "--task", task, "--solution", "nobody", "--dry-run")
  T.eq(code, 1)
  T.match(out, "nobody")
  out, code = T.khlua("profile", "--task", task, "--solution", "rmsnorm_h512_cuda_v1",
                      "--workload", "5b0d7a8e-0002-4a57-9a3c-1d2e3f405161", "--dry-run")
  T.eq(code, 0, out)
  local d = assert(kh.json.decode(out:sub((out:find("{", 1, true)))))
  T.eq(#d.spec.launches, 2)
  T.eq(d.spec.launches[1].grid[1], 7)            -- batch_size of that workload
  T.eq(d.context.axes.batch_size, 7)
  T.eq(d.min_bytes, 7 * 512 * 2 * 2 + 512 * 2 + 4)
  T.eq(d.candidate:sub(1, 10), "candidate-")
  out, code = T.khlua("profile", "--task", task)
  T.eq(code, 2)
  out, code = T.khlua("profile", "--cubin", "a", "--spec", "b", "--dry-run")
  T.eq(code, 2)
  out, code = T.khlua("profile", "--cubin", "a")
  T.eq(code, 2)
  out, code = T.khlua("profile", "--cubin", "a", "--spec", "b", "--replay", "often")
  T.eq(code, 2)
  out, code = T.khlua("profile", "--cubin", "/nonexistent.cubin", "--spec", "b")
  T.eq(code, 1)
  T.match(out, "cannot read")
end)

T.test("khlua profile: store options", function()
  local dir = T.tmpdir()
  local f = assert(io.open(dir .. "/k.cubin", "wb")); f:write("\127ELF not really"); f:close()
  f = assert(io.open(dir .. "/s.json", "wb")); f:write('{"buffers": [], "launches": []}'); f:close()
  local out, code = T.khlua("profile", "--cubin", dir .. "/k.cubin", "--spec", dir .. "/s.json",
                            "--no-store", "--candidate", "candidate-x")
  T.eq(code, 2)
  T.match(out, "no%-store")
  out, code = T.khlua("profile", "--cubin", dir .. "/k.cubin", "--spec", dir .. "/s.json",
                      "--peaks-max-age", "-3")
  T.eq(code, 2)
  -- a store that cannot be opened is named, and nothing is profiled
  f = assert(io.open(dir .. "/afile", "wb")); f:write("x"); f:close()
  out, code = T.khlua("profile", "--cubin", dir .. "/k.cubin", "--spec", dir .. "/s.json",
                      "--store", dir .. "/afile")
  T.eq(code, 1)
  T.match(out, "cannot open the store")
  T.match(out, "afile")
end)

T.test("kh.profile.run: a run that fails (no GPU, or a bad cubin) records no profile", function()
  local dir = T.tmpdir()
  local db = assert(kh.store.open(dir .. "/store"))
  local r, msg = kh.profile.run { cubin = "\127ELF not really", spec = { buffers = {}, launches = {} },
                                  store = db }
  T.eq(r, nil)
  T.ok(type(msg) == "string")
  T.eq(#db:query { type = "profile" }, 0)
  db:close()
end)

T.test("kh.profile.run{task_path, solution}: could-not-run cases return nil, msg, code", function()
  local task = os.getenv("KH_SOURCE_DIR") .. "/tests/fixtures/task/rmsnorm"
  local r, msg, code = kh.profile.run { task_path = task, solution = "nobody" }
  T.eq(r, nil)
  T.match(msg, "nobody")
  T.eq(code, "ENOTFOUND")
  r, msg, code = kh.profile.run { task_path = task, solution = "rmsnorm_h512_ref_c" }
  T.eq(r, nil)
  T.match(msg, "host")
  T.eq(code, "EUNSUPPORTED")
end)
