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
 * A mixture-of-experts layer (verify/moe_route.h) routes on every rank with the full,
 * replicated router; each rank runs every chosen expert on its intermediate columns and the
 * shared expert (an ordinary TP MLP) on its own, all summed by the one MLP all-reduce.
 *
 * Known limit: a MoE rank picks its top-k experts from float32 router logits, the
 * reference from float64 ones; two logits within float32 rounding of each other could pick
 * different experts and report a mismatch that is not one.  Random inputs make such a
 * near-tie improbable; another --seed tells the two apart. */
#ifndef TPS_VERIFY_H
#define TPS_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/base/index.h"
#include "../lib/base/status.h"
#include "../lib/engine/shardset.h"
#include "../lib/layout/block.h"

/* A whole tensor as held by one party (the reference or one rank): raw little-endian
 * bytes of a floating-point dtype. */
typedef struct tps_vt {
    char *name;
    tps_dtype dtype;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS];
    uint64_t nelem;
    void *data; /* NULL: the tensor is absent (its role is unused by the model) */
    struct tps_vdev_buf *dev; /* its copy on a rank's device (verify/device.h); NULL: host only */
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
    struct tps_vdev_rank *dev; /* the rank's device (verify/device.h); NULL: the host computes */
};

/* Layer tensor names: layer prefix + (for a MoE block's MLP roles: the expert prefix, or
 * with expert TPS_VEXPERT_DENSE the dense prefix, with TPS_VEXPERT_SHARED the shared
 * expert's) + role template, with "{layer}" and "{expert}" replaced.  NULL when the role is
 * unused or on allocation failure (*oom set). */
#define TPS_VEXPERT_DENSE UINT64_MAX
#define TPS_VEXPERT_SHARED (UINT64_MAX - 1)
char *tps_verify_tensor_name(const tps_block *b, tps_block_role role, uint64_t layer, uint64_t expert, bool *oom);
/* Whether the role names one MLP's tensor that a MoE block has per expert. */
bool tps_verify_role_per_expert(const tps_block *b, tps_block_role role);
/* The roles only a MoE layer has beside its experts (router, router bias, shared gate). */
bool tps_verify_role_routing(tps_block_role role);
/* The layer prefix with "{layer}" replaced ("model.layers.3."); NULL on allocation failure. */
char *tps_verify_layer_prefix(const tps_block *b, uint64_t layer);

/* Relative tolerance for shards of dtype dt (torch.testing.assert_close defaults: BF16
 * 1.6e-2, F16 1e-3; F32 1e-5 leaves room for float32 accumulation over 16k-long dot
 * products; FP8 by their epsilon). */
double tps_verify_rtol(tps_dtype dt);

/* ---- backends: where the ranks of the sharded pass run ----
 *
 * A backend is a device (cpu: float32 on threads or processes; cuda: the ranks' matrices
 * and GEMMs on GPUs, one per rank, NCCL between them; devsim: the same device primitives
 * in host memory) and a launcher (local: every rank in this process;
 * mpi: this process is one rank of an MPI job, `mpirun -np T tpshard verify ...`).  The
 * CUDA device and the MPI glue live in plugins (libtpshard-cuda.so, libtpshard-mpi.so)
 * loaded only when asked for, so tpshard starts on machines without CUDA or MPI runtime
 * libraries (verify/backend.c says where they are looked for and why).
 *
 * Under MPI every process runs the same commands; the float64 reference, the comparison
 * and the report are rank 0's.  Failures are agreed: every collective step of the pass is
 * entered by every process, and tps_vbackend_finish makes the exit codes the same
 * everywhere (the highest status any process reached). */
/* devsim: the device primitives of the cuda backend in host memory (verify/plugin.h). */
typedef enum tps_vdevice { TPS_VDEV_CPU, TPS_VDEV_CUDA, TPS_VDEV_DEVSIM } tps_vdevice;
typedef enum tps_vlauncher {
    TPS_VLAUNCH_AUTO,  /* mpi when an MPI launcher's variables are set (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK) */
    TPS_VLAUNCH_LOCAL, /* every rank in this process */
    TPS_VLAUNCH_MPI
} tps_vlauncher;

typedef struct tps_vbackend_config {
    tps_vdevice device;
    tps_vlauncher launcher;
    bool emulate; /* cuda, devsim: more ranks than devices share them, joined without NCCL */
} tps_vbackend_config;

typedef struct tps_vbackend tps_vbackend;

/* Opens the backend: loads its plugins and, under MPI, joins the job (MPI_Init).
 * TPS_EBACKEND when a plugin or its runtime is missing, with a message saying which. */
tps_status tps_vbackend_open(const tps_vbackend_config *cfg, tps_vbackend **out, tps_error *err);

