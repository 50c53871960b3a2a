/* l_json.c: kh.json, JSON <-> Lua over jansson.  Integers stay integers,
 * {} and [] survive a round trip (marker metatables), null is kh.json.null.
 * Also the C helpers the other bindings use to hand JSON records to Lua. */
#include "l_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ARRAY_MT "kh.json.array"
#define OBJECT_MT "kh.json.object"
#define MAX_DEPTH 200

/* kh.json.null: a light userdata that no other value equals. */
static int null_sentinel;
#define JSON_NULL ((void *)&null_sentinel)

static void set_marker(lua_State *L, const char *mt)
{
    /* [t] */
    luaL_getmetatable(L, mt);
    lua_setmetatable(L, -2);
}

void kh_lua_push_json(lua_State *L, const json_t *j)
{
    luaL_checkstack(L, 4, "JSON too deep");
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *v;
        lua_createtable(L, 0, (int)json_object_size(j));
        json_object_foreach((json_t *)j, k, v) {
            kh_lua_push_json(L, v);
            lua_setfield(L, -2, k);
        }
        set_marker(L, OBJECT_MT);
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *v;
        lua_createtable(L, (int)json_array_size(j), 0);
        json_array_foreach(j, i, v) {
            kh_lua_push_json(L, v);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        set_marker(L, ARRAY_MT);
        break;
    }
    case JSON_STRING:
        lua_pushlstring(L, json_string_value(j), json_string_length(j));
        break;
    case JSON_INTEGER:
        lua_pushinteger(L, (lua_Integer)json_integer_value(j));
        break;
    case JSON_REAL:
        lua_pushnumber(L, json_real_value(j));
        break;
    case JSON_TRUE:
        lua_pushboolean(L, 1);
        break;
    case JSON_FALSE:
        lua_pushboolean(L, 0);
        break;
    default:
        lua_pushlightuserdata(L, JSON_NULL);
        break;
    }
}

/* Classify the table at idx: 1 array (keys exactly 1..n), 0 object (all
 * string keys), -1 mixed/sparse.  Marker metatables decide empty tables. */
static int table_kind(lua_State *L, int idx, lua_Integer *n_out)
{
    int marked = 0;
    if (lua_getmetatable(L, idx)) {
        luaL_getmetatable(L, ARRAY_MT);
        if (lua_rawequal(L, -1, -2))
            marked = 1;
        lua_pop(L, 1);
        luaL_getmetatable(L, OBJECT_MT);
        if (lua_rawequal(L, -1, -2))
            marked = 2;
        lua_pop(L, 2);
    }
    lua_Integer count = 0, maxk = 0;
    int strings = 0, others = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        count++;
        if (lua_type(L, -1) == LUA_TSTRING) {
            strings++;
        } else if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1) {
            lua_Integer k = lua_tointeger(L, -1);
            if (k > maxk)
                maxk = k;
        } else {
            others++;
        }
    }
    *n_out = maxk;
    if (count == 0)
        return marked == 2 ? 0 : 1;
    if (others || (strings && strings != count))
        return -1;
    if (strings)
        return marked == 1 ? -1 : 0;
    return maxk == count ? 1 : -2;
}

