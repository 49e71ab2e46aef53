/* The collective between the ranks of a pass.  Plain C with no tpshard code behind it: the
 * plugins (verify/ranks/plugin.h) use it too. */
#ifndef TPS_VERIFY_RANKS_COMM_H
#define TPS_VERIFY_RANKS_COMM_H

#include <stddef.h>
#include <stdint.h>
#include "../../lib/base/status.h"

/* Between ranks: the collective the sharded pass needs.  allreduce_sum leaves in buf, on
 * every rank, the element-wise sum of all ranks' buf (n is the same on every rank), added
 * in rank order so the result is deterministic.  The CPU backend implements it between
 * threads; MPI and NCCL backends plug in here. */
typedef struct tps_vcomm tps_vcomm;
struct tps_vcomm {
    uint64_t rank, size;
    tps_status (*allreduce_sum)(tps_vcomm *c, float *buf, size_t n, tps_error *err);
    void *impl;
    struct tps_vdev_rank *dev; /* the rank's device (verify/ranks/device.h); NULL: the host computes */
};

#endif
