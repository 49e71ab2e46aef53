/* A Megatron-LM checkpoint (legacy mp_rank_* files or Megatron-Core torch_dist) seen as the
 * Hugging Face checkpoint it holds: the set's global tensors through the Megatron-to-HF
 * mapping of the preset its args ask for (megatron_hf.h), with the config.json made from
 * those args.  merge --target hf writes it; split and plan cut it as they cut any checkpoint
 * (split iter_0001000/ --tp 8 --target vllm).  Nothing is held whole: every read streams row
 * ranges of the source's tensors.  The checkpoint is opened by its reader
 * (formats/megatron/megatron_set.h), which lib/ does not include: the opener hands in the set and the
 * reader's account of it (cmd/megatron_as_hf.c). */
#ifndef TPS_MEGATRON_AS_HF_H
#define TPS_MEGATRON_AS_HF_H

#include <stdint.h>

#include "../base/index.h"
#include "../base/status.h"
#include "../engine/outdir.h"
#include "../engine/shardset.h"
#include "../layout/layout.h"
#include "../set/manifest.h"
#include "megatron_hf.h"

struct tps_megatron_source; /* formats/megatron/megatron_set.h: what the reader found beside the tensors */

typedef struct tps_megatron_as_hf {
    tps_shardset *ss;                                 /* owned */
    struct tps_megatron_source *ms;                   /* owned, freed with ms_free */
    void (*ms_free)(struct tps_megatron_source *ms);
    tps_manifest *um;                /* the set's global tensors, unsharded */
    tps_manifest *hm;                /* the Hugging Face tensors (tp 1) */
    tps_megatron_unview *rd;         /* reads hm's tensors: tps_megatron_hf_unview_read */
    tps_megatron_hf *h;
    tps_layout *l;                   /* the preset, config applied */
    char *preset, *arch, *model_type; /* what args ask for */
    char *config;                    /* config.json text */
} tps_megatron_as_hf;

/* Builds the view of a->ss (opened, a->ms beside it) from the checkpoint's args_json; src
 * names it in messages.  On failure a keeps what was built, for tps_megatron_as_hf_free. */
tps_status tps_megatron_as_hf_build(tps_megatron_as_hf *a, const char *src, const char *args_json, tps_error *err);
void tps_megatron_as_hf_free(tps_megatron_as_hf *a); /* accepts NULL */

/* a as a tensor index (format "megatron-hf") that owns a: its tensors are hm's, read through
 * the mapping. */
tps_status tps_megatron_as_hf_index(tps_megatron_as_hf *a, tps_index **out, tps_error *err);

/* The config.json text of an index made by tps_megatron_as_hf_index; NULL for any other. */
const char *tps_megatron_as_hf_config_of(const tps_index *ix);

/* The config.json a Megatron source gives its Hugging Face output (text: a NUL-terminated
 * config.json).  tps_megatron_config_into is a write_set before_publish step (arg: the
 * text) putting it into the output directory; tps_megatron_config_beside writes it beside
 * the one file out (-o FILE.safetensors). */
tps_status tps_megatron_config_into(const tps_outdir *od, void *text, tps_error *err);
tps_status tps_megatron_config_beside(const char *out, const char *text, tps_error *err);

#endif
