/* gpu_verify.c: the device-side steps of a fused request's verification
 * (docs/evaluation.md, "Verification on the device").  After the
 * candidate's calls of a trial, gpu_eval.c runs the trusted reference on the
 * same seed's inputs in buffers of its own; this unit keeps the first
 * poison's outputs (stash), checks the two calls gave the same bits,
 * compares each output with the reference's where both lie (gpu_check.h)
 * into the parts the coordinator merges, looks for elements still holding
 * the poison in an output that failed, and overwrites the reference's
 * outputs once judged.  Calls gpu_eval_buf.c, never gpu_eval.c. */
#include "gpu/gpu_eval_int.h"

#include "task/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kh_status gev_ensure_cmp(kh_gpu_eval *ev, kh_err *err)
{
    if (ev->cmp)
        return KH_OK;
    char arch[16];
    gev_arch(ev, arch);
    ev->cmp = kh_gpu_cmp_new(ev->e, kh_gpu_api(ev->g), arch, kh_gpu_stream(ev->g), err);
    return ev->cmp ? KH_OK : kh_err_prefix(err, "the device comparison");
}

/* The reference's tensor of the candidate's output i, or -1. */
static long ref_output(const ev_run *r, const ev_verify *v, size_t i)
{
    const ev_run *q = v->ref;
    for (size_t k = 0; k < q->nt; k++)
        if (q->ts[k].role == ROLE_OUT && !strcmp(q->ts[k].name, r->ts[i].name))
            return (long)k;
    return -1;
}

kh_status gev_verify_match(const ev_run *r, const ev_verify *v, kh_err *err)
{
    size_t nout = 0, nref = 0;
    for (size_t k = 0; k < v->ref->nt; k++)
        nref += v->ref->ts[k].role == ROLE_OUT;
    for (size_t i = 0; i < r->nt; i++) {
        if (r->ts[i].role != ROLE_OUT)
            continue;
        nout++;
        long k = ref_output(r, v, i);
        if (k < 0 || !r->ts[i].has_dtype || !v->ref->ts[k].has_dtype ||
            r->ts[i].dtype != v->ref->ts[k].dtype || r->ts[i].numel != v->ref->ts[k].numel ||
            r->ts[i].bytes != v->ref->ts[k].bytes)
            return kh_err_set(err, KH_EINVAL, "verify.reference: output '%s' is not the "
                              "reference's (name, dtype and size)", r->ts[i].name);
    }
    if (nout != nref)
        return kh_err_set(err, KH_EINVAL, "verify.reference: %zu outputs, the candidate %zu",
                          nref, nout);
    return KH_OK;
}

/* A comparison call failed: whether the context is gone is kh_gpu's to
 * know (a sticky error makes the worker exit after its reply). */
static kh_status cmp_failed(ev_run *r, kh_status st)
{
    kh_err e2;
    kh_gpu_sync(r->ev->g, &e2);
    return st;
}

kh_status gev_verify_stash(ev_run *r, ev_verify *v, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(r->ev->g);
    for (size_t i = 0; i < r->nt; i++) {
        if (r->ts[i].role != ROLE_OUT || !r->ts[i].bytes)
            continue;
        kh_status st = KH_OK;
        if (!v->stash[i].ptr)
            st = kh_gpu_buf_alloc(r->ev->g, r->ts[i].bytes, r->guard, &v->stash[i], err);
        if (!st)
            st = kh_gpu_check(r->ev->g, cu->cuMemcpyDtoDAsync(v->stash[i].ptr,
                                                               r->shared[i].buf.ptr,
                                                               r->ts[i].bytes,
                                                               kh_gpu_stream(r->ev->g)),
                              "cuMemcpyDtoDAsync (the first poison's outputs)", err);
        if (st)
            return st;
    }
    return kh_gpu_sync(r->ev->g, err);
}

kh_status gev_verify_same(ev_run *r, ev_verify *v, int *same, kh_err *err)
{
    *same = 1;
    for (size_t i = 0; i < r->nt && *same; i++) {
        if (r->ts[i].role != ROLE_OUT || !r->ts[i].bytes)
            continue;
        kh_status st = kh_gpu_cmp_same(r->ev->cmp, v->stash[i].ptr, r->shared[i].buf.ptr,
                                       r->ts[i].bytes, same, err);
        if (st)
            return cmp_failed(r, st);
    }
    return KH_OK;
}

