/* One walker for the sections of a layout's targets: (targets: vllm: read by
 * target_schema.c, targets: megatron: by lib/registry/megatron_hf.c): the document parsed and
 * the section found, a mapping's keys dispatched through a table of typed fields, lists of
 * entries read into arrays, names given as one or a list.  Each reader keeps its schema (its
 * keys, its checks, its messages); the scaffolding is this file's.  Failures name the layout,
 * the node's line and column, and the section (lib/base/yaml_query.h). */
#ifndef TPS_TARGET_SECTION_H
#define TPS_TARGET_SECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "../base/status.h"
#include "../base/yaml_query.h"

typedef struct tps_section {
    tps_yaml_ctx c;    /* the document, the layout's name, the error, the section for messages */
    yaml_node_t *node; /* targets: NAME:'s value, a mapping; NULL when the layout has none */
    const char *doing; /* what an out-of-memory failure says it was doing */
    yaml_parser_t parser;
    yaml_document_t doc;
    bool parsed, loaded;
} tps_section;

/* Parses text (the layout named layout_name) and finds targets: name: in it; with alias, a
 * scalar value there names another key of targets:, followed once ("sglang: vllm").  msg
 * names the section in failures (NULL: targets: itself).  Text that is no YAML is
 * TPS_EINVALID "LAYOUT: the layout is not valid YAML"; a missing section is s->node NULL.
 * tps_section_close frees s, also after a failure. */
tps_status tps_section_open(tps_section *s, const char *text, const char *layout_name, const char *name, bool alias,
                            const char *msg, const char *doing, tps_error *err);
void tps_section_close(tps_section *s);

/* TPS_EINVALID at n with msg (tps_yaml_fail), and the out-of-memory failure. */
tps_status tps_section_bad(tps_section *s, const yaml_node_t *n, const char *msg);
tps_status tps_section_oom(tps_section *s);

/* The value of key in mapping map (NULL when absent or map is no mapping), and its text
 * when it is a scalar (else NULL). */
yaml_node_t *tps_section_key(tps_section *s, const yaml_node_t *map, const char *key);
const char *tps_section_text(tps_section *s, const yaml_node_t *map, const char *key);

/* TPS_OK when every key of mapping map is one of allowed (NULL-terminated); else fails at the
 * first other key with msg. */
tps_status tps_section_only_keys(tps_section *s, const yaml_node_t *map, const char *const *allowed, const char *msg);

/* A field of a mapping: its key, and what reads its value into obj. */
typedef tps_status (*tps_section_field_fn)(tps_section *s, const yaml_node_t *key, const yaml_node_t *value,
                                           void *obj);
typedef struct tps_section_field {
    const char *key;
    tps_section_field_fn read;
} tps_section_field;

/* Every pair of mapping map, in order, through the field of fields (ended by a NULL key)
 * naming its key; a key none names fails at the key with unknown. */
tps_status tps_section_fields(tps_section *s, const yaml_node_t *map, const tps_section_field *fields, void *obj,
                              const char *unknown);

/* One entry of a list: key is NULL for a sequence's item, the key of a mapping's pair. */
typedef tps_status (*tps_section_item_fn)(tps_section *s, const yaml_node_t *key, const yaml_node_t *value,
                                          void *elem, void *arg);

/* The items of v (a sequence, or with pairs a mapping; anything else fails at v with shape)
 * appended to *array (elem bytes each, grown and zeroed, one spare element at the end),
 * each read by item; *count counts the items begun, so after a failure the caller frees
 * what was read. */
tps_status tps_section_list(tps_section *s, const yaml_node_t *v, bool pairs, size_t elem, void **array,
                            size_t *count, const char *shape, tps_section_item_fn item, void *arg);

/* What tps_section_names says when n is no name or list (not_list), a list item is no name
 * (not_name), there are more than max (too_many) or none (empty). */
typedef struct tps_section_says {
    const char *not_list, *not_name, *too_many, *empty;
} tps_section_says;

/* A name or a list of at most max names (n may be NULL) into out[] (malloc'd), *count set. */
tps_status tps_section_names(tps_section *s, const yaml_node_t *n, char **out, size_t max, size_t *count,
                             const tps_section_says *says);

#endif
