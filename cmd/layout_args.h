/* What split and plan share: opening the checkpoint, choosing the layout (--layout FILE,
 * --preset NAME, or from config.json), sizes from --config, inferred sizes, and the plan; and what they share
 * with reshard: a refusal printed grouped by cause, with what would work. */
#ifndef TPS_LAYOUT_ARGS_H
#define TPS_LAYOUT_ARGS_H

#include <stdint.h>

#include "lib/base/index.h"
#include "lib/layout/layout.h"
#include "lib/layout/presets.h"
#include "lib/refusal/problems.h"
#include "lib/set/manifest.h"

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

/* Prints a refusal grouped by cause on stderr: one line per cause (at most
 * TPS_CLI_PROBLEM_LINES, then how many more), the sizes that are unknown in one line (with
 * "no config.json beside SRC; pass --config FILE" when no_config names where it was looked
 * for), then "tpshard CMD: SRC: SUMMARY at tp N" ending with what would work: the tp values
 * that fit, or the option to pass.  With json, the same also goes to stdout as one object
 * (tp, source, fits, tensors_refused, problems, tp_values_that_fit, hint).  sizes (for
 * naming heads, intermediate and vocabulary) and no_config may be NULL.  Used by plan, split
 * and reshard alike. */
#define TPS_CLI_PROBLEM_LINES 8
void tps_cli_print_problems(const char *cmd, const char *src, const char *summary, const tps_problems *ps,
                            const tps_model_sizes *sizes, const char *no_config, bool json);

/* The shard set's manifest at a new tp (tps_manifest_retarget), for reshard.  Returns 0 with
 * *out set, or prints the refusal once, grouped (tps_cli_print_problems), or the error, and
 * returns the exit code. */
int tps_cli_retarget(const char *cmd, const char *dir, const tps_manifest *src, uint64_t tp, bool keep_placement,
                     tps_manifest **out);

/* Prints one line per tensor: name, rule, partition, per-rank shape and bytes per rank; with
 * json also the notes (the Marlin tile, from q, the quantization the plan was made with, or
 * NULL). */
void tps_cli_print_plan(const tps_manifest *m, const struct tps_quant *q, bool json);

#endif
