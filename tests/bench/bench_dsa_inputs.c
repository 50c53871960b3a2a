/* bench_dsa_inputs.c: the coordinator's inputs for the DSA top-k evaluator
 * (engine/eval/pyref.c kh_pyref_inputs, dsa_kcache on), which regenerate the
 * random k cache for every seed it judges, against the anchor measured side
 * by side: the same inputs with the whole cache regenerated (what it did
 * before: kh_rng_fill_dsa_kcache over every page).  Runs on the package
 * kernels/dsa_topk_indexer_fp8_h64_d128_topk2048_ps64 (first N workloads,
 * default 3; its block_table / seq_lens blobs are in the tree).  Prints
 * seconds per seed for both and the ratio.  Not a test.
 *   bench_dsa_inputs [TASK_DIR] [N]   (from the source tree, or KH_SOURCE_DIR set) */
#include "bench_dsa.h"
#include "eval/pyref.h"
#include "task/rng.h"
#include "task/task.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    char dir[4096];
    int n;
    kh_err err;
    kh_task_set *s = bench_dsa_load("bench_dsa_inputs", argc, argv, dir, &n);
    if (!s)
        return 1;
    const kh_task_def *d = kh_task_def_at(s, 0);
    printf("bench_dsa_inputs: %s, seconds per seed (best of 2)\n", d->name);
    printf("%-38s %9s %10s %10s %8s\n", "workload", "pages", "reachable", "whole", "ratio");
    double sum_new = 0, sum_old = 0;
    for (int wi = 0; wi < n; wi++) {
        const kh_task_workload *w = kh_task_workload_at(s, (size_t)wi);
        if (!w)
            break;
        kh_tensor *ins[16] = {0};
        double best_new = 1e30, best_old = 1e30;
        int64_t pages = 0;
        for (int rep = 0; rep < 2; rep++) {
            double t0 = kh_now();
            if (kh_pyref_inputs(NULL, d, w, dir, 1000 + (uint64_t)rep, 1, 0, ins, &err)) {
                fprintf(stderr, "bench_dsa_inputs: %s\n", err.msg);
                return 1;
            }
            double t1 = kh_now();
            /* the anchor: the same inputs, then the whole cache */
            size_t ki = bench_dsa_input(d, "k_index_cache_fp8");
            pages = ins[ki]->shape[0];
            double t2 = kh_now();
            if (kh_rng_fill_dsa_kcache(NULL, ins[ki], 1000 + (uint64_t)rep, (uint32_t)ki, &err)) {
                fprintf(stderr, "bench_dsa_inputs: %s\n", err.msg);
                return 1;
            }
            double t3 = kh_now();
            best_new = t1 - t0 < best_new ? t1 - t0 : best_new;
            /* the whole-cache path also made the other inputs */
            best_old = (t3 - t2) + (t1 - t0) < best_old ? (t3 - t2) + (t1 - t0) : best_old;
            for (size_t i = 0; i < d->ninputs; i++)
                kh_tensor_free(ins[i]);
        }
        sum_new += best_new;
        sum_old += best_old;
        printf("%-38s %9lld %9.4fs %9.3fs %7.0fx\n", w->uuid, (long long)pages, best_new,
               best_old, best_old / best_new);
    }
    printf("all: reachable pages %.3f s, whole cache %.3f s per seed: %.0fx faster\n", sum_new,
           sum_old, sum_old / sum_new);
    kh_task_set_free(s);
    return 0;
}
