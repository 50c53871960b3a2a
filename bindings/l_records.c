/* l_records.c: the engine's record writers on a kh.StoreTxn (docs/store.md,
 * "Records"): tx:put_task, tx:put_run, tx:update_run, tx:put_round,
 * tx:put_promotion, tx:put_llm_call and tx:put_evaluation, each a table of
 * facts in, the record id out (nil, msg, code when the engine refuses them,
 * which aborts the update).  What a record holds and which facts it takes is
 * the engine's (store/run.h, store/evaluation.h, llm/llm_store.h); the
 * transaction object and the generic tx:put are l_store.c's. */
#include "l_records.h"

#include "l_json.h"
#include "l_store.h"

#include "llm/llm_store.h"
#include "store/evaluation.h"
#include "store/run.h"

#include <string.h>

/* The table at idx as JSON (raises on a value JSON cannot hold). */
static json_t *check_facts(lua_State *L, int idx)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    kh_err err;
    json_t *j = kh_lua_to_json(L, idx, &err);
    if (!j)
        luaL_argerror(L, idx, err.msg);
    return j;
}

static int push_id(lua_State *L, kh_status st, const char *id, const kh_err *err)
{
    if (st)
        return kh_lua_fail(L, err);
    lua_pushstring(L, id);
    return 1;
}

/* An optional string field of the options table at idx (anchored there). */
static const char *opt_str(lua_State *L, int idx, const char *k)
{
    lua_getfield(L, idx, k);
    const char *s = NULL;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "option '%s' must be a string", k);
        s = lua_tostring(L, -1);
    }
    lua_pop(L, 1);
    return s;
}

static lua_Integer opt_int(lua_State *L, int idx, const char *k, lua_Integer dflt)
{
    lua_getfield(L, idx, k);
    lua_Integer v = dflt;
    if (!lua_isnil(L, -1)) {
        if (!lua_isinteger(L, -1))
            luaL_error(L, "option '%s' must be an integer", k);
        v = lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* tx:put_task {name = , path = , definition = } -> id: task-<name>, put
 * unless it is there */
static int t_put_task(lua_State *L)
{
    kh_store_txn *tx = kh_lua_check_txn(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    const char *name = opt_str(L, 2, "name"), *path = opt_str(L, 2, "path");
    if (!name)
        return luaL_error(L, "tx:put_task: the task needs its name (the definition's)");
    lua_getfield(L, 2, "definition"); /* [.., 3 definition] */
    json_t *def = lua_isnil(L, 3) ? NULL : check_facts(L, 3);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st = kh_task_record_put(tx, name, def, path, id, &err);
    json_decref(def);
    return push_id(L, st, id, &err);
}

/* tx:put_run {policy = , task = , id = , config = , seed = , models = ,
 * versions = } -> id */
static int t_put_run(lua_State *L)
{
    kh_store_txn *tx = kh_lua_check_txn(L, 1);
    json_t *facts = check_facts(L, 2);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st = kh_run_begin(tx, facts, id, &err);
    json_decref(facts);
    return push_id(L, st, id, &err);
}

/* tx:update_run(id, {status = , resume = , error = , stop_reason = ,
 * rounds_done = , incumbent_candidate = , metrics = , config = }) -> id */
static int t_update_run(lua_State *L)
{
    kh_store_txn *tx = kh_lua_check_txn(L, 1);
    const char *id = luaL_checkstring(L, 2);
    json_t *facts = check_facts(L, 3);
    kh_err err;
    kh_status st = kh_run_update(tx, id, facts, &err);
    json_decref(facts);
    return push_id(L, st, id, &err);
}

/* tx:put_round {run = , index = , ...} -> id (round-RUN-NNNN) */
static int t_put_round(lua_State *L)
{
    kh_store_txn *tx = kh_lua_check_txn(L, 1);
    json_t *facts = check_facts(L, 2);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st = kh_round_put(tx, facts, id, &err);
    json_decref(facts);
    return push_id(L, st, id, &err);
}

/* tx:put_promotion {run = , candidate = , incumbent = , round_index = ,
 * evidence = {evaluation ids}, gate = , score = , reason = } -> id */
static int t_put_promotion(lua_State *L)
{
    kh_store_txn *tx = kh_lua_check_txn(L, 1);
    json_t *facts = check_facts(L, 2);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st = kh_promotion_put(tx, facts, id, &err);
    json_decref(facts);
    return push_id(L, st, id, &err);
}

/* tx:put_llm_call(result [, {run = , round = , round_index = , family = ,
 * cost_usd = }]) -> id.  result: what kh.llm.chat / kh.llm.poll gave (its
 * raw bytes included); recorded as the client's sink records a call. */
static int t_put_llm_call(lua_State *L)
{
    kh_store_txn *tx = kh_lua_check_txn(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!lua_isnoneornil(L, 3))
        luaL_checktype(L, 3, LUA_TTABLE);
    else {
        lua_settop(L, 2);
        lua_newtable(L);
    }
    lua_settop(L, 3);
    kh_llm_call_links l = {opt_str(L, 3, "run"), opt_str(L, 3, "round"),
                           opt_int(L, 3, "round_index", -1), opt_str(L, 3, "family"), -1};
    lua_getfield(L, 3, "cost_usd");
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1))
            return luaL_error(L, "option 'cost_usd' must be a number");
        l.cost_usd = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    /* the raw bytes travel apart (a stream need not be UTF-8): the record
     * is a copy of the result without them */
    lua_getfield(L, 2, "raw"); /* [.., 4 raw] */
    size_t raw_len = 0;
    const char *raw = lua_type(L, 4) == LUA_TSTRING ? lua_tolstring(L, 4, &raw_len) : NULL;
    lua_newtable(L); /* [.., 4 raw, 5 copy] */
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) == LUA_TSTRING && !strcmp(lua_tostring(L, -2), "raw")) {
            lua_pop(L, 1);
            continue;
        }
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, 5);
    }
    json_t *rec = check_facts(L, 5);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st = kh_llm_call_put(tx, rec, raw, raw_len, &l, id, &err);
    json_decref(rec);
    return push_id(L, st, id, &err);
}

/* tx:put_evaluation(trace, {task = , candidate = , definition = , solution
 * = , samples_blob = , timing = , run = , round_index = , purpose = }) ->
 * id: the record kh.eval writes of a verdict (a stand-in evaluator's) */
static int t_put_evaluation(lua_State *L)
{
    kh_store_txn *tx = kh_lua_check_txn(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    kh_evaluation_facts f = {.task = opt_str(L, 3, "task"),
                             .candidate = opt_str(L, 3, "candidate"),
                             .definition = opt_str(L, 3, "definition"),
                             .solution = opt_str(L, 3, "solution"),
                             .samples_blob = opt_str(L, 3, "samples_blob"),
                             .run = opt_str(L, 3, "run"),
                             .round_index = opt_int(L, 3, "round_index", -1),
                             .purpose = opt_str(L, 3, "purpose")};
    lua_getfield(L, 3, "timing");
    f.timing = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_pop(L, 1);
    json_t *trace = check_facts(L, 2);
    f.trace = trace;
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st = kh_evaluation_put(tx, &f, id, &err);
    json_decref(trace);
    return push_id(L, st, id, &err);
}

void kh_open_records(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"put_task", t_put_task},
        {"put_run", t_put_run},
        {"update_run", t_update_run},
        {"put_round", t_put_round},
        {"put_promotion", t_put_promotion},
        {"put_llm_call", t_put_llm_call},
        {"put_evaluation", t_put_evaluation},
        {NULL, NULL},
    };
    kh_lua_txn_add_methods(L, methods);
}
