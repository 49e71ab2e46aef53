/* Partitions stored once: a manifest's tensors point into a pool that holds each distinct
 * partition one time (issue 27: most of a model's tensors share a handful of cuts, and a
 * partition record is 344 bytes, more than half of a manifest tensor's).  A pooled
 * partition is immutable and lives as long as the pool; a change is a new partition
 * interned in its place.  A partition pool is a pool (lib/base/pool.h says the rest:
 * blocks, reference counts, threads) whose items are partitions. */
#ifndef TPS_PARTPOOL_H
#define TPS_PARTPOOL_H

#include <stddef.h>

#include "../base/pool.h"
#include "partition.h"

typedef tps_pool tps_partpool;

tps_partpool *tps_partpool_new(void); /* one reference; NULL when out of memory */
static inline tps_partpool *tps_partpool_ref(tps_partpool *p) { return tps_pool_ref(p); }
static inline void tps_partpool_unref(tps_partpool *p) { tps_pool_unref(p); } /* accepts NULL */
/* The pool's copy of part (an equal one already pooled, or a new one); NULL when out of
 * memory.  Equal: every field, and all TPS_MAX_SEGMENTS segments, the same. */
const tps_partition *tps_partpool_intern(tps_partpool *p, const tps_partition *part);
/* How many distinct partitions the pool holds. */
static inline size_t tps_partpool_count(const tps_partpool *p) { return tps_pool_count(p); }

#endif
