#!/usr/bin/env python3
"""Pack task-package sources into Solution JSON files.

Each package keeps its hand-written device / C sources and a solution skeleton
under src/ (or trusted/, for trusted nvcc shared objects such as a cuBLAS
anchor, which the NVRTC checks on src/ must not see): <x>.solution.json is a
complete FlashInfer-Bench Solution except
that every entry of "sources" has only a "path"; the file of that name next to
it supplies the "content".  This writes <package>/solutions/<name>.json.

  python3 kernels/pack.py            pack every package under kernels/
  python3 kernels/pack.py --check    exit 1 if any packed file is stale

No third-party modules: it runs wherever python3 does.
"""
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def packed(skeleton_path):
    with open(skeleton_path) as f:
        sol = json.load(f)
    src_dir = os.path.dirname(skeleton_path)
    for s in sol["sources"]:
        with open(os.path.join(src_dir, s["path"])) as f:
            s["content"] = f.read()
    return sol["name"], json.dumps(sol, indent=2, ensure_ascii=False) + "\n"


def main(argv):
    check = "--check" in argv
    stale = 0
    for skel in sorted(glob.glob(os.path.join(HERE, "*", "src", "*.solution.json")) +
                       glob.glob(os.path.join(HERE, "*", "trusted", "*.solution.json"))):
        pkg = os.path.dirname(os.path.dirname(skel))
        name, text = packed(skel)
        out = os.path.join(pkg, "solutions", name + ".json")
        old = None
        if os.path.exists(out):
            with open(out) as f:
                old = f.read()
        if old == text:
            continue
        if check:
            print("stale: %s (run python3 kernels/pack.py)" % os.path.relpath(out))
            stale += 1
            continue
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(text)
        print("wrote %s" % os.path.relpath(out))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
