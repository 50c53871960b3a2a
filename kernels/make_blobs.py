#!/usr/bin/env python3
"""Write the large stand-in blobs that git does not carry (gitignored), at
setup, on the machine that evaluates:

  python3 kernels/make_blobs.py [--missing] [--packages a,b]

  moe_fp8_block_scale_...: per workload, the `routing_logits` (float32
    randn [seq_len, 256]) and `routing_bias` (bf16, 0.1 * randn [256]) the
    contest read from safetensors; 38 MiB in all.  Pure Python is enough.
  gdn_prefill_qk4_v8_d128_k_last: per workload, `q` and `k` ([total_seq_len,
    4, 128] bf16), randn L2-normalised over the 128 (per token and head), as
    Qwen3-Next feeds the kernel: with raw randn keys the recurrence grows
    about 60x per token and even the Python reference overflows (PLAN.md).
    490 MB in all: uses torch (CPU) when it is importable; the pure-Python
    fallback takes many minutes.

Paths are the ones the workloads name.  Seeds are fixed per workload, so the
content is the same on every machine with the same generator (torch and the
pure-Python fallback draw different numbers, both valid stand-ins).
--missing skips blobs that exist already.
"""
import argparse
import json
import math
import os
import random
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
GDN = "gdn_prefill_qk4_v8_d128_k_last"


def write_safetensors(path, tensors):
    """tensors: {name: (dtype "F32"|"BF16", shape, raw little-endian bytes)}."""
    header, blobs, off = {}, [], 0
    for name, (dt, shape, data) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"generator": "kernels/make_blobs.py"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)  # never a half-written blob under the real name


def bf16_bytes(values):
    """float values -> bf16 bytes, round to nearest even (as torch rounds)."""
    out = bytearray()
    for v in values:
        u = struct.unpack("<I", struct.pack("<f", v))[0]
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        out += struct.pack("<H", u & 0xFFFF)
    return bytes(out)


def workloads(pkg):
    with open(os.path.join(HERE, pkg, "workloads.jsonl")) as f:
        return [json.loads(l)["workload"] for l in f if l.strip()]


def blob_path(pkg, wl, name):
    return os.path.join(HERE, pkg, wl["inputs"][name]["path"])


def seed_of(wl):
    return zlib.crc32(wl["uuid"].encode())


def moe(missing):
    n = 0
    for wl in workloads(MOE):
        path = blob_path(MOE, wl, "routing_logits")
        if missing and os.path.exists(path):
            continue
        T = wl["axes"]["seq_len"]
        rng = random.Random(seed_of(wl))
        logits = struct.pack("<%df" % (T * 256), *(rng.gauss(0.0, 1.0) for _ in range(T * 256)))
        bias = bf16_bytes(0.1 * rng.gauss(0.0, 1.0) for _ in range(256))
        write_safetensors(path, {"routing_logits": ("F32", [T, 256], logits),
                                 "routing_bias": ("BF16", [256], bias)})
        n += 1
    print("%s: %d blobs written" % (MOE, n))


def gdn(missing):
    try:
        import torch
    except ImportError:
        torch = None
        print("%s: no torch here; the pure-Python generator is slow (minutes)" % GDN, file=sys.stderr)
    n = 0
    for wl in workloads(GDN):
        path = blob_path(GDN, wl, "q")
        if missing and os.path.exists(path):
            continue
        L = wl["axes"]["total_seq_len"]
        shape = [L, 4, 128]
        tensors = {}
        if torch is not None:
            g = torch.Generator().manual_seed(seed_of(wl))
            for name in ("q", "k"):
                x = torch.randn(shape, generator=g, dtype=torch.float32)
                x = torch.nn.functional.normalize(x, dim=-1).to(torch.bfloat16)
                tensors[name] = ("BF16", shape, x.contiguous().view(torch.int16).numpy().tobytes())
        else:
            rng = random.Random(seed_of(wl))
            for name in ("q", "k"):
                vals = []
                for _ in range(L * 4):
                    row = [rng.gauss(0.0, 1.0) for _ in range(128)]
                    nrm = max(math.sqrt(sum(v * v for v in row)), 1e-12)
                    vals.extend(v / nrm for v in row)
                tensors[name] = ("BF16", shape, bf16_bytes(vals))
        write_safetensors(path, tensors)
        n += 1
    print("%s: %d blobs written" % (GDN, n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--missing", action="store_true", help="only blobs that do not exist yet")
    ap.add_argument("--packages", default="", help="comma-separated package names (default: both)")
    args = ap.parse_args()
    want = set(args.packages.split(",")) if args.packages else {MOE, GDN}
    unknown = want - {MOE, GDN}
    if unknown:
        print("make_blobs: no generated blobs for %s" % ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    if MOE in want:
        moe(args.missing)
    if GDN in want:
        gdn(args.missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
