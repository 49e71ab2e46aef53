/* The parsed targets: section as data, for the files of lib/targets that build it
 * (target_schema.c) and read it (target_apply.c, target_reverse.c); opaque elsewhere. */
#ifndef TPS_TARGET_INT_H
#define TPS_TARGET_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "target_schema.h"

#define MAX_FROM 8
#define NAME_MAX_LEN 1024

/* extras: entry: names the engine's state dict holds once per match of per, whatever the
 * source (vLLM's attention scale buffers), each a 0-d F32 value; since: the first release
 * of the engine that has them, before: the first that no longer has them under these names
 * (vLLM 0.32 serves GPT-NeoX through its Transformers backend, under model.*), engine: the
 * one engine they are for. */
typedef struct textra {
    char *names[MAX_FROM];
    size_t nnames;
    char *per, *since, *before, *engine;
    double value;
} textra;

/* tensors: entry.  since: the first engine release whose state dict has into (an earlier
 * entry with the same from wins from that release on, a later one names the older releases'
 * tensor: vLLM 0.24 moved FusedMoE's w13_weight/w2_weight into experts.routed_experts);
 * engine: the one engine it is for (not sglang through an alias). */
typedef struct tentry {
    char *from[MAX_FROM];
    size_t nfrom;
    char *into;
    char *since, *engine;
    bool stack, tied;
    size_t line;
} tentry;

/* blocked: entry: tensors whose rank files hold their rows blocked (target_blocks); before:
 * the first engine release that holds them as the source does (vLLM 0.32's GPT-NeoX);
 * engine: the one engine it is for. */
typedef struct tblocked {
    char *match;
    char *before, *engine;
    uint64_t blocks; /* 0: a transposed:, rank0:, rope_halves: or flattened: entry */
    bool rank0;      /* a rank0: entry: the engine holds the tensor on rank 0, zeros on the others */
    bool rope_halves; /* a rope_halves: entry: each head's rows from RoPE pairs to halves */
    bool flatten;     /* a flattened: entry: the last two dimensions merged (target_flatten) */
} tblocked;

/* skip: entry: the tensors named PRE{layer}POST whose layer is at least config.json's
 * layers_from (num_hidden_layers: the multi-token-prediction layer past the main model),
 * which the engine's main model does not hold (lib/targets/target_skip.h). */
typedef struct tskip {
    char *pre, *post; /* match split at {layer} */
    char *layers_from, *reason;
} tskip;

struct tps_target {
    tskip *s;
    size_t ns;
    tblocked *b;
    size_t nb;
    char *name;
    char *source; /* what messages call the layout */
    uint64_t vocab_multiple;
    char *experts_rule;  /* the engine refuses a tp above the experts of a stack: its rule */
    tentry *e;
    size_t n;
    textra *x;
    size_t nx;
    textra *q; /* required: what an engine-saved set must hold once per match of per */
    size_t nq;
};

#endif
