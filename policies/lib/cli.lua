-- cli.lua: the command line every policy script shares.
--
--   return require("lib.cli").main(policy, ...)   -- at the end of a policy file
--
-- Run as a script (`khlua policies/X.lua ARGS`), it parses ARGS, runs the
-- controller and exits 0 (done), 1 (could not run) or 2 (usage); Ctrl-C
-- exits 130 through khlua.  Loaded by lib.policy.load (its first argument is
-- cli.AS_MODULE), it returns the policy table instead.
local kh = require "kh"
local ctl = require "lib.controller"
local models = require "lib.models"
local ev = require "lib.evaluate"

local M = {}

M.AS_MODULE = setmetatable({}, { __name = "khlua.policy.module" })

local function usage(name)
  return "usage: khlua policies/" .. name .. ".lua --task DIR [--model SPEC[,SPEC...]] [options]\n"
    .. "       khlua policies/" .. name .. ".lua --resume RUN [--rounds N] [--json]\n"
    .. "  --task DIR            a task package (definition, workloads, trusted reference)\n"
    .. "  --definition NAME     when the package holds several definitions\n"
    .. "  --seed-solution NAME|FILE  the first incumbent: a solution of the task, or a\n"
    .. "                        Solution file from anywhere (khlua best writes one; default:\n"
    .. "                        the task's baseline, else its reference)\n"
    .. "  --model SPECS         model families, comma-separated: PROVIDER:MODEL[@URL] or\n"
    .. "                        replay:DIR (default anthropic:claude-sonnet-4-5,openai:gpt-5);\n"
    .. "                        a family whose key is not in the environment runs on replay\n"
    .. "  --replay DIR          replies for offline families (default: the task's replay/)\n"
    .. "  --rounds N            rounds (default 10)\n"
    .. "  --budget LIST         wall=SECONDS,tokens=N,usd=X (any of them)\n"
    .. "  --plateau K           rounds without an accepted improvement that make a plateau (3)\n"
    .. "  --margin M            the paired gate's margin: lower bound > 1 + M (0.02)\n"
    .. "  --reps R              paired repetitions in the representative gate (5)\n"
    .. "  --sample N            workloads sampled for the representative gate (2)\n"
    .. "  --finalist-seeds N    correctness seeds per workload for a finalist (100)\n"
    .. "  --finalist-elements N output elements a finalist's seeds may compare in all; past\n"
    .. "                        it big workloads get fewer seeds, 10 at least (2147483648)\n"
    .. "  --candidates N        candidates per round at the start (1)\n"
    .. "  --max-failed-calls N  stop after N model calls in a row have failed (3)\n"
    .. "  --concurrency K       keep up to K model calls in flight: the next rounds are\n"
    .. "                        planned and asked while this round's candidates are judged\n"
    .. "                        (their prompts see the state when they were planned) (1)\n"
    .. "  --seed N              the gate's seed: every evaluation's inputs and verified calls\n"
    .. "                        derive from it (default: drawn from the OS, saved with the run)\n"
    .. "  --skills DIR          SKILL.md playbooks (default: skills/ beside policies/)\n"
    .. "  --pace SECONDS        at least this long between rounds\n"
    .. "  --gpus all|N|LIST     evaluate on these GPUs, workloads in parallel (docs/scale-out.md)\n"
    .. "  --workers-per-gpu K   workers sharing each GPU (1)\n"
    .. "  --host-workers N      host workers (1)\n"
    .. "  --launch L            local, srun, ssh or a template ({exe} worker --role {role})\n"
    .. "  --hosts A,B           hosts for --launch ssh\n"
    .. "  --compare device|host where candidates are judged against the trusted reference:\n"
    .. "                        on the GPU (the reference in the candidate's request, parts\n"
    .. "                        back, not outputs; the default where the reference runs\n"
    .. "                        on the GPU) or here\n"
    .. "  --report FILE         the run's HTML report, rewritten after every round: each\n"
    .. "                        candidate's source, its diff against the incumbent, verdict\n"
    .. "                        and deciding check, the best-so-far plot (default:\n"
    .. "                        reports/RUN.html beside the store's folder; 'none': no report)\n"
    .. "  --resume RUN          continue a run from its last whole round\n"
    .. "  --json                print the run summary as JSON on stdout\n"
    .. "On a terminal, stderr shows a progress line (round, candidates, best speedup, ETA);\n"
    .. "not with --json.\n"
    .. "  --fake-evaluator FILE replace kh.eval with FILE's function (tests only)\n"
    .. "The store is khlua's (khlua --store PATH policies/...; default .khlua/store).\n"
    .. "Before round 1 each model family is asked one tiny question (a replay folder is\n"
    .. "looked at): a wrong key, an unknown model or a server that is down stops the run.\n"
    .. "exit codes: 0 done, 1 could not run or no model call succeeded or stopped by failing\n"
    .. "model calls, 2 usage, 130 interrupted\n"
