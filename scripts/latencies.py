#!/usr/bin/env python3
"""latencies.py A.jsonl B.jsonl: two khlua official runs' per-workload
latencies side by side (FlashInfer-Bench trace lines, as `khlua eval --out`
and tests/bench/bench_eval.sh write them): batch (or the first axis), the
candidate's and the reference's latency in each, their ratios B/A, the
geometric means, and how many workloads agree within 2%."""
import json
import math
import sys


def load(path):
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                j = json.loads(line)
                p = j["evaluation"]["performance"]
            except (ValueError, KeyError, TypeError) as e:
                sys.exit("%s:%d: not a trace line with evaluation.performance (%s)" % (path, n, e))
            axes = j["workload"].get("axes") or {}
            out[j["workload"]["uuid"]] = (next(iter(axes.values()), 0), p["latency_ms"],
                                          p.get("reference_latency_ms"))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: latencies.py A.jsonl B.jsonl")
    a, b = load(sys.argv[1]), load(sys.argv[2])
    both = sorted(set(a) & set(b), key=lambda u: a[u][0])
    if not both:
        sys.exit("latencies.py: no workload in both files")
    print("| workload | axis | A us | B us | B/A | A ref us | B ref us | B/A ref |")
    print("|---|---|---|---|---|---|---|---|")
    rc, rr, within = [], [], 0
    for u in both:
        ax, la, ra = a[u]
        _, lb, rb = b[u]
        rc.append(lb / la)
        within += abs(lb / la - 1) <= 0.02
        ref = "- | - | -"
        if ra and rb:
            rr.append(rb / ra)
            ref = "%.2f | %.2f | %.3f" % (ra * 1e3, rb * 1e3, rb / ra)
        print("| %s | %s | %.2f | %.2f | %.3f | %s |" % (u[:8], ax, la * 1e3, lb * 1e3, lb / la, ref))
    g = lambda v: math.exp(sum(map(math.log, v)) / len(v))
    print("geomean B/A: candidate %.4f%s; %d of %d workloads within 2%%" %
          (g(rc), ", reference %.4f" % g(rr) if rr else "", within, len(both)))


main()
