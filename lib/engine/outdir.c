#include "outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../set/manifest.h"
#include "../targets/target.h"
#include "file_names.h"

/* Atomic rather than volatile sig_atomic_t: the handler may run on any thread (the reader
 * thread, check's walkers) and the main thread reads it, which only an atomic makes defined
 * (ThreadSanitizer reported the volatile as a data race).  A lock-free atomic is safe in a
 * signal handler. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal flag must be a lock-free atomic");
static atomic_int caught_signal;

static void on_signal(int sig) { atomic_store_explicit(&caught_signal, sig, memory_order_relaxed); }

void tps_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int tps_outdir_interrupted(void) { return atomic_load_explicit(&caught_signal, memory_order_relaxed); }

void tps_remove_tree(const char *path)
{
    /* O_NOFOLLOW: a symlink planted at a temporary name must be removed itself, never
     * followed into the directory it points at. */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOTDIR || errno == ELOOP) unlink(path);
        return;
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *p = malloc(strlen(path) + strlen(e->d_name) + 2);
        if (!p) continue;
        sprintf(p, "%s/%s", path, e->d_name);
        tps_remove_tree(p);
        free(p);
    }
    closedir(d);
    rmdir(path);
}

static char *parent_of(const char *path)
{
    char *p = strdup(path);
    if (!p) return NULL;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    char *slash = strrchr(p, '/');
    if (!slash) {
        free(p);
        return strdup(".");
    }
    if (slash == p) slash[1] = '\0';
    else *slash = '\0';
    return p;
}

static const char *base_of(const char *path, char *buf, size_t size)
{
    snprintf(buf, size, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    return slash ? slash + 1 : buf;
}

/* Removes ".BASE.tpshard-tmp.PID" siblings whose process is gone (a SIGKILLed run). */
static void clean_leftovers(const char *parent, const char *base)
{
    DIR *d = opendir(parent);
    if (!d) return;
    char prefix[NAME_MAX + 32];
    snprintf(prefix, sizeof prefix, ".%s.tpshard-tmp.", base);
    size_t plen = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, plen) != 0) continue;
        char *end;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (*end || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno == EPERM) continue; /* still running */
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", parent, e->d_name) < (int)sizeof p) tps_remove_tree(p);
    }
    closedir(d);
}

static bool dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            empty = false;
            break;
        }
    closedir(d);
    return empty;
}

/* Whether a (resolved) path equals b or lies inside it. */
static bool path_within(const char *a, const char *b)
{
    size_t n = strlen(b);
    if (strncmp(a, b, n) != 0) return false;
    return a[n] == '\0' || a[n] == '/' || (n == 1 && b[0] == '/');
}

struct tps_outdir_src {
    char *path;
    struct stat sb;
};

static bool is_checkpoint_name(const char *name)
{
    static const char *const ext[] = {".safetensors", ".bin", ".pt", ".pth", ".npy", ".npz", ".json"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t k = strlen(ext[i]);
        if (n > k && strcmp(name + n - k, ext[i]) == 0) return true;
    }
    return false;
}

static tps_status add_src(tps_outdir *od, const char *path, const struct stat *sb, tps_error *err)
{
    tps_outdir_src *v = realloc(od->srcs, (od->nsrcs + 1) * sizeof *v);
    if (!v) return tps_fail_oom(err, "recording the inputs");
    od->srcs = v;
    v[od->nsrcs].path = strdup(path);
    if (!v[od->nsrcs].path) return tps_fail_oom(err, "recording the inputs");
    v[od->nsrcs++].sb = *sb;
    return TPS_OK;
}

