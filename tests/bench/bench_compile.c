/* bench_compile.c: compile time, side by side on one corpus (tests/bench/
 * corpus, *.cu: plain, fp16/bf16, cooperative_groups, cub), for
 *   cold      a new NVRTC program without a precompiled header
 *   warm      the same process compiled these includes before (-pch), in process
 *   warm-iso  warm, compiled in a forked child with a hard deadline (the
 *             in-process way to bound model-written code)
 *   server    a warm compile server (`khlua worker --role compile`, PCH warm
 *             for these includes), through the compile service: static
 *             checks and key here, the request and the cubin over the pipe,
 *             resources parsed again here (what a policy gets)
 *   cache     a repeat served by the in-memory artifact cache
 *   store     a repeat served by the store-backed cache through the service
 *             (record + cubin blob read back, cubin parsed), no server
 *   nvcc      nvcc -cubin, the anchor, run as a child process
 * Each warm/cold sample gets a unique trailing comment, so neither our cache
 * nor any NVRTC-internal cache can answer it.  Prints per-file p50s, per-
 * category p50/p95 and the ratios against nvcc measured in the same run.
 * The server modes need the khlua binary: --khlua PATH, else $KHLUA_BIN, else
 * ../khlua beside this program (the build tree); without it they are skipped.
 *   bench_compile [CORPUS_DIR] [--reps N] [--nvcc-reps N] [--khlua PATH] */
#include "compile/compile.h"
#include "compile/compile_service.h"
#include "compile/hostcc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { COLD, WARM, WARM_ISO, SERVER, CACHE, STORE, NVCC, NMODES };
static const char *const mode_name[NMODES] = {"cold", "warm", "warm-iso", "server",
                                              "cache", "store", "nvcc"};

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

static void push(samples *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    s->v[s->n++] = x;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(samples *s, double p)
{
    if (!s->n)
        return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp);
    size_t i = (size_t)(p * (double)(s->n - 1) + 0.5);
    return s->v[i];
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 64);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static const char *category(const char *src)
{
    if (strstr(src, "#include <cub/"))
        return "cub";
    if (strstr(src, "#include <cooperative_groups"))
        return "cg";
    if (strstr(src, "cuda_bf16.h") || strstr(src, "cuda_fp16.h"))
        return "fp16/bf16";
    return "plain";
}

static double timed_service(kh_compile_service *s, kh_store *db, kh_compile_req *req,
                            const char *file, const char *want_by)
{
    kh_artifact *a = NULL;
    kh_err err;
    double t0 = kh_now();
    kh_status st = kh_compile_service_build(s, db, req, &a, &err);
    double t = kh_now() - t0;
    if (st != KH_OK) {
        fprintf(stderr, "%s: %s: %s\n%s", file, kh_status_name(st), err.msg, a ? a->log : "");
        exit(1);
    }
    if (want_by && strcmp(a->served_by, want_by)) {
        fprintf(stderr, "%s: served by %s, expected %s\n", file, a->served_by, want_by);
        exit(1);
    }
    kh_artifact_free(a);
    return t;
}

static int cmpstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static double timed_build(kh_compiler *c, kh_compile_req *req, const char *file)
{
    kh_artifact *a = NULL;
    kh_err err;
    double t0 = kh_now();
    kh_status st = kh_compile_build(c, req, &a, &err);
    double t = kh_now() - t0;
    if (st != KH_OK) {
        fprintf(stderr, "%s: %s: %s\n%s", file, kh_status_name(st), err.msg, a ? a->log : "");
        exit(1);
    }
    kh_artifact_free(a);
    return t;
}

