/* cli.h: what the command-line commands (cmd_<name>.c) share.  The front end
 * holds no Lua and does no engine work of its own: each command parses its
 * options, calls the engine (or, for `khlua compare`, runs a policy script
 * through bindings/kh_run.h) and prints.  Exit codes: 0 ok, 1 failed or
 * problems found, 2 usage error, 130 interrupted. */
#ifndef KH_CLI_H
#define KH_CLI_H

/* True if argv holds -h or --help before any "--" (commands print their
 * usage and exit 0). */
int kh_cli_wants_help(int argc, char **argv);

#endif
