/* Where one party's tensors come from: a checkpoint's tensor index, or a shard set read
 * back through its manifest (every read checked against it). */
#ifndef TPS_VERIFY_LOAD_SOURCE_H
#define TPS_VERIFY_LOAD_SOURCE_H

#include <stdbool.h>
#include "../../lib/base/index.h"
#include "../math/tensor.h"

/* Where one party's tensors come from.  load fills out with the whole tensor called name
 * (malloc'd data, released with tps_vt_release), or fails naming it. */
typedef tps_status (*tps_vrows_fn)(void *arg, uint64_t row0, const tps_vt *part, tps_error *err);
typedef struct tps_vsource {
    void *ctx;
    tps_status (*load)(void *ctx, const char *name, tps_vt *out, tps_error *err);
    bool (*has)(void *ctx, const char *name); /* whether load would find name */
    /* Optional (NULL: only whole loads): the tensor called name, of 2 or more dimensions, in
     * consecutive chunks of at most `chunk` rows (outer index) front to back, fn called with
     * each as a tensor of its rows (row0: its first), so that the caller holds one chunk of
     * a vocabulary-sized matrix at a time.  The source's checks (a shard set's CRC-32,
     * replicas, non-finite values) come after the last chunk: a failure then is the result,
     * whatever fn computed. */
    tps_status (*rows)(void *ctx, const char *name, uint64_t chunk, tps_vrows_fn fn, void *arg, tps_error *err);
    /* Optional (NULL: unknown): tensor name's dimensions into shape, returning their count
     * (0: no such tensor), without reading it; a caller then picks rows before streaming them. */
    int (*dims)(void *ctx, const char *name, uint64_t *shape);
} tps_vsource;

/* A source over an opened tensor index: a checkpoint or one rank's shard files. */
tps_vsource tps_vsource_index(const tps_index *ix);

struct tps_shardset;
/* One rank's shard files (ix, tps_shardset_open_rank of ss) as that rank reads them, except a
 * tensor the set's target holds on rank 0 only (the manifest's target_rank0: vLLM's GPT-OSS
 * w2_bias, zeros on the other ranks): every rank reads rank 0's, the replicated tensor of the
 * TP convention, which verify's math adds once after the all-reduce (the engine's rank-0
 * copy, added before it, sums to the same).  c lives as long as the source. */
typedef struct tps_vrank_src {
    struct tps_shardset *ss;
    const tps_index *ix;
} tps_vrank_src;
tps_vsource tps_vsource_rank(tps_vrank_src *c);

/* The global tensors of a shard set, reassembled from its ranks' files. */
tps_vsource tps_vsource_shardset(struct tps_shardset *ss);

/* Whether src is tps_vsource_shardset(ss). */
bool tps_vsource_is_shardset(const tps_vsource *src, const struct tps_shardset *ss);

/* Checks tensor `name` of the shard set against its manifest (tps_vlayer_check, one tensor);
 * absent from the set: nothing counted. */
tps_status tps_vtensor_check(struct tps_shardset *ss, const char *name, const tps_vsource *source,
                             uint64_t *tensors, uint64_t *bytes, tps_error *err);

/* The same check, reading the tensor's bytes (streaming, nothing kept) where the caller's
 * loads did not (a streamed layer's experts); a non-finite value is refused without a
 * source to compare. */
tps_status tps_vtensor_check_read(struct tps_shardset *ss, const char *name, uint64_t *tensors, uint64_t *bytes,
                                  tps_error *err);

#endif
