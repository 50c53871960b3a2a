#!/usr/bin/env python3
"""Regenerate tests/fixtures/fib/: files written by FlashInfer-Bench's own writers.

Written against flashinfer-bench 0.1.2 (PyPI), the version khlua's FIB format
checks mirror (engine/task/task.c).  Every file under tests/fixtures/fib/written/
and tests/fixtures/fib/rejected/ is produced here by FIB's pydantic models and
its writers (data/json_utils.py: save_json_file, save_jsonl_file,
append_jsonl_file; Model.model_dump_json; and Python's json.dumps of
model_dump(), which writes bare NaN / Infinity), and then read back with FIB's
loaders (load_json_file, load_jsonl_file, and TraceSet.from_path's asserts):

  written/    a dataset FIB writes and reads back: khlua must read all of it
  rejected/   a dataset in which FIB refuses every file or line listed in
              rejected.json (with FIB's own error); objects FIB would refuse
              to build are made with model_construct() (no validation) and
              written by the same writers; khlua must refuse each of them

khlua/host_rmsnorm_export.jsonl is an input, not an output: three lines of
`khlua store export --format fib-trace` after `khlua eval --task
kernels/host_rmsnorm`.  written/ holds it re-saved by FIB (and the package's
definition and workloads re-saved by FIB too), so khlua's export, once FIB has
rewritten it, stays readable by khlua.

Setup (torch is not needed: without it the data modules are imported alone):
    python3 -m venv /tmp/venv-fib
    /tmp/venv-fib/bin/pip install --no-deps flashinfer-bench==0.1.2
    /tmp/venv-fib/bin/pip install pydantic
    /tmp/venv-fib/bin/python scripts/make_fib_fixtures.py [--out DIR]
"""

import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import sys
import types
import warnings
from pathlib import Path

FIB_VERSION = "0.1.2"
ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "fib"
# --out DIR writes elsewhere (tests/lua/test_fib_formats.lua does, with the FIB
# installed there); the khlua export is always read from FIX
OUT = Path(sys.argv[sys.argv.index("--out") + 1]).resolve() if "--out" in sys.argv else FIX


def fib_data():
    """flashinfer_bench.data, or (no torch here) its schema modules alone."""
    try:
        import flashinfer_bench.data as d  # needs torch (trace_set.py)

        return d
    except ImportError:
        pass
    spec = importlib.util.find_spec("flashinfer_bench")
    if spec is None:
        sys.exit(f"flashinfer-bench is not installed: pip install --no-deps flashinfer-bench=={FIB_VERSION}")
    root = os.path.dirname(spec.origin)
    # empty package objects, so that the package __init__ files (which import
    # torch) are not run; the modules below are FIB's, unchanged
    for name, path in (("flashinfer_bench", root), ("flashinfer_bench.data", os.path.join(root, "data"))):
        m = types.ModuleType(name)
        m.__path__ = [path]
        sys.modules[name] = m
    ns = types.SimpleNamespace()
    for sub in ("definition", "workload", "solution", "trace", "json_utils"):
        mod = importlib.import_module("flashinfer_bench.data." + sub)
        for k, v in vars(mod).items():
            if not k.startswith("_"):
                setattr(ns, k, v)
    return ns


D = fib_data()
VERSION = importlib.metadata.version("flashinfer-bench")
if VERSION != FIB_VERSION:
    print(f"warning: flashinfer-bench {VERSION} installed; these fixtures are for {FIB_VERSION}", file=sys.stderr)

REF = (
    "import torch\n\n@torch.no_grad()\ndef run(hidden_states, weight):\n"
    "    x = hidden_states.to(torch.float32)\n"
    "    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)\n"
    "    return ((x * inv_rms) * weight.to(torch.float32)).to(hidden_states.dtype)\n"
)


