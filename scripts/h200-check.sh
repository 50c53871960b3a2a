#!/usr/bin/env bash
# What is left to measure on a GPU machine, in parts that each fit one
# device call (10 minutes).  From the repository root, with build-portable/
# (scripts/portable.sh) and kernels/build/ (kernels/build_cubins.sh) carried:
#   bash scripts/h200-check.sh tests    every gpu test but the task library's, as a table
#   bash scripts/h200-check.sh host     the host red team (tests/lua/test_redteam_host*.lua)
#   bash scripts/h200-check.sh islands  the third wave of the CUDA red team (stray reads) with
#                                       one shared heap (KHLUA_NO_ISLANDS=1, the old worker)
#                                       and with islands; then gpu_sanitize (the sanitizer
#                                       runs cover the timing phase)
#   bash scripts/h200-check.sh cost ANCHOR_KHLUA
#                                       tests/bench/gate_cost.sh: the gate against the anchor
#                                       build, on rmsnorm_h4096 (cuda) and host_rmsnorm
#   bash scripts/h200-check.sh policy   plateau_switch on a CUDA task with the replay
#                                       provider, killed once and resumed; then compare
#   bash scripts/h200-check.sh tasks [PACKAGE...]
#                                       kernels/eval_all.sh: every reference and baseline
#                                       on every workload, official latency and SoL fraction
#   bash scripts/h200-check.sh verify [PACKAGE...]
#                                       kernels/verify.py: each reference and baseline
#                                       against the definition's Python reference (torch);
#                                       the records (VERIFY.md per package) as one archive
# Build those here first with scripts/h200-prep.sh (it prints what to carry).
# Outputs go to $OUT (or /tmp/h200-check).  KHLUA_FIB_DATA points gpu_pyref
# at a FlashInfer-Bench dataset (default: devdata/flashinfer-trace, made by
# h200-prep.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LD_LIBRARY_PATH="$root/build-portable/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -z "${KHLUA_FIB_DATA:-}" ] && [ -d "$root/devdata/flashinfer-trace" ]; then
  export KHLUA_FIB_DATA="$root/devdata/flashinfer-trace"
fi
K="$root/build-portable/khlua"
out=${OUT:-/tmp/h200-check}
mkdir -p "$out"
part=${1:-}
shift || true
case "$part" in
tests)
  KH_GPU_SKIP="${KH_GPU_SKIP:-gpu_kernels}" KH_GPU_TEST_TIMEOUT=${KH_GPU_TEST_TIMEOUT:-450} \
    OUT="$out" bash scripts/gpu-tests.sh build-portable | grep -v '^  '
  grep '^# rt_\|^not ok\|^#   /' "$out/gpu-tests.log" | head -60
  ;;
host)
  # the host red team on this machine's kernel and C library (the jail's
  # seccomp filter meets another glibc here): every verdict as on the CI
  export KHLUA_BIN="$K" KH_SOURCE_DIR="$root" KHLUA_STORE=$(mktemp -d)/store
  export ANTHROPIC_API_KEY=sk-ant-khlua-canary-7f3a9c KHLUA_REDTEAM_CANARY=khlua-canary-env-51d2
  for t in tests/lua/test_redteam_host*.lua; do
    n=$(basename "$t" .lua)
    timeout -k 5 500 "$K" tests/lua/run.lua "$t" > "$out/$n.log" 2>&1
    echo "$n: exit $?"
    grep -E '^ok|^not ok|^#   /|^# ' "$out/$n.log" | head -60
  done
  ;;
