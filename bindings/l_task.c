/* l_task.c: kh.task, the Lua face of engine/task/task.h and engine/task/expr.h:
 * expressions (kh.task.expr, kh.task.eval), checks (kh.task.check returns
 * the report as a plain table), and loaded task sets (kh.task.load returns a
 * kh.TaskSet: definitions, workloads with resolved axes, solutions, speed of
 * light, resolved launch manifests).  Both userdata hold memory only, no
 * engine resource, so they do not count in the live-object check. */
#include "l_task.h"

#include "l_json.h"

#include "task/task.h"

#include <string.h>

#define EXPR_MT "kh.Expr"
#define SET_MT "kh.TaskSet"

typedef struct {
    kh_expr *e;
} l_expr;
typedef struct {
    kh_task *t; /* the path, the loaded set, the fingerprint taken before it */
} l_set;

static kh_expr *check_expr(lua_State *L, int idx)
{
    l_expr *x = luaL_checkudata(L, idx, EXPR_MT);
    if (!x->e)
        luaL_argerror(L, idx, "expression is freed");
    return x->e;
}

static kh_task_set *check_set(lua_State *L, int idx)
{
    l_set *x = luaL_checkudata(L, idx, SET_MT);
    if (!x->t)
        luaL_argerror(L, idx, "task set is closed");
    return x->t->set;
}

const kh_task *kh_lua_to_task(lua_State *L, int idx)
{
    l_set *x = luaL_testudata(L, idx, SET_MT);
    if (x && !x->t)
        luaL_argerror(L, idx, "task set is closed");
    return x ? x->t : NULL;
}

/* Look a var up in the Lua table at ctx (an int*: its stack index), by its
 * canonical text ("n", "t.shape[0]", "t[-1].item()"). */
static int lua_env_lookup(void *ctx, const kh_expr_var *var, int64_t *val)
{
    lua_State **pL = ctx;
    lua_State *L = pL[0];
    int idx = (int)(intptr_t)pL[1];
    if (idx == 0)
        return -1;
    /* raw: no metamethod may raise while C holds allocations */
    lua_pushstring(L, var->text);
    lua_rawget(L, idx);
    int ok = lua_isinteger(L, -1);
    if (ok)
        *val = (int64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return ok ? 0 : -1;
}

static void check_env(lua_State *L, int idx)
{
    if (lua_isnoneornil(L, idx))
        return;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING || !lua_isinteger(L, -1)) {
            lua_pop(L, 2);
            luaL_argerror(L, idx, "expected a table of name = integer");
        }
        lua_pop(L, 1);
    }
}

static int eval_with(lua_State *L, const kh_expr *e, int env_idx)
{
    check_env(L, env_idx);
    void *ctx[2] = {L, (void *)(intptr_t)(lua_isnoneornil(L, env_idx) ? 0 : lua_absindex(L, env_idx))};
    int64_t out;
    kh_err err;
    if (kh_expr_eval_lookup(e, lua_env_lookup, ctx, &out, &err))
        return kh_lua_fail(L, &err);
    lua_pushinteger(L, (lua_Integer)out);
    return 1;
}

/* kh.task.expr(text) -> Expr | nil, msg, code */
static int l_expr_new(lua_State *L)
{
    const char *text = luaL_checkstring(L, 1);
    l_expr *x = lua_newuserdatauv(L, sizeof *x, 0);
    x->e = NULL;
    luaL_setmetatable(L, EXPR_MT);
    kh_err err;
    if (kh_expr_parse(text, &x->e, &err))
        return kh_lua_fail(L, &err);
    return 1;
}

/* kh.task.eval(text, env) -> integer | nil, msg, code */
static int l_eval(lua_State *L)
{
    const char *text = luaL_checkstring(L, 1);
    check_env(L, 2);
    kh_expr *e;
    kh_err err;
    if (kh_expr_parse(text, &e, &err))
        return kh_lua_fail(L, &err);
    void *ctx[2] = {L, (void *)(intptr_t)(lua_isnoneornil(L, 2) ? 0 : 2)};
    int64_t out;
    kh_status st = kh_expr_eval_lookup(e, lua_env_lookup, ctx, &out, &err);
    kh_expr_free(e);
    if (st)
        return kh_lua_fail(L, &err);
    lua_pushinteger(L, (lua_Integer)out);
    return 1;
}

