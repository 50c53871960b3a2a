#!/usr/bin/env python3
"""Check each package's trusted reference (and baseline) against the
definition's own Python reference, on the GPU machine.

  python3 kernels/verify.py [--packages a,b] [--workloads N] [--seed S]
                            [--solutions ref|all] [--out DIR] [--no-timing]

Needs python3, torch and cupy (CUDA) on the machine; no network.  For every
package under kernels/ (a folder with definition.json):

  1. the cubin of each CUDA solution: kernels/build/<pkg>/<solution>.cubin
     when present (bash kernels/build_cubins.sh makes them), else nvcc
     -cubin -arch=sm_90a on the packed sources (needs nvcc on PATH or
     $CUDA_HOME/bin); host solutions (language cpp) are built with cc into a
     shared object and called through ctypes on CPU tensors;
  2. a few workloads (smallest, largest and evenly spaced ones between);
  3. inputs drawn with torch following FlashInfer-Bench's distributions
     (randn for floats, randn clamped to [-2, 2] for fp8, randint(-1024, 1024)
     for int32/64, ...) from a fixed seed, or from the package's inputs.py
     (make_inputs) where random inputs would be meaningless (indices, page
     tables) or the contest used safetensors;
  4. the definition's `reference` exec'd as written and called with those
     inputs (on the GPU; on the CPU for host packages);
  5. the solution's manifest resolved for the workload (expressions as
     docs/candidate-format.md defines them) and launched with cupy.RawModule
     on the same tensors; outputs are pre-filled with NaN bytes (0xFF) so an
     element never written cannot pass;
  6. FlashInfer-Bench's rule per element: fail iff |x-y| > atol AND
     |x-y|/(|y|+1e-8) > rtol (tolerance from the definition's khlua block),
     matched ratio against required_matched_ratio, inf/nan in the solution
     output fails;
  7. optionally a rough latency (CUDA events, L2 flushed before each call,
     median of 30) and its fraction of the speed-of-light bound; official
     latencies come from `khlua eval`, not from here.

It prints one table row per (package, solution, workload) and writes
DIR/<pkg>/VERIFY.md (the record to copy over kernels/<pkg>/VERIFY.md) and
DIR/<pkg>/verify.json.  Each package runs in its own process (a kernel that
faults leaves the CUDA context unusable), under --timeout seconds, so a
failing package never stops the others; the exit status is 1 when any check
failed or errored.  A package without a reference yet is a SKIP row.
"""
import argparse
import ast
import ctypes
import datetime
import glob
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
H200_HBM_BYTES_S = 4.8e12       # H200 HBM3e peak, bytes/s (gpu-facts.md)
H200_DENSE_FLOPS_BF16 = 989e12  # H200 dense bf16/fp16 tensor-core peak, FLOP/s


# ---- expressions (docs/candidate-format.md) ------------------------------------

class ExprError(Exception):
    pass


def _floordiv(a, b):
    if b == 0:
        raise ExprError("division by zero")
    return a // b


def eval_expr(text, axes, shapes):
    """Evaluate a manifest / speed-of-light expression: Python syntax, integer
    arithmetic, / is floor division, ceil_div/min/max, t.shape[i]."""
    if isinstance(text, int):
        return text
    text = str(text).replace("&&", " and ").replace("||", " or ")
    tree = ast.parse(text, mode="eval")

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in axes:
                raise ExprError("unknown name %s" % n.id)
            return axes[n.id]
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            if isinstance(n.op, ast.USub):
                return -v
            if isinstance(n.op, ast.UAdd):
                return v
            if isinstance(n.op, ast.Not):
                return int(not v)
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            op = n.op
            if isinstance(op, ast.Add):
                return a + b
            if isinstance(op, ast.Sub):
                return a - b
            if isinstance(op, ast.Mult):
                return a * b
            if isinstance(op, (ast.Div, ast.FloorDiv)):
                return _floordiv(a, b)
            if isinstance(op, ast.Mod):
                if b == 0:
                    raise ExprError("division by zero")
                return a % b
        if isinstance(n, ast.BoolOp):
            if isinstance(n.op, ast.And):
                return int(all(ev(v) for v in n.values))
            return int(any(ev(v) for v in n.values))
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            a, b = ev(n.left), ev(n.comparators[0])
            op = n.ops[0]
            return int({ast.Eq: a == b, ast.NotEq: a != b, ast.Lt: a < b, ast.LtE: a <= b,
                        ast.Gt: a > b, ast.GtE: a >= b}[type(op)])
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            args = [ev(a) for a in n.args]
            if n.func.id == "ceil_div" and len(args) == 2:
                return -_floordiv(-args[0], args[1])
            if n.func.id == "min" and len(args) >= 2:
                return min(args)
            if n.func.id == "max" and len(args) >= 2:
                return max(args)
        if (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute)
                and n.value.attr == "shape" and isinstance(n.value.value, ast.Name)):
            t = n.value.value.id
            i = ev(n.slice)
            return shapes[t][i]
        raise ExprError("unsupported expression: %s" % ast.dump(n))

    return ev(tree)


