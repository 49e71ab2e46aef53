/* Applying a layout's rules to tensors: the first matching rule becomes a tps_partition.
 * Divisibility by T is tps_partition_check's business; this only resolves the rule's
 * dimension, units and segment lengths, and checks they describe the tensor's shape. */
#include <stdio.h>
#include <string.h>

#include "../base/checked.h"
#include "layout_int.h"

static bool rule_matches(const tps_rule *r, const char *name)
{
    if (r->is_default) return true;
    for (size_t i = 0; i < r->nglobs; i++)
        if (tps_glob_match(r->globs[i], name)) return true;
    return false;
}

static tps_status eval_positive(const tps_layout *l, const tps_expr *e, const char *ctx, const char *what,
                                uint64_t *out, tps_error *err)
{
    tps_status st = tps_expr_eval(e, &l->sizes, l->source, ctx, out, err);
    if (st == TPS_OK && *out == 0)
        st = tps_fail(err, TPS_EINVALID, "%s: %s '%s' (%s:%zu:%zu) is 0", ctx, what, e->text, l->source, e->at.line,
                      e->at.col);
    return st;
}

tps_status tps_layout_partition(tps_layout *l, const char *name, tps_dtype dtype, int ndim, const uint64_t *shape,
                                tps_partition *out, size_t *rule, tps_error *err)
{
    (void)dtype; /* cuts inside a byte are tps_partition_check's to refuse */
    memset(out, 0, sizeof *out);
    size_t i = 0;
    while (i < l->nrules && !rule_matches(&l->rules[i], name)) i++;
    if (i == l->nrules)
        return tps_fail(err, TPS_EINVALID,
                        "tensor %s: no rule of layout %s matches it (add a rule, or a default: rule)", name,
                        l->source);
    tps_rule *r = &l->rules[i];
    r->matches++;
    if (rule) *rule = i;
    if (r->split == TPS_SPLIT_REPLICATE) {
        out->replicated = true;
        return TPS_OK;
    }

    char ctx[512], shp[256];
    snprintf(ctx, sizeof ctx, "tensor %s: rule %s", name, r->label);
    tps_shape_str(shape, ndim, shp, sizeof shp);
    if (ndim == 0) return tps_fail(err, TPS_EINVALID, "%s: a scalar (shape []) cannot be split", ctx);
    int d;
    if (r->has_dim) {
        d = r->dim < 0 ? ndim + r->dim : r->dim;
        if (d < 0 || d >= ndim)
            return tps_fail(err, TPS_EINVALID, "%s: dim %d is outside shape %s", ctx, r->dim, shp);
    } else if (r->split == TPS_SPLIT_ROW) {
        if (ndim == 1)
            return tps_fail(err, TPS_EINVALID,
                            "%s: a row split of a 1-D tensor (shape %s); a row-parallel bias is added once after "
                            "the all-reduce, so give it a rule with split: replicate",
                            ctx, shp);
        d = 1;
    } else {
        d = 0;
    }

    tps_status st;
    uint64_t unit = 1;
    if (r->unit.n && (st = eval_positive(l, &r->unit, ctx, "unit", &unit, err)) != TPS_OK) return st;
    out->dim = d;
    out->pad = r->pad;
    if (r->nseg == 0) {
        out->nseg = 1;
        out->seg[0].length = shape[d];
        out->seg[0].unit = unit;
        out->seg[0].may_replicate = r->kv_replicate;
        if (r->size.n) {
            uint64_t want;
            if ((st = eval_positive(l, &r->size, ctx, "size", &want, err)) != TPS_OK) return st;
            if (want != shape[d])
                return tps_fail(err, TPS_EINVALID, "%s: size %s = %llu, but dim %d of shape %s is %llu", ctx,
                                r->size.text, (unsigned long long)want, d, shp, (unsigned long long)shape[d]);
        }
        return TPS_OK;
    }

    uint64_t sum = 0;
    char sums[512] = "";
    size_t used = 0;
    bool overflow = false;
    out->nseg = r->nseg;
    for (int s = 0; s < r->nseg; s++) {
        const tps_lsegment *ls = &r->seg[s];
        tps_segment *seg = &out->seg[s];
        memcpy(seg->name, ls->name, sizeof seg->name);
        seg->may_replicate = ls->may_replicate;
        seg->unit = unit;
        if ((st = eval_positive(l, &ls->size, ctx, "segment size", &seg->length, err)) != TPS_OK) return st;
        if (ls->unit.n && (st = eval_positive(l, &ls->unit, ctx, "segment unit", &seg->unit, err)) != TPS_OK)
            return st;
        overflow |= !tps_add_u64(sum, seg->length, &sum);
        int w = snprintf(sums + used, sizeof sums - used, "%s%s=%llu", s ? " + " : "", seg->name,
                         (unsigned long long)seg->length);
        if (w > 0 && (size_t)w < sizeof sums - used) used += (size_t)w;
    }
    if (r->groups.n) { /* grouped: the segments are one group's, repeated */
        if ((st = eval_positive(l, &r->groups, ctx, "groups", &out->groups, err)) != TPS_OK) return st;
        overflow |= !tps_mul_u64(sum, out->groups, &sum);
        if (overflow || sum != shape[d])
            return tps_fail(err, TPS_EINVALID,
                            "%s: segments %s of each of %s = %llu groups add up to %s%llu, but dim %d of shape %s is %llu",
                            ctx, sums, r->groups.text, (unsigned long long)out->groups, overflow ? "more than " : "",
                            (unsigned long long)sum, d, shp, (unsigned long long)shape[d]);
        if (out->groups == 1) out->groups = 0; /* one group is the plain rule (Falcon-7B's multi-query) */
        return TPS_OK;
    }
    if (overflow || sum != shape[d])
        return tps_fail(err, TPS_EINVALID, "%s: segments %s add up to %s%llu, but dim %d of shape %s is %llu", ctx,
                        sums, overflow ? "more than " : "", (unsigned long long)sum, d, shp,
                        (unsigned long long)shape[d]);
    return TPS_OK;
}

