-- test_llm_store.lua: model calls in the artifact store, offline: every
-- finished call becomes an llm_call record (kh.llm.record_to, khlua llm ask),
-- a recorded run replays deterministically from the store (by prompt
-- fingerprint, else in recorded order), replays are marked, and keys never
-- reach the store.  Calls come from the command provider (sh) and from
-- recorded streams; net_llm.lua does the same against the mock HTTP server.
local T = require "testlib"
local kh = require "kh"

local function rm(path) os.execute("rm -rf " .. T.quote(path)) end

local function token() return string.format("%08x%08x", math.random(0, 0x7fffffff), math.random(0, 0x7fffffff)) end

-- An agent that answers with a fixed random line (and reads its prompt).
local function agent_req(prompt, answer, over)
  local r = { provider = "command", messages = { { role = "user", content = prompt } },
    command = { argv = { "sh", "-c", "cat > /dev/null; printf '%s\\n' " .. T.quote(answer) },
      timeout = 10 } }
  for k, v in pairs(over or {}) do r[k] = v end
  return r
end

local workspaces = {}
local function chat(req)
  local r, msg = kh.llm.chat(req)
  T.ok(r, msg)
  if r.command then workspaces[#workspaces + 1] = r.command.workspace end
  return r
end

local function open_store()
  local dir = T.tmpdir()
  local db = assert(kh.store.open(dir .. "/s", { nosync = true }))
  return db, dir .. "/s", dir
end

-- Record a run of agent calls: prompts[i] answered answers[i]; returns the run id and results.
local function record_run(db, prompts, answers)
  local run = assert(db:update(function(tx) return tx:put_run { policy = "test_llm_store" } end))
  assert(kh.llm.record_to(db, { run = run }))
  local rs = {}
  for i, p in ipairs(prompts) do rs[i] = chat(agent_req(p, answers[i])) end
  return run, rs
end

T.test("every finished call becomes an llm_call record linked to its run", function()
  local db, _, dir = open_store()
  local prompts, answers = {}, {}
  for i = 1, 3 do prompts[i], answers[i] = "prompt " .. token(), "answer " .. token() end
  local run, rs = record_run(db, prompts, answers)
  local ids = {}
  for i, r in ipairs(rs) do
    T.eq(r.text, answers[i] .. "\n")
    T.eq(r.store_error, nil)
    T.match(r.store_id, "^llm_call%-")
    local rec = assert(db:get(r.store_id))
    T.eq(rec.type, "llm_call")
    T.eq(rec.run, run)
    T.eq(rec.status, "ok")
    T.eq(rec.ok, true)
    T.eq(rec.replay, false)
    T.eq(rec.model, "command:sh", "an agent call is filed under its command")
    T.eq(rec.ticket, r.ticket)
    T.eq(rec.text, r.text)
    T.eq(rec.fingerprint, r.fingerprint)
    T.ok(rec.latency_s > 0 and rec.first_token_s > 0 and rec.first_token_s <= rec.latency_s)
    T.eq(db:get_blob(rec.response_blob), r.raw, "the raw output, byte for byte")
    local req = kh.json.decode(db:get_blob(rec.request_blob))
    T.eq(req.messages[1].content, prompts[i], "the request is kept")
    T.eq(rec.request, nil, "in a blob, not inline")
    ids[#ids + 1] = r.store_id
  end
  -- the run -> llm_calls index, newest first
  local calls = assert(db:query { run = run, type = "llm_call" })
  T.eq(#calls, 3)
  for i = 1, 3 do T.eq(calls[i].id, ids[4 - i]) end
  -- a failed call is recorded too, with its error kind as the status
  local r, msg, code, rec = kh.llm.chat({ provider = "command", messages = { { role = "user", content = "x" } },
    command = { argv = { "sh", "-c", "exit 3" } }, run = run })
  T.eq(r, nil)
  T.match(msg, "exit 3")
  workspaces[#workspaces + 1] = rec.command.workspace
  local stored = assert(db:get(rec.store_id))
  T.eq(stored.status, "command")
  T.eq(stored.ok, false)
  T.eq(stored.error.kind, "command")
  T.eq(#assert(db:query { run = run, type = "llm_call", status = "command" }), 1)
  T.eq(assert(db:verify()).problems, {})
  kh.llm.record_to(nil)
  -- detached: calls are no longer recorded
  local after = chat(agent_req("p", "a"))
  T.eq(after.store_id, nil)
  T.eq(#assert(db:query { type = "llm_call" }), 4)
  db:close()
  rm(dir)
end)

T.test("record_to checks its arguments; a closed store shows on the result", function()
  local db, _, dir = open_store()
  T.raises(function() kh.llm.record_to(42) end, "kh.Store expected")
  T.raises(function() kh.llm.record_to(db, { run = 7 }) end, "run must be a run id")
  T.raises(function() kh.llm.record_to(db, { run = "round-1" }) end, "run must be a run id")
  local ok, msg, code = kh.llm.record_to(db, { run = "run-NOSUCH" .. token() })
  T.eq(ok, nil)
  T.eq(code, "ENOTFOUND")
  T.match(msg, "run%-NOSUCH")
  local t, m2 = kh.llm.submit(agent_req("p", "a", { run = "candidate-1" }))
  T.eq(t, nil)
  T.match(m2, "request.run must be a run id")
  assert(kh.llm.record_to(db))
  db:close()
  local r = chat(agent_req("p", "a"))
  T.eq(r.store_id, nil)
  T.match(r.store_error, "closed")
  -- a request naming a run that is not in the store: the result says why
  local db2 = assert(kh.store.open(dir .. "/s"))
  assert(kh.llm.record_to(db2))
  r = chat(agent_req("p", "a", { run = "run-NOSUCH" }))
  T.match(r.store_error, "run%-NOSUCH")
  -- a call that finishes inside a transaction on the same store cannot nest a write
  db2:update(function()
    r = chat(agent_req("p", "a"))
  end)
  T.match(r.store_error, "transaction is already open")
  kh.llm.record_to(nil)
  db2:close()
  rm(dir)
end)

-- Replay prompts from run in a fresh khlua; returns the decoded list of results.
local function replay_in_child(path, run, prompts)
  local script = string.format([[
    local kh = require "kh"
    local db = assert(kh.store.open(%q))
    assert(kh.llm.record_to(db))
    local out = {}
    for _, p in ipairs(kh.json.decode(%q)) do
      local r = assert(kh.llm.chat { provider = "replay", replay = { store = true, run = %q },
        messages = { { role = "user", content = p } } })
      out[#out + 1] = { text = r.text, replay = r.replay, replay_of = r.replay_of,
        store_id = r.store_id, usage = r.usage }
    end
    db:close()
    print(kh.json.encode(out))]], path, kh.json.encode(prompts), run)
  local out, code = T.khlua("-e", script)
  T.eq(code, 0, out)
  return kh.json.decode(out)
end

T.test("a recorded run replays deterministically, marked as replay", function()
  local db, path, dir = open_store()
  -- p[4] is asked twice with different answers (n samples of one prompt)
  local p, a = {}, {}
  for i = 1, 4 do p[i], a[i] = "prompt " .. token(), "answer " .. token() end
  p[5], a[5] = p[4], "answer " .. token()
  local run, rs = record_run(db, p, a)
  kh.llm.record_to(nil)
  db:close()
  local unknown1, unknown2 = "never asked " .. token(), "never asked " .. token()
  local asks = { p[3], p[1], unknown1, p[4], unknown2, p[4], p[4], p[2] }
  local want = { a[3], a[1], a[1], a[4], a[2], a[5], a[4], a[2] }
  local from = { rs[3], rs[1], rs[1], rs[4], rs[2], rs[5], rs[4], rs[2] }
  local one = replay_in_child(path, run, asks)
  local two = replay_in_child(path, run, asks)
  T.eq(#one, #asks)
  for i = 1, #asks do
    T.eq(one[i].text, want[i] .. "\n", "ask " .. i)
    T.eq(two[i].text, one[i].text, "the same in a second process")
    T.eq(one[i].replay, true)
    T.eq(one[i].replay_of, from[i].store_id)
  end
  -- the replies are in the store as replays; a replay of the run ignores them
  db = assert(kh.store.open(path))
  for i = 1, #asks do
    local rec = assert(db:get(one[i].store_id))
    T.eq(rec.replay, true)
    T.eq(rec.replay_of, from[i].store_id)
    T.eq(rec.replay_run, run)
    T.eq(rec.provider, "replay")
    T.eq(rec.run, nil, "not filed under the replayed run")
    T.eq(rec.response_blob, assert(db:get(from[i].store_id)).response_blob, "the same bytes")
  end
  T.eq(#assert(db:query { type = "llm_call" }), 5 + 2 * #asks)
  -- a run without live calls, and no store at all
  local empty = assert(db:update(function(tx) return tx:put_run { policy = "empty" } end))
  assert(kh.llm.record_to(db))
  local r, msg, code = kh.llm.chat { provider = "replay", replay = { store = true, run = empty },
    messages = { { role = "user", content = "x" } } }
  T.eq(r, nil)
  T.eq(code, "ENOTFOUND")
  T.match(msg, "has no successful live model calls")
  kh.llm.record_to(nil)
  r, msg = kh.llm.chat { provider = "replay", replay = { store = true, run = run },
    messages = { { role = "user", content = "x" } } }
  T.eq(r, nil)
  T.match(msg, "needs a store")
  local t, m2 = kh.llm.submit { provider = "replay", replay = { store = true },
    messages = { { role = "user", content = "x" } } }
  T.eq(t, nil)
  T.match(m2, "run = RUN")
  t, m2 = kh.llm.submit { provider = "replay", replay = { dir = "/tmp", run = run },
    messages = { { role = "user", content = "x" } } }
  T.eq(t, nil)
  T.match(m2, "not both")
  db:close()
  rm(dir)
end)

-- A chat-dialect stream as a server sends it, in random pieces.
local function chat_stream(text, n_in)
  local ev = {}
  local i = 1
  while i <= #text do
    local n = math.random(1, 6)
    ev[#ev + 1] = "data: " .. kh.json.encode({ choices = { { index = 0, delta = { content = text:sub(i, i + n - 1) } } } })
    i = i + n
  end
  ev[#ev + 1] = 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
  ev[#ev + 1] = "data: " .. kh.json.encode({ choices = kh.json.array(),
    usage = { prompt_tokens = n_in, completion_tokens = #text } })
  ev[#ev + 1] = "data: [DONE]"
  return table.concat(ev, "\n\n") .. "\n\n"
end

T.test("a recorded HTTP stream is parsed again on replay", function()
  local db, _, dir = open_store()
  local run = assert(db:update(function(tx) return tx:put_run { policy = "stream" } end))
  local texts, n_in = {}, {}
  for i = 1, 2 do
    texts[i], n_in[i] = "streamed " .. token() .. " reply", math.random(10, 5000)
    -- a compat call's result as the client gives it, its text deliberately absent: the
    -- answer must come from the stream the engine's writer stores as its response_blob
    local id = assert(db:update(function(tx)
      return tx:put_llm_call({ model = "m", ok = true, replay = false, provider = "compat",
        dialect = "chat", fingerprint = "synthetic-" .. i,
        raw = chat_stream(texts[i], n_in[i]) }, { run = run })
    end))
    T.ok(db:get(id).response_blob)
  end
  assert(kh.llm.record_to(db))
  for i = 1, 2 do
    local r = chat { provider = "replay", replay = { store = true, run = run },
      messages = { { role = "user", content = "any " .. token() } } }
    T.eq(r.text, texts[i])
    T.eq(r.usage.input, n_in[i])
    T.eq(r.usage.output, #texts[i])
    T.eq(r.recorded_dialect, "chat")
    T.eq(r.finish_reason, "stop")
    T.eq(r.model, "m", "the recorded model")
  end
  -- a damaged stream is an error, not a wrong answer
  local run2 = assert(db:update(function(tx) return tx:put_run { policy = "broken" } end))
  local cut = chat_stream("cut short", 3)
  assert(db:update(function(tx)
    return tx:put_llm_call({ model = "m", ok = true, provider = "compat", dialect = "chat",
      fingerprint = "synthetic-cut", raw = cut:sub(1, #cut // 2) }, { run = run2 })
  end))
  local r, msg, code = kh.llm.chat { provider = "replay", replay = { store = true, run = run2 },
    messages = { { role = "user", content = "x" } } }
  T.eq(r, nil)
  T.eq(code, "EPARSE")
  T.match(msg, "did not parse to its end")
  kh.llm.record_to(nil)
  db:close()
  rm(dir)
end)

T.test("keys are redacted before the store sees them, and never stored", function()
  local dir = T.tmpdir()
  local path = dir .. "/s"
  local key = "sk-khlua-" .. token() .. token()
  -- an agent that prints the key it finds in its environment
  local script = string.format([[
    local kh = require "kh"
    local db = assert(kh.store.open(%q))
    local ok, msg = db:update(function(tx) return tx:put_run { policy = os.getenv("KHLUA_API_KEY") } end)
    assert(not ok and msg:find("KHLUA_API_KEY", 1, true), "the store refuses the key itself")
    assert(kh.llm.record_to(db))
    local r = assert(kh.llm.chat { provider = "command",
      messages = { { role = "user", content = "print your key" } },
      command = { argv = { "sh", "-c", "echo key=$KHLUA_API_KEY; echo $KHLUA_API_KEY > k.txt" } } })
    print(kh.json.encode { text = r.text, store_id = r.store_id, store_error = r.store_error,
      ws = r.command.workspace, file = r.files[1].content })
    db:close()]], path)
  local p = assert(io.popen("KHLUA_API_KEY=" .. key .. " " .. T.quote(os.getenv("KHLUA_BIN") or arg[-1])
    .. " -e " .. T.quote(script) .. " 2>&1"))
  local out = p:read("a")
  local _, _, code = p:close()
  T.eq(code, 0, out)
  local j = kh.json.decode(out)
  workspaces[#workspaces + 1] = j.ws
  T.eq(j.store_error, nil, "the client redacted first, so the store did not refuse")
  T.match(j.store_id, "^llm_call%-")
  T.eq(j.text, "key=" .. ("*"):rep(#key) .. "\n")
  T.eq(j.file, ("*"):rep(#key) .. "\n")
  -- no byte of the store holds the key: the files as they are, and every blob decompressed
  local h = assert(io.popen("cat " .. T.quote(path) .. "/*"))
  local bytes = h:read("a")
  h:close()
  T.ok(#bytes > 0)
  T.ok(not bytes:find(key, 1, true), "key in the store's files")
  local db = assert(kh.store.open(path, { readonly = true }))
  local rec = assert(db:get(j.store_id))
  T.ok(not kh.json.encode(rec):find(key, 1, true))
  for _, f in ipairs({ "request_blob", "response_blob" }) do
    T.ok(rec[f], f)
    T.ok(not db:get_blob(rec[f]):find(key, 1, true), "key in " .. f)
  end
  T.match(db:get_blob(rec.response_blob), "key=%*+")
  -- the agent's file went to a blob, redacted like the rest
  T.eq(rec.files[1].path, "k.txt")
  T.eq(rec.files[1].content, nil)
  T.eq(db:get_blob(rec.files[1].content_blob), ("*"):rep(#key) .. "\n")
  db:close()
  rm(dir)
end)

T.test("khlua llm ask records to the store and replays a run from it", function()
  local dir = T.tmpdir()
  local path = dir .. "/s"
  local db = assert(kh.store.open(path))
  local run = assert(db:update(function(tx) return tx:put_run { policy = "cli" } end))
  db:close()
  local p1, a1, p2, a2 = "q " .. token(), "a " .. token(), "q " .. token(), "a " .. token()
  local out, code = T.khlua("llm", "ask", "--store", path, "--run", run, "--provider", "command",
    "--json", p1, "--", "sh", "-c", "cat >/dev/null; echo " .. a1)
  T.eq(code, 0, out)
  local j = kh.json.decode(out)
  T.match(j.store_id, "^llm_call%-")
  workspaces[#workspaces + 1] = j.command.workspace
  out, code = T.khlua("--store", path, "llm", "ask", "--run", run, "--provider", "command", p2,
    "--", "sh", "-c", "echo " .. a2)
  T.eq(code, 0, out)
  workspaces[#workspaces + 1] = out:match("workspace is (%S+)%]")
  out, code = T.khlua("llm", "ask", "--store", path, "--replay-run", run, p2)
  T.eq(code, 0, out)
  T.match(out, "^" .. a2 .. "\n")
  T.match(out, "replayed from llm_call%-%w+ of " .. run:gsub("%-", "%%-") .. " in the store, not a live model")
  out, code = T.khlua("llm", "ask", "--store", path, "--replay-run", run, "--json", p1)
  T.eq(code, 0, out)
  j = kh.json.decode(out)
  T.eq(j.text, a1 .. "\n")
  T.eq(j.replay, true)
  T.eq(j.replay_run, run)
  T.match(j.store_id, "^llm_call%-")
  db = assert(kh.store.open(path))
  T.eq(#assert(db:query { run = run, type = "llm_call" }), 2)
  T.eq(assert(db:get(j.store_id)).replay, true)
  local n = #assert(db:query { type = "llm_call" })
  T.eq(n, 4, "two calls and two replays")
  db:close()
  -- --no-store reads the run but writes nothing
  out, code = T.khlua("llm", "ask", "--store", path, "--no-store", "--replay-run", run, "--json", p1)
  T.eq(code, 0, out)
  T.eq(kh.json.decode(out).store_id, nil)
  db = assert(kh.store.open(path))
  T.eq(#assert(db:query { type = "llm_call" }), n)
  db:close()
  -- usage errors, and a store that cannot be opened
  out, code = T.khlua("llm", "ask", "--replay-run", run, "--provider", "compat", "x")
  T.eq(code, 2)
  T.match(out, "%-%-replay%-run goes with %-%-provider replay")
  out, code = T.khlua("llm", "ask", "--no-store", "--run", run, "x")
  T.eq(code, 2)
  -- replay (the default provider) has no default folder of replies: a product
  -- default does not point into the source tree's tests
  out, code = T.khlua_env({ KHLUA_REPLAY_DIR = "" }, "llm", "ask", "--no-store", "x")
  T.eq(code, 2, out)
  T.match(out, "%-%-provider replay %(the default%) answers from recorded replies: give "
    .. "%-%-replay%-dir DIR %(or set KHLUA_REPLAY_DIR%) or %-%-replay%-run RUN")
  T.write(dir .. "/file", "not a store")
  out, code = T.khlua("llm", "ask", "--store", dir .. "/file", "--replay-dir", dir, "x")
  T.eq(code, 1)
  T.match(out, "is a file, not a store")
  T.match(out, "%-%-no%-store")
  rm(dir)
end)

T.test("clean up agent workspaces", function()
  for _, w in ipairs(workspaces) do
    if w and w:find("khlua%-agent%-") then rm(w) end
  end
end)
