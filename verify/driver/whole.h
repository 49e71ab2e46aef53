/* The whole model (verify --whole-model).
 *
 * tps_verify_whole_begin runs the vocabulary-parallel embedding: token ids drawn from the
 * seed below the true vocabulary size V; rank r of T holds vocabulary rows
 * [r*Vp/T, (r+1)*Vp/T) of the embedding (Vp: V rounded up to a multiple of T, the padding at
 * the end, on the last rank), looks up the ids in its rows and zeros elsewhere, and the
 * ranks' results are summed (an all-reduce); GPT-2's learned positions (replicated) are
 * added after it.  The caller then runs every layer with opts.chain = &w->chain, and
 * tps_verify_whole_end runs the final norm (replicated) and the vocabulary-parallel LM head
 * (each rank the logits of its rows; gathered in rank order, the padding columns dropped; a
 * model without an lm_head tensor uses the embedding's rows), and compares the logits with
 * the unsharded model's in float64: every logit within atol + rtol*|ref| (rtol by the
 * lowest-precision dtype of the weights, atol rtol * RMS of the reference logits), and
 * each position's top-1 token the same (a different top-1 whose reference logit is within
 * atol of the reference's maximum is a tie, counted and allowed).  Memory: one layer's (or
 * the embedding's, or the head's) weights at a time, plus activations.  Under MPI every
 * process calls both; the reference and the comparison are rank 0's. */
#ifndef TPS_VERIFY_DRIVER_WHOLE_H
#define TPS_VERIFY_DRIVER_WHOLE_H

#include "pass.h"

typedef struct tps_verify_whole {
    uint64_t ranks, tokens, hidden, vocab, padded_vocab, positions;
    uint64_t *ids;  /* the token ids, [tokens] */
    bool tied;      /* the LM head is the embedding's rows */
    bool pos_embed; /* learned positions added */
    tps_verify_chain chain;
    /* rank 0, with opts.shards: the embedding, position, norm and head tensors checked */
    uint64_t checked_tensors, checked_bytes;
    tps_verify_stage embed_cmp, logits_cmp; /* the embedding output and the logits, vs the reference */
    uint64_t top1_agree, top1_ties; /* positions whose top-1 token agrees; of them, ties */
    bool pass;
    const char *failed;   /* "embedding", "logits" or "top-1", NULL when it passed */
    int64_t culprit;      /* lowest rank blamed, -1 when none could be singled out */
    char detail[1024];
    double seconds;
    /* rank 0 with opts.keep_reference: [tokens, vocab] */
    double *ref_logits;
    float *logits;
} tps_verify_whole;

void tps_verify_whole_release(tps_verify_whole *w);

/* TPS_EINVALID when the block names no embed or final_norm tensor (the layout predates
 * whole-model verification) or their shapes do not fit; TPS_EIO on read failure. */
tps_status tps_verify_whole_begin(const tps_block *b, uint64_t T, const tps_vsource *ref, const tps_vsource *ranks,
                                  const tps_verify_opts *o, tps_verify_whole *w, tps_error *err);
tps_status tps_verify_whole_end(const tps_block *b, uint64_t T, const tps_vsource *ref, const tps_vsource *ranks,
                                const tps_verify_opts *o, tps_verify_whole *w, tps_error *err);

#endif
