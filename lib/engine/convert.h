/* dtype conversion while splitting (split --dtype bf16|f16|f32).
 *
 * A converting reader sits between the source reader and the copy engine: the manifest's
 * tensors are switched to the target dtype (shape unchanged, nbytes recomputed), and each
 * read of target bytes [off, off+len) reads the matching source elements and converts them,
 * rounding to nearest even (NaN stays NaN, overflow becomes infinity, as torch's .to() does).
 * Only floating sources convert (F16, BF16, F32, F64); an integer, bool, complex or float8
 * tensor is refused with its name and dtype, since a cast would silently change what the
 * weights mean (quantized values, scales' encodings).  Tensors already in the target dtype
 * pass through untouched. */
#ifndef TPS_CONVERT_H
#define TPS_CONVERT_H

#include "../base/dtype.h"
#include "../base/status.h"
#include "../set/manifest.h"
#include "cut.h"

typedef struct tps_convert tps_convert;

/* Parses a CLI dtype name: "bf16", "f16"/"fp16", "f32"/"fp32" (case-insensitive). */
bool tps_convert_parse_dtype(const char *s, tps_dtype *out);

/* Prepares conversion of every tensor of m to `to`, rewriting m's dtypes and sizes; reads go
 * to inner(inner_ctx, ...) in the source dtypes.  Refuses (TPS_EINVAL) the first tensor
 * that cannot convert. */
tps_status tps_convert_begin(tps_manifest *m, tps_dtype to, tps_global_read_fn inner, void *inner_ctx,
                             tps_convert **out, tps_error *err);

/* A tps_global_read_fn: ctx is the tps_convert. */
tps_status tps_convert_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err);

void tps_convert_free(tps_convert *cv);

#endif
