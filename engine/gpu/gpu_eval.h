/* gpu_eval.h: the gpu worker's `evaluate` method (docs/evaluation.md): a
 * candidate cubin run on generated inputs under the hardened per-call checks
 * (two poison patterns, input checksums, guard bands, determinism) and,
 * optionally, a timing protocol with rotated inputs and sampled timed
 * outputs.  Outputs go back to the coordinator, which compares them with the
 * reference: no reference ever enters this process. */
#ifndef KH_GPU_EVAL_H
#define KH_GPU_EVAL_H

#include "gpu/cupti.h"
#include "core/engine.h"
#include "gpu/gpu.h"

#include <jansson.h>

typedef struct kh_gpu_eval kh_gpu_eval;

/* State kept across evaluations (the generator and checksum modules, built
 * once per worker).  NULL only when out of memory. */
kh_gpu_eval *kh_gpu_eval_new(kh_engine *e, kh_gpu *g, kh_cupti *c, kh_err *err);
/* Make the evaluator's own kernels now (the input generator, the utilities,
 * the device comparison) rather than on the first request. */
kh_status kh_gpu_eval_warm(kh_gpu_eval *ev, kh_err *err);
void kh_gpu_eval_free(kh_gpu_eval *ev);

/* One request; result and payload as the contract says.  A CUDA error is
 * returned as KH_ECUDA (kh_gpu_poisoned tells whether it was sticky). */
kh_status kh_gpu_evaluate(kh_gpu_eval *ev, const json_t *params, const unsigned char *payload,
                          size_t payload_len, json_t **result, unsigned char **out,
                          size_t *out_len, kh_err *err);

#endif
