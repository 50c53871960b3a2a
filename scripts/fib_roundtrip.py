#!/usr/bin/env python3
"""fib_roundtrip.py: build and benchmark a `khlua export solution` with
FlashInfer-Bench's own API, on the GPU machine (issue 22, the round trip).

Written against flashinfer-bench 0.1.2 (the PyPI wheel) and read in its
source: flashinfer_bench/data/trace_set.py (TraceSet.from_path),
data/solution.py (Solution), compile/registry.py
(BuilderRegistry.get_instance().build: the TVM-FFI builder for language
"cuda"), bench/config.py (BenchmarkConfig: warmup 10, iterations 50, trials 3,
rtol = atol = 1e-2 by default) and bench/benchmark.py (Benchmark.run_all).
The main branch at 40e6ca78 has the same names.

    python3 scripts/fib_roundtrip.py EXPORT DATASET [options]

EXPORT   what `khlua export solution ... --out DIR` wrote: DIR (holding one
         Solution JSON) or the JSON itself.
DATASET  a FlashInfer-Bench dataset (definitions/, workloads/, blob/) or a
         khlua task package (definition.json, *.jsonl, blob/), e.g.
         kernels/rmsnorm_h4096 or ../shared/data/flashinfer-trace.

The dataset is never written: a scratch dataset is assembled (its
definitions, workloads and blob folders linked or copied, solutions/ holding
only the exported Solution, which FlashInfer-Bench loads and validates
itself), the solution is built once by FlashInfer-Bench's builder registry
(build status and time, or its BuildError), then benchmarked by Benchmark
with the official protocol unless told otherwise.  Prints the versions, the
build, and one line per workload: status, FlashInfer-Bench's latency, the
reference's, the speedup, the errors.  Exit 0 when it built and every
workload PASSED, 1 otherwise, 2 on a usage error.

Options: --workloads N (the first N), --warmup-runs, --iterations,
--num-trials, --rtol, --atol, --required-matched-ratio, --timeout,
--isolated (IsolatedRunner, as the contest ran), --build-only (load and build,
no benchmark: works without a GPU), --arch-list "9.0a" (sets
TVM_FFI_CUDA_ARCH_LIST: FlashInfer-Bench's builder otherwise asks nvidia-smi
and compiles for sm_90, not sm_90a), --json FILE (versions, build and every
trace as FlashInfer-Bench serialises it), --keep (leave the scratch dataset), --no-cupti (skip the kernel timing below),
--flush-ab (the contest loop once more with the flush written by
cudaMemsetAsync, as khlua's gpu worker writes it: "cupti_memset_ms"; needs cupy).

FlashInfer-Bench 0.1.2's latency is CUDA events around the Python call of the
built entry (torch.cuda.synchronize, event, call, event), so it includes the
host's launch path (the TVM-FFI call, a few microseconds), which is no part of
the kernel.  The kernel time the contest now reports comes from CUPTI
(flashinfer's bench_gpu_time_with_cupti, FIB PR #196).  So, after the
benchmark, each workload's call of the solution FlashInfer-Bench built is also
measured under torch.profiler (CUPTI, through kineto), on FlashInfer-Bench's
own inputs (gen_inputs) and outputs (allocate_outputs), in two loops:

  contest  bench_gpu_time_with_cupti's loop: a write of 2 x L2 (rounded down
           to whole MiB, torch zero_), synchronize, call on the same arguments;
           1 + 5 estimate calls and 10 warm-up calls, then `--iterations`
           timed ("cupti_ms" in the JSON and the table's CUPTI column)
  clone    FlashInfer-Bench 0.1.2's do_bench loop: a 256 MB zero_, then the
           arguments cloned (which writes the inputs back into the L2),
           synchronize, call; 10 warm-up, then `--iterations` timed
           ("cupti_clone_ms")

The latency of a call is the sum of the durations of the kernels it launches,
median over the timed calls.  bench_gpu_time_with_cupti itself could not run
on the device machine (see tests/bench/timing_torch.py).
"""

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time


def fail(msg, code=1):
    print(f"fib_roundtrip: {msg}", file=sys.stderr)
    sys.exit(code)


def find_solution(export):
    p = pathlib.Path(export)
    if p.is_file():
        return p
    if not p.is_dir():
        fail(f"{export}: no such file or folder", 2)
    found = sorted(x for x in p.glob("*.json"))
    if len(found) != 1:
        fail(f"{export}: expected one Solution JSON in the folder, found {len(found)}", 2)
    return found[0]


