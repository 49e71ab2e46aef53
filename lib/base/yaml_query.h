/* Queries on a loaded libyaml document, for the parts of a layout read outside lib/layout/
 * (targets: and its megatron: mapping): one key of a mapping, a scalar's text, a failure
 * naming the node's line and column. */
#ifndef TPS_YAML_QUERY_H
#define TPS_YAML_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "status.h"

typedef struct tps_yaml_ctx {
    yaml_document_t *doc;
    const char *source;  /* the layout, as messages name it */
    tps_error *err;
    const char *section; /* below targets:, e.g. "megatron"; NULL: targets: itself */
} tps_yaml_ctx;

/* n's text when it is a scalar, else NULL (n may be NULL). */
const char *tps_yaml_scalar(const yaml_node_t *n);

/* The value of key in mapping map, or NULL (map may be NULL or not a mapping). */
yaml_node_t *tps_yaml_key(yaml_document_t *doc, const yaml_node_t *map, const char *key);

/* Whether n is the scalar true. */
bool tps_yaml_true(const yaml_node_t *n);

/* TPS_EINVALID "SOURCE:LINE:COL: targets: [SECTION: ]msg" at n (0:0 when n is NULL). */
tps_status tps_yaml_fail(tps_yaml_ctx *c, const yaml_node_t *n, const char *msg);

/* TPS_OK when every key of mapping map is one of allowed (NULL-terminated); else fails at the
 * first other key with msg. */
tps_status tps_yaml_only_keys(tps_yaml_ctx *c, const yaml_node_t *map, const char *const *allowed, const char *msg);

/* Whether YAML text parses and has(doc, arg) holds for it (false when it does not parse). */
bool tps_yaml_text_has(const char *text, bool (*has)(yaml_document_t *doc, const void *arg), const void *arg);

#endif
