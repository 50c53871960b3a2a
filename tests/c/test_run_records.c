/* test_run_records.c: the engine's writers of a run's records (run.h) and of
 * an evaluation's (evaluation.h) alone: each refuses what its record must not
 * hold (an unknown field, a wrong kind, an id of another type or not in the
 * store) with a message naming it, and as the transaction's sticky error;
 * the run's status and liveness mark as it runs, stops and resumes; a round
 * stored once and naming what exists; a promotion naming its evidence, which
 * must be the run's measurements of the candidate or the incumbent. */
#include "kh_test.h"

#include "store/candidate.h"
#include "store/evaluation.h"
#include "store/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fixture {
    char *dir;
    kh_store *s;
    char task[KH_STORE_ID_MAX], cand[2][KH_STORE_ID_MAX];
} fixture;

enum { W_RUN, W_UPDATE, W_ROUND, W_PROMOTION, W_EVAL, W_TASK };

typedef struct call {
    int writer;
    json_t *facts;
    const char *target;       /* W_UPDATE: the run */
    kh_evaluation_facts *ev;  /* W_EVAL */
    char id[KH_STORE_ID_MAX]; /* out */
    int second;               /* write a second record after the first: is it refused too? */
    kh_status second_st;
} call;

static kh_status write_cb(kh_store_txn *tx, void *arg, kh_err *err)
{
    call *c = arg;
    kh_status st;
    switch (c->writer) {
    case W_RUN: st = kh_run_begin(tx, c->facts, c->id, err); break;
    case W_UPDATE: st = kh_run_update(tx, c->target, c->facts, err); break;
    case W_ROUND: st = kh_round_put(tx, c->facts, c->id, err); break;
    case W_PROMOTION: st = kh_promotion_put(tx, c->facts, c->id, err); break;
    case W_EVAL: st = kh_evaluation_put(tx, c->ev, c->id, err); break;
    default: st = kh_task_record_put(tx, json_string_value(json_object_get(c->facts, "name")),
                                     NULL, "/x", c->id, err);
    }
    if (c->second) {
        kh_err e2;
        json_t *r = json_pack("{s:s, s:s}", "type", "run", "policy", "after");
        c->second_st = kh_store_txn_put(tx, r, 0, NULL, &e2);
        json_decref(r);
    }
    return st;
}

/* Run one writer on facts (JSON text, consumed); returns its status, the
 * id in id (may be NULL) and the message in msg. */
static kh_status put(fixture *f, int writer, const char *target, const char *facts, char *id,
                       kh_err *err)
{
    json_error_t je;
    call c = {.writer = writer, .target = target};
    c.facts = facts ? json_loads(facts, 0, &je) : NULL;
    if (facts && !c.facts)
        fail_msg("bad test JSON %s: %s", facts, je.text);
    kh_status st = kh_store_update(f->s, write_cb, &c, err);
    json_decref(c.facts);
    if (id)
        snprintf(id, KH_STORE_ID_MAX, "%s", c.id);
    return st;
}

static void expect(fixture *f, int writer, const char *target, const char *facts,
                   const char *needle)
{
    kh_err err;
    kh_status st = put(f, writer, target, facts, NULL, &err);
    if (!needle) {
        if (st)
            fail_msg("refused %s: %s", facts, err.msg);
        return;
    }
    if (st == KH_OK)
        fail_msg("accepted %s (expected a refusal naming '%s')", facts, needle);
    if (!strstr(err.msg, needle))
        fail_msg("'%s' does not name '%s' (facts %s)", err.msg, needle, facts);
}

static json_t *get(fixture *f, const char *id)
{
    json_t *r;
    kh_err err;
    if (kh_store_get(f->s, id, &r, &err))
        fail_msg("get %s: %s", id, err.msg);
    return r;
}

static size_t count(fixture *f, const char *type)
{
    kh_store_filter q = {.type = type};
    json_t *arr;
    kh_err err;
    assert_int_equal(kh_store_query(f->s, &q, 1, &arr, &err), KH_OK);
    size_t n = json_array_size(arr);
    json_decref(arr);
    return n;
}

