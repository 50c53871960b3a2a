/* l_store.c: kh.store, the artifact store in Lua.  kh.store.open returns a
 * kh.Store (closed by :close(), __close or __gc, counted in the engine's live
 * objects); db:update(fn) / db:view(fn) run fn with a kh.StoreTxn that is
 * valid only inside the call: the LMDB transaction never reaches the garbage
 * collector.  Records travel as tables (kh.json's conversions).  The generic
 * put refuses the record types the engine writes (task, candidate,
 * evaluation, run, round, llm_call, promotion): their writers are
 * l_records.c's tx:put_run, ... and tx:put_candidate here. */
#include "l_store.h"

#include "l_json.h"

#include "store/candidate.h"
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_MT "kh.Store"
#define TXN_MT "kh.StoreTxn"

typedef struct l_store {
    kh_store *s;
    kh_engine *e;
} l_store;

typedef struct l_txn {
    kh_store_txn *tx; /* NULL outside its scope */
    int write;
} l_txn;

static l_store *check_store(lua_State *L, int idx)
{
    l_store *u = luaL_checkudata(L, idx, STORE_MT);
    if (!u->s)
        luaL_argerror(L, idx, "store is closed");
    return u;
}

/* The one-call methods open their own transaction: inside a scope that
 * would nest, so say which object to use instead. */
static l_store *check_store_idle(lua_State *L, int idx)
{
    l_store *u = check_store(L, idx);
    if (kh_store_in_txn(u->s))
        luaL_error(L, "kh.Store: a transaction is open on this store: inside db:update / "
                      "db:view use the tx argument (tx:put, tx:get, ...)");
    return u;
}

static l_txn *check_txn(lua_State *L, int idx)
{
    l_txn *t = luaL_checkudata(L, idx, TXN_MT);
    if (!t->tx)
        luaL_error(L, "kh.StoreTxn: transaction used outside its db:update/db:view scope");
    return t;
}

struct kh_store_txn *kh_lua_check_txn(lua_State *L, int idx)
{
    return check_txn(L, idx)->tx;
}

static void check_hash(lua_State *L, int idx, kh_hash *h)
{
    kh_err err;
    const char *s = luaL_checkstring(L, idx);
    if (kh_hash_parse(s, h, &err))
        luaL_argerror(L, idx, err.msg);
}

static int push_hash(lua_State *L, const kh_hash *h)
{
    char hx[33];
    kh_hash_hex(h, hx);
    lua_pushstring(L, hx);
    return 1;
}

struct kh_store *kh_lua_check_store(lua_State *L, int idx)
{
    return check_store(L, idx)->s;
}

struct kh_store *kh_lua_to_store(lua_State *L, int idx)
{
    l_store *u = luaL_testudata(L, idx, STORE_MT);
    return u ? u->s : NULL;
}

/* ---- kh.store.open ------------------------------------------------------------ */
static int l_open(lua_State *L)
{
    kh_engine *e = kh_lua_engine(L);
    const char *path = luaL_optstring(L, 1, kh_engine_store_path(e));
    kh_store_opts o = {0};
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_getfield(L, 2, "map_size");
        if (!lua_isnil(L, -1)) {
            lua_Integer m = luaL_checkinteger(L, -1);
            luaL_argcheck(L, m >= 65536, 2, "map_size must be at least 65536 bytes");
            o.map_size = (size_t)m;
        }
        lua_getfield(L, 2, "readonly");
        o.readonly = lua_toboolean(L, -1);
        lua_getfield(L, 2, "nosync");
        o.nosync = lua_toboolean(L, -1);
        lua_pop(L, 3);
    }
    /* the userdata exists "closed" first, so an open failure leaks nothing */
    l_store *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->s = NULL;
    u->e = e;
    luaL_setmetatable(L, STORE_MT);
    kh_err err;
    kh_store *s;
    if (kh_store_open(path, &o, &s, &err))
        return kh_lua_fail(L, &err);
    u->s = s;
    kh_engine_obj_acquire(e);
    return 1;
}

static int l_close(lua_State *L)
{
    l_store *u = luaL_checkudata(L, 1, STORE_MT);
    if (u->s) {
        if (kh_store_in_txn(u->s))
            return luaL_error(L, "kh.Store: cannot close the store inside db:update/db:view");
        kh_store_close(u->s);
        u->s = NULL;
        kh_engine_obj_release(u->e);
    }
    return 0;
}

