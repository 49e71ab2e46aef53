/* What plan, split and reshard share: a refusal printed grouped by cause, with what would
 * work. */
#ifndef TPS_CMD_REFUSAL_H
#define TPS_CMD_REFUSAL_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/layout.h"
#include "lib/refusal.h"
#include "lib/set.h"

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

#endif
