#include "checkpoint.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/base/json.h"
#include "../dcp/dcp.h"
#include "../numpy/npy.h"
#include "../safetensors/safetensors.h"
#include "../torch/torch.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static tps_status open_file(const char *path, tps_index **out, tps_error *err)
{
    if (ends_with(path, ".safetensors.index.json")) return tps_safetensors_index_open(path, out, err);
    if (ends_with(path, ".bin.index.json")) return tps_torch_index_open(path, out, err);
    unsigned char magic[8] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: cannot open: %s", path, strerror(e));
    }
    ssize_t n = read(fd, magic, sizeof magic);
    struct stat sb;
    uint64_t size = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    close(fd);
    if (n >= 4 && memcmp(magic, "PK\3\4", 4) == 0) return tps_zip_checkpoint_open(path, out, err);
    if (n >= 6 && memcmp(magic, "\x93NUMPY", 6) == 0) return tps_npy_open(path, out, err);
    if (n > 0 && tps_torch_is_pickle_magic(magic, (size_t)n, size)) return tps_torch_open(path, out, err); /* refused, with advice */
    return tps_safetensors_open(path, out, err);
}

/* ---- is a file one part of a multi-file checkpoint? ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* How many distinct files index_path's weight_map names, when one of them is base; 0 when
 * it does not name base, or the index cannot be read (then it says nothing about base). */
static size_t index_lists(const char *index_path, const char *base)
{
    size_t nfiles = 0;
    tps_json_doc *doc = NULL;
    char *text = NULL;
    const char **names = NULL;
    size_t len;
    tps_error err;
    if (tps_read_file(index_path, TPS_ST_MAX_HEADER, "an index", &text, &len, &err) ||
        tps_json_parse(text, len, index_path, &doc, &err))
        goto done;
    const tps_json *map = tps_json_get(tps_json_root(doc), "weight_map");
    if (!map || map->type != TPS_JSON_OBJECT || !(names = calloc(map->u.object.n + 1, sizeof *names))) goto done;
    size_t n = 0;
    bool found = false;
    for (size_t i = 0; i < map->u.object.n; i++) {
        const tps_json *v = map->u.object.values[i];
        if (v->type != TPS_JSON_STRING) continue;
        names[n++] = v->u.string.s;
        found = found || strcmp(v->u.string.s, base) == 0;
    }
    if (!found) goto done;
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) nfiles += i == 0 || strcmp(names[i - 1], names[i]) != 0;
done:
    free(names);
    tps_json_doc_free(doc);
    free(text);
    return nfiles;
}

/* Whether base has the Hugging Face part pattern "-NNNNN-of-MMMMM." with M > 1: two
 * zero-padded numbers of the same width (3 digits or more; tpshard's own "rank-1-of-2" is
 * not one), 1 <= N <= M.  N and M are copied out as written. */
static bool part_pattern(const char *base, char *n_out, char *m_out, size_t size)
{
    for (const char *of = strstr(base, "-of-"); of; of = strstr(of + 1, "-of-")) {
        const char *a = of, *b = of + 4, *e = b;
        while (a > base && isdigit((unsigned char)a[-1])) a--;
        while (isdigit((unsigned char)*e)) e++;
        size_t wn = (size_t)(of - a), wm = (size_t)(e - b);
        if (wn < 3 || wn != wm || wn >= size || a == base || a[-1] != '-' || *e != '.') continue;
        unsigned long long n = strtoull(a, NULL, 10), m = strtoull(b, NULL, 10);
        if (m < 2 || n < 1 || n > m) continue;
        memcpy(n_out, a, wn);
        n_out[wn] = '\0';
        memcpy(m_out, b, wm);
        m_out[wm] = '\0';
        return true;
    }
    return false;
}

enum { WHOLE, INDEXED, BY_NAME };

/* Fills part_of with a sentence when path is one part of a multi-file checkpoint: an index
 * beside it (any *.index.json: model.safetensors.index.json, pytorch_model.bin.index.json,
 * a tpshard rank index) lists it with other files (INDEXED), or its name has the part
 * pattern (BY_NAME). */
static int find_set(const char *path, char *part_of, size_t size)
{
    part_of[0] = '\0';
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char dir[4096], idx[4352], *first = NULL;
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path) >= (int)sizeof dir)
        return WHOLE;
    const char *sep = strcmp(dir, "/") == 0 ? "" : "/";
    size_t nfiles = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name), k = strlen(".index.json");
        if (n <= k || strcmp(e->d_name + n - k, ".index.json") != 0) continue;
        /* The first in name order, so the message does not depend on the directory's order. */
        if (first && strcmp(e->d_name, first) >= 0) continue;
        snprintf(idx, sizeof idx, "%s%s%s", dir, sep, e->d_name);
        size_t got = index_lists(idx, base);
        if (got > 1) {
            free(first);
            first = strdup(e->d_name);
            nfiles = got;
        }
    }
    if (d) closedir(d);
    char n[32], m[32];
    int kind = WHOLE;
    if (first) {
        snprintf(part_of, size, "%s is one of the %zu files of the checkpoint indexed by %s%s%s", path, nfiles, dir, sep,
                 first);
        kind = INDEXED;
    } else if (part_pattern(base, n, m, sizeof n)) {
        snprintf(part_of, size, "%s is, by its name (*-%s-of-%s.*), part %llu of a %llu-file checkpoint", path, n, m,
                 strtoull(n, NULL, 10), strtoull(m, NULL, 10));
        kind = BY_NAME;
    }
    free(first);
    return kind;
}

tps_status tps_checkpoint_open_part(const char *path, tps_index **out, char *part_of, size_t size, tps_error *err)
{
    *out = NULL;
    if (size) part_of[0] = '\0';
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode) || ends_with(path, ".index.json")) return tps_checkpoint_open(path, out, err);
    if (size) find_set(path, part_of, size);
    return open_file(path, out, err);
}

tps_status tps_checkpoint_open(const char *path, tps_index **out, tps_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISDIR(sb.st_mode)) {
        char part_of[TPS_ERROR_MSG_MAX];
        int kind = ends_with(path, ".index.json") ? WHOLE : find_set(path, part_of, sizeof part_of);
        if (kind != WHOLE)
            return tps_fail(err, TPS_EINVALID,
                            "%s; alone it lacks the other files' tensors: pass the checkpoint's directory or its "
                            "index file instead%s",
                            part_of, kind == BY_NAME ? " (or rename the file if it really is the whole model)" : "");
        return open_file(path, out, err);
    }
    static const char *const candidates[] = {"model.safetensors.index.json", "model.safetensors",
                                             "pytorch_model.bin.index.json", "pytorch_model.bin"};
    char p[4096];
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        if (snprintf(p, sizeof p, "%s/%s", path, candidates[i]) >= (int)sizeof p)
            return tps_fail(err, TPS_EINVALID, "%s: path too long", path);
        if (is_file(p)) return open_file(p, out, err);
    }
    if (tps_dcp_is_dir(path)) return tps_dcp_open(path, out, err);
    return tps_fail(err, TPS_EINVALID,
                    "%s: a directory without model.safetensors(.index.json), pytorch_model.bin(.index.json) or a "
                    "distributed checkpoint's .metadata", path);
}
