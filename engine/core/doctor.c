/* doctor.c: the machine report behind `khlua doctor`.  Owns finding things
 * (libraries, GPUs, tools, keys) and describing them with a fix; it changes
 * nothing on the machine.  The GPU is looked at from a child process: forked,
 * or this executable afresh once the driver is loaded here. */
#include "core/doctor.h"

#include "core/proc.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void add_check(json_t *checks, const char *name, const char *status,
                      const char *detail, const char *fix)
{
    json_t *c = json_pack("{s:s, s:s, s:s}", "name", name, "status", status, "detail",
                          detail ? detail : "");
    if (c && fix && fix[0])
        json_object_set_new(c, "fix", json_string(fix));
    if (c)
        json_array_append_new(checks, c);
}

/* ---- GPU probe (child process) ------------------------------------------ */

/* A probe child's answer: out as compact JSON on fd (out is consumed). */
static int write_json(int fd, json_t *out)
{
    char *s = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (!s)
        return 3;
    size_t len = strlen(s), off = 0;
    while (off < len) {
        ssize_t w = write(fd, s + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(s);
    return off == len ? 0 : 3;
}

static int probe_child(void *arg, int fd)
{
    (void)arg;
    kh_cuda_api cu;
    kh_err err;
    json_t *out = json_object();
    if (kh_cuda_load(&cu, &err) != KH_OK) {
        json_object_set_new(out, "error", json_string(err.msg));
        json_object_set_new(out, "code", json_string("ENODEV"));
        goto done;
    }
    json_object_set_new(out, "library", json_string(cu.path));
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        char why[256], msg[400];
        kh_cuda_describe(&cu, r, why, sizeof why);
        snprintf(msg, sizeof msg, "cuInit failed: %s", why);
        json_object_set_new(out, "error", json_string(msg));
        json_object_set_new(out, "code", json_string(r == CUDA_ERROR_NO_DEVICE ? "ENODEV"
                                                                               : "ECUDA"));
        goto done;
    }
    int ver = 0, n = 0;
    cu.cuDriverGetVersion(&ver);
    char vs[32];
    snprintf(vs, sizeof vs, "%d.%d", ver / 1000, (ver % 1000) / 10);
    json_object_set_new(out, "cuda_driver_api", json_string(vs));
    cu.cuDeviceGetCount(&n);
    json_t *gpus = json_array();
    for (int i = 0; i < n; i++) {
        CUdevice d;
        if (cu.cuDeviceGet(&d, i) != CUDA_SUCCESS)
            continue;
        char name[256] = "";
        cu.cuDeviceGetName(name, sizeof name, d);
        int maj = 0, min = 0, sms = 0, l2 = 0, clk = 0, smem = 0, bus = 0, mclk = 0;
        cu.cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
        cu.cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
        cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
        cu.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d);
        cu.cuDeviceGetAttribute(&clk, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, d);
        cu.cuDeviceGetAttribute(&mclk, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, d);
        cu.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, d);
        cu.cuDeviceGetAttribute(&smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d);
        size_t mem = 0;
        cu.cuDeviceTotalMem(&mem, d);
        CUuuid u;
        char uuid[64] = "";
        if (cu.cuDeviceGetUuid(&u, d) == CUDA_SUCCESS) {
            const unsigned char *b = (const unsigned char *)u.bytes;
            snprintf(uuid, sizeof uuid,
                     "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                     b[12], b[13], b[14], b[15]);
        }
        char cc[16], arch[16];
        snprintf(cc, sizeof cc, "%d.%d", maj, min);
        snprintf(arch, sizeof arch, "sm_%d%d%s", maj, min, maj >= 9 ? "a" : "");
        json_array_append_new(
            gpus, json_pack("{s:i, s:s, s:s, s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:i, s:s}",
                            "index", i, "name", name, "compute_capability", cc, "arch", arch,
                            "memory_bytes", (json_int_t)mem, "sms", sms, "l2_bytes", l2,
                            "sm_clock_khz", clk, "memory_clock_khz", mclk,
                            "memory_bus_bits", bus, "max_shared_per_block_optin", smem,
                            "uuid", uuid));
    }
    json_object_set_new(out, "gpus", gpus);
done:
    return write_json(fd, out);
}

