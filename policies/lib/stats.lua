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

-- log Gamma (Lanczos, g = 7, 9 terms), for the incomplete beta below
local LANCZOS = { 0.99999999999980993, 676.5203681218851, -1259.1392167224028,
  771.32342877765313, -176.61502916214059, 12.507343278686905, -0.13857109526572012,
  9.9843695780195716e-6, 1.5056327351493116e-7 }
local function lgamma(x)
  if x < 0.5 then return math.log(math.pi / math.abs(math.sin(math.pi * x))) - lgamma(1 - x) end
  x = x - 1
  local a = LANCZOS[1]
  local t = x + 7.5
  for i = 2, 9 do a = a + LANCZOS[i] / (x + i - 1) end
  return 0.5 * math.log(2 * math.pi) + (x + 0.5) * math.log(t) - t + math.log(a)
end

-- the continued fraction of the regularized incomplete beta (Lentz)
local function beta_cf(a, b, x)
  local tiny = 1e-300
  local function nz(v) return math.abs(v) < tiny and tiny or v end
  local c, d = 1, 1 / nz(1 - (a + b) * x / (a + 1))
  local h = d
  for m = 1, 400 do
    local m2 = 2 * m
    local num = m * (b - m) * x / ((a - 1 + m2) * (a + m2))
    d = 1 / nz(1 + num * d)
    c = nz(1 + num / c)
    h = h * d * c
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2))
    d = 1 / nz(1 + num * d)
    c = nz(1 + num / c)
    local step = d * c
    h = h * step
    if math.abs(step - 1) < 1e-15 then break end
  end
  return h
end

local function ibeta(a, b, x)
  if x <= 0 then return 0 end
  if x >= 1 then return 1 end
  local front = math.exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * math.log(x)
    + b * math.log(1 - x))
  if x < (a + 1) / (a + b + 2) then return front * beta_cf(a, b, x) / a end
  return 1 - front * beta_cf(b, a, 1 - x) / b
end

-- The p-quantile (p > 0.5) of Student's t with df degrees of freedom.
function M.t_quantile(p, df)
  local lo, hi = 0, 1e4
  for _ = 1, 200 do
    local mid = (lo + hi) / 2
    if 1 - 0.5 * ibeta(df / 2, 0.5, df / (df + mid * mid)) < p then lo = mid else hi = mid end
  end
  return (lo + hi) / 2
end

-- One-sided (1 - alpha) bounds on the geometric mean of positive xs:
-- Student's t on their logs (the engine's paired interval, eval_paired.c).
function M.t_interval(xs, alpha)
  local n, m, ss = #xs, 0, 0
  assert(n >= 2, "t_interval: 2 values at least")
  for _, x in ipairs(xs) do m = m + math.log(x) end
  m = m / n
  for _, x in ipairs(xs) do ss = ss + (math.log(x) - m) ^ 2 end
  local se = math.sqrt(ss / (n - 1) / n)
  local q = M.t_quantile(1 - (alpha or 0.05), n - 1)
  return math.exp(m - q * se), math.exp(m + q * se)
end

return M