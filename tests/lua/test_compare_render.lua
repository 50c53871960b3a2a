-- test_compare_render.lua: `khlua compare --html` opened in headless
-- Chromium (Debian's `chromium`; scripts/common.sh installs it for CI).  Two
-- runs are recorded here (host rmsnorm fixture, replay ladder, deterministic
-- fake evaluator); the HTML is rendered and its DOM read back: the charts are
-- there with their data, every number a cell shows matches --json, and a
-- copy with a measuring script shows that the bars and boxes were laid out
-- with a size.  Skipped (exit 77) only when no chromium is installed.
local T = require "testlib"
local kh = require "kh"

local BIN
for _, b in ipairs({ "chromium", "chromium-browser" }) do
  if os.execute("command -v " .. b .. " >/dev/null 2>&1") then BIN = b; break end
end
if not BIN then T.skip_all("chromium is not installed (apt-get install chromium)") end

local SRC = os.getenv("KH_SOURCE_DIR") or "."
package.path = SRC .. "/policies/?.lua;" .. SRC .. "/tests/lua/lib/?.lua;" .. package.path
local ctl = require "lib.controller"
local ev = require "lib.evaluate"
local policy = require "lib.policy"
local cli = require "lib.cli"
local fake = require "fake_eval"

local TASK = SRC .. "/tests/fixtures/task/rmsnorm"
local LADDER = SRC .. "/tests/fixtures/replay/ctl"
local COMPARE = SRC .. "/policies/compare.lua"

local DIR = T.tmpdir()
local STORE = DIR .. "/store"
local RUNS = {}
do
  local db = assert(kh.store.open(STORE, { nosync = true }))
  for i, name in ipairs({ "agent_assisted", "full_agent" }) do
    local P = assert(policy.load(SRC .. "/policies/" .. name .. ".lua"))
    local cfg = { task = TASK, model_specs = "replay:" .. LADDER .. "/a", rounds = 3, plateau = 2,
      db = db, quiet = true, gate = { seed = math.random(1, 1000) } }
    assert(cli.resolve_models(cfg))
    ev.use(fake.evaluate)
    local res, msg = ctl.run(P, cfg)
    ev.use(nil)
    RUNS[i] = assert(res, msg).run
  end
  db:close()
end

local HTML = DIR .. "/report.html"
local JSON
do
  local out, code = T.khlua("--store", STORE, COMPARE, RUNS[1], RUNS[2], "--json", "--html", HTML)
  assert(code == 0, out)
  JSON = kh.json.decode(out)
end

-- Chromium's DOM after loading FILE (scripts in it have run).
local function dump_dom(file)
  local p = assert(io.popen("timeout 60 " .. BIN .. " --headless --no-sandbox --disable-gpu "
    .. "--disable-dev-shm-usage --no-first-run --dump-dom " .. T.quote("file://" .. file)
    .. " 2>/dev/null"))
  local dom = p:read("a")
  p:close()
  return dom
end

local DOM = dump_dom(HTML)

local function fmt3(x) return string.format("%.3f", x) end

T.test("Chromium renders the page: three charts with their data", function()
  T.match(DOM, "<h1>Run comparison</h1>")
  local _, nsvg = DOM:gsub("<svg ", "")
  T.eq(nsvg, 3, "best-so-far, speedup bars, latency distributions")
  T.match(DOM, '<h2 id="rounds">Rounds</h2>')
  local _, npoly = DOM:gsub('<polyline class="run"', "")
  T.eq(npoly, 2, "a best-so-far line per run")
  local nw = #JSON.runs[1].workloads
  local _, nbars = DOM:gsub('<rect class="bar"', "")
  T.eq(nbars, 2 * (nw + 1), "a bar per run and workload, and the means")
  local _, nbox = DOM:gsub('<g class="box"', "")
  local want = 0
  for _, s in ipairs(JSON.runs) do want = want + (#s.promotions > 0 and 2 or 1) * #s.workloads end
  T.eq(nbox, want, "a box per run, workload, seed and best")
end)

T.test("the rendered numbers match --json", function()
  for _, s in ipairs(JSON.runs) do
    local run = s.run:gsub("%-", "%%-")
    -- the paper's table and the figures table
    local cell = DOM:match('data%-run="' .. run .. '" data%-key="best_speedup">(.-)</td>')
    T.ok(cell, "best speedup of " .. s.run)
    T.eq(cell:gsub("<[^>]*>", ""), fmt3(s.best_speedup))
    for _, key in ipairs({ "best_sd", "baseline", "eval_pass_rate" }) do
      local v = DOM:match('<td data%-run="' .. run .. '" data%-key="' .. key .. '">([^<]*)</td>')
      T.eq(v, fmt3(s[key]), key)
    end
    for _, key in ipairs({ "rounds", "accepted", "candidates", "tokens", "rounds_to_best" }) do
      local v = DOM:match('<td data%-run="' .. run .. '" data%-key="' .. key .. '">([^<]*)</td>')
      T.eq(tonumber(v), s[key], key)
    end
    -- bars carry the per-workload speedups
    for _, w in ipairs(s.workloads) do
      local v = DOM:match('data%-run="' .. run .. '" data%-workload="' .. w.uuid:gsub("%-", "%%-")
        .. '" data%-speedup="([^"]*)"')
      T.near(tonumber(v), w.speedup, 1e-12, w.label)
    end
    -- each promotion's evidence: paired ratio and bounds, sweep speedups
    for _, p in ipairs(s.promotions) do
      local pid = p.id:gsub("%-", "%%-")
      T.ok(DOM:find('href="#ev-' .. p.id .. '"', 1, true), "linked")
      for _, key in ipairs({ "ratio", "lo", "hi", "mean_speedup" }) do
        local v = DOM:match('data%-promotion="' .. pid .. '" data%-key="' .. key .. '">([^<]*)<')
        T.eq(v, fmt3(p[key]), key)
      end
      for _, x in ipairs(p.sweep) do
        local v = DOM:match('data%-promotion="' .. pid .. '" data%-workload="' .. x.uuid:gsub("%-", "%%-")
          .. '" data%-key="speedup">([^<]*)<')
        T.eq(v, fmt3(x.speedup))
      end
    end
  end
  local ratio = DOM:match('data%-key="ratio" data%-task="[^"]*" data%-runs="[^"]*">([^<]*)<')
  T.eq(ratio, fmt3(JSON.runs[1].best_speedup / JSON.runs[2].best_speedup), "A/B")
end)

T.test("the charts are laid out: every bar and box has a size on the page", function()
  -- a copy with a script that measures what Chromium drew and writes it into the DOM
  local html = T.read(HTML)
  local probe = [[
<script>
const sized = (sel) => [...document.querySelectorAll(sel)].filter(e => {
  const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; }).length;
const overlaps = (sel) => {
  const r = [...document.querySelectorAll(sel)].map(e => e.getBoundingClientRect());
  let n = 0;
  for (let i = 0; i < r.length; i++) for (let j = i + 1; j < r.length; j++)
    if (r[i].right > r[j].left + 0.5 && r[j].right > r[i].left + 0.5 &&
        r[i].bottom > r[j].top + 0.5 && r[j].bottom > r[i].top + 0.5) n++;
  return n; };
const out = document.createElement("pre");
out.id = "probe";
out.textContent = JSON.stringify({svgs: sized("svg"), bars: sized("rect.bar"), boxes: sized("g.box"),
  lines: sized("polyline.run"), total_bars: document.querySelectorAll("rect.bar").length,
  total_boxes: document.querySelectorAll("g.box").length,
  ev_target: !!document.getElementById(document.querySelector('a[href^="#ev-"]').getAttribute("href").slice(1)),
  values: document.querySelectorAll("text.value").length, overlaps: overlaps("text.value"),
  tick_overlaps: overlaps("text.tick"), min_box: Math.min(...[...document.querySelectorAll("g.box rect")].map(
    e => e.getBoundingClientRect().width)), round_rows: document.querySelectorAll("table.rounds tr[data-round]").length,
  diffs: document.querySelectorAll("details.candidate pre.diff").length});
document.body.appendChild(out);
</script>]]
  local copy = DIR .. "/probe.html"
  T.write(copy, (html:gsub("</body>", function() return probe .. "</body>" end)))
  local dom = dump_dom(copy)
  local got = dom:match('<pre id="probe">(.-)</pre>')
  T.ok(got, "the probe ran")
  local j = kh.json.decode((got:gsub("&quot;", '"')))
  T.eq(j.svgs, 3)
  T.eq(j.lines, 2)
  T.ok(j.total_bars > 0)
  T.eq(j.bars, j.total_bars, "every bar drawn with a size")
  T.eq(j.boxes, j.total_boxes, "every box drawn with a size")
  T.eq(j.ev_target, true, "an evidence link lands on its section")
  T.eq(j.values, j.total_bars, "a value label per bar")
  T.eq(j.overlaps, 0, "no two value labels overlap")
  T.eq(j.tick_overlaps, 0, "no two tick labels overlap")
  T.ok(j.min_box >= 4, "every latency box is drawn wide enough to see (" .. tostring(j.min_box) .. " px)")
  local rows = 0
  for _, s in ipairs(JSON.runs) do rows = rows + #s.round_rows end
  T.ok(rows > 0)
  T.eq(j.round_rows, rows, "every round's candidates, rejected ones included")
  T.ok(j.diffs > 0, "candidates' diffs against the incumbent")
end)

T.test("a screenshot comes out (the page paints)", function()
  local png = DIR .. "/shot.png"
  os.execute("timeout 60 " .. BIN .. " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
    .. "--hide-scrollbars --window-size=1200,2400 --screenshot=" .. T.quote(png) .. " "
    .. T.quote("file://" .. HTML) .. " >/dev/null 2>&1")
  local f = io.open(png, "rb")
  T.ok(f, "chromium wrote the screenshot")
  local b = f:read("a")
  f:close()
  T.eq(b:sub(1, 8), "\137PNG\r\n\26\n")
  -- width and height from the IHDR chunk
  local w, h = string.unpack(">I4>I4", b, 17)
  T.eq(w, 1200)
  T.eq(h, 2400)
  -- a blank page compresses to a few kB; tables and charts do not
  T.ok(#b > 50000, "the screenshot holds a drawn page (" .. #b .. " bytes)")
end)
