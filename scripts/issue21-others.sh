#!/usr/bin/env bash
# issue21-others.sh: khlua alone (no FlashInfer-Bench pipeline beside it) on
# the issue's two other kernels, a fresh evaluation of each package's
# baseline per protocol, from the repository root with build-portable and
# kernels/build carried.  For when the device time left is too short for
# tests/bench/bench_eval.sh, whose FlashInfer-Bench pipeline on these
# kernels runs for minutes.  RUNS (default "official screen"), PER_TIMEOUT
# (default 60 s) bounds each evaluation.  Outputs under $OUT/others.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export LD_LIBRARY_PATH="$root/build-portable/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K="$root/build-portable/khlua"
out=${OUT:-/tmp/issue21}/others
mkdir -p "$out"
export KHLUA_STORE="$out/store"
printf '%-56s %-9s %8s %8s %8s\n' package protocol wall_s per_wl_s passed
for p in ${PACKAGES:-gdn_decode_qk4_v8_d128_k_last dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64}; do
  pkg="kernels/$p"
  base=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["khlua"]["baseline"])' \
    "$pkg/definition.json") || continue
  for run in ${RUNS:-official screen}; do
    # a fresh candidate: the baseline's Solution with a new name and comment
    python3 - "$pkg" "$base" "$out/$p.$run.solution.json" "$run" <<'PY'
import json, os, sys
pkg, base, dst, run = sys.argv[1:5]
s = json.load(open(os.path.join(pkg, "solutions", base + ".json")))
s["name"] = base + "_fresh_" + run
entry = s["spec"]["entry_point"].split("::")[0]
for src in s["sources"]:
    if src["path"] == entry:
        src["content"] = "// fresh: %s\n" % run + src["content"]
json.dump(s, open(dst, "w"))
PY
    export KHLUA_TIMELINE="$out/$p.$run.timeline"
    t0=$(date +%s.%N)
    timeout -k 5 "${PER_TIMEOUT:-60}" "$K" eval --task "$pkg" --solution "$out/$p.$run.solution.json" \
      --protocol "$run" --json > "$out/$p.$run.jsonl" 2> "$out/$p.$run.log"
    rc=$?
    t1=$(date +%s.%N)
    unset KHLUA_TIMELINE
    read -r n ok <<< "$(python3 - "$out/$p.$run.jsonl" <<'PY'
import json, sys
n = ok = 0
for line in open(sys.argv[1]):
    if line.strip().startswith("{"):
        e = json.loads(line)["evaluation"]
        n += 1
        ok += e.get("status") == "PASSED"
print(n, ok)
PY
)"
    awk -v p="$p" -v r="$run" -v a="$t0" -v b="$t1" -v n="$n" -v ok="$ok" -v rc="$rc" \
      'BEGIN { printf "%-56s %-9s %8.3f %8.4f %5d/%d%s\n", p, r, b - a, n ? (b - a) / n : 0, ok, n, rc ? "  exit " rc : "" }'
  done
done
rm -rf "$out/store"
