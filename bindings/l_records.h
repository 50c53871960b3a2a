/* l_records.h: the engine's record writers as methods of every kh.StoreTxn
 * (l_records.c): tx:put_task, tx:put_run, tx:update_run, tx:put_round,
 * tx:put_promotion, tx:put_llm_call, tx:put_evaluation. */
#ifndef KH_L_RECORDS_H
#define KH_L_RECORDS_H

#include "kh_lua.h"

/* Add the writers to kh.StoreTxn's methods; after kh_open_store (l_kh.c). */
void kh_open_records(lua_State *L);

#endif
