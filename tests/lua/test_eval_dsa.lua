-- test_eval_dsa.lua: FlashInfer-Bench's dsa_topk_indexer evaluator in kh.eval
-- (engine/eval/eval_compare.c + engine/eval/check.c kh_check_dsa_topk) on a toy DSA top-k task
-- run on the host (tests/fixtures/task/dsa_topk_small, make.py there), with
-- random valid block tables written for each run.  The coordinator
-- regenerates each trial's inputs (fp8 q, the deep_gemm k cache, weights,
-- the tables from safetensors) to check reachability and recompute scores:
-- the reference passes, the same indices reversed pass (order is free, which
-- the default evaluator would fail), a duplicate and an unreachable token
-- are INCORRECT_NUMERICAL with the reason.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIX = SRC .. "/tests/fixtures/task/dsa_topk_small"
math.randomseed(T.seed())

local dir = T.tmpdir()
local task = dir .. "/task"
os.execute("mkdir -p " .. T.quote(task .. "/solutions") .. " " .. T.quote(task .. "/blob"))
T.write(task .. "/definition.json", T.read(FIX .. "/definition.json"))
T.write(task .. "/workloads.jsonl", T.read(FIX .. "/workloads.jsonl"))
for _, s in ipairs { "topk_ref_c", "topk_reversed", "topk_duplicate", "topk_unreachable" } do
  T.write(task .. "/solutions/" .. s .. ".json", T.read(FIX .. "/solutions/" .. s .. ".json"))
end

-- 3 rows, 6 pages each out of pages 0..38 (page 39 is nobody's: the
-- unreachable candidate points there), one row shorter than top-k (8) so
-- the output is padded with -1
local B, M, PS = 3, 6, 4
local seq, bt = {}, {}
for b = 1, B do
  seq[b] = b == 2 and math.random(1, 7) or math.random(9, M * PS)
  local pool = {}
  for p = 0, 38 do pool[#pool + 1] = p end
  for i = 1, M do
    local j = math.random(i, #pool)
    pool[i], pool[j] = pool[j], pool[i]
    bt[#bt + 1] = pool[i]
  end
end
local s_t = kh.tensor.new("int32", { B }, seq)
local b_t = kh.tensor.new("int32", { B, M }, bt)
kh.tensor.save(task .. "/blob/tables.safetensors", { seq_lens = s_t, block_table = b_t })
s_t:close()
b_t:close()

local function eval(name)
  return kh.eval(task, name, { seed = math.random(1, 1 << 40), trials = 3, timing = false,
                               record = false })
end

T.test("the reference passes under the dsa_topk_indexer evaluator", function()
  local t0 = kh.time.now()
  local tr, msg, code = eval("topk_ref_c")
  local wall = kh.time.now() - t0
  T.ok(tr, tostring(code) .. " " .. tostring(msg))
  local e = tr[1].evaluation
  T.eq(e.khlua.evaluator, "dsa_topk_indexer")
  T.eq(e.status, "PASSED", tostring(e.khlua.detail))
  -- the coordinator regenerated three seeds' inputs and rescored them: its
  -- own time is there, and within the call's
  local cs = e.khlua.coordinator_seconds
  T.ok(type(cs) == "number" and cs > 0, "coordinator_seconds: " .. tostring(cs))
  T.ok(cs <= wall, "coordinator_seconds " .. tostring(cs) .. " > the call's " .. wall .. " s")
  T.ok(type(e.khlua.worker_seconds) == "number", "worker_seconds")
end)

T.test("the same indices in another order pass: order is free", function()
  local tr = assert(eval("topk_reversed"))
  T.eq(tr[1].evaluation.status, "PASSED", tostring(tr[1].evaluation.khlua.detail))
end)

T.test("a duplicate index and an unreachable token are INCORRECT_NUMERICAL", function()
  local tr = assert(eval("topk_duplicate"))
  T.eq(tr[1].evaluation.status, "INCORRECT_NUMERICAL")
  T.match(tr[1].evaluation.khlua.detail, "duplicate")
  tr = assert(eval("topk_unreachable"))
  T.eq(tr[1].evaluation.status, "INCORRECT_NUMERICAL")
  T.match(tr[1].evaluation.khlua.detail, "its page is not in the row's block_table")
end)

T.test("cleanup", function() os.execute("rm -rf " .. T.quote(dir)) end)
