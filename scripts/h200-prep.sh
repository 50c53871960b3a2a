#!/usr/bin/env bash
# Build, on this machine, what scripts/h200-check.sh needs on the GPU machine
# (which has no Lua, LMDB or jansson development files and no network):
#   build-portable/   khlua with its libraries linked in (scripts/portable.sh)
#   kernels/build/    the task packages' trusted cubins (kernels/build_cubins.sh)
#   devdata/          the FlashInfer-Bench files gpu_pyref reads (the dataset lives
#                     outside the repository: ../shared/data, or $KHLUA_FIB_SRC)
# and print the list of paths to carry to the device.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log=$(bash scripts/portable.sh 2>&1) || { echo "$log" >&2; exit 1; }
# the device takes 64 MiB with the tree: the test and bench binaries' debug
# information is the bulk of it
find build-portable/tests -maxdepth 1 -type f -perm -u+x -exec strip --strip-debug {} +
echo "built build-portable/ ($(du -sh build-portable | cut -f1))"
log=$(bash kernels/build_cubins.sh 2>&1) || { echo "$log" >&2; exit 1; }
echo "built kernels/build/ ($(ls kernels/build/*/*.cubin | wc -l) cubins)"
src=${KHLUA_FIB_SRC:-$root/../shared/data/flashinfer-trace}
if [ -f "$src/definitions/rmsnorm/rmsnorm_h4096.json" ]; then
  dst=devdata/flashinfer-trace
  mkdir -p "$dst/definitions/rmsnorm" "$dst/workloads/rmsnorm"
  cp "$src/definitions/rmsnorm/rmsnorm_h4096.json" "$dst/definitions/rmsnorm/"
  cp "$src/workloads/rmsnorm/rmsnorm_h4096.jsonl" "$dst/workloads/rmsnorm/"
  echo "copied rmsnorm_h4096 from $src into devdata/"
else
  echo "no FlashInfer-Bench dataset at $src (set KHLUA_FIB_SRC): gpu_pyref will skip" >&2
fi
echo 'carry: ["build-portable", "kernels/build", "devdata"]'
