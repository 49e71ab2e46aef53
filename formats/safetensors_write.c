/* safetensors streaming writer: header first, then the caller's data bytes in entry order,
 * into a hidden temporary sibling that only commit renames onto the real name. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../lib/buf.h"
#include "../lib/checked.h"
#include "../lib/crc.h"
#include "../lib/iocache.h"
#include "../lib/json.h"

/* Large enough that streaming costs few syscalls, small enough to not matter next to the
 * copy engine's own buffers. */
#define WBUF_SIZE (1u << 20)
/* Pieces at least this large are written straight from the caller's memory: copying them
 * into the buffer first would only add a pass over the bytes. */
#define DIRECT_MIN ((size_t)256 << 10)
/* Linux transfers at most 0x7ffff000 bytes per write(). */
#define MAX_WRITE ((size_t)1 << 30)
/* Writeback is started every this many bytes, so the disk works while the copy goes on and
 * the fsync at commit has little left to do (instead of one long flush at the end). */
#define KICK_BYTES ((uint64_t)8 << 20)

struct tps_st_writer {
    char *path;
    char *tmp;
    int fd;
    unsigned char *buf;
    size_t buflen;
    uint64_t total;   /* the file size the header announces */
    uint64_t written; /* bytes accepted so far, header included */
    uint64_t flushed, kicked; /* bytes handed to write(); bytes whose writeback was started */
    uint32_t crc;
    bool failed; /* a write failed: the file is incomplete and only abort is useful */
    bool count_only; /* opened with a NULL path: no file, only the size and CRC it would have */
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static tps_status check_entries(const char *path, const tps_st_entry *entries, size_t n, uint64_t *nbytes,
                                tps_error *err)
{
    tps_status st = TPS_OK;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) return tps_fail_oom(err, "preparing a safetensors header");
    for (size_t i = 0; i < n; i++) {
        const tps_st_entry *e = &entries[i];
        if (!e->name || strcmp(e->name, "__metadata__") == 0 || e->ndim < 0 || e->ndim > TPS_MAX_DIMS ||
            (e->ndim > 0 && !e->shape) || (unsigned)e->dtype >= TPS_DT_COUNT) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor %zu ('%s') has an invalid name, dtype or rank %d", path, i,
                          e->name ? e->name : "(null)", e->ndim);
            goto cleanup;
        }
        char what[512];
        snprintf(what, sizeof what, "%s: tensor '%s'", path, e->name);
        uint64_t nelem;
        if (!tps_prod_u64(e->shape, e->ndim, &nelem)) {
            st = tps_fail(err, TPS_EINVALID, "%s: the element count of its shape overflows 64 bits", what);
            goto cleanup;
        }
        TPS_CHECK(tps_dtype_nbytes(e->dtype, nelem, &nbytes[i], what, err));
        names[i] = e->name;
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor name '%s' given twice", path, names[i]);
            goto cleanup;
        }
cleanup:
    free(names);
    return st;
}

/* {"__metadata__":{"format":"pt",...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...}
 * padded with spaces to a multiple of 8; *data_total is the sum of the tensors' sizes. */
static tps_status build_header(const char *path, const tps_st_entry *entries, size_t n, const tps_kv *meta,
                               size_t nmeta, tps_buf *out, uint64_t *data_total, tps_error *err)
{
    tps_status st = TPS_OK;
    uint64_t *nbytes = calloc(n ? n : 1, sizeof *nbytes);
    if (!nbytes) return tps_fail_oom(err, "preparing a safetensors header");
    TPS_CHECK(check_entries(path, entries, n, nbytes, err));
    const char *format = "pt";
    for (size_t i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value) {
            st = tps_fail(err, TPS_EINVALID, "%s: metadata entry %zu has no key or value", path, i);
            goto cleanup;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(meta[j].key, meta[i].key) == 0) {
                st = tps_fail(err, TPS_EINVALID, "%s: metadata key '%s' given twice", path, meta[i].key);
                goto cleanup;
            }
        if (strcmp(meta[i].key, "format") == 0) format = meta[i].value;
    }
    tps_jw w;
    tps_jw_init(&w, out, false);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "__metadata__");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "format");
    tps_jw_string(&w, format);
    for (size_t i = 0; i < nmeta; i++) {
        if (strcmp(meta[i].key, "format") == 0) continue;
        tps_jw_key(&w, meta[i].key);
        tps_jw_string(&w, meta[i].value);
    }
    tps_jw_object_end(&w);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const tps_st_entry *e = &entries[i];
        uint64_t end;
        if (!tps_add_u64(pos, nbytes[i], &end)) {
            st = tps_fail(err, TPS_EINVALID, "%s: the tensors' total size overflows 64 bits at tensor '%s'", path,
                          e->name);
            goto cleanup;
        }
        tps_jw_key(&w, e->name);
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "dtype");
        tps_jw_string(&w, tps_dtype_name(e->dtype));
        tps_jw_key(&w, "shape");
        tps_jw_array_begin(&w);
        for (int d = 0; d < e->ndim; d++) tps_jw_u64(&w, e->shape[d]);
        tps_jw_array_end(&w);
        tps_jw_key(&w, "data_offsets");
        tps_jw_array_begin(&w);
        tps_jw_u64(&w, pos);
        tps_jw_u64(&w, end);
        tps_jw_array_end(&w);
        tps_jw_object_end(&w);
        pos = end;
    }
    tps_jw_object_end(&w);
    while (out->len % 8 != 0 && !out->oom) tps_buf_putc(out, ' ');
    if (out->oom) {
        st = tps_fail_oom(err, "preparing a safetensors header");
        goto cleanup;
    }
    if (out->len > TPS_ST_MAX_HEADER) {
        st = tps_fail(err, TPS_EINVALID, "%s: the header would be %zu bytes, more than the %llu readers accept", path,
                      out->len, TPS_ST_MAX_HEADER);
        goto cleanup;
    }
    *data_total = pos;
