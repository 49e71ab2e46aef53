/* vLLM's cut of GPT-OSS's MXFP4 experts (lib/quant/mxfp4.h): quant_method "mxfp4" quantizes no
 * linear, so the method has no companion scheme and cuts every tensor itself. */
#include "mxfp4.h"

#include <stdio.h>
#include <string.h>

#include "../base/index.h"
#include "quant_int.h"

typedef struct mx_tensor {
    const char *suffix;
    int ndim, dim; /* the tensor's rank and the dimension vLLM cuts */
    uint64_t unit; /* elements along dim per 32-wide block of the intermediate dimension */
    int ldim;      /* the dimension the rule of its BF16 tensor cuts (the intermediate one) */
    bool logical;  /* blocks or scales: the BF16 tensor's rule decides (name without the suffix) */
} mx_tensor;

static const mx_tensor tensors[] = {
    {".mlp.experts.gate_up_proj_blocks", 4, 1, 2 * TPS_MXFP4_BLOCK, 2, true},
    {".mlp.experts.gate_up_proj_scales", 3, 1, 2 * TPS_MXFP4_BLOCK, 2, true},
    {".mlp.experts.gate_up_proj_bias", 2, 1, 2 * TPS_MXFP4_BLOCK, 1, false},
    {".mlp.experts.down_proj_blocks", 4, 2, 1, 1, true},
    {".mlp.experts.down_proj_scales", 3, 2, 1, 1, true},
};

static const mx_tensor *find(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
        size_t k = strlen(tensors[i].suffix);
        if (n >= k && strcmp(name + n - k, tensors[i].suffix) == 0) return &tensors[i];
    }
    return NULL;
}

/* When name is an experts' *_blocks or *_scales tensor of shape [E, rows, G(, 16)]: true, with
 * lname (lsize bytes) the BF16 tensor's name (the suffix dropped) and lshape its 3-D shape
 * [E, G*32, rows]. */
static bool logical(const char *name, int ndim, const uint64_t *shape, char *lname, size_t lsize, uint64_t *lshape)
{
    const mx_tensor *t = find(name);
    if (!t || !t->logical || ndim < 3) return false;
    size_t n = strlen(name) - 7; /* "_blocks" and "_scales" alike */
    if (n >= lsize) return false;
    memcpy(lname, name, n);
    lname[n] = '\0';
    /* [E, rows, G(, 16)] holds the BF16 [E, G*32, rows]: gate_up_proj [E, H, 2I], down_proj [E, I, H] */
    lshape[0] = shape[0];
    lshape[1] = shape[2] * TPS_MXFP4_BLOCK;
    lshape[2] = shape[1];
    return true;
}

/* When name is one of the MXFP4 experts' cut tensors, turns *p, the partition its rule (or
 * its BF16 tensor's rule) gives, into vLLM's cut, checking that the rule cuts the
 * intermediate dimension and that the shape is the format's; the message names the tensor
 * and the numbers.  Other tensors are left alone. */
static tps_status vllm_cut(const char *name, int ndim, const uint64_t *shape, tps_partition *p, tps_error *err)
{
    const mx_tensor *t = find(name);
    if (!t) return TPS_OK;
    char shp[128];
    tps_shape_str(shape, ndim, shp, sizeof shp);
    if (ndim != t->ndim || (ndim == 4 && shape[3] != TPS_MXFP4_BLOCK / 2))
        return tps_fail(err, TPS_EINVALID, "tensor %s: shape %s is not MXFP4's (%d dimensions%s)", name, shp, t->ndim,
                        t->ndim == 4 ? ", 16 bytes a block last" : "");
    if (p->replicated || p->nseg != 1 || p->dim != t->ldim || p->groups > 1 || p->pad)
        return tps_fail(err, TPS_EINVALID, "tensor %s: MXFP4 experts are cut along the intermediate dimension as one "
                        "segment (vLLM _load_weights_mxfp4); the layout's rule for %s cuts otherwise", name,
                        t->logical ? "its BF16 tensor" : "it");
    if (shape[t->dim] % t->unit != 0)
        return tps_fail(err, TPS_EINVALID, "tensor %s: dimension %d has %llu, not a multiple of %llu (whole %d-wide "
                        "blocks of the intermediate dimension)", name, t->dim, (unsigned long long)shape[t->dim],
                        (unsigned long long)t->unit, TPS_MXFP4_BLOCK);
    tps_partition_simple(p, t->dim, shape[t->dim], t->unit);
    p->uneven = true;
    return TPS_OK;
}

/* The BF16 tensors' rules give the dimension, vLLM's rule the cut. */
tps_status tps_quant_cut_mxfp4(const char *name, tps_dtype dtype, int ndim, const uint64_t *shape,
                               tps_quant_rule_fn rule, void *ctx, tps_partition *out, tps_error *err)
{
    char lname[1100];
    uint64_t lshape[3];
    bool blocks = logical(name, ndim, shape, lname, sizeof lname, lshape);
    tps_status st = blocks ? rule(ctx, lname, TPS_DT_BF16, 3, lshape, out, err)
                           : rule(ctx, name, dtype, ndim, shape, out, err);
    return st == TPS_OK ? vllm_cut(name, ndim, shape, out, err) : st;
}

tps_status tps_quant_read_mxfp4(tps_quant *q, const tps_json *qc, const char *what, tps_error *err)
{
    (void)qc;
    (void)what;
    snprintf(q->desc, sizeof q->desc, "mxfp4 (experts as FP4 e2m1 blocks of 32 with e8m0 scales)");
    return tps_quant_new_groups(q, 0, err);
}

bool tps_quant_is_mxfp4(const tps_quant *q) { return q && q->method->cut == tps_quant_cut_mxfp4; }
