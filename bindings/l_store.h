/* l_store.h: kh.store, and kh.Store userdata for the other bindings
 * (l_store.c). */
#ifndef KH_L_STORE_H
#define KH_L_STORE_H

#include "kh_lua.h"

struct kh_store;
/* The store of the kh.Store at idx; raises on another type or a closed store.
 * The pointer is valid while that userdata stays open: code that keeps it
 * across Lua calls must look again (kh_lua_to_store) before each use. */
struct kh_store *kh_lua_check_store(lua_State *L, int idx);
/* The same without raising: NULL when idx is not an open kh.Store. */
struct kh_store *kh_lua_to_store(lua_State *L, int idx);
/* The open kh.Store at idx for one call made outside its transactions;
 * raises on a wrong type, a closed store, or inside db:update/db:view. */
struct kh_store *kh_lua_check_store_idle(lua_State *L, int idx);

struct kh_store_txn;
/* The transaction of the kh.StoreTxn at idx; raises outside its
 * db:update / db:view scope. */
struct kh_store_txn *kh_lua_check_txn(lua_State *L, int idx);
/* Add fns to the methods of every kh.StoreTxn: how a binding that writes
 * through a transaction (l_records.c's record writers) offers tx: methods
 * without l_store.c depending on it.  After kh_open_store. */
void kh_lua_txn_add_methods(lua_State *L, const luaL_Reg *fns);

/* Push the kh.store table. */
void kh_open_store(lua_State *L, kh_engine *e);

#endif
