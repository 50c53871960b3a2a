#!/usr/bin/env bash
# timing.sh: khlua's official number for two kernels (a 1 GiB copy, a 20 us
# spin) beside ncu's gpu__time_duration.sum and torch's profiler (CUPTI) on the
# same cubin.  Run on the GPU machine from the repository root with a carried
# portable build:  bash tests/bench/timing.sh [BUILD_DIR]
set -uo pipefail
build=${1:-build-portable}
out=${OUT:-/tmp}
cubin=$out/bench_timing.cubin
"$build/tests/bench_timing" "$cubin" | tee "$out/khlua.jsonl"
grep -q skipped "$out/khlua.jsonl" && exit 0
python3 tests/bench/timing_torch.py "$cubin" profile | tee "$out/torch.jsonl"
for k in copy_f4 spin; do
  ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum \
      -k "regex:^$k\$" --launch-skip 3 --launch-count 4 \
      python3 tests/bench/timing_torch.py "$cubin" plain > "$out/ncu_$k.csv" 2>>"$out/ncu.err"
done
python3 - "$out" <<'PY'
import csv, json, statistics, sys, io
out = sys.argv[1]
kh = {j["kernel"]: j for j in map(json.loads, open(f"{out}/khlua.jsonl"))}
th = {j["kernel"]: j for j in map(json.loads, open(f"{out}/torch.jsonl"))}
ncu = {}
for k in ("copy_f4", "spin"):
    rows = [r for r in csv.reader(io.StringIO(open(f"{out}/ncu_{k}.csv").read())) if r]
    hdr = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    h = rows[hdr]
    ki, mi = h.index("Kernel Name"), h.index("gpu__time_duration.sum")
    unit = rows[hdr + 1][mi]
    scale = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "ns": 1, "us": 1e3, "ms": 1e6}.get(unit, 1)
    for r in rows[hdr + 2:]:
        if len(r) > mi:
            ncu.setdefault(k, []).append(float(r[mi].replace(",", "")) * scale)
print(f"{'kernel':10} {'khlua official us':>18} {'torch CUPTI us':>15} {'ncu us':>10} {'khlua/torch':>12} {'khlua/ncu':>10}")
for k in ("copy_f4", "spin"):
    a = kh[k]["khlua_official_ns"]; t = th[k]["torch_cupti_median_ns"]; n = statistics.median(ncu[k])
    print(f"{k:10} {a/1e3:18.2f} {t/1e3:15.2f} {n/1e3:10.2f} {a/t:12.4f} {a/n:10.4f}")
PY
