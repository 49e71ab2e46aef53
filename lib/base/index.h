/* The tensor index: what a format reader produces and everything downstream consumes.
 *
 * A checkpoint (one file, a Hugging Face multi-file set, a torch archive, an npz, or one
 * rank file of a shard set) opens as one tps_index: its source files, each tensor's name,
 * dtype, shape and byte source, and the checkpoint's string metadata.  A tensor's bytes
 * are, in C order, little-endian:
 *   - either the plain range [offset, offset + nbytes) of files[file] (reader_data NULL),
 *     which the copy engine reads with pread;
 *   - or produced on demand by the reader's read hook (reader_data non-NULL), for sources
 *     that need a gather, a byte swap or decompression (torch strides, big-endian archives,
 *     deflated npz members).
 * Tensor names are unique (duplicates are refused when added), non-empty is not required,
 * but an embedded NUL is refused. */
#ifndef TPS_INDEX_H
#define TPS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

#define TPS_MAX_DIMS 16

typedef struct tps_source_file {
    char *path;
    int fd;        /* opened O_RDONLY; never written */
    uint64_t size; /* at open time; readers check every range against it */
} tps_source_file;

typedef struct tps_tensor {
    char *name;
    tps_dtype dtype;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS];
    uint64_t nelem;
    uint64_t nbytes;
    uint32_t file;           /* index into tps_index.files */
    uint64_t offset;         /* absolute file offset of the first byte (plain range) */
    const void *reader_data; /* NULL for a plain range; the reader's own description otherwise */
} tps_tensor;

typedef struct tps_kv {
    char *key;
    char *value;
} tps_kv;

struct tps_index;

/* A hash of the names of an array of records that each hold a `char *name` at the same
 * offset (tensors, manifest tensors, manifest files): what keeps look-ups by name, and
 * the refusal of duplicate names, linear in the record count (MoE checkpoints have 100k+
 * tensors).  It holds record indexes (slot = index + 1, 0 = empty), not pointers, so the
 * array may be reallocated; every call gets the array's current base. */
typedef struct tps_name_hash {
    uint64_t *slot; /* the name's hash in the upper 32 bits, the record index + 1 in the lower */
    size_t cap; /* a power of two, or 0 */
    size_t stride, name_off;
} tps_name_hash;

#define TPS_NAME_HASH_INIT(type, field) {NULL, 0, sizeof(type), offsetof(type, field)}

/* Adds record i of base, whose records 0..i-1 were all added before.  *dup is set to the
 * index of an earlier record with the same name (then nothing is added) or to SIZE_MAX.
 * False only when out of memory or past 2^32 - 2 records (the hash is left as it was). */
bool tps_name_hash_add(tps_name_hash *h, const void *base, size_t i, size_t *dup);
/* The index of the record named name, or SIZE_MAX. */
size_t tps_name_hash_find(const tps_name_hash *h, const void *base, const char *name);
void tps_name_hash_free(tps_name_hash *h);

/* What a reader plugs into an index for tensors that are not plain byte ranges. */
typedef struct tps_reader_ops {
    /* Fill buf with bytes [off, off+len) of tensor t's C-order little-endian data. */
    tps_status (*read)(const struct tps_index *ix, const tps_tensor *t, uint64_t off, void *buf,
                       size_t len, tps_error *err);
    /* Free the reader's state; called by tps_index_free. */
    void (*release)(void *state);
} tps_reader_ops;

typedef struct tps_index {
    char *path;         /* what the user named */
    const char *format; /* "safetensors", "safetensors-index", "torch", "npz", "npy" */
    tps_source_file *files;
    size_t nfiles;
    tps_tensor *tensors; /* in the order the reader added them */
    size_t ntensors;
    tps_kv *meta; /* checkpoint-level string metadata (safetensors __metadata__) */
    size_t nmeta;
    const tps_reader_ops *ops; /* may be NULL when every tensor is a plain range */
    void *state;
    /* private: capacities and the name hash */
    size_t tensors_cap, meta_cap, files_cap;
    tps_name_hash names;
} tps_index;

tps_status tps_index_new(const char *path, const char *format, tps_index **out, tps_error *err);

/* Opens path read-only (refusing anything but a regular file) and records its size. */
tps_status tps_index_add_file(tps_index *ix, const char *path, uint32_t *file_id, tps_error *err);

/* Adds a tensor; computes nelem and nbytes with overflow checks (sub-byte types must fill
 * whole bytes), refuses a duplicate name, more than TPS_MAX_DIMS dimensions, and a name
 * with an embedded NUL.  For a plain range (reader_data NULL) also checks that the range
 * lies inside the file.  what names the place for messages (e.g. the file path). */
tps_status tps_index_add_tensor(tps_index *ix, const char *name, size_t name_len, tps_dtype dtype,
                                int ndim, const uint64_t *shape, uint32_t file, uint64_t offset,
                                const void *reader_data, tps_error *err);

/* Room for n more tensors, for a reader that knows its count before adding them: the first
 * reservation of an empty index is exact (a rank file of 50,000 tensors gets 50,000 slots,
 * not the next power of two), later ones grow as adding does.  False when out of memory. */
bool tps_index_reserve(tps_index *ix, size_t n);

/* Adds key=value metadata; refuses a duplicate key. */
tps_status tps_index_add_meta(tps_index *ix, const char *key, const char *value, tps_error *err);

const tps_tensor *tps_index_find(const tps_index *ix, const char *name);
const char *tps_index_meta(const tps_index *ix, const char *key); /* NULL if absent */

/* Reads bytes [off, off+len) of t's data; fails with TPS_EINVALID when the range is outside
 * the tensor and TPS_EIO when the file is short or unreadable. */
tps_status tps_tensor_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf,
                           size_t len, tps_error *err);

/* Plain pread loop: all of [off, off+len) or an error naming the file and offset. */
tps_status tps_pread_full(int fd, const char *path, uint64_t off, void *buf, size_t len, tps_error *err);

/* The whole of the regular file path, at most max bytes (more: TPS_EINVALID saying "more
 * than the MAX bytes WHAT may have"), into *text (malloc'd, NUL-terminated) and *len. */
tps_status tps_read_file(const char *path, uint64_t max, const char *what, char **text, size_t *len, tps_error *err);

/* "[4096, 11008]" into buf (always NUL-terminated). */
void tps_shape_str(const uint64_t *shape, int ndim, char *buf, size_t bufsize);

void tps_index_free(tps_index *ix);

/* The keys every JSON description of a tensor starts with (inspect --json, the manifest):
 * "name", "dtype" and "shape", written into the object w has open. */
struct tps_jw;
void tps_jw_tensor_head(struct tps_jw *w, const char *name, tps_dtype dtype, int ndim, const uint64_t *shape);

/* Adds one file's tensors to an index: a format's reader (formats/ has them; the caller
 * hands one in, so lib/ depends on no format). */
typedef tps_status (*tps_file_reader_fn)(tps_index *ix, const char *path, tps_error *err);

#endif
