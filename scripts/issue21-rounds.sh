#!/usr/bin/env bash
# issue21-rounds.sh: a search run's rounds timed on the GPU machine (issue
# 21: a rejected candidate's round, a promotion's, the seed's measurement
# and profile), from the repository root with build-portable and
# kernels/build carried: plateau_switch on POLICY_TASK (default
# kernels/rmsnorm_h4096) with its replay ladder, ROUNDS rounds (default 6),
# COMPARE (device or host, default device), then scripts/round_times.lua.
# ROUNDS_TIMEOUT (default 300 s) bounds the run.  Outputs under $OUT/rounds.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LD_LIBRARY_PATH="$root/build-portable/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K="$root/build-portable/khlua"
out=${OUT:-/tmp/issue21}/rounds
mkdir -p "$out"
export KHLUA_STORE="$out/store"
# where each round's evaluations went (scripts/timeline.py)
export KHLUA_TIMELINE="$out/rounds.timeline"
python3 kernels/make_blobs.py --missing > "$out/make_blobs.log" 2>&1 || true
timeout -k 5 "${ROUNDS_TIMEOUT:-300}" "$K" policies/plateau_switch.lua \
  --task "${POLICY_TASK:-kernels/rmsnorm_h4096}" --rounds "${ROUNDS:-6}" --plateau 100 \
  --compare "${COMPARE:-device}" --report none > "$out/run.txt" 2>&1
echo "plateau_switch: exit $?"
grep -v '_API_KEY' "$out/run.txt" | cut -c1-160 | tail -12
run=$(grep -o '^run run-[0-9A-Z]*' "$out/run.txt" | head -1 | cut -d' ' -f2)
[ -n "$run" ] || exit 1
"$K" scripts/round_times.lua "$run" | tee "$out/round_times.txt"
rm -rf "$out/store"
