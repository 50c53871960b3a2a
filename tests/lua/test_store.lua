-- test_store.lua: kh.store from Lua (handles, scoped transactions, errors in
-- the three tiers) and `khlua store` from the shell.  The store's mechanics
-- are exercised with profile and device records: the generic put refuses the
-- types the engine writes (test_records_engine.lua), whose writers are used
-- here where a test needs such a record.
local kh = require "kh"
local T = require "testlib"

math.randomseed(T.seed())

local function rand_bytes(n)
  local t = {}
  for i = 1, n do t[i] = string.char(math.random(0, 255)) end
  return table.concat(t)
end

local dirs = {}
local function fresh()
  local dir = T.tmpdir()
  dirs[#dirs + 1] = dir
  return dir .. "/store", dir
end

-- a verdict as kh.eval gives it, with the provenance the store requires of
-- an evaluation (solution hash, host, seeds)
local function trace(h, status, extra)
  local e = { status = status or "PASSED", khlua = { hashes = { source = h or
    kh.store.hash(rand_bytes(8)) }, host = "test-host", seeds = { math.random(1, 1 << 30) } } }
  for k, v in pairs(extra or {}) do e[k] = v end
  return { workload = { uuid = kh.store.hash(rand_bytes(8)), axes = {} }, evaluation = e }
end

-- a task and a candidate, by the engine's writers; the candidate's source blob is h
local function base(db)
  local src = "__global__ void k(float *x) { x[threadIdx.x] *= " .. math.random() .. "f; }"
  local h = assert(db:put_blob(src))
  local name = "rmsnorm_h" .. math.random(1, 4096)
  local task, cand = db:update(function(tx)
    local t = assert(tx:put_task { name = name })
    return t, assert(tx:put_candidate({ name = "s", definition = name,
      spec = { entry_point = "kernel.cu::k" }, sources = { { path = "kernel.cu", content = src } } },
      t))
  end)
  return task, cand, h, src
end

T.test("open, close is idempotent, __close and the leak count", function()
  local path = fresh()
  local before = kh.stats().live_objects
  local db = assert(kh.store.open(path))
  T.eq(kh.stats().live_objects, before + 1)
  T.match(tostring(db), "kh.Store")
  T.eq(db:path(), path)
  -- one LMDB environment per process: a second handle is refused, not silently unsafe
  local v, msg, code = kh.store.open(path)
  T.eq({ v, code }, { nil, "ESTATE" })
  T.match(msg, "already open in this process")
  T.eq(kh.stats().live_objects, before + 1)
  db:close()
  db:close()
  T.eq(kh.stats().live_objects, before)
  T.raises(function() db:get("x") end, "closed")
  do
    local db2 <close> = assert(kh.store.open(path))
    T.eq(kh.stats().live_objects, before + 1)
  end
  T.eq(kh.stats().live_objects, before)
end)

T.test("blobs: put, get, has, hash", function()
  local db <close> = assert(kh.store.open((fresh())))
  for _, n in ipairs { 0, 17, 4096, 1048576 + math.random(1, 5000) } do
    local s = rand_bytes(n)
    local h = assert(db:put_blob(s))
    T.eq(h, kh.store.hash(s))
    T.ok(db:has_blob(h))
    T.ok(db:get_blob(h) == s, "bytes differ for size " .. n)
  end
  local missing = kh.store.hash(rand_bytes(40))
  T.eq(db:has_blob(missing), false)
  local v, msg, code = db:get_blob(missing)
  T.eq(v, nil)
  T.eq(code, "ENOTFOUND")
  T.match(msg, missing)
  T.raises(function() db:get_blob("not-a-hash") end, "32 hex")
  T.raises(function() db:put_blob({}) end, "string expected")
end)

T.test("records: put, get, query newest first, replace", function()
  local db <close> = assert(kh.store.open((fresh())))
  local task, cand = base(db)
  T.match(task, "^task%-rmsnorm_h")
  local ids, passed = {}, 0
  for i = 1, 30 do
    local ok = math.random() < 0.5
    if ok then passed = passed + 1 end
    ids[i] = assert(db:put { type = "profile", tool = "ncu", task = task, candidate = cand,
      status = ok and "PASSED" or "INCORRECT_NUMERICAL", latency_ms = math.random() })
  end
  local r = db:get(ids[7])
  T.eq(r.id, ids[7])
  T.eq(r.task, task)
  T.match(r.created_at, "^%d%d%d%d%-%d%d%-%d%dT")
  local q = db:query { task = task, type = "profile", limit = 5 }
  T.eq(#q, 5)
  T.eq(q[1].id, ids[30])
  T.eq(q[5].id, ids[26])
  T.eq(#db:query { type = "profile", status = "PASSED" }, passed)
  T.eq(#db:query { candidate = cand, status = "PASSED" }, passed)
  T.eq(#db:query { since = r.created_at, type = "profile" }, 24)
  local v, msg, code = db:put { id = ids[1], type = "profile", tool = "ncu", task = task,
    candidate = cand, status = "TIMEOUT" }
  T.eq(v, nil)
  T.eq(code, "ESTATE")
  T.match(msg, "already exists")
  T.eq(db:put({ id = ids[1], type = "profile", tool = "ncu", task = task, candidate = cand,
    status = "TIMEOUT" }, { replace = true }), ids[1])
  T.eq(#db:query { type = "profile", status = "TIMEOUT" }, 1)
  T.eq(db:get(ids[1]).created_at, db:query { type = "profile", status = "TIMEOUT" }[1].created_at)
  local none, m2, c2 = db:get("evaluation-nothing")
  T.eq({ none, c2 }, { nil, "ENOTFOUND" })
  T.match(m2, "no record")
  local bad, bm, bc = db:put { type = "profile", task = task, status = "PASSED" }
  T.eq({ bad, bc }, { nil, "EINVAL" })
  T.match(bm, "tool")
  T.raises(function() db:put { type = "profile", tool = function() end } end, "function")
  T.eq(#db:verify().problems, 0)
end)

T.test("update: commits, aborts on error, tx dies with its scope", function()
  local db <close> = assert(kh.store.open((fresh())))
  local task, cand = base(db)
  local saved
  local id = db:update(function(tx)
    saved = tx
    local run = assert(tx:put_run { policy = "plateau" })
    T.eq(tx:get(run).policy, "plateau") -- sees its own writes
    local h = assert(tx:put_blob("report " .. math.random()))
    assert(tx:put { type = "profile", tool = "ncu", run = run, report_blob = h })
    T.eq(#tx:query { run = run, type = "profile" }, 1)
    return run
  end)
  T.match(id, "^run%-")
  T.eq(#db:query { run = id, type = "profile" }, 1)
  T.raises(function() saved:get(id) end, "outside its db:update/db:view scope")
  T.match(tostring(saved), "ended")

  -- an error inside fn aborts everything fn wrote, and is re-raised
  local before = #db:query { type = "run" }
  T.raises(function()
    db:update(function(tx)
      tx:put_run { policy = "doomed" }
      error("boom")
    end)
  end, "boom")
  T.eq(#db:query { type = "run" }, before)

  -- a failed write is sticky: the update returns nil, msg, code and keeps nothing
  local ok, msg, code = db:update(function(tx)
    assert(tx:put_run { policy = "half" })
    local v = tx:put { type = "profile" } -- invalid: no tool
    T.eq(v, nil)
    local w, _, wc = tx:put_run { policy = "after" }
    T.eq({ w, wc }, { nil, "EINVAL" })
  end)
  T.eq({ ok, code }, { nil, "EINVAL" })
  T.match(msg, "tool")
  T.eq(#db:query { type = "run" }, before)

  -- nesting and one-call methods inside a scope are misuse
  db:update(function(tx)
    T.raises(function() db:update(function() end) end, "inside another")
    T.raises(function() db:get(cand) end, "use the tx")
    T.raises(function() db:close() end, "cannot close")
  end)
  db:view(function(tx)
    T.eq(tx:get(task).type, "task")
    local v, m = tx:put { type = "profile", tool = "x" }
    T.eq(v, nil)
    T.match(m, "read%-only")
  end)
end)

T.test("a transaction far larger than the map comes through whole", function()
  local db <close> = assert(kh.store.open((fresh()), { map_size = 128 * 1024 }))
  local blobs = {}
  local ids = db:update(function(tx)
    local out = {}
    for i = 1, 12 do
      blobs[i] = rand_bytes(300000 + math.random(1, 1000))
      local h = assert(tx:put_blob(blobs[i]))
      out[i] = assert(tx:put { type = "profile", tool = "ncu", report_blob = h,
        note = kh.store.hash("report " .. i) })
    end
    return out
  end)
  for i = 1, 12 do
    local r = db:get(ids[i])
    T.ok(db:get_blob(r.report_blob) == blobs[i])
  end
  T.ok(db:stats().map_size > 12 * 300000)
end)

T.test("an API key is never archived", function()
  local path = fresh()
  local key = "sk-" .. kh.store.hash(rand_bytes(16))
  local script = path .. ".lua"
  T.write(script, string.format([[
local kh = require "kh"
local db = assert(kh.store.open(%q))
local v, msg, code = db:put { type = "profile", tool = "ncu", note = "Bearer %s" }
print(v, code, msg)
print(db:put_blob("x-api-key: %s"))
print(db:put { type = "profile", tool = "ncu", note = "p2" } ~= nil)
db:close()
]], path, key, key))
  local p = assert(io.popen("ANTHROPIC_API_KEY=" .. T.quote(key) .. " " ..
    T.quote(os.getenv("KHLUA_BIN") or arg[-1]) .. " " .. T.quote(script) .. " 2>&1"))
  local out = p:read("a")
  p:close()
  T.match(out, "nil\tEINVAL\trefusing")
  T.match(out, "ANTHROPIC_API_KEY")
  T.ok(not out:find(key, 1, true), "the key itself must not appear in messages")
  T.match(out, "true\n$")
end)

T.test("khlua store: ls, show, cat, stats, verify, export, import, gc, backup", function()
  local path, dir = fresh()
  local task, cand, h, src
  do
    local db <close> = assert(kh.store.open(path))
    task, cand, h, src = base(db)
    for i = 1, 3 do
      local t = trace(h, "PASSED", { log = "", environment = { hardware = "H200", libs = {} },
        performance = { latency_ms = i / 10, reference_latency_ms = i, speedup_factor = 10.0 } })
      t.evaluation.khlua.protocol = "official"
      t.workload = { uuid = kh.store.hash(tostring(i)), axes = { batch_size = i } }
      assert(db:update(function(tx)
        return tx:put_evaluation(t, { task = task, candidate = cand, definition = task:sub(6),
          solution = "sol_" .. i })
      end))
    end
    assert(db:put_blob(rand_bytes(1000))) -- unreferenced
  end
  local out, code = T.khlua("store", "ls", "--store", path, "--type", "evaluation", "--json")
  T.eq(code, 0)
  local ls = kh.json.decode(out:match("^(%b[])"))
  T.eq(#ls, 3)
  T.eq(ls[1].solution, "sol_3")
  out, code = T.khlua("--store", path, "store", "ls", "--task", task:sub(6), "--limit", "2")
  T.eq(code, 0)
  T.match(out, "2 records")
  out, code = T.khlua("store", "show", cand, "--store", path)
  T.eq(code, 0)
  T.eq(kh.json.decode(out).source_blob, h)
  out, code = T.khlua("store", "cat", h, "--store", path)
  T.eq({ out, code }, { src, 0 })
  -- a chunked blob streams out whole
  local chunk = rand_bytes(4096)
  local bigs = chunk:rep(300) .. rand_bytes(33)
  local bh
  do
    local db <close> = assert(kh.store.open(path))
    bh = assert(db:put_blob(bigs))
  end
  out, code = T.khlua("store", "cat", bh, "--store", path)
  T.eq(code, 0)
  T.ok(out == bigs, "cat of a 1.2 MB blob differs")
  -- $KHLUA_STORE names the store when no --store is given
  local p = assert(io.popen("KHLUA_STORE=" .. T.quote(path) .. " " ..
    T.quote(os.getenv("KHLUA_BIN") or arg[-1]) .. " store show " .. T.quote(cand) .. " 2>&1"))
  out = p:read("a")
  p:close()
  T.ok(out:find(cand, 1, true), out)
  out, code = T.khlua("store", "stats", "--json", "--store", path)
  T.eq(code, 0)
  T.eq(kh.json.decode(out).records.evaluation, 3)
  out, code = T.khlua("store", "verify", "--store", path)
  T.eq(code, 0)
  T.match(out, ": ok")
  out, code = T.khlua("store", "export", "--format", "fib-trace", "--task", task, "--store", path)
  T.eq(code, 0)
  local n = 0
  for line in out:gmatch("[^\n]+") do
    if line:sub(1, 1) == "{" then
      local tr = kh.json.decode(line)
      n = n + 1
      T.eq(tr.definition, task:sub(6))
      T.eq(tr.evaluation.status, "PASSED")
      T.eq(tr.solution, "sol_" .. n) -- oldest first
    end
  end
  T.eq(n, 3)
  local file = dir .. "/all.jsonl"
  out, code = T.khlua("store", "export", "--format", "jsonl", "--output", file, "--store", path)
  T.eq(code, 0)
  out, code = T.khlua("store", "import", file, "--store", dir .. "/copy")
  T.eq(code, 0)
  -- task, candidate, 3 evaluations; the source, the candidate's canonical form, the
  -- unreferenced blob and the chunked one
  T.match(out, "imported 5 records and 4 blobs")
  out, code = T.khlua("store", "gc", "--grace", "0", "--store", path)
  T.eq(code, 0)
  T.match(out, "deleted 2 ")
  out, code = T.khlua("store", "backup", dir .. "/bak", "--store", path)
  T.eq(code, 0)
  out, code = T.khlua("store", "verify", "--store", dir .. "/bak")
  T.eq(code, 0)
  -- usage errors and missing things
  T.eq(select(2, T.khlua("store", "frobnicate")), 2)
  T.eq(select(2, T.khlua("store", "export", "--store", path)), 2)
  T.eq(select(2, T.khlua("store", "cat", "nothex", "--store", path)), 2)
  out, code = T.khlua("store", "ls", "--store", dir .. "/nowhere")
  T.eq(code, 1)
  T.match(out, "no store at")
  out, code = T.khlua("store", "show", "run-none", "--store", path)
  T.eq(code, 1)
  T.match(out, "no record")
end)

T.test("a tx kept past its scope cannot be used, and a store in another process reads", function()
  local path = fresh()
  local db <close> = assert(kh.store.open(path))
  local _, cand = base(db)
  -- a second process reads while this one holds the store open
  local out, code = T.khlua("store", "show", cand, "--store", path)
  T.eq(code, 0)
  T.ok(out:find(cand, 1, true))
  local leaked
  db:view(function(tx) leaked = tx end)
  T.raises(function() leaked:put { type = "run", policy = "x" } end, "outside")
  T.raises(function() leaked:query {} end, "outside")
end)

T.test("provenance: a record without what its type must carry is refused, naming it", function()
  local db <close> = assert(kh.store.open((fresh())))
  local task, cand, h = base(db)
  local function put_eval(t)
    return db:update(function(tx)
      return tx:put_evaluation(t, { task = task, candidate = cand, definition = task:sub(6) })
    end)
  end
  local unseeded = trace(h)
  unseeded.evaluation.khlua.seeds = nil
  local v, msg, code = put_eval(unseeded)
  T.eq({ v, code }, { nil, "EINVAL" })
  T.match(msg, "the seeds")
  T.match(msg, "provenance%.seeds")
  v, msg, code = db:put { type = "compile", status = "ok", source_blob = h,
    provenance = { compiler = "nvrtc" } }
  T.eq({ v, code }, { nil, "EINVAL" })
  T.match(msg, "compiler options %('provenance%.options'%)")
  local function put_call(r)
    return db:update(function(tx) return tx:put_llm_call(r) end)
  end
  v, msg = put_call { ok = true, provider = "replay", model = "m" }
  T.eq(v, nil)
  T.match(msg, "fingerprint")
  -- with it, each is taken
  T.match(assert(put_eval(trace(h))), "^evaluation%-")
  T.match(assert(db:put { type = "compile", status = "ok", source_blob = h,
    provenance = { compiler = "nvrtc", options = { "-O" .. math.random(0, 3) } } }), "^compile%-")
  T.match(assert(put_call { ok = true, provider = "replay", model = "m", fingerprint = h:sub(1, 16) }),
    "^llm_call%-")
end)

T.test("put_many and bulk: many records per call, one sync per bulk", function()
  local db <close> = assert(kh.store.open((fresh())))
  local task, cand, h = base(db)
  local n = math.random(2, 200)
  local recs = {}
  for i = 1, n do
    recs[i] = { type = "profile", tool = "ncu", task = task, candidate = cand, status = "PASSED",
      index = i, report_blob = h }
  end
  local out = db:bulk(function(d)
    T.eq(d, db)
    T.raises(function() db:bulk(function() end) end, "inside another db:bulk")
    local ids = assert(d:put_many(recs))
    local more = d:update(function(tx)
      return assert(tx:put_many { { type = "device", gpu_uuid = "GPU-p" } })
    end)
    return ids, more
  end)
  T.eq(#out, n)
  for i = 2, n do T.ok(out[i] > out[i - 1], "ids in order") end
  T.eq(db:get(out[n]).index, n)
  -- all or none, and the message says which record
  recs[#recs + 1] = { type = "profile", task = task, candidate = cand, status = "PASSED" }
  local v, msg, code = db:put_many(recs)
  T.eq({ v, code }, { nil, "EINVAL" })
  T.match(msg, "record " .. (n + 1) .. " of " .. (n + 1))
  T.eq(#db:query { type = "profile" }, n)
  T.raises(function() db:put_many { 1, 2 } end, "record 1 is a number")
  T.raises(function() db:put_many "x" end, "table expected")
  -- an error in fn ends the bulk (synced) and is re-raised
  T.raises(function() db:bulk(function() assert(db:put { type = "device", gpu_uuid = "GPU-q" }); error("boom") end) end, "boom")
  T.eq(#db:query { type = "device" }, 2)
  T.eq(#db:verify().problems, 0)
end)

T.test("clean up the temporary stores", function()
  for _, d in ipairs(dirs) do
    T.ok(d:match("^/.*tmp"), d)
    os.execute("rm -rf " .. T.quote(d))
  end
end)
