/* --help and the overview's text, rendered from the option tables of cli.h (cmd/help.c). */
#ifndef TPS_CMD_HELP_H
#define TPS_CMD_HELP_H

#include <stdbool.h>
#include <stdio.h>

#include "cli.h"

/* A command's help, generated from its table and wrapped to 80 columns.  The details
 * paragraphs are shown when the whole text still fits one 24-line screen, or when verbose
 * (`tpshard CMD --help -v`); the option column narrows when that makes it fit. */
void tps_cli_help(FILE *out, const tps_cmd *cmd, bool verbose);
/* The exit-code table (full: one line per code; else one line). */
void tps_cli_exit_codes(FILE *out, bool full);

/* Writes text word-wrapped to 80 columns, continuing at column col, later lines indented. */
void tps_cli_wrap(FILE *out, int col, int indent, const char *text);

#endif
