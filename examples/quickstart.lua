-- quickstart.lua: a first look at khlua on this machine.  Prints what the
-- machine offers (the doctor report).  Replaced by a kernel compile once
-- kh.compile lands.
local kh = require "kh"
local r = kh.doctor()
for _, c in ipairs(r.checks) do
  print(string.format("%-8s %-20s %s", c.status, c.name, c.detail))
end
