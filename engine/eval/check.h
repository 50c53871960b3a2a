/* check.h: output comparison, FlashInfer-Bench's rules (fib-harness.md §2,
 * "Correctness" and "Special evaluators"), plus figures khlua adds.
 *
 * Per output tensor, in this order:
 *   1. shape differs from the reference    -> INCORRECT_SHAPE
 *   2. dtype differs                       -> INCORRECT_DTYPE
 *   3. any inf, then any NaN, in the SOLUTION's output -> INCORRECT_NUMERICAL,
 *      max errors set to inf (or NaN), as FIB does
 *   4. per element, fail iff |x-y| > atol AND |x-y| / (|y| + 1e-8) > rtol;
 *      matched_ratio = 1 - fails / numel; INCORRECT_NUMERICAL iff
 *      matched_ratio < required_ratio; else PASSED.
 * Step 4 reproduces FIB's arithmetic exactly by default: both tensors cast
 * to float32, errors computed in float32 and compared with float32(atol) and
 * float32(rtol), as compute_error_stats does with torch (so pass/fail agrees
 * at the boundary, bit for bit).  KH_CHECK_DOUBLE does it all in double.
 * Consequences kept on purpose, because FIB has them: an element whose
 * REFERENCE is NaN, or inf against a finite output, never fails (NaN
 * compares false); ref_nonfinite counts them so a caller can be stricter.
 *
 * khlua's extra figures, always in double: norm_error = ||x - y||_2 / ||y||_2
 * over the finite pairs (0 when both norms are 0, inf when only ||y|| is),
 * and max_ulp_error, the largest distance in units in the last place of the
 * output dtype between solution and reference codes (dtype.h).
 *
 * Both tensors are read in place, one pass, element by element: nothing is
 * copied, so a multi-GiB output costs no extra memory. */
#ifndef KH_CHECK_H
#define KH_CHECK_H

#include "task/tensor.h"

typedef enum kh_check_status {
    KH_CHECK_PASSED = 0,
    KH_CHECK_INCORRECT_SHAPE,
    KH_CHECK_INCORRECT_DTYPE,
    KH_CHECK_INCORRECT_NUMERICAL,
} kh_check_status;

/* "PASSED", "INCORRECT_SHAPE", ... (FIB's EvaluationStatus names). */
const char *kh_check_status_name(kh_check_status s);

typedef enum kh_check_precision {
    KH_CHECK_FIB_F32 = 0, /* FIB's float32 arithmetic (default) */
    KH_CHECK_DOUBLE,      /* everything in double */
} kh_check_precision;

/* Which of FIB's evaluators a definition gets (evaluators/registry.py). */
typedef enum kh_check_evaluator {
    KH_EVAL_DEFAULT = 0,
    KH_EVAL_LOWBIT,        /* name contains "moe_fp8_block_scale" */
    KH_EVAL_DSA_ATTENTION, /* dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps{1,64} */
    KH_EVAL_DSA_TOPK,      /* name starts with "dsa_topk_indexer" */
    KH_EVAL_SAMPLING,      /* op_type "sampling" */
} kh_check_evaluator;
const char *kh_check_evaluator_name(kh_check_evaluator ev);

typedef struct kh_check_opts {
    double atol, rtol;     /* FIB defaults 1e-2, 1e-2 */
    double required_ratio; /* FIB default 1.0; LowBit 0.95 */
    kh_check_precision precision;
    /* Threads for kh_check_compare: 0 every CPU (up to 32), 1 this one.
     * The result is the same bits for any count: the elements are cut into
     * fixed chunks, merged in order. */
    int threads;
} kh_check_opts;

/* FIB's defaults (atol = rtol = 1e-2, ratio 1.0, float32 arithmetic). */
void kh_check_opts_default(kh_check_opts *o);
/* The evaluator FIB would pick for a definition (name, op_type may be NULL)
 * and its default options (LowBit: ratio 0.95).  The contest's own flags
 * (e.g. MoE --atol 1 --rtol 0.3 --required-matched-ratio 0.9) are overrides
 * the caller applies afterwards. */
kh_check_evaluator kh_check_evaluator_for(const char *name, const char *op_type,
                                          kh_check_opts *o);

typedef struct kh_check_result {
    kh_check_status status;
    char reason[512];       /* why it failed, naming the first bad element; "" if PASSED */
    uint64_t numel;         /* elements compared */
    uint64_t fails;         /* elements failing the atol AND rtol rule */
    double matched_ratio;   /* 1 - fails / numel, clamped to [0, 1]; 1 for empty */
    double max_abs_error;   /* FIB's figures: float32 by default */
    double max_rel_error;
    double norm_error;      /* ||x - y|| / ||y||, double */
    uint64_t max_ulp_error; /* UINT64_MAX when a NaN is involved */
    int64_t worst_index;    /* element with the largest abs error; -1 if none */
    double worst_out, worst_ref;
    int64_t first_fail;     /* first failing element; -1 if none */
    uint64_t out_nan, out_inf;       /* non-finite elements in the solution */
    uint64_t ref_nonfinite;          /* non-finite elements in the reference */
    int final;              /* FIB stops the workload at this verdict: shape, dtype,
                               non-finite output, top-k reachability/duplicates */
} kh_check_result;

