/* kh_run.c: running Lua with `kh` available, the way lua.c does (kh_run.h):
 * `arg` set, khlua's policies/ on package.path, every call protected with a
 * traceback, Ctrl-C (and SIGTERM, SIGHUP) turned into a clean stop by a hook
 * a script's pcall cannot swallow, then lua_close (every __gc runs) before
 * the caller frees the engine.  main runs scripts through it, and so does
 * `khlua compare` (policies/compare.lua), in this process. */
#include "kh_run.h"

#include "kh_lua.h"
#include "l_kh.h"

#include <limits.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "khlua"
#define EXIT_INTERRUPTED 130

static lua_State *g_L;
static kh_engine *g_engine;

/* ---- Ctrl-C ----------------------------------------------------------------
 * SIGINT sets the engine's stop flag (blocking engine calls return EINTR) and
 * a one-shot hook that raises "interrupted" at the next Lua instruction, as
 * lua.c does.  One-shot, so __close and __gc handlers run normally on the way
 * out.  A script's own pcall/xpcall/coroutine.resume cannot swallow the stop:
 * their wrappers (guard_catch) re-raise any failure once a stop is requested. */
static void stop_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted");
}

static volatile sig_atomic_t g_stop_signal; /* the signal that asked a script to stop */

static void on_sigint(int sig)
{
    signal(sig, SIG_DFL); /* a second Ctrl-C kills at once */
    if (!g_stop_signal)
        g_stop_signal = sig;
    if (g_engine)
        kh_engine_request_stop(g_engine);
    if (g_L)
        lua_sethook(g_L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* Upvalue 1: the original catcher (pcall, xpcall or coroutine.resume).  Its
 * results pass through unchanged unless a stop was requested and it reports
 * a failure: then the error is raised again. */
static int guard_catch(lua_State *L)
{
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    if (g_engine && kh_engine_stop_requested(g_engine) && lua_gettop(L) >= 1 &&
        !lua_toboolean(L, 1)) {
        if (lua_gettop(L) >= 2)
            lua_pushvalue(L, 2);
        else
            lua_pushliteral(L, "interrupted");
        return lua_error(L);
    }
    return lua_gettop(L);
}

static void guard_catchers(lua_State *L)
{
    static const char *const globals[] = {"pcall", "xpcall"};
    for (size_t i = 0; i < KH_ARRAY_LEN(globals); i++) {
        lua_getglobal(L, globals[i]);
        lua_pushcclosure(L, guard_catch, 1);
        lua_setglobal(L, globals[i]);
    }
    lua_getglobal(L, "coroutine");
    lua_getfield(L, -1, "resume");
    lua_pushcclosure(L, guard_catch, 1);
    lua_setfield(L, -2, "resume");
    lua_pop(L, 1);
}

/* ---- protected calls -------------------------------------------------------- */
static int msghandler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    if (g_engine && kh_engine_stop_requested(g_engine)) {
        lua_pushstring(L, msg);
        return 1;
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Call the function below narg arguments, with the traceback handler. */
static int docall(lua_State *L, int narg, int nres)
{
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    int status = lua_pcall(L, narg, nres, base);
    lua_remove(L, base);
    return status;
}

static int report(lua_State *L, int status)
{
    if (status != LUA_OK) {
        if (g_engine && kh_engine_stop_requested(g_engine)) {
            fprintf(stderr, PROG ": interrupted\n");
        } else {
            const char *msg = lua_tostring(L, -1);
            fprintf(stderr, PROG ": %s\n", msg ? msg : "(error object is not a string)");
        }
        fflush(stderr);
        lua_pop(L, 1);
    }
    return status;
}

/* ---- policies/ ------------------------------------------------------------ */
static int readable(const char *p) { return access(p, R_OK) == 0; }

int kh_policies_dir(char *buf, size_t n)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *rel[] = {"/../policies", "/../share/khlua/policies"};
    char probe[PATH_MAX + 64];
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            for (size_t i = 0; i < KH_ARRAY_LEN(rel); i++) {
                snprintf(probe, sizeof probe, "%s%s/compare.lua", exe, rel[i]);
                int w = snprintf(buf, n, "%s%s", exe, rel[i]);
                if (w > 0 && (size_t)w < n && readable(probe))
                    return 1;
            }
        }
    }
    snprintf(probe, sizeof probe, "%s/policies/compare.lua", KH_SOURCE_DIR);
    int w = snprintf(buf, n, "%s/policies", KH_SOURCE_DIR);
    return w > 0 && (size_t)w < n && readable(probe);
}