static json_t *to_json(lua_State *L, int idx, int depth, char *path, size_t plen, kh_err *err)
{
    idx = lua_absindex(L, idx);
    if (depth > MAX_DEPTH) {
        kh_err_set(err, KH_EINVAL, "at %s: nested deeper than %d (a cycle?)", path, MAX_DEPTH);
        return NULL;
    }
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        return json_null();
    case LUA_TBOOLEAN:
        return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            return json_integer((json_int_t)lua_tointeger(L, idx));
        else {
            double d = lua_tonumber(L, idx);
            if (!isfinite(d)) {
                kh_err_set(err, KH_EINVAL, "at %s: %g cannot be written as JSON", path, d);
                return NULL;
            }
            return json_real(d);
        }
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        json_t *j = json_stringn(s, n);
        if (!j)
            kh_err_set(err, KH_EINVAL, "at %s: string is not valid UTF-8", path);
        return j;
    }
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == JSON_NULL)
            return json_null();
        break;
    case LUA_TTABLE: {
        luaL_checkstack(L, 6, "JSON too deep");
        lua_Integer n = 0;
        int kind = table_kind(L, idx, &n);
        size_t used = strlen(path);
        if (kind == -1 || kind == -2) {
            kh_err_set(err, KH_EINVAL, "at %s: table %s", path,
                       kind == -1 ? "mixes string and non-string keys"
                                  : "is a sparse array (holes between 1 and its largest key)");
            return NULL;
        }
        if (kind == 1) {
            json_t *a = json_array();
            for (lua_Integer i = 1; i <= n; i++) {
                snprintf(path + used, plen - used, "[%lld]", (long long)i);
                lua_rawgeti(L, idx, i);
                json_t *v = to_json(L, -1, depth + 1, path, plen, err);
                lua_pop(L, 1);
                if (!v) {
                    json_decref(a);
                    return NULL;
                }
                json_array_append_new(a, v);
            }
            path[used] = '\0';
            return a;
        }
        json_t *o = json_object();
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            size_t kn;
            const char *k = lua_tolstring(L, -2, &kn);
            snprintf(path + used, plen - used, ".%s", k);
            json_t *v = to_json(L, -1, depth + 1, path, plen, err);
            lua_pop(L, 1);
            if (!v || json_object_setn_new(o, k, kn, v) != 0) {
                if (v) {
                    kh_err_set(err, KH_EINVAL, "at %s: key is not valid UTF-8", path);
                    json_decref(v);
                }
                lua_pop(L, 1);
                json_decref(o);
                return NULL;
            }
        }
        path[used] = '\0';
        return o;
    }
    default:
        break;
    }
    kh_err_set(err, KH_EINVAL, "at %s: a %s value cannot be written as JSON", path,
               luaL_typename(L, idx));
    return NULL;
}

json_t *kh_lua_to_json(lua_State *L, int idx, kh_err *err)
{
    char path[512] = "$";
    return to_json(L, idx, 0, path, sizeof path, err);
}

/* kh.json.encode(value [, {indent=N, sort_keys=bool}]) -> string; raises on
 * values JSON cannot hold (misuse). */
static int l_encode(lua_State *L)
{
    luaL_checkany(L, 1);
    size_t flags = JSON_ENCODE_ANY | JSON_COMPACT;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_getfield(L, 2, "indent");
        if (!lua_isnil(L, -1)) {
            lua_Integer ind = luaL_checkinteger(L, -1);
            luaL_argcheck(L, ind >= 0 && ind <= 31, 2, "indent must be 0..31");
            if (ind > 0)
                flags = (flags & ~(size_t)JSON_COMPACT) | JSON_INDENT(ind);
        }
        lua_getfield(L, 2, "sort_keys");
        if (lua_toboolean(L, -1))
            flags |= JSON_SORT_KEYS;
        lua_pop(L, 2);
    }
    kh_err err;
    json_t *j = kh_lua_to_json(L, 1, &err);
    if (!j)
        return luaL_error(L, "kh.json.encode: %s", err.msg);
    char *s = json_dumps(j, flags);
    json_decref(j);
    if (!s)
        return luaL_error(L, "kh.json.encode: out of memory");
    lua_pushstring(L, s);
    free(s);
    return 1;
}

/* kh.json.decode(text) -> value, or nil, "line L col C: why", "EPARSE". */
static int l_decode(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j) {
        kh_err err;
        kh_err_set(&err, KH_EPARSE, "invalid JSON at line %d col %d: %s", je.line, je.column,
                   je.text);
        return kh_lua_fail(L, &err);
    }
    kh_lua_push_json(L, j);
    json_decref(j);
    return 1;
}

static int mark(lua_State *L, const char *mt)
{
    if (lua_isnoneornil(L, 1))
        lua_newtable(L);
    else
        luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    set_marker(L, mt);
    return 1;
}

/* kh.json.array([t]) / kh.json.object([t]): mark a table (or a new one). */
static int l_array(lua_State *L) { return mark(L, ARRAY_MT); }
static int l_object(lua_State *L) { return mark(L, OBJECT_MT); }

void kh_open_json(lua_State *L, kh_engine *e)
{
    luaL_newmetatable(L, ARRAY_MT);
    lua_pushliteral(L, "array");
    lua_setfield(L, -2, "__name");
    lua_pop(L, 1);
    luaL_newmetatable(L, OBJECT_MT);
    lua_pushliteral(L, "object");
    lua_setfield(L, -2, "__name");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"encode", l_encode}, {"decode", l_decode}, {"array", l_array},
        {"object", l_object}, {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);
    lua_pushlightuserdata(L, JSON_NULL);
    lua_setfield(L, -2, "null");
}