/* The code an element holds when every byte of it is pat (a 4-bit element:
 * pat's low nibble), as eval_untouched reads it. */
static uint64_t poison_code(kh_dtype t, unsigned pat)
{
    int bits = kh_dtype_bits(t);
    if (bits < 8)
        return pat & 0xF;
    uint64_t want = 0;
    for (int b = 0; b < bits; b += 8)
        want |= (uint64_t)(pat & 0xFF) << b;
    return want;
}

/* Whether the failing output at p still holds the poison: for a float any
 * element (no arithmetic result has those bits), for an integer the first
 * failing element alone (-1 is a value). */
static kh_status untouched(ev_run *r, const ev_tensor *t, CUdeviceptr p, unsigned pat,
                           const kh_check_result *res, int *yes, kh_err *err)
{
    *yes = 0;
    uint64_t code = poison_code(t->dtype, pat);
    int64_t first = -1;
    kh_status st = KH_OK;
    if (kh_dtype_is_float(t->dtype)) {
        st = kh_gpu_cmp_find(r->ev->cmp, t->dtype, p, t->numel, code, &first, err);
    } else if (res->first_fail >= 0 && (uint64_t)res->first_fail < t->numel) {
        size_t at = kh_dtype_nbytes(t->dtype, (uint64_t)res->first_fail);
        st = kh_gpu_cmp_find(r->ev->cmp, t->dtype, p + at, 1, code, &first, err);
    }
    if (st)
        return cmp_failed(r, st);
    *yes = first >= 0;
    return KH_OK;
}

/* Output t at x against y (numel elements each): its parts into the
 * payload and parts[name]; when it fails and pat is set, whether x still
 * holds the poison, into untouched[name].  buf/cap: the caller's scratch. */
static kh_status judge_one(ev_run *r, ev_verify *v, const ev_tensor *t, CUdeviceptr x,
                           CUdeviceptr y, uint64_t numel, unsigned pat, obuf *o, json_t *parts,
                           json_t *ut, kh_check_part **buf, size_t *cap, kh_err *err)
{
    size_t np = (size_t)kh_check_nchunks(numel);
    if (np > *cap) {
        kh_check_part *nb = realloc(*buf, np * sizeof **buf);
        if (!nb)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        *buf = nb;
        *cap = np;
    }
    kh_status st;
    if (np && (st = kh_gpu_cmp_parts(r->ev->cmp, t->dtype, x, y, numel, &v->copts, *buf, err)))
        return cmp_failed(r, st);
    size_t off = 0;
    if ((st = gev_obuf_add(o, *buf, np * sizeof **buf, &off, err)))
        return st;
    json_object_set_new(parts, t->name,
                        json_pack("[I, I]", (json_int_t)off, (json_int_t)(np * sizeof **buf)));
    kh_check_result res;
    if (!pat || (st = kh_check_from_parts(*buf, np, numel, &v->copts, &res, err)) ||
        res.status == KH_CHECK_PASSED)
        return st;
    int yes = 0;
    if ((st = untouched(r, t, x, pat, &res, &yes, err)))
        return st;
    if (yes)
        json_object_set_new(ut, t->name, json_true());
    return KH_OK;
}

/* Every output of r against the reference's: from the trial's stash
 * (from_stash) or its own buffer. */
static kh_status judge_all(ev_run *r, ev_verify *v, int from_stash, unsigned pat, obuf *o,
                           json_t **parts_out, json_t **untouched_out, kh_err *err)
{
    json_t *parts = json_object(), *ut = json_object();
    kh_check_part *buf = NULL;
    size_t cap = 0;
    kh_status st = KH_OK;
    for (size_t i = 0; i < r->nt && !st; i++) {
        const ev_tensor *t = &r->ts[i];
        if (t->role != ROLE_OUT)
            continue;
        long k = ref_output(r, v, i);
        if (k < 0) {
            st = kh_err_set(err, KH_EINVAL, "verify: no reference output '%s'", t->name);
            break;
        }
        CUdeviceptr x = from_stash ? v->stash[i].ptr : r->shared[i].buf.ptr;
        st = judge_one(r, v, t, x, v->ref->shared[k].buf.ptr, t->numel, pat, o, parts, ut, &buf,
                       &cap, err);
    }
    free(buf);
    if (st) {
        json_decref(parts);
        json_decref(ut);
        return st;
    }
    *parts_out = parts;
    *untouched_out = ut;
    return KH_OK;
}

