/* Private to the layout module (lib/layout/layout*.c, lib/layout/glob.c, lib/layout/block.c): the parsed form
 * of a layout, compiled size expressions, and the name tables of the YAML schema.  The
 * schema itself is documented at the top of lib/layout/layout.c. */
#ifndef TPS_LAYOUT_INT_H
#define TPS_LAYOUT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* A position in the layout text, 1-based. */
typedef struct tps_mark {
    size_t line, col;
} tps_mark;

/* The model sizes by name, in tps_model_sizes field order. */
#define TPS_NSIZES 13
extern const char *const tps_size_names[TPS_NSIZES];
uint64_t *tps_size_slot(tps_model_sizes *s, int i);
uint64_t tps_size_get(const tps_model_sizes *s, int i);
int tps_size_lookup(const char *name, size_t len); /* -1 when not a size name */

/* A size expression compiled to postfix: integers and size names with + - * / and
 * parentheses.  n == 0 means "not given". */
typedef struct tps_expr_op {
    char op;    /* 'n' number, 's' size, or one of + - * / */
    uint64_t v; /* the number, or the size index */
} tps_expr_op;

typedef struct tps_expr {
    tps_expr_op *code;
    int n;
    char *text;
    tps_mark at; /* where the expression's text starts */
} tps_expr;

/* Compiles text; on failure returns false with *errpos the byte offset in text and *errmsg
 * a static description. */
bool tps_expr_compile(const char *text, tps_expr *out, size_t *errpos, const char **errmsg);
/* True when every size the expression names is known (non-zero). */
bool tps_expr_ready(const tps_expr *e, const tps_model_sizes *s);
/* Evaluates with exact integer arithmetic.  Fails (TPS_EINVALID) on an unknown size, a
 * negative intermediate result, overflow, division by zero or an inexact division; the
 * message starts with ctx and names the expression, its file:line:column and the values. */
tps_status tps_expr_eval(const tps_expr *e, const tps_model_sizes *s, const char *file, const char *ctx,
                         uint64_t *out, tps_error *err);
void tps_expr_release(tps_expr *e);

/* Checks glob syntax: braces balanced and not nested, no empty pattern.  On failure
 * *errpos is the offending byte offset. */
bool tps_glob_valid(const char *pattern, size_t *errpos, const char **errmsg);

typedef enum tps_split_kind { TPS_SPLIT_REPLICATE, TPS_SPLIT_COLUMN, TPS_SPLIT_ROW, TPS_SPLIT_DIM } tps_split_kind;

typedef struct tps_lsegment {
    char name[16];
    tps_expr size, unit;
    bool may_replicate;
} tps_lsegment;

typedef struct tps_rule {
    char **globs;
    size_t nglobs;
    tps_split_kind split;
    bool has_dim;
    int dim; /* negative counts from the last dimension */
    tps_expr unit, size;
    int nseg;
    tps_lsegment seg[TPS_MAX_SEGMENTS];
    bool pad, kv_replicate, is_default;
    tps_mark at;
    char *label;
    uint64_t matches;
    tps_expr groups; /* grouped: the segments repeat this many times along dim (n == 0: once) */
} tps_rule;

typedef enum tps_hint_kind { TPS_HINT_NONE, TPS_HINT_TENSOR, TPS_HINT_COUNT, TPS_HINT_EXPR } tps_hint_kind;

typedef struct tps_hint {
    tps_hint_kind kind;
    char *glob;       /* TENSOR, COUNT */
    int dim;          /* TENSOR */
    tps_expr unit;    /* TENSOR: the dimension counts units of this many elements */
    tps_expr expr;    /* EXPR */
    tps_mark at;
} tps_hint;

/* Block fields that a layout may leave unset, to be filled from config.json or the kind's
 * defaults (bit positions in tps_layout.block_set / cfg_set). */
enum {
    TPS_BF_NORM, TPS_BF_NORM_EPS, TPS_BF_ACT, TPS_BF_ROPE, TPS_BF_ROPE_THETA, TPS_BF_ROTARY_PCT,
    TPS_BF_PARALLEL_RESIDUAL, TPS_BF_CONV1D, TPS_BF_QKV_INTERLEAVED, TPS_BF_TOP_K,
    /* tps_moe_routing, by config.json's keys */
    TPS_BF_SCORING, TPS_BF_TOPK_METHOD, TPS_BF_NORM_TOPK, TPS_BF_SCALING, TPS_BF_N_GROUP, TPS_BF_TOPK_GROUP,
    TPS_BF_FIRST_DENSE, TPS_BF_LAYER_FREQ, TPS_BF_SPARSE_STEP, TPS_BF_MLP_ONLY, TPS_BF_QKV_GROUPED
};

/* A skip: entry: tensors the plan leaves out (non-persistent buffers such as RoPE's
 * inv_freq), with the reason the plan prints and the manifest records. */
typedef struct tps_skip {
    char *glob;
    char *reason;
    tps_mark at;
    uint64_t matches;
} tps_skip;

struct tps_layout {
    char *source; /* what messages call the text: a path or "preset:NAME" */
    char *name;   /* the layout's own name: key */
    char *text;
    char *description;
    tps_model_sizes sizes;
    tps_hint hints[TPS_NSIZES];
    tps_rule *rules; /* the default rule, when given, is the last */
    size_t nrules;
    char **architectures; /* Hugging Face architectures a preset serves (auto-detection) */
    size_t narchitectures;
    char **aliases; /* other names --preset accepts (Hugging Face model_type spellings) */
    size_t naliases;
    tps_skip *skips;
    size_t nskips;
    bool has_block;
    tps_block block_raw; /* as written; numbers 0 and fields outside block_set unset */
    unsigned block_set;
    tps_block cfg;       /* values read from config.json, fields in cfg_set */
    unsigned cfg_set;
    tps_block block;     /* effective: layout, then config.json, then sizes and kind defaults */
    struct tps_quant *quant; /* config.json's quantization_config (lib/quant/quant.h); NULL: none */
};

/* Reads a config.json whole (a regular file of at most 16 MiB), NUL-terminated; *out is
 * malloc'd.  A missing file is TPS_EINVALID. */
tps_status tps_read_config_file(const char *path, char **out, size_t *len, tps_error *err);

/* Recomputes l->block from block_raw, cfg, sizes and the kind's defaults. */
void tps_layout_sync_block(tps_layout *l);

/* Name tables of the schema (lib/layout/block.c); each returns -1 for an unknown name. */
int tps_block_kind_lookup(const char *s);
int tps_block_role_lookup(const char *s);
int tps_norm_lookup(const char *s);
int tps_act_lookup(const char *s);
int tps_rope_lookup(const char *s);
int tps_moe_scoring_lookup(const char *s);
int tps_moe_topk_lookup(const char *s);
const char *tps_norm_name(tps_norm_kind k);
const char *tps_act_name(tps_act_kind k);
const char *tps_rope_name(tps_rope_style r);
int tps_qk_norm_lookup(const char *s);
/* Hugging Face hidden_act / activation_function values; -1 when not one tpshard computes. */
int tps_act_from_hf(const char *s);

#endif
