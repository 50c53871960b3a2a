/* pyref.h: reference outputs from a definition's own Python `run` function
 * (FlashInfer-Bench's `reference` field), for definitions that name no
 * trusted khlua reference.  Most of the contest's definitions are only that.
 *
 * The coordinator generates the inputs on the host, bit for bit what the
 * workers generate (engine/rng: the same Philox draws as the device
 * generator; safetensors inputs as stored), writes them to a safetensors
 * file per seed, and runs
 *     $KHLUA_PYTHON scripts/khlua_pyref.py JOB.json
 * (python3 by default; the runner is $KHLUA_PYREF_SCRIPT, else
 * scripts/khlua_pyref.py under $KH_SOURCE_DIR, above the executable's folder,
 * or in the tree khlua was built from) in a child process with a deadline.  The runner
 * needs torch; it exec's the definition's reference, calls run(*inputs) for
 * each seed (on CUDA when torch has it, $KHLUA_PYREF_DEVICE to choose) and
 * writes the outputs to safetensors, which are read back and checked
 * against the definition's dtypes and shapes.  The coordinator itself never
 * imports torch nor touches CUDA.
 *
 * The job file (JSON): {"version": 1, "definition": {...the Definition...},
 *   "inputs": [{"name", "dtype", "shape" (null: a Python scalar)}],
 *   "outputs": [{"name", "dtype", "shape"}], "scalars": {name: value}
 *   (workload scalar values as the workload gives them), "device": "auto",
 *   "cases": [{"seed", "inputs": path, "outputs": path}]}.
 * Every tensor input and every random scalar (a 0-D tensor, passed to run as
 * .item()) is in the inputs file under its name.
 * Runner exit codes: 0 ok; 3 torch (or python) unusable: the error names it;
 * anything else: the reference failed (its traceback in the output). */
#ifndef KH_PYREF_H
#define KH_PYREF_H

#include "core/engine.h"
#include "task/task.h"
#include "task/tensor.h"

#include <jansson.h>

/* Does d carry a Python reference (a "reference" string defining run)? */
int kh_pyref_available(const kh_task_def *d);

/* The inputs of workload w for seed, as the workers make them: ins[i] for
 * d->inputs[i] (NULL for a workload scalar, whose value is in the job's
 * "scalars").  base: the folder safetensors paths are relative to.
 * dsa_kcache: FlashInfer-Bench's DSA top-k k-cache generator for a random
 * k_index_cache_fp8, for the pages block_table and seq_lens can reach (the
 * others zero: nothing reachable reads them).  skip: bit i set leaves
 * ins[i] NULL, not made (a caller that makes that input its own way).  Free
 * each with kh_tensor_free. */
kh_status kh_pyref_inputs(kh_engine *e, const kh_task_def *d, const kh_task_workload *w,
                          const char *base, uint64_t seed, int dsa_kcache, uint64_t skip,
                          kh_tensor **ins, kh_err *err);

/* The DSA top-k k-cache pages some batch row can reach: block_table[b, m]
 * for m * page_size < seq_lens[b], within [0, num_pages), each once, in the
 * order first reached.  *pages is malloc'ed (the caller frees it). */
kh_status kh_pyref_dsa_pages(const kh_tensor *block_table, const kh_tensor *seq_lens,
                             int64_t num_pages, int64_t page_size, int64_t **pages, size_t *n,
                             kh_err *err);

/* The cache key of (definition, workload, seed): 32 hex digits over the
 * whole definition (its reference code included), the workload and seed. */
void kh_pyref_key(const kh_task_def *d, const kh_task_workload *w, uint64_t seed, int dsa_kcache,
                  char out[33]);

typedef struct kh_pyref_result {
    size_t nseeds, noutputs;
    kh_tensor **out;    /* out[s * noutputs + k]: output k for seeds[s] */
    char python[512];   /* the interpreter run */
    double seconds;
} kh_pyref_result;

/* Compute the outputs for seeds[0..n) in one run of the interpreter.
 * KH_ENOTFOUND: no interpreter, no runner, or no torch ("... needs python3
 * with torch; not found: ..."); KH_ETIMEOUT; KH_ECHILD: the reference failed
 * (its output's tail in err); KH_ECORRUPT: outputs of the wrong dtype or
 * shape. */
kh_status kh_pyref_run(kh_engine *e, const kh_task_def *d, const kh_task_workload *w,
                       const char *base, const uint64_t *seeds, size_t n, int dsa_kcache,
                       double timeout_s, kh_pyref_result *res, kh_err *err);
void kh_pyref_result_free(kh_pyref_result *res);

#endif