int main(int argc, char **argv)
{
    const char *dir = KH_SOURCE_DIR "/tests/bench/corpus";
    int reps = 5, nvcc_reps = 3;
    const char *khlua = getenv("KHLUA_BIN");
    char khlua_buf[4200];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--khlua") && i + 1 < argc)
            khlua = argv[++i];
        else if (!strcmp(argv[i], "--nvcc-reps") && i + 1 < argc)
            nvcc_reps = atoi(argv[++i]);
        else if (argv[i][0] != '-')
            dir = argv[i];
        else {
            fprintf(stderr, "usage: bench_compile [CORPUS_DIR] [--reps N] [--nvcc-reps N] "
                            "[--khlua PATH]\n");
            return 2;
        }
    }
    if (reps < 1 || nvcc_reps < 0)
        return 2;
    kh_err err;
    kh_engine *e = kh_engine_new(NULL, &err);
    const kh_nvrtc_api *nv = e ? kh_engine_nvrtc(e, &err) : NULL;
    if (!nv) {
        fprintf(stderr, "bench_compile: %s\n", err.msg);
        return 77;
    }
    kh_compiler *c = kh_compile_new(e, &err);
    if (!khlua) {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = '\0';
            char *slash = strrchr(self, '/');
            if (slash)
                *slash = '\0';
            snprintf(khlua_buf, sizeof khlua_buf, "%s/../khlua", self);
            khlua = khlua_buf;
        }
    }
    kh_compile_service *svc = NULL, *svc_store = NULL;
    kh_store *db = NULL;
    char store_dir[] = "/tmp/khlua-bench-store-XXXXXX";
    if (khlua && access(khlua, X_OK) == 0) {
        kh_compile_service_opts so = {.servers = 1, .exe = khlua};
        svc = kh_compile_service_new(e, &so, &err);
        kh_compile_service_opts ip = {.in_process = 1};
        svc_store = kh_compile_service_new(e, &ip, &err);
        if (!mkdtemp(store_dir) || kh_store_open(store_dir, NULL, &db, &err)) {
            fprintf(stderr, "bench_compile: no store: %s\n", err.msg);
            db = NULL;
        }
    } else {
        fprintf(stderr, "bench_compile: no khlua binary (--khlua): server modes skipped\n");
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "bench_compile: cannot open %s\n", dir);
        return 1;
    }
    char *files[256];
    size_t nf = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nf < 256) {
        size_t l = strlen(de->d_name);
        if (l > 3 && !strcmp(de->d_name + l - 3, ".cu"))
            files[nf++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(files, nf, sizeof *files, cmpstr);
    char tmp[] = "/tmp/khlua-bench-XXXXXX";
    if (!mkdtemp(tmp))
        return 1;

    /* first-call NVRTC initialisation is not part of any mode */
    const char *triv = "extern \"C\" __global__ void t(int *p) { p[0] = 1; }\n";
    kh_compile_req tr = {.source = triv, .source_len = strlen(triv), .trusted = 1,
                         .no_cache = 1, .no_pch = 1};
    timed_build(c, &tr, "init");

    static const char *const cats[] = {"plain", "fp16/bf16", "cg", "cub", "all"};
    samples per_cat[5][NMODES] = {{{0}}};
    printf("NVRTC %d.%d, arch %s, %d reps (nvcc %d), corpus %s (%zu files)\n\n", nv->major,
           nv->minor, kh_compile_default_arch(), reps, nvcc_reps, dir, nf);
    printf("%-22s %-10s %9s %9s %9s %9s %9s %9s %9s  (p50, ms)\n", "file", "category", "cold",
           "warm", "warm-iso", "server", "cache", "store", "nvcc");
    for (size_t fi = 0; fi < nf; fi++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, files[fi]);
        size_t len;
        char *base = slurp(path, &len);
        if (!base) {
            fprintf(stderr, "cannot read %s\n", path);
            return 1;
        }
        const char *cat = category(base);
        int ci = 0;
        while (strcmp(cats[ci], cat))
            ci++;
        samples m[NMODES] = {{0}};
        char *src = malloc(len + 128);
        for (int mode = COLD; mode <= WARM_ISO; mode++) {
            /* warm modes: one compile of these includes first, not counted */
            for (int r = -(mode != COLD); r < reps; r++) {
                int n = snprintf(src, len + 128, "%.*s// sample %d %d %s\n", (int)len, base,
                                 mode, r, files[fi]);
                kh_compile_req req = {.source = src, .source_len = (size_t)n, .name = files[fi],
                                      .no_cache = 1, .no_pch = mode == COLD,
                                      .isolate = mode == WARM_ISO, .deadline_s = 120};
                double t = timed_build(c, &req, files[fi]);
                if (r >= 0)
                    push(&m[mode], t);
            }
        }
        for (int r = -1; svc && r < reps; r++) {
            /* r = -1: this server compiles these includes once (warm PCH) */
            int n = snprintf(src, len + 128, "%.*s// sample %d %d %s\n", (int)len, base,
                             SERVER, r, files[fi]);
            kh_compile_req req = {.source = src, .source_len = (size_t)n, .name = files[fi],
                                  .no_cache = 1, .deadline_s = 120};
            double t = timed_service(svc, NULL, &req, files[fi], "server");
            if (r >= 0)
                push(&m[SERVER], t);
        }
        {
            kh_compile_req req = {.source = base, .source_len = len, .name = files[fi]};
            timed_build(c, &req, files[fi]); /* fills the cache */
            for (int r = 0; r < reps; r++)
                push(&m[CACHE], timed_build(c, &req, files[fi]));
        }
        if (db) {
            kh_compile_req req = {.source = base, .source_len = len, .name = files[fi],
                                  .deadline_s = 120};
            timed_service(svc_store, db, &req, files[fi], NULL); /* fills the store */
            for (int r = 0; r < reps; r++)
                push(&m[STORE], timed_service(svc_store, db, &req, files[fi], "store"));
        }
        char out[1400];
        snprintf(out, sizeof out, "%s/%s.cubin", tmp, files[fi]);
        for (int r = 0; r < nvcc_reps; r++) {
            kh_hostcc_result res;
            kh_status st = kh_hostcc_build(e, KH_HOSTCC_NVCC_CUBIN, path, out, NULL, NULL, 0, 300,
                                           &res, &err);
            if (st == KH_ENOTFOUND) {
                kh_hostcc_result_free(&res);
                break;
            }
            if (st) {
                fprintf(stderr, "%s: nvcc: %s\n%s", files[fi], err.msg, res.log);
                return 1;
            }
            push(&m[NVCC], res.seconds);
            kh_hostcc_result_free(&res);
        }
        unlink(out);
        printf("%-22s %-10s", files[fi], cat);
        for (int mode = 0; mode < NMODES; mode++) {
            printf(" %9.2f", pct(&m[mode], 0.5) * 1e3);
            for (size_t k = 0; k < m[mode].n; k++) {
                push(&per_cat[ci][mode], m[mode].v[k]);
                push(&per_cat[4][mode], m[mode].v[k]);
            }
            free(m[mode].v);
        }
        printf("\n");
        free(src);
        free(base);
        free(files[fi]);
    }
    rmdir(tmp);
    printf("\n%-10s %-9s %10s %10s %14s %14s\n", "category", "mode", "p50 ms", "p95 ms",
           "nvcc/mode p50", "mode/warm p50");
    for (int ci = 0; ci < 5; ci++) {
        double nvcc50 = pct(&per_cat[ci][NVCC], 0.5), warm50 = pct(&per_cat[ci][WARM], 0.5);
        for (int mode = 0; mode < NMODES; mode++) {
            samples *s = &per_cat[ci][mode];
            if (!s->n)
                continue;
            double p50 = pct(s, 0.5);
            printf("%-10s %-9s %10.3f %10.3f %13.1fx %13.2fx\n", cats[ci], mode_name[mode],
                   p50 * 1e3, pct(s, 0.95) * 1e3, nvcc50 > 0 ? nvcc50 / p50 : 0.0,
                   warm50 > 0 ? p50 / warm50 : 0.0);
        }
    }
    double w = pct(&per_cat[1][WARM], 0.5), h = pct(&per_cat[4][CACHE], 0.5);
    double nv_all = pct(&per_cat[4][NVCC], 0.5), w_all = pct(&per_cat[4][WARM], 0.5);
    printf("\ntargets (issue #5, for the H200 host): fp16/bf16 warm p50 %.1f ms (<= 30), "
           "cache hit p50 %.3f ms (<= 1), nvcc/warm %.1fx (>= 10)\n",
           w * 1e3, h * 1e3, w_all > 0 ? nv_all / w_all : 0.0);
    double sv = pct(&per_cat[1][SERVER], 0.5), sv_all = pct(&per_cat[4][SERVER], 0.5);
    double hs = pct(&per_cat[4][STORE], 0.5);
    if (sv_all > 0)
        printf("compile service: fp16/bf16 warm server p50 %.1f ms (%.2fx warm in process), "
               "store hit p50 %.3f ms, nvcc/server %.1fx\n",
               sv * 1e3, w > 0 ? sv / w : 0.0, hs * 1e3, nv_all / sv_all);
    for (int ci = 0; ci < 5; ci++)
        for (int mode = 0; mode < NMODES; mode++)
            free(per_cat[ci][mode].v);
    kh_compile_service_free(svc);
    kh_compile_service_free(svc_store);
    if (db) {
        kh_store_close(db);
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", store_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench_compile: could not remove %s\n", store_dir);
    }
    kh_compile_free(c);
    kh_engine_free(e);
    return 0;
}
