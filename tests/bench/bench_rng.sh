#!/usr/bin/env bash
# bench_rng.sh [BUILD]: khlua's exact input generator against torch.randn on
# the same GPU in the same run: ms per fill of 14,509 x 4,096 elements
# (rmsnorm_h4096's largest input), bfloat16 and float32, and the ratio
# khlua / torch (torch's Philox normal is the anchor: it is what
# FlashInfer-Bench draws inputs with).  BUILD: a build folder with
# tests/test_gpu_rng (default build-portable).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
b=${1:-$root/build-portable}
export LD_LIBRARY_PATH="$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=$("$b/tests/test_gpu_rng" 2>&1) || { echo "$out" | tail -20; exit 1; }
echo "$out" | grep "^# rate:"
python3 - "$out" <<'PY'
import re, sys, torch
n = 14509 * 4096
def rate(dt):
    x = torch.empty(n, dtype=dt, device="cuda")
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(10):
        a.record(); x.normal_(); b.record(); b.synchronize()
        ms.append(a.elapsed_time(b))
    return sorted(ms[1:])[4]
print("| dtype | khlua ms (grid 528) | best khlua ms (grid) | torch.randn ms | khlua / torch |")
print("|---|---|---|---|---|")
for name, dt in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
    rows = re.findall(r"# rate: %s \d+ elements, grid (\d+) x 256: ([\d.]+) ms" % name, sys.argv[1])
    if not rows:
        sys.exit("bench_rng: no rate for %s in test_gpu_rng's output" % name)
    first = float(rows[0][1])
    g, best = min(((int(g), float(m)) for g, m in rows), key=lambda r: r[1])
    t = rate(dt)
    print("| %s | %.3f | %.3f (%d) | %.3f | %.2f |" % (name, first, best, g, t, first / t))
PY
