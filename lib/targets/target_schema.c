/* Reading a layout's targets: section (lib/targets/target_schema.h; the schema is in
 * lib/targets/target.h). */
#include "target_schema.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../base/yaml_query.h"
#include "../layout/presets.h"
#include "target_int.h"
#include "target_names.h"
#include "target_release.h"

void tps_target_free(tps_target *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) {
        for (size_t j = 0; j < t->e[i].nfrom; j++) free(t->e[i].from[j]);
        free(t->e[i].into);
        free(t->e[i].since);
        free(t->e[i].engine);
    }
    free(t->e);
    for (size_t i = 0; i < t->nx + t->nq; i++) {
        textra *x = i < t->nx ? &t->x[i] : &t->q[i - t->nx];
        for (size_t j = 0; j < x->nnames; j++) free(x->names[j]);
        free(x->per);
        free(x->since);
        free(x->before);
        free(x->engine);
    }
    free(t->x);
    free(t->q);
    for (size_t i = 0; i < t->nb; i++) {
        free(t->b[i].match);
        free(t->b[i].before);
        free(t->b[i].engine);
    }
    free(t->b);
    for (size_t i = 0; i < t->ns; i++) {
        free(t->s[i].pre);
        free(t->s[i].post);
        free(t->s[i].layers_from);
        free(t->s[i].reason);
    }
    free(t->s);
    free(t->experts_rule);
    free(t->name);
    free(t->source);
    free(t);
}

/* ---- the targets: section ---- */

/* The shared libyaml queries (yaml_query.h), under the short names this file's parsers use. */
typedef tps_yaml_ctx yctx;
#define yscalar tps_yaml_scalar
#define ykey tps_yaml_key
#define ybad tps_yaml_fail
#define ytrue tps_yaml_true

static tps_status parse_entry(yctx *c, const yaml_node_t *en, tentry *e)
{
    static const char *const allowed[] = {"into", "from", "stack", "tied", "since", "engine", NULL};
    if (en->type != YAML_MAPPING_NODE) return ybad(c, en, "each tensors: entry is a mapping with into and from");
    tps_status st = tps_yaml_only_keys(c, en, allowed, "unknown key (into, from, stack, tied, since, engine)");
    if (st != TPS_OK) return st;
    e->line = en->start_mark.line + 1;
    const char *into = yscalar(ykey(c->doc, en, "into"));
    yaml_node_t *from = ykey(c->doc, en, "from");
    if (!into || !from) return ybad(c, en, "an entry needs into (a name) and from (a name or a list)");
    e->stack = ytrue(ykey(c->doc, en, "stack"));
    e->tied = ytrue(ykey(c->doc, en, "tied"));
    if (!(e->into = strdup(into))) return tps_fail_oom(c->err, "reading a target");
    const char *since = yscalar(ykey(c->doc, en, "since")), *engine = yscalar(ykey(c->doc, en, "engine"));
    if (since && !tps_target_version_ok(since)) return ybad(c, ykey(c->doc, en, "since"), "since is a release number (0.24)");
    if ((since && !(e->since = strdup(since))) || (engine && !(e->engine = strdup(engine))))
        return tps_fail_oom(c->err, "reading a target");
    if (from->type == YAML_SCALAR_NODE) {
        if (!(e->from[e->nfrom++] = strdup(yscalar(from)))) return tps_fail_oom(c->err, "reading a target");
    } else if (from->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = from->data.sequence.items.start; it < from->data.sequence.items.top; it++) {
            const char *s = yscalar(yaml_document_get_node(c->doc, *it));
            if (!s) return ybad(c, from, "from lists names");
            if (e->nfrom == MAX_FROM) return ybad(c, from, "at most 8 names in from");
            if (!(e->from[e->nfrom++] = strdup(s))) return tps_fail_oom(c->err, "reading a target");
        }
    } else {
        return ybad(c, from, "from is a name or a list of names");
    }
    if (e->nfrom == 0) return ybad(c, from, "from is empty");
    int w = tps_target_name_wildcards(e->from[0]);
    if (w > TPS_TARGET_MAX_CAPS) return ybad(c, from, "at most 8 wildcards in a name");
    for (size_t j = 1; j < e->nfrom; j++)
        if (tps_target_name_wildcards(e->from[j]) != w) return ybad(c, from, "every name of from needs as many wildcards as the first");
    if (e->stack && w < 1) return ybad(c, en, "stack: true needs a wildcard in from for the expert");
    if (tps_target_name_wildcards(e->into) != w - (e->stack ? 1 : 0))
        return ybad(c, en, e->stack ? "into needs one wildcard fewer than from (the last counts the stack)"
                                    : "into needs as many wildcards as from");
    return TPS_OK;
}

