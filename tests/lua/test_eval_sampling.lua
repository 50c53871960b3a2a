-- test_eval_sampling.lua: FlashInfer-Bench's sampling evaluator in kh.eval
-- (engine/eval/eval_sampling.c, engine/eval/check.c kh_check_sampling_*) on toy sampling tasks
-- run on the host (tests/fixtures/task/sampling_small and
-- sampling_topk_small, make.py in the first): probs (softmax of randn, made
-- by the coordinator), a fresh random seed per call, and for the second a
-- top_k and a top_p.  Validation: 100 calls whose ids must be in range and
-- in FIB's valid mask; then FIB's TVD test: the batch repeated to 10000 rows
-- and 500000 samples per row, skipped where the nucleus is too large for
-- them to tell (vocab 30000 here).  The honest samplers pass; argmax, a
-- sampler ignoring top_k / top_p, one returning an id out of range fail;
-- one ignoring its seed fails khlua's fresh-samples check (FIB's repeated
-- batch alone would pass it); the definition's tolerance object overrides
-- the number of calls and the bound; probs from a safetensors file (with
-- zeros) are the workload's own, and a token of probability 0 fails.
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIX = SRC .. "/tests/fixtures/task/sampling_small"
-- fixed: every base seed below is drawn from it, so each run checks the same
-- samples (the repeat-rate and TVD bounds are not re-rolled per run)
math.randomseed(T.seed())

local W_SMALL = "5a3d0000-0001-4000-8000-000000000001" -- batch 2, vocab 4
local W_LARGE = "5a3d0000-0002-4000-8000-000000000002" -- batch 4, vocab 64
local TFIX = SRC .. "/tests/fixtures/task/sampling_topk_small"
local W_KP = "5a3d0000-0011-4000-8000-000000000011" -- batch 3, vocab 64, top_k 20, top_p 0.6
local W_P = "5a3d0000-0012-4000-8000-000000000012"  -- batch 2, vocab 64, top_p 0.3
local W_K = "5a3d0000-0013-4000-8000-000000000013"  -- batch 2, vocab 64, top_k 5
local SOLS = { "sample_ref_c", "sample_argmax", "sample_out_of_range", "sample_fixed_seed",
               "sample_uniform" }

local dir = T.tmpdir()
local function package(name, edit)
  local task = dir .. "/" .. name
  os.execute("mkdir -p " .. T.quote(task .. "/solutions"))
  local def = kh.json.decode(T.read(FIX .. "/definition.json"))
  if edit then edit(def) end
  T.write(task .. "/definition.json", kh.json.encode(def))
  local function renamed(text) -- solutions and workloads name the definition
    return (text:gsub("sampling_from_probs_small", def.name))
  end
  T.write(task .. "/workloads.jsonl", renamed(T.read(FIX .. "/workloads.jsonl")))
  for _, s in ipairs(SOLS) do
    T.write(task .. "/solutions/" .. s .. ".json",
            renamed(T.read(FIX .. "/solutions/" .. s .. ".json")))
  end
  return task
end

-- Add a workload of batch B, vocabulary V to a package (probs: `probs`,
-- default random; a fresh random seed).
local function add_workload(task, uuid, B, V, probs)
  local f = assert(io.open(task .. "/workloads.jsonl", "a"))
  f:write(kh.json.encode({ definition = "sampling_from_probs_small", workload = {
    uuid = uuid, axes = { batch_size = B, vocab_size = V },
    inputs = { probs = probs or { type = "random" }, seed = { type = "random" } } } }) .. "\n")
  f:close()
end

local plain = package("plain")
local function eval(task, name, wl)
  local tr, msg, code = kh.eval(task, name, { seed = math.random(1, 1 << 40), timing = false,
                                              record = false, workloads = { wl } })
  T.ok(tr, tostring(code) .. " " .. tostring(msg))
  return tr[1].evaluation
end

