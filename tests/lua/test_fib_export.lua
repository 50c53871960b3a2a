-- test_fib_export.lua: `khlua export solution` (issue 22, FlashInfer-Bench
-- round trip): a khlua CUDA solution becomes a FlashInfer-Bench Solution whose
-- sources FlashInfer-Bench's own TVM-FFI builder compiles and whose entry,
-- binding.cu::run, its benchmark calls (inputs, then outputs).  Checked here:
-- the Solution's fields and files, from a file, a solution name, a run's
-- incumbent and a candidate record; the generated C++ for every kind of
-- expression and argument; every refusal and usage error with its message;
-- then, where the tools are (each such test skips otherwise, saying which is
-- missing), the generated files compiled by nvcc with FlashInfer-Bench's
-- flags against TVM-FFI's headers for the fixture and every CUDA package's
-- baseline in kernels/, and the builder's own steps (tvm_ffi.cpp.build,
-- load_module, the entry looked up) followed by calls with host tensors that
-- each check must refuse.  TVM-FFI's headers come from KHLUA_TVM_FFI_INCLUDE
-- or from the Python in KHLUA_TVM_FFI_PYTHON (default python3) that imports
-- tvm_ffi; nvcc from CUDA_HOME (default /usr/local/cuda).
local T = require "testlib"
local kh = require "kh"

local SRC = os.getenv("KH_SOURCE_DIR") or "."
local FIX = SRC .. "/tests/fixtures/task/fib_export"
local FIX_SOL = FIX .. "/solutions/scale_rows_f32_cuda.json"
local RMS = SRC .. "/tests/fixtures/task/rmsnorm"
local BUILD = SRC .. "/tests/lua/lib/fib_tvm_ffi_build.py"

local function sh_ok(cmd) return os.execute(cmd .. " >/dev/null 2>&1") == true end

local function capture(cmd)
  local p = assert(io.popen(cmd .. " 2>&1 </dev/null", "r"))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

local function decode_last_json(out)
  local line
  for l in out:gmatch("[^\n]+") do if l:match("^{") then line = l end end
  T.ok(line, "a JSON summary line in: " .. out)
  return kh.json.decode(line)
end

