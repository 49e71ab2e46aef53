#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../lib/base/crc.h"
#include "../lib/base/hostmem.h"
#include "../lib/base/iocache.h"

/* Large enough that streaming costs few syscalls, small enough to not matter next to the
 * copy engine's own buffers. */
#define WBUF_SIZE (1u << 20)
/* Pieces at least this large are written straight from the caller's memory: copying them
 * into the buffer first would only add a pass over the bytes. */
#define DIRECT_MIN ((size_t)256 << 10)
/* Writeback is started every this many bytes, so the disk works while the copy goes on and
 * the fsync at commit has little left to do (instead of one long flush at the end). */
#define KICK_BYTES ((uint64_t)8 << 20)

struct tps_outfile {
    char *path; /* the final name, or the label of a counting file */
    char *tmp;  /* NULL once renamed, or when never created by us */
    int fd;
    unsigned char *buf;
    size_t buflen;
    uint64_t written;         /* bytes accepted so far */
    uint64_t flushed, kicked; /* bytes handed to write(); bytes whose writeback was started */
    uint32_t crc;
    bool failed;     /* a write failed: the file is incomplete and only abort is useful */
    bool count_only; /* opened with a NULL path */
};

/* ".NAME.tmp.PID" next to path: same directory, so the final rename is atomic. */
static char *temp_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t need = strlen(path) + 32;
    char *t = malloc(need);
    if (t) snprintf(t, need, "%.*s.%s.tmp.%ld", (int)dlen, path, path + dlen, (long)getpid());
    return t;
}

tps_status tps_outfile_open(const char *path, const char *label, tps_outfile **out, tps_error *err)
{
    *out = NULL;
    const char *name = path ? path : label;
    tps_outfile *f = calloc(1, sizeof *f);
    if (f) {
        f->fd = -1;
        f->count_only = !path;
    }
    if (!f || !(f->path = strdup(name)) || (path && !(f->buf = malloc(WBUF_SIZE))) ||
        (path && !(f->tmp = temp_name(path)))) {
        tps_outfile_abort(f);
        return tps_fail_oom(err, "opening an output file");
    }
    if (path) {
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (f->fd < 0) {
            tps_status st = tps_fail_errno(err, errno, "%s: cannot create temporary file %s", path, f->tmp);
            free(f->tmp);
            f->tmp = NULL; /* not ours (EEXIST) or never made: abort must not remove it */
            tps_outfile_abort(f);
            return st;
        }
    }
    *out = f;
    return TPS_OK;
}

static tps_status write_all(tps_outfile *f, const void *p, size_t n, tps_error *err)
{
    const char *c = p;
    size_t most = tps_write_chunk(); /* the page cache's folio size follows it (hostmem.h) */
    while (n > 0) {
        ssize_t r = tps_io_write(f->fd, c, n < most ? n : most);
        if (r < 0) {
            if (errno == EINTR) continue;
            f->failed = true;
            /* ENOSPC, EDQUO, EIO: all resource failures, named with the file being made. */
            return tps_fail_errno(err, errno, "%s: writing %zu bytes to %s failed", f->path, n, f->tmp);
        }
        c += r;
        n -= (size_t)r;
        f->flushed += (uint64_t)r;
    }
    if (f->flushed - f->kicked >= KICK_BYTES) {
        /* Only a hint: file systems without it (tmpfs) return at once, and fsync at commit
         * remains what makes the file durable. */
        sync_file_range(f->fd, (off_t)f->kicked, (off_t)(f->flushed - f->kicked), SYNC_FILE_RANGE_WRITE);
        f->kicked = f->flushed;
    }
    return TPS_OK;
}

static tps_status flush(tps_outfile *f, tps_error *err)
{
    if (f->count_only) return TPS_OK;
    tps_status st = write_all(f, f->buf, f->buflen, err);
    f->buflen = 0;
    return st;
}

tps_status tps_outfile_put(tps_outfile *f, const void *p, size_t n, bool have_crc, uint32_t crc, tps_error *err)
{
    tps_status st;
    if (f->failed) return tps_fail(err, TPS_EIO, "%s: an earlier write failed", f->path);
    /* p may point into a mapped source file (a run of a chunk the reader mapped), which can
     * shrink under us: its pages are read with SIGBUS caught, the failure an EIO naming the
     * file, instead of the process killed. */
    if (have_crc) {
        f->crc = (uint32_t)crc32_combine(f->crc, crc, (z_off_t)n);
    } else if (!tps_io_mapped_crc(p, n, &f->crc)) {
        f->failed = true;
        return tps_fail(err, TPS_EIO, "%s: the bytes to write were gone (a mapped source file shrank?)", f->path);
    }
    f->written += n;
    if (f->count_only) return TPS_OK; /* the CRC and size are all it keeps */
    if (n >= DIRECT_MIN) {
        if ((st = flush(f, err))) return st;
        return write_all(f, p, n, err);
    }
    if (n <= WBUF_SIZE - f->buflen) {
        memcpy(f->buf + f->buflen, p, n);
        f->buflen += n;
        return TPS_OK;
    }
    if ((st = flush(f, err))) return st;
    memcpy(f->buf, p, n);
    f->buflen = n;
    return TPS_OK;
}

uint64_t tps_outfile_size(const tps_outfile *f) { return f->written; }
uint32_t tps_outfile_crc(const tps_outfile *f) { return f->crc; }
bool tps_outfile_failed(const tps_outfile *f) { return f->failed; }
const char *tps_outfile_name(const tps_outfile *f) { return f->path; }

static tps_status sync_dir(const char *path, tps_error *err)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) strcpy(dir, ".");
    else if (slash == path) strcpy(dir, "/");
    else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return tps_fail(err, TPS_EIO, "%s: directory name too long to sync", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return tps_fail_errno(err, errno, "%s: cannot open directory %s to sync it", path, dir);
    int rc = fsync(fd), e = errno;
    close(fd);
    /* Some file systems cannot sync a directory at all (EINVAL); nothing more can be done there. */
    if (rc != 0 && e != EINVAL) return tps_fail_errno(err, e, "%s: syncing directory %s failed", path, dir);
    return TPS_OK;
}

tps_status tps_outfile_commit(tps_outfile *f, tps_error *err)
{
    tps_status st;
    if (f->failed) return tps_fail(err, TPS_EIO, "%s: not committed: an earlier write failed", f->path);
    if (f->count_only) return TPS_OK;
    if ((st = flush(f, err))) return st;
    if (fsync(f->fd) != 0) return tps_fail_errno(err, errno, "%s: fsync of %s failed", f->path, f->tmp);
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0) return tps_fail_errno(err, errno, "%s: closing %s failed", f->path, f->tmp);
    if (rename(f->tmp, f->path) != 0) return tps_fail_errno(err, errno, "%s: renaming %s onto it failed", f->path, f->tmp);
    free(f->tmp);
    f->tmp = NULL; /* renamed: nothing left for abort to remove */
    return sync_dir(f->path, err);
}

void tps_outfile_abort(tps_outfile *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    free(f->buf);
    free(f);
}
