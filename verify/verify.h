/* The numerical verification pass: one transformer layer run the tensor-parallel way and
 * compared with the same layer computed from the unsharded weights in float64.
 *
 * Shape of the pass (nccl-tests style: one description per block kind, one driver):
 *   - reference: the layer from the full weights in float64 (verify/ref.c), fed with
 *     float32-representable random inputs drawn from a seed;
 *   - sharded pass: T ranks (threads on the CPU backend), each holding only its own
 *     slices, computing in float32 its q heads with their KV heads, its o_proj row slice,
 *     an all-reduce, its MLP column/row slices and a second all-reduce (verify/rank.c);
 *   - comparison of the two block outputs: the attention output and the MLP output, each
 *     before its residual add (the residual would hide a wrong block: x dominates x + a);
 *   - when a stage differs, the culprit rank: each rank's partial sum (before the
 *     all-reduce) against the reference partial computed from the full weights for the
 *     heads / intermediate columns the TP convention gives that rank.
 *
 * The ranks read their slices by the standard TP convention, as an inference engine does,
 * and never consult the manifest's partition: rank r of T holds q heads
 * [r*H/T, (r+1)*H/T), KV heads [r*KV/T, (r+1)*KV/T) (or the single head r*KV/T, a replica,
 * when T > KV), intermediate columns [r*I/T, (r+1)*I/T), a fused [q;k;v] or [gate;up]
 * slice as the concatenation of its pieces, the full row-parallel biases, norms and
 * router.  A slice of another shape is reported as a mismatch of that rank; a slice of the
 * right shape holding the wrong values shows up in the numbers.
 *
 * Known limit: a Mixtral rank picks its top-k experts from float32 router logits, the
 * reference from float64 ones; two logits within float32 rounding of each other could pick
 * different experts and report a mismatch that is not one.  Random inputs make such a
 * near-tie improbable; another --seed tells the two apart. */
#ifndef TPS_VERIFY_H
#define TPS_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/block.h"
#include "../lib/index.h"
#include "../lib/status.h"

/* A whole tensor as held by one party (the reference or one rank): raw little-endian
 * bytes of a floating-point dtype. */
typedef struct tps_vt {
    char *name;
    tps_dtype dtype;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS];
    uint64_t nelem;
    void *data; /* NULL: the tensor is absent (its role is unused by the model) */
} tps_vt;

void tps_vt_release(tps_vt *t);

/* Where one party's tensors come from.  load fills out with the whole tensor called name
 * (malloc'd data, released with tps_vt_release), or fails naming it. */
typedef struct tps_vsource {
    void *ctx;
    tps_status (*load)(void *ctx, const char *name, tps_vt *out, tps_error *err);
    bool (*has)(void *ctx, const char *name); /* whether load would find name */
} tps_vsource;

/* A source over an opened tensor index: a checkpoint or one rank's shard files. */
tps_vsource tps_vsource_index(const tps_index *ix);

struct tps_shardset;
/* The global tensors of a shard set, reassembled from its ranks' files. */
tps_vsource tps_vsource_shardset(struct tps_shardset *ss);

/* Between ranks: the collective the sharded pass needs.  allreduce_sum leaves in buf, on
 * every rank, the element-wise sum of all ranks' buf (n is the same on every rank), added
 * in rank order so the result is deterministic.  The CPU backend implements it between
 * threads; MPI and NCCL backends plug in here. */
typedef struct tps_vcomm tps_vcomm;
struct tps_vcomm {
    uint64_t rank, size;
    tps_status (*allreduce_sum)(tps_vcomm *c, float *buf, size_t n, tps_error *err);
    void *impl;
};

/* Layer tensor names: layer prefix + (expert prefix for a Mixtral expert's MLP roles) +
 * role template, with "{layer}" and "{expert}" replaced.  NULL when the role is unused or
 * on allocation failure (*oom set). */
char *tps_verify_tensor_name(const tps_block *b, tps_block_role role, uint64_t layer, uint64_t expert, bool *oom);
bool tps_verify_role_per_expert(const tps_block *b, tps_block_role role);

/* Relative tolerance for shards of dtype dt (torch.testing defaults, perf.md §4: BF16
 * 1.6e-2, F16 1e-3; F32 1e-5 leaves room for float32 accumulation over 16k-long dot
 * products; FP8 by their epsilon). */
double tps_verify_rtol(tps_dtype dt);

typedef struct tps_verify_opts {
    uint64_t tokens; /* sequence length, positions 0..tokens-1 */
    uint64_t seed;
    double rtol;     /* <= 0: by the shards' dtype */
    double atol;     /* <= 0: rtol * RMS of the reference output of the stage */
    bool keep_reference; /* keep x and the reference outputs in the result */
} tps_verify_opts;

enum { TPS_VSTAGE_ATTN, TPS_VSTAGE_MLP, TPS_VSTAGE_COUNT };
const char *tps_verify_stage_name(int stage); /* "attention", "mlp" */

typedef struct tps_verify_stage {
    double max_abs; /* worst |a - b| over every rank's copy of the output */
    double rel;     /* ||a - b|| / ||b||, worst rank */
    double rtol, atol;
    bool pass;      /* every element within atol + rtol * |b| on every rank */
} tps_verify_stage;

typedef struct tps_verify_result {
    uint64_t layer;
    tps_dtype dtype; /* lowest-precision weight dtype in the ranks' slices */
    double seconds;  /* loading and computing, reference and ranks */
    bool pass;
    int failed_stage; /* first stage that differs, -1 when none */
    int64_t culprit;  /* lowest rank blamed, -1 when none could be singled out */
    char detail[1024]; /* which rank's slice made the failed stage fail, and how */
    tps_verify_stage stage[TPS_VSTAGE_COUNT];
    /* with keep_reference: inputs [tokens, hidden] and the reference block outputs */
    uint64_t tokens, hidden;
    double *x, *ref_out[TPS_VSTAGE_COUNT];
} tps_verify_result;

void tps_verify_result_release(tps_verify_result *r);

/* Number of layers: b->layers, else counted from the names ref can load. */
tps_status tps_verify_count_layers(const tps_block *b, const tps_vsource *ref, uint64_t *out, tps_error *err);

/* Runs layer `layer` on T ranks (ranks[r] gives rank r's own tensors) and compares it with
 * the reference built from ref.  TPS_OK when the pass ran (res->pass tells the outcome);
 * TPS_EINVALID when the reference does not match the block description or the head
 * counts do not divide by T; TPS_EIO on read or allocation failure. */
tps_status tps_verify_layer(const tps_block *b, uint64_t layer, uint64_t T, const tps_vsource *ref,
                            const tps_vsource *ranks, const tps_verify_opts *o, tps_verify_result *res,
                            tps_error *err);

#endif
