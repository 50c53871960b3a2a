-- agent.lua: the Agent-Assisted controller's round, shared by
-- agent_assisted.lua and plateau_switch.lua: profile-backed state, one
-- bounded direction per round, skills in the prompt, the promotion gate (in
-- the controller), and on a plateau a change of direction.
local dirs = require "lib.directions"
local prompt = require "lib.prompt"

local M = {}

-- The view -> the round's plan.
function M.propose(view, ps, ctx)
  local d, why = dirs.pick(view.state, view.excluded, view.direction_name)
  if not d then
    -- every direction retired: start over with the whole library
    for k in pairs(view.excluded) do view.excluded[k] = nil end
    d, why = dirs.pick(view.state, nil, nil)
  end
  view.direction = { name = d.name, title = d.title, brief = d.brief, why = why }
  view.skills = ctx.skills
  -- a reference kernel to show (a task checked by its Python reference
  -- has none: the prompt carries the Python semantics anyway)
  if view.add_reference and ctx.task.reference_solution then
    local ref = ctx.task.reference_solution
    view.reference = { name = ref.name, source = ref.sources[1].content,
      lang = ctx.task.backend == "host" and "c" or "cuda" }
  end
  local messages, text = prompt.agent_assisted(view)
  return { messages = messages, text = text,
    direction = { name = d.name, title = d.title, why = why } }
end

-- On a plateau: retire the direction (and show a reference kernel once).
function M.react(view, outcome, ps)
  local acts = {}
  if outcome.events.plateau then
    acts[#acts + 1] = { kind = "switch_direction",
      why = outcome.events.plateau.why .. ": retire " .. tostring(view.direction_name) }
    if not view.add_reference then
      acts[#acts + 1] = { kind = "add_reference", why = "show a correct kernel after a plateau" }
    end
  end
  return acts
end

return M
