-- models.lua: model specs for policies, and the replay ladder.
--
--   SPEC = PROVIDER:MODEL[@BASE_URL]      openai:gpt-5, anthropic:claude-sonnet-4-5,
--                                         compat:qwen3@http://127.0.0.1:8000/v1
--        | replay:DIR                     recorded replies (no network, no key)
--
-- Each spec is one model family; --model a,b,c gives the families a policy
-- may switch between.  A spec whose provider needs a key that is not in the
-- environment runs on the replay provider instead (the task's replay/
-- folder, or --replay DIR), and the run says so: an offline run is the
-- default, never a silent one.
--
-- A replay directory is either a flat folder of replies (the engine picks
-- them in file-name order) or a ladder: a folder of step folders (01/, 02/,
-- ...), each holding one reply.  The k-th call of a run to a family replays
-- step k (the last step repeats), so a resumed run continues the ladder
-- where the killed one stopped: the count comes from the run's rounds in
-- the store, not from the process.
local kh = require "kh"

local M = {}

local KEYS = {
  openai = "OPENAI_API_KEY", ["openai-responses"] = "OPENAI_API_KEY",
  anthropic = "ANTHROPIC_API_KEY", compat = nil,
}
local PROVIDERS = { openai = true, ["openai-responses"] = true, anthropic = true,
  compat = true, replay = true }

local function is_dir(path)
  local f = io.open(path .. "/.", "r")
  if f then f:close(); return true end
  return false
end

-- the names in a folder, sorted, hidden ones (".x") left out; none when it
-- cannot be read
local function listdir(path)
  local out = {}
  for _, name in ipairs(kh.listdir(path) or {}) do
    if name:sub(1, 1) ~= "." then out[#out + 1] = name end
  end
  return out
end
M.listdir = listdir

-- Parse one spec; returns {spec, provider, model, base_url, family} or nil, why.
function M.parse(spec)
  if type(spec) ~= "string" or spec == "" then return nil, "empty model spec" end
  local provider, rest = spec:match("^([%w%-]+):(.+)$")
  if not provider then
    return nil, "model spec '" .. spec .. "': expected PROVIDER:MODEL[@URL] or replay:DIR"
  end
  if not PROVIDERS[provider] then
    return nil, "model spec '" .. spec .. "': unknown provider '" .. provider
      .. "' (openai, openai-responses, anthropic, compat, replay)"
  end
  local m = { spec = spec, provider = provider, family = spec }
  if provider == "replay" then
    m.replay_dir = rest
    m.model = "replay:" .. (rest:match("([^/]+)/*$") or rest)
  else
    local model, url = rest:match("^(.-)@(.+)$")
    m.model = model or rest
    m.base_url = url
    if provider == "compat" and not url then
      return nil, "model spec '" .. spec .. "': compat needs @BASE_URL"
    end
  end
  return m
end

-- Parse "a,b,c"; returns a list of specs or nil, why.
function M.parse_list(s)
  local out = {}
  for part in tostring(s or ""):gmatch("[^,]+") do
    local m, why = M.parse(part)
    if not m then return nil, why end
    out[#out + 1] = m
  end
  if #out == 0 then return nil, "--model needs at least one spec" end
  return out
end

-- Resolve keys: a family whose key is missing goes to replay, from
-- replay_root/<i> (the i-th family's folder, sorted) or replay_root itself.
-- Returns the list and the notes to print.
function M.resolve(list, replay_root, getenv)
  getenv = getenv or os.getenv
  local notes = {}
  local subdirs = {}
  if replay_root and is_dir(replay_root) then
    for _, name in ipairs(listdir(replay_root)) do
      if is_dir(replay_root .. "/" .. name) then subdirs[#subdirs + 1] = name end
    end
  end
  for i, m in ipairs(list) do
    local key = KEYS[m.provider]
    if key and not (getenv(key) and getenv(key) ~= "") then
      if not replay_root then
        return nil, string.format("%s: no %s in the environment and no replay folder "
          .. "(--replay DIR or the task's replay/)", m.spec, key)
      end
      local dir = replay_root
      -- a ladder root holds family folders; a flat or ladder folder serves one family
      local fam = subdirs[(i - 1) % math.max(#subdirs, 1) + 1]
      if fam and M.ladder_steps(replay_root .. "/" .. fam) then dir = replay_root .. "/" .. fam end
      -- records name what answered: the replay folder, not the model the
      -- family would have asked (the family keeps its spec)
      m.offline_for = m.spec
      m.provider, m.replay_dir = "replay", dir
      m.model = "replay:" .. (dir:match("([^/]+)/*$") or dir)
      notes[#notes + 1] = string.format("no %s in the environment: %s runs on the replay "
        .. "provider (%s)", key, m.spec, dir)
    end
  end
  return list, notes
end

-- The step folders of a ladder, or nil when dir is a flat folder of replies.
function M.ladder_steps(dir)
  local steps = {}
  for _, name in ipairs(listdir(dir)) do
    if is_dir(dir .. "/" .. name) then steps[#steps + 1] = name end
  end
  if #steps == 0 then return nil end
  return steps
end

-- The request for the k-th call (1-based) of a run to family m.
function M.request(m, messages, k, opts)
  opts = opts or {}
  local req = { messages = messages, label = opts.label }
  if m.provider == "replay" then
    req.provider = "replay"
    local dir = m.replay_dir
    local steps = M.ladder_steps(dir)
    if steps then dir = dir .. "/" .. steps[math.min(k, #steps)] end
    -- a flat folder: the k-th reply in name order (the count is the run's,
    -- so a resumed run continues where it stopped)
    req.replay = { dir = dir, index = not steps and k or nil }
    -- the call's record names what answered: the replay folder (replay:NAME)
    req.model = m.model
  else
    req.provider, req.model, req.base_url = m.provider, m.model, m.base_url
    req.max_tokens = opts.max_tokens or 8192
    req.options = opts.options
  end
  return req
end

-- ---- the probe before round 1 ----------------------------------------------------
-- A run asks each family one tiny question before it starts, so a wrong key,
-- an unknown model, a server that is down or an empty replay folder stops it
-- at once with the reason (exit 1), not after rounds of failed calls.
M.PROBE_TEXT = "Reply with the single word OK."

-- Probe family m; returns true, seconds or nil, why.  A replay family is
-- looked at on disk (a folder with replies); another gets one request of at
-- most 16 output tokens, one retry, 60 s in all.
function M.probe(m)
  local t0 = kh.time.now()
  if m.provider == "replay" then
    local dir = m.replay_dir
    if not is_dir(dir) then
      return nil, string.format("%s: the replay folder %s does not exist", m.spec, dir)
    end
    local steps = M.ladder_steps(dir)
    local first = steps and (dir .. "/" .. steps[1]) or dir
    if #listdir(first) == 0 then
      return nil, string.format("%s: no replies in %s", m.spec, first)
    end
    return true, kh.time.now() - t0
  end
  local r, msg = kh.llm.chat { provider = m.provider, model = m.model, base_url = m.base_url,
    max_tokens = 16, label = "probe",
    messages = { { role = "user", content = M.PROBE_TEXT } },
    options = { max_retries = 1, connect_timeout = 10, total_timeout = 60 } }
  if not r then return nil, string.format("%s: %s", m.spec, tostring(msg)) end
  return true, kh.time.now() - t0
end

M.keys = KEYS
M.is_dir = is_dir
return M
