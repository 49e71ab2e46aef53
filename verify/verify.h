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
/* The layer prefix with "{layer}" replaced ("model.layers.3."); NULL on allocation failure. */
char *tps_verify_layer_prefix(const tps_block *b, uint64_t layer);

/* Relative tolerance for shards of dtype dt (torch.testing.assert_close defaults: BF16
 * 1.6e-2, F16 1e-3; F32 1e-5 leaves room for float32 accumulation over 16k-long dot
 * products; FP8 by their epsilon). */
double tps_verify_rtol(tps_dtype dt);

/* ---- backends: where the ranks of the sharded pass run ----
 *
 * A backend is a device (cpu: float32 on threads or processes; cuda: cuBLAS GEMMs and
 * small kernels, one GPU per rank) and a launcher (local: every rank in this process;
 * mpi: this process is one rank of an MPI job, `mpirun -np T tpshard verify ...`).  The
 * CUDA device and the MPI glue live in plugins (libtpshard-cuda.so, libtpshard-mpi.so)
 * loaded only when asked for, so tpshard starts on machines without CUDA or MPI runtime
 * libraries (verify/backend.c says where they are looked for and why).
 *
 * Under MPI every process runs the same commands; the float64 reference, the comparison
 * and the report are rank 0's.  Failures are agreed: every collective step of the pass is
 * entered by every process, and tps_vbackend_finish makes the exit codes the same
 * everywhere (the highest status any process reached). */
typedef enum tps_vdevice { TPS_VDEV_CPU, TPS_VDEV_CUDA } tps_vdevice;
typedef enum tps_vlauncher {
    TPS_VLAUNCH_AUTO,  /* mpi when an MPI launcher's variables are set (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK) */
    TPS_VLAUNCH_LOCAL, /* every rank in this process */
    TPS_VLAUNCH_MPI
} tps_vlauncher;

typedef struct tps_vbackend_config {
    tps_vdevice device;
    tps_vlauncher launcher;
    bool emulate; /* cuda: more ranks than GPUs run in turn, joined without NCCL */
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
    const char *device;   /* "cpu" or "cuda" */
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

#endif
