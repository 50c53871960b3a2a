/* l_kh.h: the `kh` module itself (l_kh.c), the table `require "kh"` gives. */
#ifndef KH_L_KH_H
#define KH_L_KH_H

#include "kh_lua.h"

/* package.preload.kh: pushes the kh table; expects the engine as upvalue 1. */
int kh_luaopen_kh(lua_State *L);

#endif
