#!/usr/bin/env python3
"""timeline.py: read a KHLUA_TIMELINE file (lines "monotonic-seconds pid event",
written by the coordinator and its workers, engine/core/kh.c kh_timeline) and
print it relative to its first line, each process in a column of its own, with
the gaps over --gap milliseconds (default 20) marked: where a fresh
evaluation's wall time goes (tests/bench/bench_eval.sh writes one per run).

usage: scripts/timeline.py FILE [--gap MS] [--summary]
  --summary  only the per-process spans and the largest gaps
"""
import argparse
import sys


def load(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) < 3:
                sys.exit(f"{path}:{n}: expected 'seconds pid event', got {line.strip()!r}")
            try:
                rows.append((float(parts[0]), int(parts[1]), parts[2]))
            except ValueError:
                sys.exit(f"{path}:{n}: bad time or pid in {line.strip()!r}")
    if not rows:
        sys.exit(f"{path}: empty timeline")
    rows.sort(key=lambda r: r[0])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--gap", type=float, default=20.0, help="mark gaps over this many ms")
    ap.add_argument("--summary", action="store_true")
    a = ap.parse_args()
    rows = load(a.file)
    t0 = rows[0][0]
    pids = []
    for _, pid, _ in rows:
        if pid not in pids:
            pids.append(pid)
    if not a.summary:
        prev = t0
        for t, pid, ev in rows:
            gap = (t - prev) * 1e3
            mark = f"  <- {gap:.0f} ms" if gap > a.gap else ""
            col = pids.index(pid)
            print(f"{(t - t0) * 1e3:9.1f} ms  {'    ' * col}[{pid}] {ev}{mark}")
            prev = t
    print(f"# {len(rows)} events, {len(pids)} processes, {(rows[-1][0] - t0):.3f} s in all")
    for pid in pids:
        ts = [t for t, p, _ in rows if p == pid]
        first = next(ev for t, p, ev in rows if p == pid)
        print(f"#   [{pid}] {(ts[0] - t0) * 1e3:8.1f} .. {(ts[-1] - t0) * 1e3:8.1f} ms  "
              f"({len(ts)} events; first: {first})")
    gaps = sorted(((rows[i][0] - rows[i - 1][0], i) for i in range(1, len(rows))), reverse=True)
    print("# largest gaps:")
    for g, i in gaps[:5]:
        print(f"#   {g * 1e3:8.1f} ms  after '{rows[i - 1][2]}' [{rows[i - 1][1]}], "
              f"before '{rows[i][2]}' [{rows[i][1]}]")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
