#!/usr/bin/env bash
# Does the gpu worker's buffer placement change a kernel's official latency?
# On a GPU machine, from the repository root, with build-portable/:
#
#   bash scripts/h200-islands-ab.sh PACKAGE [N]
#
# times the package's baseline on its first N workloads (default all) with
# `khlua eval --protocol official`, alternately with islands (every buffer in
# a mapping of its own between guard pages, the default) and with one shared
# heap (KHLUA_NO_ISLANDS=1), A B A B, and prints each workload's latencies
# and the ratio shared/islands.  Written for gdn_decode_qk4_v8_d128_k_last,
# whose official latency was 3.7% above the same cubin's under CUPTI in
# FlashInfer-Bench's loop (torch's caching allocator) on the H100.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LD_LIBRARY_PATH="$root/build-portable/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K="$root/build-portable/khlua"
p=${1:?usage: h200-islands-ab.sh PACKAGE [N]}
n=${2:-all}
pkg="kernels/$p"
base=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["khlua"]["baseline"])' \
  "$pkg/definition.json") || exit 1
tmp=$(mktemp -d)
export KHLUA_STORE="$tmp/store"
rc=0
for rep in 1 2; do
  for mode in islands shared; do
    env_=()
    [ $mode = shared ] && env_=(KHLUA_NO_ISLANDS=1)
    if ! env "${env_[@]}" "$K" eval --task "$pkg" --solution "$base" --protocol official \
        --no-reference-timing --workloads "$n" --json --seed $((1000 + rep)) \
        > "$tmp/$mode.$rep.jsonl" 2> "$tmp/$mode.$rep.log"; then
      echo "khlua eval ($mode, repetition $rep) failed:"; tail -3 "$tmp/$mode.$rep.log"; rc=1
    fi
  done
done
python3 - "$tmp" <<'PY'
import json, math, sys, os
tmp = sys.argv[1]
lat = {}
for f in sorted(os.listdir(tmp)):
    if not f.endswith(".jsonl"):
        continue
    mode, rep = f.split(".")[:2]
    for line in open(os.path.join(tmp, f)):
        if line.startswith("{"):
            t = json.loads(line)
            ev = t["evaluation"]
            buf = ev.get("khlua", {}).get("worker", {}).get("buffers", "?")
            ms = (ev.get("performance") or {}).get("latency_ms")
            lat.setdefault(t["workload"]["uuid"], {}).setdefault(mode, []).append((ms, buf))
print(f"{'workload':38} {'islands ms':>22} {'shared ms':>22} shared/islands")
rs = []
for u, m in lat.items():
    i = [x for x, _ in m.get("islands", []) if x]
    s = [x for x, _ in m.get("shared", []) if x]
    bufs = {b for _, b in m.get("islands", []) + m.get("shared", [])}
    r = (sum(s) / len(s)) / (sum(i) / len(i)) if i and s else float("nan")
    rs.append(r)
    print(f"{u:38} {' '.join('%.5f' % x for x in i):>22} {' '.join('%.5f' % x for x in s):>22} "
          f"{r:.3f}  (buffers reported: {','.join(sorted(bufs))})")
ok = [r for r in rs if r == r]
if ok:
    print(f"geomean shared/islands {math.exp(sum(map(math.log, ok)) / len(ok)):.4f}")
PY
rm -rf "$tmp"
exit $rc
