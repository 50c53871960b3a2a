-- full_agent.lua: the paper's Full-Agent baseline under the same evaluation
-- and the same promotion gate: a LoongFlow-style plan / execute / summarize
-- loop that sees only the definition and its last score.  No profiler
-- state, no skills, no directions.  The plan and the code come in one reply
-- (plan first, then the code that carries it out); the summary the next
-- round sees is the plan's first line and the verdict on it.
--   khlua policies/full_agent.lua --task DIR [--model SPEC[,SPEC...]] [--rounds N] [--json]
local _ENV = setmetatable({}, { __index = _G })
package.path = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or ".") .. "/?.lua;" .. package.path
local prompt = require "lib.prompt"

local P = { name = "full_agent", title = "Full-Agent baseline: plan, execute, summarize" }

function P.propose(view, ps)
  local messages, text = prompt.full_agent({ task = view.task, last = ps.last })
  return { messages = messages, text = text }
end

function P.react(view, outcome, ps)
  local p = outcome.probes[1] or {}
  local d = outcome.decision
  ps.last = { status = d.promoted and "accepted" or "rejected",
    score = d.promoted and (p.figures and p.figures.score) or view.incumbent.score,
    summary = string.format("Plan: %s Verdict: %s", p.plan or "(none)", p.reason or "-") }
  return {}
end

return require("lib.cli").main(P, ...)
