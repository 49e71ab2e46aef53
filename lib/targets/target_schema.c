/* Reading a layout's targets: section (lib/targets/target_schema.h; the schema is in
 * lib/targets/target.h). */
#include "target_schema.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../base/yaml_query.h"
#include "../layout/presets.h"
#include "target_int.h"
#include "target_section.h"
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

/* ---- the targets: section, through the walker (target_section.h) ---- */

static tps_status parse_entry(tps_section *s, const yaml_node_t *key, const yaml_node_t *en, void *elem, void *arg)
{
    (void)key, (void)arg;
    static const char *const allowed[] = {"into", "from", "stack", "tied", "since", "engine", NULL};
    static const tps_section_says says = {"from is a name or a list of names", "from lists names",
                                          "at most 8 names in from", "from is empty"};
    tentry *e = elem;
    if (en->type != YAML_MAPPING_NODE)
        return tps_section_bad(s, en, "each tensors: entry is a mapping with into and from");
    tps_status st = tps_section_only_keys(s, en, allowed, "unknown key (into, from, stack, tied, since, engine)");
    if (st != TPS_OK) return st;
    e->line = en->start_mark.line + 1;
    const char *into = tps_section_text(s, en, "into");
    yaml_node_t *from = tps_section_key(s, en, "from");
    if (!into || !from) return tps_section_bad(s, en, "an entry needs into (a name) and from (a name or a list)");
    e->stack = tps_yaml_true(tps_section_key(s, en, "stack"));
    e->tied = tps_yaml_true(tps_section_key(s, en, "tied"));
    if (!(e->into = strdup(into))) return tps_section_oom(s);
    const char *since = tps_section_text(s, en, "since"), *engine = tps_section_text(s, en, "engine");
    if (since && !tps_target_version_ok(since))
        return tps_section_bad(s, tps_section_key(s, en, "since"), "since is a release number (0.24)");
    if ((since && !(e->since = strdup(since))) || (engine && !(e->engine = strdup(engine)))) return tps_section_oom(s);
    if ((st = tps_section_names(s, from, e->from, MAX_FROM, &e->nfrom, &says)) != TPS_OK) return st;
    int w = tps_target_name_wildcards(e->from[0]);
    if (w > TPS_TARGET_MAX_CAPS) return tps_section_bad(s, from, "at most 8 wildcards in a name");
    for (size_t j = 1; j < e->nfrom; j++)
        if (tps_target_name_wildcards(e->from[j]) != w)
            return tps_section_bad(s, from, "every name of from needs as many wildcards as the first");
    if (e->stack && w < 1) return tps_section_bad(s, en, "stack: true needs a wildcard in from for the expert");
    if (tps_target_name_wildcards(e->into) != w - (e->stack ? 1 : 0))
        return tps_section_bad(s, en,
                               e->stack ? "into needs one wildcard fewer than from (the last counts the stack)"
                                        : "into needs as many wildcards as from");
    return TPS_OK;
}

