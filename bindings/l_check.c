/* l_check.c: kh.check, output comparison in Lua: FlashInfer-Bench's rule
 * (check.h) on two kh.Tensor values, its DSA top-k evaluator, and the
 * evaluator/option defaults for a definition.  Verdicts are plain tables;
 * element indices in them are flat and 0-based, as in their reason text. */
#include "l_check.h"

#include "l_tensor.h"

#include "eval/check.h"

#include <math.h>
#include <string.h>

/* opts table at idx (or none) -> o; misuse raises. */
static void check_opts(lua_State *L, int idx, kh_check_opts *o)
{
    kh_check_opts_default(o);
    if (lua_isnoneornil(L, idx))
        return;
    luaL_checktype(L, idx, LUA_TTABLE);
    static const char *const nums[] = {"atol", "rtol", "required_ratio"};
    double *slots[] = {&o->atol, &o->rtol, &o->required_ratio};
    for (int i = 0; i < 3; i++) {
        int ty = lua_getfield(L, idx, nums[i]);
        if (ty == LUA_TNUMBER)
            *slots[i] = lua_tonumber(L, -1);
        else if (ty != LUA_TNIL)
            luaL_argerror(L, idx, lua_pushfstring(L, "%s must be a number", nums[i]));
        lua_pop(L, 1);
        if (!(*slots[i] >= 0) || isinf(*slots[i]))
            luaL_argerror(L, idx, lua_pushfstring(L, "%s must be finite and >= 0", nums[i]));
    }
    if (o->required_ratio > 1)
        luaL_argerror(L, idx, "required_ratio must be in [0, 1]");
    int ty = lua_getfield(L, idx, "precision");
    if (ty == LUA_TSTRING) {
        const char *p = lua_tostring(L, -1);
        if (strcmp(p, "fib") == 0)
            o->precision = KH_CHECK_FIB_F32;
        else if (strcmp(p, "double") == 0)
            o->precision = KH_CHECK_DOUBLE;
        else
            luaL_argerror(L, idx, "precision must be \"fib\" or \"double\"");
    } else if (ty != LUA_TNIL) {
        luaL_argerror(L, idx, "precision must be \"fib\" or \"double\"");
    }
    lua_pop(L, 1);
}

static void setnum(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void setint(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

/* The verdict table: {status, reason?, matched_ratio, max_abs_error, ...}. */
static void push_verdict(lua_State *L, const kh_check_result *r, const kh_check_opts *o)
{
    lua_createtable(L, 0, 20);
    lua_pushstring(L, kh_check_status_name(r->status));
    lua_setfield(L, -2, "status");
    lua_pushboolean(L, r->status == KH_CHECK_PASSED);
    lua_setfield(L, -2, "passed");
    /* FIB stops the workload here (shape, dtype, non-finite output, top-k
     * reachability or duplicates): later trials do not count */
    lua_pushboolean(L, r->final);
    lua_setfield(L, -2, "final");
    if (r->reason[0]) {
        lua_pushstring(L, r->reason);
        lua_setfield(L, -2, "reason");
    }
    /* shape and dtype verdicts carry no figures (FIB's presence rule) */
    if (r->status == KH_CHECK_INCORRECT_SHAPE || r->status == KH_CHECK_INCORRECT_DTYPE)
        return;
    setnum(L, "matched_ratio", r->matched_ratio);
    setnum(L, "max_abs_error", r->max_abs_error);
    setnum(L, "max_rel_error", r->max_rel_error);
    setnum(L, "norm_error", r->norm_error);
    if (r->max_ulp_error == UINT64_MAX)
        setnum(L, "max_ulp_error", HUGE_VAL);
    else
        setint(L, "max_ulp_error", (lua_Integer)r->max_ulp_error);
    setint(L, "numel", (lua_Integer)r->numel);
    setint(L, "fails", (lua_Integer)r->fails);
    setint(L, "out_nan", (lua_Integer)r->out_nan);
    setint(L, "out_inf", (lua_Integer)r->out_inf);
    setint(L, "ref_nonfinite", (lua_Integer)r->ref_nonfinite);
    if (r->worst_index >= 0) {
        setint(L, "worst_element", r->worst_index);
        setnum(L, "worst_output", r->worst_out);
        setnum(L, "worst_reference", r->worst_ref);
    }
    if (r->first_fail >= 0)
        setint(L, "first_fail_element", r->first_fail);
    /* the rule it was judged by */
    setnum(L, "atol", o->atol);
    setnum(L, "rtol", o->rtol);
    setnum(L, "required_ratio", o->required_ratio);
}

/* kh.check.compare(out, ref [, {atol, rtol, required_ratio, precision}])
 *   -> verdict table. */
static int l_compare(lua_State *L)
{
    kh_tensor *out = kh_lua_check_tensor(L, 1), *ref = kh_lua_check_tensor(L, 2);
    kh_check_opts o;
    check_opts(L, 3, &o);
    kh_check_result r;
    kh_err err;
    if (kh_check_compare(out, ref, &o, &r, &err) != KH_OK)
        return kh_lua_fail(L, &err);
    push_verdict(L, &r, &o);
    return 1;
}

static const kh_tensor *field_tensor(lua_State *L, int idx, const char *k)
{
    lua_getfield(L, idx, k);
    if (lua_isnil(L, -1))
        luaL_argerror(L, idx, lua_pushfstring(L, "inputs.%s is required", k));
    const kh_tensor *t = kh_lua_check_tensor(L, -1);
    lua_pop(L, 1); /* the inputs table keeps the userdata alive */
    return t;
}

/* kh.check.dsa_topk(out, ref, {q=, k_cache=, weights=, seq_lens=,
 *   block_table=} [, opts]) -> verdict table, or nil, msg, code when the
 * inputs are inconsistent. */
static int l_dsa_topk(lua_State *L)
{
    kh_tensor *out = kh_lua_check_tensor(L, 1), *ref = kh_lua_check_tensor(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    kh_check_topk_inputs in = {
        field_tensor(L, 3, "q"),        field_tensor(L, 3, "k_cache"),
        field_tensor(L, 3, "weights"),  field_tensor(L, 3, "seq_lens"),
        field_tensor(L, 3, "block_table"),
    };
    kh_check_opts o;
    check_opts(L, 4, &o);
    kh_check_result r;
    kh_err err;
    if (kh_check_dsa_topk(out, ref, &in, &o, &r, &err) != KH_OK)
        return kh_lua_fail(L, &err);
    push_verdict(L, &r, &o);
    return 1;
}

/* kh.check.evaluator(definition_name [, op_type]) -> evaluator name and its
 * default options {atol, rtol, required_ratio}. */
static int l_evaluator(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    const char *op = luaL_optstring(L, 2, NULL);
    kh_check_opts o;
    kh_check_evaluator ev = kh_check_evaluator_for(name, op, &o);
    lua_pushstring(L, kh_check_evaluator_name(ev));
    lua_createtable(L, 0, 3);
    setnum(L, "atol", o.atol);
    setnum(L, "rtol", o.rtol);
    setnum(L, "required_ratio", o.required_ratio);
    return 2;
}

void kh_open_check(lua_State *L, kh_engine *e)
{
    static const luaL_Reg fns[] = {
        {"compare", l_compare}, {"dsa_topk", l_dsa_topk}, {"evaluator", l_evaluator},
        {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);
}
