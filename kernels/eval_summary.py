#!/usr/bin/env python3
"""Summarise kernels/eval_all.sh output: per package and solution, workloads
PASSED, mean official latency, and the fraction of the speed-of-light bound
(khlua.speed_of_light.bound_ns / latency), mean and worst over workloads.
  python3 kernels/eval_summary.py OUT_DIR PACKAGE...
"""
import glob
import json
import os
import sys


def main(out, pkgs):
    print("| package | solution | PASSED | mean latency ms | mean SoL fraction | min SoL fraction |")
    print("|---|---|---|---|---|---|")
    for p in pkgs:
        for f in sorted(glob.glob(os.path.join(out, p, "*.jsonl"))):
            rows = [json.loads(l) for l in open(f) if l.strip()]
            ok = [r for r in rows if r["evaluation"]["status"] == "PASSED"]
            lat, frac = [], []
            for r in ok:
                perf = r["evaluation"].get("performance") or {}
                ms = perf.get("latency_ms")
                if not ms:
                    continue
                lat.append(ms)
                sol = (r["evaluation"].get("khlua") or {}).get("speed_of_light") or {}
                if sol.get("bound_ns"):
                    frac.append(sol["bound_ns"] / (ms * 1e6))
            name = os.path.basename(f)[:-6]
            print("| %s | %s | %d/%d | %s | %s | %s |" % (
                p, name, len(ok), len(rows),
                "%.4f" % (sum(lat) / len(lat)) if lat else "-",
                "%.3f" % (sum(frac) / len(frac)) if frac else "-",
                "%.3f" % min(frac) if frac else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