end

local NUMS = { rounds = "integer", plateau = "integer", margin = "number", reps = "integer",
  sample = "integer", ["finalist-seeds"] = "integer", ["finalist-elements"] = "number",
  candidates = "integer", seed = "integer", ["max-failed-calls"] = "integer",
  pace = "number", ["workers-per-gpu"] = "integer", ["host-workers"] = "integer",
  concurrency = "integer" }
-- each number's admissible range [lo, hi] and what it means
local RANGES = { rounds = { 1, 1e6 }, plateau = { 1, 1e6 }, margin = { 0, 10 },
  reps = { 2, 1000 }, sample = { 1, 1e6 }, ["finalist-seeds"] = { 1, 1e6 },
  ["finalist-elements"] = { 1, 1e18 }, candidates = { 1, 4 }, ["max-failed-calls"] = { 1, 1e6 },
  pace = { 0, 86400 }, ["workers-per-gpu"] = { 1, 64 }, ["host-workers"] = { 1, 1024 },
  concurrency = { 1, 64 } }

-- Parse argv; returns opts or nil, message.
function M.parse(argv)
  local o = { explicit = {} }
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--json" then
      o.json = true
    elseif a == "-h" or a == "--help" then
      o.help = true
    elseif a:match("^%-%-") then
      local k = a:sub(3)
      local v = argv[i + 1]
      if not ({ task = 1, definition = 1, model = 1, replay = 1, budget = 1, skills = 1,
        resume = 1, ["fake-evaluator"] = 1, ["seed-solution"] = 1, gpus = 1, launch = 1,
        hosts = 1, report = 1, compare = 1 })[k] and not NUMS[k] then
        return nil, "unknown option " .. a
      end
      if v == nil or (k == "report" and v == "") then return nil, a .. " needs a value" end
      if k == "compare" and v ~= "device" and v ~= "host" then
        return nil, a .. " needs device or host, got '" .. v .. "'"
      end
      if NUMS[k] then
        local n = tonumber(v)
        if not n or (NUMS[k] == "integer" and (n ~= math.floor(n) or n < 0)) then
          return nil, a .. " needs " .. (NUMS[k] == "integer" and "a non-negative integer" or "a number")
            .. ", got '" .. v .. "'"
        end
        local r = RANGES[k]
        if r and (n < r[1] or n > r[2]) then
          return nil, string.format("%s must be between %s and %s, got %s", a,
            tostring(math.tointeger(r[1]) or r[1]), tostring(math.tointeger(r[2]) or r[2]), v)
        end
        v = n
      end
      o[k] = v
      o.explicit[k] = true
      i = i + 1
    else
      return nil, "unexpected argument '" .. a .. "'"
    end
    i = i + 1
  end
  if o.budget then
    local b = {}
    for part in o.budget:gmatch("[^,]+") do
      local k, v = part:match("^(%w+)=([%d.e+]+)$")
      local key = ({ wall = "wall_s", tokens = "tokens", usd = "usd" })[k or ""]
      if not key or not tonumber(v) then
        return nil, "--budget: '" .. part .. "' is not wall=SECONDS, tokens=N or usd=X"
      end
      if tonumber(v) <= 0 then return nil, "--budget: " .. k .. " must be above 0" end
      b[key] = tonumber(v)
    end
    o.budget = b
  end
  if not o.help and not o.task and not o.resume then return nil, "--task is required" end
  return o
end

local function here()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return src:match("^(.*)/lib/[^/]*$") or "policies"
end

