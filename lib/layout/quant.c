/* quantization_config to companion schemes (lib/layout/quant.h), and a companion's partition from
 * its weight's.  The parameter classes each companion imitates are vLLM's
 * (their parameter.py: Block/Channel/PerTensor scale parameters). */
#include "quant.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/checked.h"
#include "../base/index.h"
#include "quant_int.h"

typedef struct qpattern {
    char *text;
    bool re; /* "re:PATTERN": a Python re.match, anchored at the start */
    regex_t rx;
} qpattern;

typedef struct qgroup {
    qpattern *targets; /* compressed-tensors config_groups.<g>.targets; none: every module */
    size_t ntargets;
    tps_quant_scheme s;
} qgroup;

struct tps_quant {
    char desc[256];
    qpattern *ignore;
    size_t nignore;
    bool ignore_substring; /* transformers' modules_to_not_convert: a key inside the name */
    qgroup *groups;
    size_t ngroups;
    bool mxfp4; /* GPT-OSS's MXFP4 experts (lib/layout/quant_mxfp4.h): no linear is quantized */
};

static void free_patterns(qpattern *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i].re) regfree(&p[i].rx);
        free(p[i].text);
    }
    free(p);
}

void tps_quant_free(tps_quant *q)
{
    if (!q) return;
    free_patterns(q->ignore, q->nignore);
    for (size_t i = 0; i < q->ngroups; i++) free_patterns(q->groups[i].targets, q->groups[i].ntargets);
    free(q->groups);
    free(q);
}

const char *tps_quant_describe(const tps_quant *q) { return q ? q->desc : ""; }

void tps_quant_block(const tps_quant *q, uint64_t *block)
{
    block[0] = block[1] = 0;
    for (size_t i = 0; q && i < q->ngroups && !block[0]; i++) {
        block[0] = q->groups[i].s.block[0];
        block[1] = q->groups[i].s.block[1];
    }
}

void tps_quant_int_params(const tps_quant *q, unsigned *bits, bool *gptq_v2)
{
    *bits = 0;
    *gptq_v2 = false;
    for (size_t i = 0; q && i < q->ngroups && !*bits; i++) {
        *bits = q->groups[i].s.int_bits;
        *gptq_v2 = q->groups[i].s.gptq_v2;
    }
}

/* A list of strings (or null / absent: none) into patterns. */
static tps_status patterns(const tps_json *v, const char *what, const char *key, qpattern **out, size_t *n,
                           tps_error *err)
{
    *out = NULL;
    *n = 0;
    if (!v || v->type == TPS_JSON_NULL) return TPS_OK;
    if (v->type != TPS_JSON_ARRAY)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" must be a list of module names", what, key);
    if (!(*out = calloc(v->u.array.n + 1, sizeof **out))) return tps_fail_oom(err, "quantization_config");
    for (size_t i = 0; i < v->u.array.n; i++) {
        const tps_json *e = v->u.array.items[i];
        if (e->type != TPS_JSON_STRING || strlen(e->u.string.s) != e->u.string.len)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" entry %zu must be a string", what, key, i);
        qpattern *p = &(*out)[(*n)++];
        const char *s = e->u.string.s;
        if (strncmp(s, "re:", 3) == 0) {
            size_t len = strlen(s + 3);
            char *anchored = malloc(len + 2);
            if (!anchored) return tps_fail_oom(err, "quantization_config");
            anchored[0] = '^';
            memcpy(anchored + 1, s + 3, len + 1);
            int rc = regcomp(&p->rx, anchored, REG_EXTENDED | REG_NOSUB);
            free(anchored);
            if (rc != 0)
                return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" entry '%s' is not a regular expression "
                                "tpshard reads (POSIX extended)", what, key, s);
            p->re = true;
        }
        if (!(p->text = strdup(s))) return tps_fail_oom(err, "quantization_config");
    }
    return TPS_OK;
}

static bool pattern_match(const qpattern *p, const char *module, bool substring)
{
    if (p->re) return regexec(&p->rx, module, 0, NULL, 0) == 0;
    size_t n = strlen(p->text), m = strlen(module);
    if (strcmp(p->text, module) == 0) return true;
    if (m > n && module[m - n - 1] == '.' && strcmp(module + m - n, p->text) == 0) return true;
    return substring && n && strstr(module, p->text);
}

/* ---- companions ---- */

/* The FP8 weight and its scale of one strategy; static input scales and the KV-cache
 * output scales (k_proj / v_proj) are per-tensor scalars, replicated. */
