/* A Megatron-LM checkpoint (legacy mp_rank_* files or Megatron-Core torch_dist) seen as the
 * Hugging Face checkpoint it holds: the set's global tensors through the Megatron-to-HF
 * mapping of the preset its args ask for (lib/megatron/megatron_hf.h), with the config.json
 * made from those args.  merge --target hf writes it; split and plan cut it as they cut any
 * checkpoint (split iter_0001000/ --tp 8 --target vllm).  Nothing is held whole: every read
 * streams row ranges of the source's tensors. */
#ifndef TPS_CMD_MEGATRON_AS_HF_H
#define TPS_CMD_MEGATRON_AS_HF_H

#include <stdint.h>

#include "formats/megatron/megatron_set.h"
#include "lib/base/index.h"
#include "lib/engine/shardset.h"
#include "lib/layout/layout.h"
#include "lib/megatron/megatron_hf.h"
#include "lib/set/manifest.h"

typedef struct tps_megatron_as_hf {
    tps_shardset *ss;
    tps_megatron_source *ms;
    tps_manifest *um;                /* the set's global tensors, unsharded */
    tps_manifest *hm;                /* the Hugging Face tensors (tp 1) */
    tps_megatron_unview *rd;         /* reads hm's tensors: tps_megatron_hf_unview_read */
    tps_megatron_hf *h;
    tps_layout *l;                   /* the preset, config applied */
    char *preset, *arch, *model_type; /* what args ask for */
    char *config;                    /* config.json text */
} tps_megatron_as_hf;

/* Opens src; vocab: the true vocabulary when args lack it (0: none). */
tps_status tps_megatron_as_hf_open(const char *src, uint64_t vocab, tps_megatron_as_hf **out, tps_error *err);
void tps_megatron_as_hf_free(tps_megatron_as_hf *a); /* accepts NULL */

/* a as a tensor index (format "megatron-hf") that owns a: its tensors are hm's, read through
 * the mapping. */
tps_status tps_megatron_as_hf_index(tps_megatron_as_hf *a, tps_index **out, tps_error *err);

/* The config.json text of an index made by tps_megatron_as_hf_index; NULL for any other. */
const char *tps_megatron_as_hf_config_of(const tps_index *ix);

/* One line on stderr saying what the source leaves out (optimizer, RNG and other state) and,
 * for torch_dist, the grid it was saved at; nothing with -q. */
void tps_megatron_as_hf_note(const char *cmd, const tps_megatron_as_hf *a);

#endif