/* An extras: entry (constant: names, per, value, since, engine) or a required: one (names, per). */
static tps_status parse_extra(tps_section *s, const yaml_node_t *key, const yaml_node_t *en, void *elem, void *arg)
{
    (void)key;
    static const char *const allowed[] = {"names", "per", "value", "since", "before", "engine", NULL};
    static const char *const allowed_required[] = {"names", "per", NULL};
    bool constant = *(const bool *)arg;
    textra *x = elem;
    if (en->type != YAML_MAPPING_NODE)
        return tps_section_bad(s, en,
                               constant ? "each extras: entry is a mapping with names, per and value"
                                        : "each required: entry is a mapping with names and per");
    tps_status st =
        constant ? tps_section_only_keys(s, en, allowed, "unknown key (names, per, value, since, before, engine)")
                 : tps_section_only_keys(s, en, allowed_required, "unknown key (names, per)");
    if (st != TPS_OK) return st;
    yaml_node_t *names = tps_section_key(s, en, "names");
    const char *per = tps_section_text(s, en, "per"), *value = tps_section_text(s, en, "value");
    const char *since = tps_section_text(s, en, "since"), *engine = tps_section_text(s, en, "engine");
    const char *before = tps_section_text(s, en, "before");
    if (!names || names->type != YAML_SEQUENCE_NODE || !per || (constant && !value))
        return tps_section_bad(s, en,
                               constant
                                   ? "an extras entry needs names (a list), per (a source name) and value (a number)"
                                   : "a required entry needs names (a list) and per (an engine name)");
    char *end;
    x->value = value ? strtod(value, &end) : 0;
    if (value && (*end || end == value))
        return tps_section_bad(s, tps_section_key(s, en, "value"), "value is a number");
    if (since && !tps_target_version_ok(since))
        return tps_section_bad(s, tps_section_key(s, en, "since"), "since is a release number (0.14)");
    if (before && !tps_target_version_ok(before))
        return tps_section_bad(s, tps_section_key(s, en, "before"), "before is a release number (0.32)");
    if (!(x->per = strdup(per)) || (since && !(x->since = strdup(since))) ||
        (before && !(x->before = strdup(before))) || (engine && !(x->engine = strdup(engine))))
        return tps_section_oom(s);
    int w = tps_target_name_wildcards(per);
    if (w > TPS_TARGET_MAX_CAPS) return tps_section_bad(s, en, "at most 8 wildcards in a name");
    for (yaml_node_item_t *it = names->data.sequence.items.start; it < names->data.sequence.items.top; it++) {
        const char *n = tps_yaml_scalar(yaml_document_get_node(&s->doc, *it));
        if (!n) return tps_section_bad(s, names, "names lists names");
        if (x->nnames == MAX_FROM) return tps_section_bad(s, names, "at most 8 names");
        if (tps_target_name_wildcards(n) != w)
            return tps_section_bad(s, names, "every name needs as many wildcards as per");
        if (!(x->names[x->nnames++] = strdup(n))) return tps_section_oom(s);
    }
    if (!x->nnames) return tps_section_bad(s, names, "names is empty");
    return TPS_OK;
}

/* skip: a list of {match: PRE{layer}POST, layers_from: CONFIG_KEY, reason: ONE LINE}. */
static const char *const skip_shape =
    "a skip: entry is {match: NAME with {layer}, layers_from: a config.json key, reason: one line}";

static tps_status parse_skip_entry(tps_section *s, const yaml_node_t *key, const yaml_node_t *en, void *elem, void *arg)
{
    (void)key, (void)arg;
    static const char *const allowed[] = {"match", "layers_from", "reason", NULL};
    if (en->type != YAML_MAPPING_NODE) return tps_section_bad(s, en, skip_shape);
    tps_status st = tps_section_only_keys(s, en, allowed, skip_shape);
    if (st != TPS_OK) return st;
    const char *mt = tps_section_text(s, en, "match"), *lf = tps_section_text(s, en, "layers_from");
    const char *why = tps_section_text(s, en, "reason");
    const char *at = mt ? strstr(mt, "{layer}") : NULL;
    if (!at || strstr(at + 1, "{layer}") || !lf || !*lf || !why || !*why || strpbrk(why, "\r\n"))
        return tps_section_bad(s, en, skip_shape);
    tskip *S = elem;
    S->pre = strndup(mt, (size_t)(at - mt));
    S->post = strdup(at + 7);
    S->layers_from = strdup(lf);
    S->reason = strdup(why);
    if (!S->pre || !S->post || !S->layers_from || !S->reason) return tps_section_oom(s);
    return TPS_OK;
}

