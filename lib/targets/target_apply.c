/* Laying a manifest out for a target (lib/targets/target_apply.h). */
#include "target_apply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "target_files.h"
#include "target_int.h"
#include "target_names.h"
#include "target_release.h"
#include "target_skip.h"

/* Source names and padding, no extras; the version stays (tps_target_apply redoes the rest). */
static tps_status clear_layout(tps_manifest *m, tps_error *err)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        free(m->tensors[i].target_name);
        m->tensors[i].target_name = NULL;
        m->tensors[i].target_stack = 0;
        m->tensors[i].target_blocks = 0;
        m->tensors[i].target_transpose = false;
        m->tensors[i].target_flatten = false;
        tps_status st = TPS_OK;
        if (m->tensors[i].target_rank0) /* the rules' partition: replicated */
            st = tps_manifest_set_part(m, &m->tensors[i], &(tps_partition){.replicated = true}, err);
        m->tensors[i].target_rank0 = false;
        m->tensors[i].target_rope_halves = false;
        if (st == TPS_OK) st = tps_manifest_set_pad_multiple(m, &m->tensors[i], 0, err);
        if (st) return st;
    }
    for (size_t i = 0; i < m->nextras; i++) free(m->extras[i].name);
    free(m->extras);
    m->extras = NULL;
    m->nextras = 0;
    free(m->target);
    m->target = NULL;
    return TPS_OK;
}

/* A rank0: entry's tensor (lib/set/manifest.h, target_rank0): a replicated tensor as a
 * dimension-0 split padded to tp times its length, rank 0's slice the tensor itself. */
static tps_status rank0_only(tps_manifest *m, tps_manifest_tensor *x, tps_error *err)
{
    if (!x->part->replicated || x->ndim < 1 || !x->shape[0])
        return tps_fail(err, TPS_EINVALID,
                        "tensor '%s': the target holds it on rank 0 only (rank0:), which needs a replicated tensor "
                        "of at least one dimension",
                        x->name);
    tps_partition p = {.dim = 0, .nseg = 1, .pad = true, .pad_multiple = x->shape[0] * m->tp};
    p.seg[0].length = x->shape[0];
    p.seg[0].unit = 1;
    tps_status st = tps_manifest_set_part(m, x, &p, err);
    if (st == TPS_OK) x->target_rank0 = true;
    return st;
}

tps_status tps_target_clear(tps_manifest *m, tps_error *err)
{
    free(m->target_version);
    m->target_version = NULL;
    return clear_layout(m, err);
}

/* Whether tensors: entry E names the tensor of target t's engine at release version (NULL:
 * the newest). */
static bool entry_applies(const tps_target *t, const tentry *E, const char *version)
{
    if (E->engine && strcmp(E->engine, t->name) != 0) return false;
    return tps_target_in_releases(E->since, NULL, version);
}

/* m's extras: each applicable entry's names once per source tensor its per matches. */
static tps_status apply_extras(const tps_target *t, tps_manifest *m, tps_error *err)
{
    size_t cap = 0;
    for (size_t xi = 0; xi < t->nx; xi++) {
        const textra *X = &t->x[xi];
        if (X->engine && strcmp(X->engine, t->name) != 0) continue;
        if (!tps_target_in_releases(X->since, X->before, m->target_version)) continue;
        int ncap = tps_target_name_wildcards(X->per);
        for (size_t i = 0; i < m->ntensors; i++) {
            tps_target_caps c = {0};
            if (!tps_target_name_match(X->per, m->tensors[i].name, &c) || c.n != ncap) continue;
            for (size_t j = 0; j < X->nnames; j++) {
                char name[NAME_MAX_LEN];
                if (!tps_target_name_subst(X->names[j], &c, ncap, name, sizeof name))
                    return tps_fail(err, TPS_EINVALID, "%s: extra name too long", t->source);
                if (m->nextras == cap) {
                    size_t nc = cap ? 2 * cap : 64;
                    tps_manifest_extra *g = realloc(m->extras, nc * sizeof *g);
                    if (!g) return tps_fail_oom(err, "laying out the target");
                    m->extras = g;
                    cap = nc;
                }
                if (!(m->extras[m->nextras].name = strdup(name))) return tps_fail_oom(err, "laying out the target");
                m->extras[m->nextras++].value = X->value;
            }
        }
    }
    return TPS_OK;
}

