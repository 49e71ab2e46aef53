/* Hugging Face multi-file safetensors checkpoints (as huggingface_hub's
 * serialization helpers write them):
 *   model.safetensors.index.json = {"metadata": {"total_size": N, ...},
 *                                   "weight_map": {"tensor name": "model-00001-of-00002.safetensors", ...}}
 * Each distinct file is opened once, in file-name order (so model-00001-of-* is file 0 and
 * its __metadata__ is the checkpoint's), and the files' own headers must agree with the map
 * exactly: the map is what loaders trust, the headers are what the bytes are. */
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/base/json.h"

#define INDEX_NAME "model.safetensors.index.json"

/* A distinct shard file and the first tensor the map assigns to it (for messages). */
typedef struct shard_file {
    const char *name;
    const char *first_tensor;
} shard_file;

static int cmp_shard(const void *a, const void *b)
{
    return strcmp(((const shard_file *)a)->name, ((const shard_file *)b)->name);
}

/* A weight_map file name must stay inside the index's directory. */
static bool plain_file_name(const char *s, size_t len)
{
    return len > 0 && strlen(s) == len && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..") &&
           strcmp(s, ".") != 0;
}

/* Every tensor of the files must be in the map under its own file, and every mapped tensor
 * must be in some file. */
static tps_status check_map(tps_index *ix, const char *idx_path, const tps_json *map, const shard_file *files,
                            size_t nfiles, tps_error *err)
{
    tps_status st = TPS_OK;
    bool *mapped = calloc(ix->ntensors ? ix->ntensors : 1, sizeof *mapped);
    if (!mapped) return tps_fail_oom(err, "checking a safetensors index");
    for (size_t i = 0; i < map->u.object.n; i++) {
        const char *name = map->u.object.keys[i]->u.string.s, *file = map->u.object.values[i]->u.string.s;
        shard_file key = {file, NULL};
        const shard_file *want = bsearch(&key, files, nfiles, sizeof *files, cmp_shard);
        const tps_tensor *t = tps_index_find(ix, name);
        if (!t) {
            st = tps_fail(err, TPS_EINVALID, "%s: weight_map puts tensor '%s' in %s, which does not hold it",
                          idx_path, name, ix->files[want - files].path);
            goto cleanup;
        }
        if (t->file != (uint32_t)(want - files)) {
            st = tps_fail(err, TPS_EINVALID, "%s: weight_map puts tensor '%s' in %s but it is in %s", idx_path, name,
                          ix->files[want - files].path, ix->files[t->file].path);
            goto cleanup;
        }
        mapped[t - ix->tensors] = true;
    }
    for (size_t i = 0; i < ix->ntensors; i++)
        if (!mapped[i]) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is in %s but not in the weight_map", idx_path,
                          ix->tensors[i].name, ix->files[ix->tensors[i].file].path);
            goto cleanup;
        }
cleanup:
    free(mapped);
    return st;
}

