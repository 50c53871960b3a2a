/* l_profile.c: kh.profile: the bottleneck state in Lua.
 *   kh.profile.classify(metrics, context) -> state   pure (bottleneck.h)
 *   kh.profile.parse_ncu_csv(text)       -> kernels  ncu's raw CSV (ncu.h)
 *   kh.profile.default_metrics()         -> {names}
 *   kh.profile.run(opts)                 -> report   a profile worker (+ ncu),
 *                                                    recorded when opts.store
 * Unknown values (JSON null in the engine's tables) are left out, so a Lua
 * reader tests `state.reread` for nil. */
#include "l_profile.h"

#include "l_json.h"
#include "l_store.h"
#include "l_task.h"

#include "profile/ncu.h"
#include "profile/profile.h"
#include "task/task.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Drop null members, recursively, so they read as nil in Lua. */
static void strip_nulls(json_t *j)
{
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(j, tmp, k, v) {
            if (json_is_null(v))
                json_object_del(j, k);
            else
                strip_nulls(v);
        }
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v)
            strip_nulls(v);
    }
}

static void push_clean(lua_State *L, json_t *j)
{
    strip_nulls(j);
    kh_lua_push_json(L, j);
    json_decref(j);
}

/* A number field of the table at idx, or 0; misuse raises. */
static double optnum(lua_State *L, int idx, const char *k)
{
    double v = 0;
    int ty = lua_getfield(L, idx, k);
    if (ty == LUA_TNUMBER)
        v = lua_tonumber(L, -1);
    else if (ty != LUA_TNIL)
        luaL_argerror(L, idx, lua_pushfstring(L, "%s must be a number", k));
    lua_pop(L, 1);
    if (!isfinite(v) || v < 0)
        luaL_argerror(L, idx, lua_pushfstring(L, "%s must be finite and >= 0", k));
    return v;
}

/* The table field k at idx as JSON (new), or NULL when absent; raises when it
 * cannot be JSON. */
static json_t *optjson(lua_State *L, int idx, const char *k)
{
    if (lua_getfield(L, idx, k) == LUA_TNIL) {
        lua_pop(L, 1);
        return NULL;
    }
    kh_err err;
    json_t *j = kh_lua_to_json(L, -1, &err);
    lua_pop(L, 1);
    if (!j)
        luaL_argerror(L, idx, lua_pushfstring(L, "%s: %s", k, err.msg));
    return j;
}

static void context(lua_State *L, int idx, kh_bn_context *c)
{
    memset(c, 0, sizeof *c);
    if (lua_isnoneornil(L, idx))
        return;
    luaL_checktype(L, idx, LUA_TTABLE);
    c->min_bytes = optnum(L, idx, "min_bytes");
    c->flops = optnum(L, idx, "flops");
    c->copy_bytes_per_s = optnum(L, idx, "copy_bytes_per_s");
    c->matrix_flops_per_s = optnum(L, idx, "matrix_flops_per_s");
    c->measured_ns = optnum(L, idx, "measured_ns");
}

