/* The LM head by vocabulary chunks (issue 36): the reference's float64 logits and a rank's
 * float32 ones from a source's rows (tps_vsource.rows), so that a 1 GiB head costs one chunk
 * of memory on each party instead of the head and its widened copy. */
#ifndef TPS_VERIFY_DRIVER_HEAD_ROWS_H
#define TPS_VERIFY_DRIVER_HEAD_ROWS_H

#include "../load/source.h"
#include "../ranks/device.h"

/* Whether src can hand out head `name` by rows: a plain float matrix (a quantized head, FP8
 * with a scale or a GPTQ/AWQ qweight, is dequantized whole, as it is loaded). */
bool tps_vhead_streams(const tps_vsource *src, const char *name);

/* What streaming a head found: its rows and columns, and the lowest-precision dtype. */
typedef struct vhead_seen {
    uint64_t rows, cols;
    tps_dtype dtype;
} vhead_seen;

/* logits[t * vocab + v] for the n tokens of xn ([n, hidden], float64) from head `name` of
 * src, [vocab, hidden], by chunks.  finite_check: a chunk holding NaN or Inf fails naming
 * the value's place in the whole tensor (a source's; a shard set's reads check themselves).
 * A head of another shape fails (TPS_EINVALID). */
tps_status tps_vhead_ref_logits(const tps_vsource *src, const char *name, uint64_t vocab, uint64_t hidden, size_t n,
                                const double *xn, bool finite_check, double *logits, tps_error *err);

/* A rank's logits y[t * ldy + v] for its `rows` vocabulary rows from its slice `name` of src
 * by chunks, each uploaded to dev and multiplied there when dev is not NULL.  Rows past
 * `rows` or of another width than hidden are not computed; *seen says what the slice held,
 * for the caller's shape check. */
tps_status tps_vhead_rank_logits(const tps_vsource *src, const char *name, uint64_t rows, uint64_t hidden, size_t n,
                                 const float *xn, tps_vdev_rank *dev, float *y, size_t ldy, vhead_seen *seen,
                                 tps_error *err);

/* The embedding's rows that ids pick, by chunks of src's rows, the rest never held: sel
 * becomes [n, hidden] in the embedding's dtype, its row t token t's row when ids[t] - first
 * is one of src's rows (first: the vocabulary row src's row 0 is), and at[t] is t there and
 * n elsewhere (out of sel's rows: tps_vembed gives zeros).  finite_check as for the head (a
 * non-finite value anywhere in the embedding fails).  *seen says what src held; sel->data
 * stays NULL when it held no row of width hidden. */
tps_status tps_vembed_pick(const tps_vsource *src, const char *name, uint64_t first, uint64_t hidden, size_t n,
                           const uint64_t *ids, bool finite_check, tps_vt *sel, uint64_t *at, vhead_seen *seen,
                           tps_error *err);

#endif
