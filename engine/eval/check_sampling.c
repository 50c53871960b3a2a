/* check_sampling.c: the sampling evaluator's checks (check.h, "sampling";
 * FIB's evaluators/sampling.py): the method a definition names, the valid
 * mask of top-k / top-p sampling, samples in range and inside the mask, and
 * the total-variation distance of their frequencies from the probabilities.
 * The evaluator around them (its calls, the TVD phase) is eval_sampling.c's. */
#include "eval/check.h"
#include "eval/check_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kh_sampling_method kh_check_sampling_method(const char *name)
{
    char lower[256];
    size_t k = 0;
    for (; name && name[k] && k < sizeof lower - 1; k++)
        lower[k] = (char)(name[k] >= 'A' && name[k] <= 'Z' ? name[k] - 'A' + 'a' : name[k]);
    lower[k] = 0;
    if (strstr(lower, "top_k_top_p"))
        return KH_SAMPLING_TOP_K_TOP_P;
    if (strstr(lower, "top_k"))
        return KH_SAMPLING_TOP_K;
    if (strstr(lower, "top_p"))
        return KH_SAMPLING_TOP_P;
    return KH_SAMPLING_NONE;
}

const char *kh_check_sampling_method_name(kh_sampling_method m)
{
    switch (m) {
    case KH_SAMPLING_TOP_K: return "top_k";
    case KH_SAMPLING_TOP_P: return "top_p";
    case KH_SAMPLING_TOP_K_TOP_P: return "top_k_top_p";
    default: return "none";
    }
}

/* descending probability, ties by id (torch.sort leaves their order open) */
typedef struct prob_id {
    float p;
    int64_t id;
} prob_id;

static int by_prob_desc(const void *a, const void *b)
{
    const prob_id *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

kh_status kh_check_sampling_mask(const kh_tensor *probs, kh_sampling_method m,
                                 const int64_t *top_k, const double *top_p, unsigned char *mask,
                                 kh_err *err)
{
    if (!probs || !mask || probs->dtype != KH_DTYPE_F32 || probs->ndim != 2 ||
        probs->shape[1] < 1)
        return kh_err_set(err, KH_EINVAL, "sampling mask: probs must be float32 [batch, vocab]");
    int use_k = m == KH_SAMPLING_TOP_K || m == KH_SAMPLING_TOP_K_TOP_P;
    int use_p = m == KH_SAMPLING_TOP_P || m == KH_SAMPLING_TOP_K_TOP_P;
    if ((use_k && !top_k) || (use_p && !top_p))
        return kh_err_set(err, KH_EINVAL, "sampling mask: %s needs its %s values",
                          kh_check_sampling_method_name(m), use_k && !top_k ? "top_k" : "top_p");
    int64_t B = probs->shape[0], V = probs->shape[1];
    memset(mask, 1, (size_t)(B * V));
    if (m == KH_SAMPLING_NONE)
        return KH_OK;
    prob_id *order = malloc((size_t)V * sizeof *order);
    unsigned char *in = malloc((size_t)V);
    if (!order || !in) {
        free(order);
        free(in);
        return kh_err_set(err, KH_ENOMEM, "out of memory for a %lld-id sort", (long long)V);
    }
    for (int64_t b = 0; b < B; b++) {
        const float *p = (const float *)probs->data + b * V;
        unsigned char *mk = mask + b * V;
        for (int64_t v = 0; v < V; v++)
            order[v] = (prob_id){p[v], v};
        qsort(order, (size_t)V, sizeof *order, by_prob_desc);
        if (use_k && top_k[b] > 0 && top_k[b] < V) {
            float pivot = order[top_k[b] - 1].p;
            for (int64_t v = 0; v < V; v++)
                mk[v] = p[v] >= pivot;
        }
        if (use_p && top_p[b] > 0 && top_p[b] < 1) {
            /* torch compares the float32 cumsum with the Python float p + eps
             * in float32 */
            float limit = (float)(top_p[b] + KH_SAMPLING_TOP_P_EPS), cum = 0;
            int64_t n = 0;
            for (; n < V; n++) {
                cum += order[n].p;
                if (!(cum <= limit))
                    break;
            }
            /* the ids after the first one past the limit have larger sums
             * (probabilities are >= 0), so the nucleus is a prefix */
            if (n == 0)
                n = 1;
            memset(in, 0, (size_t)V);
            for (int64_t i = 0; i < n; i++)
                in[order[i].id] = 1;
            for (int64_t v = 0; v < V; v++)
                mk[v] = mk[v] && in[v];
        }
    }
    free(order);
    free(in);
    return KH_OK;
}

int64_t kh_check_sampling_nucleus(const kh_tensor *probs, const unsigned char *mask)
{
    if (!probs || probs->dtype != KH_DTYPE_F32 || probs->ndim != 2)
        return 0;
    int64_t B = probs->shape[0], V = probs->shape[1], best = 0;
    const float *p = probs->data;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = 0;
        for (int64_t v = 0; v < V; v++)
            n += (!mask || mask[b * V + v]) && p[b * V + v] > 0;
        best = n > best ? n : best;
    }
    return best;
}

