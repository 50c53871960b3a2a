/* l_compile.h: kh.compile: NVRTC and host compiles (l_compile.c). */
#ifndef KH_L_COMPILE_H
#define KH_L_COMPILE_H

#include "kh_lua.h"

/* Push the kh.compile table. */
void kh_open_compile(lua_State *L, kh_engine *e);

#endif
