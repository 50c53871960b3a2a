/* bench_topk_check.c: the DSA top-k evaluator's check (engine/eval/check.c
 * kh_check_dsa_topk), which rescores every index a candidate and the
 * reference name, against the anchor measured side by side: the same scores
 * computed as the check did before (each token scored for both sets, q,
 * weights and fp8 codes decoded per element through kh_tensor_get).  Runs on
 * kernels/dsa_topk_indexer_fp8_h64_d128_topk2048_ps64's workloads with the
 * largest batches (default 3); the answer checked is a right one (the same
 * index set as the reference, in another order), the case every honest
 * candidate and every reference self-check is.  Prints seconds per check
 * for both and the ratio.  Not a test.
 *   bench_topk_check [TASK_DIR] [N]   (from the source tree, or KH_SOURCE_DIR set) */
#include "eval/check.h"
#include "task/dtype.h"
#include "bench_dsa.h"
#include "eval/pyref.h"
#include "task/task.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the anchor: the check's scoring before, both index sets */
static double old_scores(const kh_check_topk_inputs *in, const kh_tensor *out,
                         const kh_tensor *ref)
{
    int64_t B = out->shape[0], K = out->shape[1], H = in->q->shape[1], D = in->q->shape[2];
    int64_t ps = in->k_cache->shape[1];
    double sink = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++)
            for (int set = 0; set < 2; set++) {
                int64_t t = (int64_t)kh_tensor_get(set ? ref : out, (uint64_t)(b * K + k));
                if (t < 0)
                    continue;
                int64_t page = t / ps, off = t % ps;
                const uint8_t *pg = (const uint8_t *)in->k_cache->data +
                                    (size_t)page * (size_t)ps * (size_t)(D + 4);
                float scale;
                memcpy(&scale, pg + (size_t)ps * (size_t)D + (size_t)off * 4, 4);
                const uint8_t *kb = pg + (size_t)off * (size_t)D;
                double total = 0;
                for (int64_t h = 0; h < H; h++) {
                    double dot = 0;
                    uint64_t qb = (uint64_t)((b * H + h) * D);
                    for (int64_t d = 0; d < D; d++) {
                        float kv = (float)(kh_dtype_decode(KH_DTYPE_F8E4M3, kb[d]) *
                                           (double)scale);
                        dot += kh_tensor_get(in->q, qb + (uint64_t)d) * (double)kv;
                    }
                    if (dot > 0)
                        total += dot * kh_tensor_get(in->weights, (uint64_t)(b * H + h));
                }
                sink += (float)total;
            }
    return sink;
}

int main(int argc, char **argv)
{
    char dir[4096];
    int n;
    kh_err err;
    kh_task_set *s = bench_dsa_load("bench_topk_check", argc, argv, dir, &n);
    if (!s)
        return 1;
    const kh_task_def *d = kh_task_def_at(s, 0);
    int bi = kh_task_axis_index(d, "batch_size");
    /* the workloads with the largest batches */
    size_t nw = kh_task_nworkloads(s), *order = malloc(nw * sizeof *order);
    for (size_t i = 0; i < nw; i++)
        order[i] = i;
    for (size_t i = 0; i < nw; i++)
        for (size_t j = i + 1; j < nw; j++)
            if (kh_task_workload_at(s, order[j])->axes[bi] >
                kh_task_workload_at(s, order[i])->axes[bi]) {
                size_t t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    printf("bench_topk_check: %s, seconds per check of a right answer (best of 2)\n", d->name);
    printf("%-38s %6s %9s %10s %8s\n", "workload", "batch", "check", "anchor", "ratio");
    double sum_new = 0, sum_old = 0;
    for (int wi = 0; wi < n && (size_t)wi < nw; wi++) {
        const kh_task_workload *w = kh_task_workload_at(s, order[wi]);
        kh_tensor *ins[16] = {0};
        if (kh_pyref_inputs(NULL, d, w, dir, 4242, 1, 0, ins, &err)) {
            fprintf(stderr, "bench_topk_check: %s\n", err.msg);
            return 1;
        }
        kh_check_topk_inputs in = {ins[bench_dsa_input(d, "q_index_fp8")],
                                   ins[bench_dsa_input(d, "k_index_cache_fp8")], ins[bench_dsa_input(d, "weights")],
                                   ins[bench_dsa_input(d, "seq_lens")], ins[bench_dsa_input(d, "block_table")]};
        int64_t B = in.q->shape[0], K = w->axes[d->outputs[0].dims[1]];
        int64_t M = in.block_table->shape[1], ps = in.k_cache->shape[1];
        int64_t shape[2] = {B, K};
        kh_tensor *ref = NULL, *out = NULL;
        if (kh_tensor_new(&ref, KH_DTYPE_I32, 2, shape, &err) ||
            kh_tensor_new(&out, KH_DTYPE_I32, 2, shape, &err)) {
            fprintf(stderr, "bench_topk_check: %s\n", err.msg);
            return 1;
        }
        /* the reference: the row's first K reachable tokens, -1 padded; the
         * candidate: the same, reversed */
        for (int64_t b = 0; b < B; b++) {
            int64_t len = (int64_t)kh_tensor_get(in.seq_lens, (uint64_t)b);
            for (int64_t k = 0; k < K; k++) {
                double t = -1;
                if (k < len && k / ps < M)
                    t = kh_tensor_get(in.block_table, (uint64_t)(b * M + k / ps)) * (double)ps +
                        (double)(k % ps);
                kh_tensor_set(ref, (uint64_t)(b * K + k), t);
                kh_tensor_set(out, (uint64_t)(b * K + (K - 1 - k)), t);
            }
        }
        double best_new = 1e30, best_old = 1e30, sink = 0;
        for (int rep = 0; rep < 2; rep++) {
            kh_check_result r;
            double t0 = kh_now();
            if (kh_check_dsa_topk(out, ref, &in, NULL, &r, &err)) {
                fprintf(stderr, "bench_topk_check: %s\n", err.msg);
                return 1;
            }
            double t1 = kh_now();
            if (r.status != KH_CHECK_PASSED) {
                fprintf(stderr, "bench_topk_check: a right answer failed: %s\n", r.reason);
                return 1;
            }
            sink += old_scores(&in, out, ref);
            double t2 = kh_now();
            best_new = t1 - t0 < best_new ? t1 - t0 : best_new;
            best_old = t2 - t1 < best_old ? t2 - t1 : best_old;
        }
        sum_new += best_new;
        sum_old += best_old;
        printf("%-38s %6lld %8.4fs %9.4fs %7.1fx%s\n", w->uuid, (long long)B, best_new, best_old,
               best_old / best_new, isfinite(sink) ? "" : " (scores not finite)");
        kh_tensor_free(ref);
        kh_tensor_free(out);
        for (size_t i = 0; i < d->ninputs; i++)
            kh_tensor_free(ins[i]);
    }
    printf("all: check %.3f s, anchor %.3f s: %.1fx faster\n", sum_new, sum_old,
           sum_old / sum_new);
    free(order);
    kh_task_set_free(s);
    return 0;
}
