-- llm.lua: model calls for policies, on top of kh.llm.
--
--   local llm = require "lib.llm"
--   local results = llm.run(function()            -- a scheduler for coroutines
--     local a = llm.spawn(function() return llm.request(req1) end)
--     local b = llm.spawn(function() return llm.request(req2) end)
--     return llm.await(a), llm.await(b)            -- both requests in flight at once
--   end)
--
-- llm.request(req) submits and yields until the reply is back, so many
-- coroutines keep many calls in flight on one thread (kh.llm.submit/poll
-- underneath; no yield ever crosses C).  Outside llm.run it blocks (kh.llm.chat).
-- It returns the record (ok = true), or nil, msg, code, record.
--
-- llm.cost(record[, prices]) prices a call from the table below (USD per
-- million tokens); the table is configuration: replace or extend llm.prices.
--
-- Transcripts: kh.llm.record_to(db, {run = RUN}) makes every call, from here
-- or from kh.llm directly, an llm_call record in the store (its result gets
-- store_id); {provider = "replay", replay = {store = true, run = RUN}} answers
-- from a recorded run.  docs/store.md, "Model calls".
local kh = require "kh"

local M = {}

-- USD per million tokens: input (uncached), output, cache_read, cache_write.
-- Provider list prices at the time of writing; check before relying on them.
-- Models not listed cost nil (unknown), never 0.
M.prices = {
  ["claude-sonnet-4-5"] = { input = 3.00, output = 15.00, cache_read = 0.30, cache_write = 3.75 },
  ["claude-opus-4-1"] = { input = 15.00, output = 75.00, cache_read = 1.50, cache_write = 18.75 },
  ["gpt-4o"] = { input = 2.50, output = 10.00, cache_read = 1.25, cache_write = 0 },
  ["gpt-5"] = { input = 1.25, output = 10.00, cache_read = 0.125, cache_write = 0 },
}

-- The cost of one call in USD, or nil, why.  usage.input counts every prompt
-- token (cached or not), so the uncached part is input - cache_read - cache_write.
function M.cost(record, prices)
  prices = prices or M.prices
  if record.replay then return 0 end
  local p = prices[record.model or ""]
  if not p then return nil, "no price for model " .. tostring(record.model) end
  local u = record.usage or {}
  local cr, cw = u.cache_read or 0, u.cache_write or 0
  local fresh = math.max(0, (u.input or 0) - cr - cw)
  return (fresh * p.input + (u.output or 0) * p.output + cr * (p.cache_read or p.input)
    + cw * (p.cache_write or p.input)) / 1e6
end

