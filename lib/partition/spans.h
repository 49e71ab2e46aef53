/* Byte spans: the partition algebra turned into byte runs.
 *
 * A tensor cut along dim is a sequence of `outer` slabs (one per index of the dimensions
 * before dim), each slab_bytes long in the global tensor.  Within a slab, each rank's
 * pieces are byte spans; a span is held by one rank, or by several replicas (GQA KV heads,
 * or every rank for a replicated tensor).  A rank's own tensor is, slab by slab, its spans
 * in order followed by pad_bytes of zeros.  Split, reshard, merge, check and verify all
 * walk these spans, so the byte arithmetic lives here once.  Sub-byte dtypes: every span
 * boundary is a whole byte because tps_partition_check refuses cuts inside a byte. */
#ifndef TPS_SPANS_H
#define TPS_SPANS_H

#include <stdint.h>

#include "../base/status.h"
#include "partition.h"

typedef struct tps_span {
    uint64_t begin, end;   /* bytes within a global slab */
    uint32_t owner0;       /* index into tps_spans.owner / owner_offset */
    uint32_t nowners;
} tps_span;

typedef struct tps_spans {
    uint64_t T;
    uint64_t outer;      /* slabs */
    uint64_t slab_bytes; /* global slab size */
    size_t nspans;
    tps_span *span;          /* sorted by begin; they tile [0, slab_bytes) */
    uint32_t *owner;         /* ranks holding each span, ascending */
    uint64_t *owner_offset;  /* where the span starts within that rank's slab */
    uint64_t *rank_slab_bytes; /* per rank */
    uint64_t *rank_pad_bytes;  /* per rank, zeros at the end of each rank slab */
} tps_spans;

/* Builds the spans of a tensor (already validated with tps_partition_check for T). */
tps_status tps_spans_build(const tps_partition *p, tps_dtype dtype, int ndim, const uint64_t *shape, uint64_t T,
                           tps_spans *out, tps_error *err);
void tps_spans_release(tps_spans *s);

/* The span holding byte w of a slab (binary search). */
const tps_span *tps_spans_find(const tps_spans *s, uint64_t w);

#endif
