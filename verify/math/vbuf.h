/* A tensor's bytes mapped from its file instead of read into a buffer (verify/load's reads
 * of a rank's or a checkpoint's tensor): no copy, and no fresh page to fault in and zero for
 * every 4 KiB written (with the copy, a fifth of --whole-model's time on the 8B-shaped tp 8
 * set).  The resident memory is the same: the mapped file pages count as the buffer did.
 * tps_vt_release frees either kind through tps_vbuf_free. */
#ifndef TPS_VERIFY_MATH_VBUF_H
#define TPS_VERIFY_MATH_VBUF_H

#include <stddef.h>
#include <stdint.h>

/* len bytes of file fd from offset off, mapped private and writable (a write copies its page,
 * never the file) and faulted in now; NULL when the mapping fails or the file is shorter (the
 * caller reads, and reports that). */
void *tps_vbuf_map(int fd, uint64_t off, size_t len);

/* A buffer of n bytes, a mapping of its own when large (given back whole when freed); NULL
 * when out of memory. */
void *tps_vbuf_alloc(size_t n);

/* From tps_vbuf_keep to tps_vbuf_trim, a buffer tps_vbuf_alloc made is kept when freed and
 * handed out again to a request it fits, so that the next layer's reference reads into the
 * pages the last one's faulted in (436 MiB a layer of the 8B-shaped model).  The driver keeps
 * only from its release of one layer's reference to the end of the next one's load: nothing
 * else allocates in between, so what is kept never adds to a peak. */
void tps_vbuf_keep(void);
void tps_vbuf_trim(void);

/* Frees p: unmaps it when tps_vbuf_map or tps_vbuf_alloc mapped it, else free(p).
 * Thread-safe. */
void tps_vbuf_free(void *p);

#endif
