"""timing_torch.py: the same cubin's kernels launched from torch (through
CuPy), measured independently of khlua.

  python3 timing_torch.py CUBIN plain      launch each kernel 8 times (for ncu)
  python3 timing_torch.py CUBIN profile    FlashInfer-Bench's loop (2xL2 write
      flush, sync, call, sync; 5 + 10 warm-up, 50 timed) under torch.profiler
      (CUPTI, through kineto): median kernel duration, one JSON line per kernel

FlashInfer-Bench's own bench_gpu_time_with_cupti could not be used: the
flashinfer-python wheel (62 MB) does not fit the 64 MiB the device machine
accepts per call beside the tree, and cupti-python 13.4 requires
nvidia-cuda-cupti 13.4 where the machine has CUPTI 13.0.  torch's profiler is
the independent CUPTI measurement the issue allows instead.
"""
import json
import statistics
import sys

import cupy
import torch

cubin, mode = sys.argv[1], sys.argv[2]
mod = cupy.RawModule(path=cubin)
copy = mod.get_function("copy_f4")
spin = mod.get_function("spin")
nbytes = 1 << 30
a = torch.randn(nbytes // 4, device="cuda")
b = torch.empty_like(a)
sink = torch.zeros(1024, dtype=torch.int32, device="cuda")
l2 = torch.cuda.get_device_properties(0).L2_cache_size
flush = torch.empty((2 * l2) // (1 << 20) * (1 << 20), dtype=torch.int8, device="cuda")


def call_copy():
    copy((132 * 16,), (256,), (a.data_ptr(), b.data_ptr(), cupy.uint64(nbytes // 16)))


def call_spin():
    spin((1,), (32,), (cupy.uint64(20000), sink.data_ptr()))


kernels = {"copy_f4": call_copy, "spin": call_spin}
if mode == "plain":
    for name, fn in kernels.items():
        for _ in range(8):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    sys.exit(0)

for name, fn in kernels.items():
    torch.cuda.synchronize()
    fn()
    torch.cuda.synchronize()
    for _ in range(15):
        flush.zero_()
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            flush.zero_()
            torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
    durs = [e.device_time for e in prof.events() if e.name == name]
    print(json.dumps({"kernel": name, "torch_cupti_median_ns": 1000 * statistics.median(durs),
                      "n": len(durs)}))