# ---- packages ------------------------------------------------------------------

def load_package(pkg_dir):
    with open(os.path.join(pkg_dir, "definition.json")) as f:
        d = json.load(f)
    wls = []
    files = sorted(glob.glob(os.path.join(pkg_dir, "*.jsonl")) +
                   glob.glob(os.path.join(pkg_dir, "workloads", "**", "*.jsonl"), recursive=True))
    for p in files:
        with open(p) as f:
            for line in f:
                if line.strip():
                    wls.append(json.loads(line)["workload"])
    sols = {}
    for p in sorted(glob.glob(os.path.join(pkg_dir, "solutions", "**", "*.json"), recursive=True)):
        with open(p) as f:
            s = json.load(f)
        sols[s["name"]] = s
    return d, wls, sols


def axes_of(defn, wl):
    ax = {}
    for name, a in defn["axes"].items():
        ax[name] = a["value"] if a["type"] == "const" else wl["axes"][name]
    return ax


def shapes_of(defn, ax):
    sh = {}
    for group in ("inputs", "outputs"):
        for name, t in defn[group].items():
            sh[name] = None if t["shape"] is None else [ax[a] for a in t["shape"]]
    return sh


def pick_workloads(defn, wls, n):
    """Smallest, largest and evenly spaced ones between, by total input size."""
    if n <= 0 or len(wls) <= n:
        return list(wls)

    def size(w):
        ax = axes_of(defn, w)
        tot = 0
        for t in defn["inputs"].values():
            if t["shape"]:
                tot += math.prod(ax[a] for a in t["shape"])
        return tot

    order = sorted(wls, key=size)
    idx = sorted({round(i * (len(order) - 1) / (n - 1)) for i in range(n)}) if n > 1 else [0]
    return [order[i] for i in idx]


# ---- inputs --------------------------------------------------------------------

def torch_dtype(torch, name):
    return {
        "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
        "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
        "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
        "int8": torch.int8, "bool": torch.bool,
    }[name]


def fib_random(torch, shape, dtype, device, gen):
    """FlashInfer-Bench's gen_inputs distributions (fib-harness.md, Inputs)."""
    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        return torch.randn(shape, dtype=torch.float32, device=device, generator=gen).to(dtype)
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return torch.randn(shape, dtype=torch.float32, device=device, generator=gen).clamp(-2, 2).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, device=device, generator=gen).to(torch.bool)
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, device=device, generator=gen).to(dtype)
    return torch.randint(-1024, 1024, shape, device=device, generator=gen).to(dtype)


def read_safetensors(torch, path, key):
    """One tensor of a safetensors file (the format is 8 bytes of header
    length, a JSON header, then the raw little-endian data)."""
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    if key not in header:
        raise RuntimeError("%s: no tensor %s" % (path, key))
    t = header[key]
    dt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
          "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}[t["dtype"]]
    a, b = t["data_offsets"]
    buf = bytearray(data[a:b])
    if not buf:
        return torch.empty(t["shape"], dtype=dt)
    return torch.frombuffer(buf, dtype=dt).reshape(t["shape"]).clone()


