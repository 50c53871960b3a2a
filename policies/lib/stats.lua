-- stats.lua: the small statistics the promotion gate needs, deterministic:
-- a seeded generator (so a gate decision replays exactly from its evidence),
-- the geometric mean, quantiles and a percentile bootstrap.
local M = {}

-- xorshift64* on Lua integers: a seeded stream independent of math.random.
function M.rng(seed)
  local s = (seed or 1) ~ 0x9E3779B97F4A7C15
  if s == 0 then s = 1 end
  return function()
    s = s ~ (s >> 12)
    s = s ~ (s << 25)
    s = s ~ (s >> 27)
    local x = s * 0x2545F4914F6CDD1D
    return ((x >> 11) & ((1 << 53) - 1)) / (1 << 53) -- uniform in [0, 1)
  end
end

function M.geomean(xs)
  local s = 0
  for _, x in ipairs(xs) do s = s + math.log(x) end
  return math.exp(s / #xs)
end

function M.mean(xs)
  local s = 0
  for _, x in ipairs(xs) do s = s + x end
  return s / #xs
end

function M.quantile(xs, q)
  local t = {}
  for i, x in ipairs(xs) do t[i] = x end
  table.sort(t)
  local pos = 1 + (#t - 1) * q
  local lo = math.floor(pos)
  local hi = math.min(lo + 1, #t)
  return t[lo] + (t[hi] - t[lo]) * (pos - lo)
end

function M.median(xs) return M.quantile(xs, 0.5) end

-- Percentile bootstrap of stat over xs: returns the (alpha, 1 - alpha)
-- quantiles of the resampled statistic (one-sided bounds at level 1 - alpha).
function M.bootstrap(xs, stat, opts)
  opts = opts or {}
  local B, alpha = opts.resamples or 2000, opts.alpha or 0.05
  local rand = M.rng(opts.seed or 1)
  local n = #xs
  local reps, tmp = {}, {}
  for b = 1, B do
    for i = 1, n do tmp[i] = xs[1 + math.floor(rand() * n)] end
    reps[b] = stat(tmp)
  end
  return M.quantile(reps, alpha), M.quantile(reps, 1 - alpha)
end

return M