def rmsnorm(name, description=None, tags=("status:test",), reference=REF, constraints=(), construct=False,
            typed=True):
    """typed: give the axes' "type" explicitly, so that save_json_file
    (exclude_unset) writes it; FIB's own defaults leave it out."""
    make = D.Definition.model_construct if construct else D.Definition
    kw = {} if description is None else {"description": description}
    ty = (lambda t: {"type": t}) if typed else (lambda t: {})
    return make(
        name=name,
        op_type="rmsnorm",
        tags=list(tags),
        axes={
            "batch_size": D.AxisVar(description="rows", **ty("var")),
            "hidden_size": D.AxisConst(value=64, **ty("const")),
        },
        inputs={
            "hidden_states": D.TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16"),
            "weight": D.TensorSpec(shape=["hidden_size"], dtype="bfloat16", description="scale"),
        },
        outputs={"output": D.TensorSpec(shape=["batch_size", "hidden_size"], dtype="bfloat16")},
        reference=reference,
        constraints=list(constraints),
        **kw,
    )


def workload(uuid, batch):
    return D.Workload(uuid=uuid, axes={"batch_size": batch},
                      inputs={"hidden_states": D.RandomInput(), "weight": D.RandomInput()})


ENV = D.Environment(hardware="NVIDIA H200", libs={"torch": "2.8.0", "cuda": "12.8"})
TS = "2026-12-05T09:00:00.000001"


