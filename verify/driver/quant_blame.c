/* Naming the tensor behind a quantized layer's failure (issue 17): once blame has found the
 * rank whose partial sum differs, each quantized linear of the layer is dequantized as that
 * rank holds it and compared with the reference's dequantized weight at the rows or columns
 * the manifest gives the rank's weight (its qweight's or FP8 weight's partition, which a
 * wrong cut of a scale or zero tensor leaves right).  A linear whose slice differs while its
 * weight bytes are the manifest's (check) has companions that do not belong with it: the
 * message names them. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/engine/shardset.h"
#include "../../lib/set/manifest.h"
#include "../load/dequant.h"
#include "../load/dequant_int.h"
#include "../load/names.h"
#include "../math/util.h"
#include "quant_blame.h"

/* Whether rank's dequantized w_r equals ref's w at the slice sl of dimension wdim, whose
 * coordinates are the manifest tensor's times factor (a qweight packs input rows or output
 * columns). */
static bool slice_equal(const tps_vt *w, const tps_vt *w_r, int wdim, const tps_slice *sl, uint64_t factor)
{
    if (w->ndim != 2 || w_r->ndim != 2 || w_r->shape[1 - wdim] != w->shape[1 - wdim]) return false;
    const float *a = w->data, *ar = w_r->data;
    uint64_t loc = 0, other = w->shape[1 - wdim];
    for (int p = 0; p < sl->npieces; p++) {
        uint64_t start = sl->piece[p].start * factor, len = sl->piece[p].len * factor;
        if (loc + len > w_r->shape[wdim] || start + len > w->shape[wdim]) return false;
        for (uint64_t i = 0; i < len; i++)
            for (uint64_t j = 0; j < other; j++) {
                uint64_t g = wdim == 0 ? (start + i) * w->shape[1] + j : j * w->shape[1] + start + i;
                uint64_t l = wdim == 0 ? (loc + i) * w_r->shape[1] + j : j * w_r->shape[1] + loc + i;
                if (a[g] != ar[l]) return false;
            }
        loc += len;
    }
    return true;
}

static tps_status blame_one(const tps_block *b, const tps_manifest_tensor *mt, uint64_t T, uint64_t r,
                            const tps_vsource *ref, const tps_vsource *rank, char *det, size_t dsz, int *named,
                            tps_error *err)
{
    size_t n = strlen(mt->name);
    bool qint = n > 8 && strcmp(mt->name + n - 8, ".qweight") == 0;
    char module[1024], wname[1100];
    snprintf(module, sizeof module, "%.*s", (int)(qint ? n - 8 : n - (n > 7 && !strcmp(mt->name + n - 7, ".weight") ? 7 : 0)),
             mt->name);
    snprintf(wname, sizeof wname, "%s", qint ? module : mt->name);
    if (qint) tps_vappendf(wname, sizeof wname, ".weight");
    static const char *const fp8_sfx[] = {"_scale_inv", "_scale"}, *const int_sfx[] = {".scales", ".qzeros", ".g_idx"};
    char comp[3][1100];
    int nc = 0;
    for (int i = 0; i < (qint ? 3 : 2); i++) {
        snprintf(comp[nc], sizeof comp[nc], "%s%s", qint ? module : mt->name, qint ? int_sfx[i] : fp8_sfx[i]);
        if (rank->has(rank->ctx, comp[nc])) nc++;
    }
    if (!nc || mt->ndim != 2) return TPS_OK;
    tps_vt w, w_r;
    memset(&w, 0, sizeof w);
    memset(&w_r, 0, sizeof w_r);
    tps_error e2;
    tps_status st = tps_vload_weight(b, ref, wname, &w, err);
    if (st != TPS_OK) goto cleanup;
    bool same = false;
    if (tps_vload_weight(b, rank, wname, &w_r, &e2) == TPS_OK && w.dtype == TPS_DT_F32 && w_r.dtype == TPS_DT_F32) {
        tps_slice sl;
        int wdim = mt->part->replicated ? 0 : qint ? 1 - mt->part->dim : mt->part->dim;
        if (mt->part->replicated) {
            sl.npieces = 1;
            sl.piece[0].start = 0, sl.piece[0].len = w.shape[0];
            same = slice_equal(&w, &w_r, 0, &sl, 1);
        } else {
            tps_partition_slice(mt->part, T, r, &sl);
            uint64_t factor = mt->shape[mt->part->dim] ? w.shape[wdim] / mt->shape[mt->part->dim] : 1;
            same = sl.pad == 0 ? slice_equal(&w, &w_r, wdim, &sl, factor) : true;
        }
    }
    if (!same) {
        if (*named == 0)
            tps_vappendf(det, dsz, "; rank %llu's %s dequantizes to other values than the reference's slice of it "
                    "(its weight's rows and columns as the manifest cuts them): ", (unsigned long long)r, module);
        else
            tps_vappendf(det, dsz, "; also %s: ", module);
        tps_vappendf(det, dsz, "its %s on rank %llu (", nc > 1 ? "scale/zero tensors" : "scale", (unsigned long long)r);
        for (int i = 0; i < nc; i++) tps_vappendf(det, dsz, i ? ", %s" : "%s", comp[i]);
        tps_vappendf(det, dsz, ") %s not fit its weight slice", nc > 1 ? "do" : "does");
        (*named)++;
    }
cleanup:
    tps_vt_release(&w);
    tps_vt_release(&w_r);
    return st;
}

tps_status tps_vquant_blame(const tps_block *b, uint64_t layer, uint64_t T, uint64_t r, const tps_vsource *ref,
                            const tps_vsource *rank, const struct tps_shardset *ss, char *det, size_t dsz,
                            tps_error *err)
{
    char *prefix = tps_verify_layer_prefix(b, layer);
    if (!prefix) return tps_fail_oom(err, "a tensor name");
    size_t pl = strlen(prefix);
    int named = 0;
    tps_status st = TPS_OK;
    for (size_t i = 0; i < ss->m->ntensors && st == TPS_OK && named < 3; i++) {
        const tps_manifest_tensor *mt = &ss->m->tensors[i];
        size_t n = strlen(mt->name);
        if (strncmp(mt->name, prefix, pl) != 0) continue;
        bool qint = n > 8 && strcmp(mt->name + n - 8, ".qweight") == 0;
        bool fp8 = mt->dtype == TPS_DT_F8_E4M3 || mt->dtype == TPS_DT_F8_E5M2;
        if (qint || fp8) st = blame_one(b, mt, T, r, ref, rank, det, dsz, &named, err);
    }
    free(prefix);
    return st;
}