/* The checkpoint files of a directory (one level: readers never descend). */
static tps_status add_src_dir(tps_outdir *od, const char *dir, tps_error *err)
{
    DIR *d = opendir(dir);
    if (!d) return TPS_OK; /* the reader already opened what it needs; nothing to compare */
    tps_status st = TPS_OK;
    struct dirent *e;
    while (st == TPS_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !is_checkpoint_name(e->d_name)) continue;
        char p[PATH_MAX];
        struct stat sb;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p && stat(p, &sb) == 0 &&
            S_ISREG(sb.st_mode))
            st = add_src(od, p, &sb, err);
    }
    closedir(d);
    return st;
}

static tps_status record_inputs(tps_outdir *od, const char *const *inputs, tps_error *err)
{
    tps_status st = TPS_OK;
    for (size_t i = 0; st == TPS_OK && inputs && inputs[i]; i++) {
        struct stat sb;
        if (stat(inputs[i], &sb) != 0) continue;
        size_t n = strlen(inputs[i]);
        if (S_ISDIR(sb.st_mode)) {
            st = add_src_dir(od, inputs[i], err);
        } else if (n > 11 && strcmp(inputs[i] + n - 11, ".index.json") == 0) {
            char *parent = parent_of(inputs[i]);
            st = parent ? add_src_dir(od, parent, err) : tps_fail_oom(err, "recording the inputs");
            free(parent);
        } else if (S_ISREG(sb.st_mode)) {
            st = add_src(od, inputs[i], &sb, err);
        }
    }
    return st;
}

