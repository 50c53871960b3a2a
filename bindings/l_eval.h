/* l_eval.h: kh.eval: evaluations of a candidate on a task (l_eval.c). */
#ifndef KH_L_EVAL_H
#define KH_L_EVAL_H

#include "kh_lua.h"

/* Push the kh.eval table. */
void kh_open_eval(lua_State *L, kh_engine *e);

#endif