kh_status kh_check_sampling_count(const kh_tensor *samples, int64_t rows, int64_t vocab,
                                  const unsigned char *mask, const char *method,
                                  const kh_tensor *probs, uint64_t *counts, kh_check_result *r,
                                  kh_err *err)
{
    kh_check_result_init(r);
    if (!samples || vocab < 1 || rows < 1)
        return kh_err_set(err, KH_EINVAL, "sampling: samples, rows >= 1 and a vocabulary size "
                          ">= 1 are required");
    if (samples->dtype != KH_DTYPE_I32 && samples->dtype != KH_DTYPE_I64)
        return kh_err_set(err, KH_EINVAL, "sampling: samples must be int32 or int64, not %s",
                          kh_dtype_name(samples->dtype));
    if (samples->numel % (uint64_t)rows)
        return kh_err_set(err, KH_EINVAL, "sampling: %llu samples are not a multiple of %lld "
                          "rows", (unsigned long long)samples->numel, (long long)rows);
    if (probs && (probs->dtype != KH_DTYPE_F32 || probs->ndim != 2 || probs->shape[1] != vocab ||
                  probs->shape[0] != rows))
        return kh_err_set(err, KH_EINVAL, "sampling: probs must be float32 [%lld, %lld]",
                          (long long)rows, (long long)vocab);
    r->numel = samples->numel;
    char list[256] = "";
    size_t len = 0, nbad = 0;
    for (uint64_t i = 0; i < samples->numel; i++) {
        int64_t id = iget(samples, i);
        if (id >= 0 && id < vocab)
            continue;
        if (!nbad++)
            r->first_fail = (int64_t)i;
        if (nbad <= 8 && len < sizeof list - 32)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%lld", nbad > 1 ? ", " : "",
                                    (long long)id);
    }
    if (nbad) {
        r->fails = nbad;
        r->matched_ratio = 1.0 - (double)nbad / (double)samples->numel;
        r->max_abs_error = r->max_rel_error = INFINITY;
        r->final = 1;
        fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                    "samples [%s%s] out of vocabulary range [0, %lld) (%zu of %llu ids)", list,
                    nbad > 8 ? ", ..." : "", (long long)vocab, nbad,
                    (unsigned long long)samples->numel);
        return KH_OK;
    }
    for (uint64_t i = 0; i < samples->numel; i++) {
        uint64_t row = i % (uint64_t)rows, id = (uint64_t)iget(samples, i);
        const char *why = NULL;
        if (mask && !mask[row * (uint64_t)vocab + id])
            why = "outside the valid mask";
        else if (probs && ((const float *)probs->data)[row * (uint64_t)vocab + id] == 0.0f)
            why = "has probability 0";
        if (!why)
            continue;
        r->fails = 1;
        r->first_fail = (int64_t)i;
        r->max_abs_error = r->max_rel_error = INFINITY;
        r->final = 1;
        if (mask && !mask[row * (uint64_t)vocab + id])
            fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                        "sample %llu is outside the valid %s mask for batch row %llu",
                        (unsigned long long)id, method ? method : "sampling",
                        (unsigned long long)row);
        else
            fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                        "sample %llu in batch row %llu has probability 0",
                        (unsigned long long)id, (unsigned long long)row);
        return KH_OK;
    }
    for (uint64_t i = 0; counts && i < samples->numel; i++)
        counts[(i % (uint64_t)rows) * (uint64_t)vocab + (uint64_t)iget(samples, i)]++;
    return KH_OK;
}

kh_status kh_check_sampling_tvd(const kh_tensor *probs, const unsigned char *mask,
                                const uint64_t *counts, uint64_t per_row, double threshold,
                                double *tvds, kh_check_result *r, kh_err *err)
{
    kh_check_result_init(r);
    if (!probs || !counts || per_row < 1)
        return kh_err_set(err, KH_EINVAL, "sampling: probs, counts and at least one sample per "
                          "row are required");
    if (probs->dtype != KH_DTYPE_F32 || probs->ndim != 2 || probs->shape[1] < 1)
        return kh_err_set(err, KH_EINVAL, "sampling: probs must be a float32 [batch, vocab] "
                          "tensor, not %d-D %s", probs->ndim, kh_dtype_name(probs->dtype));
    int64_t B = probs->shape[0], V = probs->shape[1];
    const float *p = probs->data;
    r->numel = probs->numel;
    double worst = -1;
    int64_t worst_row = -1;
    for (int64_t b = 0; b < B; b++) {
        const float *pr = p + b * V;
        const unsigned char *mr = mask ? mask + b * V : NULL;
        const uint64_t *cr = counts + b * V;
        double sum = 0, tvd = 0;
        for (int64_t v = 0; v < V; v++)
            sum += !mr || mr[v] ? pr[v] : 0.0f;
        if (!(sum > 0) || !isfinite(sum))
            return kh_err_set(err, KH_EINVAL, "sampling: probs row %lld sums to %g%s, not a "
                              "distribution", (long long)b, sum, mask ? " in its mask" : "");
        for (int64_t v = 0; v < V; v++) {
            double q = (!mr || mr[v] ? pr[v] : 0.0) / sum, f = (double)cr[v] / (double)per_row;
            tvd += fabs(f - q);
            /* compute_error_stats in float32 */
            float fa = fabsf((float)f - (float)q);
            float fr = fa / (fabsf((float)q) + 1e-8f);
            if (fa > r->max_abs_error) {
                r->max_abs_error = fa;
                r->worst_index = b * V + v;
                r->worst_out = f;
                r->worst_ref = q;
            }
            if (fr > r->max_rel_error)
                r->max_rel_error = fr;
        }
        tvd *= 0.5;
        if (tvds)
            tvds[b] = tvd;
        if (tvd > worst) {
            worst = tvd;
            worst_row = b;
        }
    }
    if (worst > threshold) {
        r->fails = 1;
        r->first_fail = worst_row * V;
        fail_status(r, KH_CHECK_INCORRECT_NUMERICAL,
                    "total variation distance %.4f in batch row %lld exceeds %.4g (frequencies "
                    "of %llu samples per row against probs%s)", worst, (long long)worst_row,
                    threshold, (unsigned long long)per_row, mask ? " in the valid mask" : "");
    }
    return KH_OK;
}