/* CUPTI's version and NVML's driver version, as JSON on fd (run in a child). */
static int libs_child(void *arg, int fd)
{
    const char *cuda_home = arg;
    json_t *out = json_object();
    kh_cupti_api cupti;
    kh_err err;
    if (kh_cupti_load(&cupti, cuda_home, &err) == KH_OK) {
        json_object_set_new(out, "cupti", json_pack("{s:I, s:s}", "version",
                                                    (json_int_t)cupti.version, "path",
                                                    cupti.path));
        kh_lib_close(cupti.handle);
    } else {
        json_object_set_new(out, "cupti", json_pack("{s:s}", "error", err.msg));
    }
    kh_nvml_api nvml;
    if (kh_nvml_load(&nvml, &err) == KH_OK) {
        char ver[96] = "";
        if (nvml.nvmlInit_v2() == 0) {
            nvml.nvmlSystemGetDriverVersion(ver, sizeof ver);
            nvml.nvmlShutdown();
        }
        json_object_set_new(out, "nvml", json_pack("{s:s, s:s}", "driver", ver, "path", nvml.path));
        kh_lib_close(nvml.handle);
    } else {
        json_object_set_new(out, "nvml", json_pack("{s:s}", "error", err.msg));
    }
    return write_json(fd, out);
}

/* The probe child's JSON as *out, or its error as the status. */
static kh_status probe_result(kh_child_result *res, json_t **out, kh_err *err)
{
    if (!(res->exited && res->exit_code == 0)) {
        char how[128];
        kh_child_describe(res, how, sizeof how);
        kh_err_set(err, KH_ECHILD, "the GPU probe process failed (%s)%s%.200s", how,
                   res->out && res->out[0] ? ": " : "", res->out ? res->out : "");
        kh_child_result_free(res);
        return KH_ECHILD;
    }
    json_error_t je;
    json_t *j = json_loads(res->out, 0, &je);
    kh_child_result_free(res);
    if (!j)
        return kh_err_set(err, KH_EPARSE, "the GPU probe wrote unreadable output: %s", je.text);
    json_t *e = json_object_get(j, "error");
    if (e) {
        const char *code = json_string_value(json_object_get(j, "code"));
        kh_status st = code && !strcmp(code, "ENODEV") ? KH_ENODEV : KH_ECUDA;
        kh_err_set(err, st, "%s", json_string_value(e));
        json_decref(j);
        return st;
    }
    *out = j;
    return KH_OK;
}

kh_status kh_doctor_probe_gpus_exec(const char *exe, double timeout_s, json_t **out, kh_err *err)
{
    *out = NULL;
    char self[4096];
    if (!exe) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return kh_err_set(err, KH_EIO, "cannot find this executable: %s", strerror(errno));
        self[n] = '\0';
        exe = self;
    }
    char *argv[] = {(char *)exe, "doctor", "--probe-gpus", NULL};
    kh_child_result res;
    kh_status st = kh_proc_run(argv, timeout_s, 1 << 20, &res, err);
    return st ? st : probe_result(&res, out, err);
}

kh_status kh_doctor_probe_gpus(double timeout_s, json_t **out, kh_err *err)
{
    *out = NULL;
    /* A forked child cannot initialise CUDA once this process has (cuInit
     * answers CUDA_ERROR_NOT_INITIALIZED): and NVRTC 13 loads and
     * initialises the driver during an in-process compile (a trusted
     * reference's), seen on the H200.  Then the probe runs in a fresh
     * process: this executable, `khlua doctor --probe-gpus`. */
    void *loaded = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (loaded) {
        dlclose(loaded);
        return kh_doctor_probe_gpus_exec(NULL, timeout_s, out, err);
    }
    kh_child_result res;
    kh_status st = kh_proc_fork_call(probe_child, NULL, timeout_s, 1 << 20, &res, err);
    return st ? st : probe_result(&res, out, err);
}

int kh_doctor_probe_gpus_main(void)
{
    return probe_child(NULL, STDOUT_FILENO);
}

/* ---- the report ---------------------------------------------------------- */