static int l_expr_eval(lua_State *L) { return eval_with(L, check_expr(L, 1), 2); }

static int l_expr_vars(lua_State *L)
{
    kh_expr *e = check_expr(L, 1);
    lua_createtable(L, (int)kh_expr_nvars(e), 0);
    for (size_t i = 0; i < kh_expr_nvars(e); i++) {
        lua_pushstring(L, kh_expr_var_at(e, i)->text);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int l_expr_text(lua_State *L)
{
    lua_pushstring(L, kh_expr_text(check_expr(L, 1)));
    return 1;
}

static int l_expr_needs_data(lua_State *L)
{
    lua_pushboolean(L, kh_expr_needs_data(check_expr(L, 1)));
    return 1;
}

static int l_expr_gc(lua_State *L)
{
    l_expr *x = luaL_checkudata(L, 1, EXPR_MT);
    kh_expr_free(x->e);
    x->e = NULL;
    return 0;
}

/* ---- reports and sets -------------------------------------------------------- */
static void opts_from(lua_State *L, int idx, kh_task_opts *o)
{
    memset(o, 0, sizeof *o);
    if (lua_isnoneornil(L, idx))
        return;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_getfield(L, idx, "strict");
    o->strict = lua_toboolean(L, -1);
    lua_pop(L, 1);
}

static void push_problems(lua_State *L, const kh_task_set *s)
{
    lua_createtable(L, (int)kh_task_nproblems(s), 0);
    for (size_t i = 0; i < kh_task_nproblems(s); i++) {
        const kh_task_problem *p = kh_task_problem_at(s, i);
        char buf[2048];
        lua_createtable(L, 0, 6);
        lua_pushstring(L, p->severity == KH_TASK_ERROR ? "error" : "warning");
        lua_setfield(L, -2, "severity");
        lua_pushstring(L, p->file);
        lua_setfield(L, -2, "file");
        lua_pushinteger(L, p->line);
        lua_setfield(L, -2, "line");
        lua_pushstring(L, p->field);
        lua_setfield(L, -2, "field");
        lua_pushstring(L, p->msg);
        lua_setfield(L, -2, "message");
        lua_pushstring(L, kh_task_problem_format(p, buf, sizeof buf));
        lua_setfield(L, -2, "text");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

static void setint(lua_State *L, const char *k, size_t v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static void push_summary(lua_State *L, const kh_task_set *s)
{
    const kh_task_summary *m = kh_task_set_summary(s);
    lua_createtable(L, 0, 18);
    lua_pushstring(L, m->kind ? m->kind : "?");
    lua_setfield(L, -2, "kind");
    setint(L, "files", m->files);
    setint(L, "definitions", m->definitions);
    setint(L, "context_definitions", m->context_definitions);
    setint(L, "workload_files", m->workload_files);
    setint(L, "workloads", m->workloads);
    setint(L, "traces", m->traces);
    setint(L, "solutions", m->solutions);
    setint(L, "candidates", m->candidates);
    setint(L, "constraints", m->constraints);
    setint(L, "constraint_checks", m->constraint_checks);
    setint(L, "deferred", m->deferred);
    setint(L, "data_checks", m->data_checks);
    setint(L, "blobs_missing", m->blobs_missing);
    setint(L, "blobs_checked", m->blobs_checked);
    setint(L, "python_checked", m->python_checked);
    if (m->python) {
        lua_pushstring(L, m->python);
        lua_setfield(L, -2, "python");
    }
    setint(L, "errors", m->errors);
    setint(L, "warnings", m->warnings);
    lua_createtable(L, (int)kh_task_ndeferred(s), 0);
    for (size_t i = 0; i < kh_task_ndeferred(s); i++) {
        lua_pushstring(L, kh_task_deferred_at(s, i));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "deferred_constraints");
}

/* kh.task.check(path [, {strict=}]) -> {ok, summary, problems} | nil, msg, code */
static int l_check(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    kh_task_opts o;
    opts_from(L, 2, &o);
    o.python = 1; /* a check parses references as FlashInfer-Bench does */
    kh_task_set *s;
    kh_err err;
    if (kh_task_load(path, &o, &s, &err))
        return kh_lua_fail(L, &err);
    lua_createtable(L, 0, 3);
    lua_pushboolean(L, kh_task_set_summary(s)->errors == 0);
    lua_setfield(L, -2, "ok");
    push_summary(L, s);
    lua_setfield(L, -2, "summary");
    push_problems(L, s);
    lua_setfield(L, -2, "problems");
    kh_task_set_free(s);
    return 1;
}

/* kh.task.loads() -> how many times this process has read a task from disk */
static int l_loads(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)kh_task_load_count());
    return 1;
}

/* kh.task.load(path [, opts]) -> TaskSet | nil, msg, code.  The task as a
 * value (kh_task_open): kh.eval and kh.profile.run take it and read nothing
 * again. */
static int l_load(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    kh_task_opts o;
    opts_from(L, 2, &o);
    l_set *x = lua_newuserdatauv(L, sizeof *x, 0);
    x->t = NULL;
    luaL_setmetatable(L, SET_MT);
    kh_err err;
    if (kh_task_open(path, &o, &x->t, &err))
        return kh_lua_fail(L, &err);
    return 1;
}

static int l_set_close(lua_State *L)
{
    l_set *x = luaL_checkudata(L, 1, SET_MT);
    kh_task_close(x->t);
    x->t = NULL;
    return 0;
}

static int l_set_summary(lua_State *L)
{
    push_summary(L, check_set(L, 1));
    return 1;
}

static int l_set_problems(lua_State *L)
{
    push_problems(L, check_set(L, 1));
    return 1;
}

static int l_set_definitions(lua_State *L)
{
    kh_task_set *s = check_set(L, 1);
    lua_createtable(L, (int)kh_task_ndefs(s), 0);
    for (size_t i = 0; i < kh_task_ndefs(s); i++) {
        lua_pushstring(L, kh_task_def_at(s, i)->name);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static const kh_task_def *check_def(lua_State *L, kh_task_set *s, int idx)
{
    const char *name = luaL_checkstring(L, idx);
    const kh_task_def *d = kh_task_find_def(s, name);
    if (!d)
        luaL_error(L, "no definition named '%s' in this task set", name);
    return d;
}

static void push_tensors(lua_State *L, const kh_task_def *d, const kh_task_tensor *t, size_t n)
{
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, t[i].name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, t[i].dtype);
        lua_setfield(L, -2, "dtype");
        if (!t[i].is_scalar) {
            lua_createtable(L, (int)t[i].rank, 0);
            for (size_t k = 0; k < t[i].rank; k++) {
                lua_pushstring(L, d->axes[t[i].dims[k]].name);
                lua_rawseti(L, -2, (lua_Integer)k + 1);
            }
            lua_setfield(L, -2, "shape");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* ts:definition(name) -> {name, op_type, axes, inputs, outputs, constraints,
 * evaluator, tolerance, reference, baseline, file, json} */
static int l_set_definition(lua_State *L)
{
    kh_task_set *s = check_set(L, 1);
    const kh_task_def *d = check_def(L, s, 2);
    lua_createtable(L, 0, 14);
    lua_pushstring(L, d->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, d->op_type);
    lua_setfield(L, -2, "op_type");
    lua_pushstring(L, d->file);
    lua_setfield(L, -2, "file");
    lua_createtable(L, (int)d->naxes, 0);
    for (size_t i = 0; i < d->naxes; i++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, d->axes[i].name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, d->axes[i].is_const ? "const" : "var");
        lua_setfield(L, -2, "type");
        if (d->axes[i].is_const) {
            lua_pushinteger(L, (lua_Integer)d->axes[i].value);
            lua_setfield(L, -2, "value");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "axes");
    push_tensors(L, d, d->inputs, d->ninputs);
    lua_setfield(L, -2, "inputs");
    push_tensors(L, d, d->outputs, d->noutputs);
    lua_setfield(L, -2, "outputs");
    lua_createtable(L, (int)d->nconstraints, 0);
    for (size_t i = 0; i < d->nconstraints; i++) {
        lua_pushstring(L, d->constraints[i].text);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "constraints");
    lua_pushstring(L, d->evaluator);
    lua_setfield(L, -2, "evaluator");
    lua_createtable(L, 0, 3);
    lua_pushnumber(L, d->atol);
    lua_setfield(L, -2, "atol");
    lua_pushnumber(L, d->rtol);
    lua_setfield(L, -2, "rtol");
    lua_pushnumber(L, d->required_matched_ratio);
    lua_setfield(L, -2, "required_matched_ratio");
    lua_setfield(L, -2, "tolerance");
    if (d->reference) {
        lua_pushstring(L, d->reference);
        lua_setfield(L, -2, "reference");
    }
    if (d->baseline) {
        lua_pushstring(L, d->baseline);
        lua_setfield(L, -2, "baseline");
    }
    kh_lua_push_json(L, d->json);
    lua_setfield(L, -2, "json");
    return 1;
}

static void push_axes(lua_State *L, const kh_task_def *d, const int64_t *axes)
{
    lua_createtable(L, 0, (int)d->naxes);
    for (size_t i = 0; i < d->naxes; i++) {
        lua_pushinteger(L, (lua_Integer)axes[i]);
        lua_setfield(L, -2, d->axes[i].name);
    }
}

/* ts:workloads([defname]) -> list of {definition, uuid, file, line, axes =
 * {every axis = value}, inputs = json, trace = bool}; only workloads whose
 * axes resolved completely. */
static int l_set_workloads(lua_State *L)
{
    kh_task_set *s = check_set(L, 1);
    const char *only = luaL_optstring(L, 2, NULL);
    lua_newtable(L);
    lua_Integer n = 0;
    for (size_t i = 0; i < kh_task_nworkloads(s); i++) {
        const kh_task_workload *w = kh_task_workload_at(s, i);
        if (!w->def || !w->axes_ok || (only && strcmp(w->definition, only)))
            continue;
        lua_createtable(L, 0, 7);
        lua_pushstring(L, w->definition);
        lua_setfield(L, -2, "definition");
        lua_pushstring(L, w->uuid);
        lua_setfield(L, -2, "uuid");
        lua_pushstring(L, w->file);
        lua_setfield(L, -2, "file");
        lua_pushinteger(L, w->line);
        lua_setfield(L, -2, "line");
        lua_pushboolean(L, w->is_trace);
        lua_setfield(L, -2, "trace");
        push_axes(L, w->def, w->axes);
        lua_setfield(L, -2, "axes");
        kh_lua_push_json(L, json_object_get(w->json, "inputs"));
        lua_setfield(L, -2, "inputs");
        lua_rawseti(L, -2, ++n);
    }
    return 1;
}

static int l_set_solutions(lua_State *L)
{
    kh_task_set *s = check_set(L, 1);
    const char *only = luaL_optstring(L, 2, NULL);
    lua_newtable(L);
    lua_Integer n = 0;
    for (size_t i = 0; i < kh_task_nsolutions(s); i++) {
        const kh_task_solution *x = kh_task_solution_at(s, i);
        if (only && (!x->definition || strcmp(x->definition, only)))
            continue;
        lua_createtable(L, 0, 8);
        lua_pushstring(L, x->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, x->definition);
        lua_setfield(L, -2, "definition");
        lua_pushstring(L, x->author);
        lua_setfield(L, -2, "author");
        lua_pushstring(L, x->language);
        lua_setfield(L, -2, "language");
        lua_pushstring(L, x->file);
        lua_setfield(L, -2, "file");
        lua_pushboolean(L, x->manifest != NULL);
        lua_setfield(L, -2, "candidate");
        if (x->manifest) {
            lua_pushstring(L, x->manifest->host ? "host" : x->manifest->so ? "cuda_so" : "cuda");
            lua_setfield(L, -2, "backend");
        }
        kh_lua_push_json(L, x->json);
        lua_setfield(L, -2, "json");
        lua_rawseti(L, -2, ++n);
    }
    return 1;
}

/* Axis values for d from the table at idx ({name = value}, or a workload
 * table with .axes): const axes from d, every var axis required. */
static int64_t *axes_from(lua_State *L, const kh_task_def *d, int idx)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_getfield(L, idx, "axes");
    int t = lua_istable(L, -1) ? lua_gettop(L) : idx;
    int64_t *axes = lua_newuserdatauv(L, (d->naxes + 1) * sizeof *axes, 0);
    for (size_t i = 0; i < d->naxes; i++) {
        if (d->axes[i].is_const) {
            axes[i] = d->axes[i].value;
            continue;
        }
        lua_getfield(L, t, d->axes[i].name);
        if (!lua_isinteger(L, -1))
            luaL_error(L, "var axis '%s' of %s: expected an integer, got %s", d->axes[i].name,
                       d->name, luaL_typename(L, -1));
        axes[i] = (int64_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    /* [.. axes-or-nil, buffer]: keep the buffer alive on the stack */
    return axes;
}

/* ts:eval(defname, text, axes) -> integer | nil, msg, code */
static int l_set_eval(lua_State *L)
{
    kh_task_set *s = check_set(L, 1);
    const kh_task_def *d = check_def(L, s, 2);
    const char *text = luaL_checkstring(L, 3);
    int64_t *axes = axes_from(L, d, 4);
    kh_expr *e;
    kh_err err;
    if (kh_expr_parse(text, &e, &err))
        return kh_lua_fail(L, &err);
    int64_t out;
    kh_status st = kh_task_eval(d, axes, e, NULL, NULL, &out, &err);
    kh_expr_free(e);
    if (st)
        return kh_lua_fail(L, &err);
    lua_pushinteger(L, (lua_Integer)out);
    return 1;
}

/* ts:speed_of_light(defname, axes) -> {bytes, flops?} | nil, msg, code */
static int l_set_sol(lua_State *L)
{
    kh_task_set *s = check_set(L, 1);
    const kh_task_def *d = check_def(L, s, 2);
    int64_t *axes = axes_from(L, d, 3);
    int64_t bytes, flops;
    kh_err err;
    if (kh_task_speed_of_light(d, axes, &bytes, &flops, &err))
        return kh_lua_fail(L, &err);
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, (lua_Integer)bytes);
    lua_setfield(L, -2, "bytes");
    if (flops >= 0) {
        lua_pushinteger(L, (lua_Integer)flops);
        lua_setfield(L, -2, "flops");
    }
    return 1;
}

static void push_args(lua_State *L, const kh_task_def *d, const int64_t *axes,
                      const kh_task_arg *a, size_t n)
{
    static const char *const kinds[] = {"input", "output", "workspace", "scalar", "value"};
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, kinds[a[i].kind]);
        lua_setfield(L, -2, "kind");
        if (a[i].name) {
            lua_pushstring(L, a[i].name);
            lua_setfield(L, -2, "name");
        }
        if (a[i].expr) {
            int64_t v = 0;
            kh_err err;
            if (!kh_task_eval(d, axes, a[i].expr, NULL, NULL, &v, &err)) {
                lua_pushinteger(L, (lua_Integer)v);
                lua_setfield(L, -2, "value");
            }
            lua_pushstring(L, a[i].type);
            lua_setfield(L, -2, "type");
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* ts:launches(solution, axes) -> {backend, function?, workspace = {{name,
 * bytes, zero}}, launches = {{kernel, grid, block, shared_bytes, args}},
 * args?} | nil, msg, code */
static int l_set_launches(lua_State *L)
{
    kh_task_set *s = check_set(L, 1);
    const char *name = luaL_checkstring(L, 2);
    const kh_task_solution *sol = kh_task_find_solution(s, name);
    if (!sol)
        return luaL_error(L, "no solution named '%s' in this task set", name);
    if (!sol->def || !sol->manifest) {
        kh_err err;
        kh_err_set(&err, KH_EINVAL, "%s: %s", name,
                   !sol->manifest ? "not a khlua candidate (no spec.khlua)"
                                  : "its definition is not loaded");
        return kh_lua_fail(L, &err);
    }
    const kh_task_manifest *m = sol->manifest;
    int64_t *axes = axes_from(L, sol->def, 3);
    kh_task_launch_dims *dims = lua_newuserdatauv(L, (m->nlaunches + 1) * sizeof *dims, 0);
    int64_t *ws = lua_newuserdatauv(L, (m->nworkspace + 1) * sizeof *ws, 0);
    kh_err err;
    if (kh_task_manifest_resolve(sol, axes, dims, ws, &err))
        return kh_lua_fail(L, &err);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, m->host ? "host" : m->so ? "cuda_so" : "cuda");
    lua_setfield(L, -2, "backend");
    lua_createtable(L, (int)m->nworkspace, 0);
    for (size_t i = 0; i < m->nworkspace; i++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, m->workspace[i].name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, (lua_Integer)ws[i]);
        lua_setfield(L, -2, "bytes");
        lua_pushboolean(L, m->workspace[i].zero);
        lua_setfield(L, -2, "zero");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "workspace");
    if (m->host || m->so) {
        lua_pushstring(L, m->function);
        lua_setfield(L, -2, "function");
        push_args(L, sol->def, axes, m->args, m->nargs);
        lua_setfield(L, -2, "args");
    } else {
        lua_createtable(L, (int)m->nlaunches, 0);
        for (size_t i = 0; i < m->nlaunches; i++) {
            lua_createtable(L, 0, 5);
            lua_pushstring(L, m->launches[i].kernel);
            lua_setfield(L, -2, "kernel");
            for (int g = 0; g < 2; g++) {
                lua_createtable(L, 3, 0);
                for (int k = 0; k < 3; k++) {
                    lua_pushinteger(L, (lua_Integer)(g ? dims[i].block[k] : dims[i].grid[k]));
                    lua_rawseti(L, -2, k + 1);
                }
                lua_setfield(L, -2, g ? "block" : "grid");
            }
            lua_pushinteger(L, (lua_Integer)dims[i].shared_bytes);
            lua_setfield(L, -2, "shared_bytes");
            push_args(L, sol->def, axes, m->launches[i].args, m->launches[i].nargs);
            lua_setfield(L, -2, "args");
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        lua_setfield(L, -2, "launches");
    }
    return 1;
}

void kh_open_task(lua_State *L, kh_engine *e)
{
    static const luaL_Reg expr_methods[] = {
        {"eval", l_expr_eval},
        {"vars", l_expr_vars},
        {"text", l_expr_text},
        {"needs_data", l_expr_needs_data},
        {NULL, NULL},
    };
    static const luaL_Reg set_methods[] = {
        {"summary", l_set_summary},       {"problems", l_set_problems},
        {"definitions", l_set_definitions}, {"definition", l_set_definition},
        {"workloads", l_set_workloads},   {"solutions", l_set_solutions},
        {"eval", l_set_eval},             {"speed_of_light", l_set_sol},
        {"launches", l_set_launches},     {"close", l_set_close},
        {NULL, NULL},
    };
    if (luaL_newmetatable(L, EXPR_MT)) {
        luaL_newlib(L, expr_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_expr_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_expr_text);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, SET_MT)) {
        luaL_newlib(L, set_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_set_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_set_close);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"expr", l_expr_new}, {"eval", l_eval}, {"check", l_check}, {"load", l_load},
        {"loads", l_loads}, {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);
}
