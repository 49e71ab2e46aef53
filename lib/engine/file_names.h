/* The names of the files a shard set or a merged checkpoint is written to: the templates a
 * rank's file, part and index are named by, and their formatting.  The copy engine
 * (lib/engine/cut.h) names its files with them; the Hugging Face indexes (hf_index.h) and
 * the output guards (outdir.h) recognise them. */
#ifndef TPS_FILE_NAMES_H
#define TPS_FILE_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

#define TPS_DEFAULT_NAME_TEMPLATE "model-rank-{rank}-of-{tp}.safetensors"
/* vLLM's sharded-state pattern; parts count from 0 as there. */
#define TPS_DEFAULT_PART_TEMPLATE "model-rank-{rank}-part-{part}.safetensors"
/* Rank r's index when it has parts: {"metadata": {"total_size": N}, "weight_map": {tensor: file}},
 * named like the rank's unsplit file plus ".index.json", as model.safetensors.index.json is
 * for model.safetensors. */
#define TPS_RANK_INDEX_TEMPLATE "model-rank-{rank}-of-{tp}.safetensors.index.json"

/* The index merge writes beside a multi-file checkpoint. */
#define TPS_CHECKPOINT_INDEX_NAME "model.safetensors.index.json"

/* Formats a template for rank r of T (and part p, for templates with {part}) into a plain
 * file name (refusing '/', "..", empty, a leading '.'). */
tps_status tps_format_name(const char *tmpl, uint64_t r, uint64_t T, uint64_t p, char *out, size_t size,
                           tps_error *err);

#endif
