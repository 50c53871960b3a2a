/* l_compile.c: kh.compile, NVRTC builds and the trusted compile paths for
 * Lua.  Owns argument checking and the conversion of artifacts to tables; the
 * compiler itself (and its warm precompiled headers and cache) is one
 * kh_compiler per Lua state, kept in the registry and freed by its __gc at
 * lua_close. */
#include "kh_lua.h"

#include "compile.h"
#include "cubin.h"
#include "hostcc.h"
#include "srccheck.h"

#include <string.h>

static const char COMPILER_KEY = 'c'; /* registry key: its address */

typedef struct lcompiler {
    kh_compiler *c;
} lcompiler;

static int compiler_gc(lua_State *L)
{
    lcompiler *lc = luaL_checkudata(L, 1, "kh.Compiler");
    kh_compile_free(lc->c);
    lc->c = NULL;
    return 0;
}

/* This state's compiler, made on first use. */
static kh_compiler *get_compiler(lua_State *L)
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &COMPILER_KEY) == LUA_TUSERDATA) {
        lcompiler *lc = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return lc->c;
    }
    lua_pop(L, 1);
    lcompiler *lc = lua_newuserdatauv(L, sizeof *lc, 0);
    lc->c = NULL;
    if (luaL_newmetatable(L, "kh.Compiler")) {
        lua_pushcfunction(L, compiler_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    kh_err err;
    lc->c = kh_compile_new(kh_lua_engine(L), &err);
    if (!lc->c) {
        lua_pop(L, 1);
        luaL_error(L, "%s", err.msg);
    }
    lua_rawsetp(L, LUA_REGISTRYINDEX, &COMPILER_KEY);
    return lc->c;
}

/* t[field] as an array of strings, in scratch memory owned by a userdata
 * left on the stack (so a later raise frees it).  *n = 0 and NULL if absent. */
static const char **string_list(lua_State *L, int t, const char *field, size_t *n)
{
    *n = 0;
    int ty = lua_getfield(L, t, field);
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        lua_pushnil(L); /* keep the stack shape: one slot per list */
        return NULL;
    }
    if (ty != LUA_TTABLE)
        luaL_error(L, "field '%s' must be an array of strings", field);
    size_t len = lua_rawlen(L, -1);
    if (len > 256)
        luaL_error(L, "field '%s' has %d entries (at most 256)", field, (int)len);
    const char **v = lua_newuserdatauv(L, (len ? len : 1) * sizeof *v, 0);
    for (size_t i = 0; i < len; i++) {
        if (lua_rawgeti(L, -2, (lua_Integer)i + 1) != LUA_TSTRING)
            luaL_error(L, "field '%s'[%d] must be a string", field, (int)i + 1);
        v[i] = lua_tostring(L, -1); /* anchored by the table */
        lua_pop(L, 1);
    }
    lua_remove(L, -2); /* [.., table, ud] -> [.., ud] */
    *n = len;
    return v;
}

static const char *opt_string(lua_State *L, int t, const char *field)
{
    int ty = lua_getfield(L, t, field);
    if (ty != LUA_TNIL && ty != LUA_TSTRING)
        luaL_error(L, "field '%s' must be a string", field);
    const char *s = lua_tostring(L, -1); /* anchored by the table */
    lua_pop(L, 1);
    return s;
}