static int l_tostring(lua_State *L)
{
    l_store *u = luaL_checkudata(L, 1, STORE_MT);
    if (u->s)
        lua_pushfstring(L, "kh.Store (%s)", kh_store_path(u->s));
    else
        lua_pushliteral(L, "kh.Store (closed)");
    return 1;
}

struct kh_store *kh_lua_check_store_idle(lua_State *L, int idx)
{
    return check_store_idle(L, idx)->s;
}

static int l_path(lua_State *L)
{
    lua_pushstring(L, kh_store_path(check_store(L, 1)->s));
    return 1;
}

/* ---- shared record helpers ------------------------------------------------------ */
static int put_flags(lua_State *L, int idx)
{
    if (lua_isnoneornil(L, idx))
        return 0;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_getfield(L, idx, "replace");
    int f = lua_toboolean(L, -1) ? KH_STORE_REPLACE : 0;
    lua_pop(L, 1);
    return f;
}

/* The record types the engine alone writes, and the writer to use: the
 * generic put refuses them (one writer per record type, docs/store.md). */
static const char *const OWNED[][2] = {
    {"task", "tx:put_task"},
    {"candidate", "tx:put_candidate"},
    {"evaluation", "kh.eval with opts.store (or tx:put_evaluation)"},
    {"run", "tx:put_run and tx:update_run"},
    {"round", "tx:put_round"},
    {"llm_call", "kh.llm.record_to or tx:put_llm_call"},
    {"promotion", "tx:put_promotion"},
};

/* Raise when the record table at idx is of an owned type (misuse: the
 * generic put is not how these are written). */
static void refuse_owned(lua_State *L, int idx, const char *what)
{
    lua_getfield(L, idx, "type");
    const char *type = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    for (size_t i = 0; type && i < KH_ARRAY_LEN(OWNED); i++)
        if (!strcmp(type, OWNED[i][0]))
            luaL_error(L, "%s: %s records are written by the engine alone (one writer per "
                          "record type): use %s (docs/store.md, Records)",
                       what, type, OWNED[i][1]);
    lua_pop(L, 1);
}

static json_t *check_record(lua_State *L, int idx)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    kh_err err;
    json_t *j = kh_lua_to_json(L, idx, &err);
    if (!j)
        luaL_argerror(L, idx, err.msg);
    return j;
}

static int64_t time_field(lua_State *L, int idx, const char *name)
{
    int64_t us = 0;
    lua_getfield(L, idx, name);
    if (lua_type(L, -1) == LUA_TNUMBER) {
        us = (int64_t)(lua_tonumber(L, -1) * 1e6);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        kh_err err;
        if (kh_store_parse_time(lua_tostring(L, -1), &us, &err))
            luaL_error(L, "query: %s: %s", name, err.msg);
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "query: %s must be seconds since the epoch or an ISO 8601 string", name);
    }
    lua_pop(L, 1);
    return us;
}

/* Read the filter table at idx; strings stay anchored in that table. */
static void check_filter(lua_State *L, int idx, kh_store_filter *q)
{
    memset(q, 0, sizeof *q);
    if (lua_isnoneornil(L, idx))
        return;
    luaL_checktype(L, idx, LUA_TTABLE);
    const char *names[5] = {"type", "task", "run", "candidate", "status"};
    const char **slots[5] = {&q->type, &q->task, &q->run, &q->candidate, &q->status};
    for (int i = 0; i < 5; i++) {
        lua_getfield(L, idx, names[i]);
        if (!lua_isnil(L, -1)) {
            if (lua_type(L, -1) != LUA_TSTRING)
                luaL_error(L, "query: %s must be a string", names[i]);
            *slots[i] = lua_tostring(L, -1); /* anchored by the table */
        }
        lua_pop(L, 1);
    }
    lua_getfield(L, idx, "limit");
    if (!lua_isnil(L, -1)) {
        lua_Integer n = luaL_checkinteger(L, -1);
        if (n < 0)
            luaL_error(L, "query: limit must be >= 0");
        q->limit = (size_t)n;
    }
    lua_pop(L, 1);
    q->since_us = time_field(L, idx, "since");
    q->until_us = time_field(L, idx, "until");
}

static void push_json_owned(lua_State *L, json_t *j)
{
    /* push first, free after: a memory error while pushing would leak j,
     * which is acceptable; freeing before pushing is not */
    kh_lua_push_json(L, j);
    json_decref(j);
}

