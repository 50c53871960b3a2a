#!/usr/bin/env bash
# Run the gpu-labelled tests from a carried portable build (scripts/portable.sh)
# on a GPU machine, and print a short table.  Usage, from the repository root:
#   bash scripts/gpu-tests.sh [BUILD_DIR]        (default build-portable)
# Runs tests/c/test_gpu_* binaries and tests/lua/gpu_*.lua; exit 1 if any failed.
# KH_GPU_SKIP="gpu_kernels test_gpu_timing ..." leaves the named tests out (long ones);
# KH_GPU_ONLY="..." runs only the named ones; KH_GPU_TEST_TIMEOUT (s, default 450)
# bounds each test.  KH_KERNELS_ONLY="pkg1,pkg2" limits gpu_kernels to those task
# packages.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-portable}
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KHLUA_BIN="$build/khlua" KH_SOURCE_DIR="$root"
export KHLUA_STORE=${KHLUA_STORE:-$(mktemp -d)/store}
log=${OUT:-/tmp}/gpu-tests.log
: > "$log"
pass=0; fail=0; skip=0
rows=()
run_one() {
  local name=$1; shift
  local t0=$(date +%s.%N)
  timeout -k 5 "${KH_GPU_TEST_TIMEOUT:-450}" "$@" >>"$log" 2>&1
  local rc=$?
  local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')
  local res
  case $rc in
    0) res=passed; pass=$((pass+1));;
    77) res=skipped; skip=$((skip+1));;
    *) res="FAILED($rc)"; fail=$((fail+1));;
  esac
  [ $rc -eq 124 ] && res="TIMEOUT"
  rows+=("$(printf '%-32s %-12s %8.2f s' "$name" "$res" "$dt")")
  echo "${rows[-1]}"   # as it goes: a run cut short still shows what finished
}
echo "== khlua doctor" | tee -a "$log"
"$build/khlua" doctor | tee -a "$log"
for t in "$build"/tests/test_gpu_*; do
  [ -x "$t" ] || continue
  echo "== $t" >>"$log"
  case " ${KH_GPU_SKIP:-} " in *" $(basename "$t") "*) continue;; esac
  [ -n "${KH_GPU_ONLY:-}" ] && case " $KH_GPU_ONLY " in *" $(basename "$t") "*) ;; *) continue;; esac
  run_one "$(basename "$t")" "$t"
done
for t in "$root"/tests/lua/gpu_*.lua; do
  [ -f "$t" ] || continue
  case " ${KH_GPU_SKIP:-} " in *" $(basename "$t" .lua) "*) continue;; esac
  [ -n "${KH_GPU_ONLY:-}" ] && case " $KH_GPU_ONLY " in *" $(basename "$t" .lua) "*) ;; *) continue;; esac
  echo "== $t" >>"$log"
  run_one "$(basename "$t" .lua)" "$build/khlua" "$root/tests/lua/run.lua" "$t"
done
echo
printf '%-32s %-12s %10s\n' test result time
for r in "${rows[@]}"; do echo "$r"; done
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
