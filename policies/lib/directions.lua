-- directions.lua: the bottleneck state and a library of bounded optimization
-- directions, each with an applicability rule over that state.
--
-- The bottleneck state is what the profiler evidence says, reduced to what a
-- rule can read:
--   backend      "host" | "cuda"
--   counters     nil (no profiler: the host backend, or none ran) or a table
--                {dram_pct, sm_pct, occupancy_pct, achieved_occupancy_pct,
--                 l2_hit_pct, stall_memory_pct, registers, spills, ...}
--   bound        "memory" | "compute" | "latency" | "unknown"
--   sol          per-workload {uuid, latency_ms, bytes, flops, gbps, gflops,
--                fraction (of the speed-of-light bound, when the peak is known)}
--   sol_fraction the geometric mean of the fractions, or nil
--   small_share  share of workloads whose problem is small (launch-bound)
-- "No counters" is a valid state: the rules fall back to latency against
-- speed of light, and to the workload shapes.
local stats = require "lib.stats"

local M = {}

-- Peak figures by backend; host peaks are unknown unless given (--host-peak-gbs).
M.peaks = { cuda = { gbps = 4800, gflops = 60000 } }

-- The engine's bottleneck state (kh.profile.classify / kh.profile.run: kind,
-- counters, sm_pct, dram_pct, occupancy_pct, spills, reread, sol_fraction,
-- signature) as the counters table the rules read; nil when the profiler
-- had no counters (its `why` says why).
local KINDS = { ["memory-bound"] = "memory", ["compute-bound"] = "compute",
  ["latency-bound"] = "latency", ["small-grid"] = "latency", balanced = "compute" }
function M.counters_from_profile(ps)
  if not ps or not ps.counters then return nil end
  return { kind = ps.kind, bound = KINDS[ps.kind], signature = ps.signature, sm_pct = ps.sm_pct,
    dram_pct = ps.dram_pct, mem_pct = ps.mem_pct, occupancy_pct = ps.occupancy_pct,
    occupancy_limiter = ps.occupancy_limiter, spills = ps.spills, reread = ps.reread,
    sol_fraction = ps.sol_fraction }
end

