/* khlua.c: main.  Parses the global options, then either dispatches a built-in
 * command (`khlua doctor`, ...: the front end, cli/commands.h) or runs a Lua
 * script with `kh` available (kh_run.h: the way lua.c does, Ctrl-C a clean
 * stop).  Owns process start and shutdown order: the Lua state is closed
 * first (every __gc runs), then the engine. */
#include "commands.h"
#include "kh_run.h"

#include "worker/jail.h"

#include <curl/curl.h>
#include <jansson.h>
#include <lmdb.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "khlua"
#define EXIT_INTERRUPTED 130

static kh_engine *g_engine;

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
    kh_cli_print_commands(f);
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
    kh_timeline("main %s", argc > 1 ? argv[1] : "");
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
        const kh_command *cmd = i < argc && !code ? kh_cli_command(argv[i]) : NULL;
        if (cmd) {
            if (!on_sigint_cmd_installed) {
                signal(SIGINT, on_sigint_cmd);
                on_sigint_cmd_installed = 1;
            }
            rc = cmd->run(e, argc - i, argv + i);
            /* a command that ran a script (compare) already says which signal */
            if (kh_engine_stop_requested(e) && rc < 128)
                rc = EXIT_INTERRUPTED;
        } else if (i < argc && !code && strcmp(argv[i], "-") &&
                   !strstr(argv[i], ".lua") && !strchr(argv[i], '/')) {
            fprintf(stderr, PROG ": '%s' is neither a command nor a Lua script "
                            "(see " PROG " --help)\n", argv[i]);
            rc = 2;
        } else {
            rc = kh_run_lua(e, argc, argv, i, code);
        }
    }
    g_engine = NULL;
    curl_global_cleanup();
    kh_engine_free(e);
    return rc;
}