T.test("the honest inverse-CDF sampler passes (100 calls, then 500000 samples per row)",
       function()
  for _, w in ipairs({ { W_SMALL, 2, 4 }, { W_LARGE, 4, 64 } }) do
    local e = eval(plain, "sample_ref_c", w[1])
    T.eq(e.khlua.evaluator, "sampling")
    T.eq(e.status, "PASSED", tostring(e.khlua.detail))
    local x = e.correctness.extra
    T.eq(x.validation_trials, 100)
    T.eq(x.tvd_threshold, 0.2)
    T.eq(x.thresholding, "none")
    T.eq(#x.tvds_per_batch, w[2])
    -- FIB's repeated batch: 10000 // B copies, ceil(500000 / copies) calls
    local rep = 10000 // w[2]
    T.eq(x.tvd_repeat, rep)
    T.eq(x.tvd_calls, (500000 + rep - 1) // rep)
    T.eq(x.tvd_samples_per_row, x.tvd_calls * rep)
    T.eq(x.max_nucleus_size, w[3])
    -- 500000 draws: the TVD is sampling noise, well under 0.02 here
    T.ok(x.tvd > 0 and x.tvd < 0.02, "tvd " .. tostring(x.tvd))
    T.near(x.repeat_rate, x.repeat_rate_expected, 0.01)
    T.eq(#e.khlua.seeds, 100) -- one fresh seed per validation call
    T.eq(e.khlua.checks.deterministic, "off") -- a sampler is not deterministic
    T.eq(e.khlua.checks.poison, "ok")
    T.eq(e.khlua.checks.fresh_samples, "ok")
  end
end)

T.test("a vocabulary too large for 500000 samples: FIB's TVD skip, the range check stays",
       function()
  local task = package("wide")
  local uuid = "5a3d0000-0004-4000-8000-000000000004"
  add_workload(task, uuid, 1, 30000)
  local e = eval(task, "sample_ref_c", uuid)
  T.eq(e.status, "PASSED", tostring(e.khlua.detail))
  -- sqrt(30000 / 500000) = 0.245 > 0.2: the test could not tell
  T.eq(e.correctness.extra.tvd_skipped, true)
  T.eq(e.correctness.extra.max_nucleus_size, 30000)
  T.eq(e.correctness.max_absolute_error, 0)
  e = eval(task, "sample_out_of_range", uuid)
  T.eq(e.status, "INCORRECT_NUMERICAL")
  T.match(e.khlua.detail, "out of vocabulary range %[0, 30000%)")
end)

T.test("argmax fails with the TVD figure in the detail", function()
  local e = eval(plain, "sample_argmax", W_LARGE)
  T.eq(e.status, "INCORRECT_NUMERICAL")
  T.eq(e.khlua.failed_check, "correctness")
  local tvd = tonumber(e.khlua.detail:match("total variation distance ([%d.]+) in batch row"))
  T.ok(tvd and tvd > 0.2, e.khlua.detail)
  T.near(tvd, e.correctness.extra.tvd, 1e-4)
  T.ok(e.correctness.max_absolute_error > 0.2)
end)

T.test("a sampler that ignores its seed fails: the same ids on every call", function()
  local e = eval(plain, "sample_fixed_seed", W_LARGE)
  T.eq(e.status, "INCORRECT_NUMERICAL")
  T.eq(e.khlua.failed_check, "fresh_samples")
  T.match(e.khlua.detail, "consecutive calls gave the same id at 100.0%% of positions")
  T.eq(e.khlua.checks.fresh_samples, "failed")
  -- its repeated batch still draws one id per position from probs: FIB's
  -- TVD alone passes it (a parity run, FIB's checks only)
  local tr = kh.eval(plain, "sample_fixed_seed", { seed = math.random(1, 1 << 40), timing = false,
                                                 record = false, workloads = { W_LARGE },
                                                 parity = true })
  T.eq(tr[1].evaluation.status, "PASSED", tostring(tr[1].evaluation.khlua.detail))
  T.ok(tr[1].evaluation.correctness.extra.tvd < 0.2)
end)

T.test("an id out of the vocabulary fails at once, errors inf", function()
  local e = eval(plain, "sample_out_of_range", W_SMALL)
  T.eq(e.status, "INCORRECT_NUMERICAL")
  T.eq(e.khlua.failed_check, "correctness")
  T.match(e.khlua.detail, "samples %[4%] out of vocabulary range %[0, 4%)")
  T.match(e.khlua.detail, "^trial 0 ")
  T.eq(e.correctness.max_absolute_error, "inf") -- FIB writes inf as a string in JSON
end)

T.test("the definition's tolerance overrides the calls and the bound", function()
  -- 1000 calls: the honest sampler passes on vocab 64, where 100 calls'
  -- noise alone (about 0.3) exceeds the bound
  local many = package("many", function(d)
    d.khlua.tolerance = { sampling_validation_trials = 1000, sampling_tvd_threshold = 0.25 }
  end)
  local e = eval(many, "sample_ref_c", W_LARGE)
  T.eq(e.status, "PASSED", tostring(e.khlua.detail))
  T.eq(e.correctness.extra.validation_trials, 1000)
  T.eq(e.correctness.extra.tvd_threshold, 0.25)
  T.eq(#e.khlua.seeds, 1000)
  -- a bound below the noise of 500000 samples: FIB skips the TVD test
  local strict = package("strict", function(d)
    d.khlua.tolerance = { sampling_tvd_threshold = 0.001 }
  end)
  e = eval(strict, "sample_ref_c", W_SMALL)
  T.eq(e.status, "PASSED", tostring(e.khlua.detail))
  T.eq(e.correctness.extra.tvd_skipped, true)
  -- a tight bound the test can check: argmax far outside it
  local tight = package("tight", function(d)
    d.khlua.tolerance = { sampling_tvd_threshold = 0.05 }
  end)
  e = eval(tight, "sample_argmax", W_SMALL)
  T.eq(e.status, "INCORRECT_NUMERICAL")
  T.match(e.khlua.detail, "exceeds 0.05 ")
  -- values out of range are errors of the task file
  local bad = package("bad", function(d)
    d.khlua.tolerance = { sampling_validation_trials = 0, sampling_tvd_threshold = 1.5 }
  end)
  local out, code = T.khlua("task", "check", bad)
  T.eq(code, 1, out)
  T.match(out, "sampling_validation_trials: expected an integer from 1 to 1024")
  T.match(out, "sampling_tvd_threshold: expected a number in %[0, 1%]")
end)

T.test("probs from safetensors are the workload's; a token of probability 0 fails", function()
  local task = package("zeros", function(d)
    d.khlua.tolerance = { sampling_validation_trials = 1000 }
  end)
  -- 3 rows of 16 tokens: the first 4 positive, each other one 0 by a coin
  -- flip, normalised
  local B, V, vals = 3, 16, {}
  for _ = 1, B do
    local row, sum = {}, 0
    for v = 1, V do
      row[v] = (v > 4 and math.random() < 0.5) and 0 or math.random() + 0.05
      sum = sum + row[v]
    end
    for v = 1, V do vals[#vals + 1] = row[v] / sum end
  end
  os.execute("mkdir -p " .. T.quote(task .. "/blob"))
  local t = kh.tensor.new("float32", { B, V }, vals)
  kh.tensor.save(task .. "/blob/probs.safetensors", { probs = t })
  t:close()
  local uuid = "5a3d0000-0003-4000-8000-000000000003"
  add_workload(task, uuid, B, V, { type = "safetensors", path = "blob/probs.safetensors",
                                      tensor_key = "probs" })
  local e = eval(task, "sample_ref_c", uuid)
  T.eq(e.status, "PASSED", tostring(e.khlua.detail))
  T.ok(e.correctness.extra.tvd < 0.2, tostring(e.correctness.extra.tvd))
  e = eval(task, "sample_uniform", uuid)
  T.eq(e.status, "INCORRECT_NUMERICAL")
  T.match(e.khlua.detail, "has probability 0")
end)

local function teval(name, wl, opts)
  local o = { seed = math.random(1, 1 << 40), timing = false, record = false, workloads = { wl } }
  for k, v in pairs(opts or {}) do o[k] = v end
  local tr, msg, code = kh.eval(TFIX, name, o)
  T.ok(tr, tostring(code) .. " " .. tostring(msg))
  return tr[1].evaluation
end

T.test("top-k / top-p: a sampler drawing from FIB's valid mask passes", function()
  for _, w in ipairs({ W_KP, W_P, W_K }) do
    local e = teval("topk_ref_c", w)
    T.eq(e.status, "PASSED", w .. " " .. tostring(e.khlua.detail))
    local x = e.correctness.extra
    T.eq(x.thresholding, "top_k_top_p")
    T.ok(x.tvd < 0.02, tostring(x.tvd))
    T.ok(x.max_nucleus_size < 64, tostring(x.max_nucleus_size))
  end
end)

T.test("top-k / top-p: ignoring them puts ids outside the mask", function()
  for _, w in ipairs({ { W_KP, "top_k_top_p" }, { W_P, "top_k_top_p" } }) do
    local e = teval("topk_ignored", w[1])
    T.eq(e.status, "INCORRECT_NUMERICAL")
    T.eq(e.khlua.failed_check, "correctness")
    T.match(e.khlua.detail, "sample %d+ is outside the valid " .. w[2] .. " mask for batch row %d")
    T.eq(e.correctness.max_absolute_error, "inf")
  end
end)

T.test("top-k / top-p: argmax stays in the mask and fails the TVD test", function()
  local e = teval("topk_argmax", W_K)
  T.eq(e.status, "INCORRECT_NUMERICAL")
  T.match(e.khlua.detail, "total variation distance")
  T.ok(e.correctness.extra.tvd > 0.2, tostring(e.correctness.extra.tvd))
end)

T.test("top-k / top-p: ignoring the seed fails the fresh-samples check", function()
  local e = teval("topk_fixed_seed", W_KP)
  T.eq(e.status, "INCORRECT_NUMERICAL")
  T.eq(e.khlua.failed_check, "fresh_samples")
end)

T.test("an empty batch cannot be sampled: a clear error, not a crash", function()
  local task = package("empty")
  local uuid = "5a3d0000-0009-4000-8000-000000000009"
  add_workload(task, uuid, 0, 4)
  local tr, msg = kh.eval(task, "sample_ref_c", { timing = false, record = false,
                                                   workloads = { uuid } })
  T.eq(tr, nil)
  T.match(msg, "probs is %[0, 4%]: nothing to sample")
end)

T.test("a thresholded definition without its parameter is refused with the reason", function()
  local topk = package("topk", function(d) d.name = "top_k_sampling_from_probs_small" end)
  local tr, msg = kh.eval(topk, "sample_ref_c", { timing = false, record = false })
  T.eq(tr, nil)
  T.match(msg, "asks for top%-k sampling")
  T.match(msg, "no input 'top_k'")
  -- khlua task check says so before any run (a warning: the files are valid)
  local out, code = T.khlua("task", "check", topk)
  T.eq(code, 0, out)
  T.match(out, "no input 'top_k': kh.eval will refuse this definition")
  local ok_out = T.khlua("task", "check", TFIX)
  T.ok(not ok_out:find("will refuse", 1, true), ok_out)
end)

T.test("cleanup", function() os.execute("rm -rf " .. T.quote(dir)) end)