def passed(lat=0.01, ref=0.05):
    return D.Evaluation(status="PASSED", environment=ENV, timestamp=TS,
                        correctness=D.Correctness(max_relative_error=1e-3, max_absolute_error=2e-3),
                        performance=D.Performance(latency_ms=lat, reference_latency_ms=ref,
                                                  speedup_factor=ref / lat))


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# ---- written/: FIB writes it, FIB reads it back --------------------------------------------
def make_written(base):
    # a definition as FIB's save_json_file writes it (exclude_unset: only what was set)
    d1 = rmsnorm("fib_rmsnorm_h64", description="RMSNorm, hidden 64", tags=("status:test", "model:none"),
                 constraints=["batch_size >= 1"])
    D.save_json_file(d1, base / "definitions/rmsnorm/fib_rmsnorm_h64.json")
    # a definition as model_dump_json writes it: every optional field, "description": null
    d2 = rmsnorm("fib_rmsnorm_h64_dumped")
    write(base / "definitions/rmsnorm/fib_rmsnorm_h64_dumped.json", d2.model_dump_json(indent=2))
    # axes built with FIB's defaults: save_json_file leaves their "type" out
    d3 = rmsnorm("fib_rmsnorm_h64_untyped", typed=False)
    D.save_json_file(d3, base / "definitions/rmsnorm/fib_rmsnorm_h64_untyped.json")

    # workloads as save_jsonl_file writes them ("solution": null, "evaluation": null)
    w = [workload("fib-w-0001", 1), workload("fib-w-0002", 7), workload("fib-w-0003", 33)]
    D.save_jsonl_file([D.Trace(definition=d1.name, workload=x) for x in w],
                      base / "workloads/rmsnorm/fib_rmsnorm_h64.jsonl")
    D.save_jsonl_file([D.Trace(definition=d2.name, workload=x) for x in w[:2]],
                      base / "workloads/rmsnorm/fib_rmsnorm_h64_dumped.jsonl")
    D.save_jsonl_file([D.Trace(definition=d3.name, workload=x) for x in w[1:]],
                      base / "workloads/rmsnorm/fib_rmsnorm_h64_untyped.jsonl")

    # solutions khlua cannot run (no spec.khlua launch manifest): Python and TVM-FFI CUDA
    sdir = base / "solutions/fib/rmsnorm/fib_rmsnorm_h64"
    py = D.Solution(name="fib_rmsnorm_h64_python", definition=d1.name, author="fib",
                    spec=D.BuildSpec(language="python", target_hardware=["cuda"], entry_point="main.py::run"),
                    sources=[D.SourceFile(path="main.py", content=REF)])
    D.save_json_file(py, sdir / "fib_rmsnorm_h64_python.json")
    cu = D.Solution(name="fib_rmsnorm_h64_cuda", definition=d1.name, author="fib",
                    spec=D.BuildSpec(language="cuda", target_hardware=["NVIDIA_H200"], entry_point="kernel.cu::run",
                                     binding="tvm-ffi"),
                    sources=[D.SourceFile(path="kernel.cu", content="#include <tvm/ffi/function.h>\n"
                                          "void run(tvm::ffi::Tensor x, tvm::ffi::Tensor w, tvm::ffi::Tensor y) {}\n"
                                          "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);\n")])
    write(sdir / "fib_rmsnorm_h64_cuda.json", cu.model_dump_json(indent=2))

    # traces as TraceSet.add_traces writes them (append_jsonl_file: model_dump_json,
    # non-finite correctness as the strings "NaN" / "Infinity")
    numerical = D.Evaluation(status="INCORRECT_NUMERICAL", environment=ENV, timestamp=TS, log="mismatch",
                             correctness=D.Correctness(max_relative_error=math.nan, max_absolute_error=math.inf))
    compile_err = D.Evaluation(status="COMPILE_ERROR", environment=ENV, timestamp=TS, log="nvcc: error")
    D.append_jsonl_file([
        D.Trace(definition=d1.name, workload=w[0], solution=py.name, evaluation=passed()),
        D.Trace(definition=d1.name, workload=w[1], solution=cu.name, evaluation=numerical),
        # a trace whose solution is not named: "solution": null beside an evaluation
        D.Trace(definition=d1.name, workload=w[2], solution=None, evaluation=compile_err),
    ], base / "traces/rmsnorm/fib_rmsnorm_h64.jsonl")
    # traces as Python's json module writes FIB's model_dump(): bare NaN / Infinity
    inf_perf = D.Evaluation(status="PASSED", environment=ENV, timestamp=TS,
                            correctness=D.Correctness(max_relative_error=math.inf, max_absolute_error=math.nan),
                            performance=D.Performance(latency_ms=math.inf, reference_latency_ms=0.05,
                                                      speedup_factor=0.0))
    lines = [D.Trace(definition=d2.name, workload=w[0], solution=py.name, evaluation=numerical),
             D.Trace(definition=d2.name, workload=w[1], solution=py.name, evaluation=inf_perf)]
    write(base / "traces/rmsnorm/fib_rmsnorm_h64_dumped.jsonl",
          "".join(json.dumps(t.model_dump()) + "\n" for t in lines))

    # khlua's own package and export, re-saved by FIB
    pkg = ROOT / "kernels/host_rmsnorm"
    hd = D.load_json_file(D.Definition, pkg / "definition.json")
    D.save_json_file(hd, base / "definitions/rmsnorm/host_rmsnorm_h1024.json")
    D.save_jsonl_file(D.load_jsonl_file(D.Trace, pkg / "workloads.jsonl"),
                      base / "workloads/rmsnorm/host_rmsnorm_h1024.jsonl")
    exported = D.load_jsonl_file(D.Trace, FIX / "khlua/host_rmsnorm_export.jsonl")
    # an INCORRECT_NUMERICAL verdict as khlua writes it (engine/eval/eval_verdict.c: "nan" / "inf")
    line = json.loads((FIX / "khlua/host_rmsnorm_export.jsonl").read_text().splitlines()[0])
    ev = line["evaluation"]
    ev["status"] = "INCORRECT_NUMERICAL"
    ev.pop("performance")
    ev["correctness"] = {"max_relative_error": "nan", "max_absolute_error": "inf"}
    exported.append(D.Trace.model_validate_json(json.dumps(line)))
    D.append_jsonl_file(exported, base / "traces/rmsnorm/host_rmsnorm_h1024.jsonl")


