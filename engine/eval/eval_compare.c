/* eval_compare.c: a worker's returned outputs against the reference
 * outputs (engine/eval/check.h does the arithmetic).  Owns reading an
 * output's slice of the reply (and the size of the element ranges a
 * verified timed call returns), comparing every output of a call (whole, or
 * those ranges), the DSA top-k rule's
 * inputs, and telling elements left as the poison.  What a failure means
 * for the verdict is the stages'. */
#include "eval/eval_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* [offset, length] of the reply payload, or NULL when out of range. */
const unsigned char *eval_reply_bytes(const kh_msg *m, const json_t *sl, size_t want)
{
    json_int_t off = json_integer_value(json_array_get(sl, 0));
    json_int_t len = json_integer_value(json_array_get(sl, 1));
    if (!json_is_array(sl) || off < 0 || len < 0 || (size_t)len != want ||
        (size_t)off > m->payload_len || (size_t)len > m->payload_len - (size_t)off)
        return NULL;
    static const unsigned char empty[1];
    return len ? m->payload + off : empty; /* an empty tensor (a batch of 0) is there */
}

/* The bytes of the element ranges [[start, n], ...] of a dtype; 0 when the
 * list is not one (the worker's reply is checked against it). */
size_t eval_ranges_bytes(kh_dtype dt, const json_t *list)
{
    size_t total = 0, k;
    json_t *e;
    if (!json_is_array(list))
        return 0;
    json_array_foreach(list, k, e) {
        json_int_t a = json_integer_value(json_array_get(e, 0)),
                   b = json_integer_value(json_array_get(e, 1));
        if (a < 0 || b <= 0)
            return 0;
        total += kh_dtype_nbytes(dt, (uint64_t)(a + b)) - kh_dtype_nbytes(dt, (uint64_t)a);
    }
    return total;
}

/* Does element first_fail of out still hold the poison byte pattern? */
int eval_untouched(const kh_tensor *t, int64_t idx, unsigned pat)
{
    if (idx < 0)
        return 0;
    int bits = kh_dtype_bits(t->dtype);
    uint64_t code = kh_dtype_get_code(t->dtype, t->data, (uint64_t)idx);
    uint64_t want = 0;
    for (int b = 0; b < bits; b += 8)
        want |= (uint64_t)pat << b;
    if (bits < 8)
        want = pat & 0xF;
    return code == want;
}

/* Output ot's dtype and its shape on this workload (nd 0: a scalar). */
static kh_status out_shape(const wctx *c, const kh_task_tensor *ot, kh_dtype *dt,
                           int64_t shape[KH_TENSOR_MAX_DIMS], int *nd, kh_err *err)
{
    kh_status st = kh_dtype_parse(ot->dtype, dt, err);
    *nd = ot->is_scalar ? 0 : (int)ot->rank;
    for (int i = 0; i < *nd; i++)
        shape[i] = c->w->axes[ot->dims[i]];
    return st;
}

/* Compare the outputs at slices `outs` of the reply with the reference ro.
 * Returns 1 when they pass; fills r with the merged result. */
