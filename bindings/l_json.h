/* l_json.h: kh.json, and JSON <-> Lua for the other bindings (l_json.c). */
#ifndef KH_L_JSON_H
#define KH_L_JSON_H

#include "kh_lua.h"

/* Push a Lua value for j: objects and arrays become tables marked with the
 * kh.json.object / kh.json.array metatables (so {} and [] survive a round
 * trip), null becomes kh.json.null, integers stay integers. */
void kh_lua_push_json(lua_State *L, const json_t *j);
/* Convert the value at idx; NULL with a message in err on values JSON cannot
 * hold (functions, NaN, invalid UTF-8, mixed or sparse tables, cycles). */
json_t *kh_lua_to_json(lua_State *L, int idx, kh_err *err);

/* Push the kh.json table. */
void kh_open_json(lua_State *L, kh_engine *e);

#endif