static bool same_time(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static tps_status check_inputs(const tps_outdir *od, tps_error *err)
{
    for (size_t i = 0; i < od->nsrcs; i++) {
        const tps_outdir_src *s = &od->srcs[i];
        struct stat now;
        if (stat(s->path, &now) != 0)
            return tps_fail_errno(err, errno, "%s: the source disappeared while it was read; nothing was written",
                                  s->path);
        if (now.st_dev != s->sb.st_dev || now.st_ino != s->sb.st_ino)
            return tps_fail(err, TPS_EIO, "%s: the source was replaced by another file while it was read; nothing was "
                            "written", s->path);
        if (now.st_size != s->sb.st_size)
            return tps_fail(err, TPS_EIO, "%s: the source changed size from %lld to %lld bytes while it was read; "
                            "nothing was written", s->path, (long long)s->sb.st_size, (long long)now.st_size);
        if (!same_time(&now.st_mtim, &s->sb.st_mtim))
            return tps_fail(err, TPS_EIO, "%s: the source was modified while it was read; nothing was written",
                            s->path);
    }
    return TPS_OK;
}

/* Whether name is one merge writes: model.safetensors, model-NNNNN-of-NNNNN.safetensors or
 * the index. */
static bool is_checkpoint_part_name(const char *name)
{
    if (strcmp(name, "model.safetensors") == 0 || strcmp(name, TPS_CHECKPOINT_INDEX_NAME) == 0) return true;
    /* "model-" 5 digits "-of-" 5 digits ".safetensors", as lib/engine/cut.c names the parts. */
    static const char pattern[] = "model-#####-of-#####.safetensors";
    if (strlen(name) != sizeof pattern - 1) return false;
    for (size_t i = 0; pattern[i]; i++)
        if (pattern[i] == '#' ? name[i] < '0' || name[i] > '9' : name[i] != pattern[i]) return false;
    unsigned long part = strtoul(name + 6, NULL, 10), count = strtoul(name + 15, NULL, 10);
    return part >= 1 && part <= count;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Whether name belongs to the shard set whose file names are listed (sorted): its manifest,
 * a file it lists, or a rank index. */
static bool in_shardset(const tps_manifest *m, char *const *listed, const char *name)
{
    if (!m) return false;
    if (strcmp(name, TPS_MANIFEST_NAME) == 0) return true;
    if (bsearch(&name, listed, m->nfiles, sizeof *listed, cmp_str)) return true;
    uint64_t r, T;
    char probe[128];
    int used = 0;
    if (sscanf(name, "model-rank-%" SCNu64 "-of-%" SCNu64 ".safetensors.index.json%n", &r, &T, &used) == 2 &&
        used == (int)strlen(name) && T == m->tp && r < T) {
        snprintf(probe, sizeof probe, "model-rank-%" PRIu64 "-of-%" PRIu64 ".safetensors.index.json", r, T);
        return strcmp(probe, name) == 0;
    }
    return false;
}

/* --force replaces only what this kind of output would have written (outdir.h). */
static tps_status refuse_foreign(const char *dir, tps_outdir_kind kind, tps_error *err)
{
    tps_manifest *m = NULL;
    tps_status st = TPS_OK;
    if (kind == TPS_OUT_SHARDSET) {
        tps_error e;
        tps_error_clear(&e);
        /* A Megatron checkpoint's manifest names files inside its rank directories. */
        char tracker[PATH_MAX];
        struct stat tb;
        if (snprintf(tracker, sizeof tracker, "%s/" TPS_MEGATRON_TRACKER, dir) < (int)sizeof tracker &&
            stat(tracker, &tb) == 0 && tps_is_shard_set(dir))
            return tps_outdir_nested_replaceable(dir, err);
        /* Without a manifest nothing there is ours: the first entry is named below. */
        if (tps_is_shard_set(dir) && tps_target_manifest_load(dir, &m, &e))
            return tps_fail(err, TPS_EINVALID, "%s: not replaced: its manifest does not hold up (%s)", dir, e.msg);
    }
    char **listed = m ? calloc(m->nfiles + 1, sizeof *listed) : NULL;
    if (m && !listed) {
        tps_manifest_free(m);
        return tps_fail_oom(err, "listing the output directory");
    }
    for (size_t i = 0; m && i < m->nfiles; i++) listed[i] = m->files[i].name;
    if (m) qsort(listed, m->nfiles, sizeof *listed, cmp_str);
    DIR *d = opendir(dir);
    if (!d) {
        free(listed);
        tps_manifest_free(m);
        return tps_fail_errno(err, errno, "%s: cannot list", dir);
    }
    char **foreign = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while (st == TPS_OK && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[PATH_MAX];
        struct stat sb;
        bool plain = snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p && lstat(p, &sb) == 0 &&
                     S_ISREG(sb.st_mode);
        bool ours = plain && (kind == TPS_OUT_SHARDSET ? in_shardset(m, listed, e->d_name)
                                                       : is_checkpoint_part_name(e->d_name));
        if (ours) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **v = realloc(foreign, cap * sizeof *v);
            if (!v) {
                st = tps_fail_oom(err, "listing the output directory");
                break;
            }
            foreign = v;
        }
        if (!(foreign[n] = strdup(e->d_name))) st = tps_fail_oom(err, "listing the output directory");
        else n++;
    }
    closedir(d);
    if (st == TPS_OK && n) {
        qsort(foreign, n, sizeof *foreign, cmp_str);
        st = tps_fail(err, TPS_EINVALID,
                      "%s: not replaced: '%s'%s is not part of %s there%s; --force replaces only an empty directory "
                      "or an earlier %s",
                      dir, foreign[0], n > 1 ? " (and more)" : "",
                      kind == TPS_OUT_SHARDSET ? "the shard set" : "a merged checkpoint",
                      kind == TPS_OUT_SHARDSET && !m ? " (it has no " TPS_MANIFEST_NAME ")" : "",
                      kind == TPS_OUT_SHARDSET ? "shard set" : "merged checkpoint");
    }
    for (size_t i = 0; i < n; i++) free(foreign[i]);
    free(foreign);
    free(listed);
    tps_manifest_free(m);
    return st;
}

/* What may be where the output goes: nothing, an empty directory, or with force a
 * replaceable one (a file, for a file output). */
static tps_status check_target(const char *dir, tps_outdir_kind kind, bool force, tps_error *err)
{
    struct stat sb;
    if (lstat(dir, &sb) != 0) return TPS_OK;
    if (kind == TPS_OUT_FILE) {
        /* A symlink is replaced itself (rename never writes through it). */
        if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
            return tps_fail(err, TPS_EINVALID, "%s: exists and is not a regular file", dir);
        if (!force) return tps_fail(err, TPS_EINVALID, "%s: exists (use --force to replace it)", dir);
        return TPS_OK;
    }
    if (!S_ISDIR(sb.st_mode)) return tps_fail(err, TPS_EINVALID, "%s: exists and is not a directory", dir);
    if (dir_is_empty(dir)) return TPS_OK;
    if (!force)
        return tps_fail(err, TPS_EINVALID, "%s: output directory is not empty (use --force to replace it)", dir);
    return refuse_foreign(dir, kind, err);
}

tps_status tps_outdir_begin(const char *dir, tps_outdir_kind kind, bool force, const char *const *inputs,
                            tps_outdir **out, tps_error *err)
{
    *out = NULL;
    char *parent = parent_of(dir);
    if (!parent) return tps_fail_oom(err, "preparing the output directory");
    char rparent[PATH_MAX], rin[PATH_MAX], base_buf[PATH_MAX], rdir[PATH_MAX * 2];
    if (!realpath(parent, rparent)) {
        int e = errno;
        free(parent);
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: parent directory unusable: %s", dir,
                        strerror(e));
    }
    const char *base = base_of(dir, base_buf, sizeof base_buf);
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        free(parent);
        return tps_fail(err, TPS_EARG, "%s: name a new directory for the output", dir);
    }
    snprintf(rdir, sizeof rdir, "%s/%s", strcmp(rparent, "/") ? rparent : "", base);
    for (size_t i = 0; inputs && inputs[i]; i++) {
        if (!realpath(inputs[i], rin)) continue;
        if (path_within(rdir, rin) || path_within(rin, rdir)) {
            free(parent);
            return tps_fail(err, TPS_EARG, "%s: the output %s must not be, contain or lie inside the input %s", dir,
                            kind == TPS_OUT_FILE ? "file" : "directory", inputs[i]);
        }
    }
    tps_status cst = check_target(dir, kind, force, err);
    if (cst) {
        free(parent);
        return cst;
    }
    clean_leftovers(parent, base);
    tps_outdir *od = calloc(1, sizeof *od);
    tps_status rst = od ? record_inputs(od, inputs, err) : TPS_OK;
    if (rst) {
        free(parent);
        tps_outdir_free(od);
        return rst;
    }
    char *tmp = malloc(strlen(parent) + strlen(base) + 64);
    char *fin = strdup(dir);
    char *file = kind == TPS_OUT_FILE ? strdup(base) : NULL;
    if (!od || !tmp || !fin || (kind == TPS_OUT_FILE && !file)) {
        tps_outdir_free(od);
        free(tmp);
        free(fin);
        free(file);
        free(parent);
        return tps_fail_oom(err, "preparing the output directory");
    }
    sprintf(tmp, "%s/.%s.tpshard-tmp.%ld", parent, base, (long)getpid());
    free(parent);
    tps_remove_tree(tmp); /* our own PID: a stale leftover from a recycled PID */
    if (mkdir(tmp, 0755) != 0) {
        int e = errno;
        tps_status st = tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: cannot create: %s", tmp, strerror(e));
        tps_outdir_free(od);
        free(tmp);
        free(fin);
        free(file);
        return st;
    }
    od->final = fin;
    od->tmp = tmp;
    od->file = file;
    od->force = force;
    *out = od;
    return TPS_OK;
}

