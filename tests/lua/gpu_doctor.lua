-- On a GPU machine: doctor sees the GPU, NVRTC supports its architecture, and
-- CUPTI is present.  Skipped (exit 77) where there is no GPU.
local T = require "testlib"
local kh = require "kh"

local r = kh.doctor()
if #r.gpus == 0 then T.skip_all("no GPU on this machine") end

T.test("every GPU is described", function()
  for _, g in ipairs(r.gpus) do
    T.ok(#g.name > 0)
    T.match(g.compute_capability, "^%d+%.%d+$")
    T.ok(g.memory_bytes > 1e9 and g.sms > 0 and g.l2_bytes > 0)
    T.match(g.uuid, "^GPU%-%x+%-")
  end
end)

T.test("NVRTC can target the GPU", function()
  T.ok(r.nvrtc, "NVRTC missing")
  local cc = r.gpus[1].compute_capability:gsub("%.", "")
  local found = false
  for _, a in ipairs(r.nvrtc.archs) do if tostring(a) == cc then found = true end end
  T.ok(found, "NVRTC does not list sm_" .. cc)
end)

T.test("CUPTI is there", function()
  T.eq(r.cupti, true)
end)