-- state from the incumbent's per-workload latencies and the task's bounds.
--   perf: {[uuid] = latency_ms}; workloads: {{uuid, axes, sol = {bytes, flops}}}
function M.state(backend, workloads, perf, counters, peaks)
  peaks = peaks or M.peaks[backend] or {}
  local st = { backend = backend, counters = counters, sol = {}, bound = "unknown" }
  local fr, small = {}, 0
  for _, w in ipairs(workloads) do
    local l = perf and perf[w.uuid]
    if l then
      local e = { uuid = w.uuid, latency_ms = l, bytes = w.sol and w.sol.bytes,
        flops = w.sol and w.sol.flops }
      if e.bytes then e.gbps = e.bytes / (l * 1e6) end
      if e.flops then e.gflops = e.flops / (l * 1e6) end
      local f = {}
      if peaks.gbps and e.gbps then f[#f + 1] = e.gbps / peaks.gbps end
      if peaks.gflops and e.gflops then f[#f + 1] = e.gflops / peaks.gflops end
      if #f > 0 then
        e.fraction = math.max(table.unpack(f))
        fr[#fr + 1] = math.max(e.fraction, 1e-9)
      end
      -- small: too little work to fill a GPU (on the host a call is cheap to start)
      if backend == "cuda" and e.bytes and e.bytes < (1 << 20) then small = small + 1 end
      st.sol[#st.sol + 1] = e
    end
  end
  st.small_share = #st.sol > 0 and small / #st.sol or 0
  st.sol_fraction = #fr > 0 and stats.geomean(fr) or nil
  if counters and counters.sol_fraction then
    st.sol_fraction = counters.sol_fraction -- the engine's, from its measured copy bandwidth
  end
  if counters and counters.bound then
    st.bound = counters.bound -- the engine's classification (ncu's SOL rule)
  elseif counters and counters.dram_pct and counters.sm_pct then
    if counters.dram_pct >= 60 and counters.dram_pct >= counters.sm_pct then
      st.bound = "memory"
    elseif counters.sm_pct >= 60 then
      st.bound = "compute"
    else
      st.bound = "latency"
    end
  elseif st.small_share > 0.5 then
    st.bound = "latency"
  else
    -- without counters, moving bytes is the usual limit of the contest's
    -- normalization / attention / elementwise kernels: assume memory
    st.bound = "memory"
  end
  return st
end

-- Each direction: name, title, bound (what it is for), rule(state) -> ok, why,
-- and the brief given to the model (what to change and what not to).
M.library = {
  { name = "vectorized_loads", title = "vectorized 16-byte loads and stores",
    rule = function(s)
      if s.bound == "memory" then return true, "memory-bound: wider accesses cut instructions per byte" end
      return false, "not memory-bound"
    end,
    brief = "Load and store 16 bytes per access (uint4 / float4, or 8 bf16 at once); keep the "
      .. "algorithm, the launch shape and the numerics as they are." },
  { name = "launch_shape", title = "launch-shape sweep",
    rule = function(s)
      if s.bound == "latency" then return true, "small problems: the launch shape decides the latency" end
      if s.sol_fraction and s.sol_fraction < 0.3 then return true, "far from speed of light" end
      return false, "launch shape is not the limit"
    end,
    brief = "Change only the block size, the work per thread and the grid mapping; keep the "
      .. "kernel body's arithmetic." },
  { name = "smem_tiling", title = "shared-memory tiling",
    rule = function(s)
      if s.backend == "host" then return false, "no shared memory on the host backend" end
      if s.counters and (s.counters.l2_hit_pct or 100) < 50 then return true, "poor cache reuse" end
      return s.bound == "compute", "reuse across threads"
    end,
    brief = "Stage reused data in shared memory tiles; avoid bank conflicts; no change to the "
      .. "output layout." },
  { name = "split_k", title = "split-K / split-KV",
    rule = function(s)
      if s.small_share > 0.5 and s.backend == "cuda" then return true, "too few blocks for the GPU" end
      return false, "enough parallelism"
    end,
    brief = "Split the reduction axis across blocks and combine the partial results in a second "
      .. "launch; keep the combine exact to the tolerance." },
  { name = "fusion", title = "fusion of passes",
    rule = function(s)
      if s.bound == "memory" or s.bound == "unknown" then return true, "each pass re-reads the input" end
      return false, "not memory-bound"
    end,
    brief = "Fuse separate passes over the same data into one (keep the row in registers or "
      .. "cache between the reduction and the scaling)." },
  { name = "ilp", title = "independent accumulators (instruction-level parallelism)",
    rule = function(s)
      if s.bound ~= "memory" or not s.counters then return true, "dependent add chains limit a reduction" end
      return false, "memory-bound with counters: not the limit"
    end,
    brief = "Break long dependency chains in reductions with several independent accumulators "
      .. "combined at the end; same order of magnitude of rounding error." },
  { name = "warp_specialization", title = "warp specialization",
    rule = function(s)
      if s.backend ~= "cuda" then return false, "CUDA only" end
      return s.bound == "compute" or (s.counters and (s.counters.stall_memory_pct or 0) > 40),
        "overlap loads with math"
    end,
    brief = "Give producer warps the loads and consumer warps the math, with a barrier or "
      .. "pipeline between them." },
  { name = "occupancy", title = "occupancy tuning",
    rule = function(s)
      local c = s.counters
      if c and c.occupancy_pct and c.occupancy_pct < 40 then return true, "low occupancy" end
      if c and (c.spills or 0) > 0 then return true, "register spills" end
      return false, "occupancy unknown or fine"
    end,
    brief = "Trade registers and shared memory for resident warps (__launch_bounds__, smaller "
      .. "tiles); remove spills." },
  { name = "route_change", title = "a structural route change",
    rule = function(s)
      if s.sol_fraction and s.sol_fraction < 0.1 then return true, "an order of magnitude off speed of light" end
      return true, "the last resort when bounded directions are exhausted"
    end,
    brief = "Replace the algorithm's structure (a different decomposition, one kernel instead of "
      .. "several); correctness first." },
}

function M.get(name)
  for _, d in ipairs(M.library) do if d.name == name then return d end end
  return nil
end

-- Directions applicable to the state, in library order, minus the excluded
-- ones (exhausted by a plateau); each {direction, why}.
function M.applicable(state, exclude)
  local out = {}
  for _, d in ipairs(M.library) do
    if not (exclude and exclude[d.name]) then
      local ok, why = d.rule(state)
      if ok then out[#out + 1] = { direction = d, why = why } end
    end
  end
  return out
end

-- One direction for this round: the current one while it still applies and
-- is not excluded (a direction is kept until a plateau retires it), else the
-- first applicable one in library order.  Returns direction, why.
function M.pick(state, exclude, current)
  local cands = M.applicable(state, exclude)
  if #cands == 0 then return nil, "no direction applies" end
  for _, c in ipairs(cands) do
    if c.direction.name == current then return c.direction, c.why end
  end
  return cands[1].direction, cands[1].why
end

return M
