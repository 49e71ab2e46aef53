/* split --target megatron and merge --target hf on the command line: their options, the
 * common write step with progress (output_args.h) and what they print; the planning is
 * lib/registry/megatron_split.h's, the view merge writes lib/registry/megatron_as_hf.h's, the
 * formats they need formats/megatron/megatron_target.h's. */
#ifndef TPS_CMD_MEGATRON_HF_H
#define TPS_CMD_MEGATRON_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "layout_args.h"
#include "lib/registry.h"

typedef struct tps_cli_megatron_split_opts {
    const char *out;
    uint64_t pp;           /* 0: 1 */
    const char *pp_layers; /* NULL: Megatron's uniform stages */
    bool force, dry_run;
    bool dist;             /* --ckpt-format torch_dist (lib/registry/megatron_dist_out.h) */
} tps_cli_megatron_split_opts;

/* --ckpt-format V of split and reshard --target megatron, one of e's formats (registry.h):
 * "torch" (the legacy format, the default when v is NULL) or "torch_dist" (*dist); anything
 * else is a usage error, whose exit code is returned (0 when v is known). */
int tps_cli_ckpt_format(const char *cmd, const tps_target_entry *e, const char *v, bool *dist);

/* A Hugging Face checkpoint of a family whose preset maps it to Megatron-Core (its
 * targets: megatron: section) written as a Megatron-LM checkpoint at la->tp x o->pp; the
 * exit code. */
int tps_cli_split_megatron(const char *src, const tps_layout_args *la, const tps_cli_megatron_split_opts *o);

typedef struct tps_megatron_merge_opts {
    const char *out;
    bool file; /* -o FILE.safetensors (config.json beside it) rather than a directory */
    uint64_t max_shard, vocab;
    bool force;
} tps_megatron_merge_opts;

/* A Megatron-LM checkpoint merged into a Hugging Face one (weights and config.json); the exit
 * code. */
int tps_cli_merge_hf(const char *src, const tps_megatron_merge_opts *o);

#endif