/* ---- one-call methods ---------------------------------------------------------------- */
static int l_put_blob(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    size_t n;
    const char *data = luaL_checklstring(L, 2, &n);
    kh_hash h;
    kh_err err;
    if (kh_store_put_blob(u->s, data, n, &h, &err))
        return kh_lua_fail(L, &err);
    return push_hash(L, &h);
}

struct size_arg {
    const kh_hash *h;
    size_t n;
    void *dst;
};

static kh_status blob_size_cb(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct size_arg *a = arg;
    return kh_store_txn_blob_size(tx, a->h, &a->n, err);
}

static kh_status blob_read_cb(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct size_arg *a = arg;
    return kh_store_txn_read_blob(tx, a->h, a->dst, a->n, err);
}

/* Size first, then decompress straight into the Lua buffer: no Lua call
 * runs while the read transaction is open, so nothing can raise out of it. */
static int l_get_blob(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    kh_hash h;
    check_hash(L, 2, &h);
    kh_err err;
    struct size_arg a = {&h, 0, NULL};
    if (kh_store_view(u->s, blob_size_cb, &a, &err))
        return kh_lua_fail(L, &err);
    luaL_Buffer b;
    a.dst = luaL_buffinitsize(L, &b, a.n ? a.n : 1);
    if (kh_store_view(u->s, blob_read_cb, &a, &err))
        return kh_lua_fail(L, &err);
    luaL_pushresultsize(&b, a.n);
    return 1;
}

static kh_status has_cb(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct size_arg *a = arg;
    int has = 0;
    kh_status st = kh_store_txn_has_blob(tx, a->h, &has, err);
    a->n = (size_t)has;
    return st;
}

static int l_has_blob(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    kh_hash h;
    check_hash(L, 2, &h);
    kh_err err;
    struct size_arg a = {&h, 0, NULL};
    if (kh_store_view(u->s, has_cb, &a, &err))
        return kh_lua_fail(L, &err);
    lua_pushboolean(L, a.n != 0);
    return 1;
}

static int l_put(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    int flags = put_flags(L, 3);
    luaL_checktype(L, 2, LUA_TTABLE);
    refuse_owned(L, 2, "db:put");
    json_t *rec = check_record(L, 2);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st = kh_store_put(u->s, rec, flags, id, &err);
    json_decref(rec);
    if (st)
        return kh_lua_fail(L, &err);
    lua_pushstring(L, id);
    return 1;
}

/* list of record tables -> a JSON array holding n objects (raises on a
 * non-table or a value JSON cannot hold, with nothing leaked) */
static json_t *check_records(lua_State *L, int idx, lua_Integer n)
{
    json_t *arr = json_array();
    if (!arr)
        luaL_error(L, "out of memory");
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i); /* [.., rec]: raw, so no metamethod can raise past arr */
        kh_err err;
        json_t *j = lua_istable(L, -1) ? kh_lua_to_json(L, lua_gettop(L), &err) : NULL;
        if (!lua_istable(L, -1))
            snprintf(err.msg, sizeof err.msg, "record %lld is a %s, not a table", (long long)i,
                     luaL_typename(L, -1));
        lua_pop(L, 1);
        if (j && json_array_append_new(arr, j)) /* it took j either way */
            snprintf(err.msg, sizeof err.msg, "out of memory");
        else if (j)
            continue;
        json_decref(arr);
        luaL_argerror(L, idx, err.msg);
    }
    return arr;
}