/* An extras: entry (constant: names, per, value, since, engine) or a required: one (names, per). */
static tps_status parse_extra(yctx *c, const yaml_node_t *en, textra *x, bool constant)
{
    static const char *const allowed[] = {"names", "per", "value", "since", "before", "engine", NULL};
    static const char *const allowed_required[] = {"names", "per", NULL};
    if (en->type != YAML_MAPPING_NODE)
        return ybad(c, en, constant ? "each extras: entry is a mapping with names, per and value"
                                    : "each required: entry is a mapping with names and per");
    tps_status st = constant ? tps_yaml_only_keys(c, en, allowed, "unknown key (names, per, value, since, before, engine)")
                             : tps_yaml_only_keys(c, en, allowed_required, "unknown key (names, per)");
    if (st != TPS_OK) return st;
    yaml_node_t *names = ykey(c->doc, en, "names");
    const char *per = yscalar(ykey(c->doc, en, "per")), *value = yscalar(ykey(c->doc, en, "value"));
    const char *since = yscalar(ykey(c->doc, en, "since")), *engine = yscalar(ykey(c->doc, en, "engine"));
    const char *before = yscalar(ykey(c->doc, en, "before"));
    if (!names || names->type != YAML_SEQUENCE_NODE || !per || (constant && !value))
        return ybad(c, en, constant ? "an extras entry needs names (a list), per (a source name) and value (a number)"
                                    : "a required entry needs names (a list) and per (an engine name)");
    char *end;
    x->value = value ? strtod(value, &end) : 0;
    if (value && (*end || end == value)) return ybad(c, ykey(c->doc, en, "value"), "value is a number");
    if (since && !tps_target_version_ok(since)) return ybad(c, ykey(c->doc, en, "since"), "since is a release number (0.14)");
    if (before && !tps_target_version_ok(before)) return ybad(c, ykey(c->doc, en, "before"), "before is a release number (0.32)");
    if (!(x->per = strdup(per)) || (since && !(x->since = strdup(since))) || (before && !(x->before = strdup(before))) ||
        (engine && !(x->engine = strdup(engine))))
        return tps_fail_oom(c->err, "reading a target");
    int w = tps_target_name_wildcards(per);
    if (w > TPS_TARGET_MAX_CAPS) return ybad(c, en, "at most 8 wildcards in a name");
    for (yaml_node_item_t *it = names->data.sequence.items.start; it < names->data.sequence.items.top; it++) {
        const char *s = yscalar(yaml_document_get_node(c->doc, *it));
        if (!s) return ybad(c, names, "names lists names");
        if (x->nnames == MAX_FROM) return ybad(c, names, "at most 8 names");
        if (tps_target_name_wildcards(s) != w) return ybad(c, names, "every name needs as many wildcards as per");
        if (!(x->names[x->nnames++] = strdup(s))) return tps_fail_oom(c->err, "reading a target");
    }
    if (!x->nnames) return ybad(c, names, "names is empty");
    return TPS_OK;
}

/* The mapping node of target name in a parsed layout, following one alias ("sglang: vllm"). */
/* skip: a list of {match: PRE{layer}POST, layers_from: CONFIG_KEY, reason: ONE LINE}. */
static tps_status parse_skip(yctx *c, const yaml_node_t *v, tps_target *t)
{
    static const char *const allowed[] = {"match", "layers_from", "reason", NULL};
    static const char *const shape = "a skip: entry is {match: NAME with {layer}, layers_from: a config.json key, reason: "
                                     "one line}";
    if (v->type != YAML_SEQUENCE_NODE || t->s) return ybad(c, v, "skip is one list of {match, layers_from, reason}");
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (!(t->s = calloc(n + 1, sizeof *t->s))) return tps_fail_oom(c->err, "reading a target");
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *en = yaml_document_get_node(c->doc, v->data.sequence.items.start[i]);
        if (en->type != YAML_MAPPING_NODE) return ybad(c, en, shape);
        tps_status st = tps_yaml_only_keys(c, en, allowed, shape);
        if (st != TPS_OK) return st;
        const char *mt = yscalar(ykey(c->doc, en, "match")), *lf = yscalar(ykey(c->doc, en, "layers_from"));
        const char *why = yscalar(ykey(c->doc, en, "reason"));
        const char *at = mt ? strstr(mt, "{layer}") : NULL;
        if (!at || strstr(at + 1, "{layer}") || !lf || !*lf || !why || !*why || strpbrk(why, "\r\n"))
            return ybad(c, en, shape);
        tskip *S = &t->s[t->ns++];
        S->pre = strndup(mt, (size_t)(at - mt));
        S->post = strdup(at + 7);
        S->layers_from = strdup(lf);
        S->reason = strdup(why);
        if (!S->pre || !S->post || !S->layers_from || !S->reason) return tps_fail_oom(c->err, "reading a target");
    }
    return TPS_OK;
}

