/* cupti.h: kernel-accurate timing from CUPTI's activity API, in a gpu worker.
 * CUPTI is loaded with dlopen (one subscriber per process: under ncu or
 * another tool it refuses, and the caller falls back to CUDA events, saying
 * so).  Records are gathered from CUPTI's buffers and attributed to calls in
 * two ways:
 *   - by external correlation id (exact): kh_cupti_push(i) / kh_cupti_pop()
 *     around call i, joined through EXTERNAL_CORRELATION records;
 *   - by FlashInfer-Bench's host time window (parity): every DRIVER/RUNTIME
 *     record whose start lies in [t0, t1] of call i, then every kernel/memcpy/
 *     memset record with those correlation ids.
 * Per call: span = max(end) - min(start), the sum of durations, the count,
 * and the set of names. */
#ifndef KH_CUPTI_H
#define KH_CUPTI_H

#include "core/kh.h"

#include <stdint.h>

typedef struct kh_cupti kh_cupti;

/* Load libcupti and register buffer callbacks (no tracing yet). */
kh_cupti *kh_cupti_open(const char *cuda_home, kh_err *err);
void kh_cupti_close(kh_cupti *c);

/* Enable CONCURRENT_KERNEL, MEMCPY, MEMSET, DRIVER, RUNTIME and
 * EXTERNAL_CORRELATION (FlashInfer-Bench's set plus the correlation kind). */
kh_status kh_cupti_enable(kh_cupti *c, kh_err *err);
/* Flush every buffer (the device must be synchronized first) and disable. */
kh_status kh_cupti_disable(kh_cupti *c, kh_err *err);
/* Forget collected records. */
void kh_cupti_clear(kh_cupti *c);

kh_status kh_cupti_push(kh_cupti *c, uint64_t id, kh_err *err);
kh_status kh_cupti_pop(kh_cupti *c, kh_err *err);
/* CUPTI's clock (the base of record timestamps), ns. */
uint64_t kh_cupti_timestamp(kh_cupti *c);
/* The length of the union of n intervals iv[i] = {start, end} (ns; an
 * interval with end <= start counts nothing): the time the GPU was active
 * when the intervals are its activity records.  Sorts iv in place. */
double kh_span_union_ns(uint64_t (*iv)[2], size_t n);
/* The GPU's active time over the records collected since the last clear:
 * the union of every kernel, memcpy and memset record's [start, end), ns
 * (0 on lack of memory). */
double kh_cupti_active_ns(kh_cupti *c);
/* Records CUPTI dropped for lack of buffer space since enable. */
size_t kh_cupti_dropped(kh_cupti *c);

#define KH_CALL_MAX_NAMES 16

typedef struct kh_call_span {
    uint64_t start, end;  /* min start, max end (ns, CUPTI clock) */
    double span_ns;       /* end - start; 0 when count == 0 */
    double sum_ns;        /* sum of record durations */
    int count;            /* kernel + memcpy + memset records */
    int kernels;
    uint64_t set_hash;    /* hash of the sorted set of record identities */
    int nnames;
    const char *names[KH_CALL_MAX_NAMES]; /* distinct kernel names, valid until clear */
} kh_call_span;

/* Attribute by external ids first_id .. first_id + n - 1 into out[0..n). */
kh_status kh_cupti_attribute_ext(kh_cupti *c, uint64_t first_id, size_t n, kh_call_span *out,
                                 kh_err *err);
/* Attribute by host windows [t0[i], t1[i]] (FlashInfer-Bench's method). */
kh_status kh_cupti_attribute_window(kh_cupti *c, const uint64_t *t0, const uint64_t *t1,
                                    size_t n, kh_call_span *out, kh_err *err);

#endif
