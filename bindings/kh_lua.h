/* kh_lua.h: the narrow header in front of all Lua glue: the few helpers
 * every binding file (l_<module>.c) uses, defined in kh_lua.c.  What one
 * binding offers the others is in its own l_<module>.h, so the files'
 * dependencies show in their includes and point one way (l_kh.c, which
 * assembles the `kh` table, on top; kh_lua.c at the bottom).
 *
 * Conventions (STYLE.md, "Errors, in three tiers"):
 *   misuse (wrong type, closed handle)      -> raise (luaL_argerror / luaL_error)
 *   could not run (file missing, no GPU)    -> return nil, msg, code  (kh_lua_fail)
 *   a domain verdict                        -> a plain value (a table with status)
 * Every binding gets the engine as upvalue 1 (kh_lua_newlib arranges that). */
#ifndef KH_LUA_H
#define KH_LUA_H

#include "core/engine.h"

#include <jansson.h>
#include <lauxlib.h>
#include <lua.h>

/* The engine of a binding created by kh_lua_newlib (upvalue 1). */
kh_engine *kh_lua_engine(lua_State *L);

/* Push a new table holding fns, each closed over the engine. */
void kh_lua_newlib(lua_State *L, kh_engine *e, const luaL_Reg *fns);

/* This Lua state's one engine object of a kind (a compiler, an evaluator),
 * kept in the registry under key and freed by destroy when the state closes.
 * create makes it on first use; when it fails, this raises with its message.
 * The pointer stays valid until lua_close. */
void *kh_lua_singleton(lua_State *L, const void *key,
                       void *(*create)(kh_engine *e, kh_err *err), void (*destroy)(void *obj));

/* Push nil, err->msg, kh_status_name(err->code); return 3. */
int kh_lua_fail(lua_State *L, const kh_err *err);

#endif
