/* fib_export_image.c: the kernels an exported solution launches (fib_export.h).
 *
 * The same source does not give the same machine code under NVRTC (what
 * khlua compiles and times) and nvcc (what FlashInfer-Bench's builder runs):
 * gemm_n4096_k4096_mma_v1 takes 122 registers from NVRTC 13.0 and 102 from
 * nvcc 13.0 for sm_90a, and nvcc's build is 1.32x slower on an H100
 * (tests/bench/results/fib-roundtrip-20261205-cupti-h100.md).  So the
 * export carries the cubin khlua compiled, in kernels.cu as a byte array,
 * and binding.cu launches its kernels (cudaLibraryLoadData,
 * cudaLibraryGetKernel) on a GPU of the cubin's architecture; on any other
 * GPU, or when the image does not load, the kernels nvcc built from the same
 * source run (and say so once on stderr).  Without an image (--source-only)
 * only nvcc's build runs. */
#include "task/fib_export_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kh_status kh_fib_image_arch(const char *arch, int *major, int *minor, int *exact, kh_err *err)
{
    /* sm_90, sm_90a, sm_100f: a cubin of sm_XY runs on X.Z for Z >= Y, one
     * of sm_XYa on X.Y alone (arch-specific features) */
    int n = 0;
    unsigned v = 0;
    if (!arch || sscanf(arch, "sm_%u%n", &v, &n) != 1 || v < 10 || v > 1000 ||
        (arch[n] && strcmp(arch + n, "a") && strcmp(arch + n, "f")))
        return kh_err_set(err, KH_EINVAL, "architecture '%s': expected sm_XY, sm_XYa or sm_XYf "
                          "(a cubin's)", arch ? arch : "(none)");
    *major = (int)(v / 10);
    *minor = (int)(v % 10);
    *exact = arch[n] == 'a';
    return KH_OK;
}

/* buf is open_memstream's: set by fclose, so read after it */
static char *finish(FILE *f, char **buf)
{
    if (fclose(f)) {
        free(*buf);
        return NULL;
    }
    return *buf;
}

char *kh_fib_image_array(const kh_fib_export_opts *o)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "\n// The cubin khlua compiled from this source and timed (%s, %s; %zu bytes):\n"
               "// binding.cu launches its kernels on a GPU of that architecture.\n"
               "static const unsigned char khlua_export_image_bytes[%zu] "
               "__attribute__((aligned(8))) = {",
            o->image_arch, o->image_about ? o->image_about : "NVRTC", o->image_len, o->image_len);
    for (size_t i = 0; i < o->image_len; i++)
        fprintf(f, "%s0x%02x,", i % 16 ? " " : "\n    ", o->image[i]);
    fprintf(f, "\n};\n\nextern \"C\" __attribute__((visibility(\"hidden\"))) const unsigned char *"
               "khlua_export_image(unsigned long long *n)\n{\n"
               "    *n = sizeof khlua_export_image_bytes;\n"
               "    return khlua_export_image_bytes;\n}\n");
    return finish(f, &buf);
}

/* One kernel name per distinct manifest kernel, in launch order. */
static size_t distinct(const kh_task_manifest *m, const char **names, size_t cap)
{
    size_t n = 0;
    for (size_t k = 0; k < m->nlaunches; k++) {
        size_t j = 0;
        while (j < n && strcmp(names[j], m->launches[k].kernel))
            j++;
        if (j == n && n < cap)
            names[n++] = m->launches[k].kernel;
    }
    return n;
}

/* The kernels a manifest launches fit the kernel table, and the cubin to
 * embed (o->image) is one: KH_EUNSUPPORTED or KH_EINVAL naming sname. */
kh_status kh_fib_kernels_check(const kh_task_manifest *m, const kh_fib_export_opts *o,
                               const char *sname, kh_err *err)
{
    const char *seen[KH_FIB_MAX_KERNELS];
    size_t nk = 0;
    for (size_t k = 0; k < m->nlaunches; k++) {
        size_t j = 0;
        while (j < nk && strcmp(seen[j], m->launches[k].kernel))
            j++;
        if (j < nk)
            continue;
        if (nk == KH_FIB_MAX_KERNELS)
            return kh_err_set(err, KH_EUNSUPPORTED, "solution %s: its manifest launches "
                              "more than %d distinct kernels", sname, KH_FIB_MAX_KERNELS);
        seen[nk++] = m->launches[k].kernel;
    }
    if (o && o->image) {
        int major, minor, exact;
        if (!o->image_len)
            return kh_err_set(err, KH_EINVAL, "solution %s: an empty cubin to embed", sname);
        if (kh_fib_image_arch(o->image_arch, &major, &minor, &exact, err))
            return kh_err_prefix(err, "solution %s: the cubin to embed", sname);
    }
    return KH_OK;
}

size_t kh_fib_kernel_index(const kh_task_manifest *m, size_t launch)
{
    const char *names[KH_FIB_MAX_KERNELS];
    size_t n = distinct(m, names, KH_FIB_MAX_KERNELS);
    for (size_t j = 0; j < n; j++)
        if (!strcmp(names[j], m->launches[launch].kernel))
            return j;
    return 0;
}

/* What resolves the kernels: one table per device, filled at its first call. */
static const char resolver[] =
    "\n"
    "struct KernelTable {\n"
    "    std::once_flag once;\n"
    "    const void *func[kKernels];\n"
    "};\n"
    "KernelTable kernel_table[kMaxDevices];\n"
    "\n"
    "const char *kernels_from(bool image, int device)\n"
    "{\n"
    "    (void)device;\n"
    "    return image ? \"the kernels of the embedded cubin khlua compiled and timed\"\n"
    "                 : \"the kernels nvcc built from the source\";\n"
    "}\n"
    "\n"
    "void resolve(int device, KernelTable *t)\n"
    "{\n"
    "    bool image = false;\n";

