/* cmd_compare.c: `khlua compare RUN_A RUN_B ...`, a thin alias for the Lua
 * script policies/compare.lua (the logic is lib/report.lua).  It finds the
 * script next to the executable (../policies, ../share/khlua/policies) or in
 * the source tree the binary was built from, and runs it in a child khlua
 * with the same store, so the script gets a fresh Lua state and the usual
 * shutdown order; the child's exit status is the command's. */
#include "kh_lua.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* The script's path into buf (size n); 0 if none was found. */
static int find_script(char *buf, size_t n)
{
    char dir[PATH_MAX];
    if (!kh_policies_dir(dir, sizeof dir))
        return 0;
    int w = snprintf(buf, n, "%s/compare.lua", dir);
    return w > 0 && (size_t)w < n;
}

int kh_cmd_compare(kh_engine *e, int argc, char **argv)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len < 0) {
        fprintf(stderr, "khlua compare: cannot find the khlua executable: %s\n", strerror(errno));
        return 1;
    }
    exe[len] = '\0';
    char script[PATH_MAX];
    if (!find_script(script, sizeof script)) {
        fprintf(stderr, "khlua compare: policies/compare.lua not found next to %s nor in %s\n",
                exe, KH_SOURCE_DIR);
        return 1;
    }
    /* khlua --store PATH SCRIPT ARGS... NULL */
    char **av = calloc((size_t)argc + 5, sizeof *av);
    if (!av) {
        fprintf(stderr, "khlua compare: out of memory\n");
        return 1;
    }
    int k = 0;
    av[k++] = exe;
    const char *store = kh_engine_store_path(e);
    if (store) {
        av[k++] = "--store";
        av[k++] = (char *)store;
    }
    av[k++] = script;
    for (int i = 1; i < argc; i++)
        av[k++] = argv[i];
    av[k] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "khlua compare: fork: %s\n", strerror(errno));
        free(av);
        return 1;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        execv(exe, av);
        fprintf(stderr, "khlua compare: exec %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    free(av);
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "khlua compare: waitpid: %s\n", strerror(errno));
            return 1;
        }
    }
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGINT)
        return 130;
    fprintf(stderr, "khlua compare: the script died of signal %d\n",
            WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return 1;
}
