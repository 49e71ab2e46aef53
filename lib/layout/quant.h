/* Quantized checkpoints (FP8 block, channel and tensor scaled; the integer formats build on it): what a
 * config.json's quantization_config says about each linear, as data the partition algebra
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
#ifndef TPS_QUANT_H
#define TPS_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/buf.h"
#include "../base/json.h"
#include "../base/status.h"
#include "partition.h"
#include "quant_scheme.h"

typedef struct tps_quant tps_quant;

/* Parses config.json's quantization_config (qc NULL: *out NULL, nothing quantized).  what
 * names the file.  Refuses (TPS_EINVALID, with the reason) what cannot be pre-sharded
 * (pre-quantized bitsandbytes, GGUF) and what tpshard does not split yet. */
tps_status tps_quant_from_config(const tps_json *qc, const char *what, tps_quant **out, tps_error *err);
void tps_quant_free(tps_quant *q);

/* The FP8 block [bn, bk] of the first block-scaled scheme into block ({0, 0}: none; q may
 * be NULL). */
void tps_quant_block(const tps_quant *q, uint64_t *block);

/* The bits and GPTQ zero convention of the first integer scheme ({0, false}: none; q may be
 * NULL): carried into verify as the FP8 block is. */
void tps_quant_int_params(const tps_quant *q, unsigned *bits, bool *gptq_v2);

/* Whether the checkpoint is MXFP4 (quant_method "mxfp4": GPT-OSS's experts; q may be NULL). */
bool tps_quant_is_mxfp4(const tps_quant *q);

/* One line: "fp8 block [128, 128], ignore lm_head". */
const char *tps_quant_describe(const tps_quant *q);

/* The scheme of module (a tensor name without its last component), or NULL when the
 * checkpoint leaves it unquantized (ignore / modules_to_not_convert, or no group targets it). */
const tps_quant_scheme *tps_quant_module(const tps_quant *q, const char *module);

/* The companion of s whose suffix ends name after a '.', or -1; *module_len receives the
 * length of the module part of name. */
int tps_quant_companion_of(const tps_quant_scheme *s, const char *name, size_t *module_len);

/* When name is a companion of a quantized linear, issue (a refusal of its cut) gets the
 * cut in the logical weight's terms and the scheme's rule as the config names it (qrule,
 * qwdim, qratio, qalign: lib/layout/partition.h), so the refusal speaks of the group size
 * and input features the user knows rather than packed words.  q may be NULL. */
void tps_quant_issue_terms(const tps_quant *q, const char *name, tps_partition_issue *issue);

/* W's shape from the primary companion's shape (exact: the primary maps every dim of W). */
tps_status tps_quant_logical_shape(const tps_quant_scheme *s, int comp, const char *name, int ndim,
                                   const uint64_t *shape, uint64_t *wshape, tps_error *err);

/* Companion comp's partition from W's (wpart, W's shape wshape), checking the companion's
 * shape against W's; the message names the tensor. */
tps_status tps_quant_derive(const tps_quant_scheme *s, int comp, const tps_partition *wpart, const uint64_t *wshape,
                            const char *name, int ndim, const uint64_t *shape, tps_partition *out, tps_error *err);

#endif
