/* bench_scaleout.c: screened candidate-workloads per hour with 1, 2, 4 and 8
 * workers (issue 13), measured side by side in one run.
 *   bench_scaleout [--rounds R] [--workloads N] [--max-iters M] [--host]
 * On a machine with GPUs it runs kernels/rmsnorm_h4096's reference through
 * gpu workers (one per GPU while there are GPUs enough, then several per
 * GPU); elsewhere (or with --host) kernels/host_rmsnorm's C candidate
 * through host workers.  Each configuration keeps one evaluator (its workers
 * stay warm, the reference outputs are cached, as in a search); a first
 * round warms them all, then the configurations take turns, round by round,
 * so a change in the machine's load falls on all of them alike.  Prints, per
 * configuration, the median throughput and its ratio to 1 worker. */
#include "core/doctor.h"
#include "eval/eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int rounds = 3, nwl = 0, max_iters = 100, force_host = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workloads") && i + 1 < argc)
            nwl = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-iters") && i + 1 < argc)
            max_iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--host"))
            force_host = 1;
        else {
            fprintf(stderr, "usage: bench_scaleout [--rounds R] [--workloads N] [--max-iters M] "
                            "[--host]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 100) {
        fprintf(stderr, "bench_scaleout: --rounds must be 1 to 100\n");
        return 2;
    }
    size_t ngpu = 0;
    json_t *probe = NULL;
    if (!force_host && kh_doctor_probe_gpus(60, &probe, NULL) == KH_OK)
        ngpu = json_array_size(json_object_get(probe, "gpus"));
    json_decref(probe);

    /* the khlua binary: one folder up from tests/, the source tree beside it */
    char self[4096], khlua[4200], src[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(khlua, sizeof khlua, "%s", self);
    for (int k = 0; k < 2; k++) {
        char *sl = strrchr(khlua, '/');
        if (sl)
            *sl = '\0';
    }
    strcat(khlua, "/khlua");
    const char *sd = getenv("KH_SOURCE_DIR");
    snprintf(src, sizeof src, "%s", sd ? sd : KH_SOURCE_DIR);
    char task[4300];
    snprintf(task, sizeof task, "%s/kernels/%s", src, ngpu ? "rmsnorm_h4096" : "host_rmsnorm");
    const char *sol = ngpu ? "rmsnorm_h4096_ref_cuda" : "host_rmsnorm_h1024_c_v1";

    kh_err err;
    kh_engine *e = kh_engine_new(NULL, &err);
    if (!e) {
        fprintf(stderr, "bench_scaleout: %s\n", err.msg);
        return 1;
    }
    enum { NC = 4 };
    const int workers[NC] = {1, 2, 4, 8};
    kh_eval *ev[NC];
    kh_eval_opts o[NC];
    char gpus[NC][16], wl[16];
    kh_eval_config cfg = {.exe = khlua};
    snprintf(wl, sizeof wl, "%d", nwl);
    for (int c = 0; c < NC; c++) {
        if (!(ev[c] = kh_eval_new(e, &cfg, &err))) {
            fprintf(stderr, "bench_scaleout: %s\n", err.msg);
            return 1;
        }
        kh_eval_opts_default(&o[c]);
        o[c].protocol = "screen";
        o[c].max_iters = max_iters;
        o[c].record = 0;
        o[c].workloads = nwl > 0 ? wl : NULL;
        if (ngpu) {
            size_t g = (size_t)workers[c] < ngpu ? (size_t)workers[c] : ngpu;
            snprintf(gpus[c], sizeof gpus[c], "%zu", g);
            o[c].gpus = gpus[c];
            o[c].workers_per_gpu = (int)(((size_t)workers[c] + g - 1) / g);
        } else {
            o[c].host_workers = workers[c];
        }
    }
    printf("bench_scaleout: %s on %s, screen protocol (max %d timed calls), %d rounds\n", sol,
           ngpu ? "gpu workers" : "host workers", max_iters, rounds);
    if (ngpu)
        printf("  %zu GPU(s): workers beyond that share GPUs\n", ngpu);
    else
        printf("  %ld CPU core(s)\n", sysconf(_SC_NPROCESSORS_ONLN));
    double rate[NC][100];
    size_t nw = 0;
    for (int r = -1; r < rounds; r++) {
        for (int c = 0; c < NC; c++) {
            json_t *tr = NULL;
            double t0 = kh_now();
            if (kh_eval_run(ev[c], task, sol, &o[c], &tr, &err)) {
                fprintf(stderr, "bench_scaleout: %d workers: %s\n", workers[c], err.msg);
                return 1;
            }
            double dt = kh_now() - t0;
            size_t i, passed = 0;
            json_t *t;
            json_array_foreach(tr, i, t) {
                const char *s = json_string_value(
                    json_object_get(json_object_get(t, "evaluation"), "status"));
                passed += s && !strcmp(s, "PASSED");
            }
            nw = json_array_size(tr);
            if (passed != nw)
                fprintf(stderr, "bench_scaleout: %zu of %zu workloads not PASSED\n", nw - passed,
                        nw);
            json_decref(tr);
            if (r >= 0)
                rate[c][r] = (double)nw / dt * 3600.0;
            fprintf(stderr, "  round %d, %d workers: %zu workloads in %.2f s%s\n", r + 1,
                    workers[c], nw, dt, r < 0 ? " (warm-up)" : "");
        }
    }
    double med[NC];
    for (int c = 0; c < NC; c++) {
        qsort(rate[c], (size_t)rounds, sizeof rate[c][0], cmp_d);
        med[c] = rounds % 2 ? rate[c][rounds / 2]
                            : 0.5 * (rate[c][rounds / 2 - 1] + rate[c][rounds / 2]);
    }
    printf("%8s %24s %10s\n", "workers", "candidate-workloads/h", "vs 1");
    for (int c = 0; c < NC; c++)
        printf("%8d %24.0f %9.2fx\n", workers[c], med[c], med[c] / med[0]);
    printf("(%zu workloads a candidate; median of %d rounds)\n", nw, rounds);
    for (int c = 0; c < NC; c++)
        kh_eval_free(ev[c]);
    kh_engine_free(e);
    return 0;
}
