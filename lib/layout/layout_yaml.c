/* The layout parser's typed YAML getters (lib/layout/layout_parse.h). */
#include "layout_parse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../base/buf.h"
#include "../base/checked.h"
#include "layout_int.h"
#include "presets.h"

tps_mark tps_lp_mark_of(const yaml_node_t *n)
{
    tps_mark m = {n->start_mark.line + 1, n->start_mark.column + 1};
    return m;
}

tps_status tps_lp_fail_at(pctx *c, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tps_mark m = tps_lp_mark_of(n);
    return tps_fail(c->err, TPS_EINVALID, "%s:%zu:%zu: %s", c->file, m.line, m.col, msg);
}

yaml_node_t *tps_lp_node(pctx *c, int id) { return yaml_document_get_node(c->doc, id); }

const char *tps_lp_node_type_name(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "nothing";
    }
}

tps_status tps_lp_want_type(pctx *c, const yaml_node_t *n, yaml_node_type_t t, const char *what)
{
    if (n->type == t) return TPS_OK;
    const char *want = t == YAML_SCALAR_NODE ? "a scalar" : t == YAML_SEQUENCE_NODE ? "a list" : "a mapping";
    return tps_lp_fail_at(c, n, "%s must be %s, not %s", what, want, tps_lp_node_type_name(n));
}

/* The scalar's text; refuses embedded NUL bytes (they would truncate names silently). */
tps_status tps_lp_scalar(pctx *c, const yaml_node_t *n, const char *what, const char **out)
{
    tps_status st = tps_lp_want_type(c, n, YAML_SCALAR_NODE, what);
    if (st != TPS_OK) return st;
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) return tps_lp_fail_at(c, n, "%s contains a NUL byte", what);
    *out = s;
    return TPS_OK;
}

/* Numbers and booleans must be plain scalars: "8" in quotes is a string, and a layout that
 * says so is more likely wrong than meant. */
static tps_status tps_lp_plain(pctx *c, const yaml_node_t *n, const char *what, const char *type, const char **out)
{
    tps_status st = tps_lp_scalar(c, n, what, out);
    if (st != TPS_OK) return st;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return tps_lp_fail_at(c, n, "%s must be %s, not a quoted string", what, type);
    return TPS_OK;
}

tps_status tps_lp_get_u64(pctx *c, const yaml_node_t *n, const char *what, uint64_t *out)
{
    const char *s;
    tps_status st = tps_lp_plain(c, n, what, "a positive integer", &s);
    if (st != TPS_OK) return st;
    uint64_t v = 0;
    bool ok = s[0] != '\0';
    for (const char *p = s; ok && *p; p++)
        ok = *p >= '0' && *p <= '9' && tps_mul_u64(v, 10, &v) && tps_add_u64(v, (uint64_t)(*p - '0'), &v);
    if (!ok || v == 0) return tps_lp_fail_at(c, n, "%s must be a positive integer, not '%s'", what, s);
    *out = v;
    return TPS_OK;
}

tps_status tps_lp_get_dim(pctx *c, const yaml_node_t *n, const char *what, int *out)
{
    const char *s;
    tps_status st = tps_lp_plain(c, n, what, "an integer", &s);
    if (st != TPS_OK) return st;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < -TPS_MAX_DIMS || v >= TPS_MAX_DIMS)
        return tps_lp_fail_at(c, n, "%s must be an integer from %d to %d, not '%s'", what, -TPS_MAX_DIMS, TPS_MAX_DIMS - 1, s);
    *out = (int)v;
    return TPS_OK;
}

tps_status tps_lp_get_bool(pctx *c, const yaml_node_t *n, const char *what, bool *out)
{
    const char *s;
    tps_status st = tps_lp_plain(c, n, what, "true or false", &s);
    if (st != TPS_OK) return st;
    if (strcmp(s, "true") == 0) *out = true;
    else if (strcmp(s, "false") == 0) *out = false;
    else return tps_lp_fail_at(c, n, "%s must be true or false, not '%s'", what, s);
    return TPS_OK;
}

tps_status tps_lp_get_double(pctx *c, const yaml_node_t *n, const char *what, double lo, double hi, double *out)
{
    const char *s;
    tps_status st = tps_lp_plain(c, n, what, "a number", &s);
    if (st != TPS_OK) return st;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > lo && v <= hi))
        return tps_lp_fail_at(c, n, "%s must be a number in (%g, %g], not '%s'", what, lo, hi, s);
    *out = v;
    return TPS_OK;
}

