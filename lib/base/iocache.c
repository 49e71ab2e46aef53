#include "iocache.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <unistd.h>

#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080 /* linux/fs.h, Linux 6.14 */
#endif

static atomic_bool uncached;

void tps_io_set_uncached(bool on)
{
    atomic_store(&uncached, on);
}

/* EOPNOTSUPP: the file system lacks it; EINVAL: the kernel predates the flag. */
static bool unsupported(int e)
{
    return e == EOPNOTSUPP || e == EINVAL;
}

ssize_t tps_io_pread(int fd, void *buf, size_t len, off_t off)
{
    if (atomic_load(&uncached)) {
        struct iovec io = {buf, len};
        ssize_t n = preadv2(fd, &io, 1, off, RWF_DONTCACHE);
        if (n >= 0 || !unsupported(errno)) return n;
    }
    return pread(fd, buf, len, off);
}

ssize_t tps_io_write(int fd, const void *buf, size_t len)
{
    if (atomic_load(&uncached)) {
        struct iovec io = {(void *)buf, len};
        ssize_t n = pwritev2(fd, &io, 1, -1, RWF_DONTCACHE);
        if (n >= 0 || !unsupported(errno)) return n;
    }
    return write(fd, buf, len);
}

tps_status tps_preadv_full(int fd, const char *path, struct iovec *iov, int n, uint64_t off, tps_error *err)
{
    while (n > 0 && iov->iov_len == 0) iov++, n--;
    while (n > 0) {
        int k = n < IOV_MAX ? n : IOV_MAX;
        ssize_t got = -1;
        if (atomic_load(&uncached)) {
            got = preadv2(fd, iov, k, (off_t)off, RWF_DONTCACHE);
            if (got < 0 && unsupported(errno)) got = -2;
        }
        if (got == -2 || !atomic_load(&uncached)) got = preadv(fd, iov, k, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            return tps_fail_errno(err, errno, "%s: read at offset %llu failed", path, (unsigned long long)off);
        }
        if (got == 0)
            return tps_fail(err, TPS_EIO, "%s: file ended at offset %llu (it shrank while being read?)", path,
                            (unsigned long long)off);
        off += (uint64_t)got;
        size_t left = (size_t)got;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++, n--;
        }
        if (left) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
        while (n > 0 && iov->iov_len == 0) iov++, n--;
    }
    return TPS_OK;
}
