/* l_eval.c: kh.eval, evaluation verdicts for Lua (engine/eval/eval.h).
 *
 *   local traces, msg, code = kh.eval(task, solution [, opts])   -- also kh.eval.run
 *   local r, msg, code = kh.eval(task, candidate, {protocol = "paired", incumbent = inc,
 *                                                  reps = 5, alpha = 0.05, stop_below = 0,
 *                                                  ...})
 *
 * Returns an array of FlashInfer-Bench Trace tables (evaluation.status, ...,
 * evaluation.khlua.{checks, failed_check, seeds, hashes, ...}); nil, msg,
 * code when it could not run.  The paired protocol (eval.h kh_eval_paired)
 * returns one table instead: {ratio, lo, hi, ratios, evidence, failed, ...},
 * each measurement a `measure_protocol` ("screen") evaluation.  Verdicts are recorded in opts.store (an open
 * kh.Store) when given, else in the engine's store; record = false skips
 * that.  Scale-out: opts.gpus ("all", a count, a list), opts.workers_per_gpu,
 * opts.host_workers, opts.launch ("local", "srun", "ssh", a template) and
 * opts.hosts (a list) place the workers; workloads then run in parallel
 * (docs/scale-out.md).  The evaluator (its worker pools, built
 * artifacts and reference outputs) is one per Lua state, kept in the
 * registry and freed by its __gc at lua_close, like kh.compile's compiler. */
#include "l_eval.h"

#include "l_json.h"
#include "l_store.h"
#include "l_task.h"

#include "eval/eval.h"
#include "task/task.h"

#include <stdlib.h>
#include <string.h>

static const char EVAL_KEY = 'e'; /* registry key: its address */

static void *eval_new(kh_engine *e, kh_err *err) { return kh_eval_new(e, NULL, err); }
static void eval_free(void *ev) { kh_eval_free(ev); }

/* This state's evaluator, made on first use. */
static kh_eval *get_eval(lua_State *L)
{
    return kh_lua_singleton(L, &EVAL_KEY, eval_new, eval_free);
}

