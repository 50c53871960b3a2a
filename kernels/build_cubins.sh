#!/usr/bin/env bash
# Build the cubin of every CUDA solution of every package with the trusted
# nvcc (-cubin -arch=sm_90a, as verify.py does), into
# kernels/build/<package>/<solution>.cubin, so that the GPU machine needs no
# CUDA toolkit: carry the one ignored path kernels/build along (one folder for
# all packages: the device tool carries at most 8 paths).  Packs src/ into solutions/
# first.  Usage: bash kernels/build_cubins.sh [ARCH]   (default sm_90a)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
arch="${1:-${KHLUA_ARCH:-sm_90a}}"
nvcc="${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}"
[ -x "$nvcc" ] || { echo "build_cubins: no nvcc at $nvcc (set NVCC or CUDA_HOME)" >&2; exit 1; }
python3 "$here/pack.py"
fail=0
for sol in "$here"/*/solutions/*.json; do
    pkg="$(dirname "$(dirname "$sol")")"
    tmp="$(mktemp -d)"
    # unpack the sources; prints the entry file, or nothing for a non-CUDA solution
    entry="$(python3 - "$sol" "$tmp" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
if s["spec"]["language"] != "cuda" or s["spec"].get("khlua", {}).get("backend") == "cuda_so":
    sys.exit(0)  # host C, or a trusted shared object (khlua eval builds it with nvcc -shared)
for src in s["sources"]:
    p = os.path.join(sys.argv[2], src["path"])
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "w").write(src["content"])
print(s["name"] + " " + os.path.join(sys.argv[2], s["spec"]["entry_point"].split("::")[0]))
PY
)"
    if [ -n "$entry" ]; then
        name="${entry%% *}"
        file="${entry#* }"
        out="$here/build/$(basename "$pkg")"
        mkdir -p "$out"
        if "$nvcc" -cubin -std=c++17 -O3 -arch="$arch" -o "$out/$name.cubin" "$file"; then
            echo "built kernels/build/$(basename "$pkg")/$name.cubin"
        else
            echo "FAILED $name" >&2
            fail=1
        fi
    fi
    rm -rf "$tmp"
done
exit $fail