tps_status tps_lp_get_strdup(pctx *c, const yaml_node_t *n, const char *what, char **out)
{
    const char *s;
    tps_status st = tps_lp_scalar(c, n, what, &s);
    if (st != TPS_OK) return st;
    free(*out);
    *out = strdup(s);
    return *out ? TPS_OK : tps_fail_oom(c->err, "reading a layout");
}

tps_status tps_lp_get_enum(pctx *c, const yaml_node_t *n, const char *what, int (*lookup)(const char *),
                           const char *choices, int *out)
{
    const char *s;
    tps_status st = tps_lp_scalar(c, n, what, &s);
    if (st != TPS_OK) return st;
    int v = lookup(s);
    if (v < 0) return tps_lp_fail_at(c, n, "%s '%s' is not one of %s", what, s, choices);
    *out = v;
    return TPS_OK;
}

tps_status tps_lp_get_expr(pctx *c, const yaml_node_t *n, const char *what, tps_expr *out)
{
    const char *s;
    tps_status st = tps_lp_scalar(c, n, what, &s);
    if (st != TPS_OK) return st;
    tps_mark at = tps_lp_mark_of(n);
    if (n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
        n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
        at.col++;
    size_t pos;
    const char *msg;
    tps_expr_release(out);
    if (!tps_expr_compile(s, out, &pos, &msg)) {
        /* Name the offending word: "unknown size 'hed'" reads better than a column alone. */
        size_t wlen = strspn(s + pos, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        return tps_fail(c->err, TPS_EINVALID, "%s:%zu:%zu: %s '%s': %s%s%.*s%s", c->file, at.line, at.col + pos, what,
                        s, msg, wlen ? " at '" : "", (int)wlen, s + pos, wlen ? "'" : "");
    }
    out->at = at;
    return TPS_OK;
}

tps_status tps_lp_get_glob(pctx *c, const yaml_node_t *n, const char *what, char **out)
{
    const char *s;
    tps_status st = tps_lp_scalar(c, n, what, &s);
    if (st != TPS_OK) return st;
    size_t pos;
    const char *msg;
    if (!tps_glob_valid(s, &pos, &msg)) {
        tps_mark at = tps_lp_mark_of(n);
        if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) at.col++;
        return tps_fail(c->err, TPS_EINVALID, "%s:%zu:%zu: %s '%s': %s", c->file, at.line, at.col + pos, what, s, msg);
    }
    *out = strdup(s);
    return *out ? TPS_OK : tps_fail_oom(c->err, "reading a layout");
}

/* Walks a mapping whose keys must come from allowed (NULL-terminated); vals[i] receives the
 * value of allowed[i] (NULL when absent).  Unknown and duplicate keys are errors. */
tps_status tps_lp_map_fields(pctx *c, const yaml_node_t *map, const char *what, const char *const *allowed,
                             yaml_node_t **vals)
{
    tps_status st = tps_lp_want_type(c, map, YAML_MAPPING_NODE, what);
    if (st != TPS_OK) return st;
    size_t nallowed = 0;
    while (allowed[nallowed]) vals[nallowed++] = NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = tps_lp_node(c, p->key);
        const char *key;
        if ((st = tps_lp_scalar(c, k, "a key", &key)) != TPS_OK) return st;
        size_t i = 0;
        while (i < nallowed && strcmp(allowed[i], key) != 0) i++;
        if (i == nallowed) {
            tps_buf b = TPS_BUF_INIT;
            for (size_t j = 0; j < nallowed; j++) tps_buf_printf(&b, "%s%s", j ? ", " : "", allowed[j]);
            const char *list = tps_buf_cstr(&b);
            st = tps_lp_fail_at(c, k, "unknown key '%s' in %s (expected one of: %s)", key, what, list ? list : "?");
            tps_buf_release(&b);
            return st;
        }
        if (vals[i]) return tps_lp_fail_at(c, k, "duplicate key '%s' in %s", key, what);
        vals[i] = tps_lp_node(c, p->value);
    }
    return TPS_OK;
}

/* Checks a free-key mapping (segment shorthand) for duplicate keys. */
tps_status tps_lp_no_duplicate_keys(pctx *c, const yaml_node_t *map, const char *what)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = tps_lp_node(c, p->key);
        const char *key;
        tps_status st = tps_lp_scalar(c, k, "a key", &key);
        if (st != TPS_OK) return st;
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            const yaml_node_t *kq = tps_lp_node(c, q->key);
            if (strcmp((const char *)kq->data.scalar.value, key) == 0)
                return tps_lp_fail_at(c, k, "duplicate key '%s' in %s", key, what);
        }
    }
    return TPS_OK;
}
