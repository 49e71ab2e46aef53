/* Refusals grouped by cause.  A layout that does not fit a tp usually fails the same way on
 * every layer (80 layers of q_proj, each with 64 heads that 3 does not divide), so a refusal
 * is one entry per distinct cause with the count of tensors it hit and their names folded
 * into patterns (model.layers.{0..79}.self_attn.q_proj.weight), plus what would work: the tp
 * values that fit every tensor, found by trying each candidate with the partition algebra.
 * plan and reshard both report through this, so their refusals read the same. */
#ifndef TPS_PROBLEMS_H
#define TPS_PROBLEMS_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/buf.h"
#include "../base/dtype.h"
#include "../base/json.h"
#include "../layout/layout.h"
#include "../partition/partition.h"

typedef enum tps_problem_kind {
    TPS_PROBLEM_TP,      /* the partition does not fit the tp: issue says how */
    TPS_PROBLEM_NO_RULE, /* no layout rule matches the tensor */
    TPS_PROBLEM_SIZES,   /* the rule needs sizes that are unknown: missing names them */
    TPS_PROBLEM_OTHER    /* the rule does not describe the tensor (shape, segments, dimension) */
} tps_problem_kind;

#define TPS_PROBLEM_PATTERNS 3
#define TPS_PATTERN_NUMS 4

/* Names that differ only in their numeric components, folded: text has '#' for each number. */
typedef struct tps_name_pattern {
    char *text;
    int nnums;
    uint64_t lo[TPS_PATTERN_NUMS], hi[TPS_PATTERN_NUMS];
    uint64_t count;
} tps_name_pattern;

typedef struct tps_problem {
    tps_problem_kind kind;
    char *rule;    /* the rule's label; NULL when no rule matched */
    char *message; /* the first tensor's own refusal, for causes without numbers */
    char *key;     /* what the tensors of this group have in common */
    tps_partition_issue issue; /* TPS_PROBLEM_TP */
    char missing[128];         /* TPS_PROBLEM_SIZES: "head_dim, heads" */
    bool vocab_like;           /* the first tensor is an embedding or output projection */
    uint64_t count;
    tps_name_pattern pat[TPS_PROBLEM_PATTERNS];
    int npat;
    uint64_t unlisted; /* tensors of the group that fit none of the patterns kept */
} tps_problem;

typedef struct tps_fit_key tps_fit_key;

typedef struct tps_problems {
    uint64_t tp;
    tps_problem *v; /* in order of first appearance */
    size_t n, cap;
    uint64_t total; /* tensors refused */
    bool oom;
    /* Every tensor's partition (deduplicated by tps_problems_finish), for the tp search. */
    tps_fit_key *parts;
    size_t nparts, partcap;
    /* Set by tps_problems_finish when every refusal is a tp problem: the tp values from 1
     * to fit_bound at which every partition fits.  fit_bound is below TPS_FIT_MAX only when
     * no larger tp can fit (a segment that can neither be padded nor replicated). */
    bool fit_known;
    uint64_t *fit;
    size_t nfit;
    uint64_t fit_bound;
} tps_problems;

#define TPS_FIT_MAX 1024

void tps_problems_init(tps_problems *ps, uint64_t tp);
void tps_problems_free(tps_problems *ps);

/* Records one tensor's refusal.  issue for TPS_PROBLEM_TP, missing for TPS_PROBLEM_SIZES
 * (NULL otherwise).  Allocation failure sets ps->oom. */
void tps_problems_add(tps_problems *ps, tps_problem_kind kind, const char *tensor, const char *rule,
                      const tps_partition_issue *issue, const char *missing, const char *message);

/* Records a tensor's partition (fitting or not) for the search of the tp values that fit. */
void tps_problems_consider(tps_problems *ps, const tps_partition *p, tps_dtype dtype, int ndim,
                           const uint64_t *shape);

/* After the last add and consider: searches the tp values that fit when every refusal is a
 * tp problem (otherwise the partitions of some tensors are unknown and fit_known stays false). */
tps_status tps_problems_finish(tps_problems *ps, tps_error *err);

/* How many refusals are of this kind. */
size_t tps_problems_count_kind(const tps_problems *ps, tps_problem_kind kind);

/* One line (no newline) for a group: the cause in numbers (heads, KV heads, intermediate
 * size or vocabulary when sizes name them; units otherwise), the count, the name patterns
 * and the rule.  sizes may be NULL. */
void tps_problem_line(const tps_problem *g, const tps_model_sizes *sizes, tps_buf *out);

/* The tensor names of a group, folded: "model.layers.{0..79}.self_attn.k_proj.weight, ...". */
void tps_problem_names(const tps_problem *g, tps_buf *out);

/* "tp values that fit: 1, 2, 4, 8" (or that none above 1 does); nothing when not known. */
void tps_problems_fit_line(const tps_problems *ps, tps_buf *out);

/* Writes "tensors_refused", "problems" (an array of groups) and "tp_values_that_fit" (an
 * array, or null when unknown) as members of the object w is in. */
void tps_problems_json(const tps_problems *ps, const tps_model_sizes *sizes, tps_jw *w);

#endif
