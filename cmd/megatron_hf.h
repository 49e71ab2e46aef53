/* split --target megatron and merge --target hf (lib/megatron_hf.h, lib/megatron_out.h). */
#ifndef TPS_CMD_MEGATRON_HF_H
#define TPS_CMD_MEGATRON_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "layout_args.h"

typedef struct tps_megatron_split_opts {
    const char *out;
    uint64_t pp;           /* 0: 1 */
    const char *pp_layers; /* NULL: Megatron's uniform stages */
    bool force, dry_run;
} tps_megatron_split_opts;

/* A Hugging Face checkpoint of a family whose preset maps it to Megatron-Core (its
 * targets: megatron: section) written as a Megatron-LM checkpoint at la->tp x o->pp; the
 * exit code. */
int tps_cli_split_megatron(const char *src, const tps_layout_args *la, const tps_megatron_split_opts *o);

#endif