static void check_gpus(json_t *report, json_t *checks)
{
    json_t *probe = NULL;
    kh_err err;
    if (kh_doctor_probe_gpus(30.0, &probe, &err) != KH_OK) {
        add_check(checks, "cuda driver", "missing", err.msg,
                  "GPU features need an NVIDIA GPU with driver >= 580 (CUDA 13); "
                  "compile and host-backend work runs without one");
        json_object_set_new(report, "gpus", json_array());
        return;
    }
    char line[512];
    json_t *gpus = json_object_get(probe, "gpus");
    snprintf(line, sizeof line, "CUDA %s driver API, %zu GPU(s) (%s)",
             json_string_value(json_object_get(probe, "cuda_driver_api")),
             json_array_size(gpus), json_string_value(json_object_get(probe, "library")));
    add_check(checks, "cuda driver", json_array_size(gpus) ? "ok" : "missing", line,
              json_array_size(gpus) ? NULL : "no GPU visible: check CUDA_VISIBLE_DEVICES");
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g) {
        char name[32];
        snprintf(name, sizeof name, "gpu %zu", i);
        snprintf(line, sizeof line,
                 "%s, cc %s (%s), %.1f GiB, %d SMs, L2 %.1f MiB, %s",
                 json_string_value(json_object_get(g, "name")),
                 json_string_value(json_object_get(g, "compute_capability")),
                 json_string_value(json_object_get(g, "arch")),
                 (double)json_integer_value(json_object_get(g, "memory_bytes")) / 1073741824.0,
                 (int)json_integer_value(json_object_get(g, "sms")),
                 (double)json_integer_value(json_object_get(g, "l2_bytes")) / 1048576.0,
                 json_string_value(json_object_get(g, "uuid")));
        add_check(checks, name, "ok", line, NULL);
    }
    json_object_set(report, "gpus", gpus);
    json_object_set(report, "cuda_driver_api", json_object_get(probe, "cuda_driver_api"));
    json_decref(probe);
}

static void check_nvrtc(kh_engine *e, json_t *report, json_t *checks)
{
    kh_err err;
    const kh_nvrtc_api *nv = kh_engine_nvrtc(e, &err);
    if (!nv) {
        add_check(checks, "nvrtc", "missing", err.msg,
                  "install the CUDA 13 toolkit and set CUDA_HOME (kernels cannot be compiled)");
        json_object_set_new(report, "nvrtc", json_null());
        return;
    }
    int n = 0;
    json_t *archs = json_array();
    char list[256] = "";
    if (nv->nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0 && n < 256) {
        int a[256];
        if (nv->nvrtcGetSupportedArchs(a) == NVRTC_SUCCESS) {
            for (int i = 0; i < n; i++) {
                json_array_append_new(archs, json_integer(a[i]));
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%d", i ? " " : "", a[i]);
            }
        }
    }
    char line[768];
    snprintf(line, sizeof line, "%d.%d, archs %s (%s)", nv->major, nv->minor, list, nv->path);
    add_check(checks, "nvrtc", "ok", line, NULL);
    json_object_set_new(report, "nvrtc",
                        json_pack("{s:i, s:i, s:s, s:o}", "major", nv->major, "minor",
                                  nv->minor, "path", nv->path, "archs", archs));
}

/* Counter access is decided by the driver parameter RmProfilingAdminOnly. */
static void check_counters(json_t *checks, int have_cupti)
{
    FILE *f = fopen("/proc/driver/nvidia/params", "r");
    if (!f) {
        add_check(checks, "profiling counters", have_cupti ? "warn" : "missing",
                  "no NVIDIA driver parameters (/proc/driver/nvidia/params): cannot tell",
                  have_cupti ? "profile once to find out" : NULL);
        return;
    }
    char buf[256];
    int admin_only = -1;
    while (fgets(buf, sizeof buf, f))
        if (sscanf(buf, "RmProfilingAdminOnly: %d", &admin_only) == 1)
            break;
    fclose(f);
    if (admin_only == 0)
        add_check(checks, "profiling counters", "ok", "permitted for all users "
                  "(RmProfilingAdminOnly: 0)", NULL);
    else if (admin_only == 1 && geteuid() == 0)
        add_check(checks, "profiling counters", "ok", "admin-only, and khlua runs as root",
                  NULL);
    else if (admin_only == 1)
        add_check(checks, "profiling counters", "missing",
                  "admin-only (RmProfilingAdminOnly: 1) and khlua is not root",
                  "load the driver with NVreg_RestrictProfilingToAdminUsers=0, or run with "
                  "CAP_PERFMON; timings still work without counters");
    else
        add_check(checks, "profiling counters", "warn", "RmProfilingAdminOnly not reported",
                  NULL);
}

static void check_tool(json_t *report, json_t *checks, const char *name, const char *extra,
                       const char *fix)
{
    char *p = kh_which(name, extra);
    add_check(checks, name, p ? "ok" : "missing", p ? p : "not on PATH or under CUDA_HOME",
              p ? NULL : fix);
    json_object_set_new(json_object_get(report, "tools"), name, p ? json_string(p) : json_null());
    free(p);
}

