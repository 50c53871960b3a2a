/* bottleneck.c: the pure classifier (see bottleneck.h).  Owns the rule, the
 * occupancy arithmetic and the signature text; collecting the metrics is
 * left to rprof.c (range profiler) and ncu.c (Nsight Compute). */
#include "profile/bottleneck.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kh_bn_metrics_init(kh_bn_metrics *m)
{
    m->time_ns = m->sm_pct = m->mem_pct = m->dram_pct = NAN;
    m->dram_read_bytes = m->dram_write_bytes = NAN;
    m->warps_active_pct = m->l2_hit_pct = m->tensor_pct = m->waves = NAN;
}

int kh_bn_parse_number(const char *s, double *out)
{
    char buf[64];
    size_t n = 0;
    *out = NAN;
    if (!s)
        return 0;
    while (isspace((unsigned char)*s))
        s++;
    /* ncu keeps thousands separators in CSV ("1,980,000"); drop them. */
    for (; *s && n < sizeof buf - 1; s++)
        if (*s != ',')
            buf[n++] = *s;
    buf[n] = 0;
    while (n && isspace((unsigned char)buf[n - 1]))
        buf[--n] = 0;
    if (!n)
        return 0;
    char *end;
    double v = strtod(buf, &end);
    if (*end || end == buf || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

static double jnum(const json_t *obj, const char *k)
{
    const json_t *v = json_object_get(obj, k);
    double d = NAN;
    if (json_is_number(v))
        d = json_number_value(v);
    else if (json_is_string(v))
        kh_bn_parse_number(json_string_value(v), &d);
    return d;
}

void kh_bn_metrics_from_json(const json_t *obj, kh_bn_metrics *m)
{
    kh_bn_metrics_init(m);
    if (!json_is_object(obj))
        return;
    m->time_ns = jnum(obj, KH_BN_TIME);
    m->sm_pct = jnum(obj, KH_BN_SM);
    m->mem_pct = jnum(obj, KH_BN_MEM);
    m->dram_pct = jnum(obj, KH_BN_DRAM);
    m->dram_read_bytes = jnum(obj, KH_BN_DRAM_READ);
    m->dram_write_bytes = jnum(obj, KH_BN_DRAM_WRITE);
    m->warps_active_pct = jnum(obj, KH_BN_WARPS);
    m->l2_hit_pct = jnum(obj, KH_BN_L2_HIT);
    m->waves = jnum(obj, KH_BN_WAVES);
    /* Any tensor-pipe utilisation metric the caller chose (the name is
     * configurable): the first key naming the tensor pipe in % of peak. */
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        if (strstr(k, "pipe_tensor") && strstr(k, "pct_of_peak")) {
            m->tensor_pct = jnum(obj, k);
            break;
        }
    }
}

void kh_bn_occupancy(const kh_bn_launch *l, kh_bn_state *s)
{
    s->blocks_per_sm = 0;
    s->occupancy_pct = NAN;
    s->limiter = NULL;
    if (!l || l->threads_per_block <= 0 || l->max_threads_per_sm <= 0)
        return;
    int warps = (l->threads_per_block + 31) / 32;
    long by_threads = l->max_threads_per_sm / (warps * 32);
    long by_blocks = l->max_blocks_per_sm > 0 ? l->max_blocks_per_sm : LONG_MAX;
    long by_regs = LONG_MAX, by_smem = LONG_MAX;
    if (l->regs_per_thread > 0 && l->regs_per_sm > 0) {
        /* Registers are allocated per warp in units of 256. */
        long per_warp = ((long)l->regs_per_thread * 32 + 255) / 256 * 256;
        by_regs = l->regs_per_sm / (per_warp * warps);
    }
    if (l->smem_per_block > 0 && l->smem_per_sm > 0)
        by_smem = l->smem_per_sm / (l->smem_per_block + l->reserved_smem_per_block);
    long size_lim = by_threads < by_blocks ? by_threads : by_blocks;
    long lim = size_lim;
    const char *why = "block-size"; /* too big for the thread limit, or too small to fill */
    if (by_regs < size_lim && by_regs <= by_smem) {
        lim = by_regs;
        why = "registers";
    } else if (by_smem < size_lim && by_smem < by_regs) {
        lim = by_smem;
        why = "shared-memory";
    }
    int bps = l->api_blocks_per_sm > 0 ? l->api_blocks_per_sm : (int)lim;
    s->blocks_per_sm = bps;
    s->occupancy_pct = 100.0 * bps * warps * 32 / l->max_threads_per_sm;
    if (s->occupancy_pct > 100.0)
        s->occupancy_pct = 100.0;
    s->limiter = s->occupancy_pct >= 99.999 ? "none" : why;
}

static void signature(kh_bn_state *s, size_t nkernels)
{
    char *p = s->signature;
    size_t n = sizeof s->signature, l = 0;
#define ADD(...)                                                                          \
    do {                                                                                  \
        if (l < n) {                                                                      \
            int w_ = snprintf(p + l, n - l, __VA_ARGS__);                                 \
            l += w_ > 0 ? (size_t)w_ : 0;                                                 \
        }                                                                                 \
    } while (0)
    ADD("%s", s->kind);
    if (!s->counters) {
        /* nothing more from counters */
    } else if (s->roof && isfinite(s->roof_pct)) {
        ADD(" %s %.0f%%", s->roof, s->roof_pct);
    } else {
        ADD(" sm %.0f%% mem %.0f%%", isfinite(s->sm_pct) ? s->sm_pct : 0.0,
            isfinite(s->mem_pct) ? s->mem_pct : 0.0);
    }
    if (s->counters && !strcmp(s->kind, "small-grid") && isfinite(s->waves))
        ADD(" waves %.2g", s->waves);
    if (isfinite(s->sol_fraction))
        ADD(" sol %.0f%%", 100.0 * s->sol_fraction);
    if (isfinite(s->reread))
        ADD(" reread %.1fx", s->reread);
    if (s->limiter && strcmp(s->limiter, "none"))
        ADD(" occupancy:%s", s->limiter);
    if (s->spills > 0)
        ADD(" spills:%d", s->spills);
    if (nkernels > 1)
        ADD(" kernels:%zu", nkernels);
#undef ADD
}

static void sol(kh_bn_state *s, const kh_bn_context *c)
{
    s->reread = s->sol_ns = s->sol_fraction = NAN;
    if (!c)
        return;
    if (c->measured_ns > 0)
        s->time_ns = c->measured_ns;
    if (c->min_bytes > 0 && isfinite(s->dram_bytes))
        s->reread = s->dram_bytes / c->min_bytes;
    double bound = NAN;
    if (c->min_bytes > 0 && c->copy_bytes_per_s > 0)
        bound = c->min_bytes / c->copy_bytes_per_s * 1e9;
    if (c->flops > 0 && c->matrix_flops_per_s > 0) {
        double f = c->flops / c->matrix_flops_per_s * 1e9;
        bound = isfinite(bound) ? fmax(bound, f) : f;
    }
    s->sol_ns = bound;
    if (isfinite(bound) && isfinite(s->time_ns) && s->time_ns > 0)
        s->sol_fraction = bound / s->time_ns;
}

void kh_bn_classify(const kh_bn_metrics *m, const kh_bn_launch *l, const kh_bn_context *c,
                    const char *why_no_counters, kh_bn_state *s)
{
    memset(s, 0, sizeof *s);
    s->roof_pct = s->sm_pct = s->mem_pct = s->dram_pct = NAN;
    s->time_ns = s->dram_bytes = s->dram_bytes_per_s = s->waves = NAN;
    s->spills = l && l->spill_instructions >= 0 ? l->spill_instructions : -1;
    s->local_bytes = l ? l->local_bytes : 0;
    kh_bn_occupancy(l, s);
    if (l && l->blocks > 0 && l->sms > 0 && s->blocks_per_sm > 0)
        s->waves = (double)l->blocks / ((double)l->sms * s->blocks_per_sm);

    double sm = m ? m->sm_pct : NAN, mem = m ? m->mem_pct : NAN;
    if (m && !isfinite(mem))
        mem = m->dram_pct; /* DRAM alone is a lower bound of the memory side */
    if (!m || !isfinite(sm) || !isfinite(mem)) {
        s->kind = "no-counters";
        snprintf(s->why, sizeof s->why, "%s",
                 why_no_counters ? why_no_counters
                                 : !m ? "no metrics"
                                      : "sm__throughput or gpu__compute_memory_throughput "
                                        "missing");
        if (m && isfinite(m->time_ns))
            s->time_ns = m->time_ns;
        sol(s, c);
        signature(s, 1);
        return;
    }
    s->counters = 1;
    s->sm_pct = sm;
    s->mem_pct = mem;
    s->dram_pct = m->dram_pct;
    s->time_ns = m->time_ns;
    if (isfinite(m->waves))
        s->waves = m->waves;
    if (isfinite(m->dram_read_bytes) && isfinite(m->dram_write_bytes)) {
        s->dram_bytes = m->dram_read_bytes + m->dram_write_bytes;
        if (isfinite(m->time_ns) && m->time_ns > 0)
            s->dram_bytes_per_s = s->dram_bytes / (m->time_ns * 1e-9);
    }

    int memory_side = mem >= sm;
    if (sm >= 80 || mem >= 80) {
        s->at_roof = 1;
        s->kind = memory_side ? "memory-bound" : "compute-bound";
    } else if (sm < 60 && mem < 60) {
        s->kind = isfinite(s->waves) && s->waves < 1 ? "small-grid" : "latency-bound";
        memory_side = -1;
    } else if (fabs(sm - mem) >= 10) {
        s->kind = memory_side ? "memory-bound" : "compute-bound";
    } else {
        s->kind = "balanced";
        memory_side = -1;
    }
    if (memory_side == 1) {
        /* ncu names the hottest memory unit; DRAM when it is within 5 points of
         * the memory throughput (the max over DRAM, L2, L1). */
        if (isfinite(m->dram_pct) && m->dram_pct >= mem - 5) {
            s->roof = "dram";
            s->roof_pct = m->dram_pct;
        } else {
            s->roof = "cache";
            s->roof_pct = mem;
        }
    } else if (memory_side == 0) {
        if (isfinite(m->tensor_pct) && m->tensor_pct >= 60 && m->tensor_pct >= sm - 10) {
            s->roof = "tensor";
            s->roof_pct = m->tensor_pct;
        } else {
            s->roof = "sm";
            s->roof_pct = sm;
        }
    }
    sol(s, c);
    signature(s, 1);
}

void kh_bn_combine(const kh_bn_state *k, size_t n, const kh_bn_context *c, kh_bn_state *out)
{
    size_t best = 0;
    double t_sum = 0, bytes = 0;
    int bytes_known = 1, t_known = 1;
    for (size_t i = 0; i < n; i++) {
        double t = isfinite(k[i].time_ns) ? k[i].time_ns : 0;
        double tb = isfinite(k[best].time_ns) ? k[best].time_ns : 0;
        if (t > tb)
            best = i;
        if (isfinite(k[i].time_ns))
            t_sum += k[i].time_ns;
        else
            t_known = 0;
        if (isfinite(k[i].dram_bytes))
            bytes += k[i].dram_bytes;
        else
            bytes_known = 0;
    }
    *out = k[best];
    out->time_ns = t_known ? t_sum : NAN;
    out->dram_bytes = bytes_known ? bytes : NAN;
    out->dram_bytes_per_s = bytes_known && t_known && t_sum > 0 ? bytes / (t_sum * 1e-9) : NAN;
    int spills = 0;
    for (size_t i = 0; i < n; i++)
        if (k[i].spills > 0)
            spills += k[i].spills;
    if (spills)
        out->spills = spills;
    sol(out, c);
    signature(out, n);
}

static json_t *jreal(double v) { return isfinite(v) ? json_real(v) : json_null(); }

json_t *kh_bn_state_json(const kh_bn_state *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "signature", json_string(s->signature));
    json_object_set_new(o, "kind", json_string(s->kind ? s->kind : "no-counters"));
    json_object_set_new(o, "counters", json_boolean(s->counters));
    if (!s->counters)
        json_object_set_new(o, "why", json_string(s->why));
    json_object_set_new(o, "at_roof", json_boolean(s->at_roof));
    json_object_set_new(o, "roof", s->roof ? json_string(s->roof) : json_null());
    json_object_set_new(o, "roof_pct", jreal(s->roof_pct));
    json_object_set_new(o, "sm_pct", jreal(s->sm_pct));
    json_object_set_new(o, "mem_pct", jreal(s->mem_pct));
    json_object_set_new(o, "dram_pct", jreal(s->dram_pct));
    json_object_set_new(o, "time_ns", jreal(s->time_ns));
    json_object_set_new(o, "dram_bytes", jreal(s->dram_bytes));
    json_object_set_new(o, "dram_bytes_per_s", jreal(s->dram_bytes_per_s));
    json_object_set_new(o, "reread", jreal(s->reread));
    json_object_set_new(o, "sol_ns", jreal(s->sol_ns));
    json_object_set_new(o, "sol_fraction", jreal(s->sol_fraction));
    json_object_set_new(o, "waves", jreal(s->waves));
    json_object_set_new(o, "blocks_per_sm", s->blocks_per_sm > 0
                                                ? json_integer(s->blocks_per_sm)
                                                : json_null());
    json_object_set_new(o, "occupancy_pct", jreal(s->occupancy_pct));
    json_object_set_new(o, "occupancy_limiter", s->limiter ? json_string(s->limiter)
                                                           : json_null());
    json_object_set_new(o, "spills", s->spills >= 0 ? json_integer(s->spills) : json_null());
    json_object_set_new(o, "local_bytes", json_integer(s->local_bytes));
    return o;
}
