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
#include "../targets/target_section.h"
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

/* ---- the megatron: section, through the walker (lib/targets/target_section.h) ---- */

static tps_status parse_entry(tps_section *s, const yaml_node_t *key, const yaml_node_t *en, void *elem, void *arg)
{
    (void)key, (void)arg;
    static const char *const allowed[] = {"into", "from", "rows", "groups", NULL};
    static const char *const from_says = "from is a name or a list of at most 8",
                             *const rows_says = "rows is a list of size expressions";
    static const tps_section_says from = {from_says, from_says, from_says, from_says},
                                  rows = {rows_says, rows_says, rows_says, rows_says};
    mentry *e = elem;
    if (en->type != YAML_MAPPING_NODE)
        return tps_section_bad(s, en, "each tensors: entry is a mapping with into and from");
    TRY(tps_section_only_keys(s, en, allowed, "unknown key (into, from, rows, groups)"));
    e->line = en->start_mark.line + 1;
    const char *into = tps_section_text(s, en, "into");
    if (!into) return tps_section_bad(s, en, "an entry needs into (a name)");
    if (!(e->into = strdup(into))) return tps_section_oom(s);
    TRY(tps_section_names(s, tps_section_key(s, en, "from"), e->from, MAX_FROM, &e->nfrom, &from));
    yaml_node_t *rn = tps_section_key(s, en, "rows");
    if (rn) TRY(tps_section_names(s, rn, e->rows, MAX_FROM, &e->nrows, &rows));
    const char *groups = tps_section_text(s, en, "groups");
    if (groups && !(e->groups = strdup(groups))) return tps_section_oom(s);
    if (e->nfrom > 1 && e->nrows != e->nfrom)
        return tps_section_bad(s, en, "an entry of several from names gives rows for each");
    if (e->nfrom == 1 && (e->nrows || e->groups))
        return tps_section_bad(s, en, "rows and groups are for entries of several names");
    int w = tps_target_name_wildcards(e->into);
    if (w > TPS_TARGET_MAX_CAPS) return tps_section_bad(s, en, "at most 8 wildcards in a name");
    for (size_t k = 0; k < e->nfrom; k++)
        if (tps_target_name_wildcards(e->from[k]) != w)
            return tps_section_bad(s, en, "every name of from needs as many wildcards as into");
    return TPS_OK;
}

static tps_status parse_arg(tps_section *s, const yaml_node_t *kn, const yaml_node_t *vn, void *elem, void *arg)
{
    (void)arg;
    static const char *const allowed[] = {"config", "float", "int", NULL};
    marg *a = elem;
    const char *k = tps_yaml_scalar(kn), *cfg = tps_yaml_scalar(vn);
    if (!k) return tps_section_bad(s, kn, "args: keys are Megatron arg names");
    if (!cfg && vn && vn->type == YAML_MAPPING_NODE) {
        TRY(tps_section_only_keys(s, vn, allowed, "unknown key (config, float, int)"));
        cfg = tps_section_text(s, vn, "config");
        const char *f = tps_section_text(s, vn, "float"), *i = tps_section_text(s, vn, "int");
        a->as_float = f && strcmp(f, "true") == 0;
        a->as_int = i && strcmp(i, "true") == 0;
    }
    if (!cfg) return tps_section_bad(s, vn, "an args: value is a config.json key, or {config: KEY, float: true}");
    if (!(a->arg = strdup(k)) || !(a->config = strdup(cfg))) return tps_section_oom(s);
    return TPS_OK;
}

static tps_status parse_hf(tps_section *s, const yaml_node_t *key, const yaml_node_t *n, void *elem, void *arg)
{
    (void)key, (void)arg;
    static const char *const allowed[] = {"architecture", "model_type", "when", "unless", NULL};
    mhf *f = elem;
    if (!n || n->type != YAML_MAPPING_NODE)
        return tps_section_bad(s, n, "each hf: entry is a mapping with an architecture");
    TRY(tps_section_only_keys(s, n, allowed, "unknown key (architecture, model_type, when, unless)"));
    const char *v[4];
    for (int i = 0; i < 4; i++) v[i] = tps_section_text(s, n, allowed[i]);
    if (!v[0] || !v[1]) return tps_section_bad(s, n, "an hf: entry needs architecture and model_type");
    char **dst[4] = {&f->architecture, &f->model_type, &f->when, &f->unless};
    for (int i = 0; i < 4; i++)
        if (v[i] && !(*dst[i] = strdup(v[i]))) return tps_section_oom(s);
    return TPS_OK;
}

bool tps_mhf_has_megatron(yaml_document_t *doc, const void *unused)
{
    (void)unused;
    yaml_node_t *t = tps_yaml_key(doc, tps_yaml_key(doc, yaml_document_get_root_node(doc), "targets"), "megatron");
    return t && t->type == YAML_MAPPING_NODE;
}

/* The section's three fields, once the section is found (s->node). */
static tps_status read_section(tps_section *s, tps_megatron_hf *h)
{
    static const char *const allowed[] = {"tensors", "args", "hf", NULL};
    yaml_node_t *tn = s->node;
    TRY(tps_section_only_keys(s, tn, allowed, "unknown key (tensors, args, hf)"));
    yaml_node_t *tensors = tps_section_key(s, tn, "tensors"), *args = tps_section_key(s, tn, "args"),
                *hf = tps_section_key(s, tn, "hf");
    if (!tensors || tensors->type != YAML_SEQUENCE_NODE)
        return tps_section_bad(s, tn, "tensors is a list of {into, from}");
    TRY(tps_section_list(s, tensors, false, sizeof *h->e, (void **)&h->e, &h->n, NULL, parse_entry, NULL));
    if (args)
        TRY(tps_section_list(s, args, true, sizeof *h->a, (void **)&h->a, &h->na,
                             "args is a mapping of Megatron arg: config.json key", parse_arg, NULL));
    if (hf)
        TRY(tps_section_list(s, hf, false, sizeof *h->hf, (void **)&h->hf, &h->nhf,
                             "hf is a list of {architecture, model_type, when, unless}", parse_hf, NULL));
    return TPS_OK;
}

tps_status tps_megatron_hf_load(const char *layout_text, const char *layout_name, tps_megatron_hf **out,
                                tps_error *err)
{
    *out = NULL;
    tps_section sec, *s = &sec;
    tps_megatron_hf *h = NULL;
    tps_status st = tps_section_open(s, layout_text, layout_name, "megatron", false, "megatron",
                                     "reading the megatron mapping", err);
    if (st == TPS_OK && !s->node) {
        char have[1024];
        st = tps_fail(err, TPS_EINVALID,
                      "%s has no Hugging Face <-> Megatron mapping (targets: megatron:); the presets with one: %s",
                      layout_name, tps_yaml_presets_with(tps_mhf_has_megatron, NULL, have, sizeof have));
    }
    if (st == TPS_OK && (!(h = calloc(1, sizeof *h)) || !(h->source = strdup(layout_name)))) st = tps_section_oom(s);
    if (st == TPS_OK) st = read_section(s, h);
    if (st == TPS_OK) {
        *out = h;
        h = NULL;
    }
    tps_section_close(s);
    tps_megatron_hf_free(h);
    return st;
}
