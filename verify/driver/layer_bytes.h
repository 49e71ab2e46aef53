/* How many bytes of weights each layer verify runs has: the tensors of the set's manifest
 * whose names start with the layer's prefix (tps_verify_layer_prefix), so a progress line
 * can count verified bytes rather than layers of unequal size. */
#ifndef TPS_VERIFY_LAYER_BYTES_H
#define TPS_VERIFY_LAYER_BYTES_H

#include <stdint.h>

#include "lib/set/manifest.h"

/* Adds to bytes[i] (zeroed by the caller) the bytes of m's tensors under prefix[i], for i
 * below count; a NULL prefix counts nothing.  Out of memory, the counts stay zero. */
void tps_vdriver_layer_bytes(const tps_manifest *m, char *const *prefix, uint64_t count, uint64_t *bytes);

#endif