# ---- rejected/: written by FIB's writers, refused by its loaders ----------------------------
def make_rejected(base):
    """Returns [(file relative to base, line or 0)] of what FIB must refuse."""
    bad = []
    ok = rmsnorm("fib_ok")
    D.save_json_file(ok, base / "definitions/x/fib_ok.json")

    def bad_def(fname, **kw):
        d = rmsnorm(fname, construct=True, **kw)
        write(base / f"definitions/x/{fname}.json", d.model_dump_json(indent=2, exclude_unset=True))
        bad.append((f"definitions/x/{fname}.json", 0))

    # the reference must parse (ast.parse) and define a top-level function run
    bad_def("bad_reference_syntax", reference="def run(hidden_states, weight):\n    return hidden_states +\n")
    bad_def("bad_reference_run_in_string", reference='DOC = """\ndef run(hidden_states, weight):\n"""\n')
    bad_def("bad_empty_tag", tags=["status:test", ""])
    # constraints must be Python expressions (ast.parse mode="eval")
    bad_def("bad_constraint_not_python", constraints=["batch_size >= 1 && batch_size <= 4096"])
    # axis names are non-empty strings
    d = rmsnorm("bad_empty_axis_name", construct=True)
    d.axes[""] = D.AxisVar()
    write(base / "definitions/x/bad_empty_axis_name.json", d.model_dump_json(indent=2, exclude_unset=True))
    bad.append(("definitions/x/bad_empty_axis_name.json", 0))

    sdir = base / "solutions/fib/x/fib_ok"

    def bad_sol(fname, content="def run(hidden_states, weight, output):\n    pass\n", deps=()):
        src = D.SourceFile.model_construct(path="main.py", content=content)
        spec = D.BuildSpec.model_construct(language=D.SupportedLanguages.PYTHON, target_hardware=["cuda"], entry_point="main.py::run",
                                           dependencies=list(deps), destination_passing_style=True, binding=None)
        s = D.Solution.model_construct(name=fname, definition="fib_ok", author="fib", spec=spec, sources=[src],
                                       description=None)
        write(sdir / f"{fname}.json", s.model_dump_json(indent=2))
        bad.append((f"solutions/fib/x/fib_ok/{fname}.json", 0))

    bad_sol("bad_empty_content", content="")
    bad_sol("bad_empty_dependency", deps=["torch", ""])

    # workloads/: every line a workload trace (no solution, no evaluation)
    w = workload("fib-ok-0001", 4)
    D.save_jsonl_file([D.Trace(definition="fib_ok", workload=w),
                       D.Trace(definition="fib_ok", workload=workload("fib-ok-0002", 8), solution="fib_ok_py"),
                       D.Trace(definition="fib_ok", workload=workload("fib-ok-0003", 9), evaluation=passed())],
                      base / "workloads/x/fib_ok.jsonl")
    bad += [("workloads/x/fib_ok.jsonl", 2), ("workloads/x/fib_ok.jsonl", 3)]

    # traces/: non-negative figures, a named machine, string library versions
    def ev(perf=None, corr=None, env=ENV):
        c = corr or D.Correctness(max_relative_error=1e-3, max_absolute_error=1e-3)
        p = perf or D.Performance(latency_ms=0.01, reference_latency_ms=0.05, speedup_factor=5.0)
        return D.Evaluation.model_construct(status=D.EvaluationStatus.PASSED, environment=env, timestamp=TS, log="",
                                            correctness=c, performance=p)

    P = D.Performance.model_construct
    C = D.Correctness.model_construct
    traces = [
        ev(perf=P(latency_ms=-0.01, reference_latency_ms=0.05, speedup_factor=5.0)),
        ev(perf=P(latency_ms=0.01, reference_latency_ms=0.05, speedup_factor=-5.0)),
        ev(perf=P(latency_ms=0.01, reference_latency_ms=-0.05, speedup_factor=5.0)),
        ev(corr=C(max_relative_error=1e-3, max_absolute_error=-1e-3, extra=None)),
        ev(corr=C(max_relative_error=-math.inf, max_absolute_error=1e-3, extra=None)),
        ev(env=D.Environment.model_construct(hardware="", libs={})),
        ev(env=D.Environment.model_construct(hardware="NVIDIA H200", libs={"cuda": 12.8})),
    ]
    lines = [D.Trace.model_construct(definition="fib_ok", workload=w, solution="fib_ok_py", evaluation=e)
             .model_dump_json() for e in traces]
    # a NaN latency, as json.dumps writes it (model_dump_json would write null)
    t = D.Trace.model_construct(definition="fib_ok", workload=w, solution="fib_ok_py",
                                evaluation=ev(perf=P(latency_ms=math.nan, reference_latency_ms=0.05,
                                                     speedup_factor=5.0)))
    lines.append(json.dumps(t.model_dump()))
    # a workload trace (neither solution nor evaluation) among the traces
    lines.append(D.Trace(definition="fib_ok", workload=w).model_dump_json())
    write(base / "traces/x/fib_ok.jsonl", "".join(x + "\n" for x in lines))
    bad += [("traces/x/fib_ok.jsonl", i + 1) for i in range(len(lines))]
    return bad