def link(src, dst):
    try:
        os.symlink(os.path.abspath(src), dst)
    except OSError:
        shutil.copytree(src, dst)


def assemble(dataset, solution_path, scratch):
    """A FlashInfer-Bench dataset at scratch: the definitions, workloads and
    blobs of DATASET, solutions/ holding only the exported Solution."""
    ds = pathlib.Path(dataset)
    if not ds.is_dir():
        fail(f"{dataset}: no such folder", 2)
    root = pathlib.Path(scratch)
    if (ds / "definition.json").is_file():
        # a khlua task package: its definition, its workload files, its blob/
        d = json.loads((ds / "definition.json").read_text())
        op = d.get("op_type") or "khlua"
        (root / "definitions" / op).mkdir(parents=True)
        shutil.copy(ds / "definition.json", root / "definitions" / op / f"{d['name']}.json")
        (root / "workloads" / op).mkdir(parents=True)
        lines = []
        for f in sorted(list(ds.glob("*.jsonl")) + list((ds / "workloads").glob("**/*.jsonl"))):
            lines += [ln for ln in f.read_text().splitlines() if ln.strip()]
        if not lines:
            fail(f"{dataset}: a task package without workloads (*.jsonl)", 2)
        (root / "workloads" / op / f"{d['name']}.jsonl").write_text("\n".join(lines) + "\n")
        if (ds / "blob").is_dir():
            link(ds / "blob", root / "blob")
    elif (ds / "definitions").is_dir():
        for sub in ("definitions", "workloads", "blob"):
            if (ds / sub).is_dir():
                link(ds / sub, root / sub)
    else:
        fail(f"{dataset}: neither a FlashInfer-Bench dataset (definitions/) nor a khlua task "
             "package (definition.json)", 2)
    (root / "solutions").mkdir()
    shutil.copy(solution_path, root / "solutions" / solution_path.name)
    return root