/* classify(metrics | nil, context?) */
static int l_classify(lua_State *L)
{
    if (!lua_isnil(L, 1))
        luaL_checktype(L, 1, LUA_TTABLE);
    kh_bn_context c;
    context(L, 2, &c);
    char why[256] = "";
    if (lua_istable(L, 2) && lua_getfield(L, 2, "why") != LUA_TNIL) {
        if (!lua_isstring(L, -1))
            luaL_argerror(L, 2, "why must be a string");
        snprintf(why, sizeof why, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
    } else if (lua_istable(L, 2)) {
        lua_pop(L, 1);
    }
    kh_bn_launch bl;
    json_t *launch = NULL, *device = NULL;
    if (lua_istable(L, 2)) {
        launch = optjson(L, 2, "launch");
        device = optjson(L, 2, "device");
    }
    kh_profile_launch_from_json(launch, device, &bl);
    json_decref(launch);
    json_decref(device);
    kh_bn_metrics m;
    int have = !lua_isnil(L, 1);
    if (have) {
        kh_err err;
        json_t *mj = kh_lua_to_json(L, 1, &err);
        if (!mj)
            return luaL_argerror(L, 1, err.msg);
        kh_bn_metrics_from_json(mj, &m);
        json_decref(mj);
    }
    kh_bn_state s;
    kh_bn_classify(have ? &m : NULL, lua_istable(L, 2) ? &bl : NULL, &c, why[0] ? why : NULL,
                   &s);
    push_clean(L, kh_bn_state_json(&s));
    return 1;
}

static int l_parse_ncu_csv(lua_State *L)
{
    size_t n;
    const char *t = luaL_checklstring(L, 1, &n);
    json_t *ks;
    kh_err err;
    if (kh_ncu_parse_csv(t, n, &ks, &err))
        return kh_lua_fail(L, &err);
    push_clean(L, ks);
    return 1;
}

static int l_default_metrics(lua_State *L)
{
    push_clean(L, kh_profile_default_metrics());
    return 1;
}

/* run{cubin = bytes, spec = launch list, metrics?, replay?, ncu?, min_bytes?,
 *     flops?, measured_ns?, out?, ncu_path?, sections?, timeout?,
 *     store = db?, task?, candidate?, evaluation?, remeasure_peaks?,
 *     peaks_max_age?}
 * or, instead of cubin and spec, task_path = DIR | a kh.task.load value,
 * solution = FILE | NAME | a Solution table,
 * workload = UUID?, seed?: the candidate compiled and resolved
 * (kh_profile_task_prepare), the task's bytes and FLOPs as context.
 * With store (a kh.Store, as kh.compile takes it) the report is recorded
 * there and the GPU's peaks are reused from it while fresh. */
static int l_run(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    kh_profile_opts o = {0};
    context(L, 1, &o.ctx);
    size_t n = 0;
    /* strings stay on the stack, so they outlive the call */
    const char *strs[] = {"replay", "out", "ncu_path", "sections", "task", "candidate",
                          "evaluation", "task_path", "solution", "workload"};
    const char *vals[10] = {NULL};
    const kh_task *task_val = NULL;     /* task_path given as a kh.task.load value */
    const char *sol_json = NULL;        /* solution given as a Solution table */
    size_t sol_json_len = 0;
    for (int i = 0; i < 10; i++) {
        int ty = lua_getfield(L, 1, strs[i]);
        if (i == 7 && (task_val = kh_lua_to_task(L, -1))) {
            vals[i] = task_val->path;
        } else if (i == 8 && ty == LUA_TTABLE) {
            kh_err jerr;
            json_t *j = kh_lua_to_json(L, -1, &jerr);
            if (!j)
                return luaL_argerror(L, 1, lua_pushfstring(L, "solution is not JSON: %s",
                                                           jerr.msg));
            char *txt = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
            const char *name = json_string_value(json_object_get(j, "name"));
            lua_pushfstring(L, "solution %s", name ? name : "(table)"); /* anchored */
            json_decref(j);
            if (!txt)
                return luaL_error(L, "kh.profile.run: out of memory");
            vals[i] = lua_tostring(L, -1);
            lua_pushstring(L, txt); /* anchored: the C copy goes at once */
            free(txt);
            sol_json = lua_tolstring(L, -1, &sol_json_len);
        } else if (ty == LUA_TSTRING) {
            vals[i] = lua_tostring(L, -1);
        } else if (ty != LUA_TNIL) {
            return luaL_argerror(L, 1, lua_pushfstring(L, "%s must be a string%s", strs[i],
                                                       i == 7 ? " or a kh.task.load value"
                                                       : i == 8 ? " or a Solution table" : ""));
        }
    }
    const char *task_path = vals[7], *solution = vals[8];
    lua_getfield(L, 1, "cubin");
    const char *cubin = lua_isstring(L, -1) ? lua_tolstring(L, -1, &n) : NULL;
    if (task_path || solution) {
        if (!task_path || !solution)
            return luaL_argerror(L, 1, "task_path and solution go together");
        if (cubin || lua_getfield(L, 1, "spec") != LUA_TNIL)
            return luaL_argerror(L, 1, "task_path/solution exclude cubin/spec");
    } else if (!cubin || !n) {
        return luaL_argerror(L, 1, "cubin (the module's bytes) is required");
    } else if (vals[9]) {
        return luaL_argerror(L, 1, "workload needs task_path");
    }
    double seed = optnum(L, 1, "seed");
    if (vals[0] && strcmp(vals[0], "user") && strcmp(vals[0], "kernel"))
        return luaL_argerror(L, 1, "replay must be \"user\" or \"kernel\"");
    lua_getfield(L, 1, "ncu");
    o.ncu = lua_toboolean(L, -1);
    lua_pop(L, 1);
    o.timeout_s = optnum(L, 1, "timeout");
    o.peaks_max_age_s = optnum(L, 1, "peaks_max_age");
    lua_getfield(L, 1, "remeasure_peaks");
    o.remeasure_peaks = lua_toboolean(L, -1);
    lua_pop(L, 1);
    /* anchored by the table; raises inside db:update (transactions do not nest) */
    if (lua_getfield(L, 1, "store") != LUA_TNIL)
        o.store = kh_lua_check_store_idle(L, -1);
    lua_pop(L, 1);
    if (!o.store && (vals[4] || vals[5] || vals[6]))
        return luaL_argerror(L, 1, "task, candidate and evaluation link a record: give store");
    json_t *metrics = optjson(L, 1, "metrics");
    if (metrics && !json_is_array(metrics)) {
        json_decref(metrics);
        return luaL_argerror(L, 1, "metrics must be a list of names");
    }
    json_t *spec = task_path ? NULL : optjson(L, 1, "spec");
    if (!task_path && !json_is_object(spec)) {
        json_decref(spec);
        json_decref(metrics);
        return luaL_argerror(L, 1, "spec (a launch list table) is required");
    }
    /* no raising from here on: C resources are held */
    kh_err err;
    kh_profile_task pt = {0};
    if (task_path) {
        kh_profile_task_opts to = {.task_path = task_path, .solution = solution,
                                   .task_set = task_val ? task_val->set : NULL,
                                   .solution_json = sol_json,
                                   .solution_json_len = sol_json_len,
                                   .workload = vals[9], .seed = (uint64_t)seed,
                                   .cache = o.store};
        if (kh_profile_task_prepare(kh_lua_engine(L), &to, &pt, &err)) {
            json_decref(metrics);
            return kh_lua_fail(L, &err);
        }
        cubin = (const char *)pt.cubin;
        n = pt.cubin_len;
        spec = json_incref(pt.spec);
        if (o.ctx.min_bytes <= 0)
            o.ctx.min_bytes = pt.ctx.min_bytes;
        if (o.ctx.flops <= 0)
            o.ctx.flops = pt.ctx.flops;
        o.context = pt.context;
        /* link what the evaluation recorded, when the store holds it */
        json_t *r = NULL;
        kh_err lerr;
        if (o.store && !vals[4] && !kh_store_get(o.store, pt.task_id, &r, &lerr))
            vals[4] = pt.task_id;
        json_decref(r);
        r = NULL;
        if (o.store && !vals[5] && !kh_store_get(o.store, pt.candidate_id, &r, &lerr))
            vals[5] = pt.candidate_id;
        json_decref(r);
    }
    o.cubin = (const unsigned char *)cubin;
    o.cubin_len = n;
    o.spec = spec;
    o.metrics = metrics;
    o.kernel_replay = vals[0] && !strcmp(vals[0], "kernel");
    o.out_dir = vals[1];
    o.ncu_path = vals[2];
    o.ncu_sections = vals[3];
    o.task = vals[4];
    o.candidate = vals[5];
    o.evaluation = vals[6];
    json_t *rep = NULL;
    kh_status st = kh_profile_run(kh_lua_engine(L), &o, &rep, &err);
    json_decref(spec);
    json_decref(metrics);
    kh_profile_task_free(&pt);
    if (st)
        return kh_lua_fail(L, &err);
    push_clean(L, rep);
    return 1;
}

void kh_open_profile(lua_State *L, kh_engine *e)
{
    static const luaL_Reg fns[] = {
        {"classify", l_classify},
        {"parse_ncu_csv", l_parse_ncu_csv},
        {"default_metrics", l_default_metrics},
        {"run", l_run},
        {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);
}
