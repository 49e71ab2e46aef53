#include "megatron_hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../base/buf.h"
#include "../base/checked.h"
#include "../base/json.h"
#include "../layout/presets.h"
#include "../base/yaml_query.h"
#include "../targets/target.h"
#include "megatron_args.h"
#include "megatron_hf_int.h"

void tps_megatron_hf_free(tps_megatron_hf *h)
{
    if (!h) return;
    for (size_t i = 0; i < h->n; i++) {
        free(h->e[i].into);
        free(h->e[i].groups);
        for (size_t k = 0; k < MAX_FROM; k++) {
            free(h->e[i].from[k]);
            free(h->e[i].rows[k]);
        }
    }
    for (size_t i = 0; i < h->na; i++) {
        free(h->a[i].arg);
        free(h->a[i].config);
    }
    for (size_t i = 0; i < h->nhf; i++) {
        free(h->hf[i].architecture);
        free(h->hf[i].model_type);
        free(h->hf[i].when);
        free(h->hf[i].unless);
    }
    free(h->e);
    free(h->a);
    free(h->hf);
    free(h->source);
    free(h);
}

/* ---- the megatron: section ---- */

/* The shared libyaml queries (yaml_query.h), under the short names this file's parsers use. */
typedef tps_yaml_ctx yctx;
#define yscalar tps_yaml_scalar
#define ykey tps_yaml_key
#define ybad tps_yaml_fail
#define only_keys tps_yaml_only_keys

/* A scalar or a list of scalars into out[]. */
static tps_status ylist(yctx *c, const yaml_node_t *n, char **out, size_t *count, const char *what)
{
    *count = 0;
    if (yscalar(n)) {
        if (!(out[(*count)++] = strdup(yscalar(n)))) return tps_fail_oom(c->err, "reading the megatron mapping");
        return TPS_OK;
    }
    if (!n || n->type != YAML_SEQUENCE_NODE) return ybad(c, n, what);
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        const char *s = yscalar(yaml_document_get_node(c->doc, *it));
        if (!s || *count == MAX_FROM) return ybad(c, n, what);
        if (!(out[(*count)++] = strdup(s))) return tps_fail_oom(c->err, "reading the megatron mapping");
    }
    return *count ? TPS_OK : ybad(c, n, what);
}

static tps_status parse_entry(yctx *c, const yaml_node_t *en, mentry *e)
{
    static const char *const allowed[] = {"into", "from", "rows", "groups", NULL};
    if (en->type != YAML_MAPPING_NODE) return ybad(c, en, "each tensors: entry is a mapping with into and from");
    TRY(only_keys(c, en, allowed, "unknown key (into, from, rows, groups)"));
    e->line = en->start_mark.line + 1;
    const char *into = yscalar(ykey(c->doc, en, "into"));
    if (!into) return ybad(c, en, "an entry needs into (a name)");
    if (!(e->into = strdup(into))) return tps_fail_oom(c->err, "reading the megatron mapping");
    TRY(ylist(c, ykey(c->doc, en, "from"), e->from, &e->nfrom, "from is a name or a list of at most 8"));
    yaml_node_t *rows = ykey(c->doc, en, "rows");
    if (rows) TRY(ylist(c, rows, e->rows, &e->nrows, "rows is a list of size expressions"));
    const char *groups = yscalar(ykey(c->doc, en, "groups"));
    if (groups && !(e->groups = strdup(groups))) return tps_fail_oom(c->err, "reading the megatron mapping");
    if (e->nfrom > 1 && e->nrows != e->nfrom) return ybad(c, en, "an entry of several from names gives rows for each");
    if (e->nfrom == 1 && (e->nrows || e->groups)) return ybad(c, en, "rows and groups are for entries of several names");
    int w = tps_target_name_wildcards(e->into);
    if (w > TPS_TARGET_MAX_CAPS) return ybad(c, en, "at most 8 wildcards in a name");
    for (size_t k = 0; k < e->nfrom; k++)
        if (tps_target_name_wildcards(e->from[k]) != w)
            return ybad(c, en, "every name of from needs as many wildcards as into");
    return TPS_OK;
}

static tps_status parse_arg(yctx *c, const yaml_node_t *kn, const yaml_node_t *vn, marg *a)
{
    static const char *const allowed[] = {"config", "float", "int", NULL};
    const char *k = yscalar(kn), *cfg = yscalar(vn);
    if (!k) return ybad(c, kn, "args: keys are Megatron arg names");
    if (!cfg && vn && vn->type == YAML_MAPPING_NODE) {
        TRY(only_keys(c, vn, allowed, "unknown key (config, float, int)"));
        cfg = yscalar(ykey(c->doc, vn, "config"));
        const char *f = yscalar(ykey(c->doc, vn, "float")), *i = yscalar(ykey(c->doc, vn, "int"));
        a->as_float = f && strcmp(f, "true") == 0;
        a->as_int = i && strcmp(i, "true") == 0;
    }
    if (!cfg) return ybad(c, vn, "an args: value is a config.json key, or {config: KEY, float: true}");
    if (!(a->arg = strdup(k)) || !(a->config = strdup(cfg))) return tps_fail_oom(c->err, "reading the megatron mapping");
    return TPS_OK;
}

