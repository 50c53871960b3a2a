/* test_eval_parts.c: the coordinator's side of verification on the device
 * (docs/evaluation.md, "Verification on the device"), on the host.  A fused
 * reply carries each output's comparison parts instead of the output;
 * eval_compare_parts must give the verdict eval_compare_set (whole outputs)
 * and eval_compare_ranged (a verified timed call's element ranges) give on the
 * outputs themselves: the whole result struct, reason included, and the
 * poison flag the worker sent.  The parts come from kh_check_parts, the
 * host's scan of the same chunks the device kernel scans (test_gpu_check
 * holds the two to the same bits).  The task is the red team's c = a + b
 * (tests/redteam/cuda_device, float32 [n]) on both of its workloads (one
 * chunk, and 64); cases: equal, moved codes, the poison left in place, a NaN
 * (a final verdict); a reply whose parts are cut short is refused. */
#include "kh_test.h"

#include "eval/eval_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seed;

typedef struct fixture {
    kh_task_set *set;
    kh_eval_opts o;
    wctx c;
} fixture;

static void fixture_load(fixture *f, size_t workload)
{
    char path[1024];
    kh_task_opts to = {0};
    kh_err err;
    memset(f, 0, sizeof *f);
    snprintf(path, sizeof path, "%s/tests/redteam/cuda_device", kh_test_source_dir());
    if (kh_task_load(path, &to, &f->set, &err))
        fail_msg("loading %s: %s", path, err.msg);
    kh_eval_opts_default(&f->o);
    f->c.o = &f->o;
    f->c.d = kh_task_def_at(f->set, 0);
    f->c.w = kh_task_workload_at(f->set, workload);
    f->c.evaluator = KH_EVAL_DEFAULT;
    kh_check_opts_default(&f->c.copts);
    f->c.copts.atol = f->c.copts.rtol = 1e-5; /* the definition's tolerance */
    assert_int_equal(f->c.d->noutputs, 1);
}

/* A reply whose payload is a few bytes of padding (so the parts lie
 * unaligned, as they may in a real reply), then bytes. */
static void reply_of(kh_msg *m, const void *bytes, size_t n, json_t **slice)
{
    m->head = NULL;
    m->payload_len = 3 + n;
    m->payload = malloc(m->payload_len);
    assert_non_null(m->payload);
    memset(m->payload, 0xAB, 3);
    if (n)
        memcpy(m->payload + 3, bytes, n);
    *slice = json_pack("{s:[I, I]}", "c", (json_int_t)3, (json_int_t)n);
}

static void same_result(const kh_check_result *a, const kh_check_result *b, const char *what)
{
    if (memcmp(a, b, sizeof *a) == 0)
        return;
    fail_msg("%s: the outputs and their parts differ: status %d/%d fails %llu/%llu "
             "max_abs %.17g/%.17g norm %.17g/%.17g\n  '%s'\n  '%s'", what, a->status, b->status,
             (unsigned long long)a->fails, (unsigned long long)b->fails, a->max_abs_error,
             b->max_abs_error, a->norm_error, b->norm_error, a->reason, b->reason);
}

/* out against ref both ways, whole outputs. */
static void whole_both_ways(fixture *f, kh_tensor *out, kh_tensor *ref, const char *what)
{
    kh_err err;
    kh_msg m1, m2;
    json_t *outs, *parts;
    reply_of(&m1, out->data, out->nbytes, &outs);
    refout ro = {.n = 1, .names = (char *[]){"c"}, .bytes = (unsigned char *[]){ref->data},
                 .lens = (size_t[]){ref->nbytes}};
    kh_check_result a, b;
    int ua = -1, ub = -1;
    assert_int_equal(eval_compare_set(&f->c, &m1, outs, &ro, &a, 0xFF, &ua, &err), KH_OK);

    size_t np = (size_t)kh_check_nchunks(out->numel);
    kh_check_part *pp = calloc(np ? np : 1, sizeof *pp);
    assert_non_null(pp);
    assert_int_equal(kh_check_parts(out, ref, &f->c.copts, pp, &err), KH_OK);
    reply_of(&m2, pp, np * sizeof *pp, &parts);
    /* the worker's answer to "does the failing output still hold the poison" */
    json_t *ut = json_object();
    if (ua)
        json_object_set_new(ut, "c", json_true());
    assert_int_equal(eval_compare_parts(&f->c, &m2, parts, ut, NULL, &b, &ub, &err), KH_OK);
    same_result(&a, &b, what);
    assert_int_equal(ua, ub);

    /* parts cut short: refused, naming the output */
    if (np) {
        json_t *cut = json_pack("{s:[I, I]}", "c", (json_int_t)3,
                                (json_int_t)(np * sizeof *pp - 1));
        kh_status st = eval_compare_parts(&f->c, &m2, cut, ut, NULL, &b, &ub, &err);
        assert_int_equal(st, KH_ECORRUPT);
        assert_non_null(strstr(err.msg, "'c'"));
        json_decref(cut);
        /* a part the scan did not write (left zero), or one chunk's part in
         * another's place: refused, naming the output and the part */
        for (int how = 0; how < 2 && (how == 0 || np > 1); how++) {
            kh_msg bad = m2;
            bad.payload = malloc(m2.payload_len);
            assert_non_null(bad.payload);
            memcpy(bad.payload, m2.payload, m2.payload_len);
            kh_check_part *q = (kh_check_part *)(void *)(bad.payload + 3), tmp;
            size_t at = (size_t)((seed ^ (uint64_t)np * 0x9E37u) % np); /* any part */
            if (how == 0) {
                memset(&tmp, 0, sizeof tmp);
                memcpy((unsigned char *)q + at * sizeof tmp, &tmp, sizeof tmp);
            } else { /* parts 0 and 1 swapped */
                kh_check_part p0, p1;
                memcpy(&p0, q, sizeof p0);
                memcpy(&p1, (unsigned char *)q + sizeof p0, sizeof p1);
                memcpy(q, &p1, sizeof p1);
                memcpy((unsigned char *)q + sizeof p0, &p0, sizeof p0);
            }
            kh_status bst = eval_compare_parts(&f->c, &bad, parts, ut, NULL, &b, &ub, &err);
            assert_int_equal(bst, KH_ECORRUPT);
            if (!strstr(err.msg, "'c'") || !strstr(err.msg, "cannot come from a scan"))
                fail_msg("%s: %s", what, err.msg);
            free(bad.payload);
        }
    }
    json_decref(ut);
    json_decref(outs);
    json_decref(parts);
    free(pp);
    free(m1.payload);
    free(m2.payload);
}