static kh_status put_cands(kh_store_txn *tx, void *arg, kh_err *err)
{
    fixture *f = arg;
    kh_status st = kh_task_record_put(tx, "scale_rows", NULL, NULL, f->task, err);
    for (int i = 0; i < 2 && !st; i++) {
        char src[64];
        snprintf(src, sizeof src, "void run(float *x) { x[0] = %d; }", i);
        json_t *sol = json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:[{s:s, s:s}]}", "name", "s",
                                "definition", "scale_rows", "spec", "entry_point",
                                "kernel.c::run", "khlua", "backend", "host", "sources", "path",
                                "kernel.c", "content", src);
        kh_candidate c;
        st = kh_candidate_of(sol, &c, err);
        json_decref(sol);
        if (!st)
            st = kh_candidate_put(tx, &c, f->task, err);
        if (!st)
            snprintf(f->cand[i], KH_STORE_ID_MAX, "%s", c.id);
        kh_candidate_free(&c);
    }
    return st;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = kh_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/store", f->dir);
    kh_err err;
    kh_store_opts o = {.nosync = 1};
    if (kh_store_open(path, &o, &f->s, &err))
        fail_msg("open: %s", err.msg);
    if (kh_store_update(f->s, put_cands, f, &err))
        fail_msg("task and candidates: %s", err.msg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kh_store_close(f->s);
    kh_test_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* An evaluation of cand in run (NULL: none); id gets its id. */
static void put_eval(fixture *f, const char *cand, const char *run, char *id)
{
    json_t *trace = json_pack("{s:{s:s}, s:{s:s, s:{s:{s:s}, s:[i], s:s}}}", "workload", "uuid",
                              "w1", "evaluation", "status", "PASSED", "khlua", "hashes",
                              "source", "abc", "seeds", 7, "host", "h");
    kh_evaluation_facts ev = {.task = f->task, .candidate = cand, .definition = "scale_rows",
                              .trace = trace, .timing = 1, .run = run,
                              .round_index = run ? 1 : -1, .purpose = run ? "sweep" : NULL};
    call c = {.writer = W_EVAL, .ev = &ev};
    kh_err err;
    if (kh_store_update(f->s, write_cb, &c, &err))
        fail_msg("evaluation: %s", err.msg);
    snprintf(id, KH_STORE_ID_MAX, "%s", c.id);
    json_decref(trace);
}

static void test_run_begin(void **state)
{
    fixture *f = *state;
    expect(f, W_RUN, NULL, "{}", "needs the field 'policy'");
    expect(f, W_RUN, NULL, "{\"policy\": 3}", "'policy' must be a string");
    expect(f, W_RUN, NULL, "{\"policy\": \"p\", \"colour\": \"red\"}",
           "has no field 'colour' (its fields: id, policy, task");
    expect(f, W_RUN, NULL, "{\"policy\": \"p\", \"task\": \"task-nothing\"}",
           "names task-nothing, which is not in the store");
    expect(f, W_RUN, NULL, "{\"policy\": \"p\", \"task\": \"run-x\"}", "must be a task id");
    expect(f, W_RUN, NULL, "{\"policy\": \"p\", \"models\": [\"a\", 2]}",
           "'models' must be an array of strings");
    assert_int_equal(count(f, "run"), 0);
    char facts[400], id[KH_STORE_ID_MAX], want[KH_STORE_ID_MAX];
    kh_err err;
    assert_int_equal(kh_store_new_id(f->s, "run", want, &err), KH_OK);
    snprintf(facts, sizeof facts,
             "{\"id\": \"%s\", \"policy\": \"p\", \"task\": \"%s\", \"config\": [], \"seed\": 42,"
             " \"models\": [\"replay:a\"]}",
             want, f->task);
    assert_int_equal(put(f, W_RUN, NULL, facts, id, &err), KH_OK);
    assert_string_equal(id, want);
    json_t *r = get(f, id);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "running");
    assert_true(json_is_object(json_object_get(r, "config"))); /* an empty table: {} */
    json_t *live = json_object_get(r, "live");
    assert_int_equal(json_integer_value(json_object_get(live, "pid")), (json_int_t)getpid());
    assert_true(json_is_string(json_object_get(live, "host")));
    assert_true(json_real_value(json_object_get(live, "heartbeat")) > 1e9);
    json_decref(r);
    /* an id is used once */
    assert_int_not_equal(put(f, W_RUN, NULL, facts, NULL, &err), KH_OK);
    assert_non_null(strstr(err.msg, "already exists"));
}