static int opt_int(lua_State *L, int t, const char *k, int def)
{
    int ty = lua_getfield(L, t, k);
    if (ty != LUA_TNIL && !lua_isinteger(L, -1))
        luaL_error(L, "opts.%s must be an integer", k);
    int v = ty == LUA_TNIL ? def : (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

static double opt_num(lua_State *L, int t, const char *k, double def)
{
    int ty = lua_getfield(L, t, k);
    if (ty != LUA_TNIL && ty != LUA_TNUMBER)
        luaL_error(L, "opts.%s must be a number", k);
    double v = ty == LUA_TNIL ? def : lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int opt_bool(lua_State *L, int t, const char *k, int def)
{
    int ty = lua_getfield(L, t, k);
    if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
        luaL_error(L, "opts.%s must be a boolean", k);
    int v = ty == LUA_TNIL ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* opts[key]: a string, a count, or an array of strings (and integers when
 * ints) joined with ","; NULL when absent.  elem names what an entry must be.
 * The string stays on the stack (anchored) until the call returns. */
static const char *opt_list(lua_State *L, int t, const char *key, const char *what, int ints,
                            const char *elem)
{
    int ty = lua_getfield(L, t, key); /* [.., v] */
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        return NULL;
    }
    if (lua_isinteger(L, -1)) {
        lua_pushfstring(L, "%d", (int)lua_tointeger(L, -1));
        lua_remove(L, -2);
        return lua_tostring(L, -1);
    }
    if (ty == LUA_TSTRING)
        return lua_tostring(L, -1);
    if (ty != LUA_TTABLE)
        luaL_error(L, "opts.%s must be %s", key, what);
    int w = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b); /* [.., w, buf...] */
    lua_Integer n = (lua_Integer)lua_rawlen(L, w);
    for (lua_Integer i = 1; i <= n; i++) {
        int et = lua_rawgeti(L, w, i);
        if (et != LUA_TSTRING && !(ints && lua_isinteger(L, -1)))
            luaL_error(L, "opts.%s[%d] must be %s", key, (int)i, elem);
        if (i > 1) {
            lua_pop(L, 1);
            luaL_addchar(&b, ',');
            lua_rawgeti(L, w, i);
        }
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    lua_remove(L, -2);
    return lua_tostring(L, -1);
}

/* Every option kh.eval reads: a key outside this list is a typo that would
 * otherwise be ignored in silence (a `deadline` meant as `deadline_s`). */
static const char *const eval_keys[] = {
    "protocol", "timing", "parity", "trials", "shapes", "seed", "verify_bytes", "warmup", "iters", "timing_trials",
    "max_iters", "timing_timeout_s", "rotate_inputs", "verify_timed_fraction", "cold",
    "deterministic", "deadline_s", "atol", "rtol", "required_matched_ratio",
    "time_reference", "device_compare", "host_memory_bytes", "record", "store", "workloads",
    "sanitize",
    "sanitize_deadline_s", "gpus", "workers_per_gpu", "host_workers", "launch", "hosts",
    "progress", "run", "round_index", "purpose", "incumbent", "reps", "alpha", "resamples",
    "stop_below", "measure_protocol", NULL};

/* opts.progress(done, total, uuid, status), called as each verdict is made.
 * An error in it stops the calls; kh.eval raises it once the run is over
 * (the verdicts are recorded by then). */
typedef struct lprogress {
    lua_State *L;
    int fn;     /* stack index of the function */
    int failed; /* 1: its error message is at the stack top */
} lprogress;

static void l_progress(void *ud, size_t done, size_t total, const json_t *trace)
{
    lprogress *p = ud;
    if (p->failed)
        return;
    lua_State *L = p->L;
    lua_pushvalue(L, p->fn);
    lua_pushinteger(L, (lua_Integer)done);
    lua_pushinteger(L, (lua_Integer)total);
    lua_pushstring(L, json_string_value(json_object_get(json_object_get(trace, "workload"),
                                                        "uuid")));
    lua_pushstring(L, json_string_value(json_object_get(json_object_get(trace, "evaluation"),
                                                        "status")));
    if (lua_pcall(L, 4, 0, 0) != LUA_OK)
        p->failed = 1; /* the message stays on the stack */
}

static void check_keys(lua_State *L, int t)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        int known = 0;
        if (lua_type(L, -1) == LUA_TSTRING)
            for (size_t i = 0; eval_keys[i] && !known; i++)
                known = !strcmp(lua_tostring(L, -1), eval_keys[i]);
        if (!known)
            luaL_error(L, "kh.eval: unknown option '%s'", luaL_tolstring(L, -1, NULL));
    }
}

/* opts.sanitize: "memcheck,racecheck" or {"memcheck", "racecheck"}; the
 * string stays on the stack (anchored) until the call returns. */
static const char *opt_sanitize(lua_State *L, int t)
{
    int ty = lua_getfield(L, t, "sanitize"); /* [.., s] */
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        return NULL;
    }
    if (ty == LUA_TSTRING)
        return lua_tostring(L, -1);
    if (ty != LUA_TTABLE)
        luaL_error(L, "opts.sanitize must be a string (\"memcheck,racecheck\") or an array of "
                   "tool names");
    int s = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b); /* [.., s, buf...] */
    lua_Integer n = (lua_Integer)lua_rawlen(L, s);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, s, i) != LUA_TSTRING)
            luaL_error(L, "opts.sanitize[%d] must be a tool name", (int)i);
        if (i > 1) {
            lua_pop(L, 1);
            luaL_addchar(&b, ',');
            lua_rawgeti(L, s, i);
        }
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    lua_remove(L, -2);
    return lua_tostring(L, -1);
}

/* The solution at idx: a Solution table (a candidate, in memory: its JSON
 * text and label stay on the stack, anchored, until the call returns), or
 * the name of a solution in the task (or a Solution file). */
static void to_solution(lua_State *L, int idx, const char *what, kh_eval_solution *es)
{
    memset(es, 0, sizeof *es);
    if (!lua_istable(L, idx)) {
        if (idx == 2) /* the positional argument */
            es->name = luaL_checkstring(L, idx);
        else if (lua_type(L, idx) != LUA_TSTRING)
            luaL_error(L, "kh.eval: the %s must be a Solution table or a solution's name", what);
        else
            es->name = lua_tostring(L, idx);
        return;
    }
    kh_err jerr;
    json_t *j = kh_lua_to_json(L, idx, &jerr);
    if (!j)
        luaL_error(L, "kh.eval: the %s table is not JSON: %s", what, jerr.msg);
    char *txt = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    const char *name = json_string_value(json_object_get(j, "name"));
    lua_pushfstring(L, "%s %s", what, name ? name : "(table)"); /* anchored */
    json_decref(j);
    if (!txt)
        luaL_error(L, "kh.eval: out of memory");
    lua_pushstring(L, txt); /* anchored: the C copy goes at once */
    free(txt);
    es->json = lua_tolstring(L, -1, &es->json_len);
    es->label = lua_tostring(L, -2);
}

/* opts (at stack index t) into o, and for the paired protocol po and the
 * incumbent; strings they point at stay on the stack until the call returns. */