cleanup:
    free(nbytes);
    return st;
}

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

static tps_status write_all(tps_st_writer *w, const void *p, size_t n, tps_error *err)
{
    const char *c = p;
    while (n > 0) {
        ssize_t r = tps_io_write(w->fd, c, n < MAX_WRITE ? n : MAX_WRITE);
        if (r < 0) {
            if (errno == EINTR) continue;
            w->failed = true;
            /* ENOSPC, EDQUO, EIO: all resource failures, named with the file being made. */
            return tps_fail_errno(err, errno, "%s: writing %zu bytes to %s failed", w->path, n, w->tmp);
        }
        c += r;
        n -= (size_t)r;
        w->flushed += (uint64_t)r;
    }
    if (w->flushed - w->kicked >= KICK_BYTES) {
        /* Only a hint: file systems without it (tmpfs) return at once, and fsync at commit
         * remains what makes the file durable. */
        sync_file_range(w->fd, (off_t)w->kicked, (off_t)(w->flushed - w->kicked), SYNC_FILE_RANGE_WRITE);
        w->kicked = w->flushed;
    }
    return TPS_OK;
}

static tps_status flush(tps_st_writer *w, tps_error *err)
{
    if (w->count_only) return TPS_OK;
    tps_status st = write_all(w, w->buf, w->buflen, err);
    w->buflen = 0;
    return st;
}

/* Header bytes and data bytes take the same path, so the CRC covers the whole file; crc is
 * that of p[0, n) when known (have_crc), else computed here. */
static tps_status put(tps_st_writer *w, const void *p, size_t n, bool have_crc, uint32_t crc, tps_error *err)
{
    tps_status st;
    w->crc = have_crc ? (uint32_t)crc32_combine(w->crc, crc, (z_off_t)n) : tps_crc32(w->crc, p, n);
    w->written += n;
    if (w->count_only) return TPS_OK; /* the CRC and size are all it keeps */
    if (n >= DIRECT_MIN) {
        if ((st = flush(w, err))) return st;
        return write_all(w, p, n, err);
    }
    if (n <= WBUF_SIZE - w->buflen) {
        memcpy(w->buf + w->buflen, p, n);
        w->buflen += n;
        return TPS_OK;
    }
    if ((st = flush(w, err))) return st;
    memcpy(w->buf, p, n);
    w->buflen = n;
    return TPS_OK;
}

tps_status tps_st_writer_open(const char *path, const tps_st_entry *entries, size_t n, const tps_kv *meta,
                              size_t nmeta, tps_st_writer **out, tps_error *err)
{
    tps_status st;
    tps_buf hdr = TPS_BUF_INIT;
    tps_st_writer *w = NULL;
    uint64_t data_total = 0;
    *out = NULL;
    const char *label = path ? path : "(a rank file this run does not write)";
    TPS_CHECK(build_header(label, entries, n, meta, nmeta, &hdr, &data_total, err));
    w = calloc(1, sizeof *w);
    if (w) {
        w->fd = -1;
        w->count_only = !path;
    }
    if (!w || !(w->buf = malloc(WBUF_SIZE)) || !(w->path = strdup(label)) ||
        (path && !(w->tmp = temp_name(path)))) {
        st = tps_fail_oom(err, "opening a safetensors writer");
        goto cleanup;
    }
    w->crc = 0;
    if (!tps_add_u64(8 + (uint64_t)hdr.len, data_total, &w->total)) {
        st = tps_fail(err, TPS_EINVALID, "%s: the file size overflows 64 bits", label);
        goto cleanup;
    }
    if (path) w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (path && w->fd < 0) {
        st = tps_fail_errno(err, errno, "%s: cannot create temporary file %s", path, w->tmp);
        free(w->tmp);
        w->tmp = NULL; /* not ours (EEXIST) or never made: abort must not remove it */
        goto cleanup;
    }
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    TPS_CHECK(put(w, prefix, 8, false, 0, err));
    TPS_CHECK(put(w, hdr.data, hdr.len, false, 0, err));
    *out = w;
    w = NULL;
cleanup:
    tps_st_writer_abort(w);
    tps_buf_release(&hdr);
    return st;
}

