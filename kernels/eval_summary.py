#!/usr/bin/env python3
"""Summarise kernels/eval_all.sh output: per package and solution, workloads
PASSED (over every run of it: <solution>.jsonl, timed, and
<solution>.check.jsonl, correctness only), mean official latency over the
timed workloads, and the fraction of the speed-of-light bound
(khlua.speed_of_light.bound_ns / latency), mean and worst over them.
  python3 kernels/eval_summary.py OUT_DIR PACKAGE...
"""
import glob
import json
import os
import sys


def load(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                rows.append(json.loads(line))
    return rows


def main(out, pkgs):
    print("| package | solution | PASSED | timed | mean latency ms | mean SoL fraction "
          "| min SoL fraction |")
    print("|---|---|---|---|---|---|---|")
    for p in pkgs:
        names = sorted({os.path.basename(f).split(".")[0]
                        for f in glob.glob(os.path.join(out, p, "*.jsonl"))})
        for name in names:
            timed = load(os.path.join(out, p, name + ".jsonl"))
            checked = load(os.path.join(out, p, name + ".check.jsonl"))
            # a workload's verdict: the correctness-only run's where there is
            # one, else the timed run's; both must pass where both ran
            status = {}
            for r in checked + timed:
                u = r["workload"]["uuid"]
                st = r["evaluation"]["status"]
                status[u] = st if status.get(u, "PASSED") == "PASSED" else status[u]
            passed = sum(1 for st in status.values() if st == "PASSED")
            lat, frac = [], []
            for r in timed:
                if r["evaluation"]["status"] != "PASSED":
                    continue
                perf = r["evaluation"].get("performance") or {}
                ms = perf.get("latency_ms")
                if not ms:
                    continue
                lat.append(ms)
                sol = (r["evaluation"].get("khlua") or {}).get("speed_of_light") or {}
                if sol.get("bound_ns"):
                    frac.append(sol["bound_ns"] / (ms * 1e6))
            print("| %s | %s | %d/%d | %d | %s | %s | %s |" % (
                p, name, passed, len(status), len(lat),
                "%.4f" % (sum(lat) / len(lat)) if lat else "-",
                "%.3f" % (sum(frac) / len(frac)) if frac else "-",
                "%.3f" % min(frac) if frac else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
