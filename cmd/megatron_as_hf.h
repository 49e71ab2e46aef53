/* A Megatron-LM checkpoint (legacy mp_rank_* files or Megatron-Core torch_dist) opened as
 * the Hugging Face checkpoint it holds (formats/megatron/megatron_target.h opens it,
 * lib/registry/megatron_as_hf.h builds the view), and the note the command line prints about
 * what such a source leaves out. */
#ifndef TPS_CMD_MEGATRON_AS_HF_H
#define TPS_CMD_MEGATRON_AS_HF_H

#include "formats/megatron.h"

/* One line on stderr saying what the source leaves out (optimizer, RNG and other state) and,
 * for torch_dist, the grid it was saved at; nothing with -q. */
void tps_megatron_as_hf_note(const char *cmd, const tps_megatron_as_hf *a);

#endif
