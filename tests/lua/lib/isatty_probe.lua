-- isatty_probe.lua: prints whether kh.isatty sees stderr as a terminal
-- (test_progress.lua runs it under a pseudo-terminal).
local kh = require "kh"
print("stderr tty: " .. tostring(kh.isatty(io.stderr)))
