/* A read-only ZIP reader for the containers of torch.save archives and NumPy .npz files.
 *
 * Byte layout (PKWARE's APPNOTE.TXT, section 4.3; all integers little-endian):
 *   [local header 30 B + name + extra][data][data descriptor, when flag bit 3] ... per entry
 *   central directory: per entry 46 B + name + extra + comment
 *     @8 flags @10 method @16 crc32 @20 csize @24 usize @28 name_len @30 extra_len
 *     @32 comment_len @34 disk @42 local header offset
 *   [ZIP64 end record 56 B][ZIP64 locator 20 B]   (optional; torch always writes them)
 *   end of central directory 22 B + comment: @8/@10 entries @12 cd size @16 cd offset
 * A field saturated at 0xFFFF/0xFFFFFFFF takes its value from the ZIP64 record or the
 * entry's ZIP64 extra field (id 0x0001, values only for the saturated fields, in the order
 * usize, csize, local offset, disk).
 *
 * What opening checks (§5.4, §6.5): the last valid end record in the final 65,557 bytes;
 * one disk; the central directory exactly fills the space up to the end records and holds
 * exactly the announced entries; per entry the signature, bounded extras, no encryption
 * (flag bits 0, 6, 13) or patched data (bit 5), method stored or deflate, stored
 * csize == usize, a safe relative name (no leading '/', no '\', no ".." component, no NUL,
 * not empty), no duplicate names; per local header the signature and the same name; the
 * data starts after the LOCAL name and extra (torch pads with a local-only "FB" extra) and
 * ends before the next entry's local header and before the central directory, so entries
 * never overlap.  Local sizes and CRCs are never trusted (bit 3 leaves them 0; torch's
 * local ZIP64 extra carries a bogus csize): sizes come from the central directory.
 *
 * Reading: stored entries are plain ranges of the file (data_ofs, usize), which callers
 * read in place.  Deflated entries are inflated by a streaming cursor (one per archive,
 * guarded by a mutex, 64 KiB input buffer): sequential reads continue where the last one
 * stopped; a read at an earlier offset or of another entry restarts that entry's stream
 * from its beginning, which costs re-inflating the prefix.  Output is capped at the
 * declared usize: a stream that would produce more is refused (a zip bomb cannot grow
 * memory or output), and one that ends short, or does not end exactly at csize, is refused.
 *
 * CRC-32 (zlib, the PKZIP polynomial): tps_zip_verify recomputes an entry's CRC, streaming,
 * and compares it with the central value; the inflating cursor also checks it whenever a
 * read reaches the end of the entry.  A central CRC of 0 on a non-empty entry is a
 * mismatch, unless the archive was opened with TPS_ZIP_CRC_ZERO_IS_ABSENT: torch writers
 * run with torch.serialization.set_crc32_options(False) store 0, and torch's own reader
 * never checks CRCs, so for torch archives 0 means "not recorded" and the check is skipped
 * (such entries are counted in crc_absent). */
#ifndef TPS_ZIP_H
#define TPS_ZIP_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/base/status.h"

#define TPS_ZIP_STORED 0
#define TPS_ZIP_DEFLATE 8

/* Record signatures and fixed lengths (APPNOTE 4.3), shared with the writer (zip_write.h). */
#define TPS_ZIP_SIG_LOCAL 0x04034b50u
#define TPS_ZIP_SIG_CENTRAL 0x02014b50u
#define TPS_ZIP_SIG_EOCD 0x06054b50u
#define TPS_ZIP_SIG_Z64_EOCD 0x06064b50u
#define TPS_ZIP_SIG_Z64_LOC 0x07064b50u
#define TPS_ZIP_SIG_DESCRIPTOR 0x08074b50u
#define TPS_ZIP_LOCAL_LEN 30u
#define TPS_ZIP_CENTRAL_LEN 46u
#define TPS_ZIP_EOCD_LEN 22u
#define TPS_ZIP_Z64_EOCD_LEN 56u
#define TPS_ZIP_Z64_LOC_LEN 20u
#define TPS_ZIP_EXTRA_ZIP64 0x0001u

/* Open flags. */
#define TPS_ZIP_CRC_ZERO_IS_ABSENT 1u

/* The size up to which the readers of archives (torch.h, npy.h) check every entry's CRC at
 * open; a larger file's big entries are left to the caller (re-reading them at open would
 * double the cost of a split). */
#define TPS_EAGER_CRC_MAX (256ull << 20)

typedef struct tps_zip_entry {
    char *name; /* NUL-terminated; checked to hold no NUL */
    uint16_t flags;
    uint16_t method;
    uint32_t crc;
    uint64_t csize, usize;
    uint64_t local_ofs;
    uint64_t data_ofs; /* offset of the (compressed) data in the archive (the file, or the window), from the local header */
} tps_zip_entry;

typedef struct tps_zip tps_zip;

/* Reads and validates the archive structure of the open file fd (size bytes, named path
 * in messages; both borrowed and kept).  Entries stay in central-directory order. */
tps_status tps_zip_open(int fd, const char *path, uint64_t size, unsigned flags, tps_zip **out, tps_error *err);

/* The same for an archive that occupies bytes [base, base + size) of the file (the file
 * must hold them): every offset the archive records, and every entry's data_ofs, is then
 * relative to base, and no byte outside the window is read. */
tps_status tps_zip_open_window(int fd, const char *path, uint64_t base, uint64_t size, unsigned flags, tps_zip **out,
                               tps_error *err);

/* Replaces the open flags (a reader that learns what the archive is after opening it). */
void tps_zip_set_flags(tps_zip *z, unsigned flags);

size_t tps_zip_count(const tps_zip *z);
const tps_zip_entry *tps_zip_entry_at(const tps_zip *z, size_t i);
/* Exact name match; NULL if absent. */
const tps_zip_entry *tps_zip_find(const tps_zip *z, const char *name);
/* Entries whose central CRC was 0 and not checked (TPS_ZIP_CRC_ZERO_IS_ABSENT). */
size_t tps_zip_crc_absent(const tps_zip *z);

/* Bytes [off, off+len) of e's uncompressed data.  Thread-safe. */
tps_status tps_zip_read(tps_zip *z, const tps_zip_entry *e, uint64_t off, void *buf, size_t len, tps_error *err);

/* The whole entry into a new NUL-terminated buffer (*len bytes before the NUL), refusing
 * entries over max bytes (for small records: data.pkl, version, .npy headers). */
tps_status tps_zip_read_all(tps_zip *z, const tps_zip_entry *e, uint64_t max, char **out, size_t *len,
                            tps_error *err);

/* Streams the whole entry and checks its CRC-32 (and, for deflate, its exact sizes). */
tps_status tps_zip_verify(tps_zip *z, const tps_zip_entry *e, tps_error *err);

void tps_zip_free(tps_zip *z);

#endif
