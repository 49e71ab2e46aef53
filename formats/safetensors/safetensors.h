/* safetensors: reader (single file and Hugging Face multi-file index) and streaming writer.
 *
 * Byte layout (the "Format" section of the safetensors README, huggingface/safetensors):
 *   offset 0    u64 little-endian N, the header length
 *   offset 8    N bytes of UTF-8 JSON: {"name": {"dtype": "BF16", "shape": [..],
 *               "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
 *   offset 8+N  the data buffer; data_offsets are relative to it, contiguous from 0 with
 *               no gap or overlap, and the last one ends exactly at the end of the file.
 * Every check of the reference reader (safetensors/src/tensor.rs, Metadata::validate) is
 * enforced; unknown keys inside a tensor entry are refused (the JSON schema forbids them). */
#ifndef TPS_SAFETENSORS_H
#define TPS_SAFETENSORS_H

#include <stdint.h>

#include "../../lib/base/index.h"
#include "../../lib/set/sink.h"

#define TPS_ST_MAX_HEADER 100000000ull
/* Where the writer starts a shard file's data buffer: the header is padded with spaces so
 * that 8+N is a multiple of this (the format asks only for 8; spaces after the JSON are
 * valid and the reference reader accepts them).  Page alignment matters for speed: with the data of the
 * files tpshard writes and reads at the same offset within a page, a reshard or merge copies
 * page onto page.  Before, a header 8 bytes longer than its source's (tp 4's shapes have
 * more digits than tp 8's) put every destination 8 bytes past its source within a page,
 * where the kernel's copy runs into 4K aliasing: reshard 8->4 of the bench model took 1.5x
 * split's time with the same bytes.  It also lets a file system share extents
 * (copy_file_range, reflinks), whose offsets must be block-aligned. */
#define TPS_ST_DATA_ALIGN 4096u
/* What the safetensors library pads to: a merged checkpoint keeps that layout, so a merge
 * of a split of a file the library wrote gives back that file byte for byte. */
#define TPS_ST_LIBRARY_ALIGN 8u

/* One safetensors file as an index (format "safetensors"). */
tps_status tps_safetensors_open(const char *path, tps_index **out, tps_error *err);

/* Parses one file's header and adds its file and tensors to ix (multi-file sets use it
 * once per file).  __metadata__ is validated in every file but only the first file's is
 * recorded in ix->meta. */
tps_status tps_safetensors_add_file(tps_index *ix, const char *path, tps_error *err);

/* A Hugging Face index (model.safetensors.index.json) or a directory holding one, as one
 * logical checkpoint (format "safetensors-index").  Every weight_map file must exist, be a
 * plain name in the index's directory, and hold exactly the tensors the map gives it. */
tps_status tps_safetensors_index_open(const char *path, tps_index **out, tps_error *err);

/* Streaming writer.  The header is written first (compact JSON starting with '{',
 * __metadata__ first with "format": "pt" plus the caller's keys, then the tensors in the
 * order given, data packed back to back in that order, header padded with spaces so that
 * the data start at a multiple of data_align: a power of two from TPS_ST_LIBRARY_ALIGN to
 * TPS_ST_DATA_ALIGN); then the caller streams exactly the data bytes in that order.  The
 * file is created as a temporary sibling (O_EXCL, never following a symlink) and only
 * renamed to path by commit, after fsync.  With a NULL path nothing is written: the writer
 * only counts and checksums, giving the size and CRC the file would have (split
 * --only-rank uses it so every node writes the same manifest). */
typedef tps_sink_tensor tps_st_entry;

typedef struct tps_st_writer tps_st_writer;

tps_status tps_st_writer_open(const char *path, const tps_st_entry *entries, size_t n, const tps_kv *meta,
                              size_t nmeta, unsigned data_align, tps_st_writer **out, tps_error *err);
tps_status tps_st_writer_write(tps_st_writer *w, const void *buf, size_t len, tps_error *err);
/* The same, for a caller that already has the CRC-32 of buf (the copy engine's reader thread
 * checksums each chunk): the file's CRC is extended with crc32_combine instead of a second
 * pass over the bytes. */
tps_status tps_st_writer_write_crc(tps_st_writer *w, const void *buf, size_t len, uint32_t crc, tps_error *err);
/* Fails unless exactly the announced bytes were written.  Fills the whole file's CRC-32
 * (zlib) and size when the pointers are non-NULL.  Frees w in every case (on failure the
 * temporary file is removed first), so w must not be used or aborted afterwards. */
tps_status tps_st_writer_commit(tps_st_writer *w, uint32_t *crc, uint64_t *size, tps_error *err);
/* Removes the temporary file and frees w; accepts NULL; safe after a failed write. */
void tps_st_writer_abort(tps_st_writer *w);

/* The writer above as the copy engine's sink (lib/set/sink.h): what split and reshard hand
 * the engine (data on TPS_ST_DATA_ALIGN), and what merge hands it for a checkpoint (data on
 * TPS_ST_LIBRARY_ALIGN, as the safetensors library writes). */
extern const tps_sink tps_safetensors_sink;
extern const tps_sink tps_safetensors_checkpoint_sink;

#endif
