/* pytorch_model.bin.index.json: several torch.save archives as one checkpoint (torch.h).
 * Kept apart from torch.c so that programs reading single archives do not link the JSON
 * parser. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/json.h"
#include "torch.h"
#include "../view.h"

#define MAX_INDEX_BYTES (64u << 20)

tps_status tps_torch_index_open(const char *path, tps_index **out, tps_error *err)
{
    *out = NULL;
    tps_index *ix = NULL;
    tps_json_doc *doc = NULL;
    char *text = NULL, *dir = NULL, *file = NULL;
    const char **seen = NULL;
    bool *mapped = NULL;
    tps_name_hash files = {NULL, 0, sizeof *seen, 0}; /* the distinct names in seen */
    size_t len = 0, nseen = 0;
    tps_status st = tps_index_new(path, "torch-index", &ix, err);
    if (st) return st;
    TPS_CHECK(tps_view_state_init(ix, err));
    TPS_CHECK(tps_read_file(path, MAX_INDEX_BYTES, "an index", &text, &len, err));
    TPS_CHECK(tps_json_parse(text, len, path, &doc, err));
    const tps_json *root = tps_json_root(doc), *map = tps_json_get(root, "weight_map"), *meta = tps_json_get(root, "metadata");
    if (!map || map->type != TPS_JSON_OBJECT) {
        st = tps_fail(err, TPS_EINVALID, "%s: no \"weight_map\" object", path);
        goto cleanup;
    }
    if (meta && meta->type == TPS_JSON_OBJECT)
        for (size_t i = 0; i < meta->u.object.n; i++)
            if (meta->u.object.values[i]->type == TPS_JSON_STRING && !memchr(meta->u.object.keys[i]->u.string.s, 0, meta->u.object.keys[i]->u.string.len))
                TPS_CHECK(tps_index_add_meta(ix, meta->u.object.keys[i]->u.string.s, meta->u.object.values[i]->u.string.s, err));
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    if (!(dir = strndup(path, dlen)) || !(seen = calloc(map->u.object.n + 1, sizeof *seen))) {
        st = tps_fail_oom(err, "reading an index file");
        goto cleanup;
    }
    for (size_t i = 0; i < map->u.object.n; i++) {
        const tps_json *k = map->u.object.keys[i], *v = map->u.object.values[i];
        if (memchr(k->u.string.s, '\0', k->u.string.len)) { /* looked up as a C string below */
            st = tps_fail(err, TPS_EINVALID, "%s: a weight_map tensor name at byte %zu contains a NUL character", path,
                          k->offset);
            goto cleanup;
        }
        if (v->type != TPS_JSON_STRING || v->u.string.len == 0 || memchr(v->u.string.s, '/', v->u.string.len) ||
            memchr(v->u.string.s, '\0', v->u.string.len) || strcmp(v->u.string.s, "..") == 0 || strcmp(v->u.string.s, ".") == 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: weight_map entry '%s' does not name a plain file in the index's directory", path,
                          map->u.object.keys[i]->u.string.s);
            goto cleanup;
        }
        seen[nseen] = v->u.string.s;
        size_t known;
        if (!tps_name_hash_add(&files, seen, nseen, &known)) {
            st = tps_fail_oom(err, "reading an index file");
            goto cleanup;
        }
        if (known != SIZE_MAX) continue;
        nseen++;
        free(file);
        if (!(file = malloc(dlen + v->u.string.len + 1))) {
            st = tps_fail_oom(err, "reading an index file");
            goto cleanup;
        }
        snprintf(file, dlen + v->u.string.len + 1, "%s%s", dir, v->u.string.s);
        TPS_CHECK(tps_torch_add_file(ix, file, err));
    }
    /* Every tensor found must be mapped to the file it came from; equal counts then make the
     * map and the files agree exactly (names are unique on both sides).  Walked from the
     * map's side, each entry a hash look-up: a per-tensor search of the map is quadratic. */
    if (!(mapped = calloc(ix->ntensors + 1, sizeof *mapped))) {
        st = tps_fail_oom(err, "reading an index file");
        goto cleanup;
    }
    for (size_t i = 0; i < map->u.object.n; i++) {
        const tps_tensor *t = tps_index_find(ix, map->u.object.keys[i]->u.string.s);
        if (!t) continue; /* counted below */
        const char *fp = ix->files[t->file].path;
        if (strcmp(fp + dlen, map->u.object.values[i]->u.string.s) != 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is in %s but the weight_map names another file", path,
                          t->name, fp);
            goto cleanup;
        }
        mapped[t - ix->tensors] = true;
    }
    for (size_t t = 0; t < ix->ntensors; t++)
        if (!mapped[t]) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is in %s but the weight_map does not list it", path,
                          ix->tensors[t].name, ix->files[ix->tensors[t].file].path);
            goto cleanup;
        }
    if (ix->ntensors != map->u.object.n) {
        st = tps_fail(err, TPS_EINVALID, "%s: the weight_map lists %zu tensors but its files hold %zu", path, map->u.object.n,
                      ix->ntensors);
        goto cleanup;
    }
    *out = ix;
    ix = NULL;
cleanup:
    tps_name_hash_free(&files);
    free(mapped);
    free(seen);
    free(file);
    free(dir);
    free(text);
    tps_json_doc_free(doc);
    tps_index_free(ix);
    return st;
}
