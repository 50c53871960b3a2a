/* l_llm.c: kh.llm, the model client for Lua.  One client per Lua state (a
 * userdata in the registry, freed by its __gc at lua_close); submit/poll for
 * many calls in flight, chat for one blocking call, extract for candidates,
 * record_to for transcripts in the store (the writing is llm_store.c's).
 * Each submitted call counts as a live engine object until poll hands its
 * result to Lua, so a test that forgets a call fails the leak check. */
#include "l_llm.h"

#include "l_json.h"
#include "l_store.h"

#include "llm/llm.h"
#include "llm/llm_store.h"

#include <string.h>

#define CLIENT_MT "kh.Llm"
#define CLIENT_KEY "kh.llm.client"
#define STASH_KEY "kh.llm.stash" /* results finished while chat() waited */
#define STORE_KEY "kh.llm.store" /* the kh.Store given to record_to */

typedef struct lclient {
    kh_llm *c;
    kh_engine *e;
    kh_llm_recorder rec; /* the sink's state while recording */
} lclient;

static int client_gc(lua_State *L)
{
    lclient *u = luaL_checkudata(L, 1, CLIENT_MT);
    if (u->c) {
        size_t n = kh_llm_pending(u->c);
        for (size_t i = 0; i < n; i++)
            kh_engine_obj_release(u->e);
        kh_llm_free(u->c);
        u->c = NULL;
    }
    return 0;
}

static lclient *client(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, CLIENT_KEY) == LUA_TUSERDATA) {
        lclient *u = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return u;
    }
    lua_pop(L, 1);
    kh_engine *e = kh_lua_engine(L);
    /* created "closed", then opened: a failure leaves nothing to free */
    lclient *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    u->e = e;
    if (luaL_newmetatable(L, CLIENT_MT)) {
        lua_pushcfunction(L, client_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    kh_err err;
    u->c = kh_llm_new(e, &err);
    if (!u->c)
        luaL_error(L, "kh.llm: %s", err.msg);
    lua_setfield(L, LUA_REGISTRYINDEX, CLIENT_KEY);
    return u;
}

/* The request table as JSON; raises on values JSON cannot hold. */
static json_t *check_request(lua_State *L, int idx)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    kh_err err;
    json_t *j = kh_lua_to_json(L, idx, &err);
    if (!j)
        luaL_argerror(L, idx, err.msg);
    return j;
}

/* kh.llm.submit(req) -> ticket | nil, msg, code */
static int l_submit(lua_State *L)
{
    lclient *u = client(L);
    json_t *req = check_request(L, 1);
    int64_t id;
    kh_err err;
    kh_status st = kh_llm_submit(u->c, req, &id, &err);
    json_decref(req);
    if (st != KH_OK)
        return kh_lua_fail(L, &err);
    kh_engine_obj_acquire(u->e);
    lua_pushinteger(L, (lua_Integer)id);
    return 1;
}

/* Push a result as a table: the record plus raw and ticket; frees r's parts. */
static void push_result(lua_State *L, lclient *u, kh_llm_result *r)
{
    kh_lua_push_json(L, r->record);
    lua_pushlstring(L, r->raw ? r->raw : "", r->raw_len);
    lua_setfield(L, -2, "raw");
    lua_pushinteger(L, (lua_Integer)r->id);
    lua_setfield(L, -2, "ticket");
    json_decref(r->record);
    free(r->raw);
    r->record = NULL;
    r->raw = NULL;
    kh_engine_obj_release(u->e);
}

/* The store given to record_to, looked up again before every poll: the
 * script may have closed it since (its calls then carry store_error). */
static void refresh_store(lua_State *L, lclient *u)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, STORE_KEY) != LUA_TNIL) {
        struct kh_store *s = kh_lua_to_store(L, -1);
        u->rec.store = s;
        kh_llm_set_store(u->c, s);
    }
    lua_pop(L, 1);
}

/* Poll once; append finished results to the table at index t. */
static kh_status poll_into(lua_State *L, lclient *u, double timeout, int t, kh_err *err)
{
    refresh_store(L, u);
    kh_llm_result *rs = NULL;
    size_t n = 0;
    kh_status st = kh_llm_poll(u->c, timeout, &rs, &n, err);
    for (size_t i = 0; i < n; i++) {
        push_result(L, u, &rs[i]);
        lua_rawseti(L, t, (lua_Integer)lua_rawlen(L, t) + 1);
    }
    free(rs);
    return st;
}