kh_status gev_verify_judge(ev_run *r, ev_verify *v, int from_stash, unsigned pat, obuf *o,
                           json_t **parts_out, json_t **untouched_out, kh_err *err)
{
    return judge_all(r, v, from_stash, pat, o, parts_out, untouched_out, err);
}

/* ---- the timing phase's verified calls -------------------------------------------
 * Each is kept in one stash of the worker's (an island, sized for
 * max_verified calls once) and judged after the timing phase, when the
 * reference runs on each kept call's seed. */
#define SLOT(n) (((n) + 255) & ~(size_t)255)

/* The element ranges of output i for call k (kh_rng_ranges: the draw the
 * host path returns), into rg; their count. */
static size_t call_ranges(const ev_run *r, size_t i, long k, uint64_t rg[][2])
{
    return kh_rng_ranges(r->sample_seed, (uint64_t)k, i, r->ts[i].numel, (size_t)r->rcount,
                         r->relems, rg);
}

/* The most bytes one call keeps: every output whole, or its ranges. */
static size_t per_call_bytes(const ev_run *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nt; i++) {
        if (r->ts[i].role != ROLE_OUT)
            continue;
        uint64_t most = (uint64_t)r->rcount * r->relems;
        n += SLOT(r->rcount > 0 && most < r->ts[i].numel ? kh_dtype_nbytes(r->ts[i].dtype, most)
                                                         : r->ts[i].bytes);
    }
    return n ? n : 256;
}

