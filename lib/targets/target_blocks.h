/* Blocked and transposed rows of a target (lib/targets/target.h: blocked: and transposed:
 * entries): the geometry, the view the copy engine cuts, and reading a rank slice back in
 * the source's order.  What is here works on manifest tensors alone, not on a target. */
#ifndef TPS_TARGET_BLOCKS_H
#define TPS_TARGET_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/index.h"
#include "../base/status.h"
#include "../partition/partition.h"
#include "../set/manifest.h"

/* Blocked rows (blocked: entries; the manifest's target_blocks B): the rank slice's
 * dimension 0 is groups of one partition unit, each B blocks, and the rank file holds it
 * with the two leading axes of [groups, B, block] swapped: GPT-NeoX's per-head
 * [q_h; k_h; v_h] as vLLM's [q_r; k_r; v_r].  The copy engine cuts such a tensor as a view of
 * the global tensor with the same swap ([B, heads, block]: all q, all k, all v) under the
 * file partition (B segments of unit/B), which hands every rank exactly its file's bytes;
 * the member index reads the rank slice back through the inverse swap.  So the manifest
 * keeps the source's names, shapes, partitions and CRCs, and reshard, merge and verify see
 * the source's tensors. */
/* The geometry of t's blocking at tp: *groups (the partition units of the global tensor)
 * and *block_bytes; TPS_EINVALID when t's partition cannot carry it at tp. */
tps_status tps_target_blocked_geometry(const tps_manifest_tensor *t, uint64_t tp, uint64_t *groups,
                                       uint64_t *block_bytes, tps_error *err);
/* The partition the copy engine cuts t's view with (t->part when t is not blocked). */
void tps_target_file_partition(const tps_manifest_tensor *t, tps_partition *out);
/* Byte off of an [X, Y, block] array (bytes) as stored [Y, X, block]: the stored offset, and
 * in *run the bytes from there that stay contiguous in both. */
uint64_t tps_target_swap_offset(uint64_t off, uint64_t X, uint64_t Y, uint64_t block, uint64_t *run);
/* Transposed (transposed: entries; the manifest's target_transpose): a 2-D tensor's rank
 * slice [a, b] is held [b, a] (GPT-2's Conv1D weights as vLLM's [out, in]), a 3-D one's
 * [E, a, b] as [E, b, a] (GPT-OSS's experts, [in, out] per expert, as vLLM's w13/w2); the
 * copy engine cuts the global tensor's transpose with the partition's dimension swapped. */
/* Rope halves (rope_halves: entries; the manifest's target_rope_halves): each head (partition
 * unit, u rows) of the rank slice is held with its rows [u/2, 2] as [2, u/2]: Meta's
 * interleaved RoPE pairs as the rotate-half order vLLM's Llama 4 permutes q/k into.  Heads
 * are whole on a rank, so the view is the global tensor permuted per head, cut by the
 * partition itself. */
/* Whether rank files hold t reordered (blocked, transposed or rope halves). */
bool tps_target_permuted(const tps_manifest_tensor *t);
/* Whether the copy engine takes t's CRC from the source's order read apart (transposed and
 * rope halves; blocked rows combine their blocks' CRCs). */
bool tps_target_crc_from_source(const tps_manifest_tensor *t);
/* t's blocking or transposition is one tp can carry; else TPS_EINVALID naming t. */
tps_status tps_target_permute_check(const tps_manifest_tensor *t, uint64_t tp, tps_error *err);
/* A rank shape of t as its rank files hold it (swapped when t is transposed). */
void tps_target_file_shape(const tps_manifest_tensor *t, uint64_t *shape);
/* The rank shape as the rank files' headers give it: tps_target_file_shape, then the last two
 * dimensions merged when t is flattened; returns its dimensions. */
int tps_target_header_shape(const tps_manifest_tensor *t, uint64_t *shape);
/* Reads bytes [off, off+len) of an [X, Y, block] array stored [Y, X, block] through rd. */
typedef tps_status (*tps_target_read_fn)(void *ctx, uint64_t off, void *buf, size_t len, tps_error *err);
tps_status tps_target_swap_read(tps_target_read_fn rd, void *ctx, uint64_t off, void *buf, size_t len, uint64_t X,
                                uint64_t Y, uint64_t block, tps_error *err);
/* Bytes [off, off+len) of the global tensor t in the copy engine's order (the view the file
 * partition cuts), read through rd, which gives the source's order. */
tps_status tps_target_view_read(const tps_manifest_tensor *t, uint64_t tp, tps_target_read_fn rd, void *ctx,
                                uint64_t off, void *buf, size_t len, tps_error *err);
/* Adds permuted (blocked or transposed) tensor t's rank slice (shape rs) to a member index vx, read from file at base. */
tps_status tps_target_blocked_member(tps_index *vx, const tps_manifest_tensor *t, uint64_t tp, const uint64_t *rs,
                                     uint32_t file, uint64_t base, tps_error *err);

#endif
