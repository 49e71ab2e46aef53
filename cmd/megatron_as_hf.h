/* A Megatron-LM checkpoint (legacy mp_rank_* files or Megatron-Core torch_dist) opened as
 * the Hugging Face checkpoint it holds (lib/megatron/megatron_as_hf.h builds the view; its
 * reader, formats/megatron/megatron_set.h, opens the set here), and the note saying what such a
 * source leaves out. */
#ifndef TPS_CMD_MEGATRON_AS_HF_H
#define TPS_CMD_MEGATRON_AS_HF_H

#include <stdint.h>

#include "formats/megatron/megatron_set.h"
#include "lib/base/index.h"
#include "lib/engine/shardset.h"
#include "lib/layout/layout.h"
#include "lib/megatron/megatron_as_hf.h"
#include "lib/set/manifest.h"

/* Opens src; vocab: the true vocabulary when args lack it (0: none). */
tps_status tps_megatron_as_hf_open(const char *src, uint64_t vocab, tps_megatron_as_hf **out, tps_error *err);
/* One line on stderr saying what the source leaves out (optimizer, RNG and other state) and,
 * for torch_dist, the grid it was saved at; nothing with -q. */
void tps_megatron_as_hf_note(const char *cmd, const tps_megatron_as_hf *a);

#endif
