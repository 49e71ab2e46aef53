/* Choosing a built-in preset: by the names users know (--preset mistral, --preset gpt-neox,
 * and loading it: tps_layout_load_preset) and from a Hugging Face config.json
 * (auto-detection).  It sits above layout.c: it parses and frees layouts, layout.c knows no
 * preset.  The table is data: each preset's
 * YAML lists the architectures it serves and its aliases, so adding a family touches one
 * file. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/buf.h"
#include "../base/json.h"
#include "layout_int.h"
#include "presets.h"

/* Names compare case-insensitively with '-' and '_' alike: Hugging Face spells model types
 * gpt_neox, its docs and users write GPT-NeoX. */
static bool same_name(const char *a, const char *b)
{
    for (;; a++, b++) {
        int x = *a == '-' ? '_' : tolower((unsigned char)*a), y = *b == '-' ? '_' : tolower((unsigned char)*b);
        if (x != y) return false;
        if (!x) return true;
    }
}

/* The preset parsed, or NULL when it does not parse (a build defect the unit tests catch). */
static tps_layout *parse_preset(const tps_preset *p)
{
    tps_layout *l = NULL;
    tps_error err;
    tps_error_clear(&err);
    char name[128];
    snprintf(name, sizeof name, "preset:%s", p->name);
    return tps_layout_parse(p->yaml, strlen(p->yaml), name, &l, &err) == TPS_OK ? l : NULL;
}

const tps_preset *tps_preset_resolve(const char *name)
{
    for (const tps_preset *p = tps_presets; p->name; p++)
        if (same_name(p->name, name)) return p;
    const tps_preset *found = NULL;
    for (const tps_preset *p = tps_presets; p->name && !found; p++) {
        tps_layout *l = parse_preset(p);
        for (size_t i = 0; l && i < l->naliases && !found; i++)
            if (same_name(l->aliases[i], name)) found = p;
        tps_layout_free(l);
    }
    return found;
}

tps_status tps_layout_load_preset(const char *preset, tps_layout **out, tps_error *err)
{
    *out = NULL;
    const tps_preset *p = tps_preset_resolve(preset);
    if (!p) {
        tps_buf names = TPS_BUF_INIT;
        for (const tps_preset *q = tps_presets; q->name; q++)
            tps_buf_printf(&names, "%s%s", q == tps_presets ? "" : ", ", q->name);
        const char *list = tps_buf_cstr(&names);
        tps_status st = tps_fail(err, TPS_EARG, "unknown preset '%s' (presets: %s)", preset, list ? list : "?");
        tps_buf_release(&names);
        return st;
    }
    char name[128];
    snprintf(name, sizeof name, "preset:%s", p->name);
    return tps_layout_parse(p->yaml, strlen(p->yaml), name, out, err);
}

/* The preset whose architectures: lists arch (exact: these are Python class names). */
static const tps_preset *preset_for_architecture(const char *arch)
{
    const tps_preset *found = NULL;
    for (const tps_preset *p = tps_presets; p->name && !found; p++) {
        tps_layout *l = parse_preset(p);
        for (size_t i = 0; l && i < l->narchitectures && !found; i++)
            if (strcmp(l->architectures[i], arch) == 0) found = p;
        tps_layout_free(l);
    }
    return found;
}

static void list_architectures(tps_buf *b)
{
    size_t n = 0;
    for (const tps_preset *p = tps_presets; p->name; p++) {
        tps_layout *l = parse_preset(p);
        for (size_t i = 0; l && i < l->narchitectures; i++)
            tps_buf_printf(b, "%s%s", n++ ? ", " : "", l->architectures[i]);
        tps_layout_free(l);
    }
}

static tps_status detect(const char *path, const tps_json *root, const tps_preset **out, char *found, size_t size,
                         tps_error *err)
{
    if (!root || root->type != TPS_JSON_OBJECT)
        return tps_fail(err, TPS_EINVALID, "%s: a config.json must be a JSON object", path);
    const tps_json *archs = tps_json_get(root, "architectures"), *mt = tps_json_get(root, "model_type");
    if (archs && archs->type == TPS_JSON_NULL) archs = NULL;
    if (mt && mt->type == TPS_JSON_NULL) mt = NULL;
    if (archs && archs->type != TPS_JSON_ARRAY)
        return tps_fail(err, TPS_EINVALID, "%s: \"architectures\" must be a list of strings", path);
    if (mt && mt->type != TPS_JSON_STRING)
        return tps_fail(err, TPS_EINVALID, "%s: \"model_type\" must be a string", path);
    tps_buf named = TPS_BUF_INIT;
    for (size_t i = 0; archs && i < archs->u.array.n; i++) {
        const tps_json *a = archs->u.array.items[i];
        if (a->type != TPS_JSON_STRING || strlen(a->u.string.s) != a->u.string.len) {
            tps_buf_release(&named);
            return tps_fail(err, TPS_EINVALID, "%s: \"architectures\" must be a list of strings", path);
        }
        if ((*out = preset_for_architecture(a->u.string.s))) {
            snprintf(found, size, "architectures %s", a->u.string.s);
            tps_buf_release(&named);
            return TPS_OK;
        }
        tps_buf_printf(&named, "%s%s", i ? ", " : "architectures ", a->u.string.s);
    }
    /* A class no preset lists (LlamaForSequenceClassification, a fork's name) may still be
     * a family a preset serves: its model_type says so. */
    const char *type = mt && strlen(mt->u.string.s) == mt->u.string.len ? mt->u.string.s : NULL;
    if (type && (*out = tps_preset_resolve(type))) {
        snprintf(found, size, "model_type %s", type);
        tps_buf_release(&named);
        return TPS_OK;
    }
    tps_status st;
    if (!named.len && !type) {
        st = tps_fail(err, TPS_EARG, "%s names no \"architectures\" and no \"model_type\"", path);
    } else {
        tps_buf known = TPS_BUF_INIT;
        list_architectures(&known);
        if (type) tps_buf_printf(&named, named.len ? " (model_type %s)" : "model_type %s", type);
        const char *what = tps_buf_cstr(&named), *list = tps_buf_cstr(&known);
        snprintf(found, size, "%s", what ? what : "?");
        st = tps_fail(err, TPS_EINVALID, "%s: no built-in layout serves %s (supported architectures: %s)", path,
                      what ? what : "?", list ? list : "?");
        tps_buf_release(&known);
    }
    tps_buf_release(&named);
    return st;
}

tps_status tps_preset_detect(const char *config_path, const tps_preset **out, char *found, size_t size,
                             tps_error *err)
{
    *out = NULL;
    if (size) found[0] = '\0';
    char *text = NULL;
    size_t len = 0;
    tps_json_doc *doc = NULL;
    tps_status st = tps_read_config_file(config_path, &text, &len, err);
    if (st == TPS_OK) st = tps_json_parse(text, len, config_path, &doc, err);
    if (st == TPS_OK) st = detect(config_path, tps_json_root(doc), out, found, size, err);
    tps_json_doc_free(doc);
    free(text);
    return st;
}

const char *const *tps_layout_architectures(const tps_layout *l, size_t *n)
{
    *n = l->narchitectures;
    return (const char *const *)l->architectures;
}

const char *const *tps_layout_aliases(const tps_layout *l, size_t *n)
{
    *n = l->naliases;
    return (const char *const *)l->aliases;
}
