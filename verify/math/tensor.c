/* The tensor type's release and the layer facts of verify/math/tensor.h. */
#include <stdlib.h>
#include <string.h>

#include "tensor.h"
#include "vbuf.h"

void tps_vt_release(tps_vt *t)
{
    if (!t) return;
    if (t->dev) t->dev->ops->release(t);
    free(t->name);
    tps_vbuf_free(t->data); /* read, or mapped from its file */
    if (t->scale) free(t->scale->s);
    free(t->scale);
    memset(t, 0, sizeof *t);
}

void tps_vlayer_release(vlayer *l)
{
    if (!l) return;
    for (int r = 0; r < TPS_ROLE_COUNT; r++) tps_vt_release(&l->t[r]);
    for (uint64_t i = 0; i < l->nex * TPS_ROLE_COUNT; i++) tps_vt_release(&l->ex[i]);
    for (int r = 0; r < TPS_ROLE_COUNT; r++) tps_vt_release(&l->sh[r]);
    free(l->ex);
    memset(l, 0, sizeof *l);
}

tps_status tps_vexpert_row(const vlayer *l, uint64_t e, tps_vt *tmp, const tps_vt **row, bool *fetched,
                           tps_error *err)
{
    const tps_vt *r = &l->ex[e * TPS_ROLE_COUNT];
    bool empty = true;
    for (int i = 0; i < TPS_ROLE_COUNT && empty; i++) empty = !r[i].data;
    *fetched = empty && l->stream;
    *row = r;
    if (!*fetched) return TPS_OK;
    memset(tmp, 0, TPS_ROLE_COUNT * sizeof *tmp);
    *row = tmp;
    tps_status st = l->stream->fetch(l->stream->ctx, e, tmp, err);
    if (st != TPS_OK) {
        tps_vexpert_row_done(tmp, true);
        *fetched = false;
    }
    return st;
}

void tps_vexpert_row_done(tps_vt *tmp, bool fetched)
{
    if (fetched)
        for (int i = 0; i < TPS_ROLE_COUNT; i++) tps_vt_release(&tmp[i]);
}

double tps_verify_rtol(tps_dtype dt)
{
    switch (dt) {
    case TPS_DT_F64: return 1e-7;
    case TPS_DT_F32: return 1e-5;
    case TPS_DT_F16: return 1e-3;
    case TPS_DT_BF16: return 1.6e-2;
    case TPS_DT_F8_E4M3: return 1.25e-1;
    default: return 2.5e-1;
    }
}

const char *tps_verify_stage_name(int stage)
{
    return stage == TPS_VSTAGE_ATTN ? "attention" : stage == TPS_VSTAGE_MLP ? "mlp" : "?";
}
