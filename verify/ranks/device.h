/* The ranks' devices, host side: a device plugin (verify/ranks/plugin.h) opened for one job, the
 * weight slices a rank uploads to it, the GEMMs the layer math sends there, and the
 * all-reduce between the ranks' devices.
 *
 * The layer math (verify/math/ops_tmpl.h) is the same for every backend.  A rank that runs on a
 * device uploads the matrices of its slices once they are loaded (tps_vdev_upload_layer);
 * from then on every linear of those matrices is a GEMM on the device (the math's one
 * linear, F(vlinear), asks tps_vdev_gemm when a tensor has a device copy), and the rank's
 * collectives go through its comm, which tps_vdev_comm points at the device's all-reduce.
 * Vectors (norm weights, biases, sinks) and the embedding rows a lookup reads stay on the
 * host with the element-wise work and the routing: at verify's sizes the activations are
 * tiny, the weights are what must live on the devices. */
#ifndef TPS_VERIFY_DEVICE_H
#define TPS_VERIFY_DEVICE_H

#include "../math/tensor.h"
#include "plugin.h"

typedef struct tps_vdev tps_vdev;

/* One rank of a device job: what it uploaded (for the report) and its device. */
typedef struct tps_vdev_rank {
    tps_vdev *dev;
    uint64_t rank;
    double upload_bytes, upload_seconds;
} tps_vdev_rank;

/* Opens api's device context for the ranks of s (its open), with the host's side of them. */
tps_status tps_vdev_open(const tps_dev_api *api, const tps_dev_setup *s, tps_vdev **out, tps_error *err);
void tps_vdev_close(tps_vdev *d);

/* The rank of the job this process runs (s->first <= rank < s->first + s->count). */
tps_vdev_rank *tps_vdev_rank_of(tps_vdev *d, uint64_t rank);

/* A comm for rank r: host NULL, the device's all-reduce; else host's collective (MPI between
 * processes, when the ranks' devices cannot reach each other), with the rank's device for
 * the GEMMs either way. */
tps_vcomm tps_vdev_comm(tps_vdev_rank *r, const tps_vcomm *host);

/* Copies a present matrix (2 dimensions) to r's device, as BF16, F16 or F32 (other dtypes
 * widened to F32 on the way, exactly for FP8); vectors and absent tensors stay on the host. */
tps_status tps_vdev_upload(tps_vdev_rank *r, tps_vt *t, tps_error *err);

/* Every matrix of l: its roles, its experts', its shared expert's. */
tps_status tps_vdev_upload_layer(tps_vdev_rank *r, vlayer *l, tps_error *err);

/* Sends the reference's linears of this process to the device of its first rank (the plugin's
 * float64 GEMM, through verify/math/ref_kernel.h's tps_vref_use_device) until tps_vdev_close,
 * the weights staged through two pinned buffers of chunk bytes (0: 8 MiB; a test makes them
 * small to cross many chunk edges); bytes and seconds of those uploads and GEMMs so far. */
void tps_vdev_ref_attach(tps_vdev *d, size_t chunk);
void tps_vdev_ref_stats(const tps_vdev *d, double *bytes, double *seconds);

/* Bytes uploaded and the longest upload time over the ranks this process runs, since the
 * last call (the counters restart). */
void tps_vdev_take_stats(tps_vdev *d, double *bytes, double *seconds);

#endif
