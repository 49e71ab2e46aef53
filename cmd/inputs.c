/* Inputs exist before a command runs: see inputs.h. */
#include "inputs.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

int tps_cli_require_inputs(const char *cmd, char *const *args, int nargs)
{
    for (int i = 0; i < nargs; i++) {
        struct stat st;
        if (!args[i] || stat(args[i], &st) == 0) continue; /* an option not given */
        int e = errno;
        tps_cli_errorf(cmd, "%s: %s", args[i], strerror(e));
        return e == ENOENT || e == ENOTDIR || e == ENAMETOOLONG || e == ELOOP ? TPS_EXIT_INVALID : TPS_EXIT_IO;
    }
    return 0;
}