static tps_status parse_hf(yctx *c, const yaml_node_t *n, mhf *f)
{
    static const char *const allowed[] = {"architecture", "model_type", "when", "unless", NULL};
    if (!n || n->type != YAML_MAPPING_NODE) return ybad(c, n, "each hf: entry is a mapping with an architecture");
    TRY(only_keys(c, n, allowed, "unknown key (architecture, model_type, when, unless)"));
    const char *v[4];
    for (int i = 0; i < 4; i++) v[i] = yscalar(ykey(c->doc, n, allowed[i]));
    if (!v[0] || !v[1]) return ybad(c, n, "an hf: entry needs architecture and model_type");
    char **dst[4] = {&f->architecture, &f->model_type, &f->when, &f->unless};
    for (int i = 0; i < 4; i++)
        if (v[i] && !(*dst[i] = strdup(v[i]))) return tps_fail_oom(c->err, "reading the megatron mapping");
    return TPS_OK;
}

static yaml_node_t *find_megatron(yaml_document_t *doc)
{
    yaml_node_t *t = ykey(doc, ykey(doc, yaml_document_get_root_node(doc), "targets"), "megatron");
    return t && t->type == YAML_MAPPING_NODE ? t : NULL;
}

bool tps_mhf_has_megatron(yaml_document_t *doc, const void *unused)
{
    (void)unused;
    return find_megatron(doc) != NULL;
}

tps_status tps_megatron_hf_load(const char *layout_text, const char *layout_name, tps_megatron_hf **out,
                                tps_error *err)
{
    *out = NULL;
    yaml_parser_t p;
    yaml_document_t doc;
    bool doc_ok = false;
    tps_status st = TPS_OK;
    tps_megatron_hf *h = calloc(1, sizeof *h);
    if (!h || !yaml_parser_initialize(&p)) {
        free(h);
        return tps_fail_oom(err, "reading the megatron mapping");
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)layout_text, strlen(layout_text));
    if (!yaml_parser_load(&p, &doc)) {
        st = tps_fail(err, TPS_EINVALID, "%s: the layout is not valid YAML", layout_name);
        goto cleanup;
    }
    doc_ok = true;
    yctx c = {&doc, layout_name, err, "megatron"};
    yaml_node_t *tn = find_megatron(&doc);
    if (!tn) {
        char have[1024];
        st = tps_fail(err, TPS_EINVALID,
                      "%s has no Hugging Face <-> Megatron mapping (targets: megatron:); the presets with one: %s",
                      layout_name, tps_yaml_presets_with(tps_mhf_has_megatron, NULL, have, sizeof have));
        goto cleanup;
    }
    if (!(h->source = strdup(layout_name))) {
        st = tps_fail_oom(err, "reading the megatron mapping");
        goto cleanup;
    }
    static const char *const allowed[] = {"tensors", "args", "hf", NULL};
    TPS_CHECK(only_keys(&c, tn, allowed, "unknown key (tensors, args, hf)"));
    yaml_node_t *tensors = ykey(&doc, tn, "tensors"), *args = ykey(&doc, tn, "args"), *hf = ykey(&doc, tn, "hf");
    if (!tensors || tensors->type != YAML_SEQUENCE_NODE) {
        st = ybad(&c, tn, "tensors is a list of {into, from}");
        goto cleanup;
    }
    size_t n = (size_t)(tensors->data.sequence.items.top - tensors->data.sequence.items.start);
    if (!(h->e = calloc(n + 1, sizeof *h->e))) {
        st = tps_fail_oom(err, "reading the megatron mapping");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        h->n = i + 1;
        TPS_CHECK(parse_entry(&c, yaml_document_get_node(&doc, tensors->data.sequence.items.start[i]), &h->e[i]));
    }
    if (args) {
        if (args->type != YAML_MAPPING_NODE) {
            st = ybad(&c, args, "args is a mapping of Megatron arg: config.json key");
            goto cleanup;
        }
        size_t na = (size_t)(args->data.mapping.pairs.top - args->data.mapping.pairs.start);
        if (!(h->a = calloc(na + 1, sizeof *h->a))) {
            st = tps_fail_oom(err, "reading the megatron mapping");
            goto cleanup;
        }
        for (size_t i = 0; i < na; i++) {
            yaml_node_pair_t *pp = &args->data.mapping.pairs.start[i];
            h->na = i + 1;
            TPS_CHECK(parse_arg(&c, yaml_document_get_node(&doc, pp->key), yaml_document_get_node(&doc, pp->value),
                                &h->a[i]));
        }
    }
    if (hf) {
        if (hf->type != YAML_SEQUENCE_NODE) {
            st = ybad(&c, hf, "hf is a list of {architecture, model_type, when, unless}");
            goto cleanup;
        }
        size_t nh = (size_t)(hf->data.sequence.items.top - hf->data.sequence.items.start);
        if (!(h->hf = calloc(nh + 1, sizeof *h->hf))) {
            st = tps_fail_oom(err, "reading the megatron mapping");
            goto cleanup;
        }
        for (size_t i = 0; i < nh; i++) {
            h->nhf = i + 1;
            TPS_CHECK(parse_hf(&c, yaml_document_get_node(&doc, hf->data.sequence.items.start[i]), &h->hf[i]));
        }
    }
    *out = h;
    h = NULL;
cleanup:
    if (doc_ok) yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    tps_megatron_hf_free(h);
    return st;
}
