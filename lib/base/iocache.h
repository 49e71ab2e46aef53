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
bool tps_io_uncached(void);

/* A source file mapped read-only, so its page-cache pages are checksummed and written out
 * with no copy into a buffer of ours (one copy per byte: the write into the output's page
 * cache).  Mapped only while the policy is cached: the uncached policy's RWF_DONTCACHE reads
 * keep a larger-than-memory job from evicting everything else, which a mapping cannot.
 * size is the file's size when mapped; a file that shrinks later raises SIGBUS on access,
 * which tps_io_mapped_crc turns into an error. */
typedef struct tps_io_map {
    const unsigned char *base;
    uint64_t size;
} tps_io_map;

/* Maps the whole of fd (path names it in errors); an empty file maps to base NULL, size 0. */
tps_status tps_io_map_file(int fd, const char *path, tps_io_map *m, tps_error *err);
void tps_io_unmap(tps_io_map *m); /* accepts a zeroed map */

/* Asks the kernel to start reading [off, off+len) of the mapping into the page cache now
 * (readahead), so the mapped path is not slower than pread on a cold file. */
void tps_io_map_willneed(const tps_io_map *m, uint64_t off, uint64_t len);

/* For a command whose mappings are read where no jump can be armed (verify's math reads its
 * tensors in place, verify/math/vbuf.h): from now on a page gone from a mapped file (the file
 * shrank: SIGBUS, BUS_ADRERR) outside tps_io_mapped_crc writes msg (a static string) to stderr
 * and ends the process with exit_code, instead of a crash.  Other SIGBUS stay faults. */
void tps_io_exit_on_shrunk_mapping(const char *msg, int exit_code);

/* *crc = the CRC-32 of mapped bytes p[0, n) continuing from *crc; false (and *crc unchanged)
 * when a page was gone (the file shrank under the mapping: SIGBUS caught in this thread). */
bool tps_io_mapped_crc(const void *p, size_t n, uint32_t *crc);

/* pread / write with the policy applied; same return values and errno as those. */
ssize_t tps_io_pread(int fd, void *buf, size_t len, off_t off);
ssize_t tps_io_write(int fd, const void *buf, size_t len);

/* Reads the file's bytes from off on into the n buffers of iov, in order, all of them (one
 * system call per IOV_MAX pieces, however small they are: a dimension-1 cut gathers one
 * row piece per row).  iov is consumed.  Fails like tps_pread_full, naming path. */
tps_status tps_preadv_full(int fd, const char *path, struct iovec *iov, int n, uint64_t off, tps_error *err);

#endif
