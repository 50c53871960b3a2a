/* hostbench.c: host timing protocols (hostbench.h).  Owns the call sequence,
 * the monotonic clock around each call, the last-level-cache flush and the
 * copy-bandwidth probe; what a call does (rotation, poison, verification)
 * belongs to the target's callbacks (role_host.c).  Statistics come from
 * bench.c (kh_stat_median, kh_stat_mean_sd), so host and gpu numbers are
 * summarised by the same code. */
#include "worker/hostbench.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned char *flush_buf;
static size_t flush_len;

static double mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

size_t kh_hostbench_llc_bytes(void)
{
    long v = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v <= 0)
        v = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    if (v <= 0) {
        for (int idx = 4; idx >= 0 && v <= 0; idx--) {
            char path[96], buf[64];
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
            FILE *f = fopen(path, "r");
            if (!f)
                continue;
            if (fgets(buf, sizeof buf, f)) {
                char *end;
                long n = strtol(buf, &end, 10);
                if (n > 0)
                    v = *end == 'K' ? n << 10 : *end == 'M' ? n << 20 : n;
            }
            fclose(f);
        }
    }
    return v > 0 ? (size_t)v : (size_t)32 << 20;
}

kh_status kh_hostbench_flush(kh_err *err)
{
    if (!flush_buf) {
        /* a quarter more than the LLC evicts it; twice would double the cost
         * on servers whose LLC is hundreds of MiB */
        size_t n = kh_hostbench_llc_bytes() / 4 * 5;
        if (n < ((size_t)8 << 20))
            n = (size_t)8 << 20;
        flush_buf = malloc(n);
        if (!flush_buf)
            return kh_err_set(err, KH_ENOMEM, "out of memory for a %zu-byte cache flush buffer", n);
        flush_len = n;
    }
    static unsigned char v;
    memset(flush_buf, ++v, flush_len);
    /* the buffer is never read: keep the compiler from dropping the writes */
    __asm__ __volatile__("" : : "r"(flush_buf) : "memory");
    return KH_OK;
}

double kh_hostbench_copy_bandwidth(size_t bytes, int reps)
{
    unsigned char *a = malloc(bytes), *b = malloc(bytes);
    double best = 0;
    if (a && b) {
        memset(a, 1, bytes);
        memset(b, 2, bytes);
        for (int i = 0; i < reps; i++) {
            double t0 = mono_ns();
            memcpy(i & 1 ? a : b, i & 1 ? b : a, bytes);
            __asm__ __volatile__("" : : "r"(a), "r"(b) : "memory");
            double dt = mono_ns() - t0;
            /* a copy reads and writes: 2 x bytes moved */
            double bw = dt > 0 ? 2.0 * (double)bytes / (dt * 1e-9) : 0;
            if (bw > best)
                best = bw;
        }
    }
    free(a);
    free(b);
    return best;
}

typedef struct run_ctx {
    kh_engine *e;
    const kh_hostbench_target *t;
    const kh_bench_opts *o;
    kh_bench_result *r;
    size_t cap;
    long timed;
    size_t retakes; /* timed calls that may still be taken again */
} run_ctx;

/* One call; a timed call that waited on the run queue is taken again (the
 * whole call: fresh inputs, poison, flush) while retakes are left. */
static kh_status one(run_ctx *c, int flush, int timed, kh_err *err)
{
    const kh_hostbench_target *t = c->t;
    long ti = timed ? c->timed : -1;
    kh_status st;
    for (;;) {
        if (c->e && kh_engine_stop_requested(c->e))
            return kh_err_set(err, KH_EINTR, "timing interrupted");
        if (t->pre && (st = t->pre(t->ctx, ti, err)))
            return st;
        if (flush && (st = kh_hostbench_flush(err)))
            return st;
        uint64_t w0 = timed && t->waited_ns ? t->waited_ns(t->ctx) : UINT64_MAX;
        if (t->publish && (st = t->publish(t->ctx, ti, err)))
            return st;
        int again = 0;
        if (!timed) {
            if ((st = t->call(t->ctx, err)))
                return st;
        } else {
            if (c->r->n + 1 > c->cap) {
                size_t nc = c->cap ? 2 * c->cap : 64;
                double *s = realloc(c->r->samples_ns, nc * sizeof *s);
                if (!s)
                    return kh_err_set(err, KH_ENOMEM, "out of memory for timing samples");
                c->r->samples_ns = s;
                c->cap = nc;
            }
            double t0 = mono_ns();
            st = t->call(t->ctx, err);
            double t1 = mono_ns();
            if (st)
                return st;
            uint64_t w1 = w0 != UINT64_MAX ? t->waited_ns(t->ctx) : UINT64_MAX;
            int waited = w0 != UINT64_MAX && w1 != UINT64_MAX && w1 >= w0 &&
                         (double)(w1 - w0) > KH_HOSTBENCH_WAIT_NS +
                                                 KH_HOSTBENCH_WAIT_SHARE * (t1 - t0);
            if (waited && c->retakes) {
                c->retakes--;
                c->r->contended++;
                again = 1;
            } else {
                c->r->contended_kept += (size_t)waited;
                c->r->samples_ns[c->r->n++] = t1 - t0;
                c->timed++;
            }
        }
        if (t->post && (st = t->post(t->ctx, ti, err)))
            return st;
        if (!again)
            return KH_OK;
    }
}

