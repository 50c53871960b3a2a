/* check_int.h: what check.c shares with check_sampling.c, and nobody
 * outside engine/eval/ sees.  check_sampling.c calls check.c, never the
 * other way. */
#ifndef KH_CHECK_INT_H
#define KH_CHECK_INT_H

#include "eval/check.h"

#include <stdint.h>

/* r's status becomes s, its reason the formatted message (check.c). */
void fail_status(kh_check_result *r, kh_check_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Element i of t as an integer. */
static inline int64_t iget(const kh_tensor *t, uint64_t i) { return (int64_t)kh_tensor_get(t, i); }

#endif
