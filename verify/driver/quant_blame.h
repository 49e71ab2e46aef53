/* A quantized layer's failure traced to the companions of one linear (verify/driver/quant_blame.c). */
#ifndef TPS_VERIFY_DRIVER_QUANT_BLAME_H
#define TPS_VERIFY_DRIVER_QUANT_BLAME_H

#include "../load/source.h"

struct tps_shardset;

/* Appends to det (size dsz) the quantized linears of layer `layer` whose dequantized slice on
 * rank r (source rank) differs from the reference's (ref) at the rows and columns ss's
 * manifest gives r's weight, with their scale / zero tensors.  Nothing when none does. */
tps_status tps_vquant_blame(const tps_block *b, uint64_t layer, uint64_t T, uint64_t r, const tps_vsource *ref,
                            const tps_vsource *rank, const struct tps_shardset *ss, char *det, size_t dsz,
                            tps_error *err);

#endif