/* The interpreter Python references run with ($KHLUA_PYTHON, else python3)
 * and whether it has torch: asked in a child with a deadline (importing
 * torch takes seconds; CUDA is not initialised there either). */
static void check_python(json_t *report, json_t *checks)
{
    const char *asked = NULL;
    char *py = kh_which_python(&asked);
    json_object_set_new(json_object_get(report, "tools"), "python3",
                        py ? json_string(py) : json_null());
    const char *fix = "definitions with only a Python reference (most of FlashInfer-Bench's) "
                      "need python3 with torch: pip install torch, or set KHLUA_PYTHON to an "
                      "interpreter that has it";
    if (!py) {
        char line[512];
        snprintf(line, sizeof line, "%s: not found", asked);
        add_check(checks, "python + torch", "missing", line, fix);
        json_object_set_new(report, "python", json_pack("{s:n}", "path"));
        return;
    }
    static const char code[] =
        "import sys\n"
        "try:\n"
        "    import torch\n"
        "    print(sys.version.split()[0], torch.__version__, torch.version.cuda or 'none')\n"
        "except Exception as e:\n"
        "    print(sys.version.split()[0], 'none', type(e).__name__)\n";
    char *argv[] = {py, (char *)"-c", (char *)code, NULL};
    kh_child_result res;
    kh_err err;
    char ver[64] = "", torch[64] = "", cuda[64] = "", line[1024];
    int ran = kh_proc_run(argv, 60, 4096, &res, &err) == KH_OK;
    int ok = ran && res.exited && res.exit_code == 0 && res.out &&
             sscanf(res.out, "%63s %63s %63s", ver, torch, cuda) == 3;
    if (!ok) {
        char how[128] = "could not run";
        if (ran)
            kh_child_describe(&res, how, sizeof how);
        snprintf(line, sizeof line, "%s did not answer (%s)", py, how);
        add_check(checks, "python + torch", "warn", line, fix);
    } else if (!strcmp(torch, "none")) {
        snprintf(line, sizeof line, "%s: Python %s without torch (%s)", py, ver, cuda);
        add_check(checks, "python + torch", "warn", line, fix);
    } else {
        snprintf(line, sizeof line, "%s: Python %s, torch %s (CUDA %s)", py, ver, torch, cuda);
        add_check(checks, "python + torch", "ok", line, NULL);
    }
    json_object_set_new(report, "python",
                        json_pack("{s:s, s:s?, s:s?, s:s?}", "path", py, "version",
                                  ok ? ver : NULL, "torch",
                                  ok && strcmp(torch, "none") ? torch : NULL, "torch_cuda",
                                  ok && strcmp(torch, "none") ? cuda : NULL));
    if (ran)
        kh_child_result_free(&res);
    free(py);
}

static void check_store(kh_engine *e, json_t *report, json_t *checks)
{
    const char *path = kh_engine_store_path(e);
    struct stat st;
    char line[1200];
    int exists = stat(path, &st) == 0;
    if (exists)
        snprintf(line, sizeof line, "%s (from %s, exists)", path, kh_engine_store_origin(e));
    else
        snprintf(line, sizeof line, "%s (from %s, created on first use)", path,
                 kh_engine_store_origin(e));
    add_check(checks, "store", "ok", line, NULL);
    json_object_set_new(report, "store", json_pack("{s:s, s:s, s:b}", "path", path, "origin",
                                                   kh_engine_store_origin(e), "exists",
                                                   exists));
}

/* Names only: a key's value never leaves the environment. */
static void check_keys(json_t *report, json_t *checks)
{
    static const char *const names[] = {"ANTHROPIC_API_KEY", "OPENAI_API_KEY",
                                        "KHLUA_API_KEY"};
    json_t *found = json_array();
    char line[256] = "";
    for (size_t i = 0; i < KH_ARRAY_LEN(names); i++) {
        const char *v = getenv(names[i]);
        if (v && v[0]) {
            json_array_append_new(found, json_string(names[i]));
            size_t l = strlen(line);
            snprintf(line + l, sizeof line - l, "%s%s", l ? ", " : "", names[i]);
        }
    }
    if (json_array_size(found))
        add_check(checks, "model keys", "ok", line, NULL);
    else
        add_check(checks, "model keys", "warn",
                  "none of ANTHROPIC_API_KEY, OPENAI_API_KEY, KHLUA_API_KEY is set",
                  "export one to use a hosted model; policies fall back to the replay "
                  "provider");
    json_object_set_new(report, "model_keys", found);
}

