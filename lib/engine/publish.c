#include "publish.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/hostmem.h"

tps_status tps_write_file_atomic(const char *path, const void *data, size_t len, tps_error *err)
{
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) return tps_fail_oom(err, "writing a file");
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    snprintf(tmp, n, "%.*s.%s.tmp.%ld", (int)dlen, path, path + dlen, (long)getpid());
    tps_status st = TPS_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = tps_fail_errno(err, errno, "%s: cannot create", tmp);
        free(tmp);
        return st;
    }
    const char *p = data;
    size_t most = tps_write_chunk(); /* the page cache's folio size follows it (hostmem.h) */
    while (len > 0) {
        ssize_t w = write(fd, p, len < most ? len : most);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            st = tps_fail_errno(err, errno, "%s: write failed", tmp);
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    if (st == TPS_OK && fsync(fd) != 0) st = tps_fail_errno(err, errno, "%s: fsync failed", tmp);
    if (close(fd) != 0 && st == TPS_OK) st = tps_fail_errno(err, errno, "%s: close failed", tmp);
    if (st == TPS_OK && rename(tmp, path) != 0) st = tps_fail_errno(err, errno, "%s: rename failed", path);
    if (st) unlink(tmp);
    free(tmp);
    return st;
}

tps_status tps_publish_shardset(const tps_manifest *m, tps_outdir *od, tps_error *err)
{
    tps_buf b = TPS_BUF_INIT;
    char *path = tps_outdir_path(od, TPS_MANIFEST_NAME);
    tps_status st = path ? tps_manifest_to_json(m, &b, err) : tps_fail_oom(err, "writing the manifest");
    if (st == TPS_OK) st = tps_write_file_atomic(path, b.data, b.len, err);
    if (st == TPS_OK) st = tps_outdir_commit(od, err);
    free(path);
    tps_buf_release(&b);
    return st;
}
