/* kh_run.h: running a Lua script with `kh` available (kh_run.c): what main
 * does for `khlua SCRIPT.lua ARGS` and `khlua -e CODE`, and what a command of
 * the front end uses to run a policy script in this process (`khlua compare`
 * runs policies/compare.lua).  No Lua types here: cli/ includes it. */
#ifndef KH_RUN_H
#define KH_RUN_H

#include "core/engine.h"

#include <stddef.h>

/* Run code (if not NULL), then the script argv[script] (if script < argc;
 * "-" reads standard input) with argv[script + 1 ..] as its arguments, in a
 * fresh Lua state whose `kh` is bound to e.  `arg` is built as lua.c builds
 * it (arg[0] the script, negative indices for what came before).  Errors
 * are printed to stderr with a traceback.  Returns the exit code: 0 ok, 1 an
 * error, 128 + the signal when SIGINT, SIGTERM or SIGHUP stopped it (130
 * when the engine was asked to stop otherwise).  The Lua state is closed
 * (every __gc has run) before it returns; a script's os.exit ends the
 * process as it would in lua.c. */
int kh_run_lua(kh_engine *e, int argc, char **argv, int script, const char *code);

/* The folder of the Lua policies (policies/: next to the executable, in
 * ../share/khlua, or in the source tree it was built from) into buf; 0 if
 * none is found. */
int kh_policies_dir(char *buf, size_t n);

#endif
