/* l_compile.c: kh.compile, NVRTC builds, compile services and the trusted
 * compile paths for Lua.  Owns argument checking and the conversion of
 * artifacts to tables; the compiler itself (and its warm precompiled headers
 * and cache) is one kh_compiler per Lua state, kept in the registry and freed
 * by its __gc at lua_close.  Compile services (compile_service.h) are
 * kh.CompileService objects; the two a build may use by default (servers, and
 * in process with a store) are made on first use and kept in the registry. */
#include "l_compile.h"

#include "l_json.h"
#include "l_store.h"

#include "compile/compile.h"
#include "compile/compile_service.h"
#include "compile/cubin.h"
#include "compile/hostcc.h"
#include "compile/srccheck.h"

#include <stdlib.h>
#include <string.h>

static const char COMPILER_KEY = 'c'; /* registry key: its address */

static void *compiler_new(kh_engine *e, kh_err *err) { return kh_compile_new(e, err); }
static void compiler_free(void *c) { kh_compile_free(c); }

/* This state's compiler, made on first use. */
static kh_compiler *get_compiler(lua_State *L)
{
    return kh_lua_singleton(L, &COMPILER_KEY, compiler_new, compiler_free);
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

static int by_name(const void *a, const void *b)
{
    return strcmp(((const kh_source *)a)->name, ((const kh_source *)b)->name);
}

/* t.headers = {["util.cuh"] = text, ...} as an array of kh_source in name
 * order, in scratch memory owned by a userdata left on the stack (nil when
 * absent: one slot either way).  Names and texts are anchored by the table. */
static const kh_source *header_list(lua_State *L, int t, size_t *n)
{
    *n = 0;
    int ty = lua_getfield(L, t, "headers");
    if (ty == LUA_TNIL)
        return NULL; /* the nil is the slot */
    if (ty != LUA_TTABLE)
        luaL_error(L, "field 'headers' must be a table {[name] = text}");
    size_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        count++;
        lua_pop(L, 1);
    }
    if (count > KH_COMPILE_MAX_HEADERS)
        luaL_error(L, "field 'headers' has %d entries (at most %d)", (int)count,
                   KH_COMPILE_MAX_HEADERS);
    kh_source *v = lua_newuserdatauv(L, (count ? count : 1) * sizeof *v, 0);
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, -3)) { /* [.., headers, ud, name, text] */
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING || i == count)
            luaL_error(L, "field 'headers' must map names (strings) to texts (strings)");
        v[i].name = lua_tostring(L, -2);
        v[i].text = lua_tolstring(L, -1, &v[i].len);
        i++;
        lua_pop(L, 1);
    }
    /* name order: reports and the wire form do not depend on the table's */
    qsort(v, i, sizeof *v, by_name);
    lua_remove(L, -2); /* [.., headers, ud] -> [.., ud] */
    *n = i;
    return v;
}

/* Fill req from the table at index t; pushes three scratch slots. */
static void read_request(lua_State *L, int t, kh_compile_req *req)
{
    luaL_checktype(L, t, LUA_TTABLE);
    memset(req, 0, sizeof *req);
    if (lua_getfield(L, t, "source") != LUA_TSTRING)
        luaL_argerror(L, t, "field 'source' (a string) is required");
    req->source = lua_tolstring(L, -1, &req->source_len);
    lua_pop(L, 1);
    req->name = opt_string(L, t, "name");
    req->arch = opt_string(L, t, "arch");
    req->options = string_list(L, t, "options", &req->n_options);
    req->kernels = string_list(L, t, "kernels", &req->n_kernels);
    req->headers = header_list(L, t, &req->n_headers);
    req->deadline_s = opt_number(L, t, "deadline", 0);
    luaL_argcheck(L, req->deadline_s >= 0 && req->deadline_s <= 3600, t,
                  "deadline must be in [0, 3600] seconds");
    req->trusted = opt_bool(L, t, "trusted", 0);
    req->allow_device_launch = opt_bool(L, t, "allow_device_launch", 0);
    lua_Number mb = opt_number(L, t, "max_source_bytes", 0);
    luaL_argcheck(L, mb >= 0 && mb <= KH_COMPILE_MAX_SOURCE, t,
                  "max_source_bytes out of range");
    req->max_source_bytes = (size_t)mb;
    req->no_pch = !opt_bool(L, t, "pch", 1);
    req->no_cache = !opt_bool(L, t, "cache", 1);
    /* model-written source compiles in a child with a hard deadline */
    req->isolate = opt_bool(L, t, "isolate", !req->trusted);
}

