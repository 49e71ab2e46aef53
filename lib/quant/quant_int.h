/* Private to lib/quant/: a read quantization_config, the table's line, and what the families'
 * files share.  The table itself is lib/quant/schemes.c. */
#ifndef TPS_QUANT_INT_H
#define TPS_QUANT_INT_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/json.h"
#include "../base/status.h"
#include "scheme.h"

typedef struct tps_quant tps_quant;

/* A module name pattern of ignore / targets lists. */
typedef struct tps_quant_pattern {
    char *text;
    bool re; /* "re:PATTERN": a Python re.match, anchored at the start */
    regex_t rx;
} tps_quant_pattern;

/* The scheme of the modules one group targets. */
typedef struct tps_quant_group {
    tps_quant_pattern *targets; /* compressed-tensors config_groups.<g>.targets; none: every module */
    size_t ntargets;
    tps_quant_scheme s;
} tps_quant_group;

/* A line of the table: a quant_method and how its checkpoints are read and cut. */
typedef struct tps_quant_method {
    const char *name; /* quantization_config.quant_method */
    /* Fills q from the config qc (what names the file): its groups (the schemes of its
     * quantized linears, whose companions say how their tensors partition), its ignore list
     * and desc.  NULL: refused, for the reason below. */
    tps_status (*read)(tps_quant *q, const tps_json *qc, const char *what, tps_error *err);
    /* Non-NULL: the method cuts every tensor itself (tps_quant_cut), asking rule for the
     * layout's cut of the tensors it follows, instead of deriving companions. */
    tps_status (*cut)(const char *name, tps_dtype dtype, int ndim, const uint64_t *shape, tps_quant_rule_fn rule,
                      void *ctx, tps_partition *out, tps_error *err);
    const char *refused; /* read NULL: why, after "quant_method NAME: " */
} tps_quant_method;

/* The table (lib/quant/schemes.c), ended by a line whose name is NULL. */
extern const tps_quant_method tps_quant_methods[];

struct tps_quant {
    const tps_quant_method *method;
    char desc[256];
    tps_quant_pattern *ignore;
    size_t nignore;
    bool ignore_substring; /* transformers' modules_to_not_convert: a key inside the name */
    tps_quant_group *groups;
    size_t ngroups;
};

/* Each family's reader and cut (one file a family: fp8.c, compressed_tensors.c,
 * gptq_awq.c, mxfp4.c). */
tps_status tps_quant_read_fp8(tps_quant *q, const tps_json *qc, const char *what, tps_error *err);
tps_status tps_quant_read_ct(tps_quant *q, const tps_json *qc, const char *what, tps_error *err);
tps_status tps_quant_read_gptq(tps_quant *q, const tps_json *qc, const char *what, tps_error *err);
tps_status tps_quant_read_awq(tps_quant *q, const tps_json *qc, const char *what, tps_error *err);
tps_status tps_quant_read_mxfp4(tps_quant *q, const tps_json *qc, const char *what, tps_error *err);
tps_status tps_quant_cut_mxfp4(const char *name, tps_dtype dtype, int ndim, const uint64_t *shape,
                               tps_quant_rule_fn rule, void *ctx, tps_partition *out, tps_error *err);

/* What the readers share (lib/quant/config.c). */
/* A list of strings (or null / absent: none) into patterns; key names the list. */
tps_status tps_quant_patterns(const tps_json *v, const char *what, const char *key, tps_quant_pattern **out,
                              size_t *n, tps_error *err);
void tps_quant_patterns_free(tps_quant_pattern *p, size_t n);
/* Whether module matches p: the whole name, its last components, or (substring) any part. */
bool tps_quant_pattern_match(const tps_quant_pattern *p, const char *module, bool substring);
/* obj's key when it is a string, else NULL. */
const char *tps_quant_str(const tps_json *obj, const char *key);
/* Room for n groups in q (none yet counted). */
tps_status tps_quant_new_groups(tps_quant *q, size_t n, tps_error *err);
/* q's ignore list from qc's list under key, matched inside a name as transformers matches
 * modules_to_not_convert. */
tps_status tps_quant_not_converted(tps_quant *q, const tps_json *qc, const char *what, const char *key,
                                   tps_error *err);

/* FP8 schemes (lib/quant/fp8.c), which compressed-tensors' groups use too: the FP8 weight and
 * its scale (suffix scale) of one strategy, [bn, bk] the block of TPS_FP8_BLOCK. */
enum { TPS_FP8_TENSOR, TPS_FP8_CHANNEL, TPS_FP8_BLOCK };
void tps_quant_fp8_scheme(tps_quant_scheme *s, int strategy, const char *scale, uint64_t bn, uint64_t bk);
/* A [bn, bk] block size list under key. */
tps_status tps_quant_block_size(const tps_json *v, const char *what, const char *key, uint64_t *bn, uint64_t *bk,
                                tps_error *err);

#endif
