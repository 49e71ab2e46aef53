/* The partition algebra (README.md, "What tensor parallelism needs"): how one tensor is
 * cut across T ranks.
 *
 * A tensor is replicated, or split along one dimension `dim`.  Along dim it is the
 * concatenation of nseg segments ([Q;K;V] has 3, [gate;up] has 2, a plain matrix 1).
 * Each segment has a length and a unit (elements along dim that must stay on one rank:
 * 1, head_dim, a NeoX head's 3*head_dim rows, an FP8 block of 128).  A segment of n units
 * on T ranks:
 *   n % T == 0                         rank r gets units [r*n/T, (r+1)*n/T)
 *   n < T, T % n == 0, may_replicate   rank r gets unit floor(r*n/T) (GQA KV heads)
 *   otherwise, with pad (one segment)  n is padded with zero units to a multiple of T;
 *                                      the original length stays in the global shape
 *   otherwise                          an error naming the tensor, segment, n and T.
 * A rank's slice is its pieces of every segment in segment order, then its zero padding.
 *
 * Grouped (groups G > 1): the segments describe one group and repeat G times along dim,
 * as Falcon-40B's query_key_value repeats [q heads of the group; k; v] per KV group.  A
 * rank holds its groups in that same grouped layout:
 *   G % T == 0                         rank r gets groups [r*G/T, (r+1)*G/T), whole
 *   T % G == 0                         rank r gets group floor(r*G/T), and within it the
 *                                      segments are cut for the T/G ranks sharing the
 *                                      group by the rules above (rank r % (T/G) of T/G):
 *                                      its q heads, the group's k and v replicated
 *   otherwise                          an error naming the groups (or the segment).
 * One group is the plain rule (Falcon-7B's multi-query [Q_r; K; V]).
 *
 * Uneven (one segment, no groups, no padding): the serving engine's ceil-division cut, vLLM's
 * GPT-OSS MXFP4 experts (models/gpt_oss.py _load_weights_mxfp4): c = cdiv(n, T) units a
 * rank, rank r gets units [r*c, min((r+1)*c, n)), so the last rank holds the rest (90 blocks
 * at T 8: seven ranks 12, the last 6).  No zeros are added: the last rank's shape is smaller,
 * and the manifest's per-rank shapes say so.  A T at which a rank would get nothing
 * ((T-1)*c >= n) is refused (TPS_ISSUE_EMPTY_RANK).
 *
 * Whole on one rank (owners N > 0, expert parallelism): the tensor is item `owner` of N items
 * (a MoE layer's routed experts) placed whole and linearly on the ranks, as vLLM's
 * enable_expert_parallel places experts (expert_map_manager: rank r owns [r*N/T, (r+1)*N/T)).
 * The owning rank's slice is the whole of dim (one piece), every other rank's is empty (length
 * 0, no piece), so a rank's files hold only its own items.  The cut fields (dim, segments, ...)
 * stay the tensor-parallel cut the rules chose, unused while owners is set, so dropping the
 * placement (owners 0) gives the TP cut back.  The data is T-independent (the item and the
 * count): T must divide N, or the refusal names the tensor, N and T. */
#ifndef TPS_PARTITION_H
#define TPS_PARTITION_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/dtype.h"
#include "../base/status.h"

#define TPS_MAX_SEGMENTS 8

typedef struct tps_segment {
    char name[16];    /* "q", "k", "v", "gate", "up" or "" for a plain split */
    uint64_t length;  /* elements along dim */
    uint64_t unit;    /* elements along dim that stay together; divides length */
    bool may_replicate;
} tps_segment;

/* A field added here must be added to lib/partition/partpool.c's same() and hash() too: the
 * pool shares one partition between tensors those two call equal. */
typedef struct tps_partition {
    bool replicated;
    int dim;
    int nseg;
    tps_segment seg[TPS_MAX_SEGMENTS];
    bool pad; /* zero-pad a single segment's units up to a multiple of T */
    uint64_t groups; /* 0 or 1: segments once; G > 1: the segments repeat G times (grouped) */
    /* With pad: 0 pads to a multiple of T (tpshard's own sets).  Q > 0 pads as a serving
     * engine pads its vocabulary (vLLM/SGLang: 64): always to a multiple of Q, even when T
     * divides the length, and that padded length must divide by T; rank r holds padded units
     * [r*P, (r+1)*P), P = padded/T, so the zeros sit at the global end. */
    uint64_t pad_multiple;
    /* 0 or 1: none.  Else a quantization block along dim (an FP8 block, a GPTQ/AWQ group, a
     * packed word; lib/quant/scheme.h): at T > 1 each rank's piece of every segment must be a
     * multiple of it, or the cut falls inside a block the engine refuses to split.  Not a
     * unit: units decide which heads a rank holds (a 64-row KV head stays one head under a
     * 128-row block, and its replica is then refused, not widened to two heads). */
    uint64_t block;
    bool uneven; /* the ceil-division cut above (lib/quant/mxfp4.h) */
    uint64_t owners; /* 0: none.  N > 0: whole on one rank, item `owner` of N (above) */
    uint64_t owner;
} tps_partition;

