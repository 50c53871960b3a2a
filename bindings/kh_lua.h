/* kh_lua.h: the narrow header in front of all Lua glue.  Every binding file
 * (l_<module>.c) and the CLI commands (cmd_<name>.c) include this and nothing
 * else from the other binding files.
 *
 * Conventions (STYLE.md, "Errors, in three tiers"):
 *   misuse (wrong type, closed handle)      -> raise (luaL_argerror / luaL_error)
 *   could not run (file missing, no GPU)    -> return nil, msg, code  (kh_lua_fail)
 *   a domain verdict                        -> a plain value (a table with status)
 * Every binding gets the engine as upvalue 1 (kh_lua_newlib arranges that). */
#ifndef KH_LUA_H
#define KH_LUA_H

#include "core/engine.h"

#include <jansson.h>
#include <lauxlib.h>
#include <lua.h>

/* The engine of a binding created by kh_lua_newlib (upvalue 1). */
kh_engine *kh_lua_engine(lua_State *L);

/* Push a new table holding fns, each closed over the engine. */
void kh_lua_newlib(lua_State *L, kh_engine *e, const luaL_Reg *fns);

/* This Lua state's one engine object of a kind (a compiler, an evaluator),
 * kept in the registry under key and freed by destroy when the state closes.
 * create makes it on first use; when it fails, this raises with its message.
 * The pointer stays valid until lua_close. */
void *kh_lua_singleton(lua_State *L, const void *key,
                       void *(*create)(kh_engine *e, kh_err *err), void (*destroy)(void *obj));

/* Push nil, err->msg, kh_status_name(err->code); return 3. */
int kh_lua_fail(lua_State *L, const kh_err *err);

/* ---- JSON <-> Lua (l_json.c) -------------------------------------------- */
/* Push a Lua value for j: objects and arrays become tables marked with the
 * kh.json.object / kh.json.array metatables (so {} and [] survive a round
 * trip), null becomes kh.json.null, integers stay integers. */
void kh_lua_push_json(lua_State *L, const json_t *j);
/* Convert the value at idx; NULL with a message in err on values JSON cannot
 * hold (functions, NaN, invalid UTF-8, mixed or sparse tables, cycles). */
json_t *kh_lua_to_json(lua_State *L, int idx, kh_err *err);

/* ---- tensors (l_tensor.c) ------------------------------------------------ */
struct kh_tensor;
/* Push a kh.Tensor userdata owning t (freed by its close); counts itself as
 * an engine object.  Raises only when Lua is out of memory (t then leaks). */
void kh_lua_push_tensor(lua_State *L, kh_engine *e, struct kh_tensor *t);
/* The open tensor at idx; raises on a wrong type or a closed tensor.  The
 * pointer stays valid while the userdata is open and reachable. */
struct kh_tensor *kh_lua_check_tensor(lua_State *L, int idx);

/* ---- stores (l_store.c) --------------------------------------------------- */
struct kh_store;
/* The store of the kh.Store at idx; raises on another type or a closed store.
 * The pointer is valid while that userdata stays open: code that keeps it
 * across Lua calls must look again (kh_lua_to_store) before each use. */
struct kh_store *kh_lua_check_store(lua_State *L, int idx);
/* The same without raising: NULL when idx is not an open kh.Store. */
struct kh_store *kh_lua_to_store(lua_State *L, int idx);
/* The open kh.Store at idx for one call made outside its transactions;
 * raises on a wrong type, a closed store, or inside db:update/db:view. */
struct kh_store *kh_lua_check_store_idle(lua_State *L, int idx);
/* The transaction of the kh.StoreTxn at idx; raises outside its
 * db:update / db:view scope. */
struct kh_store_txn;
struct kh_store_txn *kh_lua_check_txn(lua_State *L, int idx);
/* The engine's record writers (tx:put_run, ...), methods of every
 * kh.StoreTxn (l_records.c). */
extern const luaL_Reg kh_lua_record_methods[];
/* The task at idx when it is a kh.TaskSet (kh.task.load), else NULL; an
 * error when it is one that was closed. */
struct kh_task;
const struct kh_task *kh_lua_to_task(lua_State *L, int idx);

/* ---- modules: push the module table ------------------------------------ */
void kh_open_json(lua_State *L, kh_engine *e);
void kh_open_time(lua_State *L, kh_engine *e);
void kh_open_llm(lua_State *L, kh_engine *e);
void kh_open_task(lua_State *L, kh_engine *e);
void kh_open_tensor(lua_State *L, kh_engine *e);
void kh_open_check(lua_State *L, kh_engine *e);
void kh_open_compile(lua_State *L, kh_engine *e);
void kh_open_store(lua_State *L, kh_engine *e);
void kh_open_profile(lua_State *L, kh_engine *e);
void kh_open_eval(lua_State *L, kh_engine *e);

/* The `kh` module itself (package.preload.kh); expects the engine as upvalue. */
int kh_luaopen_kh(lua_State *L);

/* ---- CLI commands (cmd_<name>.c) ----------------------------------------- */
typedef struct kh_command {
    const char *name;
    const char *summary;
    /* argv[0] is the command name; returns the process exit code
     * (0 ok, 1 failed or problems found, 2 usage error, 130 interrupted). */
    int (*run)(kh_engine *e, int argc, char **argv);
} kh_command;

int kh_cmd_doctor(kh_engine *e, int argc, char **argv);
int kh_cmd_llm(kh_engine *e, int argc, char **argv);
int kh_cmd_worker(kh_engine *e, int argc, char **argv);
int kh_cmd_task(kh_engine *e, int argc, char **argv);
int kh_cmd_task_new(int argc, char **argv); /* `khlua task new` (cmd_task_new.c) */
int kh_cmd_compile(kh_engine *e, int argc, char **argv);
int kh_cmd_store(kh_engine *e, int argc, char **argv);
int kh_cmd_profile(kh_engine *e, int argc, char **argv);
int kh_cmd_eval(kh_engine *e, int argc, char **argv);
/* The folder of the Lua policies (policies/: next to the executable, in
 * ../share/khlua, or in the source tree it was built from) into buf; 0 if
 * none is found. */
int kh_policies_dir(char *buf, size_t n);
int kh_cmd_compare(kh_engine *e, int argc, char **argv);
int kh_cmd_best(kh_engine *e, int argc, char **argv);
int kh_cmd_export(kh_engine *e, int argc, char **argv);

/* True if argv holds -h or --help (commands print their usage and exit 0). */
int kh_cli_wants_help(int argc, char **argv);

#endif