static tps_status write_data(tps_st_writer *w, const void *buf, size_t len, bool have_crc, uint32_t crc,
                             tps_error *err)
{
    if (w->failed) return tps_fail(err, TPS_EIO, "%s: an earlier write failed", w->path);
    uint64_t end;
    if (!tps_add_u64(w->written, len, &end) || end > w->total) {
        w->failed = true;
        return tps_fail(err, TPS_EINVALID, "%s: %zu more bytes would pass the %llu bytes the header announces",
                        w->path, len, (unsigned long long)w->total);
    }
    return put(w, buf, len, have_crc, crc, err);
}

tps_status tps_st_writer_write(tps_st_writer *w, const void *buf, size_t len, tps_error *err)
{
    return write_data(w, buf, len, false, 0, err);
}

tps_status tps_st_writer_write_crc(tps_st_writer *w, const void *buf, size_t len, uint32_t crc, tps_error *err)
{
    return write_data(w, buf, len, true, crc, err);
}

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

tps_status tps_st_writer_commit(tps_st_writer *w, uint32_t *crc, uint64_t *size, tps_error *err)
{
    tps_status st = TPS_OK;
    if (w->failed) {
        st = tps_fail(err, TPS_EIO, "%s: not committed: an earlier write failed", w->path);
        goto cleanup;
    }
    if (w->written != w->total) {
        st = tps_fail(err, TPS_EINVALID,
                      "%s: not committed: %llu of the %llu bytes the header announces were written",
                      w->path, (unsigned long long)w->written, (unsigned long long)w->total);
        goto cleanup;
    }
    if (w->count_only) goto done;
    TPS_CHECK(flush(w, err));
    if (fsync(w->fd) != 0) {
        st = tps_fail_errno(err, errno, "%s: fsync of %s failed", w->path, w->tmp);
        goto cleanup;
    }
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) {
        st = tps_fail_errno(err, errno, "%s: closing %s failed", w->path, w->tmp);
        goto cleanup;
    }
    if (rename(w->tmp, w->path) != 0) {
        st = tps_fail_errno(err, errno, "%s: renaming %s onto it failed", w->path, w->tmp);
        goto cleanup;
    }
    free(w->tmp);
    w->tmp = NULL; /* renamed: nothing left for abort to remove */
    TPS_CHECK(sync_dir(w->path, err));
done:
    if (crc) *crc = w->crc;
    if (size) *size = w->total;
cleanup:
    tps_st_writer_abort(w);
    return st;
}

void tps_st_writer_abort(tps_st_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    free(w->path);
    free(w->buf);
    free(w);
}

/* The sink's file handle is the writer itself, passed through the opaque type. */
static tps_status sink_open(const char *path, const tps_sink_tensor *tensors, size_t n, const tps_kv *meta,
                            size_t nmeta, tps_sink_file **out, tps_error *err)
{
    tps_st_writer *w = NULL;
    tps_status st = tps_st_writer_open(path, tensors, n, meta, nmeta, &w, err);
    *out = (tps_sink_file *)w;
    return st;
}

static tps_status sink_write(tps_sink_file *f, const void *buf, size_t len, tps_error *err)
{
    return tps_st_writer_write((tps_st_writer *)f, buf, len, err);
}

static tps_status sink_write_crc(tps_sink_file *f, const void *buf, size_t len, uint32_t crc, tps_error *err)
{
    return tps_st_writer_write_crc((tps_st_writer *)f, buf, len, crc, err);
}

static tps_status sink_commit(tps_sink_file *f, uint32_t *crc, uint64_t *size, tps_error *err)
{
    return tps_st_writer_commit((tps_st_writer *)f, crc, size, err);
}

static void sink_abort(tps_sink_file *f) { tps_st_writer_abort((tps_st_writer *)f); }

const tps_sink tps_safetensors_sink = {"safetensors", sink_open, sink_write, sink_write_crc, sink_commit, sink_abort};
