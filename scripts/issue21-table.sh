#!/usr/bin/env bash
# issue21-table.sh: issue 21's table on the GPU machine, from the repository
# root (carry build-portable, kernels/build, devdata and .whl, as for
# scripts/issue21-check.sh): tests/bench/bench_eval.sh on the three kernels
# the issue names, each khlua run beside FlashInfer-Bench's pipeline on the
# same kernel and workloads.  PACKAGES and BENCH_EVAL_RUNS override;
# BENCH_TIMEOUT (default 560 s) bounds the whole.  Outputs under $OUT/table.
set -uo pipefail
out=${OUT:-/tmp/issue21}/table
mkdir -p "$out"
pkgs=${PACKAGES:-"rmsnorm_h4096 gdn_decode_qk4_v8_d128_k_last dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# shellcheck disable=SC2086
BENCH_EVAL_RUNS=${BENCH_EVAL_RUNS:-"official screen screen-1 screen-inrun1 official-hostcmp"} \
  OUT="$out" timeout ${BENCH_TIMEOUT:-560} bash tests/bench/bench_eval.sh $pkgs 2>&1 | grep -v "^    "
