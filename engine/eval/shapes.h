/* shapes.h: admissible shapes that are not in a definition's workload list,
 * for the promotion gate (docs/evaluation.md, "Shapes at promotion").  A
 * kernel that is correct only on the listed shapes (it hard-codes the listed
 * batch sizes, or assumes batch % 8 == 0 because every listed batch is) passes
 * the listed workloads; the finalist is checked on these too.
 *
 * Each drawn workload is a copy of a listed one (its template) with some var
 * axes changed: const axes and the template's inputs entries (random, scalar
 * values) stay as they are, so it can be evaluated wherever a listed workload
 * can.  Drawing is deterministic given the seed, and never yields a tuple of
 * axis values that a listed workload has. */
#ifndef KH_SHAPES_H
#define KH_SHAPES_H

#include "task/task.h"

/* The result of one draw.  Zero it before the first kh_shapes_draw (or use
 * KH_SHAPES_INIT); kh_shapes_free releases it and leaves it empty. */
typedef struct kh_shapes {
    size_t n;                      /* workloads drawn (at most the n asked for) */
    kh_task_workload *w;           /* n workloads, owned by this struct:
                                      def = the definition, definition = its name,
                                      uuid = "shape-" + 16 hex digits, axes (def->naxes
                                      values), axes_ok = 1, json = the template's
                                      {uuid, axes, inputs} with uuid and axes replaced,
                                      record = {definition, solution: null, workload,
                                      evaluation: null, khlua: {shape_of, seed}},
                                      file / line / seq = the template's */
    const kh_task_workload **from; /* from[i]: the listed workload w[i] was derived
                                      from (one of the caller's pointers) */
    char note[512];                /* why fewer than asked were drawn ("" when all were):
                                      no template, every var axis frozen, or the
                                      admissible candidates ran out */
} kh_shapes;

#define KH_SHAPES_INIT {0, NULL, NULL, ""}

/* Draw up to n workloads of d not in listed[0, nlisted) (the definition's
 * workload list; entries of other definitions or without valid axes are
 * ignored).  Every drawn workload satisfies every constraint of d, its
 * inputs and outputs together take at most 1.25 times the bytes of the
 * largest listed workload, and its tuple of axis values differs from every
 * listed workload's and from every other drawn one's.  Fewer than n (maybe
 * none) is not an error: out->note says why.  Non-OK (KH_ENOMEM, KH_EINVAL
 * for a NULL argument) leaves out empty.  out must be empty or previously
 * freed; the listed workloads must outlive out (out->from points at them). */
kh_status kh_shapes_draw(const kh_task_def *d, const kh_task_workload *const *listed,
                         size_t nlisted, size_t n, uint64_t seed, kh_shapes *out, kh_err *err);

/* Release what kh_shapes_draw made; idempotent. */
void kh_shapes_free(kh_shapes *s);

#endif
