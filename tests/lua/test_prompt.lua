-- test_prompt.lua: prompt contracts and skills.  Golden tests: a fixed view
-- of the host rmsnorm task -> the exact prompt text in
-- tests/fixtures/golden/prompt/ (KH_UPDATE_GOLDEN=1 rewrites them after an
-- intended change; review the diff).
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
package.path = SRC .. "/policies/?.lua;" .. package.path
local ctl = require "lib.controller"
local prompt = require "lib.prompt"
local skills = require "lib.skills"
local dirs = require "lib.directions"

local GOLDEN = SRC .. "/tests/fixtures/golden/prompt/"

local function golden(name, text)
  local path = GOLDEN .. name
  if os.getenv("KH_UPDATE_GOLDEN") == "1" then T.write(path, text) end
  local want = T.read(path)
  if text ~= want then
    -- show the first differing line
    local i = 1
    local a, b = {}, {}
    for l in (text .. "\n"):gmatch("(.-)\n") do a[#a + 1] = l end
    for l in (want .. "\n"):gmatch("(.-)\n") do b[#b + 1] = l end
    while a[i] == b[i] and i <= #a do i = i + 1 end
    error(string.format("%s differs at line %d:\n got: %s\nwant: %s", name, i, tostring(a[i]),
      tostring(b[i])), 2)
  end
end

-- A fixed view: the fixture task, fixed latencies, the library's rules.
local function view()
  local task = ctl.load_task({ task = SRC .. "/tests/fixtures/task/rmsnorm" })
  task.path = "tests/fixtures/task/rmsnorm"
  local lat, ref = {}, {}
  local ws = {}
  for i, w in ipairs(task.workloads) do
    lat[w.uuid], ref[w.uuid] = 0.0021 * i, 0.003 * i
    ws[i] = { uuid = w.uuid, axes = w.axes, incumbent_ms = lat[w.uuid], reference_ms = ref[w.uuid] }
  end
  local st = dirs.state("host", task.workloads, lat, nil)
  local d, why = dirs.pick(st, nil, nil)
  local sk = assert(skills.load(SRC .. "/skills"))
  local inc = task.reference_solution
  return { task = task, workloads = ws, state = st,
    incumbent = { name = inc.name, source = inc.sources[1].content, lang = "c",
      manifest = inc.spec.khlua, score = 1.25 },
    direction = { name = d.name, title = d.title, brief = d.brief, why = why },
    negatives = { { round = 3, direction = "fusion", model = "replay:a",
      reason = "candidate INCORRECT_NUMERICAL on workload 5b0d7a8e (check poison)" },
      { round = 4, direction = "fusion", model = "replay:a",
        reason = "no gain beyond noise: ratio 1.001, lower bound 0.995 <= 1 + 0.020" } },
    skills = skills.select(sk, { backend = "host", op_type = "rmsnorm" }) }
end

T.test("agent-assisted prompt: golden text", function()
  local messages, text = prompt.agent_assisted(view())
  T.eq(#messages, 2)
  T.eq(messages[1].role, "system")
  golden("agent_assisted.txt", text)
end)

T.test("agent-assisted prompt with a reference kernel and profiler counters: golden text", function()
  local v = view()
  v.state = dirs.state("cuda", v.task.workloads, { [v.workloads[3].uuid] = 0.004 },
    { dram_pct = 81, sm_pct = 22, occupancy_pct = 35, spills = 0 })
  local d, why = dirs.pick(v.state, { vectorized_loads = true }, nil)
  v.direction = { name = d.name, title = d.title, brief = d.brief, why = why }
  v.reference = { name = "ref", source = "void k(void) {}\n", lang = "c" }
  local _, text = prompt.agent_assisted(v)
  golden("agent_assisted_counters.txt", text)
end)

T.test("full-agent prompt: golden text, nothing but the definition and the last score", function()
  local v = view()
  local _, first = prompt.full_agent({ task = v.task })
  golden("full_agent_first.txt", first)
  local _, text = prompt.full_agent({ task = v.task, last = { status = "rejected", score = 1.31,
    summary = "Plan: unroll by four. Verdict: no gain beyond noise." } })
  golden("full_agent.txt", text)
  T.ok(not text:find("Bottleneck", 1, true) and not text:find("skill", 1, true)
    and not text:find("Direction", 1, true))
end)

T.test("the same view gives the same bytes", function()
  local _, a = prompt.agent_assisted(view())
  local _, b = prompt.agent_assisted(view())
  T.eq(a, b)
end)

T.test("skills: layers in order, applies-to, and clear errors", function()
  local sk = assert(skills.load(SRC .. "/skills"))
  local host = skills.select(sk, { backend = "host", op_type = "rmsnorm" })
  T.eq(#host, 3)
  T.eq(host[1].layer, "generic")
  T.eq(host[2].layer, "contest")
  T.eq(host[3].layer, "operator")
  T.eq(#skills.select(sk, { backend = "host", op_type = "gemm" }), 2)
  T.match(select(2, skills.parse("# no front matter\n", "x/SKILL.md")), "x/SKILL.md: no front matter")
  T.match(select(2, skills.parse("---\nname: a\nlayer: top\n---\nbody", "s")), "layer must be")
  T.match(select(2, skills.parse("---\nname: a\nlayer: generic\napplies-to: backend\n---\nb", "s")),
    "applies%-to clause 'backend'")
  local s = assert(skills.parse("---\nname: a\nlayer: operator\napplies-to: op_type=*\n---\nbody\n"))
  T.ok(skills.applies(s, { op_type = "anything" }))
end)

T.test("directions: no counters is a valid state; counters change the bound", function()
  local ws = { { uuid = "u1", sol = { bytes = 1 << 24, flops = 1 << 22 } } }
  local lat = { u1 = math.random() + 0.5 }
  local none = dirs.state("host", ws, lat, nil)
  T.eq(none.counters, nil)
  T.eq(none.bound, "memory")
  T.eq(none.sol_fraction, nil, "no host peak: no fraction")
  T.near(none.sol[1].gbps, (1 << 24) / (lat.u1 * 1e6), 1e-9)
  local gpu = dirs.state("cuda", ws, lat, { dram_pct = 20, sm_pct = 85 })
  T.eq(gpu.bound, "compute")
  T.ok(gpu.sol_fraction > 0)
  local names = {}
  for _, a in ipairs(dirs.applicable(gpu)) do names[a.direction.name] = true end
  T.ok(names.smem_tiling and names.warp_specialization and not names.vectorized_loads)
  local d = dirs.pick(none, { vectorized_loads = true, launch_shape = true }, nil)
  T.ne(d.name, "vectorized_loads")
end)

T.test("directions read the engine's bottleneck state (kh.profile.classify)", function()
  if not (kh.profile and kh.profile.classify) then T.skip("kh.profile is not in this build") end
  local SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
  local MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
  local DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
  local ws = { { uuid = "u1", sol = { bytes = 1 << 26 } } }
  local mem = 80 + math.random() * 15
  local ps = kh.profile.classify({ [SM] = 100 - mem, [MEM] = mem, [DRAM] = mem })
  local c = dirs.counters_from_profile(ps)
  T.eq(c.bound, "memory")
  local st = dirs.state("cuda", ws, { u1 = 1 }, c)
  T.eq(st.bound, "memory")
  T.eq(dirs.pick(st, nil, nil).name, "vectorized_loads")
  local sm = 80 + math.random() * 15
  local cs = dirs.state("cuda", ws, { u1 = 1 },
    dirs.counters_from_profile(kh.profile.classify({ [SM] = sm, [MEM] = 100 - sm, [DRAM] = 5 })))
  T.eq(cs.bound, "compute")
  -- no counters: a valid state, the latency-only rules apply
  local none = kh.profile.classify(nil, { why = "KHLUA_NO_COUNTERS" })
  T.eq(dirs.counters_from_profile(none), nil)
  T.eq(dirs.state("cuda", ws, { u1 = 1 }, nil).bound, "memory")
end)