static yaml_node_t *find_target(yaml_document_t *doc, const char *name)
{
    yaml_node_t *targets = ykey(doc, yaml_document_get_root_node(doc), "targets");
    yaml_node_t *t = ykey(doc, targets, name);
    const char *alias = yscalar(t);
    if (alias) t = ykey(doc, targets, alias);
    return t && t->type == YAML_MAPPING_NODE ? t : NULL;
}

/* A target mapping may be `refuse: "why"` alone: the family has parameters the mapping
 * cannot write (a tensor the engine cuts where the preset keeps it whole, a persistent buffer),
 * and a named refusal beats a set the engine rejects at load. */
static const char *refusal(yaml_document_t *doc, const yaml_node_t *t) { return yscalar(ykey(doc, t, "refuse")); }

static bool has_target(yaml_document_t *doc, const void *name)
{
    yaml_node_t *t = find_target(doc, name);
    return t && !refusal(doc, t);
}

tps_status tps_target_load(const char *layout_text, const char *layout_name, const char *name, tps_target **out,
                           tps_error *err)
{
    *out = NULL;
    if (strcmp(name, "tpshard") == 0) return TPS_OK;
    if (strcmp(name, "vllm") != 0 && strcmp(name, "sglang") != 0)
        return tps_fail(err, TPS_EARG, "--target '%s': expected tpshard, vllm or sglang", name);
    yaml_parser_t p;
    yaml_document_t doc;
    bool doc_ok = false;
    tps_status st = TPS_OK;
    tps_target *t = calloc(1, sizeof *t);
    if (!t || !yaml_parser_initialize(&p)) {
        free(t);
        return tps_fail_oom(err, "reading a target");
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)layout_text, strlen(layout_text));
    if (!yaml_parser_load(&p, &doc)) {
        st = tps_fail(err, TPS_EINVALID, "%s: the layout is not valid YAML", layout_name);
        goto cleanup;
    }
    doc_ok = true;
    yctx c = {&doc, layout_name, err, NULL};
    yaml_node_t *tn = find_target(&doc, name);
    char have[1024];
    if (!tn) {
        st = tps_fail(err, TPS_EINVALID, "%s has no mapping for --target %s; the presets with one: %s", layout_name,
                      name, tps_yaml_presets_with(has_target, name, have, sizeof have));
        goto cleanup;
    }
    const char *why = refusal(&doc, tn);
    if (why) {
        st = tps_fail(err, TPS_EINVALID, "%s: --target %s is refused: %s", layout_name, name, why);
        goto cleanup;
    }
    if (!(t->name = strdup(name)) || !(t->source = strdup(layout_name))) {
        st = tps_fail_oom(err, "reading a target");
        goto cleanup;
    }
    for (yaml_node_pair_t *pp = tn->data.mapping.pairs.start; pp < tn->data.mapping.pairs.top; pp++) {
        yaml_node_t *k = yaml_document_get_node(&doc, pp->key), *v = yaml_document_get_node(&doc, pp->value);
        const char *ks = yscalar(k);
        if (ks && strcmp(ks, "vocab_multiple") == 0) {
            const char *s = yscalar(v);
            char *end;
            unsigned long long q = s ? strtoull(s, &end, 10) : 0;
            if (!s || *end || q < 1 || q > (1u << 20)) {
                st = ybad(&c, v, "vocab_multiple is a number from 1 to 1048576");
                goto cleanup;
            }
            t->vocab_multiple = q;
        } else if (ks && (strcmp(ks, "extras") == 0 || strcmp(ks, "required") == 0)) {
            bool constant = strcmp(ks, "extras") == 0;
            if (v->type != YAML_SEQUENCE_NODE) {
                st = ybad(&c, v, constant ? "extras is a list of {names, per, value}" : "required is a list of {names, per}");
                goto cleanup;
            }
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            textra **list = constant ? &t->x : &t->q;
            size_t *count = constant ? &t->nx : &t->nq;
            if (*list || !(*list = calloc(n + 1, sizeof **list))) {
                st = *list ? ybad(&c, k, "given twice") : tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
            for (size_t i = 0; i < n; i++) {
                *count = i + 1;
                TPS_CHECK(parse_extra(&c, yaml_document_get_node(&doc, v->data.sequence.items.start[i]), &(*list)[i],
                                      constant));
            }
        } else if (ks && strcmp(ks, "tp_at_most_experts") == 0) {
            const char *s = yscalar(v);
            if (!s || !*s) {
                st = ybad(&c, v, "tp_at_most_experts is text naming the engine's rule");
                goto cleanup;
            }
            free(t->experts_rule);
            if (!(t->experts_rule = strdup(s))) {
                st = tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
        } else if (ks && strcmp(ks, "blocked") == 0) {
            if (v->type != YAML_SEQUENCE_NODE) {
                st = ybad(&c, v, "blocked is a list of {match, blocks}");
                goto cleanup;
            }
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            tblocked *nb = realloc(t->b, (t->nb + n + 1) * sizeof *nb);
            if (!nb) {
                st = tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
            t->b = nb;
            for (size_t i = 0; i < n; i++) {
                static const char *const allowed[] = {"match", "blocks", "before", "engine", NULL};
                static const char *const shape = "a blocked: entry is {match: NAME, blocks: 2 to 64[, before: RELEASE, engine: NAME]}";
                yaml_node_t *en = yaml_document_get_node(&doc, v->data.sequence.items.start[i]);
                if (en->type != YAML_MAPPING_NODE) {
                    st = ybad(&c, en, shape);
                    goto cleanup;
                }
                if ((st = tps_yaml_only_keys(&c, en, allowed, shape)) != TPS_OK) goto cleanup;
                const char *mt = yscalar(ykey(&doc, en, "match")), *bs = yscalar(ykey(&doc, en, "blocks"));
                const char *bf = yscalar(ykey(&doc, en, "before")), *eg = yscalar(ykey(&doc, en, "engine"));
                char *end = NULL;
                unsigned long long q = bs ? strtoull(bs, &end, 10) : 0;
                if (!mt || !bs || *end || q < 2 || q > 64 || (bf && !tps_target_version_ok(bf))) {
                    st = ybad(&c, en, shape);
                    goto cleanup;
                }
                t->b[t->nb] = (tblocked){strdup(mt), bf ? strdup(bf) : NULL, eg ? strdup(eg) : NULL, q, false, false, false};
                const tblocked *B = &t->b[t->nb++];
                if (!B->match || (bf && !B->before) || (eg && !B->engine)) {
                    st = tps_fail_oom(err, "reading a target");
                    goto cleanup;
                }
            }
        } else if (ks && (strcmp(ks, "transposed") == 0 || strcmp(ks, "rank0") == 0 || strcmp(ks, "rope_halves") == 0 ||
                          strcmp(ks, "flattened") == 0)) {
            bool rank0 = strcmp(ks, "rank0") == 0, halves = strcmp(ks, "rope_halves") == 0,
                 flat = strcmp(ks, "flattened") == 0;
            if (v->type != YAML_SEQUENCE_NODE) {
                st = ybad(&c, v, "transposed, rank0, rope_halves and flattened are lists of names");
                goto cleanup;
            }
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            tblocked *b = realloc(t->b, (t->nb + n + 1) * sizeof *b);
            if (!b) {
                st = tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
            t->b = b;
            for (size_t i = 0; i < n; i++) {
                yaml_node_t *en = yaml_document_get_node(&doc, v->data.sequence.items.start[i]);
                const char *mt = yscalar(en);
                if (!mt) {
                    st = ybad(&c, en, "transposed, rank0, rope_halves and flattened list names");
                    goto cleanup;
                }
                t->b[t->nb] = (tblocked){strdup(mt), NULL, NULL, 0, rank0, halves, flat};
                if (!t->b[t->nb++].match) {
                    st = tps_fail_oom(err, "reading a target");
                    goto cleanup;
                }
            }
        } else if (ks && strcmp(ks, "skip") == 0) {
            TPS_CHECK(parse_skip(&c, v, t));
        } else if (ks && strcmp(ks, "tensors") == 0) {
            if (v->type != YAML_SEQUENCE_NODE) {
                st = ybad(&c, v, "tensors is a list of {into, from}");
                goto cleanup;
            }
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            if (!(t->e = calloc(n + 1, sizeof *t->e))) {
                st = tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
            for (size_t i = 0; i < n; i++) {
                t->n = i + 1;
                TPS_CHECK(parse_entry(&c, yaml_document_get_node(&doc, v->data.sequence.items.start[i]), &t->e[i]));
            }
        } else {
            st = ybad(&c, k, "unknown key (vocab_multiple, tensors, extras, required, tp_at_most_experts, blocked, transposed, "
                                 "rank0, rope_halves, flattened, skip)");
            goto cleanup;
        }
    }
    *out = t;
    t = NULL;
cleanup:
    if (doc_ok) yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    tps_target_free(t);
    return st;
}