enum { FP8_TENSOR, FP8_CHANNEL, FP8_BLOCK };

static void fp8_scheme(tps_quant_scheme *s, int strategy, const char *scale, uint64_t bn, uint64_t bk)
{
    memset(s, 0, sizeof *s);
    s->align[0] = s->align[1] = 1;
    tps_quant_add_companion(s, "weight", 2, 0, 1, 1, 1, true, false);
    if (strategy == FP8_BLOCK) {
        tps_quant_add_companion(s, scale, 2, 0, bn, 1, bk, false, false); /* BlockQuantScaleParameter */
        s->align[0] = s->block[0] = bn;
        s->align[1] = s->block[1] = bk;
        snprintf(s->name, sizeof s->name, "fp8 block [%llu, %llu]", (unsigned long long)bn, (unsigned long long)bk);
    } else if (strategy == FP8_CHANNEL) {
        tps_quant_add_companion(s, scale, 2, 0, 1, -1, 1, false, false); /* ChannelQuantScaleParameter: no row loader */
        snprintf(s->name, sizeof s->name, "fp8 channel");
    } else {
        tps_quant_add_companion(s, scale, 0, -1, 1, -1, 1, false, false); /* PerTensorScaleParameter */
        snprintf(s->name, sizeof s->name, "fp8 tensor");
    }
    tps_quant_add_companion(s, "input_scale", 0, -1, 1, -1, 1, false, false);
    tps_quant_add_companion(s, "output_scale", 0, -1, 1, -1, 1, false, false);
}

static tps_status block_size(const tps_json *v, const char *what, const char *key, uint64_t *bn, uint64_t *bk,
                             tps_error *err)
{
    if (!v || v->type != TPS_JSON_ARRAY || v->u.array.n != 2)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" must be a list of two positive integers", what,
                        key);
    uint64_t *o[2] = {bn, bk};
    for (int i = 0; i < 2; i++) {
        const tps_json *e = v->u.array.items[i];
        if (e->type != TPS_JSON_NUMBER || !e->u.number.is_u64 || e->u.number.u64 == 0 || e->u.number.u64 > (1u << 20))
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" must be a list of two positive integers",
                            what, key);
        *o[i] = e->u.number.u64;
    }
    return TPS_OK;
}

static const char *str_of(const tps_json *obj, const char *key)
{
    const tps_json *v = tps_json_get(obj, key);
    return v && v->type == TPS_JSON_STRING ? v->u.string.s : NULL;
}

static tps_status new_groups(tps_quant *q, size_t n, tps_error *err)
{
    if (!(q->groups = calloc(n ? n : 1, sizeof *q->groups))) return tps_fail_oom(err, "quantization_config");
    return TPS_OK;
}

/* quant_method "fp8": fine-grained block FP8 with weight_block_size, else per-tensor FP8
 * (AutoFP8), as vLLM's Fp8Config reads it. */
static tps_status parse_fp8(tps_quant *q, const tps_json *qc, const char *what, tps_error *err)
{
    tps_status st;
    const tps_json *bs = tps_json_get(qc, "weight_block_size");
    const char *act = str_of(qc, "activation_scheme");
    if ((st = new_groups(q, 1, err)) != TPS_OK) return st;
    q->ngroups = 1;
    if (bs && bs->type != TPS_JSON_NULL) {
        uint64_t bn, bk;
        if ((st = block_size(bs, what, "weight_block_size", &bn, &bk, err)) != TPS_OK) return st;
        if (act && strcmp(act, "static") == 0)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config: block-scaled FP8 with activation_scheme "
                            "\"static\" is refused by the engine (vLLM Fp8Config); only \"dynamic\" is defined", what);
        fp8_scheme(&q->groups[0].s, FP8_BLOCK, "weight_scale_inv", bn, bk);
    } else {
        fp8_scheme(&q->groups[0].s, FP8_TENSOR, "weight_scale", 0, 0);
    }
    const char *key = tps_json_get(qc, "ignored_layers") ? "ignored_layers" : "modules_to_not_convert";
    if ((st = patterns(tps_json_get(qc, key), what, key, &q->ignore, &q->nignore, err)) != TPS_OK) return st;
    q->ignore_substring = true;
    snprintf(q->desc, sizeof q->desc, "fp8 (%s)", q->groups[0].s.name + 4);
    return TPS_OK;
}