json_t *kh_doctor_report(kh_engine *e, kh_err *err)
{
    json_t *report = json_object();
    json_t *checks = json_array();
    if (!report || !checks) {
        json_decref(report);
        json_decref(checks);
        kh_err_set(err, KH_ENOMEM, "out of memory building the doctor report");
        return NULL;
    }
    json_object_set_new(report, "khlua",
                        json_pack("{s:s, s:s, s:s}", "version", KH_VERSION, "git", KH_GIT_REV,
                                  "cuda_home", kh_engine_cuda_home(e)));
    json_object_set_new(report, "checks", checks);
    json_object_set_new(report, "tools", json_object());

    check_gpus(report, checks);
    check_nvrtc(e, report, checks);

    /* CUPTI and NVML are asked in a child process too: a driver library
     * initialised here would make every later GPU probe a fresh process
     * (cuInit -> CUDA_ERROR_NOT_INITIALIZED in a fork). */
    json_t *libs = NULL;
    kh_err lerr;
    {
        kh_child_result res;
        if (kh_proc_fork_call(libs_child, (void *)kh_engine_cuda_home(e), 30.0, 1 << 16, &res,
                              &lerr) == KH_OK) {
            if (res.exited && res.exit_code == 0)
                libs = json_loads(res.out, 0, NULL);
            kh_child_result_free(&res);
        }
        if (!libs)
            libs = json_pack("{s:{s:s}, s:{s:s}}", "cupti", "error",
                             "the library probe process failed", "nvml", "error",
                             "the library probe process failed");
    }
    const json_t *cj = json_object_get(libs, "cupti"), *nj = json_object_get(libs, "nvml");
    int have_cupti = json_object_get(cj, "error") == NULL;
    if (have_cupti) {
        char line[700];
        snprintf(line, sizeof line, "API version %lld (%s)",
                 (long long)json_integer_value(json_object_get(cj, "version")),
                 json_string_value(json_object_get(cj, "path")));
        add_check(checks, "cupti", "ok", line, NULL);
    } else {
        add_check(checks, "cupti", "missing", json_string_value(json_object_get(cj, "error")),
                  "install the CUDA 13 toolkit's CUPTI; timing falls back to CUDA events");
    }
    json_object_set_new(report, "cupti", json_boolean(have_cupti));
    check_counters(checks, have_cupti);

    if (!json_object_get(nj, "error")) {
        const char *ver = json_string_value(json_object_get(nj, "driver"));
        char line[700];
        snprintf(line, sizeof line, "driver %s (%s)", ver && *ver ? ver : "?",
                 json_string_value(json_object_get(nj, "path")));
        add_check(checks, "nvml", "ok", line, NULL);
        json_object_set_new(report, "driver_version", json_string(ver ? ver : ""));
    } else {
        add_check(checks, "nvml", "missing", json_string_value(json_object_get(nj, "error")),
                  "clock and temperature guards need the NVIDIA driver's NVML");
    }
    json_decref(libs);

    char extra[1024];
    const char *ch = kh_engine_cuda_home(e);
    snprintf(extra, sizeof extra, "%s/bin:%s/compute-sanitizer:/opt/nvidia/nsight-compute/2025.3.1",
             ch, ch);
    check_tool(report, checks, "ncu", extra,
               "install Nsight Compute for the rich profiling tier (khlua profile --ncu)");
    check_tool(report, checks, "compute-sanitizer", extra,
               "install the CUDA toolkit's compute-sanitizer for the promotion-time checks");
    check_tool(report, checks, "nvcc", extra,
               "the trusted nvcc path (baselines) needs the CUDA toolkit's nvcc");
    check_tool(report, checks, "cc", NULL,
               "host-backend candidates need a C compiler: apt-get install gcc");
    check_python(report, checks);

    curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);
    char line[256];
    snprintf(line, sizeof line, "libcurl %s, %s", cv->version,
             cv->ssl_version ? cv->ssl_version : "no TLS");
    add_check(checks, "http client", cv->ssl_version ? "ok" : "warn", line,
              cv->ssl_version ? NULL : "hosted model APIs need libcurl with TLS");
    check_store(e, report, checks);
    check_keys(report, checks);
    return report;
}