static void push_stash(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, STASH_KEY) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, STASH_KEY);
    }
}

/* kh.llm.poll([timeout = 0]) -> {result, ...} (possibly empty) | nil, msg, code */
static int l_poll(lua_State *L)
{
    lua_Number t = luaL_optnumber(L, 1, 0);
    luaL_argcheck(L, t >= 0 && t <= 86400, 1, "timeout must be in [0, 86400] seconds");
    lclient *u = client(L);
    push_stash(L);               /* [stash] */
    int stash = lua_gettop(L);
    lua_newtable(L);             /* [stash, out] */
    int out = lua_gettop(L);
    lua_Integer ns = (lua_Integer)lua_rawlen(L, stash);
    for (lua_Integer i = 1; i <= ns; i++) {
        lua_rawgeti(L, stash, i);
        lua_rawseti(L, out, i);
    }
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, STASH_KEY);
    kh_err err;
    kh_status st = poll_into(L, u, ns ? 0 : t, out, &err);
    if (st != KH_OK && lua_rawlen(L, out) == 0)
        return kh_lua_fail(L, &err);
    return 1;
}

/* kh.llm.chat(req) -> result | nil, msg, code, result
 * Blocks until this call finishes; others that finish meanwhile wait for
 * the next kh.llm.poll. */
static int l_chat(lua_State *L)
{
    lclient *u = client(L);
    json_t *req = check_request(L, 1);
    int64_t id;
    kh_err err;
    kh_status st = kh_llm_submit(u->c, req, &id, &err);
    json_decref(req);
    if (st != KH_OK)
        return kh_lua_fail(L, &err);
    kh_engine_obj_acquire(u->e);
    push_stash(L); /* [stash] */
    int stash = lua_gettop(L);
    lua_newtable(L); /* [stash, batch] */
    int batch = lua_gettop(L);
    for (;;) {
        st = poll_into(L, u, 0.25, batch, &err);
        lua_Integer n = (lua_Integer)lua_rawlen(L, batch);
        int found = 0;
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, batch, i); /* [stash, batch, r] */
            lua_getfield(L, -1, "ticket");
            int mine = lua_tointeger(L, -1) == id;
            lua_pop(L, 1);
            if (mine && !found) {
                found = 1;
                lua_insert(L, batch + 1); /* keep it just above batch */
            } else {
                lua_rawseti(L, stash, (lua_Integer)lua_rawlen(L, stash) + 1);
            }
        }
        if (found) {
            /* [stash, batch, r] */
            lua_getfield(L, -1, "ok");
            int ok = lua_toboolean(L, -1);
            lua_pop(L, 1);
            if (ok)
                return 1;
            lua_pushnil(L);
            lua_getfield(L, -2, "error");
            lua_getfield(L, -1, "message");
            lua_getfield(L, -2, "code");
            lua_remove(L, -3);   /* [.., r, nil, msg, code] */
            lua_rotate(L, -4, -1); /* [.., nil, msg, code, r] */
            return 4;
        }
        lua_newtable(L);
        lua_replace(L, batch);
        if (st == KH_EINTR) {
            kh_err e2;
            kh_llm_cancel(u->c, id, &e2);
            /* collect the cancelled call so it is not left counted */
            kh_llm_result *rs = NULL;
            size_t k = 0;
            kh_llm_take(u->c, &rs, &k, &e2);
            for (size_t i = 0; i < k; i++) {
                push_result(L, u, &rs[i]);
                if (rs[i].id == id)
                    lua_pop(L, 1);
                else
                    lua_rawseti(L, stash, (lua_Integer)lua_rawlen(L, stash) + 1);
            }
            free(rs);
            return kh_lua_fail(L, &err);
        }
        if (st != KH_OK)
            return kh_lua_fail(L, &err);
    }
}

