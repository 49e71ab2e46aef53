/* --force onto a shard set whose files lie in subdirectories (a Megatron-LM checkpoint
 * tpshard wrote): a guard of lib/engine/outdir.h kept in a file of its own, which outdir.c
 * calls and which needs nothing of outdir.c. */
#ifndef TPS_OUTDIR_NESTED_H
#define TPS_OUTDIR_NESTED_H

#include "../base/status.h"

/* A Megatron-LM checkpoint's tracker (lib/registry/megatron_out.h writes one): a shard set
 * that has it at its top keeps its files in subdirectories its manifest names. */
#define TPS_MEGATRON_TRACKER "latest_checkpointed_iteration.txt"

/* --force onto dir, which holds the tracker: TPS_OK when everything there is what tpshard
 * wrote (tpshard.json, the tracker, and under the iteration directories only the files
 * tpshard.json lists); else TPS_EINVALID naming the first foreign entry. */
tps_status tps_outdir_nested_replaceable(const char *dir, tps_error *err);

#endif
