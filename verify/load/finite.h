/* Non-finite weights (NaN, Inf) found while a tensor's bytes stream past.  A layer run on
 * such weights yields NaN on every side, and a comparison of NaNs blames the shards for the
 * checkpoint's own defect; verify reports them as bad input instead (exit 3). */
#ifndef TPS_VERIFY_FINITE_H
#define TPS_VERIFY_FINITE_H

#include <stddef.h>
#include <stdint.h>

#include "../../lib/base/dtype.h"
#include "../../lib/base/index.h"
#include "../math/tensor.h"

typedef struct tps_vfinite {
    tps_dtype dtype;
    size_t esize;            /* 0: a dtype without NaN or Inf (integers): nothing is counted */
    uint64_t count;          /* non-finite elements seen */
    uint64_t first;          /* the lowest element index among them */
    uint64_t next_index;     /* the index of the next whole element fed */
    unsigned char carry[8];  /* an element split between two calls of tps_vfinite_feed */
    size_t carried;
} tps_vfinite;

void tps_vfinite_init(tps_vfinite *f, tps_dtype dt);

/* The next n bytes of the tensor, in order from its first byte on. */
void tps_vfinite_feed(tps_vfinite *f, const void *p, size_t n);

/* "tensor 'NAME' holds C non-finite values (NaN or Inf), the first at [i, j] (element k)"
 * into msg, the index in the tensor's shape. */
void tps_vfinite_describe(const tps_vfinite *f, const char *name, const uint64_t *shape, int ndim, char *msg,
                          size_t size);

/* Why a non-finite weight is bad input, for the messages that report one. */
extern const char tps_vfinite_why[];

/* f filled from a loaded tensor's values (its dtype as loaded: dequantized weights as float). */
void tps_vt_scan(const tps_vt *t, tps_vfinite *f);

/* TPS_EINVALID naming t, where it came from (whose, e.g. "the source") and its first
 * non-finite value when it holds one; TPS_OK otherwise and for an absent tensor. */
tps_status tps_vt_require_finite(const tps_vt *t, const char *whose, tps_error *err);

#endif