/* The element ranges of a verified timed call both ways: the host compares
 * the returned ranges with the same ranges of the whole reference; the
 * worker sends the parts of the ranges laid end to end. */
static void ranged_both_ways(fixture *f, kh_tensor *out, kh_tensor *ref, const char *what)
{
    kh_err err;
    uint64_t n = out->numel;
    uint64_t starts[4] = {0, (n / 3) & ~7ull, (n / 2) & ~7ull, (n - 600) & ~7ull};
    const uint64_t len = 512;
    json_t *ranges = json_pack("{s:[]}", "c"), *list = json_object_get(ranges, "c");
    int64_t total = 4 * (int64_t)len;
    kh_tensor *go = NULL, *gr = NULL;
    assert_int_equal(kh_tensor_new(&go, KH_DTYPE_F32, 1, &total, &err), KH_OK);
    assert_int_equal(kh_tensor_new(&gr, KH_DTYPE_F32, 1, &total, &err), KH_OK);
    for (int k = 0; k < 4; k++) {
        json_array_append_new(list, json_pack("[I, I]", (json_int_t)starts[k], (json_int_t)len));
        memcpy((float *)go->data + k * len, (float *)out->data + starts[k], len * 4);
        memcpy((float *)gr->data + k * len, (float *)ref->data + starts[k], len * 4);
    }
    kh_msg m1, m2;
    json_t *outs, *parts;
    reply_of(&m1, go->data, go->nbytes, &outs);
    refout ro = {.n = 1, .names = (char *[]){"c"}, .bytes = (unsigned char *[]){ref->data},
                 .lens = (size_t[]){ref->nbytes}};
    kh_check_result a, b;
    int ua = 0, ub = 0;
    assert_int_equal(eval_compare_ranged(&f->c, &m1, outs, ranges, &ro, &a, 0xFF, &ua, &err),
                     KH_OK);
    kh_check_part pp[1];
    assert_int_equal(kh_check_nchunks((uint64_t)total), 1);
    assert_int_equal(kh_check_parts(go, gr, &f->c.copts, pp, &err), KH_OK);
    reply_of(&m2, pp, sizeof pp, &parts);
    assert_int_equal(eval_compare_parts(&f->c, &m2, parts, NULL, ranges, &b, &ub, &err), KH_OK);
    same_result(&a, &b, what);

    /* a range past the output's end is refused */
    json_t *bad = json_pack("{s:[[I, I]]}", "c", (json_int_t)(n - 8), (json_int_t)len);
    assert_int_equal(eval_compare_parts(&f->c, &m2, parts, NULL, bad, &b, &ub, &err),
                     KH_ECORRUPT);
    json_decref(bad);
    json_decref(ranges);
    json_decref(outs);
    json_decref(parts);
    kh_tensor_free(go);
    kh_tensor_free(gr);
    free(m1.payload);
    free(m2.payload);
}

static void test_parts_give_the_same_verdict(void **state)
{
    (void)state;
    for (size_t w = 0; w < 2; w++) {
        fixture f;
        fixture_load(&f, w);
        uint64_t n = 1;
        const kh_task_tensor *ot = &f.c.d->outputs[0];
        for (size_t i = 0; i < ot->rank; i++)
            n *= (uint64_t)f.c.w->axes[ot->dims[i]];
        for (int v = 0; v < 4; v++) {
            kh_tensor *out, *ref;
            kh_test_compare_pair(KH_DTYPE_F32, n, seed + w * 16 + (uint64_t)v, 1, &out, &ref);
            float *x = out->data;
            const char *what[] = {"equal", "moved codes", "the poison left", "a NaN"};
            if (v == 0 || v == 2)
                memcpy(out->data, ref->data, out->nbytes);
            if (v == 2) /* a tail never written: still 0xFF */
                memset(x + n - n / 50, 0xFF, (n / 50) * sizeof *x);
            if (v == 3)
                x[n / 7] = __builtin_nanf("");
            char label[96];
            snprintf(label, sizeof label, "n = %llu, %s", (unsigned long long)n, what[v]);
            whole_both_ways(&f, out, ref, label);
            ranged_both_ways(&f, out, ref, label);
            kh_tensor_free(out);
            kh_tensor_free(ref);
        }
        printf("# n = %llu: parts and outputs give the same verdicts\n", (unsigned long long)n);
        kh_task_set_free(f.set);
    }
}

int main(void)
{
    seed = 0x9A27500Dull; /* fixed: a failure reruns as it was */
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parts_give_the_same_verdict)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
