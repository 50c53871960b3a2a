-- test_llm.lua: the offline parts of kh.llm: request checking and the three
-- serializers, candidate extraction, the replay and command providers, and
-- the coroutine helper in policies/lib/llm.lua (driven by replay).
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
package.path = SRC .. "/policies/?.lua;" .. package.path
local llm = require "lib.llm"
local REPLAY = SRC .. "/tests/fixtures/replay"

local function base_req(over)
  local r = { provider = "compat", model = "m", base_url = "http://127.0.0.1:9/v1",
    messages = { { role = "system", content = "sys" }, { role = "user", content = "hello" } } }
  for k, v in pairs(over or {}) do r[k] = v end
  return r
end

T.test("sampling parameters are sent only when set", function()
  for _, d in ipairs({ "chat", "responses", "anthropic" }) do
    local b = assert(kh.llm.serialize(base_req(), d))
    T.eq(b.temperature, nil, d)
    T.eq(b.top_p, nil, d)
    T.eq(b.stream, true, d)
    local t = math.random() * 1.5
    b = assert(kh.llm.serialize(base_req({ temperature = t }), d))
    T.near(b.temperature, t, 1e-12, d)
    T.eq(b.top_p, nil, d)
  end
end)

T.test("each dialect puts fields where its API wants them", function()
  local n = math.random(100, 5000)
  local chat = assert(kh.llm.serialize(base_req({ max_tokens = n, stop = "END" }), "chat"))
  T.eq(chat.max_completion_tokens, n)
  T.eq(chat.max_tokens, nil)
  T.eq(chat.stop, { "END" })
  T.eq(chat.stream_options.include_usage, true)
  T.eq(chat.messages[1], { role = "system", content = "sys" })
  local compat = assert(kh.llm.serialize(base_req({ max_tokens = n, top_k = 20 }), "chat", true))
  T.eq(compat.max_tokens, n)
  T.eq(compat.top_k, 20)
  local resp = assert(kh.llm.serialize(base_req({ max_tokens = n, reasoning_effort = "high" }),
    "responses"))
  T.eq(resp.instructions, "sys")
  T.eq(resp.max_output_tokens, n)
  T.eq(resp.reasoning.effort, "high")
  T.eq(resp.input[1].content[1], { type = "input_text", text = "hello" })
  local an = assert(kh.llm.serialize(base_req({ stop = { "a", "b" } }), "anthropic"))
  T.eq(an.system[1].text, "sys")
  T.eq(an.max_tokens, 8192, "Anthropic requires max_tokens")
  T.eq(an.stop_sequences, { "a", "b" })
  T.eq(#an.messages, 1)
  T.eq(an.messages[1].role, "user")
  local ex = assert(kh.llm.serialize(base_req({ extra = { min_p = 0.05, stream = true } }), "chat", true))
  T.eq(ex.min_p, 0.05)
end)

T.test("cache breakpoints become cache_control for Anthropic only", function()
  local msgs = { { role = "system", content = { { text = "spec", cache = "1h" } } },
    { role = "user", content = { "stable part", { cache_breakpoint = true }, "changing part" } } }
  local an = assert(kh.llm.serialize(base_req({ messages = msgs }), "anthropic"))
  T.eq(an.system[1].cache_control, { type = "ephemeral", ttl = "1h" })
  T.eq(an.messages[1].content[1].cache_control, { type = "ephemeral" })
  T.eq(an.messages[1].content[2].cache_control, nil)
  local chat = assert(kh.llm.serialize(base_req({ messages = msgs }), "chat"))
  T.eq(chat.messages[2].content, "stable partchanging part")
  -- five breakpoints: Anthropic's limit is four
  local parts = {}
  for i = 1, 5 do parts[i] = { text = "p" .. i, cache = true } end
  local b, msg = kh.llm.serialize(base_req({ messages = { { role = "user", content = parts } } }),
    "anthropic")
  T.eq(b, nil)
  T.match(msg, "at most 4")
  b, msg = kh.llm.serialize(base_req({ messages = { { role = "user", content = {
    { text = "a", cache = true }, { text = "b", cache = "1h" } } } } }), "anthropic")
  T.eq(b, nil)
  T.match(msg, "1h cache breakpoint must come before")
end)

T.test("bad requests are refused with the field named", function()
  local cases = {
    { base_req({ temprature = 1 }), "unknown request field 'temprature'" },
    { base_req({ api_key = "x" }), "keys come only from the environment" },
    { base_req({ temperature = 3 }), "temperature = 3 is outside" },
    { base_req({ messages = {} }), "non%-empty array" },
    { base_req({ messages = { { role = "robot", content = "x" } } }), "role" },
    { base_req({ reasoning_effort = "max" }), "reasoning_effort" },
  }
  local nomodel = base_req()
  nomodel.model = nil
  cases[#cases + 1] = { nomodel, "model is required" }
  for _, c in ipairs(cases) do
    local t, msg, code = kh.llm.submit(c[1])
    T.eq(t, nil)
    T.match(msg, c[2])
    T.eq(code, "EINVAL")
  end
  local t, msg = kh.llm.submit({ provider = "openai", model = "m", messages = { { role = "user", content = "x" } },
    options = { api_key_env = "KHLUA_TEST_SURELY_UNSET_KEY" } })
  T.eq(t, nil)
  T.match(msg, "KHLUA_TEST_SURELY_UNSET_KEY is not set")
  local b, m2 = kh.llm.serialize(base_req({ stop = "x" }), "responses")
  T.eq(b, nil)
  T.match(m2, "Responses")
  T.raises(function() kh.llm.submit(42) end, "table expected")
  T.raises(function() kh.llm.poll(-1) end, "timeout")
  T.raises(function() kh.llm.submit(base_req({ messages = { { role = "user", content = print } } })) end)
end)

T.test("extraction classifies replies", function()
  local n = math.random(1, 1000)
  local good = "text\n```cuda\n__global__ void k" .. n .. "() {}\n```\nand\n```json\n{\"launches\": [" .. n .. "]}\n```\n"
  local c = kh.llm.extract(good)
  T.eq(c.status, "ok")
  T.eq(c.source, "__global__ void k" .. n .. "() {}\n")
  T.eq(c.manifest.launches[1], n)
  T.eq(kh.llm.extract("no code here, sorry").status, "no_code")
  T.eq(kh.llm.extract("```cuda\n__global__ void k() {", { finish_reason = "length" }).status, "truncated")
  T.eq(kh.llm.extract("```cuda\n__global__ void k() {").status, "truncated")
  T.eq(kh.llm.extract("thinking...", { finish_reason = "max_tokens" }).status, "truncated")
  local bad = kh.llm.extract("```cuda\nx\n```\n```json\n{\"launches\": [1,}\n```\n")
  T.eq(bad.status, "bad_manifest")
  T.match(bad.message, "line 1")
  T.eq(kh.llm.extract("```cuda\nx\n```\n").status, "no_manifest")
  T.eq(kh.llm.extract("```cuda\nx\n```\n", { require_manifest = false }).status, "ok")
  -- the last source block wins (models show the final version last)
  T.eq(kh.llm.extract("```cuda\nold\n```\n```cu\nnew\n```\n", { require_manifest = false }).source, "new\n")
end)

T.test("replay answers from recorded files, in order, marked as replay", function()
  local function ask()
    return assert(kh.llm.chat({ provider = "replay", replay = { dir = REPLAY },
      messages = { { role = "user", content = "q" .. math.random(1, 1e9) } } }))
  end
  local a, b, c, d = ask(), ask(), ask(), ask()
  T.match(a.text, "recorded, not generated")
  T.eq(a.replay, true)
  T.match(b.text, "__global__ void scale")
  T.eq(b.usage.output, 97)
  T.eq(llm.candidate(b).status, "ok")
  T.eq(c.text, "Recorded stream: the profile says memory-bound.", "an .sse stream is parsed again")
  T.eq(c.recorded_dialect, "anthropic")
  T.eq(c.usage.input, 121, "21 uncached + 100 cache read")
  T.eq(c.usage.output, 12)
  T.eq(d.text, a.text, "wraps around")
  T.eq(llm.cost(a), 0, "replays cost nothing")
  local r, msg = kh.llm.chat({ provider = "replay", replay = { dir = "/nonexistent/dir" },
    messages = { { role = "user", content = "x" } } })
  T.eq(r, nil)
  T.match(msg, "/nonexistent/dir")
end)

T.test("replay picks the file named by the request's fingerprint", function()
  local dir = T.tmpdir()
  local req = { provider = "replay", replay = { dir = dir },
    messages = { { role = "user", content = "exact prompt " .. math.random(1, 1e9) } } }
  T.write(dir .. "/000-other.txt", "other")
  local first = assert(kh.llm.chat(req))
  T.eq(first.text, "other")
  T.write(dir .. "/" .. first.fingerprint .. ".txt", "keyed answer")
  T.eq(assert(kh.llm.chat(req)).text, "keyed answer")
  T.eq(assert(kh.llm.chat(req)).text, "keyed answer", "deterministic")
  os.execute("rm -rf '" .. dir .. "'")
end)

T.test("the command provider runs an agent CLI in a scratch workspace", function()
  local secret = "prompt-" .. math.random(1, 1e9)
  local r = assert(kh.llm.chat({ provider = "command",
    messages = { { role = "user", content = secret } },
    command = { argv = { "sh", "-c", "cat > got.txt; mkdir -p sub; echo kernel > sub/k.cu; echo said: $(cat got.txt)" },
      timeout = 10 } }))
  T.eq(r.text, "said: " .. secret .. "\n")
  T.eq(r.command.ended, "exit 0")
  local files = {}
  for _, f in ipairs(r.files) do files[f.path] = f.content end
  T.eq(files["got.txt"], secret)
  T.eq(files["sub/k.cu"], "kernel\n")
  T.ok(r.command.workspace:find("khlua%-agent%-"))
  os.execute("rm -rf '" .. r.command.workspace .. "'")
  local t0 = kh.time.now()
  local r2, msg, code, rec = kh.llm.chat({ provider = "command", messages = { { role = "user", content = "x" } },
    command = { argv = { "sleep", "5" }, timeout = 0.3 } })
  T.eq(r2, nil)
  T.eq(code, "ETIMEOUT")
  T.match(msg, "timed out")
  T.ok(kh.time.now() - t0 < 2)
  os.execute("rm -rf '" .. rec.command.workspace .. "'")
  local r3, msg3, _, rec3 = kh.llm.chat({ provider = "command", messages = { { role = "user", content = "x" } },
    command = { argv = { "false" } } })
  T.eq(r3, nil)
  T.match(msg3, "exit 1")
  os.execute("rm -rf '" .. rec3.command.workspace .. "'")
end)

T.test("agent commands run side by side and can be cancelled", function()
  local function cmd(argv, timeout)
    return { provider = "command", messages = { { role = "user", content = "x" } },
      command = { argv = argv, timeout = timeout or 10 } }
  end
  local t0 = kh.time.now()
  local want = {}
  for i = 1, 3 do
    local n = math.random(1, 1e6)
    want[assert(kh.llm.submit(cmd({ "sh", "-c", "sleep 0.4; echo " .. n })))] = n .. "\n"
  end
  local slow = assert(kh.llm.submit(cmd({ "sleep", "30" })))
  local got, ws = 0, {}
  while got < 3 do
    for _, r in ipairs(assert(kh.llm.poll(2))) do
      T.eq(r.text, want[r.ticket])
      ws[#ws + 1] = r.command.workspace
      got = got + 1
    end
  end
  T.ok(kh.time.now() - t0 < 1.1, "three 0.4 s agents took " .. (kh.time.now() - t0) .. " s")
  T.eq(kh.llm.cancel(slow), true)
  local rs = assert(kh.llm.poll(1))
  T.eq(#rs, 1)
  T.eq(rs[1].error.kind, "cancelled")
  T.ok(kh.time.now() - t0 < 1.5)
  local r, msg = kh.llm.chat(cmd({ "khlua-no-such-agent-" .. math.random(1, 1e6) }))
  T.eq(r, nil)
  T.match(msg, "cannot run agent")
  for _, w in ipairs(ws) do os.execute("rm -rf '" .. w .. "'") end
end)

T.test("lib/llm runs requests as coroutines, in flight together", function()
  local reqs = {}
  for i = 1, 5 do
    reqs[i] = { provider = "replay", replay = { dir = REPLAY }, label = "r" .. i,
      messages = { { role = "user", content = "n" .. i } } }
  end
  local out = llm.gather(reqs)
  T.eq(#out, 5)
  for i = 1, 5 do T.eq(out[i][1].label, "r" .. i) end
  local a, b = llm.run(function()
    local t1 = llm.spawn(function() return llm.request(reqs[1]).label end)
    local t2 = llm.spawn(function() return llm.request(reqs[2]).label end)
    return llm.await(t1), llm.await(t2)
  end)
  T.eq(a, "r1")
  T.eq(b, "r2")
  T.raises(function() llm.run(function() error("boom in a task") end) end, "boom in a task")
  T.eq(kh.llm.pending(), 0)
  -- outside llm.run, request blocks
  T.eq(llm.request(reqs[3]).label, "r3")
end)

T.test("cost follows the price table", function()
  local inp, cr, out = math.random(1000, 9000), math.random(0, 500), math.random(100, 900)
  local rec = { model = "x", usage = { input = inp + cr, cache_read = cr, cache_write = 0, output = out } }
  local prices = { x = { input = 2, output = 8, cache_read = 0.5, cache_write = 2.5 } }
  T.near(llm.cost(rec, prices), (inp * 2 + out * 8 + cr * 0.5) / 1e6, 1e-12)
  local c, why = llm.cost({ model = "unknown", usage = {} })
  T.eq(c, nil)
  T.match(why, "no price")
end)