islands)
  export KH_SOURCE_DIR="$root" KHLUA_STORE=$(mktemp -d)/store
  only=${ISLANDS_ONLY:-"rt_honest rt_read_past_guard rt_scan_below_output rt_stride_guess rt_out_of_bounds_write rt_prefetch_other_sets"}
  for mode in shared islands; do
    echo "== buffers: $mode"
    if [ $mode = shared ]; then export KHLUA_NO_ISLANDS=1; else unset KHLUA_NO_ISLANDS; fi
    KH_RT_ONLY="$only" timeout -k 5 240 "$K" tests/lua/run.lua tests/lua/gpu_redteam.lua \
      > "$out/islands-$mode.log" 2>&1
    echo "exit $?"
    grep -E '^# rt_|^not ok|^#   why' "$out/islands-$mode.log"
  done
  unset KHLUA_NO_ISLANDS
  [ -n "${SKIP_SANITIZE:-}" ] && exit 0
  echo "== gpu_sanitize"
  timeout -k 5 300 "$K" tests/lua/run.lua tests/lua/gpu_sanitize.lua > "$out/gpu_sanitize.log" 2>&1
  echo "exit $?"
  grep -E '^not ok|^#   ' "$out/gpu_sanitize.log" | head -20
  tail -40 "$out/gpu_sanitize.log"
  ;;
cost)
  anchor=${1:?usage: h200-check.sh cost ANCHOR_KHLUA}
  OUT="$out/gpu" bash tests/bench/gate_cost.sh "$anchor" "$K" kernels/rmsnorm_h4096 rmsnorm_h4096_cuda_v1
  OUT="$out/host" bash tests/bench/gate_cost.sh "$anchor" "$K" kernels/host_rmsnorm host_rmsnorm_h1024_c_v1
  ;;
policy)
  export KHLUA_STORE="$out/store"
  task=${POLICY_TASK:-kernels/rmsnorm_h4096}
  # killed once mid-run (once round POLICY_KILL_ROUND is reported, or after
  # POLICY_KILL_AFTER seconds), then resumed: the run must end as one run
  "$K" policies/plateau_switch.lua --task "$task" --rounds "${POLICY_ROUNDS:-6}" \
    > "$out/policy-1.txt" 2>&1 &
  pid=$!
  for _ in $(seq 1 "${POLICY_KILL_AFTER:-300}"); do
    grep -q "^round ${POLICY_KILL_ROUND:-3} " "$out/policy-1.txt" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  echo "first part: exit $? (137 = killed on purpose, after round ${POLICY_KILL_ROUND:-3})"
  run=$(grep -o '^run run-[0-9A-Z]*' "$out/policy-1.txt" | head -1 | cut -d' ' -f2)
  [ -n "$run" ] || { cat "$out/policy-1.txt"; exit 1; }
  "$K" policies/plateau_switch.lua --resume "$run" > "$out/policy-2.txt" 2>&1
  echo "resumed: exit $?"
  cat "$out/policy-1.txt" "$out/policy-2.txt" | grep -v '^no .*_API_KEY'
  "$K" store ls --type promotion --run "$run" 2>&1 | head
  ;;
tasks)
  # the device sends back 8 files: the per-solution JSONL go back as one
  # archive, with the summary beside it (EVAL_BUDGET_S bounds the run)
  ev=$(mktemp -d)
  OUT="$ev" EVAL_BUDGET_S=${EVAL_BUDGET_S:-480} bash kernels/eval_all.sh "$K" "$@"
  cp "$ev/summary.md" "$out/" 2>/dev/null
  tar -czf "$out/eval-out.tgz" -C "$ev" . && rm -rf "$ev"
  ;;
verify)
  # VERIFY_WORKLOADS per package (default 4), VERIFY_TIMEOUT seconds each
  # (default 150), VERIFY_BUDGET_S in all (default 500: the records written
  # by then are archived); no rough latencies (the official ones come from
  # `tasks`)
  vo=$(mktemp -d)
  pk=$(IFS=,; echo "$*")
  timeout "${VERIFY_BUDGET_S:-500}" python3 kernels/verify.py --out "$vo" --workloads "${VERIFY_WORKLOADS:-4}" --no-timing \
    --timeout "${VERIFY_TIMEOUT:-150}" ${pk:+--packages "$pk"} 2>&1 | tee "$out/verify.txt" |
    grep -v '^{'
  tar -czf "$out/verify-out.tgz" -C "$vo" . && rm -rf "$vo"
  ;;
*)
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