/* kh.llm.cancel(ticket) -> true | nil, msg, code */
static int l_cancel(lua_State *L)
{
    lua_Integer id = luaL_checkinteger(L, 1);
    lclient *u = client(L);
    kh_err err;
    if (kh_llm_cancel(u->c, (int64_t)id, &err) != KH_OK)
        return kh_lua_fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

/* kh.llm.pending() -> calls submitted and not yet returned */
static int l_pending(lua_State *L)
{
    lclient *u = client(L);
    push_stash(L);
    lua_pushinteger(L, (lua_Integer)(kh_llm_pending(u->c) + lua_rawlen(L, -1)));
    return 1;
}

/* Check an optional id field of the options table at idx: a string naming a
 * record of that type in s.  Copies it to out ("" when absent). */
static int opt_link(lua_State *L, int idx, const char *name, struct kh_store *s, char *out,
                    kh_err *err)
{
    out[0] = '\0';
    if (lua_isnoneornil(L, idx))
        return 0;
    lua_getfield(L, idx, name);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    size_t n;
    const char *id = lua_tolstring(L, -1, &n);
    size_t k = strlen(name);
    if (lua_type(L, -1) != LUA_TSTRING || n >= KH_STORE_ID_MAX || strncmp(id, name, k) ||
        id[k] != '-')
        return luaL_error(L, "kh.llm.record_to: %s must be a %s id (\"%s-...\")", name, name,
                          name);
    memcpy(out, id, n + 1);
    lua_pop(L, 1);
    json_t *r;
    if (kh_store_get(s, out, &r, err))
        return -1;
    json_decref(r);
    return 0;
}

/* kh.llm.record_to(db [, {run = RUN, round = ROUND}]) -> true | nil, msg, code
 * From now on every finished call is an llm_call record in db (linked to
 * run / round unless the request names its own), and replay {store = true}
 * reads from db.  kh.llm.record_to(nil) stops. */
static int l_record_to(lua_State *L)
{
    lclient *u = client(L);
    if (lua_isnoneornil(L, 1)) {
        kh_llm_set_sink(u->c, NULL, NULL);
        kh_llm_set_store(u->c, NULL);
        memset(&u->rec, 0, sizeof u->rec);
        lua_pushnil(L);
        lua_setfield(L, LUA_REGISTRYINDEX, STORE_KEY);
        lua_pushboolean(L, 1);
        return 1;
    }
    struct kh_store *s = kh_lua_check_store(L, 1);
    if (!lua_isnoneornil(L, 2))
        luaL_checktype(L, 2, LUA_TTABLE);
    char run[KH_STORE_ID_MAX], round[KH_STORE_ID_MAX];
    kh_err err;
    if (opt_link(L, 2, "run", s, run, &err) || opt_link(L, 2, "round", s, round, &err))
        return kh_lua_fail(L, &err);
    memcpy(u->rec.run, run, sizeof run);
    memcpy(u->rec.round, round, sizeof round);
    u->rec.store = s;
    kh_llm_set_sink(u->c, kh_llm_store_sink, &u->rec);
    kh_llm_set_store(u->c, s);
    lua_pushvalue(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, STORE_KEY);
    lua_pushboolean(L, 1);
    return 1;
}

/* kh.llm.extract(text [, {finish_reason = s, require_manifest = true}]) -> verdict */
static int l_extract(lua_State *L)
{
    const char *text = luaL_checkstring(L, 1);
    const char *finish = NULL;
    int require = 1;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_getfield(L, 2, "finish_reason");
        finish = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
        lua_getfield(L, 2, "require_manifest");
        if (!lua_isnil(L, -1))
            require = lua_toboolean(L, -1);
        lua_pop(L, 1); /* finish stays on the stack while used */
    }
    json_t *v = kh_llm_extract(text, finish, require);
    if (!v)
        return luaL_error(L, "kh.llm.extract: out of memory");
    kh_lua_push_json(L, v);
    json_decref(v);
    return 1;
}

/* kh.llm.serialize(req, dialect [, compat]) -> the wire body | nil, msg, code */
static int l_serialize(lua_State *L)
{
    /* Arguments first: a raise after check_request would leak req. */
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *d = luaL_checkstring(L, 2);
    int compat = lua_toboolean(L, 3);
    json_t *req = check_request(L, 1);
    kh_err err;
    json_t *b = kh_llm_serialize(req, d, compat, &err);
    json_decref(req);
    if (!b)
        return kh_lua_fail(L, &err);
    kh_lua_push_json(L, b);
    json_decref(b);
    return 1;
}

void kh_open_llm(lua_State *L, kh_engine *e)
{
    static const luaL_Reg fns[] = {
        {"submit", l_submit},   {"poll", l_poll},       {"chat", l_chat},
        {"cancel", l_cancel},   {"pending", l_pending}, {"extract", l_extract},
        {"serialize", l_serialize}, {"record_to", l_record_to}, {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);
}
