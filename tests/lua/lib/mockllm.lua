-- mockllm.lua: start tests/mock_llm.py on a free loopback port for a test
-- file, and stop it.  The server also exits by itself (--lifetime), so a
-- crashed test run leaves nothing behind for long.
local M = {}

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
M.quote = sh_quote

function M.source_dir()
  return os.getenv("KH_SOURCE_DIR") or (arg[0]:match("^(.*)/tests/lua/") or ".")
end

-- Returns a server object {port, pid, base(fault, n, tag), stop()} or nil, why.
-- opts.ladder: a folder of reply ladders served by the "ladder" fault.
function M.start(lifetime, opts)
  local kh = require "kh"
  local script = M.source_dir() .. "/tests/mock_llm.py"
  local p = io.popen("command -v python3 2>/dev/null")
  local py = p:read("l")
  p:close()
  if not py then return nil, "python3 not found" end
  local tmp = os.tmpname()
  local extra = (opts and opts.ladder) and (" --ladder " .. sh_quote(opts.ladder)) or ""
  if opts and opts.ladder_delay then
    extra = extra .. string.format(" --ladder-delay %g", opts.ladder_delay)
  end
  os.execute(string.format("%s %s --lifetime %d%s > %s 2>/dev/null &", sh_quote(py),
    sh_quote(script), lifetime or 90, extra, sh_quote(tmp)))
  local port, pid
  local t0 = kh.time.now()
  while kh.time.now() - t0 < 10 do
    local f = io.open(tmp, "r")
    local line = f and f:read("l")
    if f then f:close() end
    if line then
      port, pid = line:match("^(%d+) (%d+)$")
      if port then break end
    end
    kh.time.sleep(0.02)
  end
  os.remove(tmp)
  if not port then return nil, "the mock server did not start" end
  local s = { port = tonumber(port), pid = tonumber(pid) }
  s.root = "http://127.0.0.1:" .. port
  function s.base(fault, n, tag)
    if not fault then return s.root .. "/v1" end
    return string.format("%s/m/%s/%d/%s/v1", s.root, fault, n or 0, tag or "t")
  end
  function s.stop()
    if s.pid then os.execute("kill " .. s.pid .. " 2>/dev/null"); s.pid = nil end
  end
  return s
end

return M
