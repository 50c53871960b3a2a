-- skills.lua: SKILL.md playbooks.  A skill is skills/<name>/SKILL.md with a
-- front matter block between '---' lines:
--   name: cuda-optimizer
--   layer: generic | contest | operator   (the order they enter a prompt)
--   applies-to: backend=cuda,host op_type=rmsnorm   (every clause must match; '*' any)
--   expects: what the skill assumes the prompt holds (documentation)
-- followed by the Markdown body that goes into the prompt.
local models = require "lib.models"

local M = {}

local LAYERS = { generic = 1, contest = 2, operator = 3 }

-- Parse one SKILL.md text; returns the skill or nil, why.
function M.parse(text, where)
  where = where or "SKILL.md"
  local head, body = text:match("^%-%-%-\n(.-)\n%-%-%-\n(.*)$")
  if not head then return nil, where .. ": no front matter (a '---' block at the top)" end
  local s = { applies = {}, body = body:gsub("^%s+", ""):gsub("%s+$", "") }
  for line in head:gmatch("[^\n]+") do
    local k, v = line:match("^([%w%-]+):%s*(.-)%s*$")
    if not k then return nil, where .. ": front matter line '" .. line .. "' is not 'key: value'" end
    if k == "applies-to" then
      for clause in v:gmatch("%S+") do
        local ck, cv = clause:match("^([%w_]+)=(.+)$")
        if not ck then return nil, where .. ": applies-to clause '" .. clause .. "' is not key=v1,v2" end
        local set = {}
        for x in cv:gmatch("[^,]+") do set[x] = true end
        s.applies[ck] = set
      end
    else
      s[k] = v
    end
  end
  if not s.name then return nil, where .. ": front matter has no name" end
  if not LAYERS[s.layer or ""] then
    return nil, where .. ": layer must be generic, contest or operator"
  end
  return s
end

-- Does skill s apply to facts {backend = ..., op_type = ...}?
function M.applies(s, facts)
  for k, set in pairs(s.applies) do
    if not set["*"] and not set[tostring(facts[k])] then return false end
  end
  return true
end

-- Every skill under root; returns the list (sorted by layer, then name) or nil, why.
function M.load(root)
  local out = {}
  for _, name in ipairs(models.listdir(root)) do
    local path = root .. "/" .. name .. "/SKILL.md"
    local f = io.open(path, "rb")
    if f then
      local text = f:read("a")
      f:close()
      local s, why = M.parse(text, path)
      if not s then return nil, why end
      s.path = path
      out[#out + 1] = s
    end
  end
  table.sort(out, function(a, b)
    if LAYERS[a.layer] ~= LAYERS[b.layer] then return LAYERS[a.layer] < LAYERS[b.layer] end
    return a.name < b.name
  end)
  return out
end

function M.select(list, facts)
  local out = {}
  for _, s in ipairs(list) do if M.applies(s, facts) then out[#out + 1] = s end end
  return out
end

return M
