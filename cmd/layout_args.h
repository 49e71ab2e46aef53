/* What split and plan share: opening the checkpoint, choosing the layout (--layout FILE or
 * --preset NAME), sizes from --config, inferred sizes, and the plan. */
#ifndef TPS_LAYOUT_ARGS_H
#define TPS_LAYOUT_ARGS_H

#include <stdint.h>

#include "lib/index.h"
#include "lib/layout.h"
#include "lib/manifest.h"

typedef struct tps_layout_args {
    const char *layout;
    const char *preset;
    const char *config;
    uint64_t tp;
} tps_layout_args;

/* Opens src, loads the layout and builds the plan.  On a planning error prints every
 * problem (prefixed by the command name) and returns its status; *ix and *l are then still
 * set for the caller to free. */
int tps_cli_plan(const char *cmd, const char *src, const tps_layout_args *a, tps_index **ix, tps_layout **l,
                 tps_manifest **m);

/* Prints one line per tensor: name, rule, partition, per-rank shape and bytes per rank. */
void tps_cli_print_plan(const tps_manifest *m, bool json);

#endif
