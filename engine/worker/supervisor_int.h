/* supervisor_int.h: what supervisor.c takes from supervisor_launch.c to start
 * a worker. */
#ifndef KH_SUPERVISOR_INT_H
#define KH_SUPERVISOR_INT_H

#include "worker/supervisor.h"

/* o->env with placeholders filled; entries whose value is empty are left
 * out; KHLUA_WIRE_NEWLINE=1 added when remote (a launcher runs the worker).
 * Free with kh_wproc_free_argv; NULL when out of memory. */
char **kh_wproc_build_env(const kh_wproc_opts *o, const char *exe, int remote);

/* o->launch (KH_LAUNCH_LOCAL when unset) split into arguments, placeholders
 * filled, {env} one argument per entry of env.  Free with
 * kh_wproc_free_argv; NULL when out of memory. */
char **kh_wproc_build_argv(const kh_wproc_opts *o, const char *exe, char *const *env);

/* Free a NULL-terminated array of malloc'ed strings (NULL: nothing). */
void kh_wproc_free_argv(char **argv);

#endif