/* Compare a solution output with the reference.  The verdict is data in *r;
 * the return is KH_OK unless the call itself is invalid (NULL tensors). */
kh_status kh_check_compare(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o,
                           kh_check_result *r, kh_err *err);

/* ---- the comparison in parts -----------------------------------------------
 * kh_check_compare cuts the elements into chunks of KH_CHECK_CHUNK, scans
 * each in element order into a part, and merges the parts in chunk order;
 * so every figure, the sums of norm_error included, is the same bits
 * whoever scans the chunks.  Within a chunk the sums go in KH_CHECK_LANES
 * partial sums (element lo + j into lane j % KH_CHECK_LANES, in element
 * order), folded in halves at the end: a block's order, so the device adds
 * them 1024 lanes at once (64 steps a lane) instead of one element after
 * another.  The gpu worker scans
 * the chunks on the device (engine/gpu/gpu_check.c, the same layout) and
 * kh_check_from_parts gives the verdict kh_check_compare gives on the host
 * copies. */
#define KH_CHECK_CHUNK (1u << 16)
#define KH_CHECK_LANES 1024

typedef struct kh_check_part {
    uint64_t fails, out_inf, out_nan, ref_nonfinite, max_ulp;
    int64_t first_fail, first_inf, first_nan, worst; /* -1: none */
    double max_abs, max_rel, sdiff, sref;
    int32_t abs_nan, rel_nan;
    /* the values (decoded) at worst and at first_fail; 0 where none */
    double worst_out, worst_ref, fail_out, fail_ref;
} kh_check_part;

/* b's order-free figures into a's, wherever b's elements lie: counts
 * added, maxima kept, each first index the lower one, the worst element the
 * larger error, then the lower index (with their values); the sums (sdiff,
 * sref) are left to the caller, whose order they round in. */
void kh_check_part_merge_figures(kh_check_part *a, const kh_check_part *b);

/* Chunks of n elements. */
static inline uint64_t kh_check_nchunks(uint64_t n)
{
    return (n + KH_CHECK_CHUNK - 1) / KH_CHECK_CHUNK;
}
/* The parts of out against ref on the host, kh_check_nchunks(numel) of
 * them; both tensors of one shape and dtype (KH_EINVAL otherwise). */
kh_status kh_check_parts(const kh_tensor *out, const kh_tensor *ref, const kh_check_opts *o,
                         kh_check_part *parts, kh_err *err);
/* The verdict from the parts of numel elements of one dtype (shape and
 * dtype already found equal), as kh_check_compare gives it. */
kh_status kh_check_from_parts(const kh_check_part *parts, size_t nparts, uint64_t numel,
                              const kh_check_opts *o, kh_check_result *r, kh_err *err);

/* Fold one output's (or trial's) result into an aggregate, in the order FIB
 * evaluates them (trials, then outputs), as FIB reports a workload
 * (evaluators/default.py check_correctness): a final verdict (r->final)
 * replaces the aggregate and freezes it, since FIB returns there; otherwise
 * the first failing status wins (with its reason), max errors are maxima
 * taken like Python's max() (a NaN never replaces a number), matched_ratio
 * is the minimum (LowBit's extra.matched_ratio), counts add up.  Initialise
 * acc with kh_check_result_init. */
void kh_check_result_init(kh_check_result *acc);
void kh_check_merge(kh_check_result *acc, const kh_check_result *r);

/* ---- DSA top-k indexer (evaluators/dsa_topk_indexer.py) ------------------
 * Indices are global token slots (page * page_size + offset), -1 (any
 * negative) = padding.  In order, per batch row of the solution:
 *   reachability: the page must be in that row of block_table and its
 *     position (slot of the first match * page_size + offset) < seq_lens[b];
 *   duplicates: no valid index twice;
 * either -> INCORRECT_NUMERICAL (errors inf).  Then the scores at the
 * reference's and at the solution's indices are recomputed, each row sorted
 * descending, and compared with the atol/rtol/ratio rule, where positions
 * that are -inf in both (padding) or NaN in both count as matched and any
 * other non-finite pair fails.  So the order of the indices does not matter.
 * Score of token t for row b: sum_h relu(q[b,h,:] . k[t,:]) * weights[b,h],
 * k dequantised from the deep_gemm layout (per page: page_size*D fp8 bytes,
 * then page_size float32 scales).  khlua sums in double and rounds the score
 * to float32; FIB's bmm sums in float32 in the GPU's order, a difference far
 * below the tolerances. */