/* ---- compile services ------------------------------------------------------ */
#define SERVICE_MT "kh.CompileService"

typedef struct lservice {
    kh_compile_service *s;
    kh_engine *e;
    int counted; /* a user's object counts in the engine's live objects */
} lservice;

static int service_close(lua_State *L)
{
    lservice *u = luaL_checkudata(L, 1, SERVICE_MT);
    if (u->s) {
        kh_compile_service_free(u->s);
        u->s = NULL;
        if (u->counted)
            kh_engine_obj_release(u->e);
    }
    return 0;
}

static kh_compile_service *check_service(lua_State *L, int idx)
{
    lservice *u = luaL_checkudata(L, idx, SERVICE_MT);
    if (!u->s)
        luaL_argerror(L, idx, "compile service is closed");
    return u->s;
}

/* Push a new service userdata; raises on bad options (o is valid). */
static kh_compile_service *push_service(lua_State *L, const kh_compile_service_opts *o,
                                        int counted)
{
    lservice *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->s = NULL;
    u->e = kh_lua_engine(L);
    u->counted = counted;
    luaL_setmetatable(L, SERVICE_MT);
    kh_err err;
    if (!(u->s = kh_compile_service_new(u->e, o, &err)))
        luaL_error(L, "kh.compile.service: %s", err.msg);
    if (counted)
        kh_engine_obj_acquire(u->e);
    return u->s;
}

static const char SERVERS_KEY = 's', LOCAL_KEY = 'l'; /* registry keys: their addresses */

/* This state's default service of one kind, made on first use. */
static kh_compile_service *default_service(lua_State *L, int in_process)
{
    const void *key = in_process ? (const void *)&LOCAL_KEY : (const void *)&SERVERS_KEY;
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TUSERDATA) {
        kh_compile_service *s = check_service(L, -1);
        lua_pop(L, 1);
        return s;
    }
    lua_pop(L, 1);
    kh_compile_service_opts o = {.in_process = in_process};
    kh_compile_service *s = push_service(L, &o, 0);
    lua_rawsetp(L, LUA_REGISTRYINDEX, key);
    return s;
}

/* The store and service a request at t names: store = db (a kh.Store),
 * server = true | false | a kh.CompileService (default: true with a store).
 * NULL service: a plain in-process build without the store. */
static kh_compile_service *request_service(lua_State *L, int t, kh_store **store)
{
    *store = NULL;
    if (lua_getfield(L, t, "store") != LUA_TNIL)
        *store = kh_lua_check_store_idle(L, -1); /* anchored by the table */
    lua_pop(L, 1);
    int ty = lua_getfield(L, t, "server");
    kh_compile_service *s = NULL;
    if (ty == LUA_TUSERDATA) {
        s = check_service(L, -1);
    } else if (ty == LUA_TNIL || ty == LUA_TBOOLEAN) {
        int servers = ty == LUA_TNIL ? *store != NULL : lua_toboolean(L, -1);
        if (servers)
            s = default_service(L, 0);
        else if (*store)
            s = default_service(L, 1);
    } else {
        luaL_error(L, "field 'server' must be a boolean or a kh.CompileService");
    }
    lua_pop(L, 1);
    return s;
}

/* Push the artifact table (cubin as a string); frees a. */
static void push_artifact(lua_State *L, kh_artifact *a)
{
    json_t *j = kh_artifact_to_json(a);
    if (!j) {
        kh_artifact_free(a);
        luaL_error(L, "out of memory");
    }
    kh_lua_push_json(L, j);
    json_decref(j);
    lua_pushlstring(L, (const char *)a->cubin, a->cubin_len);
    lua_setfield(L, -2, "cubin");
    kh_artifact_free(a);
}

