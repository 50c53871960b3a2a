"""Build an exported Solution the way FlashInfer-Bench's TVM-FFI builder does,
without FlashInfer-Bench or torch, and look its entry point up.

The steps of flashinfer_bench 0.1.2 compile/builders/tvm_ffi_builder.py,
TVMFFIBuilder.build (the same at the main branch, 40e6ca78, which adds the
CUDA library flags and the RTLD_NOW probe, both done here): write every
source under the build folder by its path; compile the .cu files with nvcc
and the .cpp/.cc/.cxx/.c files with the host compiler through
tvm_ffi.cpp.build, with the build folder as the include path; load the module
with tvm_ffi.load_module and take the function named after '::' in
spec.entry_point ("Entry point '...' not found in module" otherwise).

usage: python3 fib_tvm_ffi_build.py SOLUTION.json BUILD_DIR
Prints one JSON line: {"ok": true, "library": ..., "entry": ...} or
{"ok": false, "stage": "build" | "load" | "entry", "error": ...}; exit 0 / 1.
Without a GPU set TVM_FFI_CUDA_ARCH_LIST (e.g. "9.0"): tvm_ffi asks
nvidia-smi for the architecture otherwise.
"""

import ctypes
import json
import os
import pathlib
import re
import shutil
import sys


def main():
    sol = json.loads(pathlib.Path(sys.argv[1]).read_text())
    build = pathlib.Path(sys.argv[2]).resolve()
    build.mkdir(parents=True, exist_ok=True)
    entry_point = sol["spec"]["entry_point"]
    symbol = entry_point.split("::")[-1]
    cpp_files, cuda_files = [], []
    for src in sol["sources"]:
        p = build / src["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(src["content"])
        if p.suffix == ".cu":
            cuda_files.append(str(p))
        elif p.suffix in (".cpp", ".cc", ".cxx", ".c"):
            cpp_files.append(str(p))
    import tvm_ffi

    ldflags = ["-lcuda", "-lcublas"] if cuda_files else []
    nvcc = shutil.which("nvcc")
    if nvcc and cuda_files:
        lib = pathlib.Path(nvcc).resolve().parent.parent / "lib64"
        ldflags.insert(0, f"-L{lib}")
        stubs = lib / "stubs"  # libcuda.so without a driver
        if stubs.exists():
            ldflags.insert(1, f"-L{stubs}")
    name = "tvm_ffi_" + re.sub(r"[^0-9A-Za-z_]", "_", sol["name"])
    try:
        library = tvm_ffi.cpp.build(
            name=name,
            cpp_files=cpp_files,
            cuda_files=cuda_files,
            extra_include_paths=[str(build)],
            extra_ldflags=ldflags,
            build_directory=str(build),
        )
    except Exception as e:  # noqa: BLE001 - report whatever the build raised
        print(json.dumps({"ok": False, "stage": "build", "error": str(e)}))
        return 1
    try:
        ctypes.CDLL(library, mode=os.RTLD_NOW)
        mod = tvm_ffi.load_module(library)
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"ok": False, "stage": "load", "error": str(e)}))
        return 1
    try:
        getattr(mod, symbol)
    except AttributeError:
        print(json.dumps({"ok": False, "stage": "entry",
                          "error": f"Entry point '{symbol}' not found in module"}))
        return 1
    print(json.dumps({"ok": True, "library": library, "entry": symbol}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
