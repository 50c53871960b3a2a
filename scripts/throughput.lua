-- throughput.lua: a search run's screening throughput from its records
-- (issue 21): the candidate-workloads screened (evaluation records of
-- protocol "screen", the seed's excepted), per hour of the given wall time,
-- and per GPU the kernel time of the run's evaluations over that wall time
-- (the busy fraction) and their active time over it (gpu_active_seconds:
-- the timing batches whole, the evaluator's own work in them included).
--   khlua [--store PATH] scripts/throughput.lua RUN WALL_SECONDS [K]
-- Prints one line of text, then one JSON line.
local kh = require "kh"
local run_id, wall, k = arg[1], tonumber(arg[2] or ""), tonumber(arg[3] or "")
if not run_id or not wall or wall <= 0 then
  io.stderr:write("usage: khlua scripts/throughput.lua RUN WALL_SECONDS [K]\n")
  os.exit(2)
end
local db = assert(kh.store.open(os.getenv("KHLUA_STORE") or ".khlua/store", { readonly = true }))
local evals = db:query { run = run_id, type = "evaluation" } or {}
local rounds = db:query { run = run_id, type = "round" } or {}
db:close()
if #evals == 0 then
  io.stderr:write("throughput: no evaluations of " .. run_id .. "\n")
  os.exit(1)
end
local screened, candidates, kern, act = 0, {}, {}, {}
for _, e in ipairs(evals) do
  local kl = e.evaluation and e.evaluation.khlua
  if e.protocol == "screen" and e.purpose ~= "seed" then
    screened = screened + 1
    candidates[e.candidate or "?"] = true
  end
  local u = (e.provenance and e.provenance.gpu_uuid) or (kl and kl.gpu_uuid)
  local ks = kl and kl.gpu_kernel_seconds
  if type(u) == "string" and type(ks) == "number" then
    kern[u] = (kern[u] or 0) + ks
    act[u] = (act[u] or 0) + (tonumber(kl.gpu_active_seconds) or 0)
  end
end
local ncand = 0
for _ in pairs(candidates) do ncand = ncand + 1 end
local busy = {}
for u, ks in pairs(kern) do
  busy[#busy + 1] = { gpu = u, kernel_s = ks, fraction = ks / wall, active_s = act[u],
    active_fraction = act[u] / wall }
end
table.sort(busy, function(a, b) return a.gpu < b.gpu end)
local per_hour = screened / wall * 3600
local b1 = busy[1] and string.format(", GPU busy %.1f%%, active %.1f%%", 100 * busy[1].fraction,
  100 * busy[1].active_fraction) or ""
print(string.format("%d rounds, %d candidates, %d screened candidate-workloads in %.1f s%s: "
  .. "%.0f per hour%s", #rounds, ncand, screened, wall, k and (" (K = " .. k .. ")") or "",
  per_hour, b1))
print(kh.json.encode { run = run_id, rounds = #rounds, candidates = ncand, screened = screened,
  wall_s = wall, per_hour = per_hour, concurrency = k, gpu_busy = busy })