-- Build the controller's configuration from parsed options.
function M.config(o)
  local cfg = { task = o.task, definition = o.definition, seed_solution = o["seed-solution"],
    rounds = o.rounds, plateau = o.plateau,
    budget = o.budget, n = o.candidates, pace = o.pace, resume = o.resume,
    max_failed_calls = o["max-failed-calls"], concurrency = o.concurrency,
    report = o.report,
    gate = { margin = o.margin, reps = o.reps, sample = o.sample,
      finalist_trials = o["finalist-seeds"], finalist_elements = o["finalist-elements"],
      seed = o.seed },
    skills = o.skills or (here() .. "/../skills"), replay = o.replay, explicit = {} }
  for k in pairs(o.explicit) do
    local map = { candidates = "n", ["seed-solution"] = "seed_solution", margin = "gate", reps = "gate", sample = "gate",
      ["max-failed-calls"] = "max_failed_calls",
      ["finalist-seeds"] = "gate", ["finalist-elements"] = "gate", seed = "gate" }
    cfg.explicit[map[k] or k] = true
  end
  if cfg.report == "none" then cfg.report = false end
  if next(cfg.gate) == nil then cfg.gate = nil end
  -- where the evaluations run (kh.eval's placement options)
  local pl = { gpus = o.gpus, workers_per_gpu = o["workers-per-gpu"],
    host_workers = o["host-workers"], launch = o.launch, hosts = o.hosts }
  if o.compare then pl.device_compare = o.compare == "device" end
  if next(pl) then cfg.placement = pl end
  cfg.model_specs = o.model
  return cfg
end

-- Resolve model specs (after a resume has filled task and replay).
function M.resolve_models(cfg)
  local specs = cfg.model_specs or "anthropic:claude-sonnet-4-5,openai:gpt-5"
  local list, why = models.parse_list(specs)
  if not list then return nil, why end
  local root = cfg.replay
  if not root and cfg.task and models.is_dir(cfg.task .. "/replay") then root = cfg.task .. "/replay" end
  local notes
  list, notes = models.resolve(list, root)
  if not list then return nil, notes end
  cfg.models, cfg.notes = list, notes
  cfg.model_specs = specs
  return true
end

function M.main(policy, ...)
  if select(1, ...) == M.AS_MODULE then return policy end
  local o, why = M.parse({ ... })
  if not o then
    io.stderr:write(policy.name, ": ", why, "\n", usage(policy.name))
    os.exit(2, true)
  end
  if o.help then
    io.stdout:write(policy.title and (policy.title .. "\n") or "", usage(policy.name))
    os.exit(0, true)
  end
  if o["fake-evaluator"] then
    local fn = assert(dofile(o["fake-evaluator"]))
    ev.use(type(fn) == "table" and fn.evaluate or fn)
  end
  local cfg = M.config(o)
  if cfg.resume then
    -- the run's stored configuration supplies what the command line does not
    local db, derr = kh.store.open(nil, { readonly = true })
    local run = db and db:get(cfg.resume)
    if db then db:close() end
    if not run or run.type ~= "run" then
      io.stderr:write(policy.name, ": --resume ", cfg.resume, ": ",
        not db and ("cannot open the store: " .. tostring(derr))
        or not run and "no such run in the store (khlua store ls --type run lists them)"
        or "not a run but a " .. tostring(run.type) .. " record", "\n")
      os.exit(1, true)
    end
    if run.config then
      for k, v in pairs(run.config) do if cfg[k] == nil or not cfg.explicit[k] then cfg[k] = v end end
      if cfg.explicit.model then cfg.model_specs = o.model end
    end
  end
  local ok, mwhy = M.resolve_models(cfg)
  if not ok then
    io.stderr:write(policy.name, ": ", mwhy, "\n")
    os.exit(1, true)
  end
  local printer = o.json and function(l) io.stderr:write(l, "\n") end
    or function(l) io.stdout:write(l, "\n"); io.stdout:flush() end
  cfg.out = printer
  -- the progress line: for a person at a terminal, never in JSON or a log file
  cfg.progress = not o.json and kh.isatty(io.stderr)
  local res, msg, code = ctl.run(policy, cfg)
  if not res then
    io.stderr:write(policy.name, ": ", tostring(msg), code and (" (" .. code .. ")") or "", "\n")
    os.exit(1, true)
  end
  local failed = res.status == "failed" or (res.calls_made > 0 and res.calls_ok == 0)
  -- the last line says where the best kernel is (a command that writes it out)
  res.best_command = string.format("khlua --store %s best %s --out best-%s", res.store, res.run,
    res.run)
  if o.json then
    io.stdout:write(kh.json.encode(res, { sort_keys = true }), "\n")
  else
    local m = res.metrics
    printer(string.format("run %s %s (%s): %d rounds, %d candidates, %d accepted, incumbent %s "
      .. "(score %.3f), %d tokens, $%.4f%s", res.run, res.status, res.stop_reason or "-",
      m.rounds, m.candidates, m.accepted, res.incumbent_name, m.incumbent_score or 0, m.tokens,
      m.usd, m.usd_per_accepted and string.format(" ($%.4f per accepted)", m.usd_per_accepted)
      or ""))
    printer(string.format("best kernel: %s (%s); write it out with: %s; report: %s", res.incumbent_name,
      m.accepted > 0 and "promoted" or "the seed: nothing was promoted", res.best_command,
      res.report or "none"))
  end
  if failed then
    io.stderr:write(policy.name, ": ", res.calls_ok == 0 and res.calls_made > 0
      and string.format("no model call succeeded (%d made)", res.calls_made)
      or ("stopped: " .. tostring(res.stop_reason)), "\n")
    os.exit(1, true)
  end
  return 0
end

return M
