-- structure.lua: the layout rules of docs/design.md ("Layout"), checked on a
-- source tree (test_structure.lua runs it on khlua's own, and on small
-- synthetic trees to show each rule can fail).
--   local structure = require "structure"
--   local violations, stats = structure.check(ROOT, allow)
-- Each violation is {file = "engine/x/y.c", rule = "...", msg = "..."};
-- structure.format(v) is one line "file: rule: msg".  The rules:
--   engine-lua        a file under engine/ includes lua.h, lauxlib.h, lualib.h or
--                     luaconf.h, directly or through a header of the tree
--   cli-lua           the same for a file under cli/ (a command reaches Lua only
--                     through a Lua-free bindings header such as kh_run.h)
--   include-cycle     files of engine/, bindings/, cli/ include each other in a
--                     circle: X.c (or X.h) includes Y.h and Y.c (or Y.h) includes X.h,
--                     or longer.  X.c and X.h are one module; a header that has no
--                     .c of its own (an *_int.h, a subsystem's public header) stands
--                     for what it includes.  #include "..." resolves against the
--                     including file's folder, then engine/, bindings/, cli/.
--   call-cycle        .c files call each other in a circle: X.c uses a function
--                     defined (not static) in Y.c and Y.c, directly or through
--                     others, one defined in X.c; what an include cycle misses when
--                     both sides share a header that several files implement
--   file-lines        an engine .c file over 1,000 lines
--   function-lines    a C function (engine/, bindings/, cli/) over 150 lines
--   policy-store-write  a file under policies/ writes records through the generic
--                     store writer (tx:put, db:put, :put_blob): records are the
--                     engine's to write (one writer per record type)
--   allowlist         an entry of allow over its ceiling (the file or function
--                     grew), or no longer needed (remove it)
-- allow = {file_lines = {[path] = n}, function_lines = {["path:function"] = n},
--          store_writes = {[path] = count}}: what is over the limits today,
--          each with its size then (a ceiling).
local kh = require "kh"

local M = {}

M.FILE_LINES = 1000
M.FUNCTION_LINES = 150
local ROOTS = { "engine", "bindings", "cli" }
local LUA_HEADERS = { ["lua.h"] = true, ["lauxlib.h"] = true, ["lualib.h"] = true,
  ["luaconf.h"] = true }

-- ---- files ------------------------------------------------------------------
local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- Every file under root/dir (relative paths, sorted) whose name ends in one of exts.
local function walk(root, dir, exts, out)
  local names = kh.listdir(root .. "/" .. dir)
  if not names then return out end
  for _, name in ipairs(names) do
    local rel = dir .. "/" .. name
    if kh.listdir(root .. "/" .. rel) then
      walk(root, rel, exts, out)
    else
      for _, e in ipairs(exts) do
        if name:sub(-#e) == e then out[#out + 1] = rel break end
      end
    end
  end
  return out
end

local function nlines(text)
  local _, n = text:gsub("\n", "")
  if #text > 0 and text:sub(-1) ~= "\n" then n = n + 1 end
  return n
end

-- ---- C text -----------------------------------------------------------------
-- Comments, string and character literals blanked (newlines kept, so line
-- numbers stay), then preprocessor lines (with their continuations) blanked.
local function strip_c(text)
  local out, i, n = {}, 1, #text
  while i <= n do
    local j = text:find("[/\"']", i)
    if not j then out[#out + 1] = text:sub(i) break end
    out[#out + 1] = text:sub(i, j - 1)
    local c = text:sub(j, j)
    if c == "/" then
      local c2 = text:sub(j + 1, j + 1)
      if c2 == "/" then
        i = text:find("\n", j, true) or n + 1
      elseif c2 == "*" then
        local e = text:find("*/", j + 2, true)
        out[#out + 1] = text:sub(j, e and e + 1 or n):gsub("[^\n]", "") .. " "
        i = e and e + 2 or n + 1
      else
        out[#out + 1] = "/"
        i = j + 1
      end
    else
      local k = j + 1
      while true do
        k = text:find(c == '"' and '[\\"\n]' or "[\\'\n]", k)
        if not k then k = n + 1 break end
        local ch = text:sub(k, k)
        if ch == "\\" then k = k + 2 else break end
      end
      out[#out + 1] = c .. c
      if text:sub(k, k) == "\n" then out[#out + 1] = "\n" end
      i = k + 1
    end
  end
  local lines, cont = {}, false
  for line in (table.concat(out) .. "\n"):gmatch("([^\n]*)\n") do
    if cont or line:match("^%s*#") then
      cont = line:sub(-1) == "\\"
      line = ""
    end
    lines[#lines + 1] = line
  end
  return table.concat(lines, "\n")
end

-- The #include lines of a C file: {name, system, line}.
local function includes(text)
  local out, ln = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    ln = ln + 1
    local open, name = line:match("^%s*#%s*include%s*([<\"])([^>\"]+)[>\"]")
    if name then out[#out + 1] = { name = name, system = open == "<", line = ln } end
  end
  return out
end

-- Function definitions in stripped C text: {name, static, first, last} (lines:
-- from the line of the name to that of the closing brace).
local function functions(s)
  local out, depth, pos, line, lastpos = {}, 0, 1, 1, 1
  local open_fn, stmt_start = nil, 1
  while true do
    local j = s:find("[{};]", pos)
    if not j then break end
    local _, nl = s:sub(lastpos, j - 1):gsub("\n", "")
    line, lastpos = line + nl, j
    local c = s:sub(j, j)
    if c == "{" then
      if depth == 0 then
        local k = j - 1
        while k > 0 and s:sub(k, k):match("%s") do k = k - 1 end
        if s:sub(k, k) == ")" then
          local d = 0
          while k > 0 do
            local ch = s:sub(k, k)
            if ch == ")" then d = d + 1 elseif ch == "(" then d = d - 1 if d == 0 then break end end
            k = k - 1
          end
          local head = s:sub(stmt_start, k - 1)
          local at = head:find("[%a_][%w_]*%s*$")
          local name = at and head:match("([%a_][%w_]*)%s*$")
          if name then
            -- the name's line: the '{' is on line `line`
            local _, after = s:sub(stmt_start + at - 1, j - 1):gsub("\n", "")
            local hl = line - after
            open_fn = { name = name, first = hl,
              static = head:find("%f[%w_]static%f[^%w_]") ~= nil }
          end
        end
      end
      depth = depth + 1
    elseif c == "}" then
      depth = depth - 1
      if depth == 0 then
        if open_fn then
          open_fn.last = line
          out[#out + 1] = open_fn
          open_fn = nil
        end
        stmt_start = j + 1
      end
    elseif depth == 0 then
      stmt_start = j + 1
    end
    pos = j + 1
  end
  return out
end

-- ---- graphs -----------------------------------------------------------------
-- Strongly connected components of more than one node (Tarjan), each sorted;
-- graph[a][b] = label.
local function cycles(graph, nodes)
  local index, low, onstack, stack, out, counter = {}, {}, {}, {}, {}, 0
  local function visit(v)
    counter = counter + 1
    index[v], low[v] = counter, counter
    stack[#stack + 1] = v
    onstack[v] = true
    local succ = {}
    for w in pairs(graph[v] or {}) do succ[#succ + 1] = w end
    table.sort(succ)
    for _, w in ipairs(succ) do
      if not index[w] then
        visit(w)
        low[v] = math.min(low[v], low[w])
      elseif onstack[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local comp = {}
      repeat
        local w = table.remove(stack)
        onstack[w] = nil
        comp[#comp + 1] = w
      until w == v
      if #comp > 1 then table.sort(comp) out[#out + 1] = comp end
    end
  end
  for _, v in ipairs(nodes) do if not index[v] then visit(v) end end
  table.sort(out, function(a, b) return a[1] < b[1] end)
  return out
end

-- One circle through comp[1] inside the component: the edge labels in order.
local function circle(graph, comp)
  local inside = {}
  for _, v in ipairs(comp) do inside[v] = true end
  local start, seen = comp[1], {}
  local function dfs(v, path)
    local succ = {}
    for w in pairs(graph[v] or {}) do if inside[w] then succ[#succ + 1] = w end end
    table.sort(succ)
    for _, w in ipairs(succ) do
      path[#path + 1] = graph[v][w]
      if w == start then return path end
      if not seen[w] then
        seen[w] = true
        local p = dfs(w, path)
        if p then return p end
      end
      path[#path] = nil
    end
  end
  return dfs(start, {}) or {}
end

-- ---- the check --------------------------------------------------------------
function M.format(v) return v.file .. ": " .. v.rule .. ": " .. v.msg end

function M.check(root, allow)
  allow = allow or {}
  local viol = {}
  local function add(file, rule, msg) viol[#viol + 1] = { file = file, rule = rule, msg = msg } end

  local cfiles = {}
  for _, r in ipairs(ROOTS) do walk(root, r, { ".c", ".h" }, cfiles) end
  local text, exists = {}, {}
  for _, f in ipairs(cfiles) do text[f] = read(root .. "/" .. f) exists[f] = true end
  local incs = {}
  for _, f in ipairs(cfiles) do incs[f] = includes(text[f]) end

  local function resolve(from, name)
    local dir = from:match("^(.*)/[^/]*$")
    local c = dir .. "/" .. name
    if exists[c] then return c end
    for _, r in ipairs(ROOTS) do
      if exists[r .. "/" .. name] then return r .. "/" .. name end
    end
  end

  -- rules engine-lua and cli-lua: Lua headers reached from a file, directly
  -- or through the tree's headers (steps: what includes what, in order)
  local function reaches_lua(f, seen)
    for _, inc in ipairs(incs[f]) do
      if inc.system and LUA_HEADERS[inc.name] then
        return { f .. " includes <" .. inc.name .. "> (line " .. inc.line .. ")" }
      end
      local h = not inc.system and resolve(f, inc.name)
      if h and not seen[h] then
        seen[h] = true
        local r = reaches_lua(h, seen)
        if r then
          table.insert(r, 1, f .. " includes \"" .. inc.name .. "\" (line " .. inc.line .. ")")
          return r
        end
      end
    end
  end
  for _, f in ipairs(cfiles) do
    local top = f:match("^([^/]+)/")
    if top == "engine" or top == "cli" then
      local r = reaches_lua(f, { [f] = true })
      if r then
        add(f, top .. "-lua", (top == "engine" and "the engine never includes Lua: "
          or "the command line holds no Lua (it calls the bindings through a Lua-free header): ")
          .. table.concat(r, "; "))
      end
    end
  end

  -- rule include-cycle: modules (X.c + X.h); a header without its own .c stands
  -- for what it includes
  local function module(f) return (f:gsub("%.[ch]$", "")) end
  local has_c = {}
  for _, f in ipairs(cfiles) do if f:sub(-2) == ".c" then has_c[module(f)] = true end end
  local igraph, inodes = {}, {}
  local function edges_from(m, f, via, seen)
    for _, inc in ipairs(incs[f]) do
      local h = not inc.system and resolve(f, inc.name)
      if h then
        local hm = module(h)
        local label = via .. f .. " includes \"" .. inc.name .. "\""
        if has_c[hm] then
          if hm ~= m then
            igraph[m] = igraph[m] or {}
            igraph[m][hm] = igraph[m][hm] or label
          end
        elseif not seen[h] then
          seen[h] = true
          edges_from(m, h, label .. ", which has no .c of its own; ", seen)
        end
      end
    end
  end
  for m in pairs(has_c) do
    inodes[#inodes + 1] = m
    for _, ext in ipairs({ ".c", ".h" }) do
      if exists[m .. ext] then edges_from(m, m .. ext, "", { [m .. ext] = true }) end
    end
  end
  table.sort(inodes)
  for _, comp in ipairs(cycles(igraph, inodes)) do
    add(comp[1] .. ".c", "include-cycle", table.concat(circle(igraph, comp), "; ")
      .. " (modules in the circle: " .. table.concat(comp, ", ") .. ")")
  end

  -- rules call-cycle, file-lines, function-lines
  local stripped, defs, locals, nfunctions = {}, {}, {}, 0
  local flines, fnlines = {}, {}
  for _, f in ipairs(cfiles) do
    if f:sub(-2) == ".c" then
      stripped[f] = strip_c(text[f])
      locals[f] = {}
      for _, fn in ipairs(functions(stripped[f])) do
        nfunctions = nfunctions + 1
        locals[f][fn.name] = true
        if not fn.static and fn.name ~= "main" then defs[fn.name] = f end
        fnlines[f .. ":" .. fn.name] = { n = fn.last - fn.first + 1, line = fn.first }
      end
      if f:match("^engine/") then flines[f] = nlines(text[f]) end
    end
  end
  local cgraph, cnodes = {}, {}
  for f, s in pairs(stripped) do
    cnodes[#cnodes + 1] = f
    local used = {}
    for id in s:gmatch("[%a_][%w_]*") do used[id] = true end
    for id in pairs(used) do
      local g = defs[id]
      if g and g ~= f and not locals[f][id] then
        cgraph[f] = cgraph[f] or {}
        local prev = cgraph[f][g]
        -- the first name in byte order, so the message is stable
        if not prev or id < prev:match("uses (%S+)") then
          cgraph[f][g] = f .. " uses " .. id .. " (" .. g .. ")"
        end
      end
    end
  end
  table.sort(cnodes)
  for _, comp in ipairs(cycles(cgraph, cnodes)) do
    add(comp[1], "call-cycle", table.concat(circle(cgraph, comp), "; ")
      .. " (files in the circle: " .. table.concat(comp, ", ") .. ")")
  end

  local function ceiling(kind, key, n, limit, what, file)
    local cap = (allow[kind] or {})[key]
    if n > limit and not cap then
      add(file, what.rule, string.format(what.over, n, limit))
    elseif cap and n > cap then
      add(file, "allowlist", string.format(what.grew, n, cap))
    elseif cap and n <= limit then
      add(file, "allowlist", string.format(what.stale, n, limit))
    end
  end
  local keys = {}
  for f in pairs(flines) do keys[#keys + 1] = f end
  table.sort(keys)
  for _, f in ipairs(keys) do
    ceiling("file_lines", f, flines[f], M.FILE_LINES, {
      rule = "file-lines", over = "%d lines; an engine file holds at most %d (split it by stage or role)",
      grew = "%d lines, over its allowlisted %d: it may not grow (issue 20)",
      stale = "%d lines, within the limit of %d: remove its allowlist entry" }, f)
  end
  keys = {}
  for k in pairs(fnlines) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local f, name = k:match("^(.*):([^:]*)$")
    local fl = fnlines[k]
    ceiling("function_lines", k, fl.n, M.FUNCTION_LINES, {
      rule = "function-lines",
      over = "function " .. name .. " (line " .. fl.line .. ") is %d lines; at most %d (name its stages)",
      grew = "function " .. name .. " (line " .. fl.line .. ") is %d lines, over its allowlisted %d: it may not grow",
      stale = "function " .. name .. " is %d lines, within the limit of %d: remove its allowlist entry" }, f)
  end
  for kind, list in pairs({ file_lines = flines, function_lines = fnlines }) do
    for k in pairs(allow[kind] or {}) do
      if not list[k] then
        add(k:match("^[^:]*"), "allowlist", kind .. " entry " .. k .. " names nothing that exists: remove it")
      end
    end
  end

  -- rule policy-store-write
  local pfiles = walk(root, "policies", { ".lua" }, {})
  local writes = {}
  for _, f in ipairs(pfiles) do
    local s, n, first = read(root .. "/" .. f), 0, nil
    local ln = 0
    for line in (s .. "\n"):gmatch("([^\n]*)\n") do
      ln = ln + 1
      local code = line:gsub("%-%-.*$", "")
      for _, pat in ipairs({ ":put%s*[%({\"']", ":put_blob%s*[%({\"']" }) do
        for _ in code:gmatch(pat) do
          n = n + 1
          first = first or ln
        end
      end
    end
    writes[f] = n
    ceiling("store_writes", f, n, 0, {
      rule = "policy-store-write",
      over = "%d write(s) through the generic store writer (tx:put / :put_blob, first at line "
        .. tostring(first) .. "), limit %d: records are the engine's to write",
      grew = "%d writes through the generic store writer, over its allowlisted %d",
      stale = "%d writes through the generic store writer (limit %d): remove its allowlist entry" }, f)
  end
  for f in pairs(allow.store_writes or {}) do
    if not writes[f] then add(f, "allowlist", "store_writes entry names no policy file: remove it") end
  end

  table.sort(viol, function(a, b)
    if a.file ~= b.file then return a.file < b.file end
    if a.rule ~= b.rule then return a.rule < b.rule end
    return a.msg < b.msg
  end)
  local nengine = 0
  for _ in pairs(flines) do nengine = nengine + 1 end
  return viol, { c_files = #cfiles, functions = nfunctions, policies = #pfiles,
    modules = #inodes, engine_c_files = nengine }
end

-- for the tests of the checker itself
M.strip_c, M.functions, M.includes = strip_c, functions, includes

return M