/* with an image: it when the GPU fits and it loads */
static const char resolver_image[] =
    "#if KHLUA_EXPORT_HAS_IMAGE\n"
    "    // KHLUA_EXPORT_KERNELS=source: nvcc's build everywhere (to compare the two)\n"
    "    const char *want = std::getenv(\"KHLUA_EXPORT_KERNELS\");\n"
    "    int major = 0, minor = 0;\n"
    "    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),\n"
    "               \"cudaDeviceGetAttribute(ComputeCapabilityMajor)\");\n"
    "    check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),\n"
    "               \"cudaDeviceGetAttribute(ComputeCapabilityMinor)\");\n"
    "    bool fits = major == kImageMajor &&\n"
    "                (kImageExact ? minor == kImageMinor : minor >= kImageMinor);\n"
    "    if (fits && !(want && !std::strcmp(want, \"source\"))) {\n"
    "        static std::mutex mutex;\n"
    "        static cudaLibrary_t library;\n"
    "        static bool tried;\n"
    "        static cudaError_t loaded = cudaSuccess;\n"
    "        std::lock_guard<std::mutex> lock(mutex);\n"
    "        if (!tried) {\n"
    "            tried = true;\n"
    "            unsigned long long n = 0;\n"
    "            const unsigned char *bytes = khlua_export_image(&n);\n"
    "            loaded = cudaLibraryLoadData(&library, bytes, nullptr, nullptr, 0, nullptr,\n"
    "                                         nullptr, 0);\n"
    "        }\n"
    "        cudaError_t e = loaded;\n"
    "        const char *what = \"cudaLibraryLoadData\";\n"
    "        for (int k = 0; k < kKernels && e == cudaSuccess; k++) {\n"
    "            cudaKernel_t kernel = nullptr;\n"
    "            e = cudaLibraryGetKernel(&kernel, library, kKernelNames[k]);\n"
    "            what = kKernelNames[k];\n"
    "            t->func[k] = reinterpret_cast<const void *>(kernel);\n"
    "        }\n"
    "        image = e == cudaSuccess;\n"
    "        if (!image)\n"
    "            std::fprintf(stderr, \"%s: the embedded %s cubin did not load (%s: %s): \"\n"
    "                         \"the kernels nvcc built from the source run instead\\n\",\n"
    "                         kSolution, kImageArch, what, cudaGetErrorString(e));\n"
    "    } else if (!fits) {\n"
    "        std::fprintf(stderr, \"%s: device %d is compute capability %d.%d, the embedded \"\n"
    "                     \"cubin is %s: the kernels nvcc built from the source run (their \"\n"
    "                     \"code may differ from what khlua timed)\\n\", kSolution, device, major,\n"
    "                     minor, kImageArch);\n"
    "    }\n"
    "#endif\n";

static const char resolver_tail[] =
    "    if (!image)\n"
    "        for (int k = 0; k < kKernels; k++)\n"
    "            t->func[k] = kKernelStubs[k]();\n"
    "    if (std::getenv(\"KHLUA_EXPORT_REPORT\"))\n"
    "        std::fprintf(stderr, \"%s: device %d runs %s\\n\", kSolution, device,\n"
    "                     kernels_from(image, device));\n"
    "}\n"
    "\n"
    "const void *kernel_func(int device, int k)\n"
    "{\n"
    "    KernelTable &t = kernel_table[device];\n"
    "    std::call_once(t.once, resolve, device, &t);\n"
    "    return t.func[k];\n"
    "}\n";

char *kh_fib_kernel_table(const kh_task_manifest *m, const kh_fib_export_opts *o)
{
    const char *names[KH_FIB_MAX_KERNELS];
    size_t n = distinct(m, names, KH_FIB_MAX_KERNELS);
    int has_image = o && o->image && o->image_len;
    int major = 0, minor = 0, exact = 0;
    kh_err e;
    if (has_image && kh_fib_image_arch(o->image_arch, &major, &minor, &exact, &e))
        return NULL; /* the caller checked the arch */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fprintf(f, "\n// The kernels: ");
    if (has_image)
        fprintf(f, "on a GPU of compute capability %d.%d%s, those of the cubin khlua\n"
                   "// compiled and timed (%s, %s), embedded in kernels.cu; elsewhere those nvcc\n"
                   "// builds from the same source (NVRTC and nvcc can emit different code).\n"
                   "#define KHLUA_EXPORT_HAS_IMAGE 1\n"
                   "constexpr int kImageMajor = %d, kImageMinor = %d;\n"
                   "constexpr bool kImageExact = %s;\n"
                   "const char kImageArch[] = \"%s\";\n",
                major, minor, exact ? "" : " or a later minor", o->image_arch,
                o->image_about ? o->image_about : "NVRTC", major, minor,
                exact ? "true" : "false", o->image_arch);
    else
        fprintf(f, "those nvcc builds from the source (exported with --source-only).\n"
                   "#define KHLUA_EXPORT_HAS_IMAGE 0\n");
    fprintf(f, "constexpr int kKernels = %zu;\nconst char *const kKernelNames[kKernels] = {", n);
    for (size_t j = 0; j < n; j++)
        fprintf(f, "%s\"%s\"", j ? ", " : "", names[j]);
    fprintf(f, "};\nconst void *(*const kKernelStubs[kKernels])(void) = {");
    for (size_t j = 0; j < n; j++)
        fprintf(f, "%skhlua_export_kernel_%s", j ? ", " : "", names[j]);
    fprintf(f, "};\n%s%s%s", resolver, has_image ? resolver_image : "", resolver_tail);
    return finish(f, &buf);
}