/* The answer of one build: artifact | nil, log (ECOMPILE) or message, code. */
static int build_result(lua_State *L, kh_status st, const kh_err *err, kh_artifact *a)
{
    if (st) {
        if (st == KH_ECOMPILE && a && a->log_len) {
            lua_pushnil(L);
            lua_pushlstring(L, a->log, a->log_len);
            lua_pushstring(L, kh_status_name(st));
            kh_artifact_free(a);
            return 3;
        }
        kh_artifact_free(a);
        return kh_lua_fail(L, err);
    }
    push_artifact(L, a);
    return 1;
}

/* kh.compile.build{source=, arch=, options={}, kernels={}, deadline=,
 *   trusted=, isolate=, pch=, cache=, allow_device_launch=, name=,
 *   headers={[name] = text}, store=db, server=true|false|svc}
 *   -> artifact table (cubin as a string) | nil, log or message, code */
static int l_build(lua_State *L)
{
    kh_compile_req req;
    read_request(L, 1, &req);
    kh_store *store;
    kh_compile_service *svc = request_service(L, 1, &store);
    kh_artifact *a = NULL;
    kh_err err;
    kh_status st = svc ? kh_compile_service_build(svc, store, &req, &a, &err)
                       : kh_compile_build(get_compiler(L), &req, &a, &err);
    return build_result(L, st, &err, a);
}

/* kh.compile.service{servers=, in_process=, launch=, grace=} -> kh.CompileService */
static int l_service(lua_State *L)
{
    kh_compile_service_opts o = {0};
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        lua_Number n = opt_number(L, 1, "servers", 0);
        luaL_argcheck(L, n == 0 || (n >= 1 && n <= KH_COMPILE_SERVICE_MAX_SERVERS &&
                                    n == (lua_Number)(int)n), 1,
                      "servers must be an integer in [1, 64]");
        o.servers = (size_t)n;
        o.in_process = opt_bool(L, 1, "in_process", 0);
        o.launch = opt_string(L, 1, "launch"); /* anchored by the table */
        o.grace_s = opt_number(L, 1, "grace", 0);
        luaL_argcheck(L, o.grace_s >= 0 && o.grace_s <= 600, 1, "grace must be in [0, 600]");
    }
    push_service(L, &o, 1);
    return 1;
}

/* svc:build{...as kh.compile.build; server is ignored} */
static int svc_build(lua_State *L)
{
    kh_compile_service *s = check_service(L, 1);
    kh_compile_req req;
    read_request(L, 2, &req);
    kh_store *store = NULL;
    if (lua_getfield(L, 2, "store") != LUA_TNIL)
        store = kh_lua_check_store_idle(L, -1);
    lua_pop(L, 1);
    kh_artifact *a = NULL;
    kh_err err;
    kh_status st = kh_compile_service_build(s, store, &req, &a, &err);
    return build_result(L, st, &err, a);
}

/* svc:build_all({req, req, ...} [, store]) -> {result, ...}: each an artifact
 * table, or {ok = false, code =, error =, log =, ...} (the artifact's fields
 * when there is one).  The jobs run at once, one per server. */
