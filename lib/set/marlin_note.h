/* A note on a planned set: the GPTQ/AWQ cuts vLLM's Marlin kernels tile poorly. */
#ifndef TPS_MARLIN_NOTE_H
#define TPS_MARLIN_NOTE_H

#include <stdint.h>

#include "../quant/quant.h"
#include "manifest.h"

/* vLLM's Marlin kernels (gptq_marlin, awq_marlin: GPTQ_MARLIN_MIN_THREAD_N / _K) tile a rank's
 * output in 64 columns and its input in 128 rows.  That is a kernel's minimum, not a rule of
 * the checkpoint: newer vLLM pads the tile or falls back to a slower kernel, older vLLM refuses
 * the layer.  So a cut that misses it is legal and only noted. */
#define TPS_MARLIN_MIN_N 64
#define TPS_MARLIN_MIN_K 128

typedef struct tps_marlin_note {
    uint64_t count;    /* GPTQ/AWQ linears with a rank piece of W the Marlin tile misses */
    char example[256]; /* the first one's packed weight (qweight) */
    int wdim;          /* its W dim: 0 output (needs % TPS_MARLIN_MIN_N), 1 input (% _K) */
    uint64_t local;    /* that rank's size of W along wdim */
} tps_marlin_note;

/* Counts the GPTQ/AWQ linears of m (quantized as q says; q NULL: none) whose cut gives some
 * rank a piece of W along the cut dimension that is not a multiple of Marlin's minimum.  Only
 * the dimension tp cuts is looked at: an uncut one is the model's, not the plan's.  Each
 * tensor is looked at on its own, though vLLM tiles fused q/k/v and gate/up by their sum. */
void tps_quant_marlin_note(const tps_quant *q, const tps_manifest *m, tps_marlin_note *out);

#endif
