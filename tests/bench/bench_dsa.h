/* bench_dsa.h: what the DSA top-k benches share: the package they run on
 * (argv[1], default kernels/dsa_topk_indexer_fp8_h64_d128_topk2048_ps64 under
 * $KH_SOURCE_DIR or .) and how many workloads (argv[2], default 3). */
#ifndef KH_BENCH_DSA_H
#define KH_BENCH_DSA_H

#include "task/task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Load the package; on failure print "name: why" and return NULL. */
static inline kh_task_set *bench_dsa_load(const char *name, int argc, char **argv,
                                          char dir[4096], int *n)
{
    const char *src = getenv("KH_SOURCE_DIR");
    if (argc > 1)
        snprintf(dir, 4096, "%s", argv[1]);
    else
        snprintf(dir, 4096, "%s/kernels/dsa_topk_indexer_fp8_h64_d128_topk2048_ps64",
                 src ? src : ".");
    *n = argc > 2 ? atoi(argv[2]) : 3;
    kh_err err;
    kh_task_set *s = NULL;
    if (kh_task_load(dir, NULL, &s, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return NULL;
    }
    return s;
}

/* The position of input `name` in d's inputs (0 when absent: the package
 * has them all). */
static inline size_t bench_dsa_input(const kh_task_def *d, const char *name)
{
    for (size_t i = 0; i < d->ninputs; i++)
        if (!strcmp(d->inputs[i].name, name))
            return i;
    return 0;
}

#endif
