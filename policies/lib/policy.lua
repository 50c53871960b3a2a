-- policy.lua: loading a policy script as a module, in its own environment.
--
--   local P = require("lib.policy").load("policies/plateau_switch.lua")
--
-- The script runs with a fresh environment table (reads fall through to the
-- globals, writes stay in it), so a policy holds no global state, and with
-- lib.cli.AS_MODULE as its first argument, so it returns its policy table
-- instead of running.
local cli = require "lib.cli"

local M = {}

function M.load(path)
  local env = setmetatable({}, { __index = _G })
  local chunk, err = loadfile(path, "t", env)
  if not chunk then return nil, err end
  local p = chunk(cli.AS_MODULE)
  if type(p) ~= "table" or type(p.propose) ~= "function" or type(p.name) ~= "string" then
    return nil, path .. ": not a policy (a table with name and propose)"
  end
  return p
end

return M
