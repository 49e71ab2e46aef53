/* Partitions stored once: a manifest's tensors point into a pool that holds each distinct
 * partition one time (issue 27: most of a model's tensors share a handful of cuts, and a
 * partition record is 344 bytes, more than half of a manifest tensor's).  A pooled
 * partition is immutable and lives as long as the pool; a change is a new partition
 * interned in its place.  The pool is reference-counted, so that a manifest copied at a new
 * tp (lib/set/retarget.h) shares its source's partitions.  Not thread-safe: intern from one
 * thread while no other interns; pooled partitions may be read from any thread. */
#ifndef TPS_PARTPOOL_H
#define TPS_PARTPOOL_H

#include "partition.h"

typedef struct tps_partpool tps_partpool;

tps_partpool *tps_partpool_new(void); /* one reference; NULL when out of memory */
tps_partpool *tps_partpool_ref(tps_partpool *p); /* another reference; returns p */
void tps_partpool_unref(tps_partpool *p);        /* frees it with the last one; accepts NULL */
/* The pool's copy of part (an equal one already pooled, or a new one); NULL when out of
 * memory.  Equal: every field, and all TPS_MAX_SEGMENTS segments, the same. */
const tps_partition *tps_partpool_intern(tps_partpool *p, const tps_partition *part);
/* How many distinct partitions the pool holds. */
size_t tps_partpool_count(const tps_partpool *p);

#endif
