/* bench_timing.c: khlua's official timing against independent measurements
 * of the same kernels (issue #7, Done-when items 4 and 5).
 *   bench_timing CUBIN_OUT          compile copy_f4 and spin (NVRTC, sm_90a),
 *                                   write the cubin to CUBIN_OUT, time both
 *                                   with the official protocol in a gpu worker
 *                                   (CUPTI), print one JSON line per kernel
 * tests/bench/timing.sh runs it, then ncu (gpu__time_duration.sum) and an
 * independent CUPTI measurement through torch's profiler on the same cubin,
 * and prints the ratios.  Needs a GPU; prints "skipped" without one. */
#include "compile/compile.h"
#include "core/doctor.h"
#include "worker/supervisor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *src =
    "__device__ unsigned long long gtimer() {\n"
    "  unsigned long long t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n"
    "extern \"C\" __global__ void copy_f4(const float4* __restrict__ a, float4* __restrict__ b,\n"
    "                                     unsigned long long n4) {\n"
    "  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "       i < n4; i += (unsigned long long)gridDim.x * blockDim.x) b[i] = a[i]; }\n"
    "extern \"C\" __global__ void spin(unsigned long long ns, int *sink) {\n"
    "  unsigned long long t0 = gtimer(); while (gtimer() - t0 < ns) {}\n"
    "  if (threadIdx.x == 0) sink[blockIdx.x] = 1; }\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_timing CUBIN_OUT\n");
        return 2;
    }
    json_t *probe = NULL;
    if (kh_doctor_probe_gpus(60, &probe, NULL) != KH_OK ||
        json_array_size(json_object_get(probe, "gpus")) == 0) {
        printf("skipped: no GPU on this machine\n");
        return 0;
    }
    json_decref(probe);
    kh_err err;
    kh_engine *e = kh_engine_new(NULL, &err);
    kh_compiler *c = kh_compile_new(e, &err);
    const char *kernels[] = {"copy_f4", "spin"};
    kh_compile_req req = {.source = src, .source_len = strlen(src), .arch = "sm_90a",
                          .kernels = kernels, .n_kernels = 2, .trusted = 1};
    kh_artifact *a = NULL;
    if (kh_compile_build(c, &req, &a, &err)) {
        fprintf(stderr, "compile: %s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(a->cubin, 1, a->cubin_len, f) != a->cubin_len) {
        fprintf(stderr, "cannot write %s\n", argv[1]);
        return 1;
    }
    fclose(f);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    /* the khlua binary sits one folder up from tests/ */
    char khlua[4200];
    snprintf(khlua, sizeof khlua, "%s", exe);
    char *slash = strrchr(khlua, '/');
    if (slash)
        *slash = '\0';
    slash = strrchr(khlua, '/');
    if (slash)
        strcpy(slash, "/khlua");
    kh_wproc_opts o = {.role = "gpu", .exe = khlua, .hello_timeout_s = 60};
    kh_pool *p = kh_pool_new(&o, 1, &err);
    kh_msg reply;
    json_t *lp = json_pack("{s:s}", "module", "bench");
    if (kh_pool_call(p, "load", lp, a->cubin, a->cubin_len, 60, &reply, &err)) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    kh_msg_free(&reply);
    json_decref(lp);
    size_t bytes = 1u << 30;
    json_t *specs[2] = {
        json_pack("{s:[{s:s, s:I}, {s:s, s:I, s:s}], s:[{s:s, s:[i], s:[i], s:[{s:s}, {s:s}, "
                  "{s:I}]}]}", "buffers", "name", "a", "bytes", (json_int_t)bytes, "name", "b",
                  "bytes", (json_int_t)bytes, "init", "none", "launches", "kernel", "copy_f4",
                  "grid", 132 * 16, "block", 256, "args", "buf", "a", "buf", "b", "u64",
                  (json_int_t)(bytes / 16)),
        json_pack("{s:[{s:s, s:I, s:s}], s:[{s:s, s:[i], s:[i], s:[{s:I}, {s:s}]}]}", "buffers",
                  "name", "sink", "bytes", (json_int_t)4096, "init", "zero", "launches",
                  "kernel", "spin", "grid", 1, "block", 32, "args", "u64", (json_int_t)20000,
                  "buf", "sink")};
    const char *names[2] = {"copy_f4", "spin"};
    for (int k = 0; k < 2; k++) {
        json_t *params = json_pack("{s:s, s:o, s:s}", "module", "bench", "spec", specs[k],
                                   "protocol", "official");
        if (kh_pool_call(p, "time", params, NULL, 0, 300, &reply, &err)) {
            fprintf(stderr, "time: %s\n", err.msg);
            return 1;
        }
        json_t *r = json_object_get(reply.head, "result");
        printf("{\"kernel\": \"%s\", \"khlua_official_ns\": %.1f, \"khlua_window_ns\": %.1f, "
               "\"sum_kernel_ns\": %.1f, \"timer\": \"%s\"}\n", names[k],
               json_number_value(json_object_get(r, "latency_ns")),
               json_number_value(json_object_get(r, "window_latency_ns")),
               json_number_value(json_object_get(r, "sum_kernel_ns")),
               json_string_value(json_object_get(r, "timer")));
        kh_msg_free(&reply);
        json_decref(params);
    }
    kh_pool_free(p);
    kh_artifact_free(a);
    kh_compile_free(c);
    kh_engine_free(e);
    return 0;
}
