/* l_time.h: kh.time: the clocks policies need and a sleep Ctrl-C interrupts (l_time.c). */
#ifndef KH_L_TIME_H
#define KH_L_TIME_H

#include "kh_lua.h"

/* Push the kh.time table. */
void kh_open_time(lua_State *L, kh_engine *e);

#endif