char *tps_outdir_path(const tps_outdir *od, const char *name)
{
    char *p = malloc(strlen(od->tmp) + strlen(name) + 2);
    if (p) sprintf(p, "%s/%s", od->tmp, name);
    return p;
}

static tps_status fsync_path(const char *path, tps_error *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return tps_fail_errno(err, errno, "%s: cannot open to sync", path);
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) return tps_fail_errno(err, e, "%s: fsync failed", path);
    return TPS_OK;
}

/* rename(2) for the step that moves a finished output into place.  The test suite sets
 * TPS_TEST_FAIL_PUBLISH to make it fail (EIO), since nothing else can make the rename
 * after a successful move-aside fail on demand. */
static int tps_outdir_rename(const char *from, const char *to)
{
    const char *fail = getenv("TPS_TEST_FAIL_PUBLISH");
    if (fail && *fail) {
        errno = EIO;
        return -1;
    }
    return rename(from, to);
}

/* A file output: the one file moves from the temporary directory onto FILE (replacing it
 * only with force; without, link() refuses an existing name atomically), then the
 * temporary directory goes. */
static tps_status commit_file(tps_outdir *od, tps_error *err)
{
    char *from = tps_outdir_path(od, od->file);
    if (!from) return tps_fail_oom(err, "publishing the output");
    tps_status st = TPS_OK;
    if (od->force) {
        if (tps_outdir_rename(from, od->final) != 0)
            st = tps_fail_errno(err, errno, "%s: cannot rename the new file into place", od->final);
    } else if (link(from, od->final) != 0) {
        st = tps_fail_errno(err, errno, "%s: cannot put the new file in place", od->final);
    }
    free(from);
    if (st) return st;
    tps_remove_tree(od->tmp);
    char *parent = parent_of(od->final);
    if (parent) {
        st = fsync_path(parent, err);
        free(parent);
    }
    return st;
}

