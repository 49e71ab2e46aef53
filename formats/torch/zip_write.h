/* A streaming ZIP writer for torch.save archives: stored entries, written as PyTorch's
 * writer (caffe2/serialize/inline_container.cc over miniz) writes them.
 *
 * Byte layout (PKWARE's APPNOTE.TXT 4.3; zip.h has the reader's view), per entry:
 *   local header 30 B: "PK\3\4", version 0 (45 for a ZIP64 entry), flags 0x0808 (bit 3:
 *     CRC and sizes follow the data; bit 11: UTF-8 name), method 0 (stored), time/date 0,
 *     CRC 0, sizes 0 (0xFFFFFFFF for a ZIP64 entry), name length, extra length;
 *   name; extra: [ZIP64 extra 0x0001: usize, csize (8 B each), for a ZIP64 entry] then
 *     torch's "FB" field (id 'F','B', 2-byte length, that many 'Z' bytes) sized so the data
 *     starts on a 64-byte boundary (torch's getPadding; the field is there even when 0);
 *   the data, streamed;
 *   data descriptor "PK\7\8", CRC-32, csize, usize (8 B each for a ZIP64 entry, else 4).
 * Then the central directory (46 B + name + [ZIP64 extra with the saturated fields in the
 * order usize, csize, local offset] per entry; no FB field), the ZIP64 end record and
 * locator (always, as miniz writes them), and the end record, its fields saturated to
 * 0xFFFF/0xFFFFFFFF when a value does not fit.
 *
 * An entry is ZIP64 when its size or local header offset is at least 0xFFFFFFFF, or when
 * the archive was opened with force_zip64 (every entry then carries its sizes and offset
 * in ZIP64 extras, and the end record is saturated): a test hook for the >4 GiB path.
 * Sizes are declared when an entry begins, so a record's length is checked as it streams;
 * the CRC is computed while streaming (or combined from the caller's, lib/set/sink.h). */
#ifndef TPS_ZIP_WRITE_H
#define TPS_ZIP_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../lib/base/status.h"
#include "../outfile.h"

#define TPS_ZIPW_ALIGN 64

typedef struct tps_zipw tps_zipw;

/* path NULL: a counting archive (outfile.h), label naming it in messages. */
tps_status tps_zipw_open(const char *path, const char *label, bool force_zip64, tps_zipw **out, tps_error *err);

/* An archive written into out from its current end (several archives one after another in
 * one file, as a DCP .distcp holds its chunks): offsets count from the archive's first
 * byte, tps_zipw_commit writes the end records without committing out, and neither it nor
 * tps_zipw_abort closes out, which stays the caller's. */
tps_status tps_zipw_open_in(tps_outfile *out, tps_zipw **z, tps_error *err);

/* Starts a stored entry of size bytes (the previous one must have ended). */
tps_status tps_zipw_begin(tps_zipw *z, const char *name, uint64_t size, tps_error *err);
/* Streams bytes of the current entry; crc is theirs when have_crc. */
tps_status tps_zipw_data(tps_zipw *z, const void *p, size_t n, bool have_crc, uint32_t crc, tps_error *err);
/* One run of bytes streamed through a sequence of n entries, one per tensor: in one archive
 * (the torch sink) or in an archive each (the DCP sink).  The sink embeds it first in its
 * file and sets z (holding entry cur's open record), n, label and next. */
typedef struct tps_zipw_run {
    tps_zipw *z;
    size_t cur, n; /* the entry being streamed (n: all written) */
    bool failed;   /* a write failed: every later one is refused */
    char *label;   /* the file, in messages */
    /* Entry cur is complete and ended: advance cur and begin the next entry (on z, or on a
     * new archive put in z), if any. */
    tps_status (*next)(struct tps_zipw_run *r, tps_error *err);
} tps_zipw_run;

/* Streams buf[0, len) into r's entries in order, calling next at each entry's end; crc is the
 * CRC-32 of the bytes when have_crc (split between entries with crc32_combine).  More bytes
 * than the entries hold is TPS_EINVALID; any failure makes r refuse later writes. */
tps_status tps_zipw_run_write(tps_zipw_run *r, const void *buf, size_t len, bool have_crc, uint32_t crc, tps_error *err);

/* Ends the current entry (all its declared bytes written) with its data descriptor. */
tps_status tps_zipw_end(tps_zipw *z, tps_error *err);
/* begin + data + end of a small record held in memory. */
tps_status tps_zipw_record(tps_zipw *z, const char *name, const void *p, size_t n, tps_error *err);

/* Bytes of the current entry still to come (0 when none is open). */
uint64_t tps_zipw_left(const tps_zipw *z);

/* Writes the central directory and end records and commits the file (outfile.h); fills
 * the whole file's CRC-32 and size (of an archive opened in a file: the file's so far).
 * Frees z in every case. */
tps_status tps_zipw_commit(tps_zipw *z, uint32_t *crc, uint64_t *size, tps_error *err);

/* Removes what was written and frees z; accepts NULL. */
void tps_zipw_abort(tps_zipw *z);

#endif