/* The tp values (up to 1024, and up to max when not 0) at which every partition of m holds:
 * for a refusal. */
static void working_tps(const tps_manifest *m, uint64_t max, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (uint64_t T = 1; T <= 1024 && (!max || T <= max) && n + 8 < size; T++) {
        bool ok = true;
        for (size_t i = 0; ok && i < m->ntensors; i++) {
            const tps_manifest_tensor *t = &m->tensors[i];
            tps_error e;
            ok = tps_partition_check(t->part, t->name, t->dtype, t->ndim, t->shape, T, &e) == TPS_OK;
        }
        if (ok) n += (size_t)snprintf(out + n, size - n, "%s%llu", n ? ", " : "", (unsigned long long)T);
    }
    if (!n) snprintf(out, size, "none up to 1024");
}

/* Whether the set's recorded config.json keys carry a quantization_config; *block whether it
 * is FP8 block-scaled (quant_method fp8 with weight_block_size: weight_scale_inv companions). */
static bool manifest_quantized(const tps_manifest *m, bool *block, bool *mxfp4)
{
    tps_json_doc *doc = NULL;
    tps_error e;
    tps_error_clear(&e);
    *block = *mxfp4 = false;
    if (!m->config_keys || tps_json_parse(m->config_keys, strlen(m->config_keys), "config keys", &doc, &e)) return false;
    const tps_json *q = tps_json_get(tps_json_root(doc), "quantization_config");
    bool quantized = q && q->type != TPS_JSON_NULL;
    const tps_json *qm = quantized ? tps_json_get(q, "quant_method") : NULL;
    *block = qm && qm->type == TPS_JSON_STRING && !strcmp(qm->u.string.s, "fp8") && tps_json_get(q, "weight_block_size");
    *mxfp4 = qm && qm->type == TPS_JSON_STRING && !strcmp(qm->u.string.s, "mxfp4");
    tps_json_doc_free(doc);
    return quantized;
}

/* FP8 block-scaled under a target: every X.weight_scale_inv must go where its X.weight goes
 * (the entries name both: vLLM's block-quantized linears and FusedMoE register
 * weight_scale_inv / w13_weight_scale_inv beside the weight), else the set would hold a scale
 * no engine parameter has. */
static tps_status scales_follow(const tps_target *t, const tps_manifest *m, tps_error *err)
{
    static const char suffix[] = "_scale_inv";
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *s = &m->tensors[i];
        size_t n = strlen(s->name), k = strlen(suffix);
        if (n < 16 || strcmp(s->name + n - 16, "weight_scale_inv")) continue;
        char w[NAME_MAX_LEN];
        snprintf(w, sizeof w, "%.*s", (int)(n - k), s->name);
        const tps_manifest_tensor *x = tps_manifest_find(m, w);
        const char *sf = s->target_name ? s->target_name : s->name, *wf = x && x->target_name ? x->target_name : w;
        size_t wl = strlen(wf);
        if (!x || strlen(sf) != wl + k || strncmp(sf, wf, wl) || strcmp(sf + wl, suffix) ||
            s->target_stack != x->target_stack)
            return tps_fail(err, TPS_EINVALID,
                            "--target %s: this checkpoint is quantized (FP8 block-scaled), and the %s mapping does "
                            "not carry its scales: '%s' would be written as '%s' where its weight goes into '%s'; "
                            "split it with the default target (the source's names)",
                            t->name, t->name, s->name, sf, wf);
    }
    return TPS_OK;
}

/* MXFP4 under a target: every *_blocks and *_scales tensor must become an engine parameter
 * (vLLM's w13_weight / w13_weight_scale ...), else the set would hold a name no engine loads. */
static tps_status mxfp4_mapped(const tps_target *t, const tps_manifest *m, tps_error *err)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        const char *n = m->tensors[i].name;
        size_t k = strlen(n);
        if (m->tensors[i].target_name || !((k > 7 && !strcmp(n + k - 7, "_blocks")) || (k > 7 && !strcmp(n + k - 7, "_scales"))))
            continue;
        return tps_fail(err, TPS_EINVALID,
                        "--target %s: this checkpoint is MXFP4 (quant_method mxfp4), and the %s mapping (%s) does not "
                        "name '%s' as an engine parameter; split it with the default target (the source's names)",
                        t->name, t->name, t->source, n);
    }
    return TPS_OK;
}

