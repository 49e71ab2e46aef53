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

#include "../lib/base/index.h"
#include "../lib/set/sink.h"

#define TPS_ST_MAX_HEADER 100000000ull

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
 * order given, data packed back to back in that order, header padded with spaces to a
 * multiple of 8); then the caller streams exactly the data bytes in that order.  The file
 * is created as a temporary sibling (O_EXCL, never following a symlink) and only
 * renamed to path by commit, after fsync.  With a NULL path nothing is written: the writer
 * only counts and checksums, giving the size and CRC the file would have (split
 * --only-rank uses it so every node writes the same manifest). */
typedef tps_sink_tensor tps_st_entry;

typedef struct tps_st_writer tps_st_writer;

tps_status tps_st_writer_open(const char *path, const tps_st_entry *entries, size_t n, const tps_kv *meta,
                              size_t nmeta, tps_st_writer **out, tps_error *err);
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

/* The writer above as the copy engine's sink (lib/set/sink.h): what split, reshard and merge
 * hand the engine. */
extern const tps_sink tps_safetensors_sink;

#endif