/* quant_method "compressed-tensors" (llm-compressor): FP8 weights of each config group. */
static tps_status parse_ct(tps_quant *q, const tps_json *qc, const char *what, tps_error *err)
{
    tps_status st;
    const char *fmt = str_of(qc, "format");
    if (fmt && strcmp(fmt, "float-quantized") != 0 && strcmp(fmt, "naive-quantized") != 0)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config: compressed-tensors format \"%s\" is not one tpshard "
                        "splits yet (float-quantized FP8 is)", what, fmt);
    const tps_json *groups = tps_json_get(qc, "config_groups");
    if (!groups || groups->type != TPS_JSON_OBJECT || groups->u.object.n == 0)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config: compressed-tensors needs config_groups", what);
    if ((st = new_groups(q, groups->u.object.n, err)) != TPS_OK) return st;
    size_t used = 0;
    for (size_t i = 0; i < groups->u.object.n; i++) {
        const char *gname = groups->u.object.keys[i]->u.string.s;
        const tps_json *g = groups->u.object.values[i], *w = tps_json_get(g, "weights");
        qgroup *qg = &q->groups[q->ngroups++];
        if ((st = patterns(tps_json_get(g, "targets"), what, "targets", &qg->targets, &qg->ntargets, err)) != TPS_OK)
            return st;
        const tps_json *bits = tps_json_get(w, "num_bits");
        const char *type = str_of(w, "type"), *strategy = str_of(w, "strategy");
        if (!w || w->type != TPS_JSON_OBJECT || !bits || bits->type != TPS_JSON_NUMBER || bits->u.number.u64 != 8 ||
            !type || strcmp(type, "float") != 0)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config group %s: only 8-bit float weights "
                            "(FP8) are split by tpshard yet", what, gname);
        if (!strategy || strcmp(strategy, "tensor") == 0) {
            fp8_scheme(&qg->s, FP8_TENSOR, "weight_scale", 0, 0);
        } else if (strcmp(strategy, "channel") == 0) {
            fp8_scheme(&qg->s, FP8_CHANNEL, "weight_scale", 0, 0);
        } else if (strcmp(strategy, "block") == 0) {
            uint64_t bn, bk;
            if ((st = block_size(tps_json_get(w, "block_structure"), what, "block_structure", &bn, &bk, err)) != TPS_OK)
                return st;
            fp8_scheme(&qg->s, FP8_BLOCK, "weight_scale", bn, bk);
        } else {
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config group %s: weight strategy \"%s\" is not one "
                            "tpshard splits (tensor, channel, block)", what, gname, strategy);
        }
        used += (size_t)snprintf(q->desc + used, used < sizeof q->desc ? sizeof q->desc - used : 0, "%s%s",
                                 i ? ", " : "compressed-tensors (", qg->s.name);
    }
    if ((st = patterns(tps_json_get(qc, "ignore"), what, "ignore", &q->ignore, &q->nignore, err)) != TPS_OK) return st;
    if (used < sizeof q->desc) snprintf(q->desc + used, sizeof q->desc - used, ")");
    return TPS_OK;
}

/* quant_method "gptq" / "awq" (lib/layout/quant_int.h); modules_to_not_convert as transformers
 * reads it. */
static tps_status parse_int(tps_quant *q, const tps_json *qc, bool awq, const char *what, tps_error *err)
{
    tps_status st;
    if ((st = new_groups(q, 1, err)) != TPS_OK) return st;
    q->ngroups = 1;
    if ((st = tps_quant_int_scheme(qc, awq, what, &q->groups[0].s, err)) != TPS_OK) return st;
    if ((st = patterns(tps_json_get(qc, "modules_to_not_convert"), what, "modules_to_not_convert", &q->ignore,
                       &q->nignore, err)) != TPS_OK)
        return st;
    q->ignore_substring = true;
    snprintf(q->desc, sizeof q->desc, "%s", q->groups[0].s.name);
    return TPS_OK;
}

