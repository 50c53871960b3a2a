/* cli.c: the helpers every command shares (cli.h).  The list of commands is
 * commands.c's; each command is its cmd_<name>.c. */
#include "cli.h"

#include <string.h>

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
