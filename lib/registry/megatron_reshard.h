/* reshard of a Megatron-LM checkpoint planned: the vocabulary re-padded for the new tp (from
 * the true size: the source's partitions pad to its own rows, which the new tp need not
 * divide), the stages (--pp / --pp-layers, else the source's own split), Megatron's files
 * planned, and the reader the write step streams through (with every tensor's CRC checked
 * and replicas compared).  The checkpoint is opened by its reader (formats/megatron/megatron_set.h),
 * which hands over what it found beside the tensors; the retargeting between repad and
 * restore is the caller's (it prints a refusal grouped). */
#ifndef TPS_MEGATRON_RESHARD_H
#define TPS_MEGATRON_RESHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../engine/shardset.h"
#include "../partition/partition.h"
#include "../set/manifest.h"
#include "megatron_args.h"
#include "megatron_out.h"
#include "megatron_plan.h"

/* What the source's reader found beside its manifest. */
typedef struct tps_megatron_reshard_src {
    const tps_megatron_model *model;
    bool vocab_known;           /* model->vocab is the true vocabulary, not padded rows */
    const uint64_t *layer_first; /* the source's stages: pp + 1 entries */
    const char *args_json, *checkpoint_version_json;
    int64_t iteration;
    bool release;
    char **extra_state;
    size_t n_extra_state;
} tps_megatron_reshard_src;

/* Sets the pad multiple of every padded, split tensor of m to the vocabulary divisor x tp,
 * the old partitions kept in *saved (m->ntensors entries, NULL where unchanged) for
 * tps_megatron_reshard_restore after retargeting.  Padded rows that are no such multiple
 * while the true vocabulary is unknown are TPS_EARG (dir names the set) asking for it.  On
 * failure m is restored and *saved NULL. */
tps_status tps_megatron_reshard_repad(tps_manifest *m, const tps_megatron_reshard_src *s, uint64_t tp,
                                      const char *dir, const tps_partition ***saved, tps_error *err);
/* Puts the saved partitions back (pooled partitions are immutable: the pointer is the old
 * value) and frees saved. */
void tps_megatron_reshard_restore(tps_manifest *m, const tps_partition **saved);

/* The file plan's options for the new set: the stages from pp / pp_layers, else the
 * source's split (written into split, split_size bytes, as pp_layers); dist: torch_dist,
 * one stage of global tensors padded and named for tp.  src: the source set's manifest. */
void tps_megatron_reshard_out_opts(const tps_manifest *src, const tps_megatron_reshard_src *s, uint64_t tp,
                                   uint64_t pp, const char *pp_layers, bool dist, char *split, size_t split_size,
                                   tps_megatron_out_opts *oo);

typedef struct tps_megatron_reshard {
    tps_shardset *ss; /* the source (not owned) */
    size_t *src;      /* per tensor of the new set, after planning: its index in the source's manifest */
    tps_megatron_out *mo;
    tps_megatron_plan plan; /* ready to write */
} tps_megatron_reshard;

/* Plans m (the retargeted manifest, reordered in place) as oo says, read from ss; *out is
 * freed with tps_megatron_reshard_free, also on failure. */
tps_status tps_megatron_reshard_plan(tps_shardset *ss, tps_manifest *m, const tps_megatron_out_opts *oo, bool dist,
                                     const tps_megatron_sinks *sinks, tps_megatron_reshard **out, tps_error *err);
/* A tps_cut_opts.tensor_done (arg: the tps_megatron_reshard): the CRC of every tensor read,
 * against the source's manifest. */
tps_status tps_megatron_reshard_check(void *arg, size_t i, uint32_t crc, tps_error *err);
void tps_megatron_reshard_free(tps_megatron_reshard *r); /* accepts NULL */

#endif