static int svc_build_all(lua_State *L)
{
    kh_compile_service *s = check_service(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    kh_store *store = lua_isnoneornil(L, 3) ? NULL : kh_lua_check_store_idle(L, 3);
    size_t n = lua_rawlen(L, 2);
    luaL_argcheck(L, n <= 4096, 2, "at most 4096 requests at once");
    kh_compile_req *reqs = lua_newuserdatauv(L, (n ? n : 1) * sizeof *reqs, 0);
    kh_compile_result *res = lua_newuserdatauv(L, (n ? n : 1) * sizeof *res, 0);
    int base = lua_gettop(L);
    luaL_checkstack(L, (int)(4 * n) + 8, "too many requests");
    for (size_t i = 0; i < n; i++) {
        if (lua_rawgeti(L, 2, (lua_Integer)i + 1) != LUA_TTABLE)
            return luaL_argerror(L, 2, "every request must be a table");
        read_request(L, lua_gettop(L), &reqs[i]); /* [.., req, scratch x3] */
    }
    kh_compile_service_build_many(s, store, reqs, n, res);
    lua_settop(L, base);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        if (res[i].status == KH_OK) {
            push_artifact(L, res[i].a);
        } else {
            json_t *j = res[i].a ? kh_artifact_to_json(res[i].a) : json_object();
            kh_artifact_free(res[i].a);
            if (!j) {
                for (size_t k = i + 1; k < n; k++)
                    kh_artifact_free(res[k].a);
                return luaL_error(L, "out of memory");
            }
            json_object_set_new(j, "ok", json_false());
            json_object_set_new(j, "code", json_string(kh_status_name(res[i].status)));
            char *m = kh_utf8_sanitize(res[i].err.msg, strlen(res[i].err.msg), NULL);
            json_object_set_new(j, "error", json_string(m ? m : "?"));
            free(m);
            kh_lua_push_json(L, j);
            json_decref(j);
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* svc:stats() -> {servers, jobs, store_hits, store_writes, store_errors,
 *   dispatched, warm_routed, started, deaths, timeouts, last_store_error} */
static int svc_stats(lua_State *L)
{
    kh_compile_service_stats st;
    kh_compile_service_stats_get(check_service(L, 1), &st);
    json_t *j = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s}", "servers",
                          (json_int_t)st.servers, "jobs", (json_int_t)st.jobs, "store_hits",
                          (json_int_t)st.store_hits, "store_writes",
                          (json_int_t)st.store_writes, "store_errors",
                          (json_int_t)st.store_errors, "dispatched", (json_int_t)st.dispatched,
                          "warm_routed", (json_int_t)st.warm_routed, "started",
                          (json_int_t)st.started, "deaths", (json_int_t)st.deaths, "timeouts",
                          (json_int_t)st.timeouts, "last_store_error", st.last_store_error);
    if (!j)
        return luaL_error(L, "out of memory");
    kh_lua_push_json(L, j);
    json_decref(j);
    return 1;
}

/* svc:pids() -> {pid or 0 per server slot} */
static int svc_pids(lua_State *L)
{
    kh_compile_service *s = check_service(L, 1);
    kh_compile_service_stats st;
    kh_compile_service_stats_get(s, &st);
    lua_createtable(L, (int)st.servers, 0);
    for (size_t i = 0; i < st.servers; i++) {
        lua_pushinteger(L, kh_compile_service_server_pid(s, i));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int svc_tostring(lua_State *L)
{
    lservice *u = luaL_checkudata(L, 1, SERVICE_MT);
    if (!u->s) {
        lua_pushliteral(L, "kh.CompileService (closed)");
    } else {
        kh_compile_service_stats st;
        kh_compile_service_stats_get(u->s, &st);
        lua_pushfstring(L, "kh.CompileService (%d servers)", (int)st.servers);
    }
    return 1;
}

/* kh.compile.key{...same fields as build} -> 32 hex digits | nil, msg, code */
static int l_key(lua_State *L)
{
    kh_compile_req req;
    read_request(L, 1, &req);
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

/* kh.compile.check(source [, {kernels=, allow_device_launch=, max_bytes=, name=,
 *   headers={[name] = text}}]) -> true | nil, report (one problem a line), "ECOMPILE" */
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
        o.headers = header_list(L, 2, &o.n_headers);
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
        {"trusted", l_trusted},      {"service", l_service},
        {NULL, NULL},
    };
    if (luaL_newmetatable(L, SERVICE_MT)) {
        static const luaL_Reg methods[] = {
            {"build", svc_build}, {"build_all", svc_build_all}, {"stats", svc_stats},
            {"pids", svc_pids},   {"close", service_close},     {NULL, NULL},
        };
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, service_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, service_close);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, svc_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    kh_lua_newlib(L, e, fns);
    lua_pushstring(L, KH_COMPILE_DEFAULT_ARCH);
    lua_setfield(L, -2, "default_arch");
}
