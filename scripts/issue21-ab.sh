#!/usr/bin/env bash
# issue21-ab.sh: one GPU call that checks a change of the gpu worker and
# measures it against another build side by side (issue 21), from the
# repository root with build-portable, kernels/build, devdata and .whl
# carried (scripts/h200-prep.sh) and the anchor build in $EVAL_B (a build
# folder with khlua and lib/, e.g. build-main from main):
# most needed first (an outer timeout may cut the last):
#   1. the GPU tests TESTS (default "gpu_sanitize gpu_eval test_gpu_check")
#   2. ROUNDS_RUNS (default 2) search runs' rounds (scripts/issue21-rounds.sh):
#      where a promotion's seconds go, the sanitizer's tools split
#   3. bench_eval, official and screen, build-portable then EVAL_B (each with
#      FlashInfer-Bench's pipeline beside it), on DSA's first DSA_WORKLOADS
#      (default 8) workloads, where the per-call input draws and sums are
#      largest (623 MB of cache per call)
#   4. with THROUGHPUT=1, scripts/issue21-throughput.sh (K = 8, TP_TIMEOUT
#      default 60 s) and its promotion's split
#   5. the same A/B on rmsnorm_h4096's 14 workloads
# Outputs under $OUT, packed into $OUT/ab.tgz at the end (a run cut short
# leaves them unpacked: tar them in the calling command).
set -uo pipefail
out=${OUT:-/tmp/issue21-ab}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
B=${EVAL_B:-build-main}
KH_GPU_ONLY=${TESTS:-"gpu_sanitize gpu_eval test_gpu_check"} KH_GPU_TEST_TIMEOUT=150 \
  OUT="$out/tests" bash scripts/gpu-tests.sh build-portable 2>&1 | tail -6
grep -E "^not ok" -A3 "$out/tests/gpu-tests.log" | head -20
grep -E "^    (memcheck|racecheck|initcheck)" "$out/tests/gpu-tests.log" | head -9
echo "[$SECONDS s]"
bench() { # TAG BUILD PACKAGE [WORKLOADS]
  echo "== $3 with $2"
  KHLUA_BUILD="$PWD/$2" BENCH_EVAL_RUNS="official screen" OUT="$out/$1" \
    BENCH_WORKLOADS=${4:-} timeout -k 5 150 bash tests/bench/bench_eval.sh "$3" 2>&1 |
    grep -v "^    " | grep -v "^vs_FIB"
}
for i in $(seq "${ROUNDS_RUNS:-2}"); do
  OUT="$out/rounds$i" ROUNDS_TIMEOUT=${ROUNDS_TIMEOUT:-80} bash scripts/issue21-rounds.sh 2>&1 |
    sed -n '/^round  *seconds/,$p'
  echo "[$SECONDS s]"
done
dsa=dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64
bench dsa-a build-portable "$dsa" "${DSA_WORKLOADS:-8}"
bench dsa-b "$B" "$dsa" "${DSA_WORKLOADS:-8}"
for r in dsa-a dsa-b; do
  echo "== $r candidate phase"
  grep -A2 "official" "$out/$r/bench_eval.txt" | grep "candidate" | head -1
done
echo "[$SECONDS s]"
if [ -n "${THROUGHPUT:-}" ]; then
  OUT="$out" TIMEOUT=${TP_TIMEOUT:-60} bash scripts/issue21-throughput.sh 2>&1 |
    grep -E "plateau_switch: exit|per hour|utilization|evaluations"
  KHLUA_STORE="$out/throughput/store" LD_LIBRARY_PATH="$PWD/build-portable/lib" \
    build-portable/khlua scripts/round_times.lua \
    "$(grep -o 'run-[0-9A-Z]*' "$out/throughput/run.txt" | head -1)" 2>&1 | grep -E -A3 "promoted|^sanitizer"
  echo "[$SECONDS s]"
fi
bench rms-a build-portable rmsnorm_h4096
bench rms-b "$B" rmsnorm_h4096
echo "[$SECONDS s]"
(cd "$out" && tar -czf ab.tgz --exclude=ab.tgz --exclude=console.txt ./* &&
  find . -mindepth 1 -maxdepth 1 ! -name ab.tgz ! -name console.txt -exec rm -rf {} +)
