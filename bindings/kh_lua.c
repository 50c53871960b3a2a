/* kh_lua.c: the helpers every binding uses (kh_lua.h): the engine as upvalue,
 * module tables, one engine object per Lua state, the nil, msg, code failure.
 * It calls no other binding: the bindings sit on top of it. */
#include "kh_lua.h"

kh_engine *kh_lua_engine(lua_State *L)
{
    kh_engine *e = lua_touserdata(L, lua_upvalueindex(1));
    if (!e)
        luaL_error(L, "khlua: binding called without its engine (internal error)");
    return e;
}

void kh_lua_newlib(lua_State *L, kh_engine *e, const luaL_Reg *fns)
{
    lua_newtable(L);
    lua_pushlightuserdata(L, e);
    luaL_setfuncs(L, fns, 1);
}

typedef struct lsingleton {
    void *obj;
    void (*destroy)(void *obj);
} lsingleton;

static int singleton_gc(lua_State *L)
{
    lsingleton *u = luaL_checkudata(L, 1, "kh.Singleton");
    if (u->obj && u->destroy)
        u->destroy(u->obj);
    u->obj = NULL;
    return 0;
}

void *kh_lua_singleton(lua_State *L, const void *key,
                       void *(*create)(kh_engine *e, kh_err *err), void (*destroy)(void *obj))
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TUSERDATA) {
        lsingleton *u = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return u->obj;
    }
    lua_pop(L, 1);
    lsingleton *u = lua_newuserdatauv(L, sizeof *u, 0); /* [u] */
    u->obj = NULL;
    u->destroy = destroy;
    if (luaL_newmetatable(L, "kh.Singleton")) {
        lua_pushcfunction(L, singleton_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    kh_err err;
    u->obj = create(kh_lua_engine(L), &err);
    if (!u->obj) {
        lua_pop(L, 1);
        luaL_error(L, "%s", err.msg);
    }
    lua_rawsetp(L, LUA_REGISTRYINDEX, key); /* [] */
    return u->obj;
}

int kh_lua_fail(lua_State *L, const kh_err *err)
{
    lua_pushnil(L);
    lua_pushstring(L, err->msg);
    lua_pushstring(L, kh_status_name(err->code));
    return 3;
}