size_t tps_layout_skip_match(tps_layout *l, const char *name)
{
    for (size_t i = 0; i < l->nskips; i++)
        if (tps_glob_match(l->skips[i].glob, name)) {
            l->skips[i].matches++;
            return i;
        }
    return SIZE_MAX;
}

size_t tps_layout_skip_count(const tps_layout *l) { return l->nskips; }

const char *tps_layout_skip_glob(const tps_layout *l, size_t i) { return i < l->nskips ? l->skips[i].glob : NULL; }

const char *tps_layout_skip_reason(const tps_layout *l, size_t i) { return i < l->nskips ? l->skips[i].reason : NULL; }

uint64_t tps_layout_skip_matches(const tps_layout *l, size_t i) { return i < l->nskips ? l->skips[i].matches : 0; }

size_t tps_layout_rule_count(const tps_layout *l) { return l->nrules; }

const char *tps_layout_rule_label(const tps_layout *l, size_t rule) { return rule < l->nrules ? l->rules[rule].label : NULL; }

uint64_t tps_layout_rule_matches(const tps_layout *l, size_t rule) { return rule < l->nrules ? l->rules[rule].matches : 0; }

const tps_model_sizes *tps_layout_sizes(const tps_layout *l) { return &l->sizes; }

const tps_block *tps_layout_block(const tps_layout *l) { return l->has_block ? &l->block : NULL; }

const char *tps_layout_description(const tps_layout *l) { return l->description; }

const char *tps_layout_text(const tps_layout *l) { return l->text; }

static void add_missing(const tps_layout *l, const tps_expr *e, unsigned *mask)
{
    for (int i = 0; i < e->n; i++)
        if (e->code[i].op == 's' && tps_size_get(&l->sizes, (int)e->code[i].v) == 0) *mask |= 1u << e->code[i].v;
}

void tps_layout_rule_missing_sizes(const tps_layout *l, size_t rule, char *buf, size_t bufsize)
{
    unsigned mask = 0;
    if (bufsize) buf[0] = 0;
    if (rule >= l->nrules) return;
    const tps_rule *r = &l->rules[rule];
    add_missing(l, &r->unit, &mask);
    add_missing(l, &r->size, &mask);
    add_missing(l, &r->groups, &mask);
    for (int s = 0; s < r->nseg; s++) {
        add_missing(l, &r->seg[s].size, &mask);
        add_missing(l, &r->seg[s].unit, &mask);
    }
    size_t n = 0;
    for (int i = 0; i < TPS_NSIZES; i++)
        if (mask & (1u << i) && n < bufsize) n += (size_t)snprintf(buf + n, bufsize - n, "%s%s", n ? ", " : "", tps_size_names[i]);
}