# ---- reading back with FIB's loaders ---------------------------------------------------------
def fib_read(base, rel, line=0):
    """None when FIB reads the file (or the line), else FIB's error, one line."""
    p = base / rel
    kind = rel.split("/")[0]
    try:
        if kind == "definitions":
            D.load_json_file(D.Definition, p)
        elif kind == "solutions":
            D.load_json_file(D.Solution, p)
        else:
            texts = p.read_text(encoding="utf-8").splitlines()
            for i, text in enumerate(texts, 1):
                if line and i != line:
                    continue
                t = D.Trace.model_validate_json(text)
                # TraceSet.from_path's asserts
                if kind == "workloads" and not t.is_workload_trace():
                    raise AssertionError("TraceSet.from_path: assert t.is_workload_trace()")
                if kind == "traces" and t.is_workload_trace():
                    raise AssertionError("TraceSet.from_path: assert not t.is_workload_trace()")
        return None
    except AssertionError as e:
        return str(e)
    except Exception as e:  # pydantic.ValidationError
        if not hasattr(e, "errors"):
            raise
        return "; ".join((".".join(str(x) for x in err["loc"]) or "(root)") + ": " + err["msg"] for err in e.errors())


def main():
    # model_construct'ed objects with a wrongly typed field (a library version
    # as a number) make pydantic's serializer warn; that field is the point
    warnings.filterwarnings("ignore", message="Pydantic serializer warnings")
    for sub in ("written", "rejected"):
        shutil.rmtree(OUT / sub, ignore_errors=True)
    make_written(OUT / "written")
    for p in sorted((OUT / "written").rglob("*.json*")):
        err = fib_read(OUT / "written", str(p.relative_to(OUT / "written")))
        if err:
            sys.exit(f"FIB refuses what it wrote: {p}: {err}")
    bad = make_rejected(OUT / "rejected")
    listed = []
    for rel, line in bad:
        err = fib_read(OUT / "rejected", rel, line)
        if not err:
            sys.exit(f"FIB reads {rel}:{line}, which should be refused")
        listed.append({"file": rel, "line": line, "fib": err})
    for p in sorted((OUT / "rejected").rglob("*.json*")):
        rel = str(p.relative_to(OUT / "rejected"))
        if not any(b["file"] == rel for b in listed) and fib_read(OUT / "rejected", rel):
            sys.exit(f"FIB refuses {rel}, which should be read")
        lines = {b["line"] for b in listed if b["file"] == rel}
        if rel.endswith(".jsonl"):
            n = len(p.read_text().splitlines())
            for i in range(1, n + 1):
                if i not in lines and fib_read(OUT / "rejected", rel, i):
                    sys.exit(f"FIB refuses {rel}:{i}, which should be read")
    doc = {"flashinfer_bench": VERSION, "rejected": listed}
    write(OUT / "rejected.json", json.dumps(doc, indent=2) + "\n")
    print(f"flashinfer-bench {VERSION}: wrote {OUT}/written, {OUT}/rejected ({len(listed)} refusals)")


if __name__ == "__main__":
    main()