/* A blocked: entry {match, blocks[, before, engine]}. */
static tps_status parse_blocked(tps_section *s, const yaml_node_t *key, const yaml_node_t *en, void *elem, void *arg)
{
    (void)key, (void)arg;
    static const char *const allowed[] = {"match", "blocks", "before", "engine", NULL};
    static const char *const shape =
        "a blocked: entry is {match: NAME, blocks: 2 to 64[, before: RELEASE, engine: NAME]}";
    if (en->type != YAML_MAPPING_NODE) return tps_section_bad(s, en, shape);
    tps_status st = tps_section_only_keys(s, en, allowed, shape);
    if (st != TPS_OK) return st;
    const char *mt = tps_section_text(s, en, "match"), *bs = tps_section_text(s, en, "blocks");
    const char *bf = tps_section_text(s, en, "before"), *eg = tps_section_text(s, en, "engine");
    char *end = NULL;
    unsigned long long q = bs ? strtoull(bs, &end, 10) : 0;
    if (!mt || !bs || *end || q < 2 || q > 64 || (bf && !tps_target_version_ok(bf)))
        return tps_section_bad(s, en, shape);
    tblocked *B = elem;
    *B = (tblocked){strdup(mt), bf ? strdup(bf) : NULL, eg ? strdup(eg) : NULL, q, false, false, false};
    if (!B->match || (bf && !B->before) || (eg && !B->engine)) return tps_section_oom(s);
    return TPS_OK;
}

/* An item of transposed:, rank0:, rope_halves: or flattened: (arg: the key's name). */
static tps_status parse_named_rows(tps_section *s, const yaml_node_t *key, const yaml_node_t *en, void *elem,
                                   void *arg)
{
    (void)key;
    const char *ks = arg;
    const char *mt = tps_yaml_scalar(en);
    if (!mt) return tps_section_bad(s, en, "transposed, rank0, rope_halves and flattened list names");
    tblocked *B = elem;
    *B = (tblocked){strdup(mt), NULL, NULL, 0, strcmp(ks, "rank0") == 0, strcmp(ks, "rope_halves") == 0,
                    strcmp(ks, "flattened") == 0};
    return B->match ? TPS_OK : tps_section_oom(s);
}

/* ---- the section's fields ---- */

static tps_status read_vocab_multiple(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *obj)
{
    (void)k;
    tps_target *t = obj;
    const char *str = tps_yaml_scalar(v);
    char *end;
    unsigned long long q = str ? strtoull(str, &end, 10) : 0;
    if (!str || *end || q < 1 || q > (1u << 20))
        return tps_section_bad(s, v, "vocab_multiple is a number from 1 to 1048576");
    t->vocab_multiple = q;
    return TPS_OK;
}

static tps_status read_extras(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *obj)
{
    tps_target *t = obj;
    bool constant = strcmp(tps_yaml_scalar(k), "extras") == 0;
    if (v->type != YAML_SEQUENCE_NODE)
        return tps_section_bad(
            s, v, constant ? "extras is a list of {names, per, value}" : "required is a list of {names, per}");
    textra **list = constant ? &t->x : &t->q;
    size_t *count = constant ? &t->nx : &t->nq;
    if (*list) return tps_section_bad(s, k, "given twice");
    return tps_section_list(s, v, false, sizeof **list, (void **)list, count, NULL, parse_extra, &constant);
}

static tps_status read_experts_rule(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *obj)
{
    (void)k;
    tps_target *t = obj;
    const char *str = tps_yaml_scalar(v);
    if (!str || !*str) return tps_section_bad(s, v, "tp_at_most_experts is text naming the engine's rule");
    free(t->experts_rule);
    return (t->experts_rule = strdup(str)) ? TPS_OK : tps_section_oom(s);
}

static tps_status read_blocked(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *obj)
{
    (void)k;
    tps_target *t = obj;
    return tps_section_list(s, v, false, sizeof *t->b, (void **)&t->b, &t->nb, "blocked is a list of {match, blocks}",
                            parse_blocked, NULL);
}

