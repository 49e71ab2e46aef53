/* What split, reshard and merge share on the command line about the files they write: the
 * options' meaning lives in the library's write step (lib/write_set.h); this only fills its
 * options from the command line and runs it with a progress display. */
#ifndef TPS_OUTPUT_ARGS_H
#define TPS_OUTPUT_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "progress.h"
#include "lib/write_set.h"

/* The write step's options for a CLI run into out, with progress and -v listing on ps. */
tps_write_opts tps_cli_write_opts(const char *out, bool force, const char *const *inputs, const char *only_ranks,
                                  const char *name_template, uint64_t max_part_bytes, tps_progress_state *ps);

/* Runs the write step with a progress line for verb; returns the exit code (reported). */
int tps_cli_write(const char *verb, tps_manifest *m, tps_global_read_fn read, void *ctx, const tps_write_opts *o);

#endif
