-- test_compile_service.lua: compile servers and the store cache from Lua and
-- from the shell: kh.compile.service objects, several jobs at once, a server
-- killed between compiles replaced, kh.compile.build with store = db (servers
-- by default), `khlua compile` answered from the store in a second process
-- with a complete compile record, --no-store and --in-process, misuse.
local T = require "testlib"
local kh = require "kh"

if not kh.version.nvrtc then T.skip_all("NVRTC not available") end

math.randomseed(T.seed())

local function source(name, smem, salt)
  return string.format([[
#include <cuda_fp16.h>
extern "C" __global__ void %s(const __half *x, __half *y, int n) {
  __shared__ float t[%d];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  t[threadIdx.x %% %d] = i < n ? __half2float(x[i]) : 0.f;
  __syncthreads();
  if (i < n) y[i] = __float2half(t[(threadIdx.x + %d) %% %d]);
}
]], name, smem, smem, salt, smem)
end

T.test("a service compiles several jobs on its servers", function()
  local svc <close> = kh.compile.service { servers = 2 }
  T.match(tostring(svc), "kh.CompileService %(2 servers%)")
  local reqs, smem = {}, {}
  for i = 1, 3 do
    smem[i] = math.random(16, 1500)
    reqs[i] = { source = source("k" .. i, smem[i], i), kernels = { "k" .. i } }
  end
  reqs[4] = { source = 'extern "C" __global__ void k(float *a) { a[0] = ; }\n', name = "bad.cu" }
  local rs = svc:build_all(reqs)
  T.eq(#rs, 4)
  local pids = {}
  for i = 1, 3 do
    T.eq(rs[i].ok, true, rs[i].error)
    T.eq(rs[i].served_by, "server")
    T.eq(rs[i].kernels["k" .. i].shared_static, 4 * smem[i])
    T.eq(rs[i].cubin:sub(1, 4), "\127ELF")
    pids[rs[i].server_pid] = true
  end
  T.eq(rs[4].ok, false)
  T.eq(rs[4].code, "ECOMPILE")
  T.match(rs[4].log, "bad%.cu%(1%): error")
  local live = svc:pids()
  T.eq(#live, 2)
  for pid in pairs(pids) do T.ok(pid == live[1] or pid == live[2]) end
  local st = svc:stats()
  T.eq(st.jobs, 4)
  T.eq(st.deaths, 0)
  -- one job through svc:build
  local a = assert(svc:build { source = source("one", 64, 9) })
  T.eq(a.served_by, "server")
end)

T.test("a server killed between compiles is replaced", function()
  local svc <close> = kh.compile.service { servers = 1 }
  local a = assert(svc:build { source = source("a", math.random(16, 900), 1), cache = false })
  local pid = a.server_pid
  T.eq(svc:pids()[1], pid)
  T.ok(os.execute("kill -9 " .. pid))
  -- wait until it is gone (a zombie of this process counts)
  for _ = 1, 200 do
    local f = io.open("/proc/" .. pid .. "/stat")
    local s = f and f:read("a") or ""
    if f then f:close() end
    if s == "" or s:match("%) Z ") then break end
    os.execute("sleep 0.01")
  end
  local b = assert(svc:build { source = source("b", math.random(16, 900), 2) })
  T.eq(b.ok, true)
  T.ne(b.server_pid, pid)
  T.eq(svc:stats().deaths, 1)
end)

T.test("build with a store: servers by default, a repeat is a store hit", function()
  local dir = T.tmpdir()
  local db <close> = assert(kh.store.open(dir .. "/store"))
  local req = { source = source("s", math.random(16, 900), 3), store = db, kernels = { "s" } }
  local a = assert(kh.compile.build(req))
  T.eq(a.served_by, "server")
  local b = assert(kh.compile.build(req))
  T.eq(b.served_by, "store")
  T.eq(b.cache_hit, true)
  T.eq(b.cubin, a.cubin)
  T.eq(b.hash, a.hash)
  local rec = assert(db:get("compile-" .. a.hash))
  T.eq(rec.status, "ok")
  T.eq(rec.key, a.hash)
  T.eq(db:get_blob(rec.binary_blob), a.cubin)
  T.eq(db:get_blob(rec.source_blob), req.source)
  -- in process with the store: the same cache
  req.server = false
  local c = assert(kh.compile.build(req))
  T.eq(c.served_by, "store")
  req.source = source("s", math.random(901, 1800), 4)
  local d = assert(kh.compile.build(req))
  T.eq(d.served_by, "in-process")
  T.eq(assert(kh.compile.build(req)).served_by, "store")
  db:close()
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("khlua compile: a second process is answered from the store", function()
  local dir = T.tmpdir()
  local smem = math.random(16, 1500)
  T.write(dir .. "/k.cu", source("kk", smem, 5))
  local store = dir .. "/store"
  local out, code = T.khlua("--store", store, "compile", dir .. "/k.cu", "--json", "--out",
    dir .. "/1.cubin", "--kernel", "kk")
  T.eq(code, 0, out)
  local j1 = kh.json.decode(out)
  T.eq(j1.served_by, "server")
  local out2, code2 = T.khlua("--store", store, "compile", dir .. "/k.cu", "--json", "--out",
    dir .. "/2.cubin", "--kernel", "kk")
  T.eq(code2, 0, out2)
  local j2 = kh.json.decode(out2)
  T.eq(j2.served_by, "store")
  T.eq(j2.hash, j1.hash)
  T.eq(j2.kernels.kk.shared_static, 4 * smem)
  T.eq(T.read(dir .. "/2.cubin"), T.read(dir .. "/1.cubin"))
  -- the record, as another process reads it
  local show, code3 = T.khlua("--store", store, "store", "show", "compile-" .. j1.hash, "--json")
  T.eq(code3, 0, show)
  local rec = kh.json.decode(show)
  T.eq(rec.type, "compile")
  T.eq(rec.status, "ok")
  T.eq(rec.nvrtc, j1.nvrtc)
  T.eq(rec.arch, j1.arch)
  T.eq(#rec.options, #j1.options)
  T.eq(rec.kernels.kk.registers, j1.kernels.kk.registers)
  T.eq(rec.provenance.compiler, "nvrtc")
  T.eq(rec.provenance.served_by, "server")
  T.ok(rec.timings.compile > 0)
  T.eq(#rec.binary_blob, 32)
  T.eq(#rec.log_blob, 32)
  T.eq(#rec.source_blob, 32)
  -- --no-store: compiled again; --in-process: no server
  local j3 = kh.json.decode((T.khlua("--store", dir .. "/nostore", "compile", dir .. "/k.cu", "--json", "--no-store")))
  T.eq(j3.served_by, "server")
  T.eq(j3.hash, j1.hash)
  local j4 = kh.json.decode((T.khlua("--store", dir .. "/other", "compile", dir .. "/k.cu", "--json", "--in-process")))
  T.eq(j4.served_by, "in-process")
  T.eq(j4.hash, j1.hash)
  local none = io.open(dir .. "/nostore/data.mdb")
  T.eq(none, nil)
  os.execute("rm -rf " .. T.quote(dir))
end)

T.test("misuse raises", function()
  T.raises(function() kh.compile.service { servers = 0.5 } end, "servers must be")
  T.raises(function() kh.compile.service { servers = 65 } end, "servers must be")
  T.raises(function() kh.compile.build { source = "x", server = "yes" } end, "server")
  T.raises(function() kh.compile.build { source = "x", store = 42 } end, "kh.Store")
  local svc = kh.compile.service { servers = 1 }
  svc:close()
  svc:close()
  T.raises(function() svc:build { source = "x" } end, "closed")
  T.raises(function() kh.compile.build { source = "x", server = svc } end, "closed")
  local s2 <close> = kh.compile.service { servers = 1 }
  T.raises(function() s2:build_all { 1, 2 } end, "table")
end)
