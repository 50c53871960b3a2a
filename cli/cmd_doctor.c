/* cmd_doctor.c: `khlua doctor [--json]`, the machine report as lines of
 * ok / missing / warn with a fix, or as JSON.  Exit 0 whenever it could look,
 * whatever it found. */
#include "commands.h"

#include "core/doctor.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: khlua doctor [--json]\n"
               "\n"
               "Reports what this machine offers khlua and what is missing, one line each:\n"
               "the CUDA driver and every GPU (name, compute capability, memory, SMs, L2),\n"
               "NVRTC and its architectures, CUPTI and profiling-counter permission, NVML,\n"
               "ncu, compute-sanitizer, nvcc, a C compiler, python3 with torch (for Python\n"
               "references; $KHLUA_PYTHON), the HTTP client, the store path, and which\n"
               "model-provider keys are set (names only).\n"
               "\n"
               "  --json   one JSON object instead of lines\n"
               "\n"
               "Exit 0 when it could look, whatever it found.\n");
}

int kh_cmd_doctor(kh_engine *e, int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--probe-gpus")) {
            /* internal: the GPU probe in a fresh process (doctor.h) */
            return kh_doctor_probe_gpus_main();
        } else {
            fprintf(stderr, "khlua doctor: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    kh_err err;
    json_t *r = kh_doctor_report(e, &err);
    if (!r) {
        fprintf(stderr, "khlua doctor: %s\n", err.msg);
        return 1;
    }
    if (json) {
        char *s = json_dumps(r, JSON_INDENT(2));
        if (s)
            puts(s);
        free(s);
        json_decref(r);
        return 0;
    }
    json_t *kv = json_object_get(r, "khlua");
    printf("khlua %s (%s), CUDA_HOME %s\n", json_string_value(json_object_get(kv, "version")),
           json_string_value(json_object_get(kv, "git")),
           json_string_value(json_object_get(kv, "cuda_home")));
    size_t i;
    json_t *c;
    int missing = 0;
    json_array_foreach(json_object_get(r, "checks"), i, c) {
        const char *status = json_string_value(json_object_get(c, "status"));
        const char *fix = json_string_value(json_object_get(c, "fix"));
        if (strcmp(status, "ok"))
            missing++;
        printf("  %-8s %-19s %s\n", status, json_string_value(json_object_get(c, "name")),
               json_string_value(json_object_get(c, "detail")));
        if (fix)
            printf("  %-8s %-19s fix: %s\n", "", "", fix);
    }
    printf("%zu checks, %d not ok\n", json_array_size(json_object_get(r, "checks")), missing);
    json_decref(r);
    return 0;
}
