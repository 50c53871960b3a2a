-- net_llm.lua: kh.llm against the loopback mock server (tests/mock_llm.py):
-- the three dialects, retries and their timing, quota stops, stream faults,
-- timeouts, cancellation, the breaker, Ctrl-C, transcripts in the store and
-- replay from them, and that no key is ever recorded or stored.  Only 127.0.0.1; backoff caps are short so the file runs in
-- seconds.
local T = require "testlib"
local kh = require "kh"
local mock = require "mockllm"

local srv, why = mock.start(120)
if not srv then T.skip_all(why) end

local KHLUA = os.getenv("KHLUA_BIN") or arg[-1]
-- khlua llm ask records into a store: a scratch one, not .khlua/ in the build tree
local CLI_STORE_DIR = T.tmpdir()
local CLI_STORE = CLI_STORE_DIR .. "/store"
local FAST = { max_retries = 3, backoff_base = 0.05, backoff_cap = 0.2, retry_after_cap = 5,
  connect_timeout = 2, idle_timeout = 3, total_timeout = 20 }
local function opts(over)
  local o = {}
  for k, v in pairs(FAST) do o[k] = v end
  for k, v in pairs(over or {}) do o[k] = v end
  return o
end

local tagn = 0
local function tag() tagn = tagn + 1; return "t" .. tagn .. "x" .. math.random(1, 1 << 30) end

local dialects = {
  { provider = "compat", d = "chat" },
  { provider = "openai-responses", d = "responses", key = "OPENAI_API_KEY" },
  { provider = "anthropic", d = "anthropic", key = "ANTHROPIC_API_KEY" },
}
-- openai-responses and anthropic need a key in the environment; the tests run
-- them through api_key_env pointing at a variable every shell has.
local function req(d, base, prompt, over)
  local r = { provider = d.provider, model = "mock-model", base_url = base,
    messages = { { role = "user", content = prompt } },
    options = opts(over and over.options) }
  if d.key then r.options.api_key_env = "HOME" end
  for k, v in pairs(over or {}) do if k ~= "options" then r[k] = v end end
  return r
end

