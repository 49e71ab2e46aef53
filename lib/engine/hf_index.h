/* Hugging Face style multi-file output: how tensors are grouped into parts, and the index
 * that names each tensor's part:
 *   {"metadata": {"total_size": <tensor bytes, headers excluded>},
 *    "weight_map": {"<tensor>": "<part file>", ...}}
 * merge writes one as model.safetensors.index.json; split and reshard with a size cap write
 * one per rank (TPS_RANK_INDEX_TEMPLATE), so loaders that understand
 * model.safetensors.index.json can load one rank's parts as one state dict.  tpshard itself
 * reads the manifest, not these. */
#ifndef TPS_HF_INDEX_H
#define TPS_HF_INDEX_H

#include <stddef.h>

#include "../set/manifest.h"
#include "../set/parts.h"
#include "outdir.h"

/* Writes index_name into od: tensor i of m goes to part_names[p] for first[p] <= i < first[p+1]. */
tps_status tps_hf_index_write(const tps_outdir *od, const char *index_name, const tps_manifest *m,
                              const size_t *first, size_t nparts, const char *const *part_names, uint64_t total_size,
                              tps_error *err);

/* Rank r's index, its parts being m->files[file0 + p] (first as above). */
tps_status tps_rank_index_write(const tps_manifest *m, uint64_t r, const size_t *first, size_t file0,
                                const tps_outdir *od, tps_error *err);

#endif
