#!/usr/bin/env bash
# The task library's "done when" (issue 12), on the GPU machine: `khlua eval`
# (official protocol) of every package's trusted reference and baseline on
# every workload, then a table per package: PASSED count, the baseline's
# official latency (mean over workloads, and per workload in the JSONL) and
# its fraction of the speed-of-light bound.
#   bash kernels/eval_all.sh [KHLUA] [PACKAGE...]     (default ./build/khlua, all)
# Writes ${OUT:-kernels/eval-out}/<package>/<solution>.jsonl (Trace JSONL) and
# summary.md.  One package failing never stops the others.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
khlua="${1:-$here/../build/khlua}"
shift || true
out="${OUT:-$here/eval-out}"
mkdir -p "$out"
# the stand-in blobs git does not carry (MoE routing, GDN prefill q/k)
python3 "$here/make_blobs.py" --missing || echo "   (make_blobs.py failed: those packages will fail)" >&2
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
    for d in "$here"/*/definition.json; do pkgs+=("$(basename "$(dirname "$d")")"); done
fi
for p in "${pkgs[@]}"; do
    mkdir -p "$out/$p"
    # the reference, the baseline, then any trusted shared object (a cuBLAS anchor)
    sols="$(python3 - "$here/$p" <<'PY'
import glob, json, os, sys
k = json.load(open(os.path.join(sys.argv[1], "definition.json")))["khlua"]
names = [n for n in (k.get("reference"), k.get("baseline")) if n]
for f in sorted(glob.glob(os.path.join(sys.argv[1], "solutions", "*.json"))):
    s = json.load(open(f))
    if s["spec"].get("khlua", {}).get("backend") == "cuda_so" and s["name"] not in names:
        names.append(s["name"])
print(" ".join(names))
PY
)"
    for sol in $sols; do
        echo "== $p $sol" >&2
        "$khlua" eval --task "$here/$p" --solution "$sol" --json --no-store \
            > "$out/$p/$sol.jsonl" 2> "$out/$p/$sol.log" || echo "   (not every workload PASSED: see $out/$p/$sol.log)" >&2
    done
done
python3 "$here/eval_summary.py" "$out" "${pkgs[@]}" | tee "$out/summary.md"
