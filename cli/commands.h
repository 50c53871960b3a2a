/* commands.h: the built-in commands of `khlua COMMAND ...` (khlua.c's main
 * dispatches here).  Each kh_cmd_<name> is defined in cmd_<name>.c; the table
 * that names them and says what each does is commands.c's. */
#ifndef KH_COMMANDS_H
#define KH_COMMANDS_H

#include "core/engine.h"

#include <stdio.h>

typedef struct kh_command {
    const char *name;
    const char *summary;
    /* argv[0] is the command name; returns the process exit code
     * (0 ok, 1 failed or problems found, 2 usage error, 130 interrupted). */
    int (*run)(kh_engine *e, int argc, char **argv);
} kh_command;

/* The command called name, or NULL when there is none. */
const kh_command *kh_cli_command(const char *name);
/* One line per command ("  name  summary") for the usage text. */
void kh_cli_print_commands(FILE *f);

int kh_cmd_doctor(kh_engine *e, int argc, char **argv);
int kh_cmd_llm(kh_engine *e, int argc, char **argv);
int kh_cmd_worker(kh_engine *e, int argc, char **argv);
int kh_cmd_task(kh_engine *e, int argc, char **argv);
int kh_cmd_task_new(int argc, char **argv); /* `khlua task new` (cmd_task_new.c) */
int kh_cmd_compile(kh_engine *e, int argc, char **argv);
int kh_cmd_store(kh_engine *e, int argc, char **argv);
int kh_cmd_profile(kh_engine *e, int argc, char **argv);
int kh_cmd_eval(kh_engine *e, int argc, char **argv);
struct kh_eval_opts;
/* `khlua eval --incumbent B` (cmd_eval_paired.c): the paired comparison;
 * reps 0: the engine's default. */
int kh_cmd_eval_paired(kh_engine *e, const char *task, const char *sol, const char *inc,
                       const struct kh_eval_opts *o, int reps, int as_json);
/* A Solution file named on the command line, checked as `task check` would
 * (its first error on stderr after "khlua eval: what"): 1 checked, 0 not a
 * file (a name), -1 errors. */
int kh_cmd_eval_check_file(const char *arg, const char *what);
int kh_cmd_compare(kh_engine *e, int argc, char **argv);
int kh_cmd_best(kh_engine *e, int argc, char **argv);
int kh_cmd_export(kh_engine *e, int argc, char **argv);

#endif