tps_status tps_safetensors_index_open(const char *path, tps_index **out, tps_error *err)
{
    tps_status st = TPS_OK;
    tps_index *ix = NULL;
    tps_json_doc *doc = NULL;
    shard_file *files = NULL;
    char *idx_path = NULL, *dir = NULL, *text = NULL, *file_path = NULL;
    size_t len = 0, nfiles = 0;
    *out = NULL;

    struct stat sb;
    bool is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    size_t plen = strlen(path);
    idx_path = malloc(plen + sizeof INDEX_NAME + 1);
    dir = malloc(plen + 2);
    if (!idx_path || !dir) {
        st = tps_fail_oom(err, "opening a safetensors index");
        goto cleanup;
    }
    if (is_dir) {
        sprintf(idx_path, "%s/%s", path, INDEX_NAME);
        strcpy(dir, path);
    } else {
        strcpy(idx_path, path);
        const char *slash = strrchr(path, '/');
        if (slash) {
            memcpy(dir, path, (size_t)(slash - path) + 1);
            dir[slash - path + 1] = '\0';
        } else {
            strcpy(dir, ".");
        }
    }
    TPS_CHECK(tps_read_file(idx_path, TPS_ST_MAX_HEADER, "an index", &text, &len, err));
    TPS_CHECK(tps_json_parse(text, len, idx_path, &doc, err));
    const tps_json *root = tps_json_root(doc), *map = tps_json_get(root, "weight_map");
    const tps_json *meta = tps_json_get(root, "metadata");
    if (root->type != TPS_JSON_OBJECT || !map || map->type != TPS_JSON_OBJECT) {
        st = tps_fail(err, TPS_EINVALID, "%s: not a safetensors index: no \"weight_map\" object", idx_path);
        goto cleanup;
    }
    /* Producers put various keys here (total_size, sometimes file sizes or 0); only its
     * shape is checked, total_size is not trusted. */
    if (meta && meta->type != TPS_JSON_OBJECT) {
        st = tps_fail(err, TPS_EINVALID, "%s: \"metadata\" is not an object", idx_path);
        goto cleanup;
    }
    size_t n = map->u.object.n;
    files = calloc(n ? n : 1, sizeof *files);
    if (!files) {
        st = tps_fail_oom(err, "opening a safetensors index");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        const tps_json *k = map->u.object.keys[i], *v = map->u.object.values[i];
        if (strlen(k->u.string.s) != k->u.string.len) {
            st = tps_fail(err, TPS_EINVALID, "%s: a weight_map tensor name at byte %zu contains a NUL character",
                          idx_path, k->offset);
            goto cleanup;
        }
        if (v->type != TPS_JSON_STRING || !plain_file_name(v->u.string.s, v->u.string.len)) {
            st = tps_fail(err, TPS_EINVALID,
                          "%s: weight_map entry of tensor '%s' at byte %zu must be a plain file name in the index's "
                          "directory (no '/', '\\' or '..')",
                          idx_path, k->u.string.s, v->offset);
            goto cleanup;
        }
        files[i].name = v->u.string.s;
    }
    /* Distinct file names in name order, each with the first tensor the map gives it (a
     * backward scan, so the earliest entry is written last). */
    qsort(files, n, sizeof *files, cmp_shard);
    for (size_t i = 0; i < n; i++)
        if (nfiles == 0 || strcmp(files[nfiles - 1].name, files[i].name) != 0) files[nfiles++] = files[i];
    for (size_t i = n; i-- > 0;) {
        shard_file key = {map->u.object.values[i]->u.string.s, NULL};
        shard_file *f = bsearch(&key, files, nfiles, sizeof *files, cmp_shard);
        f->first_tensor = map->u.object.keys[i]->u.string.s;
    }

    TPS_CHECK(tps_index_new(path, "safetensors-index", &ix, err));
    size_t dlen = strlen(dir);
    for (size_t i = 0; i < nfiles; i++) {
        free(file_path);
        file_path = malloc(dlen + strlen(files[i].name) + 2);
        if (!file_path) {
            st = tps_fail_oom(err, "opening a safetensors index");
            goto cleanup;
        }
        sprintf(file_path, "%s%s%s", dir, dir[dlen - 1] == '/' ? "" : "/", files[i].name);
        if (stat(file_path, &sb) != 0) {
            int e = errno;
            st = tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO,
                          "%s: weight_map puts tensor '%s' in %s, which cannot be opened: %s", idx_path,
                          files[i].first_tensor, file_path, strerror(e));
            goto cleanup;
        }
        TPS_CHECK(tps_safetensors_add_file(ix, file_path, err));
    }
    TPS_CHECK(check_map(ix, idx_path, map, files, nfiles, err));
    *out = ix;
    ix = NULL;
cleanup:
    tps_index_free(ix);
    tps_json_doc_free(doc);
    free(files);
    free(file_path);
    free(text);
    free(dir);
    free(idx_path);
    return st;
}
