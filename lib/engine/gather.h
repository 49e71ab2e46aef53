/* Walking a shard set's global tensor in global order, gathering its bytes from the ranks.
 *
 * Every byte of every rank's slice is read exactly once: the span's first owner gives the
 * global bytes, further owners (replicas) are read and compared with it, and each rank's
 * zero padding is read and checked to be zero.  Each rank's bytes are consumed in that
 * rank's own order, so the walk also yields each rank's CRC-32 of the tensor, from which
 * check rebuilds every file's CRC.  Merge and check are both built on this walk. */
#ifndef TPS_GATHER_H
#define TPS_GATHER_H

#include <stdbool.h>
#include <stdint.h>

#include "../set/manifest.h"
#include "shardset.h"

typedef struct tps_gather_hooks {
    /* The global bytes, front to back. */
    tps_status (*on_bytes)(void *arg, uint64_t off, const void *p, size_t n, tps_error *err);
    /* A problem that is not an I/O failure: replicas differ, padding is not zero.  Each
     * is reported once per tensor and rank pair. */
    void (*on_finding)(void *arg, const char *msg);
    void *arg;
    /* The caller walks several tensors at once, one per core: read in the calling thread
     * instead of a reader thread of its own (the chunks stay in this core's cache). */
    bool in_caller_thread;
} tps_gather_hooks;

/* Fills global_crc and, when rank_crc is non-NULL, rank_crc[r] for every rank. */
tps_status tps_gather_tensor(tps_shardset *ss, const tps_manifest_tensor *t, const tps_gather_hooks *h,
                             uint32_t *global_crc, uint32_t *rank_crc, tps_error *err);

#endif
