/* tpshard: entry point and subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "help.h"
#include "commands.h"
#include "inputs.h"
#include "junit_report.h"

#ifndef TPS_VERSION
#define TPS_VERSION "0.1.0"
#endif

const tps_cmd *const tps_commands[] = {
    &tps_cmd_inspect,
    &tps_cmd_layout,
    &tps_cmd_plan,
    &tps_cmd_split,
    &tps_cmd_reshard,
    &tps_cmd_merge,
    &tps_cmd_check,
    &tps_cmd_verify,
    &tps_cmd_backends,
    NULL,
};

static const tps_cmd *find_command(const char *name)
{
    for (int i = 0; tps_commands[i]; i++)
        if (strcmp(tps_commands[i]->name, name) == 0) return tps_commands[i];
    return NULL;
}

static void print_overview(FILE *out)
{
    fputs("Usage: tpshard COMMAND [OPTIONS] [ARGS]\n"
          "Split, reshard, merge, check and verify tensor-parallel checkpoint shards.\n\n"
          "Commands:\n",
          out);
    for (int i = 0; tps_commands[i]; i++)
        tps_cli_wrap(out, fprintf(out, "  %-8s ", tps_commands[i]->name), 11, tps_commands[i]->summary);
    fputs("\n'tpshard COMMAND --help' (or 'tpshard help COMMAND') shows a command's options;\n"
          "'man tpshard' has everything.  'tpshard --version' prints the version.\n\n",
          out);
    tps_cli_exit_codes(out, true);
}

static int unknown_command(const char *name)
{
    const char *names[32];
    size_t n = 0;
    for (int i = 0; tps_commands[i] && n < 32; i++) names[n++] = tps_commands[i]->name;
    const char *s = tps_cli_suggest(name, strlen(name), names, n);
    if (s) fprintf(stderr, "tpshard: unknown command '%s'; did you mean '%s'?\n", name, s);
    else fprintf(stderr, "tpshard: unknown command '%s'\n", name);
    fputs("tpshard: see 'tpshard --help'\n", stderr);
    return TPS_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    /* Results go to stdout, notes and errors to stderr (unbuffered).  Into a pipe stdout is
     * fully buffered, so a note would print before the lines it follows; a line at a time
     * keeps the two in the order they were written (2>&1 | less reads as it happened). */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        print_overview(stderr);
        return TPS_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        print_overview(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0 || strcmp(name, "version") == 0) {
        printf("tpshard %s\n", TPS_VERSION);
        return 0;
    }
    if (strcmp(name, "help") == 0) {
        /* tpshard help [-v] [COMMAND] */
        bool verbose = false;
        const char *topic = NULL;
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) verbose = true;
            else if (!topic) topic = argv[i];
            else {
                fprintf(stderr, "tpshard help: one command at a time ('%s' and '%s')\n", topic, argv[i]);
                return TPS_EXIT_USAGE;
            }
        }
        if (!topic) {
            print_overview(stdout);
            return 0;
        }
        const tps_cmd *c = find_command(topic);
        if (!c) return unknown_command(topic);
        tps_cli_help(stdout, c, verbose);
        return 0;
    }
    const tps_cmd *cmd = find_command(name);
    if (!cmd) return unknown_command(name);
    char *args[16];
    int nargs = 0;
    int rc = tps_cli_parse(cmd, argc - 2, argv + 2, args, &nargs);
    if (rc == 0 && tps_common.help) tps_cli_help(stdout, cmd, tps_common.verbose > 0);
    if (rc >= 0) return rc;
    tps_cli_junit_start(cmd->name);
    rc = tps_cli_require_inputs(cmd->name, args, nargs);
    return tps_cli_junit_finish(nargs ? args[0] : NULL, rc ? rc : cmd->run(args, nargs));
}
