/* A quantized linear's companion scheme as data (the companions, their dimension maps and the
 * scheme's align: lib/layout/quant.h says what each means), and the one way to build it.
 * quant.c (FP8, compressed-tensors) and quant_int.c (GPTQ, AWQ) both fill schemes. */
#ifndef TPS_QUANT_SCHEME_H
#define TPS_QUANT_SCHEME_H

#include <stdbool.h>
#include <stdint.h>

#define TPS_QUANT_MAX_COMPANIONS 8

typedef struct tps_quant_companion {
    char suffix[24];  /* the tensor is MODULE.<suffix> */
    int ndim;         /* 0: any shape of one element (a per-tensor scalar, [] or [1]) */
    int wdim[2];      /* per companion dim: W's dim (0 out, 1 in), or -1 */
    uint64_t ratio[2];
    bool primary;     /* its shape gives W's shape (the FP8 weight; GPTQ's qweight) */
    bool replicate_in; /* a cut of W's input dim (row-parallel) replicates it (GPTQ act-order) */
} tps_quant_companion;

typedef struct tps_quant_scheme {
    char name[64]; /* "fp8 block [128, 128]", "fp8 channel", ... */
    int ncomp;
    tps_quant_companion comp[TPS_QUANT_MAX_COMPANIONS];
    uint64_t align[2];       /* W's out, in: a rank's piece is a multiple of this at tp > 1 */
    uint64_t block[2];       /* FP8 block [bn, bk] (0: not block-scaled) */
    /* GPTQ/AWQ: bits of the packed values (0: not integer-quantized), and GPTQ's zero
     * convention: checkpoint_format gptq_v2 stores the zero, gptq (v1) zero - 1 */
    unsigned int_bits;
    bool gptq_v2;
} tps_quant_scheme;

/* Appends a companion to s (at most TPS_QUANT_MAX_COMPANIONS; the formats' fixed lists stay
 * below it): MODULE.<suffix>, of ndim dims, companion dim d following W's dim wd with ratio rd. */
void tps_quant_add_companion(tps_quant_scheme *s, const char *suffix, int ndim, int w0, uint64_t r0, int w1,
                             uint64_t r1, bool primary, bool replicate_in);

#endif
