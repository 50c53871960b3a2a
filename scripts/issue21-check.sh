#!/usr/bin/env bash
# issue21-check.sh: one GPU call for issue 21's device verification, from the
# repository root on the GPU machine (carry build-portable with its test_gpu_*
# binaries, kernels/build, devdata and .whl: scripts/h200-prep.sh, then move
# the other test binaries aside to stay under the carry limit):
#   1. the quick GPU tests: test_gpu_check, test_gpu_eval, gpu_compare, gpu_eval
#      (TESTS_TIMEOUT, default 150 s)
#   2. the CUDA red team (KH_RT_ONLY limits it; RT_TIMEOUT, default 150 s)
#   3. bench_eval on rmsnorm_h4096: device and host comparison side by side
#      with FlashInfer-Bench's pipeline (BENCH_EVAL_RUNS overrides;
#      BENCH_TIMEOUT, default 150 s)
# Outputs under $OUT: gpu-tests logs, bench-eval/.
set -uo pipefail
out=${OUT:-/tmp/issue21}
mkdir -p "$out/tests" "$out/bench" "$out/rt"
KH_GPU_ONLY="test_gpu_check test_gpu_eval gpu_compare gpu_eval" KH_GPU_TEST_TIMEOUT=${TESTS_TIMEOUT:-150} \
  OUT="$out/tests" bash scripts/gpu-tests.sh build-portable 2>&1 | tail -6
grep -nE "^not ok|FAILED|ERROR" -A4 "$out/tests/gpu-tests.log" | head -30
echo "[$SECONDS s]"
KH_GPU_ONLY=gpu_redteam KH_GPU_TEST_TIMEOUT=${RT_TIMEOUT:-150} OUT="$out/rt" \
  bash scripts/gpu-tests.sh build-portable 2>&1 | tail -2
grep -E "^not ok" -A3 "$out/rt/gpu-tests.log" | head -30
grep -E "^# rt_" "$out/rt/gpu-tests.log" | awk '{printf "%-38s %-20s %s s\n", $2, $3, $(NF-1)}'
echo "[$SECONDS s]"
BENCH_EVAL_RUNS=${BENCH_EVAL_RUNS:-"official official-hostcmp screen screen-hostcmp screen-inrun1 screen-1"} \
  OUT="$out/bench" timeout ${BENCH_TIMEOUT:-150} bash tests/bench/bench_eval.sh rmsnorm_h4096 2>&1 | grep -v "^    " | tail -30