static void test_run_update(void **state)
{
    fixture *f = *state;
    char id[KH_STORE_ID_MAX], facts[300];
    kh_err err;
    assert_int_equal(put(f, W_RUN, NULL, "{\"policy\": \"p\"}", id, &err), KH_OK);
    json_t *r = get(f, id);
    double hb0 = json_real_value(json_object_get(json_object_get(r, "live"), "heartbeat"));
    json_decref(r);
    expect(f, W_UPDATE, "run-nothing", "{}", "names run-nothing, which is not in the store");
    expect(f, W_UPDATE, f->task, "{}", "must be a run id");
    expect(f, W_UPDATE, id, "{\"status\": \"finished\"}", "not one of running, done, failed");
    expect(f, W_UPDATE, id, "{\"status\": \"failed\"}", "a failed run needs its error");
    expect(f, W_UPDATE, id, "{\"status\": \"done\", \"error\": \"x\"}", "an error goes with");
    expect(f, W_UPDATE, id, "{\"config\": {\"a\": 1}}", "only when it resumes");
    expect(f, W_UPDATE, id, "{\"incumbent_candidate\": \"candidate-nothing\"}", "not in the store");
    usleep(2000);
    snprintf(facts, sizeof facts,
             "{\"rounds_done\": 1, \"incumbent_candidate\": \"%s\", \"metrics\": {\"tokens\": 5}}",
             f->cand[0]);
    expect(f, W_UPDATE, id, facts, NULL);
    r = get(f, id);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "running");
    assert_true(json_real_value(json_object_get(json_object_get(r, "live"), "heartbeat")) > hb0);
    assert_int_equal(json_integer_value(json_object_get(r, "rounds_done")), 1);
    assert_string_equal(json_string_value(json_object_get(r, "policy")), "p");
    json_decref(r);
    expect(f, W_UPDATE, id, "{\"status\": \"failed\", \"error\": \"boom\"}", NULL);
    r = get(f, id);
    assert_null(json_object_get(r, "live"));
    assert_string_equal(json_string_value(json_object_get(r, "error")), "boom");
    json_decref(r);
    /* a stopped run runs again only by resume, which drops the old failure */
    expect(f, W_UPDATE, id, "{\"rounds_done\": 2}", "it has stopped (failed)");
    expect(f, W_UPDATE, id, "{\"status\": \"running\"}", "only resume = true");
    expect(f, W_UPDATE, id, "{\"resume\": true, \"status\": \"done\"}", "resume makes it running");
    expect(f, W_UPDATE, id, "{\"resume\": true, \"config\": {\"rounds\": 9}}", NULL);
    r = get(f, id);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "running");
    assert_int_equal(json_integer_value(json_object_get(r, "resumed")), 1);
    assert_null(json_object_get(r, "error"));
    assert_non_null(json_object_get(r, "live"));
    assert_null(json_object_get(r, "resume"));
    json_decref(r);
    expect(f, W_UPDATE, id, "{\"status\": \"done\", \"stop_reason\": \"rounds\"}", NULL);
    r = get(f, id);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "done");
    assert_null(json_object_get(r, "live"));
    json_decref(r);
}

static void test_round(void **state)
{
    fixture *f = *state;
    char run[KH_STORE_ID_MAX], other[KH_STORE_ID_MAX], id[KH_STORE_ID_MAX], facts[800];
    kh_err err;
    assert_int_equal(put(f, W_RUN, NULL, "{\"policy\": \"p\"}", run, &err), KH_OK);
    assert_int_equal(put(f, W_RUN, NULL, "{\"policy\": \"p\"}", other, &err), KH_OK);
    /* a model call of the other run */
    char call_id[KH_STORE_ID_MAX];
    json_t *rec = json_pack("{s:s, s:s, s:s, s:s}", "type", "llm_call", "model", "m", "run",
                            other, "fingerprint", "f00d");
    assert_int_equal(kh_store_put(f->s, rec, 0, call_id, &err), KH_OK);
    json_decref(rec);
    expect(f, W_ROUND, NULL, "{\"index\": 1}", "needs the field 'run'");
    snprintf(facts, sizeof facts, "{\"run\": \"%s\", \"index\": 0}", run);
    expect(f, W_ROUND, NULL, facts, "'index' must be 1 or more");
    snprintf(facts, sizeof facts, "{\"run\": \"%s\", \"index\": 1, \"llm_calls\": [\"%s\"]}", run,
             call_id);
    expect(f, W_ROUND, NULL, facts, "is not a call of run");
    snprintf(facts, sizeof facts,
             "{\"run\": \"%s\", \"index\": 1, \"verdicts\": [{\"candidate\": \"%s\"}, "
             "{\"candidate\": \"candidate-gone\"}]}",
             run, f->cand[0]);
    expect(f, W_ROUND, NULL, facts, "verdicts[2]: 'candidate' names candidate-gone");
    snprintf(facts, sizeof facts,
             "{\"run\": \"%s\", \"index\": 1, \"decision\": {\"promotion\": \"promotion-x\"}}",
             run);
    expect(f, W_ROUND, NULL, facts, "decision: 'promotion' names promotion-x");
    assert_int_equal(count(f, "round"), 0);
    snprintf(facts, sizeof facts,
             "{\"run\": \"%s\", \"index\": 3, \"prompt\": \"improve it\", \"candidates\": "
             "[\"%s\"], \"verdicts\": [{\"candidate\": \"%s\", \"reason\": \"slower\"}], "
             "\"decision\": {}, \"events\": [], \"state_out\": {\"round\": 3}}",
             run, f->cand[1], f->cand[1]);
    assert_int_equal(put(f, W_ROUND, NULL, facts, id, &err), KH_OK);
    char want[KH_STORE_ID_MAX];
    snprintf(want, sizeof want, "round-%s-0003", run + 4);
    assert_string_equal(id, want);
    json_t *r = get(f, id);
    assert_null(json_object_get(r, "prompt"));
    kh_hash h;
    kh_hash_bytes("improve it", 10, &h);
    char hx[33];
    kh_hash_hex(&h, hx);
    assert_string_equal(json_string_value(json_object_get(r, "prompt_blob")), hx);
    assert_true(json_is_object(json_object_get(r, "events")));
    json_decref(r);
    assert_int_not_equal(put(f, W_ROUND, NULL, facts, NULL, &err), KH_OK);
    assert_int_equal(err.code, KH_ESTATE);
    assert_non_null(strstr(err.msg, "is stored already"));
}

