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
# scripts/issue21-all.sh's first three steps, with this script's defaults
STEPS="tests rt rms" TESTS="test_gpu_check test_gpu_eval gpu_compare gpu_eval" \
  RMS_RUNS=${BENCH_EVAL_RUNS:-"official official-hostcmp screen screen-hostcmp screen-inrun1 screen-1"} \
  RMS_TIMEOUT=${BENCH_TIMEOUT:-150} exec bash "$(dirname "$0")/issue21-all.sh"
