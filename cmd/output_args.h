/* What split, reshard and merge share on the command line about the files they write: the
 * options' meaning lives in the library's write step (lib/engine/write_set.h); this only fills its
 * options from the command line and runs it with a progress display. */
#ifndef TPS_OUTPUT_ARGS_H
#define TPS_OUTPUT_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/engine.h"
#include "progress.h"

/* The write step's options for a CLI run into out, with progress and -v listing on ps. */
tps_write_opts tps_cli_write_opts(const char *out, bool force, const char *const *inputs, const char *only_ranks,
                                  const char *name_template, uint64_t max_part_bytes, tps_progress_state *ps);

/* Runs the write step with a progress line for verb; returns the exit code (reported). */
int tps_cli_write(const char *verb, tps_manifest *m, tps_global_read_fn read, void *ctx, const tps_write_opts *o);
/* The same for a writer that lays its files out its own way on top of the write step (a
 * Megatron checkpoint: lib/registry/megatron_plan.h's tps_megatron_plan_write). */
typedef tps_status (*tps_cli_writer_fn)(void *arg, const tps_write_opts *o, tps_error *err);
int tps_cli_write_with(const char *verb, tps_cli_writer_fn write, void *arg, const tps_write_opts *o);

/* Lays m out for the target name (a registry entry that writes sets,
 * lib/registry/registry.h; one without a schema, tpshard: back to source names) by its
 * layout's targets: section (lib/targets/target.h), for the engine release version (NULL: the
 * set's own, or the current one; "current": the newest class); returns the exit code
 * (reported). */
int tps_cli_apply_target(const char *verb, const char *name, const char *version, tps_manifest *m);

/* The usage error of --target-version without a target that has releases; the exit code. */
int tps_cli_usage_version(const char *verb);

/* A target set's files: the names target's registry entry gives (the engine's part names) in
 * parts of at most max_part_bytes (0: 5 GiB, as vLLM's saver), and the model's other files
 * copied from src's directory (*side, malloc'd, for the caller to free after the write). */
void tps_cli_target_write_opts(tps_write_opts *wo, const char *target, const char *src, uint64_t max_part_bytes,
                               char **side);

#endif