local function random_prompt()
  local words = { "tile", "warp", "smem", "bank", "fp8", "gemm", "decode", "mask" }
  local t = {}
  for i = 1, math.random(3, 9) do t[i] = words[math.random(#words)] end
  return table.concat(t, " ") .. " " .. math.random(1, 1e6)
end

local function chat_ok(r)
  local res, msg = kh.llm.chat(r)
  T.ok(res, msg)
  return res
end

T.test("each dialect streams, normalizes usage and records a transcript", function()
  for _, d in ipairs(dialects) do
    local prompt = random_prompt()
    local t0 = kh.time.now()
    local res = chat_ok(req(d, srv.base(), prompt))
    local want = "Hello from " .. d.d .. ": " .. prompt
    T.eq(res.text, want, d.d)
    T.eq(res.ok, true)
    T.eq(res.replay, false)
    T.eq(res.dialect, d.d)
    T.eq(res.finish_reason ~= nil, true)
    T.eq(res.truncated, false)
    -- the mock counts characters as tokens: input = prompt + 10 in every dialect
    T.eq(res.usage.input, #prompt + 10, d.d .. " input")
    T.eq(res.usage.output, #want, d.d .. " output")
    T.eq(res.usage.cache_read, 5)
    T.eq(res.usage.cache_write, d.d == "anthropic" and 2 or 0)
    T.eq(res.usage.reasoning, d.d == "anthropic" and 0 or 3)
    T.eq(res.usage.total, res.usage.input + res.usage.output)
    T.eq(res.request_id, "req_mock_1")
    T.ok(res.response_headers["x-ratelimit-remaining-requests"] or
      res.response_headers["anthropic-ratelimit-requests-remaining"])
    T.eq(res.request.stream, true)
    T.eq(res.request.temperature, nil, "sampling parameters are omitted unless set")
    local last = { chat = "data: [DONE]", responses = "response.completed", anthropic = "message_stop" }
    T.ok(res.raw:find(last[d.d], 1, true), "raw stream kept to its end")
    T.eq(res.raw_bytes, #res.raw)
    T.ok(res.first_token_s > 0 and res.first_token_s <= res.latency_s)
    T.ok(res.latency_s <= kh.time.now() - t0 + 1e-3)
    T.eq(res.retries, 0)
  end
end)

T.test("many calls in flight on one thread come back by ticket", function()
  local want = {}
  for i = 1, 24 do
    local d = dialects[(i % 3) + 1]
    local p = random_prompt()
    local fault = (i % 4 == 0) and "bytewise" or nil
    local t = assert(kh.llm.submit(req(d, srv.base(fault, 0, tag()), p)))
    want[t] = "Hello from " .. d.d .. ": " .. p
  end
  T.eq(kh.llm.pending(), 24)
  local got, t0 = 0, kh.time.now()
  while got < 24 and kh.time.now() - t0 < 20 do
    for _, r in ipairs(assert(kh.llm.poll(1))) do
      T.eq(r.ok, true, r.error and r.error.message)
      T.eq(r.text, want[r.ticket])
      want[r.ticket] = nil
      got = got + 1
    end
  end
  T.eq(got, 24)
  T.eq(kh.llm.pending(), 0)
end)

T.test("429 with retry-after waits that long, then succeeds", function()
  local t0 = kh.time.now()
  local res = chat_ok(req(dialects[1], srv.base("429ra", 1, tag()), "x"))
  local el = kh.time.now() - t0
  T.eq(res.retries, 1)
  T.eq(res.attempts[1].http_status, 429)
  T.near(res.attempts[1].delay_s, 1.0, 1e-9)
  T.ok(el >= 1.0 and el < 3, "elapsed " .. el)
end)

T.test("retry-after-ms wins over retry-after", function()
  local t0 = kh.time.now()
  local res = chat_ok(req(dialects[3], srv.base("429ms", 2, tag()), "x",
    { options = { retry_after_cap = 60 } }))
  local el = kh.time.now() - t0
  T.eq(res.retries, 2)
  T.near(res.attempts[1].delay_s, 0.3, 1e-9)
  T.near(res.attempts[2].delay_s, 0.3, 1e-9)
  T.ok(el >= 0.6 and el < 3, "elapsed " .. el)
end)

T.test("a retry-after above the cap falls back to jittered backoff", function()
  local res = chat_ok(req(dialects[1], srv.base("429ra", 1, tag()), "x",
    { options = { retry_after_cap = 0.5 } }))
  T.eq(res.retries, 1)
  T.ok(res.attempts[1].delay_s <= 0.05 + 1e-9, "backoff base 0.05, got " .. res.attempts[1].delay_s)
end)

T.test("500, 502, 503 'Loading model' and 529 are retried with bounded backoff", function()
  for _, f in ipairs({ "500", "502", "503load", "529" }) do
    local d = f == "529" and dialects[3] or dialects[1]
    local res = chat_ok(req(d, srv.base(f, 2, tag()), "retry me"))
    T.eq(res.retries, 2, f)
    T.eq(res.text, "Hello from " .. d.d .. ": retry me")
    for i = 1, 2 do
      T.eq(res.attempts[i].http_status, tonumber(f:match("^%d+")), f)
      T.ok(res.attempts[i].delay_s >= 0 and res.attempts[i].delay_s <= 0.05 * 2 ^ (i - 1) + 1e-9,
        "full jitter within base * 2^n")
    end
  end
end)

T.test("a server that keeps failing is given up on after max_retries", function()
  local res, msg, code, rec = kh.llm.chat(req(dialects[1], srv.base("500", 0, tag()), "x",
    { options = { max_retries = 2 } }))
  T.eq(res, nil)
  T.eq(code, "ENET")
  T.match(msg, "gave up after 3 attempts")
  T.eq(rec.error.kind, "retries")
  T.eq(#rec.attempts, 3)
  T.eq(rec.retries, 2)
end)

T.test("a quota 429 is never retried and stops the provider", function()
  for _, d in ipairs({ dialects[1], dialects[3] }) do
    local base = srv.base("quota", 0, tag())
    local res, msg, _, rec = kh.llm.chat(req(d, base, "x"))
    T.eq(res, nil)
    T.match(msg, "quota or spend limit")
    T.eq(rec.error.kind, "quota")
    T.eq(#rec.attempts, 1)
    T.eq(rec.retries, 0)
    local t, msg2 = kh.llm.submit(req(d, base, "again"))
    T.eq(t, nil)
    T.match(msg2, "quota")
  end
end)

T.test("an error event after HTTP 200 retries the whole call; a fatal one does not", function()
  for _, d in ipairs(dialects) do
    local res = chat_ok(req(d, srv.base("midstream", 1, tag()), "mid"))
    T.eq(res.retries, 1, d.d)
    T.eq(res.text, "Hello from " .. d.d .. ": mid", "no partial text left over")
    T.eq(res.attempts[1].kind, "stream")
    local r2, msg, _, rec = kh.llm.chat(req(d, srv.base("midstream_fatal", 0, tag()), "mid"))
    T.eq(r2, nil)
    T.match(msg, "error event after HTTP 200")
    T.eq(rec.error.kind, "stream")
    T.eq(#rec.attempts, 1)
  end
end)

T.test("a truncated stream is retried, and reported when it persists", function()
  for _, d in ipairs(dialects) do
    local res = chat_ok(req(d, srv.base("truncate", 1, tag()), "cut"))
    T.eq(res.retries, 1)
    T.eq(res.text, "Hello from " .. d.d .. ": cut")
  end
  local r, msg, _, rec = kh.llm.chat(req(dialects[3], srv.base("truncate", 0, tag()), "cut",
    { options = { max_retries = 1 } }))
  T.eq(r, nil)
  T.eq(rec.error.kind, "retries")
  T.ok(msg:find("ended before its end event", 1, true) or msg:find("transfer failed", 1, true), msg)
end)

T.test("malformed JSON in the stream is retried", function()
  local res = chat_ok(req(dialects[1], srv.base("malformed", 1, tag()), "m"))
  T.eq(res.retries, 1)
  T.match(res.attempts[1].error, "malformed")
end)

-- KNOWN ISSUE (open): once in CI one character went missing from a
-- byte-by-byte Responses stream (not reproduced in 30 runs since; the SSE
-- parser itself is tested at every byte boundary in test_sse.c).  A mismatch
-- is reported and tried once more, so a rare transport hiccup does not hide
-- behind a pass and a systematic loss still fails.
T.test("every byte in its own chunk parses the same", function()
  for _, d in ipairs(dialects) do
    local ok_once = false
    for attempt = 1, 2 do
      local p = random_prompt()
      local res = chat_ok(req(d, srv.base("bytewise", 0, tag()), p))
      local want = "Hello from " .. d.d .. ": " .. p
      if res.text == want and res.usage.input == #p + 10 then
        ok_once = true
        break
      end
      print(string.format("# bytewise %s attempt %d: got %q, want %q", d.d, attempt,
        tostring(res.text), want))
    end
    T.ok(ok_once, "bytewise " .. d.d .. " parsed differently twice")
  end
end)

T.test("first-token latency is measured; an idle stream times out", function()
  local res = chat_ok(req(dialects[2], srv.base("slowfirst", 0, tag()), "slow"))
  T.ok(res.first_token_s >= 0.55, "first token after " .. res.first_token_s)
  local t0 = kh.time.now()
  local r, msg, code, rec = kh.llm.chat(req(dialects[1], srv.base("drip", 0, tag()), "drip",
    { options = { idle_timeout = 0.4, max_retries = 0 } }))
  T.eq(r, nil)
  T.eq(code, "ETIMEOUT")
  T.match(msg, "idle")
  T.eq(rec.error.kind, "timeout")
  T.ok(kh.time.now() - t0 < 2, "idle timeout fired late")
end)

T.test("a deadline bounds the whole call, retries included", function()
  local t0 = kh.time.now()
  local r, msg, code, rec = kh.llm.chat(req(dialects[1], srv.base("429ra", 0, tag()), "d",
    { options = { deadline = 0.5 } }))
  T.eq(r, nil)
  T.eq(code, "ETIMEOUT")
  T.match(msg, "deadline of 0.5 s")
  T.eq(rec.error.kind, "timeout")
  T.ok(kh.time.now() - t0 < 0.5, "gave up at once, not after the 1 s retry-after")
  r, msg, code = kh.llm.chat(req(dialects[1], srv.base("drip", 0, tag()), "d",
    { options = { deadline = 0.6, idle_timeout = 10, max_retries = 0 } }))
  T.eq(code, "ETIMEOUT")
  T.ok(kh.time.now() - t0 < 1.6)
end)

T.test("x-should-retry overrides the status classification", function()
  local r, _, _, rec = kh.llm.chat(req(dialects[1], srv.base("noretry500", 0, tag()), "x"))
  T.eq(r, nil)
  T.eq(#rec.attempts, 1)
  local res = chat_ok(req(dialects[1], srv.base("retry400", 1, tag()), "x"))
  T.eq(res.retries, 1)
end)

T.test("a 400 is not retried and its message reaches the caller", function()
  local r, msg, _, rec = kh.llm.chat(req(dialects[3], srv.base("400", 0, tag()), "x"))
  T.eq(r, nil)
  T.match(msg, "HTTP 400 from anthropic: temperature and top_p cannot both be specified")
  T.eq(rec.error.kind, "http")
  T.eq(rec.error.type, "invalid_request_error")
  T.eq(rec.http_status, 400)
end)

T.test("server quirks: whole JSON reply, vLLM reasoning names, token-limit cut", function()
  for _, d in ipairs(dialects) do
    local res = chat_ok(req(d, srv.base("whole", 0, tag()), "w"))
    T.eq(res.text, "Hello from " .. d.d .. ": w")
    T.match(res.warnings[1], "one JSON object")
  end
  for _, f in ipairs({ "vllm", "vllm_old" }) do
    local res = chat_ok(req(dialects[1], srv.base(f, 0, tag()), "r"))
    T.eq(res.reasoning, "thinking...", f)
    T.eq(res.usage.output, #res.text)
  end
  for _, d in ipairs(dialects) do
    local res = chat_ok(req(d, srv.base("length", 0, tag()), "long"))
    T.eq(res.truncated, true, d.d)
    T.eq(kh.llm.extract(res.text, { finish_reason = res.finish_reason }).status, "truncated")
  end
  local res = chat_ok(req(dialects[1], srv.base(), "x", { extra = { options = { num_ctx = 32768 } } }))
  T.match(res.warnings[1], "num_ctx")
  T.eq(res.request.options.num_ctx, 32768, "extra is merged at the top level")
end)

T.test("invalid UTF-8 in a stream is replaced, not fatal", function()
  local res = chat_ok(req(dialects[1], srv.base("badutf8", 0, tag()), "u"))
  T.eq(res.retries, 0)
  T.match(res.text, "^bad \u{FFFD} byte Hello from chat: u$")
  T.match(res.warnings[1], "invalid UTF%-8")
end)

T.test("a reply with code extracts to a candidate", function()
  local res = chat_ok(req(dialects[3], srv.base("code", 0, tag()), "write a kernel"))
  local c = kh.llm.extract(res.text, { finish_reason = res.finish_reason })
  T.eq(c.status, "ok")
  T.match(c.source, "__global__ void k")
  T.eq(c.source_lang, "cuda")
  T.eq(c.manifest.launches[1].kernel, "k")
end)

T.test("cancel ends a call at once", function()
  local t = assert(kh.llm.submit(req(dialects[1], srv.base("drip", 0, tag()), "c")))
  local rs = assert(kh.llm.poll(0.2))
  T.eq(#rs, 0)
  local t0 = kh.time.now()
  T.eq(kh.llm.cancel(t), true)
  rs = assert(kh.llm.poll(1))
  T.eq(#rs, 1)
  T.eq(rs[1].error.kind, "cancelled")
  T.ok(kh.time.now() - t0 < 0.5)
  local ok, msg, code = kh.llm.cancel(t)
  T.eq(ok, nil)
  T.eq(code, "ENOTFOUND")
end)

T.test("chat keeps other finished calls for the next poll", function()
  local p = random_prompt()
  local t = assert(kh.llm.submit(req(dialects[2], srv.base(), p)))
  local res = chat_ok(req(dialects[1], srv.base("slowfirst", 0, tag()), "slow"))
  T.eq(res.text, "Hello from chat: slow")
  local rs = assert(kh.llm.poll(2))
  T.eq(#rs, 1)
  T.eq(rs[1].ticket, t)
  T.eq(rs[1].text, "Hello from responses: " .. p)
end)

T.test("the circuit breaker pauses a failing provider", function()
  -- two failures in a row open the breaker for 0.6 s: the third attempt waits
  local t0 = kh.time.now()
  local res = chat_ok(req(dialects[1], srv.base("502", 2, tag()), "b",
    { options = { breaker_threshold = 2, breaker_cooldown = 0.6, backoff_cap = 0.01 } }))
  local el = kh.time.now() - t0
  T.eq(res.retries, 2)
  T.ok(el >= 0.6, "breaker did not hold the retry back: " .. el)
  local found = false
  for _, w in ipairs(res.warnings) do found = found or w:find("circuit breaker", 1, true) ~= nil end
  T.ok(found, "the record says it waited for the breaker")
end)

-- Run khlua in a child with a key in its environment; returns output, code.
local function khlua_env(env, ...)
  local parts = { env, mock.quote(KHLUA) }
  for _, a in ipairs({ ... }) do parts[#parts + 1] = mock.quote(a) end
  local p = assert(io.popen(table.concat(parts, " ") .. " 2>&1 </dev/null"))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

T.test("the key is sent but never recorded, printed or stored", function()
  local key = string.format("sk-test-%08x%08x", math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
  local dir = T.tmpdir()
  -- the mock echoes the Authorization header back in its error message
  local out, code = khlua_env("OPENAI_API_KEY=" .. key, "llm", "ask", "--no-store", "--provider", "openai",
    "--base-url", srv.base("echokey", 0, tag()), "--model", "m", "--json",
    "--transcript-dir", dir, "hello")
  T.eq(code, 1)
  T.ok(not out:find(key, 1, true), "key printed: " .. out)
  T.match(out, "Incorrect API key provided: Bearer %*+")
  local t = T.read(dir .. "/" .. (io.popen("ls " .. dir):read("a"):match("(%x+)%.json")) .. ".json")
  T.ok(not t:find(key, 1, true), "key in the transcript")
  T.match(t, "Bearer %[redacted%]")
  -- a successful call through Lua: nothing in the record or the raw stream
  local script = string.format([[
    local kh = require "kh"
    local r = assert(kh.llm.chat{provider = "anthropic", model = "m", base_url = %q,
      messages = {{role = "user", content = "hi"}}})
    io.write(kh.json.encode(r), "\n", r.raw)]], srv.base())
  local out2, code2 = khlua_env("ANTHROPIC_API_KEY=" .. key, "-e", script)
  T.eq(code2, 0, out2)
  T.match(out2, "Hello from anthropic: hi")
  T.ok(not out2:find(key, 1, true), "key in a record")
  os.execute("rm -rf " .. mock.quote(dir))
end)

T.test("khlua llm ask streams to stdout and --json reports usage and retries", function()
  local out, code = T.khlua("llm", "ask", "--store", CLI_STORE, "--provider", "compat", "--base-url",
    srv.base("500", 1, tag()), "--model", "m", "stream this")
  T.eq(code, 0, out)
  T.eq(out, "Hello from chat: stream this\n")
  out, code = T.khlua("llm", "ask", "--store", CLI_STORE, "--provider", "compat", "--base-url",
    srv.base("502", 1, tag()), "--model", "m", "--json", "j")
  T.eq(code, 0, out)
  local j = kh.json.decode(out)
  T.eq(j.text, "Hello from chat: j")
  T.eq(j.retries, 1)
  T.eq(j.usage.input, 11)
  T.ok(j.latency_s > 0)
  out, code = T.khlua("llm", "ask", "--store", CLI_STORE, "--provider", "compat", "--base-url",
    srv.base("400", 0, tag()), "--model", "m", "x")
  T.eq(code, 1)
  T.match(out, "HTTP 400")
  out, code = T.khlua("llm", "ask", "--store", CLI_STORE, "--provider", "openai", "--model", "m", "x")
  T.eq(code, 2, "no key is a usage error")
  -- a recorded transcript replays to the same reply, marked as a replay
  local dir = T.tmpdir()
  local p = random_prompt()
  out, code = T.khlua("llm", "ask", "--store", CLI_STORE, "--provider", "anthropic", "--base-url", srv.base(),
    "--model", "m", "--transcript-dir", dir, p)
  T.eq(code, 2, "anthropic without ANTHROPIC_API_KEY")
  out, code = T.khlua("llm", "ask", "--store", CLI_STORE, "--provider", "compat", "--base-url", srv.base(),
    "--model", "m", "--transcript-dir", dir, p)
  T.eq(code, 0, out)
  out, code = T.khlua("llm", "ask", "--store", CLI_STORE, "--replay-dir", dir, "--json", p)
  T.eq(code, 0, out)
  j = kh.json.decode(out:match("^(.-\n})"))
  T.eq(j.text, "Hello from chat: " .. p)
  T.eq(j.replay, true)
  T.eq(j.usage.input, #p + 10, "usage from the recorded stream")
  T.match(j.replay_file, "%.json$")
  out, code = T.khlua("llm", "ask", "--store", CLI_STORE, "--replay-dir", dir, p)
  T.eq(code, 0, out)
  T.match(out, "replayed from .*%.json, not a live model")
  os.execute("rm -rf " .. mock.quote(dir))
end)

T.test("Ctrl-C stops a blocking chat promptly", function()
  local script = string.format([[
    local kh = require "kh"
    local r, msg, code = kh.llm.chat{provider = "compat", model = "m", base_url = %q,
      messages = {{role = "user", content = "hi"}}, options = {idle_timeout = 30}}
    print("returned", msg, code)]], srv.base("drip", 0, tag()))
  local cmd = string.format("{ %s -e %s & pid=$!; sleep 0.4; kill -INT $pid; wait $pid; echo rc=$?; }",
    mock.quote(KHLUA), mock.quote(script))
  local t0 = kh.time.now()
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  p:close()
  T.ok(kh.time.now() - t0 < 2, "took " .. (kh.time.now() - t0))
  T.match(out, "rc=130")
end)

-- ---- transcripts in the store ---------------------------------------------

local function scratch_store()
  local dir = T.tmpdir()
  return assert(kh.store.open(dir .. "/s", { nosync = true })), dir .. "/s", dir
end

T.test("each call is a complete llm_call record in the store", function()
  local db, _, dir = scratch_store()
  local run = assert(db:update(function(tx) return tx:put_run { policy = "net_llm" } end))
  assert(kh.llm.record_to(db, { run = run }))
  local ids = {}
  for _, d in ipairs(dialects) do
    local prompt = random_prompt()
    local res = chat_ok(req(d, srv.base("500", 1, tag()), prompt, { label = d.d }))
    T.eq(res.store_error, nil)
    local rec = assert(db:get(res.store_id))
    ids[#ids + 1] = res.store_id
    T.eq(rec.type, "llm_call")
    T.eq(rec.run, run)
    T.eq(rec.status, "ok")
    T.eq(rec.model, "mock-model")
    T.eq(rec.provider, d.provider)
    T.eq(rec.dialect, d.d)
    T.eq(rec.label, d.d)
    T.eq(rec.text, "Hello from " .. d.d .. ": " .. prompt)
    T.eq(rec.usage, res.usage)
    T.eq(rec.usage.input, #prompt + 10)
    T.eq(rec.request_id, "req_mock_1")
    T.eq(rec.response_headers["x-ratelimit-remaining-requests"], "99")
    T.eq(rec.response_headers["anthropic-ratelimit-requests-remaining"], "98")
    T.eq(rec.retries, 1)
    T.eq(rec.attempts[1].http_status, 500, "the failed attempt is in the transcript")
    T.ok(rec.latency_s > 0 and rec.first_token_s > 0 and rec.first_token_s <= rec.latency_s)
    T.near(rec.latency_s, res.latency_s, 1e-9)
    T.near(rec.first_token_s, res.first_token_s, 1e-9)
    local raw = db:get_blob(rec.response_blob)
    T.eq(raw, res.raw, "the raw stream, byte for byte")
    T.eq(#raw, rec.raw_bytes)
    local body = kh.json.decode(db:get_blob(rec.request_blob))
    T.eq(body, res.request, "the wire request")
    T.eq(body.stream, true)
  end
  -- a failed call: its error and the server's error body
  local r, _, _, rec = kh.llm.chat(req(dialects[3], srv.base("400", 0, tag()), "x"))
  T.eq(r, nil)
  local stored = assert(db:get(rec.store_id))
  T.eq(stored.status, "http")
  T.eq(stored.http_status, 400)
  T.match(db:get_blob(stored.response_blob), "temperature and top_p")
  ids[#ids + 1] = rec.store_id
  local calls = assert(db:query { run = run, type = "llm_call" })
  T.eq(#calls, #ids, "run -> llm_calls")
  for i, c in ipairs(calls) do T.eq(c.id, ids[#ids + 1 - i]) end
  T.eq(assert(db:verify()).problems, {})
  kh.llm.record_to(nil)
  db:close()
  os.execute("rm -rf " .. mock.quote(dir))
end)

T.test("a recorded run replays from the store with the same texts, streams parsed again", function()
  local db, path, dir = scratch_store()
  local run = assert(db:update(function(tx) return tx:put_run { policy = "net_llm" } end))
  assert(kh.llm.record_to(db, { run = run }))
  local prompts, live = {}, {}
  for i = 1, 6 do
    local d = dialects[(i % 3) + 1]
    prompts[i] = random_prompt()
    live[i] = chat_ok(req(d, srv.base(i == 2 and "bytewise" or nil, 0, tag()), prompts[i]))
  end
  kh.llm.record_to(nil)
  db:close()
  srv.stop() -- the replay needs no server
  local order = { 4, 1, 6, 2, 5, 3 }
  local script = string.format([[
    local kh = require "kh"
    local db = assert(kh.store.open(%q))
    assert(kh.llm.record_to(db))
    local out = {}
    for _, p in ipairs(kh.json.decode(%q)) do
      local r = assert(kh.llm.chat { provider = "replay", replay = { store = true, run = %q },
        messages = { { role = "user", content = p } } })
      out[#out + 1] = { text = r.text, usage = r.usage, replay = r.replay, replay_of = r.replay_of,
        recorded_dialect = r.recorded_dialect, store_id = r.store_id, model = r.model }
    end
    db:close()
    print(kh.json.encode(out))]], path, kh.json.encode((function()
      local t = {}
      for i, k in ipairs(order) do t[i] = prompts[k] end
      return t
    end)()), run)
  local outs, codes = {}, {}
  for n = 1, 2 do
    local out, code = T.khlua("-e", script)
    codes[n] = code
    outs[n] = code == 0 and kh.json.decode(out) or out
  end
  local cli, cli_code = T.khlua("llm", "ask", "--store", path, "--no-store", "--replay-run", run,
    prompts[5])
  srv = assert(mock.start(120)) -- before any assertion can fail: later tests need it
  T.eq(codes[1], 0, outs[1])
  T.eq(codes[2], 0, outs[2])
  db = assert(kh.store.open(path))
  for i, k in ipairs(order) do
    local o = outs[1][i]
    T.eq(o.text, live[k].text, "prompt " .. k)
    T.eq(outs[2][i].text, o.text, "deterministic")
    T.eq(o.usage, live[k].usage, "usage from the stored stream")
    T.eq(o.recorded_dialect, live[k].dialect)
    T.eq(o.model, "mock-model")
    T.eq(o.replay, true)
    T.eq(o.replay_of, live[k].store_id)
    local rec = assert(db:get(o.store_id))
    T.eq(rec.replay, true)
    T.eq(rec.replay_of, live[k].store_id)
  end
  db:close()
  -- the CLI says it is a replay
  T.eq(cli_code, 0, cli)
  T.match(cli, "^" .. live[5].text:gsub("%p", "%%%0") .. "\n")
  T.match(cli, "replayed from llm_call")
  os.execute("rm -rf " .. mock.quote(dir))
end)

T.test("no key value is ever in the store", function()
  local okey = "sk-proj-" .. string.format("%08x%08x%08x", math.random(0, 0x7fffffff),
    math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
  local akey = "sk-ant-" .. string.format("%08x%08x%08x", math.random(0, 0x7fffffff),
    math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
  local dir = T.tmpdir()
  local path = dir .. "/s"
  local env = "OPENAI_API_KEY=" .. okey .. " ANTHROPIC_API_KEY=" .. akey
  -- CLI: a success and a 401 whose body echoes the Authorization header
  local out, code = khlua_env(env, "llm", "ask", "--store", path, "--provider", "openai",
    "--base-url", srv.base(), "--model", "m", "--json", "hello")
  T.eq(code, 0, out)
  T.match(kh.json.decode(out).store_id, "^llm_call%-")
  out, code = khlua_env(env, "llm", "ask", "--store", path, "--provider", "openai",
    "--base-url", srv.base("echokey", 0, tag()), "--model", "m", "--json", "hello")
  T.eq(code, 1, out)
  T.match(kh.json.decode(out).store_id, "^llm_call%-", "recorded, so the key was redacted first")
  -- Lua: anthropic and responses, the echo too; and the store itself refuses a key
  local script = string.format([[
    local kh = require "kh"
    local db = assert(kh.store.open(%q))
    local ok, msg = db:put_blob("x-api-key: " .. os.getenv("ANTHROPIC_API_KEY"))
    assert(not ok and msg:find("ANTHROPIC_API_KEY", 1, true), "the store refuses a key")
    assert(kh.llm.record_to(db))
    for _, p in ipairs({ "anthropic", "openai-responses" }) do
      for _, base in ipairs({ %q, %q }) do
        local r, m, c, rec = kh.llm.chat { provider = p, model = "m", base_url = base,
          messages = { { role = "user", content = "hi" } }, options = { max_retries = 0 } }
        rec = r or rec
        assert(rec.store_id and not rec.store_error, rec.store_error)
      end
    end
    db:close()
    print("done")]], path, srv.base(), srv.base("echokey", 0, tag()))
  out, code = khlua_env(env, "-e", script)
  T.eq(code, 0, out)
  T.match(out, "done")
  -- every byte of the store, and every blob decompressed
  local h = assert(io.popen("cat " .. mock.quote(path) .. "/*"))
  local bytes = h:read("a")
  h:close()
  T.ok(#bytes > 0)
  for _, key in ipairs({ okey, akey }) do
    T.ok(not bytes:find(key, 1, true), "a key in the store's files")
  end
  local db = assert(kh.store.open(path, { readonly = true }))
  local recs = assert(db:query { type = "llm_call" })
  T.eq(#recs, 6)
  local echoed = 0
  for _, rec in ipairs(recs) do
    local blobs = { kh.json.encode(rec) }
    for _, f in ipairs({ "request_blob", "response_blob" }) do
      if rec[f] then blobs[#blobs + 1] = db:get_blob(rec[f]) end
    end
    for _, b in ipairs(blobs) do
      for _, key in ipairs({ okey, akey }) do T.ok(not b:find(key, 1, true), "a key in " .. rec.id) end
      if b:find("Incorrect API key provided: [%w ]*%*%*%*%*") then echoed = echoed + 1 end
    end
  end
  T.ok(echoed >= 3, "the echoed keys were stored redacted (" .. echoed .. ")")
  db:close()
  os.execute("rm -rf " .. mock.quote(dir))
end)

T.test("stop the mock server", function()
  srv.stop()
  os.execute("rm -rf " .. mock.quote(CLI_STORE_DIR))
end)
