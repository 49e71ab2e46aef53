/* Megatron-Core (>= 0.16) at tp above the query groups: the s = tp / groups ranks sharing
 * query group g each hold a PLAIN row chunk of the group's [q heads of g; k_g; v_g] block
 * (lib/presets/megatron_gpt.yaml), so no rank holds whole heads.  Megatron's
 * SelfAttention.get_query_key_value_tensors (megatron/core/transformer/attention.py)
 * projects each rank's chunk, all-gathers the qkv activations among the ranks of the group,
 * and each rank then takes its heads/tp q heads, from (rank % s) * heads/tp in the group,
 * and the group's k and v.  The rank's attention output then feeds o_proj's columns of those
 * heads as at any other tp.
 *
 * The all-gather rides on the verify transport's one collective, the all-reduce sum: every
 * rank puts its chunk's activations at their place in the whole model's [n, groups * block]
 * and zeros elsewhere, so every element has one non-zero addend and the sum is the exact
 * gather (of all groups, which each rank then reads its own from: the same values an
 * all-gather among the group's ranks gives).  It runs in pieces of n * hidden floats, the
 * most the thread transport carries at once. */
#include <stdlib.h>
#include <string.h>

#include "qkv_chunks.h"

size_t tps_vqkv_gather_len(const vdims *d, size_t n)
{
    return n * (size_t)((d->heads + 2 * d->kv) * d->hd);
}

/* The gather, in place in buf; every rank runs it with the same n, so the same pieces. */
static tps_status gather(tps_vcomm *comm, const vdims *d, size_t n, float *buf, tps_error *err)
{
    size_t len = tps_vqkv_gather_len(d, n), piece = n * (size_t)d->hidden;
    for (size_t at = 0; at < len; at += piece) {
        size_t k = len - at < piece ? len - at : piece;
        tps_status st = comm->allreduce_sum(comm, buf + at, k, err);
        if (st != TPS_OK) return st;
    }
    return TPS_OK;
}

tps_status tps_vattn_chunked_f32(const tps_block *b, const vdims *d, const vlayer *l, const vqk_reduce *qk,
                                 tps_vcomm *comm, size_t n, const float *xn, float *buf, float *out, tps_error *err)
{
    uint64_t T = comm->size, r = comm->rank, G = d->kv, s = T / G, g = r / s, hd = d->hd;
    uint64_t run = d->heads / G, block = (run + 2) * hd, rows = block / s, total = G * block;
    const tps_vt *w = vrole(l, TPS_ROLE_QKV_W, 0, false), *bias = vrole(l, TPS_ROLE_QKV_B, 0, false);
    tps_status st = TPS_OK;
    memset(buf, 0, tps_vqkv_gather_len(d, n) * sizeof *buf);
    if (xn && block % s)
        st = tps_fail(err, TPS_EINVALID,
                      "a query group's qkv block of %llu rows does not split into %llu plain row chunks (tp %llu, "
                      "%llu groups)",
                      (unsigned long long)block, (unsigned long long)s, (unsigned long long)T, (unsigned long long)G);
    else if (xn && (!w || w->shape[0] != rows))
        st = tps_fail(err, TPS_EMISMATCH, "rank %llu holds %llu qkv rows, a plain chunk of its group's block is %llu",
                      (unsigned long long)r, (unsigned long long)(w ? w->shape[0] : 0), (unsigned long long)rows);
    else if (xn)
        st = tps_vlinear_rows_f32(w, bias, b->conv1d, n, xn, (size_t)d->hidden, d->hidden, 0, rows,
                                  buf + g * block + (r % s) * rows, (size_t)total, err);
    if (st != TPS_OK) memset(buf, 0, tps_vqkv_gather_len(d, n) * sizeof *buf); /* joins with zeros */
    tps_error ge;
    tps_error_clear(&ge);
    tps_status gst = gather(comm, d, n, buf, &ge);
    if (st != TPS_OK || !xn) return st;
    if (gst != TPS_OK) {
        *err = ge;
        return gst;
    }
    vshare sh;
    tps_vshare_of(d, T, r, &sh);
    vattn_map m;
    memset(&m, 0, sizeof m);
    m.hn = sh.q_n;
    m.q_first = sh.q_first;
    m.kv_first = g;
    m.kv_n = 1;
    m.stride = hd;
    m.q_off = (r % s) * sh.q_n * hd;
    m.k_off = run * hd;
    m.v_off = (run + 1) * hd;
    m.qk = qk;
    m.act = buf + g * block;
    m.act_ld = (size_t)total;
    return tps_vattn_f32(b, d, l, &m, n, xn, false, out, err);
}
