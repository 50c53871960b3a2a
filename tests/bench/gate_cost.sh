#!/usr/bin/env bash
# gate_cost.sh: what the sound gate (issue 19) costs, side by side with the
# gate before it, in one run on the GPU machine: `khlua eval` of a package's
# baseline under the official protocol on every workload, the anchor build
# (khlua at 50d78c4: fixed seeds, a few verified timed calls at fixed
# positions) and this one (secret seeds, fresh inputs and poison before every
# call, every timed call verified), alternating ANCHOR NEW ANCHOR NEW.
# Prints wall time per run, the ratio new/anchor, and how the two builds'
# official latencies agree per workload (the timing must not move).  Any
# package works, host ones too (kernels/host_rmsnorm host_rmsnorm_h1024_c_v1);
# scripts/h200-check.sh cost runs both.  Results: tests/bench/results/gate-cost-*.
#   bash tests/bench/gate_cost.sh ANCHOR_KHLUA [NEW_KHLUA] [PACKAGE] [SOLUTION]
# From the repository root, with both builds carried (scripts/h200-prep.sh;
# the anchor built from 50d78c4 with scripts/portable.sh).
set -uo pipefail
old=${1:?usage: gate_cost.sh ANCHOR_KHLUA [NEW_KHLUA] [PACKAGE] [SOLUTION]}
new=${2:-build-portable/khlua}
pkg=${3:-kernels/rmsnorm_h4096}
sol=${4:-rmsnorm_h4096_cuda_v1}
out=${OUT:-/tmp}/gate_cost
mkdir -p "$out"
reps=${GATE_COST_REPS:-2}
for i in $(seq 1 "$reps"); do
  for who in anchor new; do
    exe=$old; [ $who = new ] && exe=$new
    t0=$(date +%s.%N)
    "$exe" --store "$out/store-$who" eval --task "$pkg" --solution "$sol" --protocol official \
      --json > "$out/$who-$i.jsonl" 2> "$out/$who-$i.err"
    rc=$?
    echo "$who $i $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}') $rc" >> "$out/walls.txt"
  done
done
python3 - "$out" "$reps" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
walls = {}
for line in open(f"{out}/walls.txt"):
    who, i, s, rc = line.split()
    walls.setdefault(who, []).append((float(s), int(rc)))
def load(who, i):
    try:
        return [json.loads(l) for l in open(f"{out}/{who}-{i}.jsonl") if l.startswith("{")]
    except OSError:
        return []
print(f"{'build':8} {'run':>4} {'wall s':>8} {'exit':>5} {'PASSED':>8} {'verified calls':>15}")
for who in ("anchor", "new"):
    for i, (s, rc) in enumerate(walls[who], 1):
        tr = load(who, i)
        ok = sum(t["evaluation"]["status"] == "PASSED" for t in tr)
        ver = sum((t["evaluation"].get("khlua", {}).get("timed_outputs_verified") or {}).get("calls", 0) for t in tr)
        print(f"{who:8} {i:4} {s:8.2f} {rc:5} {ok:5}/{len(tr):<3} {ver:15}")
ma = statistics.median(s for s, _ in walls["anchor"])
mn = statistics.median(s for s, _ in walls["new"])
print(f"wall time, median: anchor {ma:.2f} s, new {mn:.2f} s, new/anchor {mn/ma:.2f}x")
lat = {}
for who in ("anchor", "new"):
    for i in range(1, reps + 1):
        for t in load(who, i):
            p = t["evaluation"].get("performance") or {}
            if p.get("latency_ms"):
                lat.setdefault(t["workload"]["uuid"], {}).setdefault(who, []).append(p["latency_ms"])
rat = []
print(f"{'workload':38} {'anchor ms':>10} {'new ms':>10} {'new/anchor':>11}")
for u, d in lat.items():
    if "anchor" in d and "new" in d:
        a, n = statistics.median(d["anchor"]), statistics.median(d["new"])
        rat.append(n / a)
        print(f"{u:38} {a:10.4f} {n:10.4f} {n/a:11.3f}")
if rat:
    g = statistics.geometric_mean(rat)
    print(f"official latency new/anchor: geometric mean {g:.3f}, min {min(rat):.3f}, max {max(rat):.3f} over {len(rat)} workloads")
PY
