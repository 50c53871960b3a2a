/* l_llm.h: kh.llm: model calls, submit and poll (l_llm.c). */
#ifndef KH_L_LLM_H
#define KH_L_LLM_H

#include "kh_lua.h"

/* Push the kh.llm table. */
void kh_open_llm(lua_State *L, kh_engine *e);

#endif
