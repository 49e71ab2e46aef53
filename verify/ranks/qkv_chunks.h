/* Megatron's qkv row chunks (verify/ranks/qkv_chunks.c). */
#ifndef TPS_VERIFY_RANKS_QKV_CHUNKS_H
#define TPS_VERIFY_RANKS_QKV_CHUNKS_H

#include "../math/ops.h"
#include "comm.h"

/* Megatron's qkv row chunks (tps_block.qkv_row_chunks, verify/ranks/qkv_chunks.c): whether the
 * ranks of a T-rank pass hold plain row chunks of a query group's block. */
static inline bool tps_vqkv_chunked(const tps_block *b, const vdims *d, uint64_t T)
{
    return b->qkv_row_chunks && d->kv < T;
}
/* Floats of the all-gathered qkv activations of n tokens: n (heads + 2 kv) head_dim. */
size_t tps_vqkv_gather_len(const vdims *d, size_t n);
/* The rank's attention partial sum (tps_vattn_f32's, o_proj's held columns): its chunk of
 * the group's qkv projected, all-gathered into buf (tps_vqkv_gather_len floats) through
 * comm, its q heads and the group's k and v taken from the group's rows.  xn NULL: the rank
 * only joins the collective, with zeros (it computes nothing this stage); every rank
 * enters it exactly once per attention stage, whatever happened. */
tps_status tps_vattn_chunked_f32(const tps_block *b, const vdims *d, const vlayer *l, const vqk_reduce *qk,
                                 tps_vcomm *comm, size_t n, const float *xn, float *buf, float *out,
                                 tps_error *err);

#endif
