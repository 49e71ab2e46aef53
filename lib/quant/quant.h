/* Quantized checkpoints: what a config.json's quantization_config says about each tensor, as
 * data the partition algebra applies.  Most methods quantize linears, each a logical weight
 * stored as companion tensors whose partitions follow the weight's (lib/quant/scheme.h);
 * a method may instead cut its tensors itself (MXFP4's experts, lib/quant/mxfp4.h).
 *
 * The folder: this face and quant.c (reading a config through the table, a module's scheme,
 * a refusal in the config's words); scheme.h/.c (a linear's companions and their derived
 * partitions); schemes.c (THE table, one line per quant_method); one file per family of
 * schemes (fp8.c, compressed_tensors.c, gptq_awq.c, mxfp4.c); config.c (what the families'
 * readers share); quant_int.h (private: the read config, the table's line).
 *
 * Adding a scheme: a file for its family, whose reader fills a tps_quant (quant_int.h): the
 * schemes of its linears (tps_quant_add_companion: each companion's dimension map and the
 * engine's align), which modules each applies to, the ignore list and a one-line desc; or,
 * when its tensors are not companions of a linear, a cut function.  Then one line in
 * schemes.c's table naming the quant_method it matches, its reader and cut.  A scheme that
 * is a new strategy of an existing family (an NVFP4 group of compressed-tensors) is a case
 * in that family's reader. */
#ifndef TPS_QUANT_H
#define TPS_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/json.h"
#include "../base/status.h"
#include "../partition/partition.h"
#include "scheme.h"

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

/* One line: "fp8 block [128, 128], ignore lm_head". */
const char *tps_quant_describe(const tps_quant *q);

/* The scheme of module (a tensor name without its last component), or NULL when the
 * checkpoint leaves it unquantized (ignore / modules_to_not_convert, or no group targets it). */
const tps_quant_scheme *tps_quant_module(const tps_quant *q, const char *module);

/* The companion tensor name is of a quantized linear (its index in *s's companions, *s its
 * scheme, *module_len the length of its module part), or -1 (*s NULL, or the scheme of a
 * module that holds no such companion).  q may be NULL. */
int tps_quant_tensor(const tps_quant *q, const char *name, const tps_quant_scheme **s, size_t *module_len);

/* When name is a companion of a quantized linear, issue (a refusal of its cut) gets the
 * cut in the logical weight's terms and the scheme's rule as the config names it (qrule,
 * qwdim, qratio, qalign: lib/partition/partition.h), so the refusal speaks of the group size
 * and input features the user knows rather than packed words.  q may be NULL. */
void tps_quant_issue_terms(const tps_quant *q, const char *name, tps_partition_issue *issue);

/* Whether q's method cuts every tensor itself (q may be NULL); then tps_quant_cut gives each
 * tensor's partition, asking rule (with ctx) for the layout's cut of the tensors it follows. */
bool tps_quant_cuts_itself(const tps_quant *q);
tps_status tps_quant_cut(const tps_quant *q, const char *name, tps_dtype dtype, int ndim, const uint64_t *shape,
                         tps_quant_rule_fn rule, void *ctx, tps_partition *out, tps_error *err);

#endif
