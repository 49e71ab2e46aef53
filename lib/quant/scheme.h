/* A quantized linear as data: the companion scheme every family of lib/quant/ builds (FP8
 * block, channel and tensor scaled; GPTQ and AWQ's packed integers) and the partition algebra
 * applies.
 *
 * A quantized linear X is a logical weight W[out, in] (PyTorch Linear layout) stored as
 * tensors X.<suffix>, its *companions*: the weight itself (FP8), its scales, input scales,
 * and for the integer formats packed words, zero points and group indices.  The layout's
 * rule for the logical name X.weight gives W's partition as for an unquantized model; each
 * companion's partition is derived from it by its dimension map, the way vLLM's parameter
 * classes narrow a checkpoint tensor at load:
 *
 *   companion dim c  <->  W's dim wdim[c], one companion element per ratio[c] elements of
 *                         W there (FP8 block: bn / bk; a group size; a pack factor), or
 *                         wdim -1: no dim of W (a per-channel scale's trailing 1)
 *
 *   W replicated                                  -> the companion is replicated
 *   W split along d, some c has wdim[c] == d      -> split along c, segment lengths and
 *                                                    units divided by ratio[c]
 *   W split along d, none has (or replicate_in
 *   and d is W's input dim 1)                     -> replicated (per-tensor scalars; a
 *                                                    per-channel scale or GPTQ g_idx on a
 *                                                    column-parallel layer; act-order)
 *
 * The scheme's align[d] is the engine's legality rule: at tp > 1 every rank's piece of W
 * along d must be a multiple of align[d] elements (the FP8 block, the group size, the pack
 * factor), so a boundary never falls inside a block, group or packed word.  It travels in
 * the partition (tps_partition.block) of the companion that stores W's dim d unpacked or
 * packed, so plan, reshard and the tp search refuse exactly what the engine refuses.
 * Invariant the companions keep (plan relies on it to list each cause once): a companion's
 * derived partition fits every tp at which the primary companion's fits. */
#ifndef TPS_QUANT_SCHEME_H
#define TPS_QUANT_SCHEME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/dtype.h"
#include "../base/status.h"
#include "../partition/partition.h"

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
    /* A refusal of a cut that follows W's dim 0 or 1, in the config's words ("FP8 block [128,
     * 128]", "GPTQ group size 32"; lib/quant/quant.h: tps_quant_issue_terms); "": the name */
    char rule[2][48];
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

/* The companion of s whose suffix ends name after a '.', or -1; *module_len receives the
 * length of the module part of name. */
int tps_quant_companion_of(const tps_quant_scheme *s, const char *name, size_t *module_len);

/* W's shape from the primary companion's shape (exact: the primary maps every dim of W). */
tps_status tps_quant_logical_shape(const tps_quant_scheme *s, int comp, const char *name, int ndim,
                                   const uint64_t *shape, uint64_t *wshape, tps_error *err);

/* Companion comp's partition from W's (wpart, W's shape wshape), checking the companion's
 * shape against W's; the message names the tensor. */
tps_status tps_quant_derive(const tps_quant_scheme *s, int comp, const tps_partition *wpart, const uint64_t *wshape,
                            const char *name, int ndim, const uint64_t *shape, tps_partition *out, tps_error *err);

/* The layout's rule for a tensor (lib/layout/layout_quant.c passes tps_layout_partition's):
 * what a method that cuts its tensors itself (MXFP4's experts) asks about the tensors whose
 * cut it follows.  ctx is the caller's. */
typedef tps_status (*tps_quant_rule_fn)(void *ctx, const char *name, tps_dtype dtype, int ndim,
                                        const uint64_t *shape, tps_partition *out, tps_error *err);

#endif
