/* quantization_config read through the table of schemes (lib/quant/schemes.c), and what a
 * read one answers (lib/quant/quant.h). */
#include "quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant_int.h"

void tps_quant_free(tps_quant *q)
{
    if (!q) return;
    tps_quant_patterns_free(q->ignore, q->nignore);
    for (size_t i = 0; i < q->ngroups; i++) tps_quant_patterns_free(q->groups[i].targets, q->groups[i].ntargets);
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

/* The unknown method's refusal: the table's readable methods, in its order. */
static tps_status unknown(const char *what, const char *m, tps_error *err)
{
    char known[256];
    size_t n = 0;
    known[0] = '\0';
    for (const tps_quant_method *t = tps_quant_methods; t->name; t++)
        if (t->read && n < sizeof known)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", t->name);
    return tps_fail(err, TPS_EINVALID, "%s: quant_method \"%s\" is not a quantization tpshard knows how to split (%s)",
                    what, m, known);
}

tps_status tps_quant_from_config(const tps_json *qc, const char *what, tps_quant **out, tps_error *err)
{
    *out = NULL;
    if (!qc || qc->type == TPS_JSON_NULL) return TPS_OK;
    if (qc->type != TPS_JSON_OBJECT)
        return tps_fail(err, TPS_EINVALID, "%s: \"quantization_config\" must be an object", what);
    const char *m = tps_quant_str(qc, "quant_method");
    if (!m) return tps_fail(err, TPS_EINVALID, "%s: quantization_config has no \"quant_method\"", what);
    const tps_quant_method *method = tps_quant_methods;
    while (method->name && strcmp(method->name, m) != 0) method++;
    if (!method->name) return unknown(what, m, err);
    if (!method->read) return tps_fail(err, TPS_EINVALID, "%s: quant_method %s: %s", what, m, method->refused);
    tps_quant *q = calloc(1, sizeof *q);
    if (!q) return tps_fail_oom(err, "quantization_config");
    q->method = method;
    tps_status st = method->read(q, qc, what, err);
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

const tps_quant_scheme *tps_quant_module(const tps_quant *q, const char *module)
{
    if (!q) return NULL;
    for (size_t i = 0; i < q->nignore; i++)
        if (tps_quant_pattern_match(&q->ignore[i], module, q->ignore_substring)) return NULL;
    for (size_t g = 0; g < q->ngroups; g++) {
        const tps_quant_group *qg = &q->groups[g];
        if (qg->ntargets == 0) return &qg->s;
        for (size_t t = 0; t < qg->ntargets; t++)
            /* "Linear" is the class every quantized module here is. */
            if (strcmp(qg->targets[t].text, "Linear") == 0 || tps_quant_pattern_match(&qg->targets[t], module, false))
                return &qg->s;
    }
    return NULL;
}

int tps_quant_tensor(const tps_quant *q, const char *name, const tps_quant_scheme **s, size_t *module_len)
{
    const char *dot = strrchr(name, '.');
    char module[1024];
    size_t n = dot ? (size_t)(dot - name) : 0;
    *s = NULL;
    if (!q || !n || n >= sizeof module) return -1;
    memcpy(module, name, n);
    module[n] = '\0';
    *s = tps_quant_module(q, module);
    return tps_quant_companion_of(*s, name, module_len);
}

void tps_quant_issue_terms(const tps_quant *q, const char *name, tps_partition_issue *issue)
{
    const tps_quant_scheme *s;
    size_t mlen;
    if (issue->dim < 0 || issue->dim > 1) return;
    int c = tps_quant_tensor(q, name, &s, &mlen);
    if (c < 0) return;
    const tps_quant_companion *k = &s->comp[c];
    int wd = k->wdim[issue->dim];
    if (wd < 0 || !k->ratio[issue->dim]) return;
    issue->qwdim = wd;
    issue->qratio = k->ratio[issue->dim];
    issue->qalign = s->align[wd];
    if (s->rule[wd][0])
        snprintf(issue->qrule, sizeof issue->qrule, "%s", s->rule[wd]);
    else
        snprintf(issue->qrule, sizeof issue->qrule, "%.40s", s->name);
}

bool tps_quant_cuts_itself(const tps_quant *q) { return q && q->method->cut; }

tps_status tps_quant_cut(const tps_quant *q, const char *name, tps_dtype dtype, int ndim, const uint64_t *shape,
                         tps_quant_rule_fn rule, void *ctx, tps_partition *out, tps_error *err)
{
    return q->method->cut(name, dtype, ndim, shape, rule, ctx, out, err);
}
