#include "iocache.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc.h"

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

bool tps_io_uncached(void)
{
    return atomic_load(&uncached);
}

tps_status tps_io_map_file(int fd, const char *path, tps_io_map *m, tps_error *err)
{
    *m = (tps_io_map){NULL, 0};
    struct stat sb;
    if (fstat(fd, &sb) != 0) return tps_fail_errno(err, errno, "%s: cannot stat it to map it", path);
    if (sb.st_size <= 0) return TPS_OK;
    if ((uint64_t)sb.st_size > SIZE_MAX) return tps_fail(err, TPS_EIO, "%s: too large to map", path);
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return tps_fail_errno(err, errno, "%s: cannot map it", path);
    /* Read front to back: the kernel reads ahead and drops what is behind first. */
    madvise(p, (size_t)sb.st_size, MADV_SEQUENTIAL);
    *m = (tps_io_map){p, (uint64_t)sb.st_size};
    return TPS_OK;
}

void tps_io_unmap(tps_io_map *m)
{
    if (m->base) munmap((void *)m->base, (size_t)m->size);
    *m = (tps_io_map){NULL, 0};
}

void tps_io_map_willneed(const tps_io_map *m, uint64_t off, uint64_t len)
{
    long ps = sysconf(_SC_PAGESIZE);
    uint64_t page = ps > 0 ? (uint64_t)ps : 4096;
    if (off >= m->size) return;
    if (len > m->size - off) len = m->size - off;
    uint64_t a = off / page * page;
    madvise((void *)(m->base + a), (size_t)(off + len - a), MADV_WILLNEED);
}

/* SIGBUS on a mapped page past the end of a file that shrank: the thread that armed a jump
 * buffer returns to it; a page gone from a file (BUS_ADRERR) that no thread armed for ends the
 * process with the message and exit code tps_io_exit_on_shrunk_mapping set, when one did; any
 * other SIGBUS gets the default action (a real fault stays one). */
static _Thread_local sigjmp_buf *bus_jump;
static const char *shrunk_msg;
static size_t shrunk_len;
static int shrunk_code;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (bus_jump) siglongjmp(*bus_jump, 1);
    if (shrunk_msg && si && si->si_code == BUS_ADRERR) {
        ssize_t w = write(STDERR_FILENO, shrunk_msg, shrunk_len);
        (void)w;
        _exit(shrunk_code);
    }
    signal(sig, SIG_DFL); /* returning re-runs the access, which now takes the default action */
}

static void install_bus_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

static pthread_once_t bus_once = PTHREAD_ONCE_INIT;

void tps_io_exit_on_shrunk_mapping(const char *msg, int exit_code)
{
    shrunk_len = strlen(msg);
    shrunk_code = exit_code;
    shrunk_msg = msg;
    pthread_once(&bus_once, install_bus_handler);
}

bool tps_io_mapped_crc(const void *p, size_t n, uint32_t *crc)
{
    pthread_once(&bus_once, install_bus_handler);
    sigjmp_buf jb;
    volatile uint32_t c = *crc;
    /* The mask is not saved (a system call each time, 1.7 a tensor for 50,000 tiny tensors):
     * the handler runs with SA_NODEFER and an empty sa_mask, so nothing it jumps out of has
     * changed the mask. */
    if (sigsetjmp(jb, 0) != 0) {
        bus_jump = NULL;
        return false;
    }
    bus_jump = &jb;
    c = tps_crc32(c, p, n);
    bus_jump = NULL;
    *crc = c;
    return true;
}
