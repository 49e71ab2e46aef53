/* Page-cache policy for jobs larger than memory.
 *
 * A split of a 30 GiB checkpoint reads 30 GiB and writes 30 GiB; through the page cache
 * that evicts everything else on the machine (and the job's own pages are never reused).
 * When the copy engine turns "uncached" on, reads and writes use RWF_DONTCACHE (Linux 6.14+
 * on file systems that support it, such as ext4, XFS and btrfs): pages the call had to bring
 * in are dropped once copied or written back, and pages that were already cached stay.
 * Where the kernel or file system lacks it (tmpfs, older kernels) the calls are plain
 * pread/write.  Off by default; smaller jobs keep their outputs cached for the next
 * command (check, verify) to read. */
#ifndef TPS_IOCACHE_H
#define TPS_IOCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "status.h"

void tps_io_set_uncached(bool on); /* process-wide */

/* pread / write with the policy applied; same return values and errno as those. */
ssize_t tps_io_pread(int fd, void *buf, size_t len, off_t off);
ssize_t tps_io_write(int fd, const void *buf, size_t len);

/* Reads the file's bytes from off on into the n buffers of iov, in order, all of them (one
 * system call per IOV_MAX pieces, however small they are: a dimension-1 cut gathers one
 * row piece per row).  iov is consumed.  Fails like tps_pread_full, naming path. */
tps_status tps_preadv_full(int fd, const char *path, struct iovec *iov, int n, uint64_t off, tps_error *err);

#endif
