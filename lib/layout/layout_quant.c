/* The layout's rules applied to a quantized checkpoint: a companion tensor (lib/quant/scheme.h)
 * takes the partition its logical weight's rule gives, in its own units, so presets carry
 * no per-format rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "../quant/quant.h"
#include "layout_int.h"

const struct tps_quant *tps_layout_quant(const tps_layout *l) { return l->quant; }

/* A rule written for the companion itself: it matches the name and its glob names the
 * companion's suffix ("*.weight_scale_inv"), so a hand-written layout can still say how one
 * is cut (the verify tests cut scales wrongly this way). */
static bool explicit_rule(const tps_layout *l, const char *name, const char *suffix)
{
    for (size_t i = 0; i < l->nrules; i++) {
        const tps_rule *r = &l->rules[i];
        if (r->is_default) continue;
        for (size_t g = 0; g < r->nglobs; g++)
            if (tps_glob_match(r->globs[g], name)) return strstr(r->globs[g], suffix) != NULL;
    }
    return false;
}

/* The layout's rule, as a method that cuts its tensors itself asks for it (lib/quant/scheme.h:
 * tps_quant_rule_fn); the rule that matched goes to the caller's *rule. */
typedef struct rule_ctx {
    tps_layout *l;
    size_t *rule;
} rule_ctx;

static tps_status layout_rule(void *ctx, const char *name, tps_dtype dtype, int ndim, const uint64_t *shape,
                              tps_partition *out, tps_error *err)
{
    rule_ctx *c = ctx;
    return tps_layout_partition(c->l, name, dtype, ndim, shape, out, c->rule, err);
}

tps_status tps_layout_partition_tensor(tps_layout *l, const tps_index *ix, const tps_tensor *x, tps_partition *out,
                                       size_t *rule, bool *follows, tps_error *err)
{
    size_t mlen = 0;
    if (follows) *follows = false;
    if (tps_quant_cuts_itself(l->quant)) {
        rule_ctx rc = {l, rule};
        return tps_quant_cut(l->quant, x->name, x->dtype, x->ndim, x->shape, layout_rule, &rc, out, err);
    }
    const tps_quant_scheme *s;
    int c = tps_quant_tensor(l->quant, x->name, &s, &mlen);
    /* The weight's own rule is its rule (every preset glob names "weight"): only the other
     * companions can have rules of their own. */
    if (c < 0 || (strcmp(s->comp[c].suffix, "weight") != 0 && explicit_rule(l, x->name, s->comp[c].suffix)))
        return tps_layout_partition(l, x->name, x->dtype, x->ndim, x->shape, out, rule, err);

    /* The module is a quantized linear only where the checkpoint holds its scale (the
     * second companion): a norm's .weight, or a layer the config quantizes but the file
     * does not, is cut as it is. */
    char wname[1100], kname[1100];
    snprintf(kname, sizeof kname, "%.*s.%s", (int)mlen, x->name, s->comp[1].suffix);
    if (!tps_index_find(ix, kname)) return tps_layout_partition(l, x->name, x->dtype, x->ndim, x->shape, out, rule, err);
    int p = 0;
    while (p < s->ncomp && !s->comp[p].primary) p++;
    char pname[1100];
    snprintf(pname, sizeof pname, "%.*s.%s", (int)mlen, x->name, s->comp[p].suffix);
    const tps_tensor *pt = tps_index_find(ix, pname);
    if (!pt)
        return tps_fail(err, TPS_EINVALID, "tensor %s: a quantized linear (%s) without its %s (%s)", x->name, s->name,
                        s->comp[p].suffix, pname);
    uint64_t wshape[2];
    tps_status st = tps_quant_logical_shape(s, p, pt->name, pt->ndim, pt->shape, wshape, err);
    if (st != TPS_OK) return st;
    snprintf(wname, sizeof wname, "%.*s.weight", (int)mlen, x->name);
    tps_partition wpart;
    if ((st = tps_layout_partition(l, wname, TPS_DT_BF16, 2, wshape, &wpart, rule, err)) != TPS_OK) return st;
    if (follows) *follows = !s->comp[c].primary;
    return tps_quant_derive(s, c, &wpart, wshape, x->name, x->ndim, x->shape, out, err);
}

tps_status tps_layout_quant_summary(const char *text, size_t len, const char *path, char **out, tps_error *err)
{
    *out = NULL;
    char *owned = NULL;
    tps_status st;
    if (!text) {
        st = tps_read_config_file(path, &owned, &len, err);
        if (st == TPS_EINVALID) return TPS_OK; /* no config.json: nothing says it is quantized */
        if (st != TPS_OK) return st;
        text = owned;
    }
    tps_json_doc *doc = NULL;
    tps_quant *q = NULL;
    st = tps_json_parse(text, len, path, &doc, err);
    if (st == TPS_OK) {
        const tps_json *root = tps_json_root(doc), *qc = tps_json_get(root, "quantization_config");
        const tps_json *tc = tps_json_get(root, "text_config");
        if (!qc && tc) qc = tps_json_get(tc, "quantization_config");
        tps_error why;
        tps_error_clear(&why);
        if (tps_quant_from_config(qc, path, &q, &why) != TPS_OK) *out = strdup(why.msg);
        else if (q) *out = strdup(tps_quant_describe(q));
        if ((q || qc) && !*out) st = tps_fail_oom(err, "describing the quantization");
    }
    tps_quant_free(q);
    tps_json_doc_free(doc);
    free(owned);
    return st;
}