/* The rank that holds an owned partition's tensor at T ranks (T divides p->owners). */
static inline uint64_t tps_partition_owner_rank(const tps_partition *p, uint64_t T)
{
    return p->owner / (p->owners / T);
}

/* One rank's part of a split tensor along dim, in global coordinates of the unpadded
 * tensor.  Pieces come in the order they are concatenated; pad zero elements follow. */
typedef struct tps_slice {
    int npieces;
    struct {
        uint64_t start, len;
        int seg;
    } piece[TPS_MAX_SEGMENTS];
    uint64_t pad;    /* zero elements appended along dim */
    uint64_t length; /* sum of piece lengths + pad: the rank's size along dim */
} tps_slice;

/* A plain split: one segment of the whole dimension with the given unit. */
void tps_partition_simple(tps_partition *p, int dim, uint64_t dim_len, uint64_t unit);

/* Checks p against a tensor (segment lengths add up to shape[dim], units divide lengths,
 * every cut falls on a byte for sub-byte dtypes) and against T; on error the message names
 * the tensor, the segment, n and T. */
tps_status tps_partition_check(const tps_partition *p, const char *name, tps_dtype dtype, int ndim,
                               const uint64_t *shape, uint64_t T, tps_error *err);

/* What stops a partition at a given T, in numbers, so a refusal can be grouped by cause
 * (every layer's q_proj fails the same way) and the T values that work can be searched. */
typedef enum tps_issue_kind {
    TPS_ISSUE_NONE,
    TPS_ISSUE_MALFORMED,     /* the partition does not describe the tensor, whatever T */
    TPS_ISSUE_INDIVISIBLE,   /* T neither divides the segment's units nor is a multiple of them */
    TPS_ISSUE_NEEDS_REPLICA, /* fewer units than T, T a multiple of them, but no may_replicate */
    TPS_ISSUE_SUBBYTE,       /* a cut would fall inside a byte */
    TPS_ISSUE_BLOCK,         /* a rank's piece (local) is not a multiple of the quantization block */
    TPS_ISSUE_EMPTY_RANK,    /* uneven: cdiv(units, T) a rank leaves the last ranks nothing */
    TPS_ISSUE_PLACEMENT      /* whole on one rank: T does not divide the items placed (units) */
} tps_issue_kind;

typedef struct tps_partition_issue {
    tps_issue_kind kind;
    int seg, dim;
    char seg_name[16];
    uint64_t units, unit; /* the segment's unit count and unit length */
    uint64_t T;
    bool groups; /* units counts the groups of a grouped partition (KV groups) */
    uint64_t local, block; /* TPS_ISSUE_BLOCK: a rank's piece of the segment, the block */
    /* A quantized companion's cut in the words of the user's config (lib/quant/quant.h:
     * tps_quant_issue_terms fills them; qratio 0: not one): the scheme's rule ("GPTQ group
     * size 32"), the logical weight's dim the cut follows (0 output, 1 input), its elements
     * per stored element along the cut, and the multiple a rank's piece of it must be. */
    char qrule[48];
    int qwdim;
    uint64_t qratio, qalign;
} tps_partition_issue;

/* tps_partition_check that also fills *issue (when not NULL) with the cause in numbers. */
tps_status tps_partition_diagnose(const tps_partition *p, const char *name, tps_dtype dtype, int ndim,
                                  const uint64_t *shape, uint64_t T, tps_partition_issue *issue, tps_error *err);

/* Whether a tensor name is an embedding or output projection, whose vocabulary dimension
 * may be zero-padded (pad: true); other dimensions (heads, MLP) cannot. */
bool tps_partition_vocab_like(const char *name);

/* tps_partition_check, with "; rule LABEL" appended to a refusal: the partition knows the
 * tensor and the numbers, the caller knows which layout rule (and file:line) chose them. */
tps_status tps_partition_check_rule(const tps_partition *p, const char *name, tps_dtype dtype, int ndim,
                                    const uint64_t *shape, uint64_t T, const char *rule, tps_error *err);

/* Rank r's slice.  Call tps_partition_check first; the result is undefined otherwise. */
void tps_partition_slice(const tps_partition *p, uint64_t T, uint64_t r, tps_slice *out);

/* Rank r's shape: the global shape with dim replaced by the slice length (the global shape
 * when replicated). */
void tps_partition_rank_shape(const tps_partition *p, int ndim, const uint64_t *shape, uint64_t T,
                              uint64_t r, uint64_t *out);

/* Whether two ranks' slices are replicas of each other (both hold the same units). */
bool tps_slice_equal(const tps_slice *a, const tps_slice *b);

/* "column split of dim 0 in 3 segments q/k/v, unit 8" style description for plan output. */
void tps_partition_describe(const tps_partition *p, char *buf, size_t bufsize);

#endif