tps_status tps_quant_from_config(const tps_json *qc, const char *what, tps_quant **out, tps_error *err)
{
    *out = NULL;
    if (!qc || qc->type == TPS_JSON_NULL) return TPS_OK;
    if (qc->type != TPS_JSON_OBJECT)
        return tps_fail(err, TPS_EINVALID, "%s: \"quantization_config\" must be an object", what);
    const char *m = str_of(qc, "quant_method");
    if (!m) return tps_fail(err, TPS_EINVALID, "%s: quantization_config has no \"quant_method\"", what);
    /* The engines themselves refuse these under tensor parallelism. */
    if (strcmp(m, "bitsandbytes") == 0)
        return tps_fail(err, TPS_EINVALID, "%s: quant_method bitsandbytes: a pre-quantized bitsandbytes checkpoint "
                        "cannot be split for tensor parallelism (its quant_state describes the whole flattened "
                        "weight; vLLM: \"Prequant BitsAndBytes models with tensor parallelism is not supported\"); "
                        "split the BF16 checkpoint and let the engine quantize it on load", what);
    if (strcmp(m, "gguf") == 0)
        return tps_fail(err, TPS_EINVALID, "%s: quant_method gguf: GGUF is one file the engine reads whole and cuts "
                        "itself; no engine loads per-rank GGUF files, so there is nothing to pre-shard", what);
    tps_quant *q = calloc(1, sizeof *q);
    if (!q) return tps_fail_oom(err, "quantization_config");
    tps_status st;
    if (strcmp(m, "fp8") == 0) {
        st = parse_fp8(q, qc, what, err);
    } else if (strcmp(m, "compressed-tensors") == 0) {
        st = parse_ct(q, qc, what, err);
    } else if (strcmp(m, "gptq") == 0 || strcmp(m, "awq") == 0) {
        st = parse_int(q, qc, m[0] == 'a', what, err);
    } else if (strcmp(m, "mxfp4") == 0) {
        /* Only the experts' *_blocks / *_scales are quantized; their cut is
         * lib/layout/quant_mxfp4.c's, so no linear scheme (no group) is needed. */
        q->mxfp4 = true;
        st = new_groups(q, 0, err);
        snprintf(q->desc, sizeof q->desc, "mxfp4 (experts as FP4 e2m1 blocks of 32 with e8m0 scales)");
    } else {
        st = tps_fail(err, TPS_EINVALID, "%s: quant_method \"%s\" is not a quantization tpshard knows how to split "
                      "(fp8, compressed-tensors, gptq, awq, mxfp4)", what, m);
    }
    if (st != TPS_OK) {
        tps_quant_free(q);
        return st;
    }
    size_t n = strlen(q->desc);
    for (size_t i = 0; i < q->nignore && n < sizeof q->desc; i++)
        n += (size_t)snprintf(q->desc + n, sizeof q->desc - n, "%s%s", i ? ", " : "; not quantized: ", q->ignore[i].text);
    *out = q;
    return TPS_OK;
}

bool tps_quant_is_mxfp4(const tps_quant *q) { return q && q->mxfp4; }

const tps_quant_scheme *tps_quant_module(const tps_quant *q, const char *module)
{
    if (!q) return NULL;
    for (size_t i = 0; i < q->nignore; i++)
        if (pattern_match(&q->ignore[i], module, q->ignore_substring)) return NULL;
    for (size_t g = 0; g < q->ngroups; g++) {
        const qgroup *qg = &q->groups[g];
        if (qg->ntargets == 0) return &qg->s;
        for (size_t t = 0; t < qg->ntargets; t++)
            /* "Linear" is the class every quantized module here is. */
            if (strcmp(qg->targets[t].text, "Linear") == 0 || pattern_match(&qg->targets[t], module, false))
                return &qg->s;
    }
    return NULL;
}

int tps_quant_companion_of(const tps_quant_scheme *s, const char *name, size_t *module_len)
{
    const char *dot = strrchr(name, '.');
    if (!s || !dot || dot == name) return -1;
    for (int c = 0; c < s->ncomp; c++)
        if (strcmp(dot + 1, s->comp[c].suffix) == 0) {
            *module_len = (size_t)(dot - name);
            return c;
        }
    return -1;
}