kh_status kh_hostbench_run(kh_engine *e, const kh_hostbench_target *t, const kh_bench_opts *o,
                           kh_bench_result *r, kh_err *err)
{
    memset(r, 0, sizeof *r);
    snprintf(r->status, sizeof r->status, "OK");
    r->timer = "monotonic";
    run_ctx c = {.e = e, .t = t, .o = o, .r = r};
    /* one retake per timed call the protocol makes (at most) */
    c.retakes = o->protocol == KH_PROTO_OFFICIAL
                    ? (size_t)(o->trials > 16 ? 16 : o->trials < 1 ? 1 : o->trials) *
                          (size_t)(o->iters > 0 ? o->iters : 1)
                    : (size_t)(o->max_iters > 0 ? o->max_iters : 200);
    int cold = o->cold_l2;
    kh_status st = KH_OK;

    if (o->protocol == KH_PROTO_OFFICIAL) {
        int trials = o->trials > 16 ? 16 : (o->trials < 1 ? 1 : o->trials);
        int iters = o->iters > 0 ? o->iters : 1;
        double lat_sum = 0;
        for (int tr = 0; tr < trials && !st; tr++) {
            if (t->trial && (st = t->trial(t->ctx, tr, err)))
                break;
            size_t first = r->n;
            /* call; 5 x (flush; call); warmup x (flush; call) */
            st = one(&c, 0, 0, err);
            for (int i = 0; i < 5 && !st; i++)
                st = one(&c, cold, 0, err);
            for (int i = 0; i < o->warmup && !st; i++)
                st = one(&c, cold, 0, err);
            for (int i = 0; i < iters && !st; i++)
                st = one(&c, cold, 1, err);
            if (st)
                break;
            double med = kh_stat_median(r->samples_ns + first, r->n - first);
            r->trial_median_ns[tr] = med;
            lat_sum += med;
            r->trials = tr + 1;
        }
        if (!st && r->trials) {
            r->latency_ns = lat_sum / r->trials;
            r->window_latency_ns = r->latency_ns; /* one clock: no second method */
        }
        kh_bench_summarize(r);
    } else {
        if (t->trial && (st = t->trial(t->ctx, 0, err)))
            return st;
        r->trials = 1;
        for (int i = 0; i < o->warmup && !st; i++)
            st = one(&c, cold, 0, err);
        size_t cap_n = (size_t)(o->max_iters > 0 ? o->max_iters : 200);
        double t_start = kh_now();
        while (!st && r->n < cap_n) {
            for (int i = 0; i < 10 && !st && r->n < cap_n; i++)
                st = one(&c, cold, 1, err);
            if (st)
                break;
            kh_bench_summarize(r);
            if (o->protocol == KH_PROTO_SCREEN) {
                if (r->n >= 10 && r->rel_ci <= o->rel_ci)
                    break;
            } else {
                double rsd = r->mean_ns > 0 ? r->stdev_ns / r->mean_ns : INFINITY;
                if (r->n >= 10 && r->gpu_time_s >= o->min_gpu_s && rsd <= o->max_rel_stdev)
                    break;
                if (o->timeout_s > 0 && kh_now() - t_start > o->timeout_s)
                    break;
            }
        }
        kh_bench_summarize(r);
        r->latency_ns = r->median_ns;
        r->trial_median_ns[0] = r->median_ns;
    }
    return st;
}
