#!/usr/bin/env bash
# The task library's "done when" (issue 12), on the GPU machine: `khlua eval`
# of every package's trusted reference and baseline on every workload, then
# a table per package: PASSED count, the baseline's official latency (mean
# over the timed workloads, and per workload in the JSONL) and its fraction
# of the speed-of-light bound.
#   bash kernels/eval_all.sh [KHLUA] [PACKAGE...]     (default ./build/khlua, all)
# The reference is checked for correctness alone (it is the yardstick), with
# EVAL_PAR workers sharing the GPU (default 4: no timing to disturb).  The
# baseline and any trusted shared object (a cuBLAS anchor) are timed with
# the official protocol, alone on the GPU, without timing the reference
# again.  EVAL_TIMED=N: time only the first N workloads of each package and
# check the rest for correctness in parallel (when device time is short).
# Writes ${OUT:-kernels/eval-out}/<package>/<solution>.jsonl (Trace JSONL;
# <solution>.check.jsonl for correctness-only runs) and summary.md.  One
# package failing never stops the others.  Each package's rows are printed
# (stderr) as soon as it is done, so a run cut short still shows them;
# EVAL_BUDGET_S=N starts no new solution after N seconds (the summary then
# says which were skipped).
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
start=$(date +%s)
skipped=()
# run_eval OUT LOG ARGS...: khlua eval of $p $sol as Trace JSONL into OUT,
# stderr into LOG; says so when not every workload PASSED
run_eval() {
    local o="$1" l="$2"
    shift 2
    "$khlua" eval --task "$here/$p" --solution "$sol" --json --no-store "$@" > "$o" 2> "$l" ||
        echo "   (not every workload PASSED: see $l)" >&2
}
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
    ref="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["khlua"].get("reference") or "")' "$here/$p/definition.json")"
    nw=$(grep -c . "$here/$p/workloads.jsonl")
    for sol in $sols; do
        t0=$(date +%s)
        if [ -n "${EVAL_BUDGET_S:-}" ] && [ $((t0 - start)) -ge "$EVAL_BUDGET_S" ]; then
            echo "== $p $sol: skipped (EVAL_BUDGET_S=$EVAL_BUDGET_S spent)" >&2
            skipped+=("$p/$sol")
            continue
        fi
        if [ "$sol" = "$ref" ]; then
            echo "== $p $sol (the reference: correctness on $nw workloads)" >&2
            run_eval "$out/$p/$sol.check.jsonl" "$out/$p/$sol.log" --no-timing \
                --workers-per-gpu "${EVAL_PAR:-4}"
        else
            timed=${EVAL_TIMED:-$nw}
            [ "$timed" -gt "$nw" ] && timed=$nw
            if [ "$timed" -lt "$nw" ]; then
                echo "== $p $sol (correctness on $nw workloads)" >&2
                run_eval "$out/$p/$sol.check.jsonl" "$out/$p/$sol.check.log" --no-timing \
                    --workers-per-gpu "${EVAL_PAR:-4}"
            fi
            echo "== $p $sol (official timing on $timed of $nw workloads)" >&2
            run_eval "$out/$p/$sol.jsonl" "$out/$p/$sol.log" --no-reference-timing \
                --workloads "$timed"
        fi
        echo "   $(( $(date +%s) - t0 )) s" >&2
    done
    python3 "$here/eval_summary.py" "$out" "$p" | tail -n +3 >&2
done
python3 "$here/eval_summary.py" "$out" "${pkgs[@]}" | tee "$out/summary.md"
if [ ${#skipped[@]} -gt 0 ]; then
    echo "skipped (time budget): ${skipped[*]}" | tee -a "$out/summary.md"
fi
