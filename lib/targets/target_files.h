/* What a target's rank files hold (lib/targets/target.h): a run of consecutive manifest
 * tensors under one target name is one fused tensor of the file.  Writing: the file's
 * tensors, parts that keep runs whole, the extras' bytes.  Reading: the checks a loaded
 * manifest's runs must pass, and a rank's files indexed back by manifest names.  All of it
 * needs the manifest alone, not the layout's target. */
#ifndef TPS_TARGET_FILES_H
#define TPS_TARGET_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "../base/index.h"
#include "../base/status.h"
#include "../set/manifest.h"
#include "../set/sink.h"

/* A loaded manifest's target names: each a run of consecutive tensors of one dtype whose
 * rank slices concatenate (same trailing dimensions, stack groups alike at every rank). */
tps_status tps_target_check_manifest(const tps_manifest *m, const char *what, tps_error *err);
/* tps_manifest_load, then the check above: how a shard set's manifest is read (the manifest
 * itself is data and knows no target). */
tps_status tps_target_manifest_load(const char *dir, tps_manifest **out, tps_error *err);

/* The tensors of rank r's part holding manifest tensors [i0, i0+n) (whole runs): e[k] and
 * shapes[k*TPS_MAX_DIMS] describe tensor i0+k at that rank on entry; on return the first
 * returned count entries describe the file's tensors, each run fused into one. */
size_t tps_target_file_tensors(const tps_manifest *m, size_t i0, size_t n, uint64_t r, tps_sink_tensor *e,
                               uint64_t *shapes);

/* tps_parts_greedy with each run kept whole in one part. */
tps_status tps_target_parts(const tps_manifest *m, const uint64_t *bytes, uint64_t max, size_t *first,
                            size_t *nparts, tps_error *err);

/* Rank r's files as an index by manifest names: each member a byte range of its fused tensor,
 * after checking that the files hold exactly the fused tensors, with the shapes the
 * partitions give.  *out replaces files (which it consumes in every case). */
tps_status tps_target_member_index(const tps_manifest *m, uint64_t r, tps_index *files, tps_index **out,
                                   tps_error *err);

/* An extra's bytes as a rank file holds them (F32, little-endian). */
void tps_target_extra_bytes(double value, unsigned char out[4]);
/* The bytes m's extras add at the end of each rank's last part: their CRC-32, *len bytes. */
uint32_t tps_target_extras_crc(const tps_manifest *m, uint64_t *len);

#endif