/* The facts of a promotion (ev: the evidence ids, quoted, comma-separated). */
static void promo(char *out, size_t n, const char *run, const char *cand, const char *inc,
                  int round_index, const char *ev)
{
    snprintf(out, n,
             "{\"run\": \"%s\", \"candidate\": \"%s\", \"incumbent\": \"%s\", "
             "\"round_index\": %d, \"evidence\": [%s], \"score\": 1.5, \"gate\": {}}",
             run, cand, inc, round_index, ev);
}

static void test_promotion(void **state)
{
    fixture *f = *state;
    char run[KH_STORE_ID_MAX], other[KH_STORE_ID_MAX], third[KH_STORE_ID_MAX];
    char e_cand[KH_STORE_ID_MAX], e_inc[KH_STORE_ID_MAX], e_other[KH_STORE_ID_MAX];
    char e_loose[KH_STORE_ID_MAX], facts[1200], id[KH_STORE_ID_MAX];
    kh_err err;
    assert_int_equal(put(f, W_RUN, NULL, "{\"policy\": \"p\"}", run, &err), KH_OK);
    assert_int_equal(put(f, W_RUN, NULL, "{\"policy\": \"p\"}", other, &err), KH_OK);
    put_eval(f, f->cand[1], run, e_cand);
    put_eval(f, f->cand[0], run, e_inc);
    put_eval(f, f->cand[1], other, e_other);
    put_eval(f, f->cand[1], NULL, e_loose);
    /* a third candidate, measured in the run */
    json_t *sol = json_pack("{s:s, s:s, s:{s:s}, s:[{s:s, s:s}]}", "name", "t", "definition",
                            "scale_rows", "spec", "entry_point", "kernel.c::run", "sources",
                            "path", "kernel.c", "content", "void run(void) {}");
    kh_candidate c;
    assert_int_equal(kh_candidate_of(sol, &c, &err), KH_OK);
    json_decref(sol);
    snprintf(third, sizeof third, "%s", c.id);
    kh_candidate_free(&c);
    char ev[400];
    promo(facts, sizeof facts, run, f->cand[1], f->cand[0], 2, "");
    expect(f, W_PROMOTION, NULL, facts, "'evidence' names no evaluation");
    snprintf(ev, sizeof ev, "\"%s\", \"%s\"", e_cand, e_other);
    promo(facts, sizeof facts, run, f->cand[1], f->cand[0], 2, ev);
    expect(f, W_PROMOTION, NULL, facts, "evidence[2]");
    snprintf(ev, sizeof ev, "\"%s\"", e_loose);
    promo(facts, sizeof facts, run, f->cand[1], f->cand[0], 2, ev);
    expect(f, W_PROMOTION, NULL, facts, "is not an evaluation of run");
    snprintf(ev, sizeof ev, "\"%s\"", f->cand[0]);
    promo(facts, sizeof facts, run, f->cand[1], f->cand[0], 2, ev);
    expect(f, W_PROMOTION, NULL, facts, "must be an evaluation id");
    snprintf(ev, sizeof ev, "\"%s\", \"%s\"", e_cand, e_inc);
    promo(facts, sizeof facts, run, f->cand[1], third, 2, ev);
    expect(f, W_PROMOTION, NULL, facts, "names " /* the third is not stored */);
    promo(facts, sizeof facts, run, f->cand[1], f->cand[0], 0, ev);
    expect(f, W_PROMOTION, NULL, facts, "'round_index' must be 1 or more");
    assert_int_equal(count(f, "promotion"), 0);
    promo(facts, sizeof facts, run, f->cand[1], f->cand[0], 2, ev);
    assert_int_equal(put(f, W_PROMOTION, NULL, facts, id, &err), KH_OK);
    json_t *r = get(f, id);
    assert_string_equal(json_string_value(json_object_get(r, "incumbent")), f->cand[0]);
    assert_int_equal(json_array_size(json_object_get(r, "evidence")), 2);
    json_decref(r);
    /* a round may name it now, and its decision a promotion of its own run only */
    snprintf(facts, sizeof facts,
             "{\"run\": \"%s\", \"index\": 2, \"decision\": {\"promoted\": \"%s\", "
             "\"promotion\": \"%s\"}, \"verdicts\": [{\"promotion\": \"%s\"}]}",
             other, f->cand[1], id, id);
    expect(f, W_ROUND, NULL, facts, "is not of run");
    snprintf(facts, sizeof facts,
             "{\"run\": \"%s\", \"index\": 2, \"decision\": {\"promoted\": \"%s\", "
             "\"promotion\": \"%s\"}}",
             run, f->cand[1], id);
    expect(f, W_ROUND, NULL, facts, NULL);
}

