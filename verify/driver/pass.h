/* One layer run the tensor-parallel way and compared with the float64 reference (the module
 * comment of verify/verify.h says how), and the comparison itself. */
#ifndef TPS_VERIFY_DRIVER_PASS_H
#define TPS_VERIFY_DRIVER_PASS_H

#include "../backends/backend.h"

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

typedef struct tps_vcmp {
    double max_abs, rel;
    bool pass;
} tps_vcmp;

/* allclose in torch's sense (|a - b| <= atol + rtol |b| everywhere) plus the norm-wise
 * relative error. */
tps_vcmp tps_vcompare(const float *a, const double *b, size_t n, double rtol, double atol);

#endif
