/* The model's files beside its weights, copied into a shard set a serving engine loads as a
 * model directory (split --target vllm|sglang). */
#ifndef TPS_SIDE_FILES_H
#define TPS_SIDE_FILES_H

#include "../base/status.h"
#include "outdir.h"

/* Copies the model's other files from src_dir into od (config.json, generation_config.json,
 * tokenizer files, chat templates: what an engine reads beside the weights), leaving out
 * weights (*.safetensors, *.bin, *.pt, *.pth, *.gguf, ...), indexes (*.index.json),
 * tpshard.json and dot files.  Plain files only. */
tps_status tps_copy_side_files(const char *src_dir, const tps_outdir *od, tps_error *err);

#endif
