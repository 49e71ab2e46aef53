#include "yaml_query.h"

#include <string.h>

const char *tps_yaml_scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

yaml_node_t *tps_yaml_key(yaml_document_t *doc, const yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *k = tps_yaml_scalar(yaml_document_get_node(doc, p->key));
        if (k && strcmp(k, key) == 0) return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

bool tps_yaml_true(const yaml_node_t *n)
{
    const char *s = tps_yaml_scalar(n);
    return s && strcmp(s, "true") == 0;
}

tps_status tps_yaml_fail(tps_yaml_ctx *c, const yaml_node_t *n, const char *msg)
{
    return tps_fail(c->err, TPS_EINVALID, "%s:%zu:%zu: targets: %s%s%s", c->source, n ? n->start_mark.line + 1 : 0,
                    n ? n->start_mark.column + 1 : 0, c->section ? c->section : "", c->section ? ": " : "", msg);
}

tps_status tps_yaml_only_keys(tps_yaml_ctx *c, const yaml_node_t *map, const char *const *allowed, const char *msg)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(c->doc, p->key);
        const char *k = tps_yaml_scalar(kn);
        bool ok = false;
        for (size_t i = 0; k && allowed[i]; i++) ok = ok || strcmp(k, allowed[i]) == 0;
        if (!ok) return tps_yaml_fail(c, kn, msg);
    }
    return TPS_OK;
}

bool tps_yaml_text_has(const char *text, bool (*has)(yaml_document_t *doc, const void *arg), const void *arg)
{
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) return false;
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    bool ok = false;
    if (yaml_parser_load(&p, &doc)) {
        ok = has(&doc, arg);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&p);
    return ok;
}
