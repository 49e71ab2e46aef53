/* Writing a Megatron-Core torch_dist checkpoint (Megatron-LM --ckpt-format torch_dist) from a
 * Megatron plan (megatron_out.h, planned at tp 1 x pp 1: every tensor global, the vocabulary
 * padded for the tp the args name), and the key names torch_dist and the legacy format give
 * a decoder layer's tensors (the reader, formats/megatron/megatron_dist.h, maps them back).
 *
 * What is written (as megatron-core 0.16.1's dist_checkpointing.save lays it out, without
 * the optimizer and RNG state; formats/megatron/megatron_dist.h has the layout):
 *   ROOT/latest_checkpointed_iteration.txt   the tracker (megatron_out.h)
 *   ROOT/<iter dir>/__0_0.distcp, .metadata  one DCP (formats/dcp/dcp_write.h, through the sink
 *       the caller hands in): embedding.word_embeddings.weight, decoder.final_layernorm.*,
 *       output_layer.weight (untied) whole; each decoder layer tensor under its stacked key
 *       (decoder.layers.<rest>, [num_layers, ...]) as one chunk per layer, the layer norms
 *       under TransformerEngine's names; and, as Megatron saves them, one non-tensor entry
 *       "<module>._extra_state/shard_<l>_<L>" per linear of each layer holding [None]
 *   ROOT/<iter dir>/metadata.json            {"sharded_backend": "torch_dist", ...}
 *   ROOT/<iter dir>/common.pt                through the caller's writer: the plan's top-level
 *       entries (args with ckpt_format torch_dist, checkpoint_version, iteration)
 *   ROOT/tpshard.json                        as for the legacy writer */
#ifndef TPS_MEGATRON_DIST_OUT_H
#define TPS_MEGATRON_DIST_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../engine/write_set.h"
#include "../set/manifest.h"
#include "../set/sink.h"
#include "megatron_out.h"

#define TPS_MEGATRON_DIST_FILE "__0_0.distcp"

/* A decoder layer's name under torch_dist's stacked key: "decoder.layers.<rest>" to the
 * legacy name "decoder.layers.<l>.<rest'>" (TransformerEngine's layer norm names mapped to
 * input_layernorm / pre_mlp_layernorm); false when out is too small. */
bool tps_megatron_dist_layer_name(char *out, size_t size, uint64_t l, const char *rest);

/* The inverse: a global legacy name to its torch_dist key; *layer is its layer and *stacked
 * true for a decoder layer tensor.  False when key is too small. */
bool tps_megatron_dist_key(const char *name, char *key, size_t size, uint64_t *layer, bool *stacked);

/* Writes common.pt at path from the top-level entries (pickle_write.h's JSON object). */
typedef tps_status (*tps_megatron_common_fn)(const char *path, const char *top_json, tps_error *err);

/* Writes the planned set (mo planned with pp 1 on a tp 1 manifest) under o->out through sink
 * (formats/: tps_dcp_sink) and write_common, reading global tensor i through read (after
 * planning: mo->src finds the input's tensor).  num_layers: the stacked keys' first size. */
tps_status tps_megatron_dist_write(tps_manifest *m, const tps_megatron_out *mo, uint64_t num_layers,
                                   const tps_sink *sink, tps_megatron_common_fn write_common, tps_global_read_fn read,
                                   void *ctx, const tps_write_opts *o, tps_error *err);

#endif