/* Readies the backend for T ranks: under MPI the job must have T processes (TPS_EARG);
 * cuda finds T GPUs, or fewer with emulate (TPS_EBACKEND otherwise), and sets up NCCL.
 * st is this process's status so far: the first step every process takes together, so a
 * process that failed before it stops the others here. */
tps_status tps_vbackend_start(tps_vbackend *be, uint64_t T, tps_status st, tps_error *err);

typedef struct tps_vbackend_info {
    const char *device;   /* "cpu", "cuda" or "devsim" */
    const char *launcher; /* "threads", "local" or "mpi" */
    uint64_t rank, processes; /* this process (0 of 1 without MPI) */
    uint64_t devices, ranks_per_device; /* cuda after start: GPUs used by this job's node(s) */
    bool nccl; /* all-reduce over NCCL (cuda), else emulated on the device or by MPI */
    char desc[320]; /* one line for the report */
} tps_vbackend_info;

void tps_vbackend_get_info(const tps_vbackend *be, tps_vbackend_info *out);

/* Whether this process prints the report (rank 0, or the only process). */
bool tps_vbackend_is_root(const tps_vbackend *be);

/* Whether this process opens rank r's shard file (its own rank under MPI, all otherwise). */
bool tps_vbackend_holds_rank(const tps_vbackend *be, uint64_t r);

/* The status all processes agree on (the highest), unless a failure was agreed already;
 * when it came from another process, err says so and tps_vbackend_failed_elsewhere is
 * true (its process reports why).  Call once at the end, on every path. */
tps_status tps_vbackend_finish(tps_vbackend *be, tps_status st, tps_error *err);
bool tps_vbackend_failed_elsewhere(const tps_vbackend *be);

/* Tears down NCCL and MPI (MPI_Finalize); NULL is fine. */
void tps_vbackend_close(tps_vbackend *be);

/* The hidden state carried from layer to layer by the whole-model pass (verify
 * --whole-model): x, the state this process's rank holds after the all-reduces (every rank
 * holds the same values; on the CPU threads backend rank 0's copy), and on rank 0 xref, the
 * float64 reference's state.  dtype: the lowest-precision weight dtype met so far. */
typedef struct tps_verify_chain {
    uint64_t tokens, hidden;
    float *x;
    double *xref;
    tps_dtype dtype;
} tps_verify_chain;

typedef struct tps_verify_opts {
    tps_vbackend *backend; /* NULL: CPU threads in this process */
    uint64_t tokens; /* sequence length, positions 0..tokens-1 */
    uint64_t seed;
    double rtol;     /* <= 0: by the shards' dtype */
    double atol;     /* <= 0: rtol * RMS of the reference output of the stage */
    bool keep_reference; /* keep x and the reference outputs in the result */
    /* The shard set the ranks load from: on rank 0, each of the layer's tensors is first
     * checked against its manifest (every rank's bytes gathered, replicas compared, the
     * global CRC-32 compared), TPS_EMISMATCH naming the file and tensor on a difference.
     * When ref is this set's own source (tps_vsource_shardset), those checked reads are the
     * reference's reads.  NULL: not checked. */
    struct tps_shardset *shards;
    /* Called as the layer moves from stage to stage ("loading the reference", "ranks:
     * attention", ...), from the thread doing the work (rank 0's on the CPU backend); NULL:
     * not called. */
    void (*on_stage)(void *arg, const char *stage);
    void *stage_arg;
    /* Whole-model pass: the layer's input is chain->x (not random), and the layer moves
     * chain->x (the ranks' output, residuals added in float32) and, on rank 0, chain->xref
     * (the unsharded layer in float64 from xref) on to the next layer.  The layer is still
     * compared as on its own: the ranks' outputs with the float64 layer fed chain->x. */
    tps_verify_chain *chain;
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
    /* rank 0, with opts.shards: the tensors checked against the manifest and their bytes */
    uint64_t checked_tensors, checked_bytes;
    /* measured by the cuda backend (0 elsewhere): bytes of slices copied to the GPUs, the
     * wall time of those copies, and of the layer's computation (both all-reduces
     * included, slowest rank) */
    double upload_bytes, upload_seconds, layer_seconds;
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

/* Runs layer `layer` on T ranks (ranks[r] gives rank r's own tensors; under MPI only this
 * process's rank is used, and ref only on rank 0) and compares it with the reference
 * built from ref (rank 0 only: elsewhere res holds no comparison).  TPS_OK when the pass ran (res->pass tells the outcome);
 * TPS_EINVALID when the reference does not match the block description or the head
 * counts do not divide by T; TPS_EIO on read or allocation failure. */
tps_status tps_verify_layer(const tps_block *b, uint64_t layer, uint64_t T, const tps_vsource *ref,
                            const tps_vsource *ranks, const tps_verify_opts *o, tps_verify_result *res,
                            tps_error *err);

/* ---- the whole model (verify --whole-model) ----
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
