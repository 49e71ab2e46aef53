/* NumPy .npy arrays and .npz archives of them (NEP 1, as numpy.lib.format
 * reads and writes them).
 *
 * .npy byte layout:
 *   @0  "\x93NUMPY"   @6 major (1, 2 or 3)   @7 minor (0)
 *   @8  header length: u16 LE (v1) or u32 LE (v2, v3)
 *   then the header: a Python dict literal, latin1 (v1, v2) or UTF-8 (v3), space-padded,
 *   ending in '\n', e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *   then prod(shape) * itemsize bytes of data, C order or (fortran_order) Fortran order.
 * .npz: a ZIP archive (zip.h) of "<name>.npy" members, stored (np.savez) or deflated
 * (np.savez_compressed); the tensor is named <name>.
 *
 * The header is parsed by a tiny grammar of its own, never evaluated: '{', then entries
 * "'key': value" separated by commas (a trailing comma allowed), '}', then only spaces and
 * the final newline.  Keys are quoted strings; values are a quoted string (no escapes),
 * True/False, or a tuple of decimal ints (an optional Python-2 'L' suffix).  The keys must
 * be exactly 'descr', 'fortran_order' and 'shape', once each.  Anything else (a call, a
 * list, a name) is refused at its byte offset.  The header may be at most
 * TPS_NPY_MAX_HEADER bytes (numpy's own default limit).
 *
 * descr: byte order '<', '|', '=' (little-endian here) or '>' (swapped on read), then
 * b1, i1/i2/i4/i8, u1/u2/u4/u8, f2/f4/f8 or c8.  Object arrays ('O', whose data is a
 * pickle), structured descr lists and other types are refused.  The data must be exactly
 * prod(shape) * itemsize bytes (numpy writes no trailing bytes).
 *
 * C-order little-endian data of a stored member or a plain .npy file is a plain range;
 * Fortran order, '>' byte order and deflated members are views (view.h). */
#ifndef TPS_NPY_H
#define TPS_NPY_H

#include "../../lib/base/index.h"
#include "../zip.h"

#define TPS_NPY_MAX_HEADER 10000u

typedef struct tps_npy_header {
    tps_dtype dtype;
    unsigned esize;
    unsigned swap; /* 0, or the byte-swap unit for '>' data */
    bool fortran;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS];
    uint64_t data_ofs; /* bytes from the start of the .npy to its data */
    uint64_t nbytes;   /* of the data */
} tps_npy_header;

/* Bytes needed to know the header's length (magic, version, length field). */
#define TPS_NPY_PREFIX 12u

/* Parses the header at p (avail bytes, at least TPS_NPY_PREFIX or the whole file if
 * shorter).  When avail is too short for the whole header, fails with TPS_EINVALID unless
 * need is non-NULL, in which case it sets *need to the bytes required and returns TPS_OK
 * with h->data_ofs == 0.  what names the array in messages. */
tps_status tps_npy_parse_header(const unsigned char *p, size_t avail, const char *what, tps_npy_header *h, size_t *need,
                                tps_error *err);

/* One .npy file as an index (format "npy") with one tensor named after the file
 * (basename without ".npy"). */
tps_status tps_npy_open(const char *path, tps_index **out, tps_error *err);

/* Adds every member of the npz archive z (file id file of ix) as a tensor; ix's reader
 * state must be a view state owning z.  Checks every member's CRC when the file is at
 * most TPS_EAGER_CRC_MAX bytes (zip.h). */
tps_status tps_npz_read(tps_index *ix, tps_zip *z, uint32_t file, tps_error *err);

#endif
