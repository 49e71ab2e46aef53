/* A target's mapping run backwards (lib/targets/adopt.h: sets the engines saved themselves):
 * the source tensors an engine name holds, what an engine-saved set lacks, its extras,
 * transposes, releases and vocabulary multiple. */
#ifndef TPS_TARGET_REVERSE_H
#define TPS_TARGET_REVERSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/buf.h"
#include "../base/index.h"
#include "../base/status.h"
#include "target_schema.h"

/* The mapping run backwards (lib/targets/adopt.h): the source tensors engine tensor name holds, in
 * file order (*n malloc'd names in a malloc'd array; with *stack, S groups: experts 0..S-1 of
 * the entry's from names).  *n 0: no entry maps name, which keeps its own.  *tied: the entry
 * is a tied survivor (its source is the other name only when the set lacks that name). */
tps_status tps_target_sources(const tps_target *t, const char *name, uint64_t S, char ***names, size_t *n,
                              bool *tied, bool *stack, tps_error *err);
/* Whether the target holds source tensor name transposed (a transposed: entry matches it). */
bool tps_target_transposes(const tps_target *t, const char *name);
/* The names an engine-saved rank's files lack of those the target's required: entries ask
 * once per tensor of files their per matches: how many, the first list of them appended to
 * out, quoted and comma-separated ("and N more" after). */
size_t tps_target_missing(const tps_target *t, const tps_index *files, tps_buf *out, size_t list);
/* Whether the target has required: entries (what its engine's saved sets are known by). */
bool tps_target_has_required(const tps_target *t);
/* The releases the target's since: and before: values name for its own engine, newest first,
 * at most max: each starts a release class (what --target-version selects), "0" the class
 * before. */
size_t tps_target_releases(const tps_target *t, const char **out, size_t max);
/* Whether name is one of the target's extras (a constant the engine's state dict holds
 * beside the weights, whatever the release that has it). */
bool tps_target_is_extra(const tps_target *t, const char *name);
/* The engine's vocabulary multiple (0: no padding of its own). */
uint64_t tps_target_vocab_multiple(const tps_target *t);

#endif
