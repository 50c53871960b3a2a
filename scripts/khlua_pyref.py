#!/usr/bin/env python3
"""khlua_pyref.py: runs a FlashInfer-Bench definition's Python reference for
khlua (engine/eval/pyref.h).  khlua starts it as

    $KHLUA_PYTHON scripts/khlua_pyref.py JOB.json

where JOB.json names the definition (its `reference` source defines run), the
inputs' and outputs' names, dtypes and shapes, the workload's scalar values,
and one case per seed: a safetensors file of inputs (written by khlua with the
same bits its workers generate) and the safetensors file to write the outputs
to.  For each case it calls run(*inputs) in the definition's input order (a
shape-null input as a Python number, like FlashInfer-Bench) and writes the
returned tensors under the output names, in the definition's dtypes.

Needs torch only (numpy is used when present); safetensors is read and written
here, so the `safetensors` package is not needed.  Exit 0: every case done;
3: torch cannot be imported (the message says why); 1: the reference failed
(traceback on stderr).
"""
import json
import struct
import sys
import traceback

try:
    import torch
except Exception as e:  # ImportError, or a broken install
    sys.stderr.write("torch (import torch in %s failed: %s)\n" % (sys.executable, e))
    sys.exit(3)

# safetensors dtype names as khlua writes them (engine/task/dtype.c)
ST_DTYPES = {
    "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
for _st, _name in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"),
                   ("F4", "float4_e2m1fn_x2")):
    if hasattr(torch, _name):
        ST_DTYPES[_st] = getattr(torch, _name)
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}

DEF_DTYPES = {"float4_e2m1": "float4_e2m1fn_x2"}


def torch_dtype(name):
    attr = DEF_DTYPES.get(name, name)
    if not hasattr(torch, attr):
        raise ValueError("this torch (%s) has no dtype %s" % (torch.__version__, attr))
    return getattr(torch, attr)


def is_f4(dt):
    return ST_NAMES.get(dt) == "F4"


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dt = ST_DTYPES.get(spec["dtype"])
        if dt is None:
            raise ValueError("%s: tensor %s has dtype %s, which this torch lacks"
                             % (path, name, spec["dtype"]))
        b, e = spec["data_offsets"]
        shape = list(spec["shape"])
        if is_f4(dt) and shape:  # two values a byte: torch's x2 type holds the pair
            shape[-1] //= 2
        raw = data[base + b:base + e]
        if len(raw) == 0:
            t = torch.empty(shape, dtype=dt)
        else:
            t = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
            t = t.view(dt) if dt != torch.bool else t.to(torch.bool)
            t = t.reshape(shape)
        out[name] = t
    return out


def tensor_bytes(t):
    t = t.detach().to("cpu").contiguous()
    u8 = t.reshape(-1)
    u8 = u8.to(torch.uint8) if u8.dtype == torch.bool else u8.view(torch.uint8)
    try:
        return u8.numpy().tobytes()
    except Exception:  # no numpy
        return bytes(u8.tolist())


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        b = tensor_bytes(t)
        shape = list(t.shape)
        if is_f4(t.dtype) and shape:
            shape[-1] *= 2
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": shape,
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - (len(h) % 8)) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    import os
    os.replace(path + ".tmp", path)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: khlua_pyref.py JOB.json\n")
        return 2
    with open(sys.argv[1]) as f:
        job = json.load(f)
    definition = job["definition"]
    src = definition.get("reference")
    if not isinstance(src, str):
        raise ValueError("definition %s has no reference source" % definition.get("name"))
    ns = {"__name__": "khlua_reference_" + str(definition.get("name", "x"))}
    exec(compile(src, "<reference of %s>" % definition.get("name"), "exec"), ns)
    run = ns.get("run")
    if not callable(run):
        raise ValueError("the reference of %s defines no run()" % definition.get("name"))
    device = job.get("device", "auto")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    scalars = job.get("scalars", {})
    outputs = job["outputs"]
    for case in job["cases"]:
        torch.manual_seed(int(case["seed"]) & 0x7FFFFFFFFFFFFFFF)
        ins = read_safetensors(case["inputs"])
        args = []
        for spec in job["inputs"]:
            name = spec["name"]
            if name in scalars:
                args.append(scalars[name])
            elif spec["shape"] is None:
                args.append(ins[name].item())  # a random Python scalar
            else:
                args.append(ins[name].to(device))
        with torch.no_grad():
            res = run(*args)
        if isinstance(res, dict):
            res = [res[o["name"]] for o in outputs]
        elif not isinstance(res, (tuple, list)):
            res = [res]
        if len(res) != len(outputs):
            raise ValueError("run returned %d values for %d outputs (%s)"
                             % (len(res), len(outputs), ", ".join(o["name"] for o in outputs)))
        outs = []
        for o, t in zip(outputs, res):
            want = torch_dtype(o["dtype"])
            if not torch.is_tensor(t):
                t = torch.tensor(t)
            if t.dtype != want:
                t = t.to(want)
            shape = list(o["shape"]) if o["shape"] is not None else []
            got = list(t.shape)
            if is_f4(want) and got:
                got[-1] *= 2
            if got != shape:
                raise ValueError("output %s: run returned shape %s, the definition says %s"
                                 % (o["name"], got, shape))
            outs.append((o["name"], t))
        if device == "cuda":
            torch.cuda.synchronize()
        write_safetensors(case["outputs"], outs)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