tps_status tps_outdir_commit(tps_outdir *od, tps_error *err)
{
    tps_status st = fsync_path(od->tmp, err);
    if (st) return st;
    st = check_inputs(od, err);
    if (st) return st;
    if (tps_outdir_interrupted())
        return tps_fail(err, TPS_EINTERRUPTED, "interrupted by signal %d; nothing was written", tps_outdir_interrupted());
    if (od->file) return commit_file(od, err);
    char *aside = NULL;
    if (rename(od->tmp, od->final) != 0) {
        if ((errno == ENOTEMPTY || errno == EEXIST) && od->force) {
            aside = malloc(strlen(od->tmp) + 8);
            if (!aside) return tps_fail_oom(err, "replacing the output directory");
            sprintf(aside, "%s.old", od->tmp);
            if (rename(od->final, aside) != 0) {
                st = tps_fail_errno(err, errno, "%s: cannot move the previous set aside to replace it", od->final);
                free(aside);
                return st;
            }
            if (tps_outdir_rename(od->tmp, od->final) != 0) {
                int e = errno;
                /* Put the previous set back where it was; say where it is when that fails too. */
                if (rename(aside, od->final) == 0)
                    st = tps_fail(err, TPS_EIO, "%s: cannot rename the new set into place (%s); the previous set is "
                                  "back in place", od->final, strerror(e));
                else
                    st = tps_fail(err, TPS_EIO, "%s: cannot rename the new set into place (%s), nor the previous set "
                                  "back: it was left at %s", od->final, strerror(e), aside);
                free(aside);
                return st;
            }
        } else {
            return tps_fail_errno(err, errno, "%s: cannot rename %s into place", od->final, od->tmp);
        }
    }
    char *parent = parent_of(od->final);
    if (parent) {
        st = fsync_path(parent, err);
        free(parent);
    }
    if (aside) {
        tps_remove_tree(aside);
        free(aside);
    }
    return st;
}

void tps_outdir_abort(tps_outdir *od)
{
    if (!od) return;
    if (od->tmp) tps_remove_tree(od->tmp);
    tps_outdir_free(od);
}

void tps_outdir_free(tps_outdir *od)
{
    if (!od) return;
    free(od->file);
    for (size_t i = 0; i < od->nsrcs; i++) free(od->srcs[i].path);
    free(od->srcs);
    free(od->final);
    free(od->tmp);
    free(od);
}
