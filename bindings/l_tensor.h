/* l_tensor.h: kh.tensor, and kh.Tensor userdata for the other bindings
 * (l_tensor.c). */
#ifndef KH_L_TENSOR_H
#define KH_L_TENSOR_H

#include "kh_lua.h"

struct kh_tensor;
/* Push a kh.Tensor userdata owning t (freed by its close); counts itself as
 * an engine object.  Raises only when Lua is out of memory (t then leaks). */
void kh_lua_push_tensor(lua_State *L, kh_engine *e, struct kh_tensor *t);
/* The open tensor at idx; raises on a wrong type or a closed tensor.  The
 * pointer stays valid while the userdata is open and reachable. */
struct kh_tensor *kh_lua_check_tensor(lua_State *L, int idx);

/* Push the kh.tensor table. */
void kh_open_tensor(lua_State *L, kh_engine *e);

#endif
