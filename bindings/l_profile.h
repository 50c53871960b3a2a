/* l_profile.h: kh.profile: profiler evidence (l_profile.c). */
#ifndef KH_L_PROFILE_H
#define KH_L_PROFILE_H

#include "kh_lua.h"

/* Push the kh.profile table. */
void kh_open_profile(lua_State *L, kh_engine *e);

#endif
