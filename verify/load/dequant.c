/* FP8 weights dequantized as they are loaded: each party (the reference from the source, a
 * rank from its own slices) multiplies its F8 weight by the scale it holds beside it, so a
 * scale on the wrong rank (right shape, wrong rows) gives that rank a wrong weight and the
 * layer's numbers show it.  Scales by shape (fine-grained FP8 and compressed-tensors): one
 * element per tensor; [out, 1] per output channel; [cdiv(out, bn), cdiv(in, bk)] per block,
 * with the block of config.json's quantization_config (tps_block.fp8_block). */
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "dequant.h"
#include "dequant_int.h"
#include "dequant_mxfp4.h"

static uint64_t cdiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

/* The scale tensor beside weight name: NAME_scale_inv (fine-grained FP8) or NAME_scale
 * (compressed-tensors, per-tensor FP8); NULL when there is none. */
static char *scale_name(const tps_vsource *src, const char *name)
{
    static const char *const suffixes[] = {"_scale_inv", "_scale"};
    size_t n = strlen(name);
    for (size_t i = 0; i < 2; i++) {
        char *s = malloc(n + strlen(suffixes[i]) + 1);
        if (!s) return NULL;
        memcpy(s, name, n);
        strcpy(s + n, suffixes[i]);
        if (src->has(src->ctx, s)) return s;
        free(s);
    }
    return NULL;
}

tps_status tps_vdequant(const tps_block *b, const tps_vsource *src, tps_vt *w, tps_error *err)
{
    if ((w->dtype != TPS_DT_F8_E4M3 && w->dtype != TPS_DT_F8_E5M2) || w->ndim != 2 || !w->name) return TPS_OK;
    char *sn = scale_name(src, w->name);
    if (!sn) return TPS_OK;
    tps_vt s;
    memset(&s, 0, sizeof s);
    tps_status st = src->load(src->ctx, sn, &s, err);
    float *out = NULL;
    if (st != TPS_OK) goto cleanup;
    uint64_t rows = w->shape[0], cols = w->shape[1], bn = 0, bk = 0, sc = 1;
    if (s.nelem == 1) {
        bn = rows, bk = cols; /* one block: the whole tensor */
    } else if (s.ndim == 2 && s.shape[1] == 1 && s.shape[0] == rows && !(b->fp8_block[0] && cols > b->fp8_block[1])) {
        bn = 1, bk = cols;
    } else if (s.ndim == 2 && b->fp8_block[0] && s.shape[0] == cdiv(rows, b->fp8_block[0]) &&
               s.shape[1] == cdiv(cols, b->fp8_block[1])) {
        bn = b->fp8_block[0], bk = b->fp8_block[1];
        sc = s.shape[1];
    } else {
        char ws[96], ss[96];
        tps_shape_str(w->shape, w->ndim, ws, sizeof ws);
        tps_shape_str(s.shape, s.ndim, ss, sizeof ss);
        st = tps_fail(err, TPS_EINVALID, "%s: scale shape %s does not fit the FP8 weight %s (per tensor, per "
                      "channel, or blocks of %llu x %llu)", sn, ss, ws, (unsigned long long)b->fp8_block[0],
                      (unsigned long long)b->fp8_block[1]);
        goto cleanup;
    }
    size_t n;
    if (!tps_u64_to_size(w->nelem, &n) || !(out = malloc((n ? n : 1) * sizeof *out))) {
        st = tps_fail_oom(err, "a dequantized weight");
        goto cleanup;
    }
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++) {
            double v = 0, scale = 0;
            tps_dtype_to_f64(w->dtype, w->data, (size_t)(r * cols + c), &v);
            tps_dtype_to_f64(s.dtype, s.data, (size_t)((r / bn) * sc + c / bk), &scale);
            out[r * cols + c] = (float)(v * scale);
        }
    free(w->data);
    w->data = out;
    w->dtype = TPS_DT_F32;
    out = NULL;
cleanup:
    free(out);
    free(sn);
    tps_vt_release(&s);
    return st;
}

tps_status tps_vload_weight(const tps_block *b, const tps_vsource *src, const char *name, tps_vt *out, tps_error *err)
{
    bool dequantized = false;
    tps_status st = b->mxfp4 ? tps_vload_mxfp4(src, name, out, &dequantized, err) : TPS_OK;
    if (st == TPS_OK && !dequantized) st = tps_vload_int(b, src, name, out, &dequantized, err);
    if (st == TPS_OK && !dequantized) st = src->load(src->ctx, name, out, err);
    if (st == TPS_OK && !dequantized) st = tps_vdequant(b, src, out, err);
    return st;
}