def versions():
    from importlib import metadata

    import torch

    out = {}
    for key, dist in (("flashinfer_bench", "flashinfer-bench"), ("apache_tvm_ffi", "apache-tvm-ffi")):
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[key] = None
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    out["TVM_FFI_CUDA_ARCH_LIST"] = os.environ.get("TVM_FFI_CUDA_ARCH_LIST")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export")
    ap.add_argument("dataset")
    ap.add_argument("--workloads", type=int, default=0)
    ap.add_argument("--warmup-runs", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--num-trials", type=int, default=3)
    ap.add_argument("--rtol", type=float, default=1e-2)
    ap.add_argument("--atol", type=float, default=1e-2)
    ap.add_argument("--required-matched-ratio", type=float, default=None)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--isolated", action="store_true")
    ap.add_argument("--arch-list", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--flush-ab", action="store_true")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--no-cupti", action="store_true")
    a = ap.parse_args()
    if a.workloads < 0:
        fail(f"--workloads {a.workloads}: expected 0 (all) or more", 2)
    if a.arch_list:
        os.environ["TVM_FFI_CUDA_ARCH_LIST"] = a.arch_list  # before tvm_ffi builds anything

    sol_path = find_solution(a.export)
    try:
        raw = json.loads(sol_path.read_text())
    except (OSError, ValueError) as e:
        fail(f"{sol_path}: {e}", 2)
    scratch = tempfile.mkdtemp(prefix="fib-roundtrip-")
    try:
        root = assemble(a.dataset, sol_path, scratch)
        return run(a, root, raw)
    finally:
        if a.keep:
            print(f"scratch dataset kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def run(a, root, raw):
    from flashinfer_bench import Benchmark, BenchmarkConfig, EvaluationStatus, TraceSet
    from flashinfer_bench.compile import BuilderRegistry

    report = {"versions": versions()}
    v = report["versions"]
    print(f"flashinfer-bench {v['flashinfer_bench']}, apache-tvm-ffi {v['apache_tvm_ffi']}, "
          f"torch {v['torch']} (CUDA {v['cuda']}), {v['gpu'] or 'no GPU'}")

    # FlashInfer-Bench's own loading: pydantic validates the exported JSON
    ts = TraceSet.from_path(str(root))
    name, def_name = raw.get("name"), raw.get("definition")
    sol = ts.get_solution(name)
    if sol is None:
        fail(f"FlashInfer-Bench did not load solution {name!r}")
    definition = ts.definitions.get(def_name)
    if definition is None:
        fail(f"definition {def_name!r} is not in {a.dataset}")
    workloads = ts.workloads.get(def_name, [])
    if not workloads:
        fail(f"{a.dataset} has no workloads of {def_name}")
    if a.workloads:
        ts.workloads[def_name] = workloads = workloads[: a.workloads]

    # the build, as the benchmark's workers will do it (cached by solution hash)
    t0 = time.time()
    try:
        runnable = BuilderRegistry.get_instance().build(definition, sol)
        build = {"status": "OK", "seconds": round(time.time() - t0, 2),
                 "builder": runnable.metadata.build_type,
                 "entry_point": sol.spec.entry_point,
                 "library": runnable.metadata.misc.get("binary")}
        print(f"solution {name} (definition {def_name}): built in {build['seconds']} s by "
              f"{build['builder']}, entry {sol.spec.entry_point}, library {build['library']}")
    except Exception as e:  # noqa: BLE001 - BuildError or whatever the builder raised
        build = {"status": "COMPILE_ERROR", "seconds": round(time.time() - t0, 2),
                 "error": f"{type(e).__name__}: {e}"}
        print(f"solution {name} (definition {def_name}): build FAILED after "
              f"{build['seconds']} s: {build['error']}")
    report["build"] = build
    if build["status"] != "OK" or a.build_only:
        write_json(a, report, [])
        return 0 if build["status"] == "OK" else 1

    cfg = BenchmarkConfig(
        warmup_runs=a.warmup_runs, iterations=a.iterations, num_trials=a.num_trials,
        rtol=a.rtol, atol=a.atol, required_matched_ratio=a.required_matched_ratio,
        timeout_seconds=a.timeout, use_isolated_runner=a.isolated,
        definitions=[def_name], solutions=[name])
    report["config"] = {"warmup_runs": a.warmup_runs, "iterations": a.iterations,
                        "num_trials": a.num_trials, "rtol": a.rtol, "atol": a.atol,
                        "required_matched_ratio": a.required_matched_ratio,
                        "timeout_seconds": a.timeout, "isolated": a.isolated}
    bench = Benchmark(ts, cfg)
    t_pipe = time.time()
    try:
        result = bench.run_all(dump_traces=False)
    finally:
        bench.close()
    # FlashInfer-Bench's own pipeline, per workload (issue 21 compares khlua's with it)
    pipe_s = time.time() - t_pipe
    report["pipeline_seconds"] = round(pipe_s, 3)
    print(f"pipeline: Benchmark.run_all took {pipe_s:.2f} s for {len(workloads)} workloads "
          f"({pipe_s / max(len(workloads), 1):.3f} s per workload)")
    traces = [t for t in result.traces.get(def_name, []) if t.solution == name]

    print(f"{'workload':36} {'axes':28} {'status':20} {'latency_ms':>11} {'ref_ms':>11} "
          f"{'speedup':>9} {'max_abs':>9} {'max_rel':>9}")
    passed, speedups = 0, []
    for t in traces:
        ev = t.evaluation
        axes = ",".join(f"{k}={v}" for k, v in t.workload.axes.items())
        lat = ref = sp = ma = mr = ""
        if ev.performance:
            lat = f"{ev.performance.latency_ms:.5f}"
            ref = f"{ev.performance.reference_latency_ms:.5f}"
            sp = f"{ev.performance.speedup_factor:.2f}"
        if ev.correctness:
            ma = f"{ev.correctness.max_absolute_error:.2e}"
            mr = f"{ev.correctness.max_relative_error:.2e}"
        print(f"{t.workload.uuid:36} {axes[:28]:28} {ev.status.value:20} {lat:>11} {ref:>11} "
              f"{sp:>9} {ma:>9} {mr:>9}")
        if ev.status == EvaluationStatus.PASSED:
            passed += 1
            speedups.append(ev.performance.speedup_factor)
        elif ev.log:
            tail = ev.log.strip().splitlines()[-3:]
            for line in tail:
                print(f"    | {line[:200]}")
    n = len(workloads)
    mean = sum(speedups) / len(speedups) if speedups else 0.0
    print(f"{passed}/{n} PASSED ({len(traces)} traces); mean speedup over the reference "
          f"{mean:.2f}" + ("" if passed == n else "; not every workload passed"))
    if not a.no_cupti:
        report["cupti"] = cupti_latencies(a, root, definition, workloads, runnable)
    write_json(a, report, traces)
    return 0 if passed == n and len(traces) == n else 1


def cupti_latencies(a, root, definition, workloads, runnable):
    """Per workload: the solution's kernel time per call under CUPTI in the
    contest's loop and in FlashInfer-Bench 0.1.2's (see the module's text),
    {uuid: {"cupti_ms", "cupti_mean_ms", "cupti_clone_ms", "kernels", "calls"}}."""
    import statistics

    import torch
    from flashinfer_bench.bench.evaluators.utils import allocate_outputs
    from flashinfer_bench.bench.utils import gen_inputs, load_safetensors

    out = {}
    mib = 1 << 20
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty((2 * l2) // mib * mib, dtype=torch.int8, device="cuda")
    cache = torch.empty(256 * mib // 4, dtype=torch.int, device="cuda")
    dps = runnable.metadata.destination_passing_style
    print(f"{'workload':36} {'cupti_ms':>11} {'clone_ms':>11} kernels per call")
    for t in workloads:
        w = t.workload
        safe = (load_safetensors(definition, w, root)
                if any(d.type == "safetensors" for d in w.inputs.values()) else {})
        inp = gen_inputs(definition, w, device="cuda", safe_tensors=safe)
        args = list(inp) + (allocate_outputs(definition, inp, "cuda") if dps else [])

        # the kernels of one call alone: their names pick them out below
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            runnable(*args)
            torch.cuda.synchronize()
        names = set(e.name for e in prof.events() if e.device_time > 0)
        per_call = sum(1 for e in prof.events() if e.device_time > 0)
        if per_call == 0:
            out[w.uuid] = {"error": "no kernel seen in one call"}
            print(f"{w.uuid:36} no kernel seen in one call")
            continue

        def timed(prepare):
            """Median and mean per-call kernel time (ms) of `iterations` calls,
            each after prepare() (outside the profiled kernels by name)."""
            with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(a.iterations):
                    runnable(*prepare())
                torch.cuda.synchronize()
            durs = [e.device_time for e in sorted(prof.events(), key=lambda e: e.time_range.start)
                    if e.name in names and e.device_time > 0]
            if len(durs) != per_call * a.iterations:
                return None, f"{len(durs)} kernels seen for {a.iterations} calls of {per_call}"
            sums = [sum(durs[i:i + per_call]) / 1000.0 for i in range(0, len(durs), per_call)]
            return sums, None

        def contest():
            flush.zero_()
            torch.cuda.synchronize()
            return args

        def clone():
            cache.zero_()
            cloned = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
            torch.cuda.synchronize()
            return cloned

        for _ in range(5 + 10):
            runnable(*contest())
        torch.cuda.synchronize()
        sums, err = timed(contest)
        msums = None
        if err is None and a.flush_ab:
            # the same loop with the flush written by cudaMemsetAsync (what
            # khlua's gpu worker does, cuMemsetD32Async) instead of torch's zero_
            import cupy

            def memset():
                cupy.cuda.runtime.memsetAsync(flush.data_ptr(), 0, flush.numel(),
                                              torch.cuda.current_stream().cuda_stream)
                torch.cuda.synchronize()
                return args

            if not out:
                with torch.profiler.profile(
                        activities=[torch.profiler.ProfilerActivity.CUDA]) as fp:
                    flush.zero_()
                    memset()
                print("flush kernels: zero_ then memset:",
                      [e.name for e in fp.events() if e.device_time > 0])
            for _ in range(10):
                runnable(*memset())
            msums, err = timed(memset)
        if err is None:
            for _ in range(10):
                runnable(*clone())
            torch.cuda.synchronize()
            csums, err = timed(clone)
        if err is not None:
            out[w.uuid] = {"error": err}
            print(f"{w.uuid:36} {err}")
            continue
        out[w.uuid] = {"cupti_ms": statistics.median(sums),
                       "cupti_mean_ms": statistics.mean(sums),
                       "cupti_clone_ms": statistics.median(csums),
                       "cupti_memset_ms": statistics.median(msums) if msums else None,
                       "kernels": sorted(names), "calls": len(sums)}
        print(f"{w.uuid:36} {out[w.uuid]['cupti_ms']:11.5f} "
              f"{out[w.uuid]['cupti_clone_ms']:11.5f} {per_call} ({', '.join(sorted(names))[:60]})"
              + (f" memset flush {statistics.median(msums):.5f}" if msums else ""))
    return out


def write_json(a, report, traces):
    if not a.json:
        return
    report["traces"] = [t.model_dump(mode="json") for t in traces]
    pathlib.Path(a.json).write_text(json.dumps(report, indent=2) + "\n")
    print(f"written: {a.json}")


if __name__ == "__main__":
    sys.exit(main())
