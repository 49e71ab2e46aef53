/* What split and plan share: choosing the layout (--layout FILE, --preset NAME, or from
 * config.json) and printing what opening and planning the checkpoint with it said
 * (formats/open/plan_source.h does the work); and, through refusal.h, what they share with
 * reshard: a refusal printed grouped by cause, with what would work. */
#ifndef TPS_LAYOUT_ARGS_H
#define TPS_LAYOUT_ARGS_H

#include <stdint.h>

#include "formats/open.h"
#include "lib/layout.h"
#include "lib/set.h"
#include "refusal.h"

typedef struct tps_layout_args {
    const char *layout;
    const char *preset;
    const char *config;
    uint64_t tp;
} tps_layout_args;

/* The built-in preset name designates (tps_preset_resolve: a preset's name or alias, any
 * case, '-' or '_').  Returns 0 with *out set, or prints "unknown preset" with a did-you-mean
 * and the names accepted, and returns the usage exit code. */
int tps_cli_resolve_preset(const char *cmd, const char *name, const tps_preset **out);

/* Opens src, chooses and loads the layout (--layout FILE, --preset NAME, or with neither
 * the preset config.json's architectures ask for, said on stderr unless -q) and builds the
 * plan; prints a line per skip: glob that matched.  Usage error (2) when neither option is
 * given and there is no config.json; exit 3 when it names an architecture no preset serves.
 * On a planning error prints every
 * problem (prefixed by the command name) and returns its status; *ix and *l are then still
 * set for the caller to free. */
int tps_cli_plan(const char *cmd, const char *src, const tps_layout_args *a, tps_index **ix, tps_layout **l,
                 tps_manifest **m);

/* Prints one line per tensor: name, rule, partition, per-rank shape and bytes per rank; with
 * json also the notes (the Marlin tile, from q, the quantization the plan was made with, or
 * NULL). */
void tps_cli_print_plan(const tps_manifest *m, const struct tps_quant *q, bool json);

#endif
