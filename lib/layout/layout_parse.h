/* Private to the layout parser (lib/layout/layout*.c): the parse context and the typed YAML
 * getters every section's parser uses.  Each getter checks the node's type and range and,
 * on error, fails with file:line:column (tps_lp_fail_at), so a typo never passes silently. */
#ifndef TPS_LAYOUT_PARSE_H
#define TPS_LAYOUT_PARSE_H

#include <stdbool.h>
#include <stdint.h>
#include <yaml.h>

#include "../base/status.h"
#include "layout_int.h"

typedef struct pctx {
    yaml_document_t *doc;
    const char *file;
    tps_error *err;
    tps_layout *l;
} pctx;

/* Where n stands in the file (line and column, 1-based). */
tps_mark tps_lp_mark_of(const yaml_node_t *n);
tps_status tps_lp_fail_at(pctx *c, const yaml_node_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The node numbered id of the document (libyaml numbers nodes from 1). */
yaml_node_t *tps_lp_node(pctx *c, int id);
const char *tps_lp_node_type_name(const yaml_node_t *n);
/* Each checks n (what names it in the message) and stores the value into *out. */
tps_status tps_lp_want_type(pctx *c, const yaml_node_t *n, yaml_node_type_t t, const char *what);
/* The scalar's text; refuses embedded NUL bytes (they would truncate names silently). */
tps_status tps_lp_scalar(pctx *c, const yaml_node_t *n, const char *what, const char **out);
tps_status tps_lp_get_u64(pctx *c, const yaml_node_t *n, const char *what, uint64_t *out);
tps_status tps_lp_get_dim(pctx *c, const yaml_node_t *n, const char *what, int *out);
tps_status tps_lp_get_bool(pctx *c, const yaml_node_t *n, const char *what, bool *out);
tps_status tps_lp_get_double(pctx *c, const yaml_node_t *n, const char *what, double lo, double hi, double *out);
tps_status tps_lp_get_strdup(pctx *c, const yaml_node_t *n, const char *what, char **out);
tps_status tps_lp_get_enum(pctx *c, const yaml_node_t *n, const char *what, int (*lookup)(const char *),
                           const char *choices, int *out);
tps_status tps_lp_get_expr(pctx *c, const yaml_node_t *n, const char *what, tps_expr *out);
tps_status tps_lp_get_glob(pctx *c, const yaml_node_t *n, const char *what, char **out);
/* Walks a mapping whose keys must come from allowed (NULL-terminated); vals[i] receives the
 * value of allowed[i] (NULL when absent).  Unknown and duplicate keys are errors. */
/* The values of map's keys, each one of allowed (NULL-terminated), into vals (NULL where a
 * key is absent); an unknown key is an error naming the allowed ones. */
tps_status tps_lp_map_fields(pctx *c, const yaml_node_t *map, const char *what, const char *const *allowed,
                             yaml_node_t **vals);
/* Checks a free-key mapping (segment shorthand) for duplicate keys. */
tps_status tps_lp_no_duplicate_keys(pctx *c, const yaml_node_t *map, const char *what);
/* The block: section into c->l (lib/layout/layout_block.c). */
tps_status tps_lp_parse_block(pctx *c, const yaml_node_t *n);

#endif