static int push_ids(lua_State *L, char (*ids)[KH_STORE_ID_MAX], size_t n)
{
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, ids[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* db:put_many(list [, opts]) / tx:put_many: the records in one transaction
 * (all or none); returns the list of their ids */
static int put_many(lua_State *L, kh_store *s, kh_store_txn *tx)
{
    int flags = put_flags(L, 3);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    /* scratch as userdata: the collector frees it whatever raises later */
    lua_Integer ln = (lua_Integer)lua_rawlen(L, 2);
    luaL_argcheck(L, ln >= 0 && ln <= (1 << 24), 2, "too many records");
    for (lua_Integer i = 1; i <= ln; i++) {
        if (lua_rawgeti(L, 2, i) == LUA_TTABLE)
            refuse_owned(L, lua_gettop(L), tx ? "tx:put_many" : "db:put_many");
        lua_pop(L, 1);
    }
    size_t cap = ln ? (size_t)ln : 1;
    json_t **recs = lua_newuserdatauv(L, cap * sizeof *recs, 0);            /* [.., 3] */
    char(*ids)[KH_STORE_ID_MAX] = lua_newuserdatauv(L, cap * sizeof *ids, 0); /* [.., 4] */
    json_t *arr = check_records(L, 2, ln);
    size_t n = json_array_size(arr);
    for (size_t i = 0; i < n; i++)
        recs[i] = json_array_get(arr, i);
    kh_err err;
    kh_status st = tx ? kh_store_txn_put_many(tx, recs, n, flags, ids, &err)
                      : kh_store_put_records(s, recs, n, flags, ids, &err);
    json_decref(arr);
    if (st)
        return kh_lua_fail(L, &err);
    return push_ids(L, ids, n);
}

static int l_put_many(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    return put_many(L, u->s, NULL);
}

/* db:bulk(fn): fn(db) runs with every commit unsynced, then one sync */
static int l_bulk(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    if (kh_store_in_bulk(u->s))
        return luaL_error(L, "kh.Store: db:bulk inside another db:bulk");
    lua_settop(L, 2);
    kh_err err;
    if (kh_store_bulk_begin(u->s, &err))
        return kh_lua_fail(L, &err);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 1);
    int rs = lua_pcall(L, 1, LUA_MULTRET, 0);
    /* fn may have closed the store (close ends the bulk, syncing) */
    kh_status st = u->s && kh_store_in_bulk(u->s) ? kh_store_bulk_end(u->s, &err) : KH_OK;
    if (rs != LUA_OK)
        return lua_error(L); /* what fn committed is synced; re-raise its error */
    if (st)
        return kh_lua_fail(L, &err);
    int nres = lua_gettop(L) - 2;
    if (nres == 0 || lua_isnil(L, 3)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    return nres;
}

static int l_get(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    const char *id = luaL_checkstring(L, 2);
    json_t *rec;
    kh_err err;
    if (kh_store_get(u->s, id, &rec, &err))
        return kh_lua_fail(L, &err);
    push_json_owned(L, rec);
    return 1;
}

static int l_query(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    kh_store_filter q;
    check_filter(L, 2, &q);
    json_t *arr;
    kh_err err;
    if (kh_store_query(u->s, &q, 0, &arr, &err))
        return kh_lua_fail(L, &err);
    push_json_owned(L, arr);
    return 1;
}

/* db:new_id(type) -> an id of that type, for a record written later (a run
 * whose guard needs its id first) */
static int l_new_id(lua_State *L)
{
    l_store *u = check_store(L, 1);
    const char *type = luaL_checkstring(L, 2);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    if (kh_store_new_id(u->s, type, id, &err))
        return luaL_argerror(L, 2, err.msg);
    lua_pushstring(L, id);
    return 1;
}

static int l_stats(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    json_t *j;
    kh_err err;
    if (kh_store_stats(u->s, &j, &err))
        return kh_lua_fail(L, &err);
    push_json_owned(L, j);
    return 1;
}

static int l_verify(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    json_t *j;
    kh_err err;
    if (kh_store_verify(u->s, &j, &err))
        return kh_lua_fail(L, &err);
    push_json_owned(L, j);
    return 1;
}

static int l_gc(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    lua_Number grace = luaL_optnumber(L, 2, 3600);
    json_t *j;
    kh_err err;
    if (kh_store_gc(u->s, grace, &j, &err))
        return kh_lua_fail(L, &err);
    push_json_owned(L, j);
    return 1;
}

static int l_backup(lua_State *L)
{
    l_store *u = check_store_idle(L, 1);
    const char *dest = luaL_checkstring(L, 2);
    kh_err err;
    if (kh_store_backup(u->s, dest, &err))
        return kh_lua_fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- scoped transactions -------------------------------------------------------------- */
struct scope {
    lua_State *L;
    int fn, txu; /* stack slots of the function and the kh.StoreTxn */
    int lua_status;
    int base; /* top before the call: results are above */
};

static kh_status scope_cb(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct scope *sc = arg;
    lua_State *L = sc->L;
    l_txn *t = lua_touserdata(L, sc->txu);
    t->tx = tx;
    /* only pushes (stack checked by the caller) until the protected call */
    sc->base = lua_gettop(L);
    lua_pushvalue(L, sc->fn);
    lua_pushvalue(L, sc->txu);
    sc->lua_status = lua_pcall(L, 1, LUA_MULTRET, 0);
    t->tx = NULL;
    if (sc->lua_status != LUA_OK)
        return kh_err_set(err, KH_EINTR, "the transaction function raised an error");
    return kh_store_txn_status(tx, err);
}

static int run_scope(lua_State *L, int write)
{
    l_store *u = check_store(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    if (kh_store_in_txn(u->s))
        return luaL_error(L, "kh.Store: db:%s inside another db:update/db:view (use the tx "
                             "you have)",
                          write ? "update" : "view");
    lua_settop(L, 2);
    luaL_checkstack(L, 8, NULL);
    /* the txn userdata, created before the scope opens (allocation may raise);
     * its user value anchors the strings given to tx:put_blob */
    l_txn *t = lua_newuserdatauv(L, sizeof *t, 1);
    t->tx = NULL;
    t->write = write;
    luaL_setmetatable(L, TXN_MT);
    lua_newtable(L);
    lua_setiuservalue(L, -2, 1);
    struct scope sc = {L, 2, 3, LUA_OK, 0};
    kh_err err;
    kh_status st = write ? kh_store_update(u->s, scope_cb, &sc, &err)
                         : kh_store_view(u->s, scope_cb, &sc, &err);
    if (sc.lua_status != LUA_OK)
        return lua_error(L); /* the transaction was aborted; re-raise fn's error */
    if (st)
        return kh_lua_fail(L, &err);
    int nres = lua_gettop(L) - sc.base;
    if (nres == 0 || lua_isnil(L, sc.base + 1)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    return nres;
}

static int l_update(lua_State *L) { return run_scope(L, 1); }
static int l_view(lua_State *L) { return run_scope(L, 0); }

static int t_put(lua_State *L)
{
    l_txn *t = check_txn(L, 1);
    int flags = put_flags(L, 3);
    luaL_checktype(L, 2, LUA_TTABLE);
    refuse_owned(L, 2, "tx:put");
    json_t *rec = check_record(L, 2);
    char id[KH_STORE_ID_MAX];
    kh_err err;
    kh_status st = kh_store_txn_put(t->tx, rec, flags, id, &err);
    json_decref(rec);
    if (st)
        return kh_lua_fail(L, &err);
    lua_pushstring(L, id);
    return 1;
}

static int t_put_many(lua_State *L)
{
    l_txn *t = check_txn(L, 1);
    return put_many(L, NULL, t->tx);
}

static int t_put_blob(lua_State *L)
{
    l_txn *t = check_txn(L, 1);
    size_t n;
    const char *data = luaL_checklstring(L, 2, &n);
    /* anchor the string: a map growth replays the write from these bytes */
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, 2);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    lua_pop(L, 1);
    kh_hash h;
    kh_err err;
    if (kh_store_txn_put_blob(t->tx, data, n, &h, &err))
        return kh_lua_fail(L, &err);
    return push_hash(L, &h);
}

/* The candidate a Solution table carries (candidate.h), in a userdata that
 * frees it when collected: anchored in a transaction, its bytes outlive the
 * update (a map growth replays the blob writes from them). */
#define CAND_MT "kh.Candidate"

static int cand_gc(lua_State *L)
{
    kh_candidate_free(luaL_checkudata(L, 1, CAND_MT));
    return 0;
}

static kh_candidate *push_candidate(lua_State *L, int idx)
{
    kh_err err;
    json_t *j = kh_lua_to_json(L, idx, &err);
    if (!j)
        luaL_error(L, "a candidate must be a Solution table: %s", err.msg);
    kh_candidate *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    if (luaL_newmetatable(L, CAND_MT)) {
        lua_pushcfunction(L, cand_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    kh_status st = kh_candidate_of(j, c, &err);
    json_decref(j);
    if (st)
        luaL_error(L, "not a candidate: %s", err.msg);
    return c;
}

/* tx:put_candidate(solution, task_id) -> id: the candidate's record (one
 * identity, one writer: candidate.h), put unless it is there. */
static int t_put_candidate(lua_State *L)
{
    l_txn *t = check_txn(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *task = luaL_checkstring(L, 3);
    kh_candidate *c = push_candidate(L, 2);
    lua_getiuservalue(L, 1, 1); /* anchor it for the rest of the update */
    lua_pushvalue(L, -2);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    lua_pop(L, 1);
    kh_err err;
    if (kh_candidate_put(t->tx, c, task, &err))
        return kh_lua_fail(L, &err);
    lua_pushstring(L, c->id);
    return 1;
}

/* kh.store.candidate_id(solution) -> the id its candidate record has, or
 * would have (candidate.h) */
static int l_candidate_id(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    kh_candidate *c = push_candidate(L, 1);
    lua_pushstring(L, c->id);
    return 1;
}

static int t_get(lua_State *L)
{
    l_txn *t = check_txn(L, 1);
    const char *id = luaL_checkstring(L, 2);
    json_t *rec;
    kh_err err;
    if (kh_store_txn_get(t->tx, id, &rec, &err))
        return kh_lua_fail(L, &err);
    push_json_owned(L, rec);
    return 1;
}

static int t_get_blob(lua_State *L)
{
    l_txn *t = check_txn(L, 1);
    kh_hash h;
    check_hash(L, 2, &h);
    size_t n;
    kh_err err;
    if (kh_store_txn_blob_size(t->tx, &h, &n, &err))
        return kh_lua_fail(L, &err);
    luaL_Buffer b;
    char *dst = luaL_buffinitsize(L, &b, n ? n : 1);
    if (kh_store_txn_read_blob(t->tx, &h, dst, n, &err))
        return kh_lua_fail(L, &err);
    luaL_pushresultsize(&b, n);
    return 1;
}

static int t_has_blob(lua_State *L)
{
    l_txn *t = check_txn(L, 1);
    kh_hash h;
    check_hash(L, 2, &h);
    int has = 0;
    kh_err err;
    if (kh_store_txn_has_blob(t->tx, &h, &has, &err))
        return kh_lua_fail(L, &err);
    lua_pushboolean(L, has);
    return 1;
}

static int t_query(lua_State *L)
{
    l_txn *t = check_txn(L, 1);
    kh_store_filter q;
    check_filter(L, 2, &q);
    json_t *arr;
    kh_err err;
    if (kh_store_txn_query(t->tx, &q, 0, &arr, &err))
        return kh_lua_fail(L, &err);
    push_json_owned(L, arr);
    return 1;
}

static int t_tostring(lua_State *L)
{
    l_txn *t = luaL_checkudata(L, 1, TXN_MT);
    lua_pushfstring(L, "kh.StoreTxn (%s%s)", t->write ? "update" : "view",
                    t->tx ? "" : ", ended");
    return 1;
}

/* ---- kh.store.hash ---------------------------------------------------------------------- */
/* kh.store.hash(bytes) -> the content hash a blob of these bytes gets. */
static int l_hash(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    kh_hash h;
    kh_hash_bytes(s, n, &h);
    return push_hash(L, &h);
}

void kh_lua_txn_add_methods(lua_State *L, const luaL_Reg *fns)
{
    if (luaL_getmetatable(L, TXN_MT) != LUA_TTABLE)
        luaL_error(L, "kh.StoreTxn's methods: kh.store is not open yet");
    lua_getfield(L, -1, "__index");
    luaL_setfuncs(L, fns, 0);
    lua_pop(L, 2);
}

void kh_open_store(lua_State *L, kh_engine *e)
{
    static const luaL_Reg store_methods[] = {
        {"close", l_close},     {"path", l_path},       {"put_blob", l_put_blob},
        {"get_blob", l_get_blob}, {"has_blob", l_has_blob}, {"put", l_put},
        {"get", l_get},         {"query", l_query},     {"update", l_update},
        {"view", l_view},       {"stats", l_stats},     {"verify", l_verify},
        {"gc", l_gc},           {"backup", l_backup},   {"put_many", l_put_many},
        {"bulk", l_bulk},       {"new_id", l_new_id},   {NULL, NULL},
    };
    if (luaL_newmetatable(L, STORE_MT)) {
        luaL_newlib(L, store_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_close);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, l_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    static const luaL_Reg txn_methods[] = {
        {"put", t_put},   {"put_blob", t_put_blob}, {"get", t_get}, {"get_blob", t_get_blob},
        {"has_blob", t_has_blob}, {"query", t_query}, {"put_many", t_put_many},
        {"put_candidate", t_put_candidate}, {NULL, NULL},
    };
    if (luaL_newmetatable(L, TXN_MT)) {
        luaL_newlib(L, txn_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, t_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"open", l_open}, {"hash", l_hash}, {"candidate_id", l_candidate_id}, {NULL, NULL}};
    kh_lua_newlib(L, e, fns);
}