static int opt_bool(lua_State *L, int t, const char *field, int dflt)
{
    int ty = lua_getfield(L, t, field);
    if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
        luaL_error(L, "field '%s' must be a boolean", field);
    int v = ty == LUA_TNIL ? dflt : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static lua_Number opt_number(lua_State *L, int t, const char *field, lua_Number dflt)
{
    int ty = lua_getfield(L, t, field);
    if (ty != LUA_TNIL && ty != LUA_TNUMBER)
        luaL_error(L, "field '%s' must be a number", field);
    lua_Number v = ty == LUA_TNIL ? dflt : lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Fill req from the table at index 1; pushes two scratch slots. */
static void read_request(lua_State *L, kh_compile_req *req)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    memset(req, 0, sizeof *req);
    if (lua_getfield(L, 1, "source") != LUA_TSTRING)
        luaL_argerror(L, 1, "field 'source' (a string) is required");
    req->source = lua_tolstring(L, -1, &req->source_len);
    lua_pop(L, 1);
    req->name = opt_string(L, 1, "name");
    req->arch = opt_string(L, 1, "arch");
    req->options = string_list(L, 1, "options", &req->n_options);
    req->kernels = string_list(L, 1, "kernels", &req->n_kernels);
    req->deadline_s = opt_number(L, 1, "deadline", 0);
    luaL_argcheck(L, req->deadline_s >= 0 && req->deadline_s <= 3600, 1,
                  "deadline must be in [0, 3600] seconds");
    req->trusted = opt_bool(L, 1, "trusted", 0);
    req->allow_device_launch = opt_bool(L, 1, "allow_device_launch", 0);
    lua_Number mb = opt_number(L, 1, "max_source_bytes", 0);
    luaL_argcheck(L, mb >= 0 && mb <= KH_COMPILE_MAX_SOURCE, 1,
                  "max_source_bytes out of range");
    req->max_source_bytes = (size_t)mb;
    req->no_pch = !opt_bool(L, 1, "pch", 1);
    req->no_cache = !opt_bool(L, 1, "cache", 1);
    /* model-written source compiles in a child with a hard deadline */
    req->isolate = opt_bool(L, 1, "isolate", !req->trusted);
}

/* kh.compile.build{source=, arch=, options={}, kernels={}, deadline=,
 *   trusted=, isolate=, pch=, cache=, allow_device_launch=, name=}
 *   -> artifact table (cubin as a string) | nil, log or message, code */
static int l_build(lua_State *L)
{
    kh_compile_req req;
    read_request(L, &req);
    kh_compiler *c = get_compiler(L);
    kh_artifact *a = NULL;
    kh_err err;
    kh_status st = kh_compile_build(c, &req, &a, &err);
    if (st) {
        if (st == KH_ECOMPILE && a && a->log_len) {
            lua_pushnil(L);
            lua_pushlstring(L, a->log, a->log_len);
            lua_pushstring(L, kh_status_name(st));
            kh_artifact_free(a);
            return 3;
        }
        kh_artifact_free(a);
        return kh_lua_fail(L, &err);
    }
    json_t *j = kh_artifact_to_json(a);
    if (!j) {
        kh_artifact_free(a);
        return luaL_error(L, "out of memory");
    }
    kh_lua_push_json(L, j);
    json_decref(j);
    lua_pushlstring(L, (const char *)a->cubin, a->cubin_len);
    lua_setfield(L, -2, "cubin");
    kh_artifact_free(a);
    return 1;
}

/* kh.compile.key{...same fields as build} -> 32 hex digits | nil, msg, code */
static int l_key(lua_State *L)
{
    kh_compile_req req;
    read_request(L, &req);
    unsigned char key[16];
    kh_err err;
    if (kh_compile_key(get_compiler(L), &req, key, &err))
        return kh_lua_fail(L, &err);
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    lua_pushstring(L, hex);
    return 1;
}

/* kh.compile.check(source [, {kernels=, allow_device_launch=, max_bytes=, name=}])
 *   -> true | nil, report (one problem a line), "ECOMPILE" */
static int l_check(lua_State *L)
{
    size_t len;
    const char *src = luaL_checklstring(L, 1, &len);
    kh_srccheck_opts o = {0};
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        o.kernels = string_list(L, 2, "kernels", &o.n_kernels);
        o.allow_device_launch = opt_bool(L, 2, "allow_device_launch", 0);
        lua_Number mb = opt_number(L, 2, "max_bytes", 0);
        luaL_argcheck(L, mb >= 0, 2, "max_bytes must be >= 0");
        o.max_bytes = (size_t)mb;
        o.name = opt_string(L, 2, "name");
    }
    char *report = NULL;
    kh_err err;
    kh_status st = kh_srccheck_run(src, len, &o, &report, &err);
    if (st == KH_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (st == KH_ECOMPILE && report) {
        lua_pushnil(L);
        lua_pushstring(L, report);
        lua_pushstring(L, kh_status_name(st));
        free(report);
        return 3;
    }
    free(report);
    return kh_lua_fail(L, &err);
}

/* kh.compile.resources(cubin) -> {sm=, kernels={name={...}}} | nil, msg, "EPARSE" */
static int l_resources(lua_State *L)
{
    size_t len;
    const char *blob = luaL_checklstring(L, 1, &len);
    kh_cubin_info info;
    kh_err err;
    if (kh_cubin_parse(blob, len, &info, &err))
        return kh_lua_fail(L, &err);
    kh_artifact a = {.res = info, .ok = 1};
    json_t *j = kh_artifact_to_json(&a);
    kh_cubin_info_free(&info);
    if (!j)
        return luaL_error(L, "out of memory");
    /* [j -> t] keep only sm and kernels */
    json_t *r = json_pack("{s:O,s:O}", "sm", json_object_get(j, "sm"), "kernels",
                          json_object_get(j, "kernels"));
    json_decref(j);
    if (!r)
        return luaL_error(L, "out of memory");
    kh_lua_push_json(L, r);
    json_decref(r);
    return 1;
}

/* kh.compile.cache_stats() -> {entries, bytes, hits, misses, evictions} */
static int l_cache_stats(lua_State *L)
{
    kh_compile_cache_stats s;
    kh_compile_cache_stats_get(get_compiler(L), &s);
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, (lua_Integer)s.entries);
    lua_setfield(L, -2, "entries");
    lua_pushinteger(L, (lua_Integer)s.bytes);
    lua_setfield(L, -2, "bytes");
    lua_pushinteger(L, (lua_Integer)s.hits);
    lua_setfield(L, -2, "hits");
    lua_pushinteger(L, (lua_Integer)s.misses);
    lua_setfield(L, -2, "misses");
    lua_pushinteger(L, (lua_Integer)s.evictions);
    lua_setfield(L, -2, "evictions");
    return 1;
}

