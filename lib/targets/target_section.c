/* The walker for a layout's targets: sections (lib/targets/target_section.h). */
#include "target_section.h"

#include <stdlib.h>
#include <string.h>

tps_status tps_section_open(tps_section *s, const char *text, const char *layout_name, const char *name, bool alias,
                            const char *msg, const char *doing, tps_error *err)
{
    memset(s, 0, sizeof *s);
    s->c = (tps_yaml_ctx){&s->doc, layout_name, err, msg};
    s->doing = doing;
    if (!yaml_parser_initialize(&s->parser)) return tps_fail_oom(err, doing);
    s->parsed = true;
    yaml_parser_set_input_string(&s->parser, (const unsigned char *)text, strlen(text));
    if (!yaml_parser_load(&s->parser, &s->doc))
        return tps_fail(err, TPS_EINVALID, "%s: the layout is not valid YAML", layout_name);
    s->loaded = true;
    yaml_node_t *targets = tps_yaml_key(&s->doc, yaml_document_get_root_node(&s->doc), "targets");
    yaml_node_t *t = tps_yaml_key(&s->doc, targets, name);
    const char *other = alias ? tps_yaml_scalar(t) : NULL;
    if (other) t = tps_yaml_key(&s->doc, targets, other);
    s->node = t && t->type == YAML_MAPPING_NODE ? t : NULL;
    return TPS_OK;
}

void tps_section_close(tps_section *s)
{
    if (s->loaded) yaml_document_delete(&s->doc);
    if (s->parsed) yaml_parser_delete(&s->parser);
    s->loaded = s->parsed = false;
}

tps_status tps_section_bad(tps_section *s, const yaml_node_t *n, const char *msg)
{
    return tps_yaml_fail(&s->c, n, msg);
}

tps_status tps_section_oom(tps_section *s) { return tps_fail_oom(s->c.err, s->doing); }

yaml_node_t *tps_section_key(tps_section *s, const yaml_node_t *map, const char *key)
{
    return tps_yaml_key(&s->doc, map, key);
}

const char *tps_section_text(tps_section *s, const yaml_node_t *map, const char *key)
{
    return tps_yaml_scalar(tps_yaml_key(&s->doc, map, key));
}

tps_status tps_section_only_keys(tps_section *s, const yaml_node_t *map, const char *const *allowed, const char *msg)
{
    return tps_yaml_only_keys(&s->c, map, allowed, msg);
}

tps_status tps_section_fields(tps_section *s, const yaml_node_t *map, const tps_section_field *fields, void *obj,
                              const char *unknown)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&s->doc, p->key), *v = yaml_document_get_node(&s->doc, p->value);
        const char *ks = tps_yaml_scalar(k);
        const tps_section_field *f = fields;
        while (f->key && !(ks && strcmp(ks, f->key) == 0)) f++;
        if (!f->key) return tps_section_bad(s, k, unknown);
        tps_status st = f->read(s, k, v, obj);
        if (st != TPS_OK) return st;
    }
    return TPS_OK;
}

tps_status tps_section_list(tps_section *s, const yaml_node_t *v, bool pairs, size_t elem, void **array,
                            size_t *count, const char *shape, tps_section_item_fn item, void *arg)
{
    if (!v || v->type != (pairs ? YAML_MAPPING_NODE : YAML_SEQUENCE_NODE)) return tps_section_bad(s, v, shape);
    size_t n = pairs ? (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start)
                     : (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    size_t had = *count;
    char *grown = realloc(*array, (had + n + 1) * elem);
    if (!grown) return tps_section_oom(s);
    memset(grown + had * elem, 0, (n + 1) * elem);
    *array = grown;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *k = NULL, *val;
        if (pairs) {
            k = yaml_document_get_node(&s->doc, v->data.mapping.pairs.start[i].key);
            val = yaml_document_get_node(&s->doc, v->data.mapping.pairs.start[i].value);
        } else {
            val = yaml_document_get_node(&s->doc, v->data.sequence.items.start[i]);
        }
        *count = had + i + 1;
        tps_status st = item(s, k, val, grown + (had + i) * elem, arg);
        if (st != TPS_OK) return st;
    }
    return TPS_OK;
}

tps_status tps_section_names(tps_section *s, const yaml_node_t *n, char **out, size_t max, size_t *count,
                             const tps_section_says *says)
{
    *count = 0;
    if (tps_yaml_scalar(n)) {
        if (!(out[(*count)++] = strdup(tps_yaml_scalar(n)))) return tps_section_oom(s);
        return TPS_OK;
    }
    if (!n || n->type != YAML_SEQUENCE_NODE) return tps_section_bad(s, n, says->not_list);
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        const char *name = tps_yaml_scalar(yaml_document_get_node(&s->doc, *it));
        if (!name) return tps_section_bad(s, n, says->not_name);
        if (*count == max) return tps_section_bad(s, n, says->too_many);
        if (!(out[(*count)++] = strdup(name))) return tps_section_oom(s);
    }
    return *count ? TPS_OK : tps_section_bad(s, n, says->empty);
}