static tps_status read_named_rows(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *obj)
{
    tps_target *t = obj;
    return tps_section_list(s, v, false, sizeof *t->b, (void **)&t->b, &t->nb,
                            "transposed, rank0, rope_halves and flattened are lists of names", parse_named_rows,
                            (void *)tps_yaml_scalar(k));
}

static tps_status read_skip(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *obj)
{
    (void)k;
    tps_target *t = obj;
    static const char *const shape = "skip is one list of {match, layers_from, reason}";
    if (t->s) return tps_section_bad(s, v, shape);
    return tps_section_list(s, v, false, sizeof *t->s, (void **)&t->s, &t->ns, shape, parse_skip_entry, NULL);
}

static tps_status read_tensors(tps_section *s, const yaml_node_t *k, const yaml_node_t *v, void *obj)
{
    (void)k;
    tps_target *t = obj;
    return tps_section_list(s, v, false, sizeof *t->e, (void **)&t->e, &t->n, "tensors is a list of {into, from}",
                            parse_entry, NULL);
}

static const tps_section_field target_fields[] = {
    {"vocab_multiple", read_vocab_multiple}, {"extras", read_extras},     {"required", read_extras},
    {"tp_at_most_experts", read_experts_rule}, {"blocked", read_blocked}, {"transposed", read_named_rows},
    {"rank0", read_named_rows},               {"rope_halves", read_named_rows}, {"flattened", read_named_rows},
    {"skip", read_skip},                      {"tensors", read_tensors},  {NULL, NULL},
};

/* A target mapping may be `refuse: "why"` alone: the family has parameters the mapping
 * cannot write (a tensor the engine cuts where the preset keeps it whole, a persistent buffer),
 * and a named refusal beats a set the engine rejects at load. */
static const char *refusal(yaml_document_t *doc, const yaml_node_t *t)
{
    return tps_yaml_scalar(tps_yaml_key(doc, t, "refuse"));
}

static bool has_target(yaml_document_t *doc, const void *name)
{
    yaml_node_t *targets = tps_yaml_key(doc, yaml_document_get_root_node(doc), "targets");
    yaml_node_t *t = tps_yaml_key(doc, targets, name);
    const char *alias = tps_yaml_scalar(t);
    if (alias) t = tps_yaml_key(doc, targets, alias);
    return t && t->type == YAML_MAPPING_NODE && !refusal(doc, t);
}

tps_status tps_target_load(const char *layout_text, const char *layout_name, const char *name, tps_target **out,
                           tps_error *err)
{
    *out = NULL;
    tps_section sec, *s = &sec;
    tps_status st = tps_section_open(s, layout_text, layout_name, name, true, NULL, "reading a target", err);
    tps_target *t = NULL;
    char have[1024];
    if (st != TPS_OK) goto cleanup;
    if (!s->node) {
        st = tps_fail(err, TPS_EINVALID, "%s has no mapping for --target %s; the presets with one: %s", layout_name,
                      name, tps_yaml_presets_with(has_target, name, have, sizeof have));
        goto cleanup;
    }
    const char *why = refusal(&s->doc, s->node);
    if (why) {
        st = tps_fail(err, TPS_EINVALID, "%s: --target %s is refused: %s", layout_name, name, why);
        goto cleanup;
    }
    if (!(t = calloc(1, sizeof *t)) || !(t->name = strdup(name)) || !(t->source = strdup(layout_name))) {
        st = tps_section_oom(s);
        goto cleanup;
    }
    st = tps_section_fields(s, s->node, target_fields, t,
                            "unknown key (vocab_multiple, tensors, extras, required, tp_at_most_experts, blocked, "
                            "transposed, rank0, rope_halves, flattened, skip)");
    if (st == TPS_OK) {
        *out = t;
        t = NULL;
    }
cleanup:
    tps_section_close(s);
    tps_target_free(t);
    return st;
}
