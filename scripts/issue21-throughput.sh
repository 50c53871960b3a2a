#!/usr/bin/env bash
# issue21-throughput.sh: screened candidate-workloads per GPU-hour with K
# model calls in flight (issue 21), from the repository root with
# build-portable and kernels/build carried (scripts/h200-prep.sh).
# A mock model (tests/mock_llm.py) answers every call after DELAY seconds
# (default 2) with a fresh variant of REPLY (default the task's
# replay/02-faster.txt: a numbered comment in its code, so every reply is a
# new candidate to compile and screen); plateau_switch runs ROUNDS rounds
# (default 40) on TASK (default kernels/rmsnorm_h4096) with --concurrency K
# (default 8); scripts/throughput.lua then counts the screened
# candidate-workloads in the run's records and prints them per hour of the
# run's wall time, with the GPU busy fraction (the judged kernels' time), and
# nvidia-smi's utilization.gpu polled every 100 ms over the run (any kernel,
# the harness's own included).  TIMEOUT (default 300 s) bounds the run.
# Outputs under $OUT/throughput.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LD_LIBRARY_PATH="$root/build-portable/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K=${KHLUA:-$root/build-portable/khlua}
task=${TASK:-kernels/rmsnorm_h4096}
reply=${REPLY:-$task/replay/02-faster.txt}
rounds=${ROUNDS:-40}
conc=${CONCURRENCY:-8}
out=${OUT:-/tmp/issue21}/throughput
rm -rf "$out" && mkdir -p "$out/ladder/fam"
export KHLUA_STORE="$out/store"
# where the run's wall time goes (scripts/timeline.py $out/run.timeline)
export KHLUA_TIMELINE="$out/run.timeline"
[ -f "$reply" ] || { echo "issue21-throughput: no reply file $reply" >&2; exit 2; }
# one ladder step per call the run can make (rounds x candidates, and more)
python3 - "$reply" "$out/ladder/fam" "$((rounds * 4 + 8))" <<'PY'
import json, os, sys
text, fam, n = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3])
fence = text.find("```")
nl = text.find("\n", fence)
if fence < 0 or nl < 0:
    sys.exit("issue21-throughput: the reply has no fenced code")
for k in range(1, n + 1):
    d = os.path.join(fam, "%04d" % k)
    os.makedirs(d)
    body = text[:nl + 1] + "// variant %d\n" % k + text[nl + 1:]
    json.dump({"text": body}, open(os.path.join(d, "reply.json"), "w"))
PY
python3 tests/mock_llm.py --ladder "$out/ladder" --ladder-delay "${DELAY:-2}" \
  --lifetime "$(( ${TIMEOUT:-300} + 60 ))" > "$out/mock.port" 2> "$out/mock.log" &
mock=$!
trap 'kill $mock 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$out/mock.port" ] && break; sleep 0.1; done
port=$(cut -d' ' -f1 "$out/mock.port")
[ -n "$port" ] || { echo "issue21-throughput: the mock model did not start" >&2; exit 1; }
python3 kernels/make_blobs.py --missing > "$out/make_blobs.log" 2>&1 || true
smi=0
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
    > "$out/smi.txt" 2>/dev/null &
  smi=$!
fi
t0=$(date +%s.%N)
timeout -k 5 "${TIMEOUT:-300}" "$K" policies/plateau_switch.lua --task "$task" \
  --model "compat:fam@http://127.0.0.1:$port/m/ladder/0/t/v1" --rounds "$rounds" \
  --plateau 1000 --concurrency "$conc" --report none ${EXTRA:-} > "$out/run.txt" 2>&1
rc=$?
t1=$(date +%s.%N)
[ "$smi" != 0 ] && kill "$smi" 2>/dev/null
echo "plateau_switch: exit $rc"
tail -5 "$out/run.txt" | cut -c1-200
run=$(grep -o '^run run-[0-9A-Z]*' "$out/run.txt" | head -1 | cut -d' ' -f2)
[ -n "$run" ] || exit 1
"$K" scripts/throughput.lua "$run" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}')" "$conc" | tee "$out/throughput.txt"
[ -s "$out/smi.txt" ] && awk '$1 ~ /^[0-9]+$/ { s += $1; n++ }
  END { if (n) printf "nvidia-smi utilization.gpu over the run: mean %.1f%% (%d polls)\n", s / n, n }' \
  "$out/smi.txt" | tee -a "$out/throughput.txt"
# the GPU's active seconds (the run's records) over the seconds inside evaluations
active=$(python3 -c 'import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        print(sum(g.get("active_s", 0) for g in json.loads(l).get("gpu_busy", []))); break' \
  "$out/throughput.txt" 2>/dev/null)
[ -s "$out/run.timeline" ] && python3 scripts/timeline.py "$out/run.timeline" --summary \
  ${active:+--active "$active"} > "$out/timeline-summary.txt" 2>&1 &&
  tail -16 "$out/timeline-summary.txt"
