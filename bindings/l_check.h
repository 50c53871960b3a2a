/* l_check.h: kh.check: output comparison (l_check.c). */
#ifndef KH_L_CHECK_H
#define KH_L_CHECK_H

#include "kh_lua.h"

/* Push the kh.check table. */
void kh_open_check(lua_State *L, kh_engine *e);

#endif