static int read_opts(lua_State *L, int t, kh_eval_opts *o, kh_eval_paired_opts *po,
                     kh_eval_solution *incp)
{
    int paired = 0;
    kh_eval_solution inc = {0};
    luaL_checktype(L, t, LUA_TTABLE);
    check_keys(L, t);
    lua_getfield(L, t, "protocol"); /* anchored by the table */
    if (!lua_isnil(L, -1))
        o->protocol = luaL_checkstring(L, -1);
    lua_pop(L, 1);
    if (!strcmp(o->protocol, "paired")) {
        /* the paired comparison: each measurement a screen, unless told */
        paired = 1;
        lua_getfield(L, t, "measure_protocol"); /* anchored by the table */
        o->protocol = lua_isnil(L, -1) ? "screen" : luaL_checkstring(L, -1);
        lua_pop(L, 1);
        po->reps = opt_int(L, t, "reps", po->reps);
        po->alpha = opt_num(L, t, "alpha", po->alpha);
        po->resamples = opt_int(L, t, "resamples", po->resamples);
        po->stop_below = opt_num(L, t, "stop_below", po->stop_below);
        if (lua_getfield(L, t, "incumbent") == LUA_TNIL) /* stays on the stack */
            luaL_error(L, "kh.eval: the paired protocol needs opts.incumbent (a Solution "
                       "table or a solution's name)");
        to_solution(L, lua_gettop(L), "incumbent", &inc);
    } else {
        static const char *const only_paired[] = {"incumbent", "reps", "alpha", "resamples",
                                                  "stop_below", "measure_protocol", NULL};
        for (size_t i = 0; only_paired[i]; i++)
            if (lua_getfield(L, t, only_paired[i]) != LUA_TNIL)
                luaL_error(L, "kh.eval: opts.%s is the paired protocol's (protocol = "
                           "\"paired\")", only_paired[i]);
            else
                lua_pop(L, 1);
    }
    o->timing = opt_bool(L, t, "timing", o->timing);
    o->parity = opt_bool(L, t, "parity", o->parity);
    o->trials = opt_int(L, t, "trials", o->trials);
    o->shapes = opt_int(L, t, "shapes", o->shapes);
    if (o->shapes < 0 || o->shapes > 64)
        luaL_error(L, "opts.shapes must be 0 to 64");
    o->verify_bytes = opt_num(L, t, "verify_bytes", o->verify_bytes);
    int ty = lua_getfield(L, t, "seed");
    if (ty != LUA_TNIL) {
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
            luaL_error(L, "opts.seed must be an integer >= 0 (a trace's khlua.base_seed)");
        o->seed = (uint64_t)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    o->warmup = opt_int(L, t, "warmup", o->warmup);
    o->iters = opt_int(L, t, "iters", o->iters);
    o->timing_trials = opt_int(L, t, "timing_trials", o->timing_trials);
    o->max_iters = opt_int(L, t, "max_iters", o->max_iters);
    o->timing_timeout_s = opt_num(L, t, "timing_timeout_s", o->timing_timeout_s);
    o->rotate_inputs = opt_int(L, t, "rotate_inputs", o->rotate_inputs);
    o->verify_timed_fraction = opt_num(L, t, "verify_timed_fraction", o->verify_timed_fraction);
    o->cold = opt_bool(L, t, "cold", o->cold);
    ty = lua_getfield(L, t, "deterministic");
    if (ty == LUA_TBOOLEAN)
        o->deterministic = lua_toboolean(L, -1);
    else if (ty != LUA_TNIL)
        luaL_error(L, "opts.deterministic must be a boolean");
    lua_pop(L, 1);
    o->deadline_s = opt_num(L, t, "deadline_s", o->deadline_s);
    o->atol = opt_num(L, t, "atol", o->atol);
    o->rtol = opt_num(L, t, "rtol", o->rtol);
    o->required_matched_ratio = opt_num(L, t, "required_matched_ratio",
                                       o->required_matched_ratio);
    o->time_reference = opt_bool(L, t, "time_reference", o->time_reference);
    o->device_compare = opt_bool(L, t, "device_compare", o->device_compare);
    o->host_memory_bytes = (uint64_t)opt_num(L, t, "host_memory_bytes", 0);
    o->record = opt_bool(L, t, "record", o->record);
    /* a policy run's context, recorded with each verdict */
    ty = lua_getfield(L, t, "run"); /* anchored by the table */
    if (ty != LUA_TNIL && ty != LUA_TSTRING)
        luaL_error(L, "opts.run must be a run id");
    o->run = lua_tostring(L, -1);
    lua_pop(L, 1);
    ty = lua_getfield(L, t, "purpose"); /* anchored by the table */
    if (ty != LUA_TNIL && ty != LUA_TSTRING)
        luaL_error(L, "opts.purpose must be a string");
    o->purpose = lua_tostring(L, -1);
    lua_pop(L, 1);
    o->round_index = opt_int(L, t, "round_index", -1);
    if (lua_getfield(L, t, "store") != LUA_TNIL) /* anchored by the table */
        o->store = kh_lua_check_store_idle(L, -1);
    lua_pop(L, 1);
    o->sanitize_deadline_s = opt_num(L, t, "sanitize_deadline_s", 0);
    o->sanitize = opt_sanitize(L, t);   /* stays on the stack */
    o->workers_per_gpu = opt_int(L, t, "workers_per_gpu", 0);
    o->host_workers = opt_int(L, t, "host_workers", 0);
    if (o->workers_per_gpu < 0 || o->host_workers < 0)
        luaL_error(L, "opts.workers_per_gpu and opts.host_workers must be >= 1");
    ty = lua_getfield(L, t, "launch"); /* anchored by the table */
    if (ty != LUA_TNIL && ty != LUA_TSTRING)
        luaL_error(L, "opts.launch must be a string: local, srun, ssh or a template");
    o->launch = lua_tostring(L, -1);
    lua_pop(L, 1);
    /* these stay on the stack */
    o->gpus = opt_list(L, t, "gpus", "\"all\", a count or a list of GPU indices or UUIDs", 1,
                      "a GPU index or UUID");
    o->hosts = opt_list(L, t, "hosts", "a list of host names", 0, "a host name");
    o->workloads = opt_list(L, t, "workloads", "\"all\", a count, a uuid or an array of uuids",
                           0, "a uuid string");
    *incp = inc;
    return paired;
}

static int l_run(lua_State *L)
{
    /* the task: a kh.task.load value (read once, for every call) or a path */
    const kh_task *task = kh_lua_to_task(L, 1);
    const char *task_path = task ? NULL : luaL_checkstring(L, 1);
    /* the solution: a Solution table (a candidate, in memory), a name in the
     * task, or a Solution file */
    kh_eval_solution es = {0};
    to_solution(L, 2, "solution", &es);
    kh_eval_opts o;
    kh_eval_opts_default(&o);
    kh_eval_paired_opts po;
    kh_eval_paired_opts_default(&po);
    kh_eval_solution inc = {0};
    int paired = 0;
    if (!lua_isnoneornil(L, 3))
        paired = read_opts(L, 3, &o, &po, &inc);
    lprogress pg = {L, 0, 0};
    if (!lua_isnoneornil(L, 3)) {
        int ty = lua_getfield(L, 3, "progress"); /* stays on the stack */
        if (ty == LUA_TFUNCTION) {
            pg.fn = lua_gettop(L);
            o.progress = l_progress;
            o.progress_ud = &pg;
        } else if (ty != LUA_TNIL) {
            luaL_error(L, "opts.progress must be a function (done, total, uuid, status)");
        }
    }
    kh_eval *ev = get_eval(L);
    json_t *traces = NULL;
    kh_err err;
    kh_status st;
    if (task && paired)
        st = kh_eval_paired(ev, task, &es, &inc, &o, &po, &traces, &err);
    else if (task)
        st = kh_eval_run_task(ev, task, &es, &o, &traces, &err);
    else if (es.name && !paired)
        st = kh_eval_run(ev, task_path, es.name, &o, &traces, &err);
    else {
        kh_task *t = NULL;
        kh_task_opts to = {0};
        st = kh_task_open(task_path, &to, &t, &err);
        if (!st && paired)
            st = kh_eval_paired(ev, t, &es, &inc, &o, &po, &traces, &err);
        else if (!st)
            st = kh_eval_run_task(ev, t, &es, &o, &traces, &err);
        kh_task_close(t);
    }
    if (pg.failed) {
        json_decref(traces);
        return luaL_error(L, "kh.eval: opts.progress failed: %s", luaL_tolstring(L, -1, NULL));
    }
    if (st)
        return kh_lua_fail(L, &err);
    kh_lua_push_json(L, traces);
    json_decref(traces);
    return 1;
}

static int l_call(lua_State *L)
{
    lua_remove(L, 1); /* the module table */
    return l_run(L);
}

void kh_open_eval(lua_State *L, kh_engine *e)
{
    static const luaL_Reg fns[] = {{"run", l_run}, {NULL, NULL}};
    kh_lua_newlib(L, e, fns); /* [mod] */
    lua_newtable(L);          /* [mod, mt] */
    lua_pushlightuserdata(L, e);
    lua_pushcclosure(L, l_call, 1);
    lua_setfield(L, -2, "__call");
    lua_setmetatable(L, -2);
}
