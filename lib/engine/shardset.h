/* Opening a shard set and reading its global tensors back from the ranks' pieces: the read
 * side of the copy engine (reshard, merge, check and verify read sets through it).  A set is
 * its manifest (lib/set/manifest.h) or, for a directory a serving engine saved, the manifest
 * adoption builds (lib/targets/adopt.h); the rank files are read through the format reader the
 * caller hands in (formats/open/shardset.h). */
#ifndef TPS_SHARDSET_H
#define TPS_SHARDSET_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/index.h"
#include "../base/status.h"
#include "../set/manifest.h"

/* An opened shard set: its manifest and, per rank, an index over that rank's files. */
typedef struct tps_shardset {
    char *dir;
    tps_manifest *m;
    tps_index **rank; /* rank[r]: NULL until opened */
    tps_file_reader_fn add_file;
    bool compare_replicas; /* tps_shardset_read_global also reads every further replica of what it
                              returns and fails (TPS_EMISMATCH) where they differ */
} tps_shardset;

/* Opens DIR's manifest; rank files are read with add_file (formats/open/checkpoint.h has
 * tps_shardset_open, which hands in the safetensors reader). */
tps_status tps_shardset_open_with(const char *dir, tps_file_reader_fn add_file, tps_shardset **out, tps_error *err);

/* Opens only rank r's files (a rank that loads its own slices touches nothing else) and
 * checks each tensor's dtype and shape against the manifest. */
tps_status tps_shardset_open_rank(tps_shardset *ss, uint64_t r, const tps_index **out, tps_error *err);

/* The global tensor's C-order bytes (unpadded) [off, off+len), gathered from the ranks that
 * hold them (the lowest rank of replicas).  Opens rank files as needed. */
tps_status tps_shardset_read_global(tps_shardset *ss, const tps_manifest_tensor *t, uint64_t off, void *buf,
                                    size_t len, tps_error *err);

/* The check that makes every byte read count: crc is the CRC-32 of global tensor i's bytes
 * as they were just read; unless it is the manifest's, fails with TPS_EMISMATCH naming the
 * tensor and the file that changed (found by re-reading the files the bytes came from, only
 * on this failure path). */
tps_status tps_shardset_check_tensor(tps_shardset *ss, size_t i, uint32_t crc, tps_error *err);

/* The copy engine's source over a shard set (ctx: the tps_shardset): global tensor i of its
 * manifest, as a tps_global_read_fn, and the per-tensor check as a tps_cut_opts.tensor_done,
 * so reshard and merge hand the set to the engine as they are. */
tps_status tps_shardset_source_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err);
/* Where tps_shardset_read_global would read global byte off of t from, when that is a plain
 * range of one rank's file (lib/engine/cut.h: tps_global_locate_fn), and the same as a
 * tps_global_locate_fn with ctx the shard set. */
bool tps_shardset_locate_global(tps_shardset *ss, const tps_manifest_tensor *t, uint64_t off, int *fd, const char **path,
                                uint64_t *file_off, uint64_t *len);
bool tps_shardset_source_locate(void *ctx, size_t i, uint64_t off, int *fd, const char **path, uint64_t *file_off,
                                uint64_t *len);
tps_status tps_shardset_source_check(void *ctx, size_t i, uint32_t crc, tps_error *err);

/* After a difference was found in tensor t: the first file holding t (rank order) whose
 * size or whole-file CRC-32 differs from the manifest's, into path (*found false when every
 * one matches).  Reads those files whole: for explaining a failure, not for checking. */
tps_status tps_shardset_changed_file(tps_shardset *ss, const tps_manifest_tensor *t, char *path, size_t size,
                                     bool *found, tps_error *err);

void tps_shardset_free(tps_shardset *ss);

#endif
