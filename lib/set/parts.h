/* Grouping a set's tensors into part files under a size cap (split --max-shard-size). */
#ifndef TPS_PARTS_H
#define TPS_PARTS_H

#include <stddef.h>
#include <stdint.h>

/* Groups n tensors of bytes[i] bytes, in order, into parts: a new part whenever the next
 * tensor would take the current one past max (0: no cap, one part); a tensor larger than
 * max gets a part of its own.  first (n + 2 entries) receives each part's first tensor and
 * first[*nparts] = n; there is always at least one part. */
void tps_parts_greedy(const uint64_t *bytes, size_t n, uint64_t max, size_t *first, size_t *nparts);

#endif
