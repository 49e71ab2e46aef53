/* What split and reshard share about the files they write: the name template (--name-template,
 * with {rank}, {tp} and {part}) and the size cap (--max-shard-size). */
#ifndef TPS_OUTPUT_ARGS_H
#define TPS_OUTPUT_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "progress.h"
#include "lib/cut.h"

/* Chooses the template: the user's, else the default for one file per rank or, with a size
 * cap, TPS_DEFAULT_PART_TEMPLATE.  Refuses (exit 2, with a hint) a template that gives no
 * plain file name, lacks {rank} at tp > 1, or lacks {part} when max_part_bytes is set.
 * Returns -1 to go on, or the exit code. */
int tps_cli_name_template(const char *cmd, const char *user, uint64_t tp, uint64_t max_part_bytes,
                          const char **out);

/* The copy engine's options for a CLI run: these files, progress and -v listing on ps. */
tps_cut_opts tps_cli_cut_opts(const bool *write_rank, const char *tmpl, uint64_t max_part_bytes,
                              tps_progress_state *ps);

#endif
