/* What merge writes: a shard set's tensors whole, at tp 1, padding stripped. */
#ifndef TPS_UNSHARDED_H
#define TPS_UNSHARDED_H

#include "manifest.h"

/* A manifest of src's tensors, in src's order, each replicated at tp 1 with its global
 * (unpadded) shape and src's CRC: what the copy engine needs to write the merged
 * checkpoint.  It describes no files yet and is never published. */
tps_status tps_manifest_unsharded(const tps_manifest *src, tps_manifest **out, tps_error *err);

#endif