-- export what (a file, a name, a run or candidate id) into a fresh folder;
-- returns the summary and the Solution
local function export(what, task, extra, store)
  local dir = T.tmpdir() .. "/out"
  local args = {}
  if store then args = { "--store", store } end
  for _, a in ipairs { "export", "solution", what, "--task", task, "--out", dir, "--json" } do
    args[#args + 1] = a
  end
  for _, a in ipairs(extra or {}) do args[#args + 1] = a end
  local out, code = T.khlua(table.unpack(args))
  T.eq(code, 0, out)
  local sum = decode_last_json(out)
  return sum, kh.json.decode(T.read(sum.solution)), dir
end

local function source(sol, path)
  for _, s in ipairs(sol.sources) do if s.path == path then return s.content end end
  error("no source " .. path .. " in the Solution", 2)
end

local function plain(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

-- the tools the compile tests need, or why they are missing
local CUDA_HOME = os.getenv("CUDA_HOME") or "/usr/local/cuda"
local NVCC = CUDA_HOME .. "/bin/nvcc"
local PY = os.getenv("KHLUA_TVM_FFI_PYTHON") or "python3"
local TVM_INC = os.getenv("KHLUA_TVM_FFI_INCLUDE")
if not TVM_INC or TVM_INC == "" then
  local out, code = capture(T.quote(PY) .. " -c 'import tvm_ffi.libinfo as l; "
    .. "print(l.find_include_path())'")
  TVM_INC = code == 0 and out:match("([^\n]+)\n?$") or nil
end
local function need_nvcc()
  if not sh_ok(T.quote(NVCC) .. " --version") then T.skip("no nvcc at " .. NVCC) end
  if not TVM_INC or not io.open(TVM_INC .. "/tvm/ffi/function.h") then
    T.skip("no TVM-FFI headers (pip install apache-tvm-ffi; set KHLUA_TVM_FFI_PYTHON or "
      .. "KHLUA_TVM_FFI_INCLUDE)")
  end
end

-- nvcc as FlashInfer-Bench's TVM-FFI builder runs it on an H200 (tvm_ffi
-- cpp/extension.py: -Xcompiler -fPIC -std=c++17 -O2, -gencode for the
-- device's compute capability, the build folder on the include path)
local function nvcc_compile(dir, file)
  local cmd = string.format("cd %s && %s -Xcompiler -fPIC -std=c++17 -O2 "
    .. "-gencode=arch=compute_90,code=sm_90 -I%s -I. -c %s -o %s.o", T.quote(dir), T.quote(NVCC),
    T.quote(TVM_INC), T.quote(file), T.quote(file))
  local out, code = capture(cmd)
  T.eq(code, 0, "nvcc " .. dir .. "/" .. file .. ":\n" .. out)
end

T.test("--help says what it exports, from what, and where", function()
  local out, code = T.khlua("export", "--help")
  T.eq(code, 0, out)
  for _, w in ipairs { "export solution WHAT", "RUN", "CANDIDATE", "FILE", "NAME", "--task DIR",
                       "--out DIR", "--name NAME", "--json", "TVM-FFI", "binding.cu::run",
                       "--arch A", "--source-only", "embedded cubin" } do
    T.match(out, plain(w), "--help mentions " .. w)
  end
  T.match(T.khlua("--help"), "export%s+a solution as FlashInfer%-Bench runs it")
end)

T.test("usage errors exit 2 and say what is missing", function()
  local cases = {
    { { "export" }, "usage: khlua" },
    { { "export", "kernel", "x" }, "expected 'solution', got 'kernel'" },
    { { "export", "solution", "--task", FIX, "--out", "/tmp/x" }, "which solution%?" },
    { { "export", "solution", FIX_SOL, "--out", "/tmp/x" }, "%-%-task DIR is required" },
    { { "export", "solution", FIX_SOL, "--task", FIX }, "%-%-out DIR is required" },
    { { "export", "solution", FIX_SOL, "--task", FIX, "--out", "/tmp/x", "--bogus" },
      "unexpected argument '%-%-bogus'" },
    { { "export", "solution", FIX_SOL, "--task" }, "unexpected argument '%-%-task' %(it needs a value%)" },
  }
  for _, c in ipairs(cases) do
    local out, code = T.khlua(table.unpack(c[1]))
    T.eq(code, 2, table.concat(c[1], " ") .. ": " .. out)
    T.match(out, c[2])
  end
end)

T.test("a Solution file becomes a FlashInfer-Bench Solution with a TVM-FFI entry", function()
  local orig = kh.json.decode(T.read(FIX_SOL))
  local sum, sol, dir = export(FIX_SOL, FIX)
  T.eq(sum.from.kind, "file")
  T.eq(sol.name, "scale_rows_f32_cuda")
  T.eq(sol.definition, "scale_rows_f32")
  T.eq(sol.author, "khlua-test")
  T.eq(sol.spec.language, "cuda")
  T.eq(sol.spec.entry_point, "binding.cu::run")
  T.eq(sol.spec.binding, "tvm-ffi")
  T.eq(sol.spec.destination_passing_style, true)
  T.eq(#sol.spec.dependencies, 0)
  T.eq(sol.spec.target_hardware[1], "cuda")
  -- the manifest stays, for reading (FlashInfer-Bench ignores unknown keys),
  -- under a key khlua does not take for a launch manifest
  T.eq(sol.spec.khlua, nil)
  T.eq(kh.json.encode(sol.spec.khlua_manifest), kh.json.encode(orig.spec.khlua))
  T.match(sol.description, "^Two launches.*%[khlua export: binding%.cu::run launches the kernels "
    .. "of scale_rows%.cuh %(compiled by kernels%.cu; on sm_%d+a? GPUs, those of the cubin khlua "
    .. "compiled from it and timed, embedded in kernels%.cu%)")
  -- three sources: the kernel source unchanged (renamed so the builder does
  -- not compile it on its own), the wrapper that compiles it, the entry
  local paths = {}
  for _, s in ipairs(sol.sources) do paths[#paths + 1] = s.path end
  T.eq(table.concat(paths, " "), "scale_rows.cuh kernels.cu binding.cu")
  T.eq(source(sol, "scale_rows.cuh"), orig.sources[1].content)
  T.eq(sum.kernel_file, "scale_rows.cuh")
  T.eq(sum.wrapper_file, "kernels.cu")
  T.eq(sum.entry_file, "binding.cu")
  -- each written beside the Solution, the same bytes
  for _, p in ipairs(paths) do T.eq(T.read(dir .. "/" .. p), source(sol, p)) end
  T.eq(#sum.sources, 3)

  local w = source(sol, "kernels.cu")
  T.match(w, '#include "scale_rows%.cuh"')
  for _, k in ipairs { "sr_partial", "sr_apply" } do
    T.match(w, 'extern "C" __attribute__%(%(visibility%("hidden"%)%)%) const void %*'
      .. "khlua_export_kernel_" .. k .. "%(void%)\n{\n    return reinterpret_cast<const void %*>%(&::"
      .. k .. "%);")
  end

  local b = source(sol, "binding.cu")
  local want = {
    -- destination-passing style: inputs (scalars as numbers), then outputs
    "void run(TensorView in_x, TensorView in_bias, double sc_alpha, int64_t sc_offset, "
      .. "TensorView out_y, TensorView out_row_sum)",
    "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, khlua_export::run);",
    -- every tensor checked; var axes from the first tensor carrying them
    "check_tensor(in_x, \"input 'x'\", 2, \"float32\", 2, 2, 32);",
    "check_tensor(out_row_sum, \"output 'row_sum'\", 1, \"float32\", 2, 2, 32);",
    "const int64_t ax_rows = in_x.size(0);",
    "const int64_t ax_cols = in_x.size(1);",
    "const int64_t ax_tile = INT64_C(128);",
    "check_dim(in_bias, \"input 'bias'\", 0, ax_cols, \"cols\");",
    "check_dim(out_row_sum, \"output 'row_sum'\", 0, ax_rows, \"rows\");",
    "check_device(out_y, \"output 'y'\", device);",
    -- the expressions, with khlua's checked arithmetic and their columns
    "khx::mul(khx::mul(INT64_C(4), ax_rows, 3), khx::ceil_div(ax_cols, ax_tile, 12), 10)",
    "khx::sub(khx::mul(khx::max(khx::floormod(ax_rows, INT64_C(7), 10), INT64_C(1)), INT64_C(16), "
      .. "18), khx::min(ax_rows, INT64_C(0)), 23)",
    "khx::floordiv(ax_rows, ax_cols, 45)",
    "return khx::min(ax_rows, INT64_C(65535));",
    "khx::floordiv(ax_cols, INT64_C(2), 13)", -- x.shape[-1] // 2: the axis of that dimension
    "return khx::ceil_div(ax_cols, ax_tile, 1);", -- y.shape[1]
    "((ax_rows) > (INT64_C(0)) ? INT64_C(1) : INT64_C(0))",
    "((((ax_cols) == (INT64_C(0)) ? INT64_C(1) : INT64_C(0))) == 0 ? INT64_C(1) : INT64_C(0))",
    " != 0 && (",
    " != 0 || (",
    "((ax_cols) != (ax_cols) ? INT64_C(1) : INT64_C(0))",
    "khx::neg(INT64_C(0), 67)",
    "((ax_rows) >= (INT64_C(1)) ? INT64_C(1) : INT64_C(0))",
    "((ax_cols) <= (INT64_C(1)) ? INT64_C(1) : INT64_C(0))",
    "((ax_rows) < (INT64_C(0)) ? INT64_C(1) : INT64_C(0))",
    -- arguments in the manifest's order, each in its own type
    "put(slot1[0], in_x.data_ptr());",
    "put(slot1[1], ws_partial);",
    "put(slot1[2], static_cast<int32_t>(value(\"launch 1 (sr_partial) argument 3\", \"rows\"",
    "put(slot1[3], static_cast<int64_t>(value(\"launch 1 (sr_partial) argument 4\", \"cols\"",
    "put(slot1[4], static_cast<uint32_t>(",
    "put(slot1[5], static_cast<uint64_t>(",
    "put(slot2[2], static_cast<float>(sc_alpha));",
    "put(slot2[3], static_cast<int32_t>(sc_offset));",
    "put(slot2[5], out_y.data_ptr());",
    "put(slot2[6], out_row_sum.data_ptr());",
    "put(slot2[8], static_cast<int32_t>(", -- the default type of a value
    -- launches: dimensions checked, each launch's error checked
    "check_launch(1, \"sr_partial\", grid1, block1, shared1);",
    -- each kernel through the table: the embedded cubin's, or nvcc's build
    "const char *const kKernelNames[kKernels] = {\"sr_partial\", \"sr_apply\"};",
    "kKernelStubs[kKernels])(void) = {khlua_export_kernel_sr_partial, khlua_export_kernel_sr_apply};",
    "launch(kernel_func(device, 0), 1, \"sr_partial\", grid1, block1, shared1, params1,",
    "launch(kernel_func(device, 1), 2, \"sr_apply\", grid2, block2, shared2, params2,",
    "cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, device));",
    -- the workspace: one zeroed, one not
    "check_cuda(cudaMemsetAsync(ws_partial, 0, static_cast<size_t>(ws_partial_bytes), stream),",
  }
  for _, s in ipairs(want) do T.match(b, plain(s), "binding.cu has " .. s) end
  T.ok(not b:find("cudaMemsetAsync(ws_scratch", 1, true), "scratch is not zeroed")
  T.ok(not b:find("#include \"scale_rows", 1, true), "the entry does not include the kernels")
  -- nothing launches before every check and expression has passed
  T.ok(b:find("check_launch(2", 1, true) < b:find("    check_device(in_x", 1, true))
  T.ok(b:find("    check_device(in_x", 1, true) < b:find("DeviceGuard guard", 1, true))
  T.ok(b:find("DeviceGuard guard", 1, true) < b:find("launch(kernel_func(device, 0)", 1, true))
end)

T.test("a solution of the task by name, renamed with --name; the rmsnorm fixture", function()
  local sum, sol, dir = export("scale_rows_f32_cuda", FIX, { "--name", "scale_rows_fib" })
  T.eq(sum.from.kind, "name")
  T.eq(sol.name, "scale_rows_fib")
  T.eq(sum.solution, dir .. "/scale_rows_fib.json")
  T.match(source(sol, "binding.cu"), 'const char kSolution%[%] = "scale_rows_fib";')
  -- bf16 tensors, a float32 scalar, a workspace; its source file renamed .cuh
  local orig = kh.json.decode(T.read(RMS .. "/solutions/rmsnorm_h512_cuda_v1.json"))
  local _, rsol = export(RMS .. "/solutions/rmsnorm_h512_cuda_v1.json", RMS)
  T.eq(source(rsol, "rmsnorm.cuh"), orig.sources[1].content)
  local b = source(rsol, "binding.cu")
  T.match(b, plain("void run(TensorView in_hidden_states, TensorView in_weight, double sc_eps, "
    .. "TensorView out_output)"))
  T.match(b, plain("check_tensor(in_hidden_states, \"input 'hidden_states'\", 2, \"bfloat16\", 4, 4, 16);"))
  T.match(b, plain("const int64_t ax_hidden_size = INT64_C(512);"))
end)

-- the fixture's solution with part of sr_apply in a header it includes
local AFFINE = "    y[i] = alpha * x[i] + bias[c] + (float)offset;\n"
local function two_source_solution()
  local s = kh.json.decode(T.read(FIX_SOL))
  local src = s.sources[1].content
  local at = src:find(AFFINE, 1, true)
  assert(at, "the fixture's sr_apply changed: update this test")
  src = src:sub(1, at - 1) .. "    y[i] = sr_affine(alpha, x[i], bias[c], offset);\n" .. src:sub(at + #AFFINE)
  src = src:gsub("#include <cuda/std/cstdint>\n", '#include <cuda/std/cstdint>\n#include "sr_util.cuh"\n', 1)
  s.sources = { { path = "scale_rows.cu", content = src },
                { path = "sr_util.cuh", content = "#pragma once\n__device__ __forceinline__ float "
                  .. "sr_affine(float a, float x, float b, int o)\n{\n    return a * x + b + "
                  .. "(float)o;\n}\n" } }
  local p = T.tmpdir() .. "/scale_rows_2src.json"
  T.write(p, kh.json.encode(s))
  return p, s
end

-- an ELF64 file's sections by name
local function elf_sections(elf)
  T.eq(elf:sub(1, 4), "\127ELF", "an ELF image")
  local shoff = string.unpack("<I8", elf, 0x28 + 1)
  local shentsize, shnum, shstrndx = string.unpack("<I2I2I2", elf, 0x3A + 1)
  local function sh(i)
    local name, _, _, _, off, size = string.unpack("<I4I4I8I8I8I8", elf, shoff + i * shentsize + 1)
    return name, off, size
  end
  local _, stroff = sh(shstrndx)
  local out = {}
  for i = 0, shnum - 1 do
    local n, off, size = sh(i)
    out[elf:match("^[^%z]*", stroff + n + 1)] = elf:sub(off + 1, off + size)
  end
  return out
end

-- the byte array kernels.cu embeds
local function embedded_image(kernels_cu)
  local body = kernels_cu:match("khlua_export_image_bytes%[%d+%][^=]*= {(.-)\n};")
  T.ok(body, "kernels.cu holds the image's bytes")
  local bytes = {}
  for h in body:gmatch("0x(%x%x)") do bytes[#bytes + 1] = string.char(tonumber(h, 16)) end
  return table.concat(bytes)
end

T.test("the export embeds the cubin khlua compiled and times, and launches it on its architecture", function()
  local orig = kh.json.decode(T.read(FIX_SOL))
  local sum, sol = export(FIX_SOL, FIX)
  local img = embedded_image(source(sol, "kernels.cu"))
  -- what eval compiles: the entry source through NVRTC for the default arch
  local a = assert(kh.compile.build { source = orig.sources[1].content, name = "scale_rows.cu",
                                      kernels = { "sr_partial", "sr_apply" } })
  T.eq(sum.image.arch, a.arch)
  T.eq(sum.image.compile_key, a.hash)
  T.eq(sum.image.bytes, #img)
  T.eq(sol.spec.khlua_image.arch, a.arch)
  T.eq(sol.spec.khlua_image.bytes, #img)
  T.match(sol.spec.khlua_image.compiled_by, "^NVRTC %d+%.%d+, compile key " .. a.hash .. "$")
  -- the same machine code (the line tables name the files differently)
  local mine, eval = elf_sections(img), elf_sections(a.cubin)
  for _, k in ipairs { "sr_partial", "sr_apply" } do
    T.ok(eval[".text." .. k] and #eval[".text." .. k] > 0, "NVRTC's cubin has " .. k)
    T.eq(mine[".text." .. k], eval[".text." .. k], "the embedded " .. k .. " is NVRTC's")
  end
  -- binding.cu launches the image's kernels on a GPU of that compute capability only
  local b = source(sol, "binding.cu")
  local major, minor, suffix = a.arch:match("^sm_(%d+)(%d)(%a?)$")
  for _, w in ipairs { "#define KHLUA_EXPORT_HAS_IMAGE 1",
                       "constexpr int kImageMajor = " .. major .. ", kImageMinor = " .. minor .. ";",
                       "constexpr bool kImageExact = " .. (suffix == "a" and "true" or "false") .. ";",
                       "cudaLibraryLoadData(&library, bytes,", "cudaLibraryGetKernel(&kernel, library,",
                       "t->func[k] = kKernelStubs[k]();", "KHLUA_EXPORT_KERNELS" } do
    T.match(b, plain(w), "binding.cu has " .. w)
  end

  -- another architecture: its own cubin, and the rule for plain sm_XY (later minors too)
  local s80, x80 = export(FIX_SOL, FIX, { "--arch", "sm_80" })
  T.eq(s80.image.arch, "sm_80")
  T.ne(s80.image.compile_key, a.hash)
  T.eq(x80.spec.khlua_image.arch, "sm_80")
  local b80 = source(x80, "binding.cu")
  T.match(b80, plain("constexpr int kImageMajor = 8, kImageMinor = 0;"))
  T.match(b80, plain("constexpr bool kImageExact = false;"))
  T.eq(elf_sections(embedded_image(source(x80, "kernels.cu")))[".text.sr_apply"] ~= nil, true)

  -- --source-only: nvcc's build everywhere, nothing embedded, and it says so
  local dir = T.tmpdir() .. "/src_only"
  local out, code = T.khlua("export", "solution", FIX_SOL, "--task", FIX, "--out", dir, "--source-only")
  T.eq(code, 0, out)
  T.match(out, "no cubin embedded %(%-%-source%-only%): nvcc's build of the source runs")
  local so = kh.json.decode(T.read(dir .. "/scale_rows_f32_cuda.json"))
  T.eq(so.spec.khlua_image, nil)
  T.ok(not source(so, "kernels.cu"):find("khlua_export_image", 1, true), "no image in kernels.cu")
  T.ok(not source(so, "binding.cu"):find("khlua_export_image", 1, true), "no image in binding.cu")
  T.match(source(so, "binding.cu"), plain("#define KHLUA_EXPORT_HAS_IMAGE 0"))
  T.match(T.khlua("export", "solution", FIX_SOL, "--task", FIX, "--out", dir .. "2"),
    "embeds the sm_%d+a? cubin khlua compiled %(NVRTC")

  -- a source that does not compile is refused (unless --source-only), naming the line
  local bad = kh.json.decode(T.read(FIX_SOL))
  bad.sources[1].content = bad.sources[1].content .. "\nstatic int broken = ;\n"
  local bp = T.tmpdir() .. "/bad.json"
  T.write(bp, kh.json.encode(bad))
  out, code = T.khlua("export", "solution", bp, "--task", FIX, "--out", T.tmpdir() .. "/bad")
  T.eq(code, 1, out)
  T.match(out, "it does not compile %(khlua compiles the kernels to embed their cubin; "
    .. "%-%-source%-only embeds none%)")
  T.match(out, "scale_rows%.cu%(%d+%): error")
  out, code = T.khlua("export", "solution", bp, "--task", FIX, "--out", T.tmpdir() .. "/bad2",
    "--source-only")
  T.eq(code, 0, out)
  -- a bad architecture, and --arch with --source-only
  out, code = T.khlua("export", "solution", FIX_SOL, "--task", FIX, "--out", T.tmpdir() .. "/a",
    "--arch", "gfx90a")
  T.eq(code, 1, out)
  T.match(out, "gfx90a")
  out, code = T.khlua("export", "solution", FIX_SOL, "--task", FIX, "--out", T.tmpdir() .. "/a",
    "--arch", "sm_90a", "--source-only")
  T.eq(code, 2, out)
  T.match(out, "%-%-source%-only embeds none")
end)

T.test("a solution of two sources: the header is written beside the renamed entry that includes it", function()
  local p, orig = two_source_solution()
  local sum, sol, dir = export(p, FIX)
  local paths = {}
  for _, s in ipairs(sol.sources) do paths[#paths + 1] = s.path end
  T.eq(table.concat(paths, " "), "scale_rows.cuh sr_util.cuh kernels.cu binding.cu")
  T.eq(source(sol, "scale_rows.cuh"), orig.sources[1].content)
  T.eq(source(sol, "sr_util.cuh"), orig.sources[2].content)
  T.match(source(sol, "scale_rows.cuh"), '#include "sr_util%.cuh"')
  T.match(source(sol, "kernels.cu"), '#include "scale_rows%.cuh"')
  for _, f in ipairs(paths) do T.eq(T.read(dir .. "/" .. f), source(sol, f)) end
  T.eq(#sum.sources, 4)
end)

T.test("a solution of two sources: kernels.cu compiles with nvcc, the header found beside", function()
  if not sh_ok(T.quote(NVCC) .. " --version") then T.skip("no nvcc at " .. NVCC) end
  local p = two_source_solution()
  local _, _, dir = export(p, FIX)
  -- the builder's flags for a .cu (tvm_ffi cpp/extension.py), without TVM-FFI:
  -- kernels.cu includes only the solution's own files
  local out, code = capture(string.format("cd %s && %s -Xcompiler -fPIC -std=c++17 -O2 "
    .. "-gencode=arch=compute_90,code=sm_90 -I. -c kernels.cu -o kernels.o", T.quote(dir),
    T.quote(NVCC)))
  T.eq(code, 0, out)
  if TVM_INC and io.open(TVM_INC .. "/tvm/ffi/function.h") then nvcc_compile(dir, "binding.cu") end
end)

T.test("an export placed in a package is read as FlashInfer-Bench reads it: task check warns, passes", function()
  local pkg = T.tmpdir() .. "/pkg"
  T.ok(sh_ok("cp -r '" .. FIX .. "' '" .. pkg .. "'"))
  local _, sol = export("scale_rows_f32_cuda", FIX, { "--name", "scale_rows_exported" })
  local f = assert(io.open(pkg .. "/solutions/scale_rows_exported.json", "w"))
  f:write(kh.json.encode(sol))
  f:close()
  local out, code = T.khlua("task", "check", pkg)
  T.eq(code, 0, out)
  T.match(out, plain("solution 'scale_rows_exported' (cuda, tvm-ffi) has no khlua manifest"))
  -- and eval refuses it by name, in the same words, rather than mis-running it
  local eout, ecode = T.khlua("eval", "--task", pkg, "--solution", "scale_rows_exported")
  T.ok(ecode ~= 0, eout)
  T.match(eout, plain("has no khlua manifest"))
end)

-- a store holding the fixture's solution as a candidate, promoted in a run
local function store_with_candidate(manifest_backend)
  local path = T.tmpdir() .. "/store"
  local orig = kh.json.decode(T.read(FIX_SOL))
  local db <close> = assert(kh.store.open(path))
  local task = "task-scale_rows_f32"
  local man = orig.spec.khlua
  if manifest_backend then man = { backend = manifest_backend, ["function"] = "f", args = {} } end
  local blob = assert(db:put_blob(orig.sources[1].content))
  -- a candidate record from before candidates had one identity (it names its
  -- first run's solution and model), in a hand-made run
  local cand, run = "candidate-" .. blob, "run-HANDMADE0000001"
  T.import(path, { { type = "task", id = task, name = "scale_rows_f32" },
    { type = "candidate", id = cand, task = task, source_blob = blob, manifest = man,
      solution_name = "scale_rows_promoted", origin = "model", model = "replay" },
    { type = "run", id = run, policy = "handmade", task = task, incumbent_candidate = cand } })
  return path, run, cand, orig
end

T.test("a run's incumbent (as khlua best finds it) and a candidate record", function()
  local store, run, cand, orig = store_with_candidate()
  for _, what in ipairs { run, "last", cand } do
    local sum, sol = export(what, FIX, nil, store)
    T.eq(sum.from.kind, what == cand and "candidate" or "run")
    T.eq(sum.from.candidate, cand)
    if what ~= cand then T.eq(sum.from.run, run) end
    T.eq(sol.name, "scale_rows_promoted")
    T.eq(sol.author, "replay")
    T.eq(sol.spec.entry_point, "binding.cu::run")
    -- khlua best names the source kernel.cu: here kernel.cuh, byte for byte
    T.eq(source(sol, "kernel.cuh"), orig.sources[1].content)
    T.match(source(sol, "binding.cu"), plain("launch(kernel_func(device, 1), 2,"))
  end
end)

T.test("refusals exit 1 and name what is wrong", function()
  local store, run = store_with_candidate("host")
  local tmp = T.tmpdir()
  local function variant(name, edit)
    local s = kh.json.decode(T.read(FIX_SOL))
    edit(s)
    local p = tmp .. "/" .. name .. ".json"
    T.write(p, kh.json.encode(s))
    return p
  end
  local cases = {
    { { "run-NOPE", FIX }, "run%-NOPE: no such run in the store %(khlua store ls %-%-type run lists them%)" },
    { { "candidate-NOPE", FIX }, "candidate%-NOPE: no such candidate in the store" },
    { { "no_such_solution", FIX }, "no_such_solution: not a file, a run %(run%-%.%.%., last%), a "
      .. "candidate %(candidate%-%.%.%.%) nor a solution of" },
    { { FIX_SOL, tmp .. "/missing" }, "%-%-task: .*/missing: No such file" },
    -- host C and trusted shared objects: FlashInfer-Bench hands every solution CUDA tensors
    { { run, FIX }, "runs on khlua's host backend %(C on host pointers%); FlashInfer%-Bench has no "
      .. "CPU form to export it to: its benchmark puts every input on the GPU" },
    { { RMS .. "/solutions/rmsnorm_h512_ref_c.json", RMS }, "rmsnorm_h512_ref_c runs on khlua's host backend" },
    { { SRC .. "/kernels/gemm_n4096_k4096/solutions/gemm_n4096_k4096_cublas.json",
        SRC .. "/kernels/gemm_n4096_k4096" }, "is a trusted shared object %(backend cuda_so%)" },
    -- a definition the task does not have
    { { RMS .. "/solutions/rmsnorm_h512_cuda_v1.json", FIX },
      "its definition 'rmsnorm_h512' is not in %-%-task .*fib_export" },
    -- an axis no tensor carries: the entry cannot know it
    { { variant("unused_axis", function(s)
          s.spec.khlua.launches[1].grid = { "ceil_div(cols, tile)", "unused" } end), FIX },
      "solution scale_rows_f32_cuda: launch 1 %(sr_partial%) grid%.y 'unused': column 1: axis "
      .. "'unused' is in no tensor's shape, so the entry cannot know its value" },
    -- tensor data in a manifest (the task layer refuses it first)
    { { variant("data", function(s) s.spec.khlua.launches[1].block = "x[0].item()" end), FIX },
      "reads tensor data" },
    -- a second compiled source would be built on its own next to the wrapper
    { { variant("two_tu", function(s)
          s.sources[2] = { path = "helpers.cu", content = "// helpers\n" } end), FIX },
      "source 'helpers%.cu' would be compiled on its own by FlashInfer%-Bench's builder" },
    -- value-returning style: khlua's kernels write outputs the caller allocates
    { { variant("vrs", function(s) s.spec.destination_passing_style = false end), FIX },
      "destination_passing_style" },
  }
  for _, c in ipairs(cases) do
    local out, code = T.khlua("--store", store, "export", "solution", c[1][1], "--task", c[1][2],
      "--out", tmp .. "/out")
    T.eq(code, 1, c[1][1] .. ": " .. out)
    T.match(out, c[2])
    T.match(out, "^khlua export: ")
  end
  T.ok(not io.open(tmp .. "/out/scale_rows_f32_cuda.json"), "nothing written by a refusal")
end)

T.test("the generated files compile with nvcc against TVM-FFI's headers", function()
  need_nvcc()
  for _, c in ipairs { { FIX_SOL, FIX }, { RMS .. "/solutions/rmsnorm_h512_cuda_v1.json", RMS } } do
    local _, _, dir = export(c[1], c[2])
    nvcc_compile(dir, "kernels.cu")
    nvcc_compile(dir, "binding.cu")
  end
end)

T.test("every CUDA package's baseline in kernels/ exports and compiles", function()
  need_nvcc()
  local p = assert(io.popen("ls -d " .. T.quote(SRC) .. "/kernels/*/"))
  local n, refused = 0, 0
  for pkg in p:lines() do
    pkg = pkg:gsub("/$", "")
    local f = io.open(pkg .. "/definition.json")
    if f then
      local def = kh.json.decode(f:read("a"))
      f:close()
      local base = def.khlua and def.khlua.baseline
      if base then
        local sol = kh.json.decode(T.read(pkg .. "/solutions/" .. base .. ".json"))
        if sol.spec.khlua and (sol.spec.khlua.backend or "cuda") == "cuda" then
          local _, x, dir = export(base, pkg)
          T.eq(x.spec.entry_point, "binding.cu::run")
          nvcc_compile(dir, "kernels.cu")
          nvcc_compile(dir, "binding.cu")
          n = n + 1
        else
          local out, code = T.khlua("export", "solution", base, "--task", pkg, "--out",
            T.tmpdir() .. "/o")
          T.eq(code, 1, out)
          T.match(out, "host backend")
          refused = refused + 1
        end
      end
    end
  end
  p:close()
  io.write("# ", n, " CUDA baselines exported and compiled, ", refused, " host ones refused\n")
  T.ok(n >= 8, "the CUDA packages of kernels/ (rmsnorm, gemm, gdn, dsa, moe, ...)")
end)

T.test("FlashInfer-Bench's build steps load it, find run, and run refuses bad tensors", function()
  need_nvcc()
  if not sh_ok(T.quote(PY) .. " -c 'import tvm_ffi'") then T.skip(PY .. " cannot import tvm_ffi") end
  if not sh_ok("ninja --version") and not sh_ok(T.quote(PY) .. " -c 'import ninja'") then
    T.skip("no ninja (tvm_ffi.cpp.build runs it)")
  end
  local _, _, dir = export(FIX_SOL, FIX)
  local build = T.tmpdir() .. "/build"
  -- without a GPU tvm_ffi cannot ask nvidia-smi for the architecture: the H200's
  local out, code = capture("TVM_FFI_CUDA_ARCH_LIST=9.0 " .. T.quote(PY) .. " " .. T.quote(BUILD)
    .. " " .. T.quote(dir .. "/scale_rows_f32_cuda.json") .. " " .. T.quote(build))
  T.eq(code, 0, out)
  local res = decode_last_json(out)
  T.eq(res.ok, true)
  T.eq(res.entry, "run")
  if not sh_ok(T.quote(PY) .. " -c 'import numpy'") then T.skip(PY .. " has no numpy for the calls") end
  -- host tensors: each check fires in turn; tensors that pass them all reach
  -- the device check, so nothing is launched on a machine without a GPU
  local script = T.tmpdir() .. "/calls.py"
  T.write(script, [[
import sys, numpy as np, tvm_ffi
fn = tvm_ffi.load_module(sys.argv[1]).run
def t(*shape, dt=np.float32): return tvm_ffi.from_dlpack(np.zeros(shape, dt))
cases = [
    ("rank", (t(3, 300, 1), t(300), 0.5, 2, t(3, 300), t(3))),
    ("dtype", (t(3, 300), t(300, dt=np.float64), 0.5, 2, t(3, 300), t(3))),
    ("dim", (t(3, 300), t(301), 0.5, 2, t(3, 300), t(3))),
    ("outdim", (t(3, 300), t(300), 0.5, 2, t(3, 300), t(4))),
    ("dense", (tvm_ffi.from_dlpack(np.zeros((300, 3), np.float32).T), t(300), 0.5, 2, t(3, 300), t(3))),
    ("divzero", (t(3, 0), t(0), 0.5, 2, t(3, 0), t(3))),
    ("grid", (t(0, 300), t(300), 0.5, 2, t(0, 300), t(0))),
    ("device", (t(3, 300), t(300), 0.5, 2, t(3, 300), t(3))),
    ("arity", (t(3, 300), t(300), 0.5, t(3, 300), t(3))),
]
for name, args in cases:
    try:
        fn(*args)
        print(name, "RETURNED")
    except Exception as e:
        print(name, type(e).__name__, str(e).strip().splitlines()[-1])
]])
  out, code = capture(T.quote(PY) .. " " .. T.quote(script) .. " " .. T.quote(res.library))
  T.eq(code, 0, out)
  local want = {
    rank = "ValueError scale_rows_f32_cuda: input 'x': expected 2 dimensions, got 3",
    dtype = "TypeError scale_rows_f32_cuda: input 'bias': expected dtype float32 (DLPack code 2, "
      .. "32 bits), got code 2, 64 bits, 1 lanes",
    dim = "ValueError scale_rows_f32_cuda: input 'bias': dimension 0 (cols) expected 300, got 301",
    outdim = "ValueError scale_rows_f32_cuda: output 'row_sum': dimension 0 (rows) expected 3, got 4",
    dense = "ValueError scale_rows_f32_cuda: input 'x': expected a contiguous tensor",
    divzero = "ValueError scale_rows_f32_cuda: workspace 'scratch' bytes 'max(rows % 7, 1) * 16 - "
      .. "min(rows, 0) + rows // cols': column 45: division by zero (3 / 0)",
    grid = "ValueError scale_rows_f32_cuda: launch 1 (sr_partial): grid.y = 0, expected 1 to 65535",
    device = "ValueError scale_rows_f32_cuda: input 'x': expected a CUDA tensor on device 0, got "
      .. "device type 1 id 0",
    arity = "TypeError Mismatched number of arguments",
  }
  local seen = 0
  for line in out:gmatch("[^\n]+") do
    local name, rest = line:match("^(%S+) (.*)$")
    if want[name] then
      T.match(rest, "^" .. plain(want[name]), name)
      seen = seen + 1
    end
  end
  T.eq(seen, 9, out)
end)


T.test("scripts/fib_roundtrip.py --build-only: FlashInfer-Bench's own loader and builder take it", function()
  need_nvcc()
  local stub = SRC .. "/tests/lua/lib/torch_stub"
  -- FlashInfer-Bench imports torch at module level; without torch here, the stand-in
  local env = sh_ok(T.quote(PY) .. " -c 'import torch'") and "" or ("PYTHONPATH=" .. T.quote(stub) .. " ")
  if not sh_ok(env .. T.quote(PY) .. " -c 'import flashinfer_bench, tvm_ffi'") then
    T.skip(PY .. " cannot import flashinfer_bench and tvm_ffi (pip install flashinfer-bench)")
  end
  local _, _, dir = export(FIX_SOL, FIX)
  local cache = T.tmpdir()
  local out, code = capture(env .. "FIB_CACHE_PATH=" .. T.quote(cache) .. " TVM_FFI_CUDA_ARCH_LIST=9.0 "
    .. T.quote(PY) .. " " .. T.quote(SRC .. "/scripts/fib_roundtrip.py") .. " " .. T.quote(dir)
    .. " " .. T.quote(FIX) .. " --build-only --json " .. T.quote(cache .. "/r.json"))
  T.eq(code, 0, out)
  T.match(out, "solution scale_rows_f32_cuda %(definition scale_rows_f32%): built in [%d.]+ s by "
    .. "tvm_ffi, entry binding%.cu::run, library " .. plain(cache))
  local r = kh.json.decode(T.read(cache .. "/r.json"))
  T.eq(r.build.status, "OK")
  T.eq(r.build.builder, "tvm_ffi")
end)
