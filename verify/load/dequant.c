/* FP8 weights dequantized as they are loaded: each party (the reference from the source, a
 * rank from its own slices) multiplies its F8 weight by the scale it holds beside it, so a
 * scale on the wrong rank (right shape, wrong rows) gives that rank a wrong weight and the
 * layer's numbers show it.  Scales by shape (fine-grained FP8 and compressed-tensors): one
 * element per tensor; [out, 1] per output channel; [cdiv(out, bn), cdiv(in, bk)] per block,
 * with the block of config.json's quantization_config (tps_block.fp8_block). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../math/vbuf.h"
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

/* The scale beside FP8 weight w in src as a tps_vscale (*q->s NULL: w is not a scaled FP8
 * weight, to be left as it is). */
static tps_status load_scale(const tps_block *b, const tps_vsource *src, const tps_vt *w, tps_vscale *q,
                             tps_error *err)
{
    memset(q, 0, sizeof *q);
    if ((w->dtype != TPS_DT_F8_E4M3 && w->dtype != TPS_DT_F8_E5M2) || w->ndim != 2 || !w->name) return TPS_OK;
    char *sn = scale_name(src, w->name);
    if (!sn) return TPS_OK;
    tps_vt s;
    memset(&s, 0, sizeof s);
    tps_status st = src->load(src->ctx, sn, &s, err);
    if (st != TPS_OK) goto cleanup;
    uint64_t rows = w->shape[0], cols = w->shape[1];
    q->sc = 1;
    if (s.nelem == 1) {
        q->bn = rows ? rows : 1, q->bk = cols ? cols : 1; /* one block: the whole tensor */
    } else if (s.ndim == 2 && s.shape[1] == 1 && s.shape[0] == rows && !(b->fp8_block[0] && cols > b->fp8_block[1])) {
        q->bn = 1, q->bk = cols ? cols : 1;
    } else if (s.ndim == 2 && b->fp8_block[0] && s.shape[0] == cdiv(rows, b->fp8_block[0]) &&
               s.shape[1] == cdiv(cols, b->fp8_block[1])) {
        q->bn = b->fp8_block[0], q->bk = b->fp8_block[1];
        q->sc = s.shape[1];
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
    if (!tps_u64_to_size(s.nelem, &n) || !(q->s = malloc((n ? n : 1) * sizeof *q->s))) {
        st = tps_fail_oom(err, "an FP8 weight's scale");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        q->s[i] = 0;
        tps_dtype_to_f64(s.dtype, s.data, i, &q->s[i]);
    }
cleanup:
    free(sn);
    tps_vt_release(&s);
    return st;
}

/* A non-finite scale makes every weight of its block non-finite: named here, since the
 * check of the weight's raw FP8 bytes does not see it. */
static tps_status require_finite_scale(const tps_vt *w, const tps_vscale *q, tps_error *err)
{
    size_t n = (size_t)(w->shape[0] / q->bn + (w->shape[0] % q->bn != 0)) * (size_t)q->sc;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(q->s[i]))
            return tps_fail(err, TPS_EINVALID, "%s: its scale holds a non-finite value (NaN or Inf) at element %zu: "
                            "the weights themselves are not finite numbers, so no comparison with them can be "
                            "trusted (fix the checkpoint, not the split)", w->name, i);
    return TPS_OK;
}

tps_status tps_vdequant(const tps_block *b, const tps_vsource *src, tps_vt *w, tps_error *err)
{
    tps_vscale q;
    tps_status st = load_scale(b, src, w, &q, err);
    if (st != TPS_OK || !q.s) return st;
    size_t n;
    float *out = NULL;
    if (!tps_u64_to_size(w->nelem, &n) || !(out = malloc((n ? n : 1) * sizeof *out))) {
        free(q.s);
        return tps_fail_oom(err, "a dequantized weight");
    }
    tps_vt held = *w;
    held.scale = &q;
    for (size_t i = 0; i < n; i++) {
        double v = 0;
        tps_dtype_to_f64(w->dtype, w->data, i, &v);
        out[i] = tps_vscaled(&held, i, v);
    }
    free(q.s);
    tps_vbuf_free(w->data);
    w->data = out;
    w->dtype = TPS_DT_F32;
    return TPS_OK;
}

/* tps_vdequant, but the weight stays FP8 with its scale beside it (tps_vt.scale): a quarter
 * of the widened copy's memory; the math widens each row as it reads it. */
static tps_status attach_scale(const tps_block *b, const tps_vsource *src, tps_vt *w, tps_error *err)
{
    tps_vscale q;
    tps_status st = load_scale(b, src, w, &q, err);
    if (st != TPS_OK || !q.s) return st;
    st = require_finite_scale(w, &q, err);
    if (st == TPS_OK && !(w->scale = malloc(sizeof *w->scale))) st = tps_fail_oom(err, "an FP8 weight's scale");
    if (st != TPS_OK) {
        free(q.s);
        return st;
    }
    *w->scale = q;
    return TPS_OK;
}

/* The weight called name, quantized formats dequantized; hold: FP8 keeps its scale beside it. */
static tps_status load_weight(const tps_block *b, const tps_vsource *src, const char *name, bool hold, tps_vt *out,
                              tps_error *err)
{
    bool dequantized = false;
    tps_status st = b->mxfp4 ? tps_vload_mxfp4(src, name, out, &dequantized, err) : TPS_OK;
    if (st == TPS_OK && !dequantized) st = tps_vload_int(b, src, name, out, &dequantized, err);
    if (st == TPS_OK && !dequantized) st = src->load(src->ctx, name, out, err);
    if (st == TPS_OK && !dequantized) st = hold ? attach_scale(b, src, out, err) : tps_vdequant(b, src, out, err);
    return st;
}

tps_status tps_vload_weight(const tps_block *b, const tps_vsource *src, const char *name, tps_vt *out, tps_error *err)
{
    return load_weight(b, src, name, false, out, err);
}

tps_status tps_vload_held(const tps_block *b, const tps_vsource *src, const char *name, tps_vt *out, tps_error *err)
{
    return load_weight(b, src, name, true, out, err);
}
