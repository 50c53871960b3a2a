-- eval_inrun.lua: kh.eval of a fresh candidate inside a run that is already
-- warm (issue 21's "one workload inside a warm run"): one process evaluates
-- FIRST (the workers, the compile servers and the reference's artifacts are
-- made then), then SECOND, a candidate nothing is cached for, and only the
-- second is timed.  Run by tests/bench/bench_eval.sh (runs PROTOCOL-inrun and
-- PROTOCOL-inrun1):
--
--   khlua tests/bench/eval_inrun.lua TASK FIRST SECOND PROTOCOL WORKLOADS OUT [COMPARE]
--
-- WORKLOADS: a count or "all"; COMPARE: "device" or "host" (kh.eval's
-- device_compare; anything else: kh.eval's default).  Writes SECOND's traces as JSONL on stdout and
-- the second evaluation's wall seconds into OUT.
local kh = require "kh"

local task, first, second, protocol, nwl, outf, cmp = table.unpack(arg)
if not outf then
  io.stderr:write("usage: khlua eval_inrun.lua TASK FIRST SECOND PROTOCOL WORKLOADS OUT\n")
  os.exit(2)
end
local opts = { protocol = protocol, workloads = tonumber(nwl) or nwl }
if cmp == "device" or cmp == "host" then opts.device_compare = cmp == "device" end

local function timed(sol)
  local t0 = kh.time.now()
  local tr, msg = kh.eval(task, sol, opts)
  if not tr then
    io.stderr:write("eval_inrun: " .. sol .. ": " .. tostring(msg) .. "\n")
    os.exit(1)
  end
  return tr, kh.time.now() - t0
end

local _, t_first = timed(first)
local tr, t_second = timed(second)
io.stderr:write(string.format("eval_inrun: first %.3f s, second %.3f s\n", t_first, t_second))
for _, t in ipairs(tr) do print(kh.json.encode(t)) end
local f = assert(io.open(outf, "w"))
f:write(string.format("%.6f\n", t_second))
f:close()
