/* Tensors that are not plain file ranges: a strided, possibly byte-swapped, possibly
 * deflated view of stored elements, read on demand through tps_reader_ops.
 *
 * Used by the torch and NumPy readers for what their fast path cannot give as a plain
 * range (index.h): torch views with non-C-order strides, Fortran-order .npy arrays,
 * big-endian data (byte-swapped per element; per component for complex types), and
 * deflated .npz members or re-zipped torch records.
 *
 * Element e of the tensor, with multi-index (i_0 .. i_{n-1}) in C order, is the esize bytes
 * at byte (elem0 + sum i_k * stride_k) * esize of the source, where the source is either a
 * zip entry's uncompressed data or (zip NULL) the file ix->files[file] from byte base.
 *
 * Reading gathers through bounded buffers: the output is produced in chunks of at most
 * 1 MiB, and for each chunk the source span it touches is read in blocks of at most
 * 16 MiB, each block scattering the elements it holds.  Memory stays bounded whatever the
 * tensor size; the cost is the source span re-read per output chunk, which is 1x for
 * contiguous and Fortran-order data of a small second dimension and up to
 * (tensor bytes / 1 MiB)x for a large transposed matrix.  Deflated sources add the
 * inflate cursor's cost (zip.h). */
#ifndef TPS_VIEW_H
#define TPS_VIEW_H

#include "../lib/base/index.h"
#include "zip.h"

typedef struct tps_view {
    tps_zip *zip;                /* NULL: a plain file range */
    const tps_zip_entry *entry;  /* with zip */
    uint32_t file;               /* without zip: index into ix->files */
    uint64_t base;               /* byte offset of storage element 0 in the entry or file */
    unsigned esize;              /* bytes per element */
    unsigned swap;               /* 0: little-endian; else byte-swap units of this many bytes */
    uint64_t elem0;              /* storage offset of the tensor's first element, in elements */
    int ndim;
    uint64_t shape[TPS_MAX_DIMS];
    uint64_t stride[TPS_MAX_DIMS]; /* in elements */
} tps_view;

/* The reader state of an index whose tensors may carry views: owns its archives and views. */
typedef struct tps_view_state {
    tps_zip **zips;
    size_t nzips, zips_cap;
    tps_view **views;
    size_t nviews, views_cap;
} tps_view_state;

/* read: the view of t->reader_data; release: frees a tps_view_state. */
extern const tps_reader_ops tps_view_ops;

/* Installs an empty tps_view_state and tps_view_ops into ix. */
tps_status tps_view_state_init(tps_index *ix, tps_error *err);
/* Hands z to ix's view state (freed with the index), or frees it on failure. */
tps_status tps_view_state_add_zip(tps_index *ix, tps_zip *z, tps_error *err);
/* A copy of v owned by ix's view state, for use as reader_data. */
tps_status tps_view_state_add(tps_index *ix, const tps_view *v, const tps_view **out, tps_error *err);

/* True when v's C-order little-endian bytes are one plain range of a stored source: C
 * contiguous strides (sizes of 1 and empty tensors ignored) and no swap. */
bool tps_view_is_plain(const tps_view *v);

/* C-order strides of shape (in elements). */
void tps_view_c_strides(tps_view *v);

tps_status tps_view_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len, tps_error *err);

#endif