kh_status gev_verify_keep_timed(ev_run *r, ev_verify *v, long k, int set, kh_err *err)
{
    const kh_cuda_api *cu = kh_gpu_api(r->ev->g);
    kh_status st = KH_OK;
    if (!v->tstash.ptr) {
        size_t calls = r->max_verified > 0 ? (size_t)r->max_verified : 1;
        v->per_call = per_call_bytes(r);
        if ((st = kh_gpu_buf_alloc(r->ev->g, v->per_call * calls, r->guard, &v->tstash, err)) ||
            (st = kh_gpu_buf_alloc(r->ev->g, v->per_call, r->guard, &v->gather, err)))
            return st;
        v->tc = calloc(calls, sizeof *v->tc);
        if (!v->tc)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    if (v->tused + v->per_call > v->tstash.bytes)
        return kh_err_set(err, KH_ESTATE, "more verified timed calls than max_verified");
    ev_tcall *tc = &v->tc[v->ntc];
    memset(tc, 0, sizeof *tc);
    tc->seed = r->set_seed[set];
    tc->set = set;
    tc->call = k;
    size_t at = v->tused;
    CUstream s = kh_gpu_stream(r->ev->g);
    for (size_t i = 0; i < r->nt && !st; i++) {
        if (r->ts[i].role != ROLE_OUT)
            continue;
        tc->off[i] = at;
        CUdeviceptr src = r->shared[i].buf.ptr, dst = v->tstash.ptr + at;
        if (r->rcount <= 0) {
            if (r->ts[i].bytes)
                st = kh_gpu_check(r->ev->g, cu->cuMemcpyDtoDAsync(dst, src, r->ts[i].bytes, s),
                                  "cuMemcpyDtoDAsync (a verified call's outputs)", err);
            at += SLOT(r->ts[i].bytes);
            continue;
        }
        if (!tc->ranges)
            tc->ranges = json_object();
        uint64_t rg[MAX_RANGES][2], bytes[MAX_RANGES][2];
        size_t n = call_ranges(r, i, k, rg), used = 0;
        json_t *list = json_array();
        json_object_set_new(tc->ranges, r->ts[i].name, list);
        for (size_t q = 0; q < n; q++) {
            size_t boff = kh_dtype_nbytes(r->ts[i].dtype, rg[q][0]);
            bytes[q][0] = boff;
            bytes[q][1] = kh_dtype_nbytes(r->ts[i].dtype, rg[q][0] + rg[q][1]) - boff;
            used += bytes[q][1];
            json_array_append_new(list, json_pack("[I, I]", (json_int_t)rg[q][0],
                                                  (json_int_t)rg[q][1]));
        }
        st = gev_gather(r->ev, src, (const uint64_t (*)[2])bytes, n, dst, err);
        at += SLOT(used);
    }
    /* the copies run in stream order before the next call; nothing waits */
    if (st) {
        json_decref(tc->ranges);
        tc->ranges = NULL;
        return st;
    }
    v->tused = at;
    v->ntc++;
    return KH_OK;
}

/* Output i's element count in kept call tc (its ranges' total, or whole). */
static uint64_t kept_numel(const ev_run *r, const ev_tcall *tc, size_t i)
{
    const json_t *list = tc->ranges ? json_object_get(tc->ranges, r->ts[i].name) : NULL;
    if (!list)
        return r->ts[i].numel;
    uint64_t n = 0;
    size_t q;
    json_t *e;
    json_array_foreach(list, q, e) n += (uint64_t)json_integer_value(json_array_get(e, 1));
    return n;
}

kh_status gev_verify_timed_begin(ev_run *r, ev_verify *v, kh_err *err)
{
    kh_status st = gev_ensure_cmp(r->ev, err);
    if (st)
        return st;
    size_t total = 0;
    for (size_t j = 0; j < v->ntc; j++)
        for (size_t i = 0; i < r->nt; i++)
            if (r->ts[i].role == ROLE_OUT)
                total += (size_t)kh_gpu_cmp_slots(kept_numel(r, &v->tc[j], i));
    v->pused = 0;
    if (total <= v->dparts_n)
        return KH_OK;
    const kh_cuda_api *cu = kh_gpu_api(r->ev->g);
    if (v->dparts)
        cu->cuMemFree(v->dparts);
    v->dparts = 0;
    v->dparts_n = 0;
    st = kh_gpu_check(r->ev->g, cu->cuMemAlloc(&v->dparts, total * sizeof(kh_check_part)),
                      "cuMemAlloc (the kept calls' parts)", err);
    if (!st)
        v->dparts_n = total;
    return st;
}

kh_status gev_verify_timed_enqueue(ev_run *r, ev_verify *v, ev_tcall *tc, kh_err *err)
{
    kh_status st = KH_OK;
    for (size_t i = 0; i < r->nt && !st; i++) {
        const ev_tensor *t = &r->ts[i];
        if (t->role != ROLE_OUT)
            continue;
        long k = ref_output(r, v, i);
        if (k < 0)
            return kh_err_set(err, KH_EINVAL, "verify: no reference output '%s'", t->name);
        CUdeviceptr x = v->tstash.ptr + tc->off[i], y = v->ref->shared[k].buf.ptr;
        uint64_t numel = t->numel;
        const json_t *list = tc->ranges ? json_object_get(tc->ranges, t->name) : NULL;
        if (list) { /* the reference's same ranges, gathered one after another (the
                     * gather buffer is reused in stream order) */
            uint64_t bytes[MAX_RANGES][2];
            size_t q, nr = json_array_size(list);
            json_t *e;
            if (nr > MAX_RANGES)
                return kh_err_set(err, KH_ESTATE, "verify: %zu ranges (at most %d)", nr,
                                  MAX_RANGES);
            numel = 0;
            json_array_foreach(list, q, e) {
                uint64_t a = (uint64_t)json_integer_value(json_array_get(e, 0)),
                         n = (uint64_t)json_integer_value(json_array_get(e, 1));
                bytes[q][0] = kh_dtype_nbytes(t->dtype, a);
                bytes[q][1] = kh_dtype_nbytes(t->dtype, a + n) - bytes[q][0];
                numel += n;
            }
            st = gev_gather(r->ev, y, (const uint64_t (*)[2])bytes, nr, v->gather.ptr, err);
            y = v->gather.ptr;
        }
        size_t np = (size_t)kh_check_nchunks(numel), ns = (size_t)kh_gpu_cmp_slots(numel);
        if (v->pused + ns > v->dparts_n)
            return kh_err_set(err, KH_ESTATE, "verify: more parts than gev_verify_timed_begin "
                              "made room for");
        tc->poff[i] = v->pused;
        tc->pn[i] = np;
        if (!st && np)
            st = kh_gpu_cmp_parts_async(r->ev->cmp, t->dtype, x, y, numel, &v->copts,
                                        v->dparts + v->pused * sizeof(kh_check_part), err);
        if (st)
            return cmp_failed(r, st);
        v->pused += ns;
    }
    return st;
}

kh_status gev_verify_timed_finish(ev_run *r, ev_verify *v, obuf *o, json_t *timed_outputs,
                                  kh_err *err)
{
    /* the groups' parts back, each output's folded into its parts (at
     * most a quarter as many) */
    kh_check_part *all = v->pused ? malloc(v->pused * sizeof *all) : NULL,
                  *fold = v->pused ? malloc(v->pused * sizeof *fold) : NULL;
    if (v->pused && (!all || !fold)) {
        free(all);
        free(fold);
        return kh_err_set(err, KH_ENOMEM, "out of memory for %zu parts", v->pused);
    }
    kh_status st = kh_gpu_sync(r->ev->g, err);
    if (!st && v->pused)
        st = kh_gpu_check(r->ev->g,
                          kh_gpu_api(r->ev->g)->cuMemcpyDtoH(all, v->dparts,
                                                             v->pused * sizeof *all),
                          "cuMemcpyDtoH (the kept calls' parts)", err);
    for (size_t j = 0; j < v->ntc && !st; j++) {
        const ev_tcall *tc = &v->tc[j];
        json_t *parts = json_object();
        for (size_t i = 0; i < r->nt && !st; i++) {
            if (r->ts[i].role != ROLE_OUT)
                continue;
            size_t off = 0, len = tc->pn[i] * sizeof *all;
            kh_gpu_cmp_fold(all + tc->poff[i], tc->pn[i], fold);
            st = gev_obuf_add(o, fold, len, &off, err);
            if (!st)
                json_object_set_new(parts, r->ts[i].name,
                                    json_pack("[I, I]", (json_int_t)off, (json_int_t)len));
        }
        json_t *to = json_pack("{s:I, s:i, s:I, s:o}", "seed", (json_int_t)tc->seed, "set",
                               tc->set, "call", (json_int_t)tc->call, "parts", parts);
        if (tc->ranges)
            json_object_set(to, "ranges", tc->ranges);
        json_array_append_new(timed_outputs, to);
    }
    free(all);
    free(fold);
    return st;
}

kh_status gev_verify_sums(ev_verify *v, json_t **sums, kh_err *err)
{
    ev_run *q = v->ref;
    json_t *a = json_array();
    for (size_t k = 0; k < q->nt; k++) {
        if (q->ts[k].role != ROLE_OUT)
            continue;
        uint64_t h = 0;
        kh_status st = q->ts[k].bytes ? gev_checksum(q->ev, q->shared[k].buf.ptr, q->ts[k].bytes,
                                                     &h, err)
                                      : KH_OK;
        if (st) {
            json_decref(a);
            return st;
        }
        char hx[17];
        snprintf(hx, sizeof hx, "%016llx", (unsigned long long)h);
        json_array_append_new(a, json_string(hx));
    }
    *sums = a;
    return KH_OK;
}

kh_status gev_verify_clear(ev_verify *v, kh_err *err)
{
    ev_run *q = v->ref;
    for (size_t k = 0; k < q->nt; k++) {
        kh_status st = q->ts[k].role == ROLE_OUT && q->ts[k].bytes
                           ? kh_gpu_memset8(q->ev->g, q->shared[k].buf.ptr, 0xFF, q->ts[k].bytes,
                                            err)
                           : KH_OK;
        if (st)
            return st;
    }
    return KH_OK;
}

void gev_verify_free_stash(ev_run *r, ev_verify *v)
{
    for (size_t i = 0; i < MAX_TENSORS; i++)
        if (v->stash[i].ptr || v->stash[i].base)
            kh_gpu_buf_free(r->ev->g, &v->stash[i]);
    memset(v->stash, 0, sizeof v->stash);
    if (v->tstash.ptr)
        kh_gpu_buf_free(r->ev->g, &v->tstash);
    if (v->gather.ptr)
        kh_gpu_buf_free(r->ev->g, &v->gather);
    memset(&v->tstash, 0, sizeof v->tstash);
    memset(&v->gather, 0, sizeof v->gather);
    if (v->dparts)
        kh_gpu_api(r->ev->g)->cuMemFree(v->dparts);
    v->dparts = 0;
    v->dparts_n = 0;
}