/* A refusal aborts its whole transaction: a later put in it fails too, and
 * nothing is written. */
static void test_refusal_is_sticky(void **state)
{
    fixture *f = *state;
    size_t runs = count(f, "run");
    json_error_t je;
    call c = {.writer = W_RUN, .facts = json_loads("{\"policy\": \"p\", \"x\": 1}", 0, &je),
              .second = 1};
    kh_err err;
    assert_int_not_equal(kh_store_update(f->s, write_cb, &c, &err), KH_OK);
    assert_int_not_equal(c.second_st, KH_OK);
    assert_non_null(strstr(err.msg, "has no field 'x'"));
    json_decref(c.facts);
    assert_int_equal(count(f, "run"), runs);
}

static void test_task_and_evaluation(void **state)
{
    fixture *f = *state;
    char id[KH_STORE_ID_MAX];
    kh_err err;
    /* put unless there: the fixture's task keeps its first fields */
    assert_int_equal(put(f, W_TASK, NULL, "{\"name\": \"scale_rows\"}", id, &err), KH_OK);
    assert_string_equal(id, f->task);
    json_t *t = get(f, id);
    assert_null(json_object_get(t, "path"));
    json_decref(t);
    assert_int_not_equal(put(f, W_TASK, NULL, "{\"name\": \"a b\"}", NULL, &err), KH_OK);
    assert_non_null(strstr(err.msg, "outside [A-Za-z0-9._:-]"));
    /* an evaluation needs a verdict, and its provenance */
    json_t *bare = json_pack("{s:{s:s}}", "workload", "uuid", "w");
    kh_evaluation_facts ev = {.task = f->task, .candidate = f->cand[0], .definition = "scale_rows",
                              .trace = bare, .timing = 1, .round_index = -1};
    call c = {.writer = W_EVAL, .ev = &ev};
    assert_int_not_equal(kh_store_update(f->s, write_cb, &c, &err), KH_OK);
    assert_non_null(strstr(err.msg, "needs a verdict"));
    json_decref(bare);
    json_t *noprov = json_pack("{s:{s:s}}", "evaluation", "status", "PASSED");
    ev.trace = noprov;
    assert_int_not_equal(kh_store_update(f->s, write_cb, &c, &err), KH_OK);
    assert_non_null(strstr(err.msg, "provenance"));
    ev.round_index = 2;
    assert_int_not_equal(kh_store_update(f->s, write_cb, &c, &err), KH_OK);
    assert_non_null(strstr(err.msg, "round_index needs its run"));
    json_decref(noprov);
    char e[KH_STORE_ID_MAX];
    put_eval(f, f->cand[0], NULL, e);
    json_t *r = get(f, e);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "PASSED");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "provenance"),
                                                          "host")),
                        "h");
    assert_null(json_object_get(r, "round_index"));
    json_decref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_run_begin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_update, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round, setup, teardown),
        cmocka_unit_test_setup_teardown(test_promotion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusal_is_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_task_and_evaluation, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
