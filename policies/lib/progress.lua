-- progress.lua: the one-line progress display of a long run: round i/N,
-- candidates so far, best speedup so far, what the round is doing, ETA.
-- lib.cli turns it on only when stderr is a terminal and --json is not given
-- (cfg.progress); the controller then draws it on stderr and clears it
-- around every other line it prints, so a log line never lands in the
-- middle of the progress line.  Nothing here touches the store.
--
--   local pg = progress.new { total = 10, done = 0, wall_budget_s = nil }
--   pg:update { round = 3, candidates = 4, best = 1.25, phase = "sweep" }
--   pg:around(function() print("a log line") end)
--   pg:finish()
local kh = require "kh"

local P = {}
P.__index = P

local CLEAR = "\r\27[K"

-- o: total (rounds in the run), done (rounds already done: a resumed run),
-- wall_budget_s and elapsed_s (the run's wall budget and what it used
-- before), stream (default io.stderr), now (clock, for tests).
function P.new(o)
  local now = o.now or kh.time.now
  return setmetatable({ stream = o.stream or io.stderr, now = now, t0 = now(),
    total = o.total or 0, start = o.done or 0, done = o.done or 0, candidates = 0,
    wall_budget_s = o.wall_budget_s, elapsed0 = o.elapsed_s or 0, shown = false,
    drawn_at = -math.huge }, P)
end

local function dur(s)
  s = math.max(0, math.floor(s + 0.5))
  if s >= 3600 then return string.format("%dh%02dm", s // 3600, s % 3600 // 60) end
  if s >= 60 then return string.format("%dm%02ds", s // 60, s % 60) end
  return string.format("%ds", s)
end

-- Seconds left: the mean time of the rounds this process ran, times the
-- rounds left; never past the wall budget.  nil before a round has ended.
function P:eta()
  local ran = self.done - self.start
  if ran <= 0 then return nil end
  local spent = self.now() - self.t0
  local left = spent / ran * math.max(self.total - self.done, 0)
  if self.wall_budget_s then
    left = math.min(left, math.max(self.wall_budget_s - self.elapsed0 - spent, 0))
  end
  return left
end

function P:line()
  local current = math.min(self.done + 1, self.total)
  local parts = { string.format("round %d/%d", self.done >= self.total and self.total or current,
    self.total) }
  parts[#parts + 1] = string.format("candidates %d", self.candidates)
  if self.best then parts[#parts + 1] = string.format("best speedup %.3fx", self.best) end
  if self.phase and self.done < self.total then parts[#parts + 1] = self.phase end
  local eta = self:eta()
  parts[#parts + 1] = "ETA " .. (eta and dur(eta) or "--")
  return table.concat(parts, " | ")
end

-- f: {done = rounds finished, candidates, best, phase}; drawn again when a
-- round ended or the phase changed, else at most ten times a second.
function P:update(f)
  local round_ended = f.done ~= nil and f.done ~= self.done
  local new_phase = f.phase ~= nil and f.phase ~= self.phase
  for k, v in pairs(f) do self[k] = v end
  if round_ended then self.phase = f.phase end
  if round_ended or new_phase or self.now() - self.drawn_at >= 0.1 then self:draw() end
end

function P:draw()
  self.drawn_at = self.now()
  self.stream:write(CLEAR, self:line())
  self.stream:flush()
  self.shown = true
end

function P:clear()
  if self.shown then
    self.stream:write(CLEAR)
    self.stream:flush()
    self.shown = false
  end
end

-- Run fn (which prints a line) with the progress line out of its way.
function P:around(fn, ...)
  local was = self.shown
  self:clear()
  fn(...)
  if was then self:draw() end
end

function P:finish()
  self:clear()
end

return P