kh_status eval_compare_set(wctx *c, const kh_msg *m, const json_t *outs, const refout *ro,
                           kh_check_result *merged, unsigned poison, int *untouched_fail,
                           kh_err *err)
{
    kh_check_result_init(merged);
    *untouched_fail = 0;
    for (size_t k = 0; k < c->d->noutputs; k++) {
        const kh_task_tensor *ot = &c->d->outputs[k];
        kh_dtype dt;
        int64_t shape[KH_TENSOR_MAX_DIMS];
        int nd;
        kh_status st = out_shape(c, ot, &dt, shape, &nd, err);
        if (st)
            return st;
        size_t want = ro->lens[k];
        const unsigned char *b = eval_reply_bytes(m, json_object_get(outs, ot->name), want);
        if (!b)
            return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks output '%s'", ot->name);
        kh_tensor *tx = NULL, *ty = NULL;
        kh_check_result r;
        if (c->evaluator == KH_EVAL_DSA_TOPK && !strcmp(ot->name, "topk_indices")) {
            /* FlashInfer-Bench's DSA top-k rule: reachable, distinct indices
             * whose scores (recomputed from this seed's inputs) match */
            if ((st = eval_host_inputs(c, ro->seed, err)))
                return st;
            kh_check_topk_inputs in = {eval_input_named(c, "q_index_fp8"),
                                       eval_input_named(c, "k_index_cache_fp8"),
                                       eval_input_named(c, "weights"), eval_input_named(c, "seq_lens"),
                                       eval_input_named(c, "block_table")};
            if (!in.q || !in.k_cache || !in.weights || !in.seq_lens || !in.block_table)
                return kh_err_set(err, KH_EINVAL, "dsa_topk_indexer evaluator: '%s' lacks one of "
                                  "q_index_fp8, k_index_cache_fp8, weights, seq_lens, "
                                  "block_table (tensor inputs)", c->d->name);
            if ((st = kh_tensor_borrow(&tx, dt, nd, shape, (void *)b, want, err)) ||
                (st = kh_tensor_borrow(&ty, dt, nd, shape, ro->bytes[k], want, err)) ||
                (st = kh_check_dsa_topk(tx, ty, &in, &c->copts, &r, err))) {
                kh_tensor_free(tx);
                kh_tensor_free(ty);
                return st;
            }
        } else if ((st = kh_tensor_borrow(&tx, dt, nd, shape, (void *)b, want, err)) ||
            (st = kh_tensor_borrow(&ty, dt, nd, shape, ro->bytes[k], want, err)) ||
            (st = kh_check_compare(tx, ty, &c->copts, &r, err))) {
            kh_tensor_free(tx);
            kh_tensor_free(ty);
            return st;
        }
        if (r.status != KH_CHECK_PASSED && poison && !*untouched_fail) {
            /* Elements still holding the poison were never written.  For
             * float outputs any such element counts (no arithmetic result
             * has those bits: 0xFF.. is a NaN nobody computes, 0x7F.. the
             * largest finite); for integers, where -1 is a value, only the
             * first failing element is looked at. */
            if (kh_dtype_is_float(dt)) {
                for (uint64_t i = 0; i < tx->numel && !*untouched_fail; i++)
                    *untouched_fail = eval_untouched(tx, (int64_t)i, poison);
            } else {
                *untouched_fail = eval_untouched(tx, r.first_fail, poison);
            }
        }
        if (r.status != KH_CHECK_PASSED) {
            size_t l = strlen(r.reason);
            snprintf(r.reason + l, sizeof r.reason - l, " (output '%s')", ot->name);
        }
        kh_tensor_free(tx);
        kh_tensor_free(ty);
        kh_check_merge(merged, &r);
        if (merged->final)
            break;
    }
    return KH_OK;
}

/* Compare the element ranges a verified timed call returned (outputs at
 * slices `outs`, ranges {name: [[start, n], ...]}) with the same elements of
 * the reference ro (whole, or those ranges).  The rule is the definition's,
 * element by element, over the elements returned. */
kh_status eval_compare_ranged(wctx *c, const kh_msg *m, const json_t *outs,
                              const json_t *ranges, const refout *ro, kh_check_result *merged,
                              unsigned poison, int *untouched_fail, kh_err *err)
{
    kh_check_result_init(merged);
    *untouched_fail = 0;
    for (size_t k = 0; k < c->d->noutputs; k++) {
        const kh_task_tensor *ot = &c->d->outputs[k];
        kh_dtype dt;
        kh_status st = kh_dtype_parse(ot->dtype, &dt, err);
        if (st)
            return st;
        const json_t *list = json_object_get(ranges, ot->name);
        size_t rl = eval_ranges_bytes(dt, list), full = ro->lens[k];
        const unsigned char *b = eval_reply_bytes(m, json_object_get(outs, ot->name), rl);
        if (!rl || !b)
            return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks the ranges of output "
                              "'%s'", ot->name);
        unsigned char *refb = NULL;
        const unsigned char *yb = ro->bytes[k];
        if (!ro->ranges) { /* the whole reference: gather the same ranges */
            refb = malloc(rl);
            if (!refb)
                return kh_err_set(err, KH_ENOMEM, "out of memory");
            size_t at = 0, i;
            json_t *e;
            json_array_foreach(list, i, e) {
                uint64_t a = (uint64_t)json_integer_value(json_array_get(e, 0)),
                         n = (uint64_t)json_integer_value(json_array_get(e, 1));
                size_t bo = kh_dtype_nbytes(dt, a), bl = kh_dtype_nbytes(dt, a + n) - bo;
                if (bo + bl > full) {
                    free(refb);
                    return kh_err_set(err, KH_ECORRUPT, "output '%s': a range past its end",
                                      ot->name);
                }
                memcpy(refb + at, ro->bytes[k] + bo, bl);
                at += bl;
            }
            yb = refb;
        } else if (full != rl) {
            return kh_err_set(err, KH_ECORRUPT, "output '%s': the reference holds other ranges",
                              ot->name);
        }
        int64_t shape[1] = {0};
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e)
            shape[0] += json_integer_value(json_array_get(e, 1));
        kh_tensor *tx = NULL, *ty = NULL;
        kh_check_result r;
        if ((st = kh_tensor_borrow(&tx, dt, 1, shape, (void *)b, rl, err)) ||
            (st = kh_tensor_borrow(&ty, dt, 1, shape, (void *)yb, rl, err)) ||
            (st = kh_check_compare(tx, ty, &c->copts, &r, err))) {
            kh_tensor_free(tx);
            kh_tensor_free(ty);
            free(refb);
            return st;
        }
        if (r.status != KH_CHECK_PASSED && poison && !*untouched_fail) {
            if (kh_dtype_is_float(dt)) {
                for (uint64_t q = 0; q < tx->numel && !*untouched_fail; q++)
                    *untouched_fail = eval_untouched(tx, (int64_t)q, poison);
            } else {
                *untouched_fail = eval_untouched(tx, r.first_fail, poison);
            }
        }
        if (r.status != KH_CHECK_PASSED) {
            size_t l = strlen(r.reason);
            snprintf(r.reason + l, sizeof r.reason - l, " (output '%s', %lld sampled elements)",
                     ot->name, (long long)shape[0]);
        }
        kh_tensor_free(tx);
        kh_tensor_free(ty);
        free(refb);
        kh_check_merge(merged, &r);
        if (merged->final)
            break;
    }
    return KH_OK;
}

