/* One layer's tensors loaded from a source, checked against a shard set's manifest and
 * for non-finite values, and the shapes the TP convention gives a share of them. */
#ifndef TPS_VERIFY_LOAD_LAYER_H
#define TPS_VERIFY_LOAD_LAYER_H

#include "../math/share.h"
#include "source.h"

/* Loads every role of layer `layer` from src. */
tps_status tps_vlayer_load(const tps_block *b, uint64_t layer, uint64_t experts, const tps_vsource *src, vlayer *out,
                       tps_error *err);

/* A streamed layer's experts (verify/math/tensor.h, vlayer.stream): loaded from src when the
 * math reaches them, then after(arg, e, row) when set (a rank checks the row's shapes, notes
 * its dtypes and uploads it).  Filled by tps_vlayer_load_streamed except after and arg; it
 * must outlive the layer. */
typedef struct vexpert_fetcher {
    vexperts_stream stream;
    const tps_block *b;
    uint64_t layer;
    const tps_vsource *src;
    tps_status (*after)(void *arg, uint64_t e, tps_vt *row, tps_error *err);
    void *arg;
} vexpert_fetcher;

/* tps_vlayer_load, but with f a MoE layer of per-expert tensors loads only expert 0 and
 * streams the others through f; with f NULL, or fused experts, it loads every expert. */
tps_status tps_vlayer_load_streamed(const tps_block *b, uint64_t layer, uint64_t experts, const tps_vsource *src,
                                    vexpert_fetcher *f, vlayer *out, tps_error *err);

/* Checks every tensor of layer `layer` (nex experts) that the shard set ss holds against its
 * manifest (verify.h, tps_verify_opts.shards) and for non-finite values, adding to *tensors
 * and *bytes.  source: the reference's own source (--source), whose copy a non-finite
 * tensor's message describes; NULL: the reference was loaded from ss through those checked
 * reads, which did the checks: only counts, except (streamed) the routed experts past the
 * first, which a streamed reference loads only when the router picks them: read and checked. */
tps_status tps_vlayer_check(const tps_block *b, uint64_t layer, uint64_t nex, struct tps_shardset *ss,
                            const tps_vsource *source, bool streamed, uint64_t *tensors, uint64_t *bytes,
                            tps_error *err);

/* TPS_EINVALID naming the first tensor of l that holds a non-finite value (whose: where l
 * was loaded from, for the message). */
tps_status tps_vlayer_require_finite(const vlayer *l, const char *whose, tps_error *err);

/* The shape the held tensor of `role` must have for a share (the whole model: T = 1).
 * Returns the number of dimensions (at most 3), 0 when the role has no fixed shape. */
int tps_vexpected_shape(const tps_block *b, const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape);

/* Checks every present tensor of l against tps_vexpected_shape; on a difference, writes a
 * message naming the tensor, both shapes and the share into msg and returns false.
 * mlp selects the MLP-side roles, else the attention-side ones. */
bool tps_vcheck_shapes(const tps_block *b, const vdims *d, const vshare *s, const vlayer *l, bool mlp, char *msg,
                   size_t msgsize);

#endif
