/* A Megatron-LM legacy checkpoint (formats/megatron/megatron_read.h) opened as a tpshard shard
 * set, so check, merge, verify and reshard read it as they read any other set.
 *
 * The manifest is planned by the megatron_gpt presets from the checkpoint's args
 * (lib/registry/megatron_args.h): tensors by their Megatron-Core GLOBAL names (layers renumbered from
 * each stage's local numbers, stage by stage), global shapes from rank 0's shapes and the
 * partition (the vocabulary at its true size: args.vocab_size, else the caller's --vocab-size,
 * else the padded rows kept), pipeline stages as the parts of a rank.  Every rank file's key
 * set and shapes are checked against the plan: a missing, extra or misshapen key is refused
 * naming the key and the rank file.  The set has no CRCs (an adopted set) unless tpshard
 * wrote it: then tpshard.json beside the tracker (lib/registry/megatron_out.h) gives every tensor's and
 * file's CRC-32, once its tensors and files are those the plan finds. */
#ifndef TPS_FORMATS_MEGATRON_SET_H
#define TPS_FORMATS_MEGATRON_SET_H

#include <stdbool.h>
#include <stdint.h>

#include "../../lib/base/status.h"
#include "../../lib/engine/shardset.h"
#include "../../lib/registry/megatron_args.h"
#include "../../lib/set/manifest.h"

/* What writing the set again at another tp x pp needs beyond its manifest. */
typedef struct tps_megatron_source {
    tps_megatron_model model; /* model.vocab: the global vocabulary rows */
    bool vocab_known;         /* they are the true vocabulary (args or the caller), not padded rows */
    uint64_t *layer_first; /* pp+1: the source's stages */
    char *args_json, *checkpoint_version_json;
    int64_t iteration;
    bool release;
    char **extra_state; /* rank 0's _extra_state keys, GLOBAL names, stage by stage */
    size_t n_extra_state;
    /* torch_dist (formats/megatron/megatron_dist.h): the grid it was saved at, what is left out */
    bool dist;
    uint32_t saved_tp, saved_pp;
    size_t optimizer_tensors, other_entries;
} tps_megatron_source;

/* Opens the checkpoint at path (tracker directory, iter_* / release, or a directory of
 * mp_rank_*) as a shard set; vocab: the true vocabulary when the args lack vocab_size (0:
 * none given).  *src (when src is not NULL) receives the above; free it with
 * tps_megatron_source_free. */
tps_status tps_megatron_shardset_open(const char *path, uint64_t vocab, tps_shardset **out, tps_megatron_source **src,
                                      tps_error *err);
void tps_megatron_source_free(tps_megatron_source *s);

#endif
