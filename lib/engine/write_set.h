/* The one write step of split, reshard and merge.
 *
 * Every command that writes checkpoint files goes through tps_write_set, which owns what
 * they share, in this order, so a request that cannot be met is refused before anything is
 * written:
 *   1. limits: tp from 1 to TPS_MAX_TP, the bound the manifest reader also applies;
 *   2. --only-rank: which ranks this node writes ("0,1", "4-7"; non-empty, each below tp),
 *      recorded in the manifest (tps_manifest.held) so the partial set is known as one;
 *   3. file names: each rank's parts and names (tps_cut_files_plan), refusing templates
 *      that collide with each other, the manifest or an index;
 *   4. the output guards and the temporary directory (lib/engine/outdir.h), signals;
 *   5. the copy engine (lib/engine/cut.h) through the caller's sink;
 *   6. publishing: the manifest last, then the rename into place; on any failure or signal,
 *      the temporary output is removed and nothing appears.
 * Steps 1-3 fail with TPS_EARG (a usage error); the caller only parses options and reports. */
#ifndef TPS_WRITE_SET_H
#define TPS_WRITE_SET_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/status.h"
#include "../set/manifest.h"
#include "cut.h"
#include "outdir.h"

typedef struct tps_write_opts {
    const char *out;            /* the output directory, or for TPS_OUT_FILE the file */
    tps_outdir_kind kind;       /* a shard set (with a manifest), a checkpoint directory, one file */
    bool force;                 /* replace an earlier output of the same kind (lib/engine/outdir.h) */
    const char *const *inputs;  /* NULL-terminated: what is read (the output must stay apart from it) */
    const char *only_ranks;     /* NULL: every rank; else the ranks this run writes */
    bool dry_run;               /* steps 1-3 only: check everything, write nothing */
    tps_cut_opts cut;           /* the engine's options; its write_rank is set from only_ranks */
    const char *side_files;     /* NULL, or a directory whose non-weight files (config.json, tokenizer)
                                   the output gets a copy of (lib/targets/target.h): a serving engine's set */
    /* After the files, before the manifest is published: more files of the caller's own (a
     * Megatron checkpoint's tracker, lib/registry/megatron_out.h) written into od's temporary directory.
     * NULL for none. */
    tps_status (*before_publish)(const tps_outdir *od, void *arg, tps_error *err);
    void *before_publish_arg;
} tps_write_opts;

/* Refuses a tp of 0 or above TPS_MAX_TP (TPS_EARG), naming what (e.g. "--tp"). */
tps_status tps_tp_check(uint64_t tp, const char *what, tps_error *err);

/* Parses a rank list ("0,3", "0-3,6") for tp ranks into a malloc'd flag per rank; refuses
 * (TPS_EARG) an empty list, junk, a rank >= tp and a range that runs backwards. */
tps_status tps_rank_list_parse(const char *s, uint64_t tp, bool **out, tps_error *err);

/* Writes m's tensors, read through read(), as o describes, and publishes them.  On success
 * m->files holds every file's size and CRC and m->tensors[i].crc every tensor's. */
tps_status tps_write_set(tps_manifest *m, tps_global_read_fn read, void *ctx, const tps_write_opts *o,
                         tps_error *err);

#endif
