/* bench_kcache_fill.c: the DSA top-k k cache the coordinator regenerates for
 * every seed it judges (engine/task/rng.c kh_rng_fill_dsa_kcache_pages: each
 * token's 128 bf16 codes drawn once, pages split across the cores), against
 * the anchor measured side by side: the fill as it was before, each code
 * drawn twice (once for the token's amax, once to encode it) on one thread,
 * written here with the public per-element generator.  The bytes of both
 * must be the same (the bench stops if not).  Runs on the pages the first N
 * workloads of kernels/dsa_topk_indexer_fp8_h64_d128_topk2048_ps64 can reach
 * (default 8), one seed each.  Prints seconds per workload for both and the
 * ratio.  Not a test.
 *   bench_kcache_fill [TASK_DIR] [N]   (from the source tree, or KH_SOURCE_DIR set) */
#include "bench_dsa.h"
#include "task/dtype.h"
#include "eval/pyref.h"
#include "task/rng.h"
#include "task/task.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* float32 rounding of x, as a double */
static double f32(double x)
{
    return kh_dtype_decode(KH_DTYPE_F32, kh_dtype_encode(KH_DTYPE_F32, x));
}

/* the anchor: one token, two draws of every code */
static void old_token(uint64_t seed, uint32_t stream, uint64_t token, uint32_t ps, uint32_t D,
                      unsigned char *cache)
{
    unsigned char *pg = cache + token / ps * ps * (D + 4u);
    uint64_t off = token % ps;
    double amax = 0;
    for (uint32_t d = 0; d < D; d++) {
        double v = kh_dtype_decode(KH_DTYPE_BF16, kh_rng_code_at(KH_DTYPE_BF16, seed, stream,
                                                                 token * D + d));
        amax = fabs(v) > amax ? fabs(v) : amax;
    }
    if (amax < 9.99999974737875163555e-05)
        amax = 9.99999974737875163555e-05;
    double scale = f32(amax / 448.0), inv = f32(1.0 / scale);
    for (uint32_t d = 0; d < D; d++) {
        double v = kh_dtype_decode(KH_DTYPE_BF16, kh_rng_code_at(KH_DTYPE_BF16, seed, stream,
                                                                 token * D + d));
        pg[off * D + d] = (unsigned char)kh_dtype_encode(KH_DTYPE_F8E4M3, f32(v * inv));
    }
    float sf = (float)scale;
    memcpy(pg + (uint64_t)ps * D + off * 4u, &sf, 4);
}

int main(int argc, char **argv)
{
    char dir[4096];
    int n;
    kh_err err;
    kh_task_set *s = bench_dsa_load("bench_kcache_fill", argc, argv, dir, &n);
    if (!s)
        return 1;
    if (argc <= 2)
        n = 8;
    const kh_task_def *d = kh_task_def_at(s, 0);
    printf("bench_kcache_fill: %s, reachable k cache pages, seconds per seed (%ld cores)\n",
           d->name, sysconf(_SC_NPROCESSORS_ONLN));
    printf("%-38s %6s %8s %9s %8s\n", "workload", "pages", "fill", "anchor", "ratio");
    double sum_new = 0, sum_old = 0;
    for (int wi = 0; wi < n; wi++) {
        const kh_task_workload *w = kh_task_workload_at(s, (size_t)wi);
        if (!w)
            break;
        kh_tensor *ins[16] = {0};
        uint64_t seed = 7000 + (uint64_t)wi;
        /* the other inputs and the reachable pages, filled the new way */
        double t0 = kh_now();
        if (kh_pyref_inputs(NULL, d, w, dir, seed, 1, 0, ins, &err)) {
            fprintf(stderr, "bench_kcache_fill: %s\n", err.msg);
            return 1;
        }
        double t_all = kh_now() - t0;
        size_t ki = bench_dsa_input(d, "k_index_cache_fp8");
        kh_tensor *k = ins[ki];
        uint32_t ps = (uint32_t)k->shape[1], D = (uint32_t)k->shape[3] - 4;
        /* the pages pyref.c fills */
        int64_t *pages;
        size_t np;
        if (kh_pyref_dsa_pages(ins[bench_dsa_input(d, "block_table")],
                               ins[bench_dsa_input(d, "seq_lens")], k->shape[0], ps, &pages, &np,
                               &err)) {
            fprintf(stderr, "bench_kcache_fill: %s\n", err.msg);
            return 1;
        }
        /* the fill alone, timed; then the anchor into a second cache */
        double t1 = kh_now();
        if (kh_rng_fill_dsa_kcache_pages(NULL, k, seed, (uint32_t)ki, pages, np, &err)) {
            fprintf(stderr, "bench_kcache_fill: %s\n", err.msg);
            return 1;
        }
        double t_new = kh_now() - t1;
        unsigned char *old = calloc((size_t)k->nbytes, 1);
        double t2 = kh_now();
        for (size_t i = 0; i < np; i++)
            for (uint64_t t = (uint64_t)pages[i] * ps; t < (uint64_t)(pages[i] + 1) * ps; t++)
                old_token(seed, (uint32_t)ki, t, ps, D, old);
        double t_old = kh_now() - t2;
        size_t page_bytes = (size_t)ps * (D + 4u);
        for (size_t i = 0; i < np; i++)
            if (memcmp(old + (size_t)pages[i] * page_bytes,
                       (unsigned char *)k->data + (size_t)pages[i] * page_bytes, page_bytes)) {
                fprintf(stderr, "bench_kcache_fill: page %lld differs from the anchor's\n",
                        (long long)pages[i]);
                return 1;
            }
        sum_new += t_new;
        sum_old += t_old;
        printf("%-38s %6zu %7.3fs %8.3fs %7.1fx  (all inputs %.3f s)\n", w->uuid, np, t_new,
               t_old, t_old / t_new, t_all);
        free(old);
        free(pages);
        for (size_t i = 0; i < d->ninputs; i++)
            kh_tensor_free(ins[i]);
    }
    printf("all: fill %.3f s, anchor %.3f s: %.1fx faster, bytes identical\n", sum_new, sum_old,
           sum_old / sum_new);
    kh_task_set_free(s);
    return 0;
}
