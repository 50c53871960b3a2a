/* cmd_worker.c: `khlua worker --role R`, the entry point of every worker
 * process.  Speaks the framed protocol on stdin/stdout (engine/core/wire.h); not
 * meant to be run by hand except to list the roles. */
#include "commands.h"

#include "worker/worker.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: khlua worker --role ROLE\n"
               "\n"
               "Runs a worker process that speaks khlua's framed protocol on stdin/stdout.\n"
               "The coordinator starts workers itself (from a launch template, e.g. through\n"
               "srun); there is rarely a reason to run one by hand.  Roles:\n");
    for (size_t i = 0; kh_worker_roles[i]; i++)
        fprintf(f, "  %-10s %s\n", kh_worker_roles[i]->name, kh_worker_roles[i]->summary);
}

int kh_cmd_worker(kh_engine *e, int argc, char **argv)
{
    const char *role = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--role") && i + 1 < argc) {
            role = argv[++i];
        } else if (!strncmp(argv[i], "--role=", 7)) {
            role = argv[i] + 7;
        } else {
            fprintf(stderr, "khlua worker: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!role) {
        fprintf(stderr, "khlua worker: --role is required\n");
        usage(stderr);
        return 2;
    }
    const kh_worker_role *r = kh_worker_role_find(role);
    if (!r) {
        fprintf(stderr, "khlua worker: unknown role '%s' (khlua worker --help lists them)\n",
                role);
        return 2;
    }
    if (isatty(STDOUT_FILENO)) {
        fprintf(stderr, "khlua worker: stdout is a terminal; workers are started by khlua "
                        "and speak a binary protocol\n");
        return 2;
    }
    return kh_worker_main(e, r, STDIN_FILENO, STDOUT_FILENO);
}
