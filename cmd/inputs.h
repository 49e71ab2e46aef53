/* Every command's positional argument is an input (a checkpoint, a shard set): it must exist
 * before anything is asked of it, so a wrong path is reported as one ("No such file or
 * directory", exit 3) and not as what the command would have looked for next to it (a
 * config.json, a manifest), whatever options are given.  main() checks it for every command
 * before the command runs; the Python API's exception classes rely on it (README "Python"). */
#ifndef TPS_CMD_INPUTS_H
#define TPS_CMD_INPUTS_H

/* 0 when every args[i] exists (a NULL one, an option not given, is skipped); else "tpshard CMD: PATH: <strerror>" on stderr and the exit
 * code: 3 (invalid input) when it does not exist, 4 when it cannot be looked at (permission). */
int tps_cli_require_inputs(const char *cmd, char *const *args, int nargs);

#endif