/* The parts of every output of a fused trial (the worker compared them on
 * the device, gpu_check.h), merged as kh_check_compare would have judged
 * the outputs themselves, in the definition's order of outputs. */
kh_status eval_compare_parts(wctx *c, const kh_msg *m, const json_t *parts,
                             const json_t *untouched, const json_t *ranges,
                             kh_check_result *merged, int *untouched_fail, kh_err *err)
{
    kh_check_result_init(merged);
    *untouched_fail = 0;
    for (size_t k = 0; k < c->d->noutputs; k++) {
        const kh_task_tensor *ot = &c->d->outputs[k];
        kh_dtype dt;
        int64_t shape[KH_TENSOR_MAX_DIMS];
        int nd;
        kh_status st = out_shape(c, ot, &dt, shape, &nd, err);
        if (st)
            return st;
        uint64_t numel = 1;
        for (int i = 0; i < nd; i++)
            numel *= (uint64_t)shape[i];
        const json_t *list = ranges ? json_object_get(ranges, ot->name) : NULL;
        if (ranges) { /* a verified timed call's element ranges */
            size_t q;
            json_t *e;
            if (!eval_ranges_bytes(dt, list))
                return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks the ranges of "
                                  "output '%s'", ot->name);
            uint64_t total = 0;
            json_array_foreach(list, q, e) {
                json_int_t a = json_integer_value(json_array_get(e, 0)),
                           n = json_integer_value(json_array_get(e, 1));
                if ((uint64_t)a + (uint64_t)n > numel)
                    return kh_err_set(err, KH_ECORRUPT, "output '%s': a range past its end",
                                      ot->name);
                total += (uint64_t)n;
            }
            numel = total;
        }
        size_t np = (size_t)kh_check_nchunks(numel), want = np * sizeof(kh_check_part);
        const unsigned char *b = eval_reply_bytes(m, json_object_get(parts, ot->name), want);
        if (!b)
            return kh_err_set(err, KH_ECORRUPT, "the worker's reply lacks the comparison of "
                              "output '%s'", ot->name);
        kh_check_part *pp = malloc(want ? want : 1); /* the payload holds them unaligned */
        if (!pp)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        memcpy(pp, b, want);
        kh_check_result r;
        st = kh_check_from_parts(pp, np, numel, &c->copts, &r, err);
        free(pp);
        if (st) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            return kh_err_set(err, KH_ECORRUPT, "the worker's comparison of output '%s': %.900s",
                              ot->name, why);
        }
        if (r.status != KH_CHECK_PASSED && !*untouched_fail)
            *untouched_fail = json_is_true(json_object_get(untouched, ot->name));
        if (r.status != KH_CHECK_PASSED) {
            size_t l = strlen(r.reason);
            if (list)
                snprintf(r.reason + l, sizeof r.reason - l,
                         " (output '%s', %llu sampled elements)", ot->name,
                         (unsigned long long)numel);
            else
                snprintf(r.reason + l, sizeof r.reason - l, " (output '%s')", ot->name);
        }
        kh_check_merge(merged, &r);
        if (merged->final)
            break;
    }
    return KH_OK;
}
