/* Where verify takes a shard set's model description from: the layout the set was cut with
 * (recorded in its manifest), the hyper-parameters (RoPE theta, norm epsilon, top-k) a
 * layout's block needs, and the sizes the manifest still knows when no config.json is at
 * hand.  The command line (cmd/cmd_verify.c) opens the set and the source; these read them. */
#ifndef TPS_VERIFY_CONFIG_SOURCE_H
#define TPS_VERIFY_CONFIG_SOURCE_H

#include "lib/base/index.h"
#include "lib/base/status.h"
#include "lib/engine/shardset.h"
#include "lib/layout/block.h"
#include "lib/layout/layout.h"

/* The set's layout, parsed from its manifest, with the hyper-parameters applied: config
 * (--config) when given, else the config keys the manifest recorded at split time (what the
 * set was cut with), else a config.json found beside source (--source; in it when it is a
 * directory), beside the source the set was split from or in dir (sets made before manifests
 * recorded it), else the block kind's defaults.  *from (malloc'd) says which, for the report.
 * Refused first, before anything is parsed: a partial set (verify needs every rank) and a
 * Megatron MoE set (its layers are not computed yet). */
tps_status tps_vdriver_layout(const char *dir, const tps_shardset *ss, const char *config, const char *source,
                              tps_layout **l, char **from, tps_error *err);

/* The block to verify with: l's sizes inferred from src_ix (the --source checkpoint) or,
 * without one, from the manifest's global shapes (*shape_ix, an index whose tensors are
 * never read: the caller frees it after the run), then the sizes and the Megatron qkv cut
 * only the manifest records.  A layout without a block: section is TPS_EINVALID. */
tps_status tps_vdriver_block(const char *dir, const tps_shardset *ss, tps_layout *l, const tps_index *src_ix,
                             tps_index **shape_ix, tps_block *out, tps_error *err);

#endif
