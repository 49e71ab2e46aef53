/* --force onto a shard set whose files lie in subdirectories (a Megatron-LM checkpoint
 * tpshard wrote: lib/registry/megatron_out.h, megatron_dist_out.h): replaceable when
 * everything there is what its manifest lists, the tracker, or beside a listed .distcp file
 * the other files of a torch_dist iteration directory (.metadata, metadata.json, common.pt). */
#include "outdir_nested.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/json.h"
#include "../set/manifest.h"

/* Whether the listed file names (sorted) hold name, or with dir a name under name/. */
static bool listed_name(const char *const *names, size_t n, const char *name, bool dir)
{
    size_t lo = 0, hi = n, len = strlen(name);
    while (lo < hi) { /* the first name >= name */
        size_t mid = (lo + hi) / 2;
        if (strcmp(names[mid], name) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (!dir) return lo < n && !strcmp(names[lo], name);
    for (; lo < n && !strncmp(names[lo], name, len); lo++)
        if (names[lo][len] == '/') return true;
    return false;
}

/* Whether rel/base is one of the files a torch_dist writer puts beside a listed rel/X.distcp. */
static bool dist_companion(const char *const *names, size_t n, const char *rel, const char *base)
{
    static const char *const companions[] = {".metadata", "metadata.json", "common.pt"};
    size_t rl = strlen(rel);
    bool known = false;
    for (size_t k = 0; k < sizeof companions / sizeof companions[0]; k++) known |= !strcmp(base, companions[k]);
    for (size_t i = 0; known && *rel && i < n; i++) {
        size_t len = strlen(names[i]);
        if (!strncmp(names[i], rel, rl) && names[i][rl] == '/' && !strchr(names[i] + rl + 1, '/') && len > 7 &&
            !strcmp(names[i] + len - 7, ".distcp"))
            return true;
    }
    return false;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The first entry under dir/rel (rel "" for dir itself) that tpshard.json's names do not
 * account for: a directory is ours when it leads to listed files only. */
static tps_status foreign_under(const char *dir, const char *rel, const char *const *names, size_t n, int depth,
                                char *foreign, size_t size, tps_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", dir, *rel ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d) return tps_fail_errno(err, errno, "%s: cannot list", path);
    struct dirent *e;
    tps_status st = TPS_OK;
    while (st == TPS_OK && !*foreign && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[4096], p[8192];
        struct stat sb;
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(p, sizeof p, "%s/%s", dir, sub);
        bool ok = lstat(p, &sb) == 0;
        if (ok && S_ISREG(sb.st_mode))
            ok = listed_name(names, n, sub, false) || dist_companion(names, n, rel, e->d_name) ||
                 (!*rel && (!strcmp(sub, TPS_MANIFEST_NAME) || !strcmp(sub, TPS_MEGATRON_TRACKER)));
        else if (ok && S_ISDIR(sb.st_mode) && depth < 2 && listed_name(names, n, sub, true))
            st = foreign_under(dir, sub, names, n, depth + 1, foreign, size, err);
        else ok = false;
        if (!ok) snprintf(foreign, size, "%s", sub);
    }
    closedir(d);
    return st;
}

tps_status tps_outdir_nested_replaceable(const char *dir, tps_error *err)
{
    char path[4096], foreign[4096] = "";
    snprintf(path, sizeof path, "%s/" TPS_MANIFEST_NAME, dir);
    char *text = NULL;
    size_t len, n = 0;
    tps_json_doc *doc = NULL;
    const char **names = NULL;
    tps_status st = tps_read_file(path, 1ull << 30, "a manifest", &text, &len, err);
    if (!st) st = tps_json_parse(text, len, path, &doc, err);
    const tps_json *fs = st ? NULL : tps_json_get(tps_json_root(doc), "files");
    if (!st && (!fs || fs->type != TPS_JSON_ARRAY))
        st = tps_fail(err, TPS_EINVALID, "%s: no files list", path);
    if (!st && !(names = calloc(fs->u.array.n + 1, sizeof *names))) st = tps_fail_oom(err, "reading a manifest");
    for (size_t i = 0; !st && i < fs->u.array.n; i++) {
        const tps_json *nm = tps_json_get(fs->u.array.items[i], "name");
        /* iter_.../mp_rank_XX[_YYY]/model_optim_rng.pt, nothing that climbs out */
        if (!nm || nm->type != TPS_JSON_STRING || nm->u.string.s[0] == '/' || strstr(nm->u.string.s, ".."))
            st = tps_fail(err, TPS_EINVALID, "%s: file %zu has no plain relative name", path, i);
        else names[n++] = nm->u.string.s;
    }
    if (!st) {
        qsort(names, n, sizeof *names, cmp_name);
        st = foreign_under(dir, "", names, n, 0, foreign, sizeof foreign, err);
    }
    if (!st && *foreign)
        st = tps_fail(err, TPS_EINVALID,
                      "%s: not replaced: '%s' is not part of the Megatron checkpoint tpshard wrote there; --force "
                      "replaces only an empty directory or an earlier output",
                      dir, foreign);
    free(names);
    tps_json_doc_free(doc);
    free(text);
    return st;
}