void tps_quant_issue_terms(const tps_quant *q, const char *name, tps_partition_issue *issue)
{
    const char *dot = strrchr(name, '.');
    char module[1024];
    size_t n = dot ? (size_t)(dot - name) : 0, mlen;
    if (!q || !n || n >= sizeof module || issue->dim < 0 || issue->dim > 1) return;
    memcpy(module, name, n);
    module[n] = '\0';
    const tps_quant_scheme *s = tps_quant_module(q, module);
    int c = tps_quant_companion_of(s, name, &mlen);
    if (c < 0) return;
    const tps_quant_companion *k = &s->comp[c];
    int wd = k->wdim[issue->dim];
    if (wd < 0 || !k->ratio[issue->dim]) return;
    issue->qwdim = wd;
    issue->qratio = k->ratio[issue->dim];
    issue->qalign = s->align[wd];
    if (s->block[0]) {
        snprintf(issue->qrule, sizeof issue->qrule, "FP8 block [%llu, %llu]", (unsigned long long)s->block[0],
                 (unsigned long long)s->block[1]);
    } else if (s->int_bits) {
        /* The scheme's name starts with its method ("gptq 4-bit group 128"); a group size
         * rules the input dim, the pack factor (values to a 32-bit word) the output dim. */
        const char *method = strncmp(s->name, "awq", 3) == 0 ? "AWQ" : "GPTQ";
        unsigned pf = 32 / s->int_bits;
        if (wd == 1 && s->align[1] != pf)
            snprintf(issue->qrule, sizeof issue->qrule, "%s group size %llu", method, (unsigned long long)s->align[1]);
        else
            snprintf(issue->qrule, sizeof issue->qrule, "%s %u-bit packed %u to a word", method, s->int_bits, pf);
    } else {
        snprintf(issue->qrule, sizeof issue->qrule, "%.40s", s->name);
    }
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

tps_status tps_quant_logical_shape(const tps_quant_scheme *s, int comp, const char *name, int ndim,
                                   const uint64_t *shape, uint64_t *wshape, tps_error *err)
{
    const tps_quant_companion *c = &s->comp[comp];
    if (ndim != 2)
        return tps_fail(err, TPS_EINVALID, "tensor %s: a quantized linear's %s must be 2-D (%s)", name, c->suffix,
                        s->name);
    for (int d = 0; d < 2; d++)
        if (c->wdim[d] < 0 || !tps_mul_u64(shape[d], c->ratio[d], &wshape[c->wdim[d]]))
            return tps_fail(err, TPS_EINVALID, "tensor %s: shape too large", name);
    return TPS_OK;
}

tps_status tps_quant_derive(const tps_quant_scheme *s, int comp, const tps_partition *wpart, const uint64_t *wshape,
                            const char *name, int ndim, const uint64_t *shape, tps_partition *out, tps_error *err)
{
    const tps_quant_companion *c = &s->comp[comp];
    memset(out, 0, sizeof *out);
    /* The shape the companion must have for W, as the engine allocates it (cdiv). */
    char got[128], want[128];
    uint64_t expect[2] = {1, 1};
    bool ok;
    if (c->ndim == 0) {
        uint64_t n = 1;
        for (int d = 0; d < ndim; d++) n *= shape[d];
        ok = n == 1;
        snprintf(want, sizeof want, "one element ([] or [1])");
    } else {
        for (int d = 0; d < c->ndim; d++) expect[d] = c->wdim[d] < 0 ? 1 : cdiv(wshape[c->wdim[d]], c->ratio[d]);
        ok = ndim == c->ndim && shape[0] == expect[0] && (ndim < 2 || shape[1] == expect[1]);
        tps_shape_str(expect, c->ndim, want, sizeof want);
    }
    if (!ok) {
        tps_shape_str(shape, ndim, got, sizeof got);
        char ws[128];
        tps_shape_str(wshape, 2, ws, sizeof ws);
        return tps_fail(err, TPS_EINVALID, "tensor %s: shape %s, but %s of a weight %s has %s", name, got, s->name, ws,
                        want);
    }
    if (wpart->replicated || c->ndim == 0) {
        out->replicated = true;
        return TPS_OK;
    }
    int d = wpart->dim, cd = -1;
    for (int k = 0; k < c->ndim; k++)
        if (c->wdim[k] == d) cd = k;
    if (cd < 0 || (c->replicate_in && d == 1)) {
        out->replicated = true;
        return TPS_OK;
    }
    uint64_t k = c->ratio[cd];
    *out = *wpart;
    out->dim = cd;
    out->block = s->align[d] > k && s->align[d] % k == 0 ? s->align[d] / k : 0;
    if (k == 1) return TPS_OK;
    if (wpart->pad)
        return tps_fail(err, TPS_EINVALID, "tensor %s: its weight's dimension %d is padded, which %s cannot follow", name,
                        d, s->name);
    bool one = wpart->nseg == 1 && wpart->groups <= 1;
    for (int i = 0; i < wpart->nseg; i++) {
        tps_segment *g = &out->seg[i];
        if (!one && g->length % k != 0)
            return tps_fail(err, TPS_EINVALID, "tensor %s: segment %s of its weight has %llu elements along dimension "
                            "%d, not a whole number of %s blocks of %llu", name, g->name, (unsigned long long)g->length,
                            d, s->name, (unsigned long long)k);
        g->length = one ? cdiv(g->length, k) : g->length / k;
        /* A unit smaller than a block (a 64-row head under 128-row blocks) only fits where
         * the weight's pieces are whole blocks, which the weight's block says. */
        g->unit = g->unit % k == 0 ? g->unit / k : 1;
    }
    return TPS_OK;
}