typedef struct kh_check_topk_inputs {
    const kh_tensor *q;           /* [B, H, D] float8_e4m3fn */
    const kh_tensor *k_cache;     /* [P, page_size, 1, D + 4] int8 */
    const kh_tensor *weights;     /* [B, H] float32 */
    const kh_tensor *seq_lens;    /* [B] int32 */
    const kh_tensor *block_table; /* [B, M] int32 */
} kh_check_topk_inputs;

kh_status kh_check_dsa_topk(const kh_tensor *out, const kh_tensor *ref,
                            const kh_check_topk_inputs *in, const kh_check_opts *o,
                            kh_check_result *r, kh_err *err);

/* The score-comparison step alone, on two [B, K] float32 score tensors
 * already sorted per row (exposed for tests and other top-k operators). */
kh_status kh_check_sorted_scores(const kh_tensor *sol, const kh_tensor *ref,
                                 const kh_check_opts *o, kh_check_result *r, kh_err *err);

/* ---- sampling (evaluators/sampling.py, op_type "sampling") ---------------
 * FIB's SamplingEvaluator, in two phases, both the caller's to drive:
 * 1. validation: the candidate is called N times (sampling_validation_trials)
 *    on one set of inputs; every call's samples must lie in [0, V) and in
 *    the valid mask of the definition's thresholding method (from its name:
 *    top_k_top_p, top_k, top_p or none); the first bad call fails
 *    (INCORRECT_NUMERICAL, errors inf, final).
 * 2. TVD: expected = probs * mask renormalised per row.  When
 *    sqrt(max_row nucleus / 500000) exceeds the threshold (nucleus: the
 *    tokens with expected > 0) the test cannot tell a sampler from noise and
 *    FIB skips it.  Otherwise the inputs are repeated to
 *    repeat = max(1, 10000 / B) copies of the batch along the first axis and
 *    the candidate called ceil(500000 / repeat) times; per row b,
 *    TVD_b = 0.5 * sum_v |count_bv / n_b - expected_bv|, n_b the samples of
 *    row b; INCORRECT_NUMERICAL when max_b TVD_b > threshold.  max_abs_error
 *    / max_rel_error are FIB's compute_error_stats of the frequencies
 *    against expected (float32, rel = abs / (|q| + 1e-8)), maxima over rows. */
#define KH_SAMPLING_TVD_SAMPLES 500000 /* per row (FIB's num_trials) */
#define KH_SAMPLING_TVD_ROWS 10000     /* the repeated batch (FIB's target_batch_size) */
#define KH_SAMPLING_TOP_P_EPS 5e-2     /* FIB's slack on the nucleus boundary */
#define KH_SAMPLING_MAX_CALLS 16384    /* khlua's cap on the TVD test's calls (batches > 305 rows) */

typedef enum kh_sampling_method {
    KH_SAMPLING_NONE,
    KH_SAMPLING_TOP_K,
    KH_SAMPLING_TOP_P,
    KH_SAMPLING_TOP_K_TOP_P,
} kh_sampling_method;

/* FIB's _detect_thresholding_method: from the definition's name. */
kh_sampling_method kh_check_sampling_method(const char *definition_name);
const char *kh_check_sampling_method_name(kh_sampling_method m);

/* FIB's _compute_valid_sampling_mask into mask [B * V] (1: a valid id):
 * top_k: when 0 < k < V, the ids with p >= the k-th largest p (ties all
 * valid); top_p: when 0 < p < 1, the ids whose descending-order float32
 * cumulative sum is <= p + eps (the top id always); top_k_top_p: both.
 * top_k / top_p hold one value per row; NULL where the method needs none. */
kh_status kh_check_sampling_mask(const kh_tensor *probs, kh_sampling_method m,
                                 const int64_t *top_k, const double *top_p, unsigned char *mask,
                                 kh_err *err);

/* The largest number of ids with mask && p > 0 in one row (mask NULL: all). */
int64_t kh_check_sampling_nucleus(const kh_tensor *probs, const unsigned char *mask);

/* Check one call's samples (int32 or int64, a multiple of `rows` ids; id i
 * belongs to row i % rows) against [0, vocab), then against mask ([rows *
 * vocab], NULL: all valid; `method` names it in the reason), then, when
 * probs ([rows, vocab] float32) is given, against p == 0 (khlua's check).
 * When counts is not NULL and every id passes, counts[row * vocab + id]++.
 * The verdict goes to *r (kh_check_result_init'ed here). */
kh_status kh_check_sampling_count(const kh_tensor *samples, int64_t rows, int64_t vocab,
                                  const unsigned char *mask, const char *method,
                                  const kh_tensor *probs, uint64_t *counts, kh_check_result *r,
                                  kh_err *err);

/* The TVD test on probs [B, V] (float32) restricted to mask (NULL: all) and
 * renormalised, against counts [B * V] summing to `per_row` in every row.
 * tvds (B doubles, may be NULL) receives each row's TVD. */
kh_status kh_check_sampling_tvd(const kh_tensor *probs, const unsigned char *mask,
                                const uint64_t *counts, uint64_t per_row, double threshold,
                                double *tvds, kh_check_result *r, kh_err *err);

#endif