tps_status tps_target_apply(const tps_target *t, tps_manifest *m, tps_error *err)
{
    /* The mappings name the engine's fused weights: a quantized linear's scales, zeros and
     * g_idx would stay under their source names beside a fused qkv_proj.weight, a set no
     * engine loads.  Refused, except FP8 block-scaled where the mapping carries every
     * weight_scale_inv with its weight (scales_follow), and MXFP4 (GPT-OSS) whose mapping
     * names every *_blocks / *_scales (mxfp4_mapped). */
    bool block, mxfp4;
    bool quantized = manifest_quantized(m, &block, &mxfp4);
    if (quantized && !block && !mxfp4)
        return tps_fail(err, TPS_EINVALID,
                        "--target %s: this checkpoint is quantized (config.json's quantization_config), and the %s "
                        "mappings do not fuse scales, zeros and g_idx yet; split it with the default target (the "
                        "source's names)",
                        t->name, t->name);
    /* before N: the engine's main model holds no multi-token-prediction layer */
    tps_status st = tps_target_skip_apply(t, m, err);
    if (st != TPS_OK) return st;
    size_t N = m->ntensors;
    size_t *group = calloc(N + 1, sizeof *group); /* 1 + the group's first member in mem, or 0 */
    size_t *mem = calloc(N + 1, sizeof *mem);     /* members, group after group */
    size_t *gend = calloc(N + 1, sizeof *gend);   /* per group start in mem: its end */
    bool *done = calloc(N + 1, sizeof *done);
    tps_manifest_tensor *order = calloc(N + 1, sizeof *order);
    size_t nmem = 0;
    if (!group || !mem || !gend || !done || !order) {
        st = tps_fail_oom(err, "laying out the target");
        goto cleanup;
    }
    TPS_CHECK(clear_layout(m, err));
    if (m->target_version && !tps_target_version_ok(m->target_version)) {
        st = tps_fail(err, TPS_EARG, "--target-version '%s': expected a release number such as 0.13 or 0.14.1",
                      m->target_version);
        goto cleanup;
    }
    TPS_CHECK(apply_extras(t, m, err));
    for (size_t i = 0; i < N; i++) TPS_CHECK(tps_manifest_set_pad_multiple(m, &m->tensors[i], t->vocab_multiple, err));
    for (size_t i = 0; i < N; i++) {
        tps_manifest_tensor *x = &m->tensors[i];
        if (!x->part->pad || x->part->replicated || !t->vocab_multiple) continue;
        tps_error e;
        tps_error_clear(&e);
        if (tps_partition_check(x->part, x->name, x->dtype, x->ndim, x->shape, m->tp, &e)) {
            char tps[512];
            working_tps(m, 0, tps, sizeof tps);
            st = tps_fail(err, TPS_EINVALID,
                          "--target %s at tp %llu: %s (vLLM and SGLang pad the vocabulary to a multiple of %llu, "
                          "then divide it by tp); tp values that work: %s",
                          t->name, (unsigned long long)m->tp, e.msg, (unsigned long long)t->vocab_multiple, tps);
            goto cleanup;
        }
    }
    for (size_t bi = 0; bi < t->nb; bi++)
        for (size_t i = 0; i < N; i++) {
            tps_target_caps c = {0};
            const tblocked *B = &t->b[bi];
            if ((B->engine && strcmp(B->engine, t->name) != 0) || !tps_target_in_releases(NULL, B->before, m->target_version) ||
                !tps_target_name_match(B->match, m->tensors[i].name, &c))
                continue;
            if (t->b[bi].rank0) TPS_CHECK(rank0_only(m, &m->tensors[i], err));
            else if (t->b[bi].rope_halves) m->tensors[i].target_rope_halves = true;
            else if (t->b[bi].blocks) m->tensors[i].target_blocks = t->b[bi].blocks;
            else if (t->b[bi].flatten) m->tensors[i].target_flatten = true;
            else m->tensors[i].target_transpose = true;
        }
    uint64_t experts = 0; /* the fewest experts a stack entry found in a layer */
    for (size_t ei = 0; ei < t->n; ei++) {
        const tentry *E = &t->e[ei];
        if (!entry_applies(t, E, m->target_version)) continue;
        int ncap = tps_target_name_wildcards(E->from[0]);
        for (size_t i = 0; i < N; i++) {
            tps_target_caps c = {0};
            if (group[i] || !tps_target_name_match(E->from[0], m->tensors[i].name, &c) || c.n != ncap) continue;
            char num[24], name[NAME_MAX_LEN], into[NAME_MAX_LEN];
            uint64_t S = 1;
            if (E->stack) {
                if (c.len[ncap - 1] != 1 || c.s[ncap - 1][0] != '0') continue; /* the group starts at expert 0 */
                for (S = 1;; S++) {
                    tps_target_caps d = c;
                    snprintf(num, sizeof num, "%llu", (unsigned long long)S);
                    d.s[ncap - 1] = num;
                    d.len[ncap - 1] = strlen(num);
                    if (!tps_target_name_subst(E->from[0], &d, ncap, name, sizeof name) || !tps_manifest_find(m, name)) break;
                }
                if (!experts || S < experts) experts = S;
            }
            if (!tps_target_name_subst(E->into, &c, ncap - (E->stack ? 1 : 0), into, sizeof into)) {
                st = tps_fail(err, TPS_EINVALID, "%s:%zu: target name too long", t->source, E->line);
                goto cleanup;
            }
            if (E->tied && tps_manifest_find(m, into)) continue; /* untied: both tensors keep their names */
            size_t g0 = nmem;
            for (uint64_t s = 0; s < S; s++) {
                tps_target_caps d = c;
                if (E->stack) {
                    snprintf(num, sizeof num, "%llu", (unsigned long long)s);
                    d.s[ncap - 1] = num;
                    d.len[ncap - 1] = strlen(num);
                }
                for (size_t j = 0; j < E->nfrom; j++) {
                    const tps_manifest_tensor *y = NULL;
                    if (tps_target_name_subst(E->from[j], &d, ncap, name, sizeof name)) y = tps_manifest_find(m, name);
                    size_t yi = y ? (size_t)(y - m->tensors) : 0;
                    if (!y || group[yi]) {
                        st = tps_fail(err, TPS_EINVALID,
                                      "--target %s: '%s' goes into '%s' with '%s', which the checkpoint %s (%s:%zu)",
                                      t->name, m->tensors[i].name, into, name, y ? "maps twice" : "lacks", t->source,
                                      E->line);
                        goto cleanup;
                    }
                    group[yi] = g0 + 1;
                    mem[nmem++] = yi;
                }
            }
            gend[g0] = nmem;
            for (size_t k = g0; k < nmem; k++) {
                tps_manifest_tensor *y = &m->tensors[mem[k]];
                y->target_stack = E->stack ? S : 0;
                if (!(y->target_name = strdup(into))) {
                    st = tps_fail_oom(err, "laying out the target");
                    goto cleanup;
                }
            }
        }
    }
    if (t->experts_rule && experts && m->tp > experts) {
        char tps[512];
        working_tps(m, experts, tps, sizeof tps);
        st = tps_fail(err, TPS_EINVALID, "--target %s at tp %llu: the checkpoint has %llu experts a layer, and %s (%s); "
                      "tp values that work: %s",
                      t->name, (unsigned long long)m->tp, (unsigned long long)experts, t->experts_rule, t->source, tps);
        goto cleanup;
    }
    /* Members next to each other, in from order, where the group's first tensor was. */
    size_t n = 0;
    for (size_t i = 0; i < N; i++) {
        if (done[i]) continue;
        if (!group[i]) {
            order[n++] = m->tensors[i];
            done[i] = true;
            continue;
        }
        for (size_t k = group[i] - 1; k < gend[group[i] - 1]; k++) {
            order[n++] = m->tensors[mem[k]];
            done[mem[k]] = true;
        }
    }
    memcpy(m->tensors, order, N * sizeof *order);
    if (block) TPS_CHECK(scales_follow(t, m, err));
    if (mxfp4) TPS_CHECK(mxfp4_mapped(t, m, err));
    if (!(m->target = strdup(t->name))) {
        st = tps_fail_oom(err, "laying out the target");
        goto cleanup;
    }
    TPS_CHECK(tps_manifest_index(m, "the target", err));
    TPS_CHECK(tps_target_check_manifest(m, "the target", err));
cleanup:
    free(group);
    free(mem);
    free(gend);
    free(done);
    free(order);
    return st;
}
