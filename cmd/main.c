/* tpshard: entry point and subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"

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
    fputs("Usage: tpshard COMMAND [OPTIONS] [ARGS]\n\n"
          "Split, reshard, merge, check and verify tensor-parallel checkpoint shards.\n\n"
          "Commands:\n",
          out);
    for (int i = 0; tps_commands[i]; i++)
        fprintf(out, "  %-10s %s\n", tps_commands[i]->name, tps_commands[i]->summary);
    fputs("\nRun 'tpshard help COMMAND' or 'tpshard COMMAND --help' for a command's options.\n\n", out);
    tps_cli_exit_codes(out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_overview(stderr);
        return TPS_EUSAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        print_overview(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("tpshard %s\n", TPS_VERSION);
        return 0;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            print_overview(stdout);
            return 0;
        }
        const tps_cmd *c = find_command(argv[2]);
        if (!c) {
            fprintf(stderr, "tpshard: unknown command '%s'; run 'tpshard --help'\n", argv[2]);
            return TPS_EUSAGE;
        }
        tps_cli_help(stdout, c);
        return 0;
    }
    const tps_cmd *cmd = find_command(name);
    if (!cmd) {
        fprintf(stderr, "tpshard: unknown command '%s'; run 'tpshard --help'\n", name);
        return TPS_EUSAGE;
    }
    char *args[16];
    int nargs = 0;
    int rc = tps_cli_parse(cmd, argc - 2, argv + 2, args, &nargs);
    if (rc >= 0) return rc;
    return cmd->run(args, nargs);
}