def make_inputs(torch, pkg_dir, defn, wl, ax, device, seed):
    """Inputs in definition order: tensors, or Python scalars for shape null."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    hook = os.path.join(pkg_dir, "inputs.py")
    if os.path.exists(hook):
        ns = {}
        with open(hook) as f:
            exec(compile(f.read(), hook, "exec"), ns)
        if "make_inputs" in ns:
            return ns["make_inputs"](torch=torch, definition=defn, workload=wl, axes=ax,
                                     device=device, gen=gen, fib_random=fib_random,
                                     read_safetensors=read_safetensors, pkg_dir=pkg_dir)
    out = {}
    for name, t in defn["inputs"].items():
        spec = wl.get("inputs", {}).get(name, {"type": "random"})
        if t["shape"] is None:
            if spec.get("type") == "scalar":
                out[name] = spec["value"]
            else:
                v = fib_random(torch, (), torch_dtype(torch, t["dtype"]), device, gen)
                out[name] = v.item()
            continue
        shape = [ax[a] for a in t["shape"]]
        if spec.get("type") == "safetensors":
            out[name] = read_safetensors(torch, os.path.join(pkg_dir, spec["path"]),
                                         spec["tensor_key"]).to(device)
            if list(out[name].shape) != shape:
                raise RuntimeError("input %s: blob shape %s, definition %s" % (
                    name, list(out[name].shape), shape))
            continue
        out[name] = fib_random(torch, shape, torch_dtype(torch, t["dtype"]), device, gen)
    return out


# ---- the Python reference --------------------------------------------------------

def run_python_reference(defn, inputs):
    ns = {"__name__": "fib_reference"}
    exec(compile(defn["reference"], defn["name"] + ".reference", "exec"), ns)
    args = [inputs[n] for n in defn["inputs"]]
    res = ns["run"](*args)
    names = list(defn["outputs"])
    if not isinstance(res, (tuple, list)):
        res = (res,)
    if len(res) != len(names):
        raise RuntimeError("reference returned %d outputs, definition has %d" % (len(res), len(names)))
    return dict(zip(names, res))


# ---- building ------------------------------------------------------------------

def nvcc_path():
    for c in (os.environ.get("NVCC"), shutil.which("nvcc"),
              os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if c and os.path.exists(c):
            return c
    return None


def write_sources(sol, d):
    for s in sol["sources"]:
        p = os.path.join(d, s["path"])
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(s["content"])
    return os.path.join(d, sol["spec"]["entry_point"].split("::")[0])


def cubin_for(pkg_dir, sol, tmp, arch):
    pre = os.path.join(HERE, "build", os.path.basename(pkg_dir), sol["name"] + ".cubin")
    if os.path.exists(pre):
        return pre, "prebuilt " + os.path.relpath(pre)
    nvcc = nvcc_path()
    if not nvcc:
        raise RuntimeError("no cubin at %s and no nvcc to build one" % pre)
    d = os.path.join(tmp, sol["name"])
    os.makedirs(d, exist_ok=True)
    entry = write_sources(sol, d)
    out = os.path.join(d, sol["name"] + ".cubin")
    cmd = [nvcc, "-cubin", "-std=c++17", "-O3", "-arch=" + arch, "-o", out, entry]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("nvcc failed:\n" + r.stdout + r.stderr)
    return out, " ".join(cmd[:-3] + [os.path.basename(entry)])


def so_for(sol, tmp):
    d = os.path.join(tmp, sol["name"])
    os.makedirs(d, exist_ok=True)
    entry = write_sources(sol, d)
    out = os.path.join(d, sol["name"] + ".so")
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-shared", "-fPIC", "-O2", "-std=c11", "-o", out, entry, "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("cc failed:\n" + r.stdout + r.stderr)
    return out


# ---- launching -----------------------------------------------------------------

def arg_value(np, torch, a, defn, ax, sh, inputs, outputs, ws, host):
    """One manifest argument as what cupy (numpy scalar) or ctypes wants."""
    if "input" in a or "output" in a or "workspace" in a:
        if "input" in a:
            t = inputs[a["input"]]
        elif "output" in a:
            t = outputs[a["output"]]
        else:
            t = ws[a["workspace"]]
        return ctypes.c_void_p(t.data_ptr()) if host else np.uint64(t.data_ptr())
    if "scalar" in a:
        dt = defn["inputs"][a["scalar"]]["dtype"]
        v = inputs[a["scalar"]]
        conv = {"float32": (np.float32, ctypes.c_float), "float64": (np.float64, ctypes.c_double),
                "int32": (np.int32, ctypes.c_int32), "int64": (np.int64, ctypes.c_int64),
                "bool": (np.int8, ctypes.c_int8)}
        if dt not in conv:
            raise RuntimeError("scalar %s of dtype %s not supported here" % (a["scalar"], dt))
        return conv[dt][1](v) if host else conv[dt][0](v)
    typ = a.get("type", "int32")
    v = ax[a["axis"]] if "axis" in a else eval_expr(a["value"], ax, sh)
    conv = {"int32": (np.int32, ctypes.c_int32), "int64": (np.int64, ctypes.c_int64),
            "uint32": (np.uint32, ctypes.c_uint32), "uint64": (np.uint64, ctypes.c_uint64)}
    return conv[typ][1](v) if host else conv[typ][0](v)


def dims(v, ax, sh):
    if not isinstance(v, list):
        v = [v]
    v = [eval_expr(x, ax, sh) for x in v] + [1] * (3 - len(v))
    return tuple(v)


def as_bytes(torch, t):
    """The raw bytes of a tensor (torch.equal lacks some dtypes, fp8 among them)."""
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)


def alloc_outputs(torch, defn, sh, device):
    outs = {}
    for name, t in defn["outputs"].items():
        o = torch.empty(sh[name], dtype=torch_dtype(torch, t["dtype"]), device=device)
        if o.numel():
            o.view(torch.uint8).fill_(0xFF)  # NaN for floats, -1 for integers: never a right answer
        outs[name] = o
    return outs


def alloc_workspace(torch, man, ax, sh, device):
    ws = {}
    for name, w in man.get("workspace", {}).items():
        n = max(1, eval_expr(w["bytes"], ax, sh))
        ws[name] = torch.zeros(n, dtype=torch.uint8, device=device)
    return ws


class CudaSolution:
    def __init__(self, cp, cubin, sol):
        self.cp = cp
        self.sol = sol
        self.man = sol["spec"]["khlua"]
        self.mod = cp.RawModule(path=cubin)
        self.fns = {l["kernel"]: self.mod.get_function(l["kernel"]) for l in self.man["launches"]}

    def prepare(self, np, torch, defn, ax, sh, inputs, outputs, ws):
        plan = []
        for l in self.man["launches"]:
            args = tuple(arg_value(np, torch, a, defn, ax, sh, inputs, outputs, ws, False)
                         for a in l["args"])
            plan.append((self.fns[l["kernel"]], dims(l["grid"], ax, sh), dims(l["block"], ax, sh),
                         eval_expr(l.get("shared_bytes", 0), ax, sh), args))
        return plan

    def call(self, plan, ws, man_ws):
        for name, w in man_ws.items():
            if w.get("zero"):
                ws[name].zero_()
        for fn, grid, block, smem, args in plan:
            fn(grid, block, args, shared_mem=smem)


def run_host_solution(np, torch, so, sol, defn, ax, sh, inputs, outputs):
    man = sol["spec"]["khlua"]
    fname = man.get("function") or sol["spec"]["entry_point"].split("::")[1]
    lib = ctypes.CDLL(so)
    fn = getattr(lib, fname)
    fn.restype = None
    ws = alloc_workspace(torch, man, ax, sh, "cpu")
    args = [arg_value(np, torch, a, defn, ax, sh, inputs, outputs, ws, True) for a in man["args"]]
    fn(*args)


# ---- comparison ----------------------------------------------------------------

def compare(torch, defn, got, want):
    kh = defn.get("khlua", {}).get("tolerance", {})
    atol = kh.get("atol", 0.01)
    rtol = kh.get("rtol", 0.01)
    ratio_req = kh.get("required_matched_ratio", 1.0)
    worst = {"max_abs": 0.0, "max_rel": 0.0, "matched": 1.0, "ok": True, "why": ""}
    for name in defn["outputs"]:
        x, y = got[name], want[name]
        if tuple(x.shape) != tuple(y.shape):
            return dict(worst, ok=False, why="shape %s vs %s" % (tuple(x.shape), tuple(y.shape)))
        if x.dtype != y.dtype:
            return dict(worst, ok=False, why="dtype %s vs %s" % (x.dtype, y.dtype))
        xf, yf = x.float(), y.float()
        if not torch.isfinite(xf).all():
            bad = (~torch.isfinite(xf)).sum().item()
            worst.update(ok=False, why="%s: %d non-finite elements" % (name, bad),
                         max_abs=float("inf"), max_rel=float("inf"), matched=0.0)
            continue
        if xf.numel() == 0:
            continue
        ad = (xf - yf).abs()
        rd = ad / (yf.abs() + 1e-8)
        fails = ((ad > atol) & (rd > rtol)).sum().item()
        matched = 1.0 - fails / xf.numel()
        if (atol, rtol) != (0.01, 0.01):
            # a loose package tolerance (the contest's MoE: atol 1, rtol 0.3)
            # says little about a reference: report the default rule's ratio too
            strict = 1.0 - ((ad > 0.01) & (rd > 0.01)).sum().item() / xf.numel()
            worst["strict_matched"] = min(worst.get("strict_matched", 1.0), strict)
        worst["max_abs"] = max(worst["max_abs"], ad.max().item())
        worst["max_rel"] = max(worst["max_rel"], rd.max().item())
        worst["matched"] = min(worst["matched"], matched)
        if matched < ratio_req:
            worst["ok"] = False
            worst["why"] = "%s: matched %.6f < %.6f" % (name, matched, ratio_req)
    return worst


def compare_topk(torch, defn, inputs, got, want):
    """FlashInfer-Bench's dsa_topk_indexer rule: the solution's indices must be
    reachable (a token of one of the row's first seq_len positions) and
    distinct; then the scores at the solution's and at the reference's
    indices, each sorted descending, are compared with the tolerance (-1
    padding on both sides matches), so the order of the indices is free."""
    ns = {"__name__": "fib_reference"}
    exec(compile(defn["reference"], defn["name"] + ".reference", "exec"), ns)
    K_all = ns["dequant_fp8_kv_cache"](inputs["k_index_cache_fp8"])
    q = inputs["q_index_fp8"].to(torch.float32)
    x, y = got["topk_indices"], want["topk_indices"]
    ps = K_all.shape[1]
    sol_scores, ref_scores = [], []
    for b in range(x.shape[0]):
        n = int(inputs["seq_lens"][b].item())
        npg = (n + ps - 1) // ps
        pages = inputs["block_table"][b, :npg].long()
        tokens = (pages[:, None] * ps + torch.arange(ps, device=pages.device)[None, :]).reshape(-1)[:n]
        K = K_all[pages].reshape(-1, K_all.shape[-1])[:n]
        sc = (torch.relu(q[b] @ K.T) * inputs["weights"][b][:, None]).sum(0)
        lut = {int(t): i for i, t in enumerate(tokens.tolist())}

        def scores_of(idx):
            vals = []
            for t in idx.tolist():
                if t == -1:
                    vals.append(float("-inf"))
                elif t not in lut:
                    return None
                else:
                    vals.append(sc[lut[t]].item())
            return sorted(vals, reverse=True)

        xs, ys = scores_of(x[b]), scores_of(y[b])
        valid = [t for t in x[b].tolist() if t != -1]
        if xs is None or len(set(valid)) != len(valid):
            return {"max_abs": float("inf"), "max_rel": float("inf"), "matched": 0.0, "ok": False,
                    "why": "row %d: unreachable or duplicate indices" % b}
        sol_scores.append(xs)
        ref_scores.append(ys)
    fx = torch.tensor(sol_scores, dtype=torch.float32)
    fy = torch.tensor(ref_scores, dtype=torch.float32)
    both_pad = torch.isinf(fx) & torch.isinf(fy) & (fx == fy)
    fx = torch.where(both_pad, torch.zeros_like(fx), fx)
    fy = torch.where(both_pad, torch.zeros_like(fy), fy)
    if not torch.isfinite(fx).all() or not torch.isfinite(fy).all():
        return {"max_abs": float("inf"), "max_rel": float("inf"), "matched": 0.0, "ok": False,
                "why": "padding (-1) where the reference has an index, or the reverse"}
    return compare(torch, {"outputs": {"s": None}, "khlua": defn.get("khlua", {})},
                   {"s": fx}, {"s": fy})


# ---- timing (rough, not the official protocol) --------------------------------------

def time_calls(torch, fn, iters=30):
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // (1 << 20) * (1 << 20),
                        dtype=torch.int8, device="cuda")
    for _ in range(5):
        flush.zero_()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def sol_bound_ms(defn, ax, sh):
    s = defn.get("khlua", {}).get("speed_of_light", {})
    if "bytes" in s:
        nbytes = eval_expr(s["bytes"], ax, sh)
    else:
        nbytes = 0
        for group in ("inputs", "outputs"):
            for name, t in defn[group].items():
                if t["shape"] is not None:
                    bits = {"float32": 32, "int32": 32, "int64": 64, "float16": 16, "bfloat16": 16,
                            "int16": 16}.get(t["dtype"], 8)
                    nbytes += math.prod(sh[name]) * bits // 8
    flops = eval_expr(s["flops"], ax, sh) if "flops" in s else 0
    return max(nbytes / H200_HBM_BYTES_S, flops / H200_DENSE_FLOPS_BF16) * 1e3, nbytes, flops


# ---- one package -----------------------------------------------------------------

def verify_package(mods, pkg_dir, args, tmp):
    torch, np, cp = mods
    defn, wls, sols = load_package(pkg_dir)
    kh = defn.get("khlua", {})
    names = [n for n in (kh.get("reference"), kh.get("baseline")) if n]
    if args.solutions == "all":
        names += [n for n in sols if n not in names]
    elif args.solutions == "ref":
        names = names[:1]
    rows = []
    if not names:
        rows.append({"solution": "-", "workload": "-", "status": "SKIP",
                     "why": "no reference or baseline in the package yet (PLAN.md)"})
        print(fmt_row(defn["name"], rows[0]), flush=True)
        return defn, rows
    want_cache = {}  # (workload uuid, device) -> the Python reference's outputs (same seed, same inputs)
    chosen = pick_workloads(defn, wls, args.workloads)
    for sname in names:
        sol = sols.get(sname)
        if sol is None:
            rows.append({"solution": sname, "workload": "-", "status": "ERROR",
                         "why": "solution not in the package"})
            continue
        backend = sol["spec"]["khlua"].get("backend",
                                           "host" if sol["spec"]["language"] == "cpp" else "cuda")
        if backend == "cuda_so":
            rows.append({"solution": sname, "workload": "-", "status": "SKIP",
                         "why": "a trusted shared object (cuda_so): khlua eval runs it; the "
                                "vendor anchor here is torch's own call"})
            print(fmt_row(defn["name"], rows[-1]), flush=True)
            continue
        host = backend == "host"
        try:
            if host:
                so = so_for(sol, tmp)
                build = "cc -O2"
                runner = None
            else:
                if cp is None or not torch.cuda.is_available():
                    raise RuntimeError("a CUDA solution needs cupy and a CUDA device for torch")
                cubin, build = cubin_for(pkg_dir, sol, tmp, args.arch)
                runner = CudaSolution(cp, cubin, sol)
        except Exception as e:  # noqa: BLE001 - report and go on
            rows.append({"solution": sname, "workload": "-", "status": "ERROR",
                         "why": "build: %s" % str(e).strip()[:2000]})
            continue
        for wl in chosen:
            row = {"solution": sname, "workload": wl["uuid"], "axes": wl["axes"], "build": build}
            try:
                device = "cpu" if host else "cuda"
                ax = axes_of(defn, wl)
                sh = shapes_of(defn, ax)
                inputs = make_inputs(torch, pkg_dir, defn, wl, ax, device, args.seed)
                snapshot = {k: v.clone() for k, v in inputs.items() if hasattr(v, "clone")}
                if (wl["uuid"], device) not in want_cache:
                    want_cache[(wl["uuid"], device)] = run_python_reference(
                        defn, {k: (v.clone() if hasattr(v, "clone") else v) for k, v in inputs.items()})
                want = want_cache[(wl["uuid"], device)]
                outs = alloc_outputs(torch, defn, sh, device)
                if host:
                    run_host_solution(np, torch, so, sol, defn, ax, sh, inputs, outs)
                else:
                    ws = alloc_workspace(torch, runner.man, ax, sh, device)
                    plan = runner.prepare(np, torch, defn, ax, sh, inputs, outs, ws)
                    torch.cuda.synchronize()
                    runner.call(plan, ws, runner.man.get("workspace", {}))
                    cp.cuda.Device().synchronize()
                    torch.cuda.synchronize()
                changed = [k for k, v in snapshot.items()
                           if not torch.equal(as_bytes(torch, v), as_bytes(torch, inputs[k]))]
                if defn.get("khlua", {}).get("evaluator") == "dsa_topk_indexer":
                    c = compare_topk(torch, defn, inputs, outs, want)
                else:
                    c = compare(torch, defn, outs, want)
                row.update(max_abs=c["max_abs"], max_rel=c["max_rel"], matched=c["matched"])
                if "strict_matched" in c:
                    row["strict_matched"] = c["strict_matched"]
                if changed:
                    c["ok"] = False
                    c["why"] = "inputs changed: " + ", ".join(changed)
                row["status"] = "PASS" if c["ok"] else "FAIL"
                row["why"] = c["why"]
                if not host and not args.no_timing:
                    ms = time_calls(torch, lambda: runner.call(plan, ws, runner.man.get("workspace", {})))
                    bound, nbytes, flops = sol_bound_ms(defn, ax, sh)
                    row.update(latency_ms=ms, sol_ms=bound, sol_fraction=bound / ms if ms > 0 else 0.0)
                    anchor = getattr(args, "anchors", {}).get(defn["op_type"])
                    if anchor:
                        row["anchor"] = anchor(torch, inputs)
            except Exception as e:  # noqa: BLE001
                row["status"] = "ERROR"
                row["why"] = "".join(traceback.format_exception_only(type(e), e)).strip()[:2000]
            rows.append(row)
            print(fmt_row(defn["name"], row), flush=True)
    return defn, rows


def gemm_anchor(torch, inputs):
    """cuBLAS (torch.matmul) on the same inputs: the vendor anchor for the GEMM
    baseline, which a launch manifest cannot express (host code)."""
    A, B = inputs["A"], inputs["B"]
    return {"cublas_torch_matmul_ms": time_calls(torch, lambda: torch.matmul(A, B.T))}


def fmt_row(task, r):
    def g(k, f):
        return f % r[k] if k in r else "-"
    s = "%-48s %-36s %-38s %10s %10s %9s %-5s" % (
        task[:48], r["solution"][:36], str(r.get("axes", r["workload"]))[:38],
        g("max_abs", "%.3g"), g("max_rel", "%.3g"), g("matched", "%.6f"), r["status"])
    if "latency_ms" in r:
        s += "  %.4f ms (SoL %.1f%%)" % (r["latency_ms"], 100 * r["sol_fraction"])
    if r.get("anchor"):
        s += "  " + json.dumps(r["anchor"])
    if "strict_matched" in r:
        s += "  (1e-2 rule: %.6f)" % r["strict_matched"]
    if r.get("why"):
        s += "  " + r["why"].splitlines()[0][:200]
    return s


def note(r):
    parts = []
    if "strict_matched" in r:
        parts.append("matched at atol = rtol = 1e-2: %.6f" % r["strict_matched"])
    if r.get("why"):
        parts.append(r["why"])
    if r.get("anchor"):
        parts.append(json.dumps(r["anchor"]))
    return "; ".join(parts)


def write_record(out_dir, pkg, defn, rows, env, args):
    d = os.path.join(out_dir, pkg)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "verify.json"), "w") as f:
        json.dump({"package": pkg, "definition": defn["name"], "environment": env,
                   "seed": args.seed, "rows": rows}, f, indent=2, default=str)
    kh = defn.get("khlua", {}).get("tolerance", {})
    lines = [
        "# %s: verification record" % defn["name"], "",
        "Written by `python3 kernels/verify.py` on %s." % env["date"], "",
        "## Procedure", "",
        "- Inputs: torch, FlashInfer-Bench's distributions per dtype (or the package's "
        "`inputs.py`), generator seed %d, on the device the solution runs on." % args.seed,
        "- Expected outputs: the definition's Python `reference`, exec'd as written.",
        "- Solution outputs: the manifest resolved for the workload, launched with "
        "cupy.RawModule (host solutions: cc -O2 shared object through ctypes); outputs "
        "pre-filled with 0xFF bytes; inputs compared before and after.",
        "- Rule: an element fails iff |x-y| > atol and |x-y|/(|y|+1e-8) > rtol; "
        "atol %s, rtol %s, required matched ratio %s." % (
            kh.get("atol", 0.01), kh.get("rtol", 0.01), kh.get("required_matched_ratio", 1.0)),
        "- Latency here: CUDA events, L2 flushed, median of 30 (rough; official numbers "
        "come from `khlua eval`). SoL: max(bytes / 4.8 TB/s, FLOPs / 989 TFLOP/s).", "",
        "## Environment", "",
        "```", json.dumps(env, indent=1), "```", "",
        "## Results", "",
        "| solution | axes | max abs err | max rel err | matched | status | latency ms | SoL % | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["solution"], json.dumps(r.get("axes", r["workload"])),
            "%.4g" % r["max_abs"] if "max_abs" in r else "-",
            "%.4g" % r["max_rel"] if "max_rel" in r else "-",
            "%.6f" % r["matched"] if "matched" in r else "-", r["status"],
            "%.4f" % r["latency_ms"] if "latency_ms" in r else "-",
            "%.1f" % (100 * r["sol_fraction"]) if "sol_fraction" in r else "-",
            note(r).replace("|", "/").replace("\n", " ")[:300]))
    with open(os.path.join(d, "VERIFY.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def plan_only(args):
    """What a run would do, without torch: a check of this script and of the
    manifests that runs anywhere (CI, machines without a GPU)."""
    bad = 0
    for p in sorted(glob.glob(os.path.join(HERE, "*", "definition.json"))):
        pkg_dir = os.path.dirname(p)
        if args.packages and os.path.basename(pkg_dir) not in args.packages.split(","):
            continue
        try:
            defn, wls, sols = load_package(pkg_dir)
            kh = defn.get("khlua", {})
            for wl in pick_workloads(defn, wls, args.workloads):
                ax = axes_of(defn, wl)
                sh = shapes_of(defn, ax)
                bound, nbytes, flops = sol_bound_ms(defn, ax, sh)
                print("%s %s: %d bytes, %d flops, SoL %.4f ms" % (
                    defn["name"], json.dumps(wl["axes"]), nbytes, flops, bound))
                for sname in (kh.get("reference"), kh.get("baseline")):
                    if not sname:
                        continue
                    man = sols[sname]["spec"]["khlua"]
                    for l in man.get("launches", []):
                        print("  %s: %s grid %s block %s smem %d" % (
                            sname, l["kernel"], dims(l["grid"], ax, sh), dims(l["block"], ax, sh),
                            eval_expr(l.get("shared_bytes", 0), ax, sh)))
                    if man.get("backend") == "host":
                        print("  %s: host %s" % (sname, man.get("function")))
        except Exception as e:  # noqa: BLE001
            bad += 1
            print("%s: ERROR %s" % (pkg_dir, e))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packages", default="", help="comma-separated package names (default: all)")
    ap.add_argument("--workloads", type=int, default=4, help="workloads per package (0: all)")
    ap.add_argument("--seed", type=int, default=20260)
    ap.add_argument("--solutions", choices=["ref", "refbase", "all"], default="refbase")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(HERE, "verify-out"))
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per package")
    ap.add_argument("--single", default="", help=argparse.SUPPRESS)
    ap.add_argument("--plan", action="store_true",
                    help="no torch, no GPU: show the chosen workloads and resolved launches only")
    args = ap.parse_args()
    if args.plan:
        return plan_only(args)

    import numpy as np
    import torch
    try:
        import cupy as cp
    except ImportError:
        cp = None
    args.anchors = {"gemm": gemm_anchor}
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
           "cupy": getattr(cp, "__version__", None), "cuda": torch.version.cuda,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "nvcc": nvcc_path()}
    print(json.dumps(env))

    pkgs = sorted(os.path.basename(os.path.dirname(p))
                  for p in glob.glob(os.path.join(HERE, "*", "definition.json")))
    if args.packages:
        want = args.packages.split(",")
        pkgs = [p for p in pkgs if p in want]
    bad = 0
    summary = []
    if args.single:
        # the child: one package, in this process
        with tempfile.TemporaryDirectory(prefix="khlua-verify-") as tmp:
            pkg_dir = os.path.join(HERE, args.single)
            try:
                defn, rows = verify_package((torch, np, cp), pkg_dir, args, tmp)
                write_record(args.out, args.single, defn, rows, env, args)
            except Exception as e:  # noqa: BLE001
                print(fmt_row(args.single, {"solution": "-", "workload": "-", "status": "ERROR",
                                            "why": "".join(traceback.format_exception_only(type(e), e))}))
                return 1
        return 0 if all(r["status"] in ("PASS", "SKIP") for r in rows) else 1
    for pkg in pkgs:
        # a fresh process per package: a kernel that faults leaves the CUDA
        # context unusable, and must not take the other packages with it
        cmd = [sys.executable, os.path.abspath(__file__), "--single", pkg, "--out", args.out,
               "--workloads", str(args.workloads), "--seed", str(args.seed),
               "--solutions", args.solutions, "--arch", args.arch]
        if args.no_timing:
            cmd.append("--no-timing")
        rec = os.path.join(args.out, pkg, "verify.json")
        if os.path.exists(rec):
            os.remove(rec)
        try:
            r = subprocess.run(cmd, timeout=args.timeout)
            code = r.returncode
        except subprocess.TimeoutExpired:
            code = "timeout after %d s" % args.timeout
        if os.path.exists(rec):
            with open(rec) as f:
                rows = json.load(f)["rows"]
        else:
            rows = []
        if not rows or (code not in (0, 1)):
            rows.append({"solution": "-", "workload": "-", "status": "ERROR",
                         "why": "verify process for %s ended with %s" % (pkg, code)})
            print(fmt_row(pkg, rows[-1]), flush=True)
        n_bad = sum(1 for r in rows if r["status"] not in ("PASS", "SKIP"))
        bad += n_bad
        summary.append((pkg, sum(1 for r in rows if r["status"] == "PASS"), len(rows)))
    print()
    for pkg, ok, n in summary:
        print("%-52s %d/%d PASS" % (pkg, ok, n))
    print("records under %s" % args.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
