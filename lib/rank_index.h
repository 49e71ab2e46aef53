/* The per-rank Hugging Face style index written when a rank's tensors span several parts:
 *   {"metadata": {"total_size": <data bytes of the rank>},
 *    "weight_map": {"<tensor>": "<part file>", ...}}
 * named by TPS_RANK_INDEX_TEMPLATE, so loaders that understand model.safetensors.index.json
 * can load one rank's parts as one state dict.  tpshard itself reads the manifest, not this. */
#ifndef TPS_RANK_INDEX_H
#define TPS_RANK_INDEX_H

#include <stddef.h>

#include "manifest.h"
#include "outdir.h"

/* first[p] is the first tensor (manifest order) of part p of rank r, whose file is
 * m->files[file0 + p]; first[nparts] == m->ntensors. */
tps_status tps_rank_index_write(const tps_manifest *m, uint64_t r, const size_t *first, size_t file0,
                                const tps_outdir *od, tps_error *err);

#endif
