-- diff.lua: a line diff of two texts, for reports (a candidate against the
-- incumbent it tried to replace).
--
--   diff.lines(a, b)       -> { {op, text}, ... }  op: " " same, "-" only in a, "+" only in b
--   diff.unified(a, b, n)  -> the hunks in unified form (n lines of context, 3),
--                             "" when the texts are the same
--
-- The longest common subsequence of lines after the common head and tail are
-- set aside; past LIMIT cells of the table (two very different long texts) the
-- middle is shown as removed then added, which is still a correct diff.
local M = {}

local LIMIT = 1e6

local function split(s)
  local t = {}
  if s == nil or s == "" then return t end
  for line in (s:sub(-1) == "\n" and s or s .. "\n"):gmatch("(.-)\n") do t[#t + 1] = line end
  return t
end
M.split = split

function M.lines(a, b)
  local x, y = split(a), split(b)
  local n, m = #x, #y
  local head = 0
  while head < n and head < m and x[head + 1] == y[head + 1] do head = head + 1 end
  local tail = 0
  while tail < n - head and tail < m - head and x[n - tail] == y[m - tail] do tail = tail + 1 end
  local out = {}
  for i = 1, head do out[#out + 1] = { " ", x[i] } end
  local n1, m1 = n - head - tail, m - head - tail
  if n1 * m1 <= LIMIT then
    -- L[i][j]: the LCS length of x[head+i..] and y[head+j..], one row kept per i
    local L = {}
    for i = n1 + 1, 1, -1 do
      local row, below = {}, L[i + 1]
      for j = m1 + 1, 1, -1 do
        if i > n1 or j > m1 then
          row[j] = 0
        elseif x[head + i] == y[head + j] then
          row[j] = below[j + 1] + 1
        else
          local d, r = below[j], row[j + 1]
          row[j] = d >= r and d or r
        end
      end
      L[i] = row
    end
    local i, j = 1, 1
    while i <= n1 and j <= m1 do
      if x[head + i] == y[head + j] then
        out[#out + 1] = { " ", x[head + i] }; i = i + 1; j = j + 1
      elseif L[i + 1][j] >= L[i][j + 1] then
        out[#out + 1] = { "-", x[head + i] }; i = i + 1
      else
        out[#out + 1] = { "+", y[head + j] }; j = j + 1
      end
    end
    for k = i, n1 do out[#out + 1] = { "-", x[head + k] } end
    for k = j, m1 do out[#out + 1] = { "+", y[head + k] } end
  else
    for k = 1, n1 do out[#out + 1] = { "-", x[head + k] } end
    for k = 1, m1 do out[#out + 1] = { "+", y[head + k] } end
  end
  for k = n - tail + 1, n do out[#out + 1] = { " ", x[k] } end
  return out
end

-- Hunks: the changed lines with n lines of context, "@@ -a,b +c,d @@" heads.
function M.unified(a, b, n)
  n = n or 3
  local ops = M.lines(a, b)
  local changed = {}
  for k, o in ipairs(ops) do if o[1] ~= " " then changed[#changed + 1] = k end end
  if #changed == 0 then return "" end
  -- the old and new line number before each op
  local ox, oy = {}, {}
  local lx, ly = 0, 0
  for k, o in ipairs(ops) do
    ox[k], oy[k] = lx, ly
    if o[1] ~= "+" then lx = lx + 1 end
    if o[1] ~= "-" then ly = ly + 1 end
  end
  ox[#ops + 1], oy[#ops + 1] = lx, ly
  local out = {}
  local c = 1
  while c <= #changed do
    local s = math.max(1, changed[c] - n)
    local e = math.min(#ops, changed[c] + n)
    -- merge the next change while its context touches this hunk's
    while c < #changed and changed[c + 1] - n <= e + 1 do
      c = c + 1
      e = math.min(#ops, changed[c] + n)
    end
    local nx, ny = ox[e + 1] - ox[s], oy[e + 1] - oy[s]
    out[#out + 1] = string.format("@@ -%d,%d +%d,%d @@", nx > 0 and ox[s] + 1 or ox[s], nx,
      ny > 0 and oy[s] + 1 or oy[s], ny)
    for k = s, e do out[#out + 1] = ops[k][1] .. ops[k][2] end
    c = c + 1
  end
  return table.concat(out, "\n") .. "\n"
end

return M