/* ---- running a script ------------------------------------------------------- */
/* The global `arg` as lua.c builds it: arg[0] = script, arg[1..] its
 * arguments, negative indices for what came before. */
static void create_arg_table(lua_State *L, char **argv, int argc, int script)
{
    lua_createtable(L, argc - script - 1, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

struct run_args {
    int argc;
    char **argv;
    int script; /* index of the script in argv, or argc if none */
    const char *code;
};

static int pmain(lua_State *L)
{
    struct run_args *ra = lua_touserdata(L, 1);
    luaL_checkversion(L);
    luaL_openlibs(L);
    guard_catchers(L);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushlightuserdata(L, g_engine);
    lua_pushcclosure(L, kh_luaopen_kh, 1); /* closed over the engine */
    lua_setfield(L, -2, "kh");
    lua_pop(L, 2);
    create_arg_table(L, ra->argv, ra->argc, ra->script < ra->argc ? ra->script : 0);
    /* khlua's own policies/ last on the search path: a policy saved anywhere
     * can `require "lib.agent"` (a script's own folder, which the shipped
     * policies put first, still wins) */
    char pdir[4096];
    if (kh_policies_dir(pdir, sizeof pdir)) {
        lua_getglobal(L, "package");
        lua_getfield(L, -1, "path");
        lua_pushfstring(L, "%s;%s/?.lua", lua_tostring(L, -1), pdir);
        lua_setfield(L, -3, "path");
        lua_pop(L, 2);
    }

    if (ra->code) {
        if (luaL_loadbuffer(L, ra->code, strlen(ra->code), "=(command line)") != LUA_OK ||
            docall(L, 0, 0) != LUA_OK) {
            report(L, LUA_ERRRUN);
            lua_pushboolean(L, 0);
            return 1;
        }
    }
    if (ra->script < ra->argc) {
        const char *fname = ra->argv[ra->script];
        if (!strcmp(fname, "-"))
            fname = NULL; /* stdin */
        int st = luaL_loadfile(L, fname);
        if (st == LUA_OK) {
            int n = 0;
            for (int i = ra->script + 1; i < ra->argc; i++, n++)
                lua_pushstring(L, ra->argv[i]);
            st = docall(L, n, 0);
        }
        if (st != LUA_OK) {
            report(L, st);
            lua_pushboolean(L, 0);
            return 1;
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

int kh_run_lua(kh_engine *e, int argc, char **argv, int script, const char *code)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, PROG ": cannot create the Lua state: out of memory\n");
        return 1;
    }
    g_L = L;
    g_engine = e;
    /* Ctrl-C, kill (SIGTERM) and a closed terminal (SIGHUP) all stop a script
     * the same way: its __close handlers run (a policy marks its run
     * interrupted); the exit code is 128 + the signal */
    signal(SIGINT, on_sigint);
    signal(SIGTERM, on_sigint);
    signal(SIGHUP, on_sigint);
    struct run_args ra = {argc, argv, script, code};
    lua_pushcfunction(L, pmain);
    lua_pushlightuserdata(L, &ra);
    int status = lua_pcall(L, 1, 1, 0);
    int ok = status == LUA_OK && lua_toboolean(L, -1);
    if (status != LUA_OK)
        report(L, status);
    /* Shutdown: no more interruptions, then every __gc runs. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    lua_sethook(L, NULL, 0, 0);
    g_L = NULL;
    lua_close(L);
    g_engine = NULL;
    if (kh_engine_stop_requested(e))
        return g_stop_signal ? 128 + g_stop_signal : EXIT_INTERRUPTED;
    return ok ? 0 : 1;
}
