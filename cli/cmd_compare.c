/* cmd_compare.c: `khlua compare RUN_A RUN_B ...`, a thin alias for the Lua
 * script policies/compare.lua (the logic is lib/report.lua).  It finds the
 * script next to the executable (../policies, ../share/khlua/policies) or in
 * the source tree the binary was built from (kh_policies_dir), and runs it in
 * this process through the bindings (kh_run.h) with this engine, so with the
 * same store, as `khlua policies/compare.lua ...` would: a fresh Lua state,
 * the usual shutdown order, the script's exit status the command's. */
#include "commands.h"
#include "kh_run.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

int kh_cmd_compare(kh_engine *e, int argc, char **argv)
{
    char dir[PATH_MAX], script[PATH_MAX + 16];
    if (!kh_policies_dir(dir, sizeof dir) ||
        snprintf(script, sizeof script, "%s/compare.lua", dir) >= (int)sizeof script) {
        fprintf(stderr, "khlua compare: policies/compare.lua not found next to the khlua "
                        "executable nor in %s\n", KH_SOURCE_DIR);
        return 1;
    }
    /* SCRIPT ARGS...: arg[0] is the script, as for `khlua SCRIPT ARGS` */
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av) {
        fprintf(stderr, "khlua compare: out of memory\n");
        return 1;
    }
    av[0] = script;
    for (int i = 1; i < argc; i++)
        av[i] = argv[i];
    fflush(stdout);
    int rc = kh_run_lua(e, argc, av, 0, NULL);
    free(av);
    return rc;
}
