#!/usr/bin/env python3
"""timeline.py: read a KHLUA_TIMELINE file (lines "monotonic-seconds pid event",
written by the coordinator and its workers, engine/core/kh.c kh_timeline) and
print it relative to its first line, each process in a column of its own, with
the gaps over --gap milliseconds (default 20) marked: where a fresh
evaluation's wall time goes (tests/bench/bench_eval.sh writes one per run).

usage: scripts/timeline.py FILE [--gap MS] [--summary] [--active S]
  --summary  only the per-process spans and the largest gaps
  --active S the run's GPU active seconds (khlua.gpu_active_seconds summed):
             printed over the seconds spent inside evaluations ("eval begin"
             to "eval end" of a process), i.e. while a candidate was queued
             to the GPU (issue 21's busy fraction "while candidates are queued")
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


def eval_windows(rows):
    """(count, seconds) of the spans from a process's "eval begin" to its
    next "eval end" (an unmatched begin counts to the last event)."""
    open_at, n, total = {}, 0, 0.0
    for t, pid, ev in rows:
        if ev.startswith("eval begin"):
            open_at.setdefault(pid, t)
        elif ev == "eval end" and pid in open_at:
            total += t - open_at.pop(pid)
            n += 1
    for t in open_at.values():
        total += rows[-1][0] - t
        n += 1
    return n, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--gap", type=float, default=20.0, help="mark gaps over this many ms")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--active", type=float, default=None)
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
    n, inside = eval_windows(rows)
    span = rows[-1][0] - t0
    print(f"# evaluations: {n}, {inside:.3f} s inside them "
          f"({100 * inside / span if span > 0 else 0:.1f}% of the run)")
    if a.active is not None and inside > 0:
        print(f"# GPU active over the evaluations: {a.active:.3f} s / {inside:.3f} s = "
              f"{100 * a.active / inside:.1f}%")
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
