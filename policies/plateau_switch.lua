-- plateau_switch.lua: Agent-Assisted, switching model family on a plateau,
-- and once every family has plateaued on the current direction, switching
-- direction (with a reference kernel in the prompt from then on).
--   khlua policies/plateau_switch.lua --task DIR --model SPEC[,SPEC...] [--rounds N] [--json]
local _ENV = setmetatable({}, { __index = _G })
package.path = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or ".") .. "/?.lua;" .. package.path
local agent = require "lib.agent"

local P = { name = "plateau_switch", title = "Agent-Assisted with model-family switching on a plateau" }
P.propose = agent.propose

function P.init(ps) ps.plateaued = {} end

function P.react(view, outcome, ps, ctx)
  local ev = outcome.events.plateau
  if not ev then return {} end
  local fams = view.families
  ps.plateaued[fams[view.family].spec] = true
  for step = 1, #fams - 1 do
    local j = (view.family - 1 + step) % #fams + 1
    if not ps.plateaued[fams[j].spec] then
      return { { kind = "switch_family", to = j,
        why = ev.why .. string.format(": switch model family %s -> %s", fams[view.family].spec,
          fams[j].spec) } }
    end
  end
  -- every family plateaued on this direction: change direction, families start over
  ps.plateaued = {}
  local acts = agent.react(view, outcome, ps)
  if #fams > 1 then
    acts[#acts + 1] = { kind = "switch_family", to = view.family % #fams + 1,
      why = "every family plateaued on " .. tostring(view.direction_name) }
  end
  return acts
end

return require("lib.cli").main(P, ...)
