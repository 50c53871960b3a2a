#!/usr/bin/env bash
# issue21-all.sh: issue 21's measurements in one GPU call, most needed first,
# each step bounded (carry build-portable with its test_gpu_* binaries,
# kernels/build, devdata and .whl: scripts/h200-prep.sh, then move the other
# test binaries aside to stay under the carry limit):
#   1. the quick GPU tests (TESTS, TESTS_TIMEOUT default 150 s)
#   2. the CUDA red team, KH_RT_ONLY's entries (RT_TIMEOUT default 100 s)
#   3. bench_eval on rmsnorm_h4096 (RMS_RUNS; RMS_TIMEOUT default 120 s)
#   4. a search run's rounds (scripts/issue21-rounds.sh; ROUNDS_TIMEOUT 100 s)
#   5. screening throughput with a mock model and K = 8 calls in flight
#      (scripts/issue21-throughput.sh; TP_TIMEOUT default 150 s)
#   6. bench_eval on the issue's two other kernels (OTHER_RUNS; OTHER_TIMEOUT
#      default 150 s; on an H100 on 2026-12-07 FlashInfer-Bench's pipeline on
#      gdn_decode alone ran past 230 s: give this step a call of its own, or
#      time khlua alone with scripts/issue21-others.sh; OTHER_WORKLOADS=N:
#      the first N workloads of each, on both sides)
#   rng: the generator against torch.randn (tests/bench/bench_rng.sh) for
#      build-portable and for RNG_B (another build folder, if set)
#   evalb: bench_eval official and screen on rmsnorm_h4096 with the build
#      folder EVAL_B (EVALB_TIMEOUT default 100 s), right after step 3, so
#      the two builds are compared side by side (a step cut short by its
#      timeout, as 6 can be, may leave processes that load the GPU after it)
# STEPS (default "tests rt rms rounds throughput other") picks them; they
# run in the order above.  Outputs under $OUT; at the end every step's
# files are packed into $OUT/steps.tgz (the device machine sends back a
# bounded number of files), the console text stays beside it.
set -uo pipefail
out=${OUT:-/tmp/issue21}
steps=" ${STEPS:-tests rt rms rounds throughput other} "
on() { case $steps in *" $1 "*) return 0;; esac; return 1; }
# bounded SECONDS CMD...: CMD in a process group of its own, the whole group
# ended when SECONDS pass (timeout(1) ends CMD alone: FlashInfer-Bench's
# pipeline under a timed-out bench_eval.sh went on loading the GPU)
bounded() {
  local t=$1; shift
  setsid "$@" &
  local pid=$!
  ( sleep "$t"; kill -TERM -- "-$pid"; sleep 5; kill -KILL -- "-$pid" ) > /dev/null 2>&1 &
  local guard=$!
  wait "$pid"
  local rc=$?
  kill "$guard" 2>/dev/null
  wait "$guard" 2>/dev/null
  return $rc
}
mkdir -p "$out/tests" "$out/rt" "$out/bench" "$out/other"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if on rng; then
  for b in build-portable ${RNG_B:-}; do
    echo "== bench_rng $b"
    timeout 120 bash tests/bench/bench_rng.sh "$b" > "$out/rng-$(basename "$b").txt" 2>&1
    tail -6 "$out/rng-$(basename "$b").txt"
  done
  echo "[$SECONDS s]"
fi
if on tests; then
  KH_GPU_ONLY=${TESTS:-"test_gpu_check test_gpu_rng test_gpu_eval gpu_compare gpu_eval"} \
    KH_GPU_TEST_TIMEOUT=${TESTS_TIMEOUT:-150} OUT="$out/tests" \
    bash scripts/gpu-tests.sh build-portable 2>&1 | tail -8
  grep -E "elements|^not ok" -A3 "$out/tests/gpu-tests.log" | head -20
  echo "[$SECONDS s]"
fi
if on rt; then
  KH_GPU_ONLY=gpu_redteam KH_GPU_TEST_TIMEOUT=${RT_TIMEOUT:-100} OUT="$out/rt" \
    bash scripts/gpu-tests.sh build-portable 2>&1 | tail -2
  grep -E "^not ok" -A3 "$out/rt/gpu-tests.log" | head -20
  grep -E "^# rt_" "$out/rt/gpu-tests.log" | awk '{printf "%-40s %-20s %s s\n", $2, $3, $(NF-1)}'
  echo "[$SECONDS s]"
fi
if on rms; then
  BENCH_EVAL_RUNS=${RMS_RUNS:-"official screen screen-inrun1 official-hostcmp"} OUT="$out/bench" \
    bounded "${RMS_TIMEOUT:-120}" bash tests/bench/bench_eval.sh rmsnorm_h4096 2>&1 | tail -45
  echo "[$SECONDS s]"
fi
if on evalb && [ -n "${EVAL_B:-}" ]; then
  echo "== bench_eval with $EVAL_B"
  KHLUA_BUILD="$PWD/$EVAL_B" BENCH_EVAL_RUNS=${EVALB_RUNS:-"official screen"} OUT="$out/evalb" \
    bounded "${EVALB_TIMEOUT:-100}" bash tests/bench/bench_eval.sh rmsnorm_h4096 2>&1 | tail -30
  echo "[$SECONDS s]"
fi
if on rounds; then
  OUT="$out" ROUNDS_TIMEOUT=${ROUNDS_TIMEOUT:-100} bash scripts/issue21-rounds.sh 2>&1 | tail -20
  echo "[$SECONDS s]"
fi
if on throughput; then
  OUT="$out" TIMEOUT=${TP_TIMEOUT:-150} bash scripts/issue21-throughput.sh 2>&1 | tail -8
  echo "[$SECONDS s]"
fi
if on other; then
  BENCH_EVAL_RUNS=${OTHER_RUNS:-"official screen screen-inrun1"} OUT="$out/other" \
    BENCH_WORKLOADS=${OTHER_WORKLOADS:-} \
    bounded "${OTHER_TIMEOUT:-150}" bash tests/bench/bench_eval.sh \
    gdn_decode_qk4_v8_d128_k_last dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64 2>&1 |
    grep -v "^    "
  echo "[$SECONDS s]"
fi
# the steps' files in one archive (a run cut short by an outer timeout
# leaves them unpacked)
(cd "$out" && tar -czf steps.tgz --exclude=steps.tgz --exclude=console.txt ./* &&
  find . -mindepth 1 -maxdepth 1 ! -name steps.tgz ! -name console.txt -exec rm -rf {} +)
