-- prompt.lua: prompt contracts.  A contract turns a round's view into the
-- messages sent to the model, always in the same section order, with numbers
-- formatted one way, so the same view gives the same bytes (golden tests in
-- tests/fixtures/golden/ hold the expected text).
--
--   prompt.agent_assisted(view) -> messages, text
--   prompt.full_agent(view)     -> messages, text
--
-- view: task {name, op_type, description, backend, axes, inputs, outputs,
-- constraints, tolerance, reference_code}, workloads {{uuid, axes,
-- incumbent_ms, reference_ms}}, incumbent {name, source, lang, manifest,
-- score}, state (lib.directions), direction {name, title, brief, why},
-- negatives {{round, direction, model, reason}}, skills {...}, reference
-- {name, source} (a reference kernel added on a plateau), last {score,
-- status, summary} (full agent).
local kh = require "kh"

local M = {}

local function num(x)
  if x == nil then return "n/a" end
  return string.format("%.4g", x)
end
M.num = num

local function json(t)
  return kh.json.encode(t, { sort_keys = true, indent = 2 })
end

local function shape(s)
  if s == nil then return "scalar" end
  return "[" .. table.concat(s, ", ") .. "]"
end

-- Append a line to the last block (lists and tables stay one block).
local function cont(out, line) out[#out] = out[#out] .. "\n" .. line end

local function axes_text(axes)
  local keys = {}
  for k in pairs(axes) do keys[#keys + 1] = k end
  table.sort(keys)
  local t = {}
  for i, k in ipairs(keys) do t[i] = k .. "=" .. tostring(axes[k]) end
  return table.concat(t, " ")
end

local function task_section(out, task)
  out[#out + 1] = "## Task: " .. task.name .. " (" .. tostring(task.op_type) .. ")"
  if task.description then out[#out + 1] = task.description end
  local ax = {}
  for _, a in ipairs(task.axes) do
    ax[#ax + 1] = a.name .. (a.type == "const" and (" = " .. tostring(a.value)) or " (varies)")
  end
  out[#out + 1] = "Axes: " .. table.concat(ax, ", ")
  for _, kind in ipairs({ "inputs", "outputs" }) do
    local t = {}
    for _, x in ipairs(task[kind]) do t[#t + 1] = x.name .. " " .. x.dtype .. " " .. shape(x.shape) end
    out[#out + 1] = (kind == "inputs" and "Inputs: " or "Outputs: ") .. table.concat(t, "; ")
  end
  if task.reference_code then
    out[#out + 1] = "Reference semantics:\n```python\n" .. task.reference_code:gsub("%s+$", "") .. "\n```"
  end
end

local function output_contract(out, task)
  out[#out + 1] = "## Output contract"
  if task.backend == "host" then
    out[#out + 1] = "Reply with exactly one ```c block holding the complete C source (one "
      .. "exported entry function, no main, no I/O, no threads) and one ```json block holding "
      .. "the launch manifest: {\"backend\": \"host\", \"function\": NAME, \"args\": [...]}, "
      .. "each argument one of {\"input\": n}, {\"output\": n}, {\"scalar\": n}, "
      .. "{\"axis\": n, \"type\": \"int64\"}, in the entry function's parameter order."
  else
    out[#out + 1] = "Reply with exactly one ```cuda block holding the complete device source "
      .. "(extern \"C\" __global__ kernels, allowed headers only, no host code) and one ```json "
      .. "block holding the launch manifest: {\"backend\": \"cuda\", \"launches\": [{\"kernel\", "
      .. "\"grid\", \"block\", \"shared_bytes\", \"args\"}], \"workspace\": {...}} with integer "
      .. "expressions over the axes."
  end
  out[#out + 1] = "Say in one sentence before the code what you changed."
end

local function constraints_section(out, task)
  out[#out + 1] = "## Constraints"
  local items = {}
  for _, c in ipairs(task.constraints or {}) do items[#items + 1] = "- " .. c end
  local tol = task.tolerance or {}
  items[#items + 1] = string.format("- outputs within atol %s and rtol %s of the reference on every "
    .. "element, on several seeds, with poisoned outputs and checked inputs", num(tol.atol),
    num(tol.rtol))
  items[#items + 1] = "- no state kept between calls; every output written on every call"
  out[#out + 1] = table.concat(items, "\n")
end

function M.agent_assisted(view)
  local sys = { "You optimize one kernel for the FlashInfer-Bench contest, one bounded direction "
    .. "per round. A harness compiles, checks and times every reply; only the gate decides." }
  for _, s in ipairs(view.skills or {}) do
    sys[#sys + 1] = "<skill name=\"" .. s.name .. "\" layer=\"" .. s.layer .. "\">\n" .. s.body
      .. "\n</skill>"
  end
  local out = {}
  task_section(out, view.task)
  out[#out + 1] = "## Workloads (latency in ms)"
  out[#out + 1] = "| axes | incumbent | reference |"
  cont(out, "|---|---|---|")
  for _, w in ipairs(view.workloads) do
    cont(out, string.format("| %s | %s | %s |", axes_text(w.axes), num(w.incumbent_ms),
      num(w.reference_ms)))
  end
  constraints_section(out, view.task)
  local inc = view.incumbent
  out[#out + 1] = "## Incumbent: " .. inc.name .. " (score " .. num(inc.score) .. ")"
  out[#out + 1] = "```" .. (inc.lang or "c") .. "\n" .. inc.source:gsub("%s+$", "") .. "\n```"
  out[#out + 1] = "```json\n" .. json(inc.manifest) .. "\n```"
  local st = view.state
  out[#out + 1] = "## Bottleneck state"
  out[#out + 1] = string.format("bound: %s; profiler counters: %s; speed-of-light fraction: %s; "
    .. "small-problem share: %s", st.bound, st.counters and "present" or "none (latency only)",
    num(st.sol_fraction), num(st.small_share))
  if st.counters then
    local keys = {}
    for k in pairs(st.counters) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do cont(out, "- " .. k .. ": " .. tostring(st.counters[k])) end
  end
  for _, e in ipairs(st.sol) do
    cont(out, string.format("- %s: %s ms, %s GB/s, %s GFLOP/s", e.uuid:sub(1, 13),
      num(e.latency_ms), num(e.gbps), num(e.gflops)))
  end
  local d = view.direction
  out[#out + 1] = "## Direction for this round: " .. d.title
  out[#out + 1] = d.brief
  out[#out + 1] = "Why: " .. d.why .. ". Change nothing outside this direction."
  if view.reference then
    out[#out + 1] = "## A reference kernel (correct, for ideas; do not copy its limits)"
    out[#out + 1] = "```" .. (view.reference.lang or "c") .. "\n"
      .. view.reference.source:gsub("%s+$", "") .. "\n```"
  end
  out[#out + 1] = "## Negative results (do not repeat)"
  if #(view.negatives or {}) == 0 then cont(out, "- none yet") end
  for _, n in ipairs(view.negatives or {}) do
    cont(out, string.format("- round %d, %s, %s: %s", n.round, n.direction or "-",
      n.model or "-", n.reason))
  end
  output_contract(out, view.task)
  local system, user = table.concat(sys, "\n\n"), table.concat(out, "\n\n")
  return { { role = "system", content = system }, { role = "user", content = user } },
    system .. "\n\n" .. user
end

-- The Full-Agent baseline sees the definition, its own last plan summary and
-- last score: no profiler state, no skills, no directions.
function M.full_agent(view)
  local out = {}
  task_section(out, view.task)
  constraints_section(out, view.task)
  local last = view.last
  out[#out + 1] = "## Your last attempt"
  if last then
    out[#out + 1] = string.format("status %s, score %s. %s", last.status, num(last.score),
      last.summary or "")
  else
    out[#out + 1] = "none yet: write a correct first version."
  end
  out[#out + 1] = "## Plan, then execute"
  out[#out + 1] = "First write a short plan (three lines at most) for the next improvement, "
    .. "then the code that carries it out."
  output_contract(out, view.task)
  local user = table.concat(out, "\n\n")
  return { { role = "user", content = user } }, user
end

return M