static int l_cache_clear(lua_State *L)
{
    kh_compile_cache_clear(get_compiler(L));
    return 0;
}

/* kh.compile.trusted{kind="nvcc_so"|"nvcc_cubin"|"cc_so", source_path=, output=,
 *   arch=, flags={}, deadline=} -> {command, compiler, version, log, seconds}
 *   | nil, log or message, code.  Only for code written by people. */
static int l_trusted(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    static const char *const kinds[] = {"nvcc_so", "nvcc_cubin", "cc_so", NULL};
    lua_getfield(L, 1, "kind");
    int kind = luaL_checkoption(L, -1, NULL, kinds);
    lua_pop(L, 1);
    const char *src = opt_string(L, 1, "source_path");
    const char *outp = opt_string(L, 1, "output");
    if (!src || !outp)
        return luaL_argerror(L, 1, "fields 'source_path' and 'output' are required");
    const char *arch = opt_string(L, 1, "arch");
    size_t nf;
    const char **flags = string_list(L, 1, "flags", &nf);
    lua_Number dl = opt_number(L, 1, "deadline", 0);
    luaL_argcheck(L, dl >= 0 && dl <= 3600, 1, "deadline must be in [0, 3600] seconds");
    kh_hostcc_result res;
    kh_err err;
    kh_status st = kh_hostcc_build(kh_lua_engine(L), (kh_hostcc_kind)kind, src, outp, arch,
                                   flags, nf, dl, &res, &err);
    if (st) {
        if (st == KH_ECOMPILE && res.log && res.log[0]) {
            lua_pushnil(L);
            lua_pushstring(L, res.log);
            lua_pushstring(L, kh_status_name(st));
            kh_hostcc_result_free(&res);
            return 3;
        }
        kh_hostcc_result_free(&res);
        return kh_lua_fail(L, &err);
    }
    lua_createtable(L, 0, 5);
    lua_pushstring(L, res.command);
    lua_setfield(L, -2, "command");
    lua_pushstring(L, res.compiler);
    lua_setfield(L, -2, "compiler");
    lua_pushstring(L, res.version);
    lua_setfield(L, -2, "version");
    lua_pushstring(L, res.log);
    lua_setfield(L, -2, "log");
    lua_pushnumber(L, res.seconds);
    lua_setfield(L, -2, "seconds");
    kh_hostcc_result_free(&res);
    return 1;
}

void kh_open_compile(lua_State *L, kh_engine *e)
{
    static const luaL_Reg fns[] = {
        {"build", l_build},          {"key", l_key},
        {"check", l_check},          {"resources", l_resources},
        {"cache_stats", l_cache_stats}, {"cache_clear", l_cache_clear},
        {"trusted", l_trusted},      {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);
    lua_pushstring(L, KH_COMPILE_DEFAULT_ARCH);
    lua_setfield(L, -2, "default_arch");
}
