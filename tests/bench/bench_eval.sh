#!/usr/bin/env bash
# bench_eval.sh: khlua's evaluation turnaround against FlashInfer-Bench's own
# pipeline on the same kernel and workloads, side by side in one run (issue
# 21).  On a GPU machine, from the repository root, with build-portable/
# (scripts/h200-prep.sh) and FlashInfer-Bench's wheels in .whl/ (see
# scripts/h200-fib.sh):
#
#   bash tests/bench/bench_eval.sh [PACKAGE...]     (default rmsnorm_h4096)
#
# Per package:
#   FIB pipeline   FlashInfer-Bench 0.1.2's Benchmark.run_all on khlua's export
#                  of the baseline (its persistent runner: reference,
#                  correctness over 3 trials, timing of solution and
#                  reference; the build is done before and not counted),
#                  scripts/fib_roundtrip.py --no-cupti
#   official       khlua eval --protocol official of a fresh candidate (the
#                  baseline's source with a new comment, so nothing is cached
#                  for it: compile, reference outputs kept per seed excepted),
#                  every workload, every hardened check, reference timing
#   screen         the same with --protocol screen
#   screen-1       one workload
# BENCH_EVAL_RUNS picks the khlua runs (default "official screen screen-1");
# besides those, PROTOCOL-noverify (--verify 0: no timed call's outputs
# checked), -noref (--no-reference-timing), -parity (FlashInfer-Bench's checks
# only), -warm (no cache flush), -hostcmp / -devcmp (--host-compare: the
# outputs back to the coordinator, the reference in its own request;
# --device-compare, the default: the reference in the candidate's request, compared on the
# GPU) show what each part of the evaluation costs.  PROTOCOL-inrun
# (every workload) and PROTOCOL-inrun1 (one) time a fresh candidate's
# evaluation inside a process that has already evaluated another one
# (tests/bench/eval_inrun.lua: its workers, compile servers and reference
# artifacts warm), as a search run evaluates its candidates; -inrun-hostcmp,
# -inrun1-hostcmp the same with --host-compare.
# KHLUA_BUILD: the build folder to measure (default build-portable).
# BENCH_WORKLOADS=N: the first N workloads of each package only, on both
# sides (FlashInfer-Bench's pipeline runs for minutes on gdn_decode's 56);
# the runs' one-workload variants (-1, -inrun1) keep their one.
# Each line: wall seconds of the whole command, per workload, the sums over
# the traces of the worker's and the coordinator's seconds, and the ratio of
# the per-workload time to FlashInfer-Bench's.  Outputs under $OUT (or
# /tmp/bench-eval): the table (bench_eval.txt) and each run's traces.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
b=${KHLUA_BUILD:-$root/build-portable}
export LD_LIBRARY_PATH="$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K="$b/khlua"
out=${OUT:-/tmp/bench-eval}
mkdir -p "$out"
[ $# -gt 0 ] || set -- rmsnorm_h4096
site=$(mktemp -d)
if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
    .whl/*.whl > "$out/pip.log" 2>&1; then
  echo "bench_eval: installing the wheels in .whl/ failed: $out/pip.log" >&2
  exit 1
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export KHLUA_STORE="$out/store"
python3 kernels/make_blobs.py --missing > "$out/make_blobs.log" 2>&1 || true
table="$out/bench_eval.txt"
: > "$table"
now() { date +%s.%N; }
# smi_start FILE / smi_mean PID FILE: the GPU's utilization as nvidia-smi
# reports it (the share of time a kernel of any process ran, harness's and
# candidate's alike), polled every 100 ms during a run, and its mean: a
# cross-check of busy_% from outside khlua, and the same figure for
# FlashInfer-Bench's pipeline ("-" where nvidia-smi is missing)
smi_start() {
  : > "$1"
  command -v nvidia-smi > /dev/null || { echo 0; return; }
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 > "$1" 2>/dev/null &
  echo $!
}
smi_mean() {
  [ "$1" != 0 ] && { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
  awk '$1 ~ /^[0-9]+$/ { s += $1; n++ } END { if (n) printf "%.1f", s / n; else printf "-" }' "$2"
}

# fresh PKG BASE NAME: a Solution file of the baseline with a new comment
fresh() {
  python3 - "$1" "$2" "$3" "$out/$3.json" <<'PY'
import json, os, sys
pkg, base, name, dst = sys.argv[1:5]
s = json.load(open(os.path.join(pkg, "solutions", base + ".json")))
s["name"] = name
entry = s["spec"]["entry_point"].split("::")[0]
for src in s["sources"]:
    if src["path"] == entry:
        src["content"] += "\n// bench_eval: %s\n" % os.urandom(8).hex()
json.dump(s, open(dst, "w"))
PY
}

# sums PKG TAG: from the traces of a khlua run, "n passed worker_s coord_s
# kernel_s active_s"
sums() {
  python3 - "$out/$1.$2.jsonl" <<'PY'
import json, sys
n = ok = 0; ws = cs = ks = ac = 0.0
for line in open(sys.argv[1]):
    if not line.strip().startswith("{"):
        continue
    t = json.loads(line); ev = t["evaluation"]; kl = ev.get("khlua", {})
    n += 1; ok += ev["status"] == "PASSED"
    ws += kl.get("worker_seconds") or 0; cs += kl.get("coordinator_seconds") or 0
    ks += kl.get("gpu_kernel_seconds") or 0
    ac += kl.get("gpu_active_seconds") or 0
print(n, ok, "%.3f" % ws, "%.3f" % cs, "%.6f" % ks, "%.6f" % ac)
PY
}

# phases PKG TAG: the traces' khlua.phases summed over the workloads, a line
# per stage: the coordinator's seconds, the requests' worker seconds and
# seconds from filing to reply, and the payload megabytes each way
phases() {
  python3 - "$out/$1.$2.jsonl" <<'PY'
import json, sys
tot = {}
for line in open(sys.argv[1]):
    if not line.strip().startswith("{"):
        continue
    ph = json.loads(line)["evaluation"].get("khlua", {}).get("phases") or {}
    for k, v in ph.items():
        t = tot.setdefault(k, [0.0] * 13)
        for i, f in enumerate(("coordinator_s", "requests", "worker_s", "wait_s",
                               "bytes_sent", "bytes_back", "kernel_s")):
            t[i] += v.get(f, 0)
        st = v.get("worker_steps") or {}
        for i, f in enumerate(("open_s", "trials_s", "timing_s", "refill_s", "keep_s", "judge_s")):
            t[7 + i] += st.get(f, 0)
for k, t in tot.items():
    print("    %-11s coord %7.3f s  req %3d  worker %7.3f s (open %6.3f trials %6.3f timing %6.3f: refill %6.3f keep %6.3f judge %6.3f)  wait %7.3f s  kernel %7.4f s  sent %8.1f MB  back %8.1f MB"
          % (k, t[0], t[1], t[2], t[7], t[8], t[9], t[10], t[11], t[12], t[3], t[6], t[4] / 1e6, t[5] / 1e6))
PY
}

row() { printf '%-34s %-16s %9s %9s %7s %9s %9s %7s %8s %6s %9s\n' "$@" | tee -a "$table"; }
row package run wall_s per_wl_s passed worker_s coord_s busy_% active_% smi_% vs_FIB
rc=0
for p in "$@"; do
  pkg="kernels/$p"
  base=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["khlua"]["baseline"])' \
    "$pkg/definition.json") || { rc=1; continue; }
  # FlashInfer-Bench's pipeline on the export of the same kernel
  "$K" export solution "$base" --task "$pkg" --out "$out/$p.export" > "$out/$p.export.log" 2>&1 \
    || { echo "export failed: $out/$p.export.log"; rc=1; continue; }
  smi=$(smi_start "$out/$p.fib.smi")
  timeout -k 5 400 python3 scripts/fib_roundtrip.py "$out/$p.export" "$pkg" --no-cupti \
    ${BENCH_WORKLOADS:+--workloads "$BENCH_WORKLOADS"} \
    --json "$out/$p.fib.json" > "$out/$p.fib.log" 2>&1
  fib_smi=$(smi_mean "$smi" "$out/$p.fib.smi")
  fib_s=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pipeline_seconds"])' \
    "$out/$p.fib.json" 2>/dev/null) || { echo "FIB failed:"; tail -5 "$out/$p.fib.log"; rc=1; continue; }
  nfib=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["traces"]))' \
    "$out/$p.fib.json")
  fib_per=$(awk -v a="$fib_s" -v n="$nfib" 'BEGIN { printf "%.4f", a / n }')
  row "$p" "FIB pipeline" "$fib_s" "$fib_per" "$nfib" - - - - "$fib_smi" 1.00
  for run in ${BENCH_EVAL_RUNS:-official screen screen-1}; do
    name="${base}_fresh_${run//-/_}"
    fresh "$pkg" "$base" "$name"
    args=(--protocol "${run%%-*}")
    # the run's suffixes, each adding its option (screen-1-devcmp: both)
    IFS=- read -ra sfx <<< "${run#*-}"
    [ "$run" = "${run%%-*}" ] && sfx=()
    case "-${run#*-}-" in *-1-*|*-inrun1-*) ;; *)
      [ -n "${BENCH_WORKLOADS:-}" ] && args+=(--workloads "$BENCH_WORKLOADS");;
    esac
    for x in "${sfx[@]}"; do
      case $x in
        1) args+=(--workloads 1);;
        noverify) args+=(--verify 0);;
        noref) args+=(--no-reference-timing);;
        parity) args+=(--parity);;
        warm) args+=(--warm);;
        hostcmp) args+=(--host-compare);;
        devcmp) args+=(--device-compare);;
        inrun|inrun1) ;;
        *) echo "bench_eval: unknown run suffix '$x' in '$run'" >&2; exit 2;;
      esac
    done
    # where the wall time goes: the coordinator's and workers' events
    # (kh_timeline), in the runs' archive
    export KHLUA_TIMELINE="$out/$p.$run.timeline"
    smi=$(smi_start "$out/$p.$run.smi")
    t0=$(now)
    case $run in
      *-inrun*)
        fresh "$pkg" "$base" "${name}_first"
        cmp=default
        case $run in *-devcmp*) cmp=device;; *-hostcmp*) cmp=host;; esac
        nwl=${BENCH_WORKLOADS:-all}
        case $run in *-inrun1*) nwl=1;; esac
        timeout -k 5 400 "$K" tests/bench/eval_inrun.lua "$pkg" "$out/${name}_first.json" \
          "$out/$name.json" "${run%%-*}" "$nwl" "$out/$p.$run.wall" "$cmp" \
          > "$out/$p.$run.jsonl" 2> "$out/$p.$run.log";;
      *)
        timeout -k 5 400 "$K" eval --task "$pkg" --solution "$out/$name.json" "${args[@]}" --json \
          > "$out/$p.$run.jsonl" 2> "$out/$p.$run.log";;
    esac
    krc=$?
    t1=$(now)
    run_smi=$(smi_mean "$smi" "$out/$p.$run.smi")
    unset KHLUA_TIMELINE
    [ $krc -eq 0 ] || { echo "khlua eval $run exit $krc:"; tail -3 "$out/$p.$run.log"; rc=1; }
    read -r n ok ws cs ks ac <<< "$(sums "$p" "$run")"
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    # in-run: the second evaluation alone (eval_inrun.lua's own clock)
    [ -s "$out/$p.$run.wall" ] && wall=$(awk '{ printf "%.3f", $1 }' "$out/$p.$run.wall")
    busy=$(awk -v k="$ks" -v w="$wall" 'BEGIN { printf "%.1f", (w > 0 ? 100 * k / w : 0) }')
    active=$(awk -v k="$ac" -v w="$wall" 'BEGIN { printf "%.1f", (w > 0 ? 100 * k / w : 0) }')
    per=$(awk -v w="$wall" -v n="$n" 'BEGIN { printf "%.4f", n ? w / n : 0 }')
    vs=$(awk -v x="$per" -v f="$fib_per" 'BEGIN { printf "%.2f", (f > 0 ? x / f : 0) }')
    row "$p" "$run" "$wall" "$per" "$ok/$n" "$ws" "$cs" "$busy" "$active" "$run_smi" "$vs"
    phases "$p" "$run" | tee -a "$table"
  done
done
echo "vs_FIB: khlua's seconds per workload over FlashInfer-Bench's pipeline's, same run; busy_%: the GPU's kernel time (khlua.gpu_kernel_seconds) over wall_s; active_%: its active time (khlua.gpu_active_seconds: the timing batches whole, khlua's own kernels in them included) over wall_s; smi_%: nvidia-smi's utilization.gpu, mean of 100 ms polls over the run (any kernel of any process; for FIB's pipeline its whole run, start included)" | tee -a "$table"
rm -rf "$out/store"
# the device machine sends back a bounded number of files: the runs' files
# in one archive beside the table
(cd "$out" && tar -czf runs.tgz --exclude=bench_eval.txt --exclude=runs.tgz ./* &&
  find . -mindepth 1 -maxdepth 1 ! -name bench_eval.txt ! -name runs.tgz -exec rm -rf {} +)
exit $rc
