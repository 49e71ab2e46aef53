/* The ranks of the sharded pass: one layer's slices loaded and run on each rank, joined by
 * their collectives (threads, a device's all-reduce, or MPI through a comm). */
#ifndef TPS_VERIFY_RANKS_RANK_H
#define TPS_VERIFY_RANKS_RANK_H

#include "../load/source.h"
#include "../math/share.h"
#include "comm.h"

struct tps_shardset;
typedef struct tps_vbackend tps_vbackend;

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

/* Tells o's on_stage, when there, that the pass enters stage `what`. */
void tps_vstage(const tps_verify_opts *o, const char *what);

/* One rank's results of the sharded pass (float32). */
typedef struct vrank_out {
    float *partial[TPS_VSTAGE_COUNT]; /* the rank's own sum before the all-reduce */
    float *out[TPS_VSTAGE_COUNT];     /* the block output as the rank holds it afterwards */
    bool bad[TPS_VSTAGE_COUNT];       /* its slices do not have the convention's shapes */
    char why[TPS_VSTAGE_COUNT][512];
    tps_dtype min_dtype;
} vrank_out;

void tps_vrank_out_release(vrank_out *o);

/* Allocates o's buffers for n * hidden floats (and sets min_dtype to F64, the widest). */
tps_status tps_vrank_out_alloc(vrank_out *o, size_t nh, tps_error *err);

/* Lowers o->min_dtype to the lowest-precision weight dtype l holds. */
void tps_vrank_note_dtypes(vrank_out *o, const vlayer *l);

/* One rank of the sharded pass in the calling thread, joined to the others by comm (the
 * MPI backend): loads its slices from src, then both stages, each ending in an
 * all-reduce that every rank enters whatever happened, like tps_vrank_run's threads.  out
 * must be allocated (tps_vrank_out_alloc).  When another rank could not load its slices,
 * every rank stops: this one returns TPS_EIO with *elsewhere set and err untouched. */
tps_status tps_vrank_one(const tps_block *b, const vdims *d, uint64_t layer, const tps_vsource *src, size_t n,
                     const float *x, tps_vcomm *comm, vrank_out *out, bool *elsewhere, const tps_verify_opts *vo,
                     tps_error *err);

/* The sharded pass on T threads.  x is [n, hidden] (float32 values).  Every rank always
 * joins every collective, contributing zeros from slices it cannot use, so a bad rank is
 * reported rather than hanging the others.  dev: each rank's matrices go to its device and
 * its collectives through the device's all-reduce (verify/ranks/device.h); NULL: the host
 * computes and the threads sum. */
struct tps_vdev;
tps_status tps_vrank_run(const tps_block *b, const vdims *d, uint64_t layer, uint64_t T, const tps_vsource *ranks,
                         size_t n, const float *x, struct tps_vdev *dev, vrank_out *outs, const tps_verify_opts *vo,
                         tps_error *err);

/* One rank's part of a collective step outside the layers (the whole-model pass): called
 * on every rank with its comm; it must enter the same collectives on every rank whatever
 * happened, as the layer's ranks do. */
typedef tps_status (*tps_vrank_fn)(void *arg, tps_vcomm *comm, tps_error *err);

/* fn on T threads joined by the thread all-reduce (buffers of up to cap floats), or by the
 * devices' (dev not NULL: each comm carries its rank's device). */
tps_status tps_vrank_each_thread(uint64_t T, size_t cap, struct tps_vdev *dev, tps_vrank_fn fn, void *arg,
                                 tps_error *err);

#endif
