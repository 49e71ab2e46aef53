/* A checkpoint file being written, as every streaming writer (safetensors, torch) makes it:
 * sequential buffered output into a hidden temporary sibling ".NAME.tmp.PID" (O_EXCL, never
 * following a symlink), renamed onto its name only by commit after fsync (and the
 * directory synced), so a file appears complete under its name or not at all.  Every byte
 * put is counted and folded into a running CRC-32 (zlib's), which is the whole file's CRC
 * at commit.  A NULL path opens a counting file: nothing is written, only the size and
 * CRC the file would have (lib/set/sink.h). */
#ifndef TPS_OUTFILE_H
#define TPS_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/base/status.h"

typedef struct tps_outfile tps_outfile;

/* path NULL: a counting file; label then names it in messages. */
tps_status tps_outfile_open(const char *path, const char *label, tps_outfile **out, tps_error *err);

/* Appends p[0, n); crc is the CRC-32 of those bytes when have_crc (then the running CRC is
 * extended with crc32_combine instead of a pass over the bytes).  After a failed write the
 * file is marked failed and only abort is useful. */
tps_status tps_outfile_put(tps_outfile *f, const void *p, size_t n, bool have_crc, uint32_t crc, tps_error *err);

uint64_t tps_outfile_size(const tps_outfile *f); /* bytes put so far */
uint32_t tps_outfile_crc(const tps_outfile *f);  /* CRC-32 of those bytes */
bool tps_outfile_failed(const tps_outfile *f);
const char *tps_outfile_name(const tps_outfile *f); /* the path, or the label of a counting file */

/* Flushes, fsyncs, renames onto the path and syncs the directory (a counting file does
 * nothing).  Does not free f: abort it afterwards in every case (after a successful commit
 * abort removes nothing). */
tps_status tps_outfile_commit(tps_outfile *f, tps_error *err);

/* Removes the temporary file unless committed, and frees f; accepts NULL. */
void tps_outfile_abort(tps_outfile *f);

#endif
