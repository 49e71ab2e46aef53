/* Opening a tpshard shard set (a directory with tpshard.json and one safetensors file per
 * rank, or per rank and part) with the safetensors reader for its rank files.  The set's
 * reading logic is lib/set/manifest.h's tps_shardset; this only hands it the format.  A Megatron-LM
 * checkpoint directory opens as a shard set too (formats/megatron/megatron_set.h). */
#ifndef TPS_FORMATS_SHARDSET_H
#define TPS_FORMATS_SHARDSET_H

#include "../../lib/engine/shardset.h"
#include "../../lib/set/manifest.h"

tps_status tps_shardset_open(const char *dir, tps_shardset **out, tps_error *err);

#endif
