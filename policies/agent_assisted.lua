-- agent_assisted.lua: the paper's Agent-Assisted controller, unattended.
--   khlua policies/agent_assisted.lua --task DIR [--model SPEC[,SPEC...]] [--rounds N] [--json]
-- Each round: profile-backed bottleneck state, one bounded direction from the
-- library, skills in the prompt, one model reply, the promotion gate.  On a
-- plateau it retires the direction and adds the reference kernel to the prompt.
local _ENV = setmetatable({}, { __index = _G })
package.path = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or ".") .. "/?.lua;" .. package.path
local agent = require "lib.agent"

local P = { name = "agent_assisted", title = "Agent-Assisted: one bounded direction per round" }
P.propose = agent.propose
P.react = agent.react

return require("lib.cli").main(P, ...)
