/* The float64 reference: the layer from the full weights, or one rank's share of it (the
 * heads and intermediate columns the TP convention gives that rank, taken from the full
 * weights), which the driver compares with that rank's partial sum to find a bad slice.  A
 * post-norm (Gemma 2) follows the all-reduce: the whole layer's outputs include it, a
 * share's partial sums do not. */
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ref.h"

/* A whole-projection q/k norm's sums of squares for a share: those of the whole layer,
 * kept by one pass over every head (keep) and handed to the share's pass (give). */
static tps_status qk_keep(void *ctx, double *ss, size_t n, tps_error *err)
{
    (void)err;
    memcpy(ctx, ss, 2 * n * sizeof *ss);
    return TPS_OK;
}

static tps_status qk_give(void *ctx, double *ss, size_t n, tps_error *err)
{
    (void)err;
    memcpy(ss, ctx, 2 * n * sizeof *ss);
    return TPS_OK;
}

tps_status tps_vref_attn(const tps_block *b, const vdims *d, const vlayer *l, const vshare *share, size_t n,
                     const double *x, double *out, tps_error *err)
{
    tps_status st = TPS_OK;
    vshare all;
    vattn_map m;
    tps_vshare_of(d, 1, 0, &all);
    tps_vattn_map_global(b, d, share ? share : &all, &m);
    double *xn = malloc((n * d->hidden + 1) * sizeof *xn), *sums = NULL;
    if (!xn) return tps_fail_oom(err, "the reference's normalized input");
    tps_vstage_norm_f64(b, d, l, TPS_VSTAGE_ATTN, n, x, xn);
    vqk_reduce keep, give;
    if (share && tps_vqk_whole(b)) {
        vattn_map mall;
        tps_vattn_map_global(b, d, &all, &mall);
        keep = (vqk_reduce){qk_keep, NULL};
        sums = malloc((2 * n + 1) * sizeof *sums);
        if (!sums) {
            st = tps_fail_oom(err, "the reference's q/k sums of squares");
            goto cleanup;
        }
        keep.ctx = sums;
        mall.qk = &keep;
        TPS_CHECK(tps_vattn_f64(b, d, l, &mall, n, xn, false, out, err)); /* out is overwritten below */
        give = (vqk_reduce){qk_give, sums};
        m.qk = &give;
    }
    st = tps_vattn_f64(b, d, l, &m, n, xn, share == NULL, out, err);
    if (st == TPS_OK && !share) tps_vpost_norm_f64(b, d, l, TPS_VSTAGE_ATTN, n, out);
cleanup:
    free(xn);
    free(sums);
    return st;
}

tps_status tps_vref_mlp(const tps_block *b, const vdims *d, const vlayer *l, const vshare *share, size_t n,
                    const double *h, double *out, tps_error *err)
{
    vshare all;
    vmlp_map m;
    tps_vshare_of(d, 1, 0, &all);
    tps_vmlp_map_global(d, share ? share : &all, &m);
    double *hn = malloc((n * d->hidden + 1) * sizeof *hn);
    if (!hn) return tps_fail_oom(err, "the reference's normalized input");
    tps_vstage_norm_f64(b, d, l, TPS_VSTAGE_MLP, n, h, hn);
    tps_status st = tps_vmlp_f64(b, d, l, &m, n, hn, share == NULL, out, err);
    if (st == TPS_OK && !share) tps_vpost_norm_f64(b, d, l, TPS_VSTAGE_MLP, n, out);
    free(hn);
    return st;
}
