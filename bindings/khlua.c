/* khlua.c: main.  Parses the global options, then either dispatches a built-in
 * command (`khlua doctor`, ...) or runs a Lua script with `kh` available, the
 * way lua.c does: `arg` set, every call protected with a traceback, Ctrl-C
 * turned into a clean stop (exit 130) by a hook a script's pcall cannot
 * swallow.  Owns process start and shutdown order: lua_close first (every
 * __gc runs), then the engine. */
#include "kh_lua.h"
#include "worker/jail.h"

#include <curl/curl.h>
#include <lmdb.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "khlua"
#define EXIT_INTERRUPTED 130

static const kh_command commands[] = {
    {"doctor", "what this machine offers and what is missing", kh_cmd_doctor},
    {"llm", "ask a model (OpenAI, Anthropic, compatible servers, agent CLIs, replay)", kh_cmd_llm},
    {"worker", "a worker process (started by khlua itself)", kh_cmd_worker},
    {"task", "check task files, packages and FlashInfer-Bench datasets", kh_cmd_task},
    {"compile", "compile a CUDA file with NVRTC and show its kernels' resources", kh_cmd_compile},
    {"store", "the artifact store: ls, show, cat, stats, verify, export, import, gc, backup",
     kh_cmd_store},
    {"profile", "profiler metrics and the bottleneck state of a launch list", kh_cmd_profile},
    {"eval", "evaluate a solution on a task's workloads: verdicts, checks, timing", kh_cmd_eval},
    {"compare", "compare recorded runs: tables (markdown, CSV, JSON), SVG chart, HTML", kh_cmd_compare},
    {"best", "a run's best kernel out of the store: Solution JSON, source, figures", kh_cmd_best},
    {"export", "a solution as FlashInfer-Bench runs it: Solution JSON, kernels, TVM-FFI entry",
     kh_cmd_export},
};

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

/* ---- usage ------------------------------------------------------------------ */
static void print_usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [options] SCRIPT.lua [args...]\n"
            "       " PROG " [options] -e CODE [SCRIPT.lua [args...]]\n"
            "       " PROG " [options] COMMAND [command options]   (COMMAND --help for more)\n"
            "\n"
            "khlua is a harness for LLM-driven GPU kernel search: a C engine (NVRTC compile,\n"
            "correctness gate, CUPTI timing, profiles, LMDB store, model client) under\n"
            "Lua search policies.  Scripts get the engine with `local kh = require \"kh\"`.\n"
            "\n"
            "options:\n"
            "  -e CODE         run CODE (before SCRIPT, if one is given)\n"
            "  --store PATH    the artifact store (default $KHLUA_STORE, else .khlua/store)\n"
            "  -v, --version   print the versions of khlua and its libraries\n"
            "  -h, --help      this help\n"
            "  -               read the script from standard input\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < KH_ARRAY_LEN(commands); i++)
        fprintf(f, "  %-14s  %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit codes: 0 ok, 1 error, 2 usage, 130 interrupted (Ctrl-C; a script also\n"
               "stops cleanly on SIGTERM, 143, and SIGHUP, 129)\n");
}

static void print_version(kh_engine *e)
{
    const kh_nvrtc_api *nv = kh_engine_nvrtc(e, NULL);
    char nvs[64];
    if (nv)
        snprintf(nvs, sizeof nvs, "%d.%d", nv->major, nv->minor);
    else
        snprintf(nvs, sizeof nvs, "not found");
    printf(PROG " %s (%s)\n", KH_VERSION, KH_GIT_REV);
    printf("  %s\n", LUA_RELEASE);
    printf("  %s\n", mdb_version(NULL, NULL, NULL));
    printf("  libcurl %s\n", curl_version_info(CURLVERSION_NOW)->version);
    printf("  jansson %s\n", jansson_version_str());
    printf("  NVRTC %s\n", nvs);
}

int kh_cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return 1;
    }
    return 0;
}

/* ---- running a script ------------------------------------------------------- */
static int open_kh(lua_State *L)
{
    /* package.preload.kh, closed over the engine */
    return kh_luaopen_kh(L);
}

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
    lua_pushcclosure(L, open_kh, 1);
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

static int run_lua(kh_engine *e, int argc, char **argv, int script, const char *code)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, PROG ": cannot create the Lua state: out of memory\n");
        return 1;
    }
    g_L = L;
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
    if (kh_engine_stop_requested(e))
        return g_stop_signal ? 128 + g_stop_signal : EXIT_INTERRUPTED;
    return ok ? 0 : 1;
}

static int on_sigint_cmd_installed;
static void on_sigint_cmd(int sig)
{
    signal(sig, SIG_DFL);
    if (g_engine)
        kh_engine_request_stop(g_engine);
}

int main(int argc, char **argv)
{
    /* the host worker's jail for a candidate (engine/worker/jail.h): before
     * anything else, so it holds nothing but what the warden gave it */
    if (argc == 2 && !strcmp(argv[1], "__host-jail"))
        return kh_jail_main();
    const char *store = NULL, *code = NULL;
    int i = 1;
    /* Global options come before the script or command. */
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-e")) {
            if (i + 1 >= argc) {
                fprintf(stderr, PROG ": -e needs an argument\n");
                return 2;
            }
            code = argv[++i];
        } else if (!strcmp(a, "--store") || !strncmp(a, "--store=", 8)) {
            if (a[7] == '=') {
                store = a + 8;
            } else if (i + 1 < argc) {
                store = argv[++i];
            } else {
                fprintf(stderr, PROG ": --store needs a path\n");
                return 2;
            }
        } else if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (a[0] == '-' && a[1] && strcmp(a, "-v") && strcmp(a, "--version")) {
            fprintf(stderr, PROG ": unknown option '%s' (see " PROG " --help)\n", a);
            return 2;
        } else {
            break;
        }
    }

    kh_err err;
    kh_engine_config cfg = {.store_path = store, .cuda_home = NULL};
    kh_engine *e = kh_engine_new(&cfg, &err);
    if (!e) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }
    g_engine = e;
    curl_global_init(CURL_GLOBAL_DEFAULT);

    int rc;
    if (i < argc && (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--version"))) {
        print_version(e);
        rc = 0;
    } else if (i >= argc && !code) {
        print_usage(stderr);
        rc = 2;
    } else {
        const kh_command *cmd = NULL;
        if (i < argc && !code)
            for (size_t k = 0; k < KH_ARRAY_LEN(commands); k++)
                if (!strcmp(argv[i], commands[k].name))
                    cmd = &commands[k];
        if (cmd) {
            if (!on_sigint_cmd_installed) {
                signal(SIGINT, on_sigint_cmd);
                on_sigint_cmd_installed = 1;
            }
            rc = cmd->run(e, argc - i, argv + i);
            if (kh_engine_stop_requested(e))
                rc = EXIT_INTERRUPTED;
        } else if (i < argc && !code && strcmp(argv[i], "-") &&
                   !strstr(argv[i], ".lua") && !strchr(argv[i], '/')) {
            fprintf(stderr, PROG ": '%s' is neither a command nor a Lua script "
                            "(see " PROG " --help)\n", argv[i]);
            rc = 2;
        } else {
            rc = run_lua(e, argc, argv, i, code);
        }
    }
    g_engine = NULL;
    curl_global_cleanup();
    kh_engine_free(e);
    return rc;
}
