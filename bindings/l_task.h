/* l_task.h: kh.task, and loaded tasks for the other bindings (l_task.c). */
#ifndef KH_L_TASK_H
#define KH_L_TASK_H

#include "kh_lua.h"

struct kh_task;
/* The task at idx when it is a kh.TaskSet (kh.task.load), else NULL; an
 * error when it is one that was closed. */
const struct kh_task *kh_lua_to_task(lua_State *L, int idx);

/* Push the kh.task table. */
void kh_open_task(lua_State *L, kh_engine *e);

#endif
