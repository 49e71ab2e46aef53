/* What the machine's host does with the memory the kernel frees, and the write size that
 * follows from it.
 *
 * The page cache sizes the folios it makes for a write() after the write's length: a 64 KiB
 * write makes 64 KiB folios, an 8 MiB one 2 MiB folios.  A folio of 128 KiB or more comes from
 * a block the page allocator keeps whole.  A VM whose balloon device does free page reporting
 * (VIRTIO_BALLOON_F_REPORTING: Firecracker, QEMU with free-page-reporting=on) hands exactly
 * such free 2 MiB blocks back to its host, so the first touch of one costs a fault in the
 * host.  Measured in such a VM: 4 GB written to ext4 in 8 MiB writes took 8 to 23 s, in
 * 256 KiB writes 7 to 9 s, in 64 KiB writes 1.4 to 2.7 s, every time (docs/design.md, "How
 * large a write").  Elsewhere large writes are the faster ones (fewer folios to account). */
#ifndef TPS_HOSTMEM_H
#define TPS_HOSTMEM_H

#include <stdbool.h>
#include <stddef.h>

/* True when sysfs_root (normally "/sys") shows a virtio balloon device that negotiated free
 * page reporting: a bus/virtio/devices/ entry whose device file reads 0x0005 and whose
 * features string has a '1' at bit 5. */
bool tps_host_reclaims_free_pages(const char *sysfs_root);

/* The most one write() of the output files should carry: 64 KiB (what cp's copy_file_range
 * writes at a time, a splice through a 16-page pipe) where the host reclaims free pages,
 * 1 GiB (Linux's own limit rounded down) elsewhere.  Probed once per process. */
size_t tps_write_chunk(void);

#endif