-- ---- calls collected later -----------------------------------------------------
-- llm.submit(req) sends a call and returns its ticket at once; llm.collect(t)
-- waits for that call and returns what llm.request would have.  Results that
-- kh.llm.poll hands out for a ticket nobody is waiting on (a call submitted
-- here, polled by llm.run's loop) are kept until collected.

local kept = {}

function M.submit(req) return kh.llm.submit(req) end

function M.cancel(ticket)
  kept[ticket] = nil
  return kh.llm.cancel(ticket)
end

local function outcome(r)
  if r.ok then return r end
  return nil, r.error and r.error.message or "failed", r.error and r.error.code, r
end

function M.collect(ticket)
  while not kept[ticket] do
    local rs, msg, code = kh.llm.poll(0.5)
    if not rs then return nil, msg, code end
    for _, r in ipairs(rs) do kept[r.ticket] = r end
  end
  local r = kept[ticket]
  kept[ticket] = nil
  return outcome(r)
end

-- ---- coroutines --------------------------------------------------------------

local sched = nil -- the running scheduler, if any

-- Inside llm.run: submit and yield; elsewhere: block.
function M.request(req)
  local co, main = coroutine.running()
  if not sched or main then
    local r, msg, code, rec = kh.llm.chat(req)
    return r, msg, code, rec
  end
  local t, msg, code = kh.llm.submit(req)
  if not t then return nil, msg, code end
  sched.waiting[t] = co
  local r = coroutine.yield(sched.token)
  if r.ok then return r end
  return nil, r.error and r.error.message or "failed", r.error and r.error.code, r
end

-- Start fn(...) as a task of the running scheduler; returns a handle for await.
function M.spawn(fn, ...)
  assert(sched, "llm.spawn must be called inside llm.run")
  local task = { co = coroutine.create(fn), args = table.pack(...) }
  sched.ready[#sched.ready + 1] = task
  return task
end

-- Wait for a spawned task; returns what its function returned.
function M.await(task)
  while not task.done do
    local co = coroutine.running()
    task.awaiters = task.awaiters or {}
    task.awaiters[#task.awaiters + 1] = co
    coroutine.yield(sched.token)
  end
  if task.err then error(task.err, 0) end
  return table.unpack(task.result, 1, task.result.n)
end

local function resume(s, task, ...)
  local co = task.co
  local r = table.pack(coroutine.resume(co, ...))
  if coroutine.status(co) == "dead" then
    task.done = true
    if r[1] then
      task.result = table.pack(table.unpack(r, 2, r.n))
    else
      task.err = debug.traceback(co, tostring(r[2]))
    end
    for _, w in ipairs(task.awaiters or {}) do s.ready[#s.ready + 1] = s.by_co[w] end
    return
  end
  if not r[1] then error(r[2], 0) end
end

-- Run fn as the first task and drive every task until all are done; returns
-- what fn returned.  An error in any task is raised here, with its traceback.
function M.run(fn, ...)
  assert(not sched, "llm.run does not nest")
  local s = { waiting = {}, ready = {}, by_co = {}, token = {} }
  sched = s
  local main = M.spawn(fn, ...)
  local ok, err = pcall(function()
    local tasks = {}
    while true do
      while #s.ready > 0 do
        local task = table.remove(s.ready, 1)
        if not s.by_co[task.co] then s.by_co[task.co] = task; tasks[#tasks + 1] = task end
        if not task.done then
          if not task.started then
            task.started = true
            resume(s, task, table.unpack(task.args, 1, task.args.n))
          else
            resume(s, task, task.pending_value)
          end
        end
      end
      if main.done then break end
      if next(s.waiting) == nil then
        error("llm.run: every task is waiting and no model call is in flight (deadlock)")
      end
      local results, msg, code = kh.llm.poll(0.5)
      if not results then error("llm.run: " .. tostring(msg) .. " (" .. tostring(code) .. ")", 0) end
      for _, r in ipairs(results) do
        local co = s.waiting[r.ticket]
        if co then
          s.waiting[r.ticket] = nil
          local task = s.by_co[co]
          task.pending_value = r
          s.ready[#s.ready + 1] = task
        else
          kept[r.ticket] = r -- a call submitted outside this scheduler (llm.submit)
        end
      end
    end
    for _, t in ipairs(tasks) do if t.err then error(t.err, 0) end end
  end)
  -- calls still in flight (a task failed, or main returned early) are cancelled
  for t in pairs(s.waiting) do kh.llm.cancel(t) end
  if next(s.waiting) then
    local left = 0
    for _ in pairs(s.waiting) do left = left + 1 end
    while left > 0 do
      local rs = kh.llm.poll(0.1)
      if not rs then break end
      for _, r in ipairs(rs) do
        if s.waiting[r.ticket] then left = left - 1 else kept[r.ticket] = r end
      end
    end
  end
  sched = nil
  if not ok then error(err, 0) end
  return M.await_result(main)
end

function M.await_result(task)
  if task.err then error(task.err, 0) end
  return table.unpack(task.result, 1, task.result.n)
end

-- Send every request at once; results in the same order.
function M.gather(reqs)
  return M.run(function()
    local tasks = {}
    for i, r in ipairs(reqs) do
      tasks[i] = M.spawn(function() return { M.request(r) } end)
    end
    local out = {}
    for i, t in ipairs(tasks) do out[i] = M.await(t) end
    return out
  end)
end

-- A candidate from a reply record: kh.llm.extract with the record's finish reason.
function M.candidate(record, opts)
  opts = opts or {}
  return kh.llm.extract(record.text or "", { finish_reason = record.finish_reason,
    require_manifest = opts.require_manifest ~= false })
end

return M
