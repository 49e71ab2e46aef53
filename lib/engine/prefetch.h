/* A reader thread running ahead of its consumer: the copy engine's way to use two cores
 * without making any reader thread-safe.
 *
 * fill() is called from the one reader thread only, sequentially, to produce the next chunk
 * of a stream into a free buffer; when asked, the thread also checksums each chunk (CRC-32)
 * while the consumer works on earlier ones (worth it when the consumer has its own work,
 * such as writing; a consumer with nothing else to do should checksum itself).  The consumer takes chunks in order and gives each back
 * when done with it.  The stream's content and order do not depend on timing, so output
 * stays deterministic.  Memory: nslots buffers of cap bytes. */
#ifndef TPS_PREFETCH_H
#define TPS_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

/* One chunk as fill() produces it.  data starts as the slot's buffer; a fill that can point
 * at the bytes where they already are (a mapped source file) sets data there instead, and
 * then also gives their CRC (have_crc), computed where a fault can be caught. */
typedef struct tps_chunk {
    const unsigned char *data;
    size_t n;
    uint32_t crc;
    bool have_crc, end;
} tps_chunk;

/* Fills buf with the next chunk (at most cap bytes) or points c->data at it, and sets c->n,
 * or sets c->end at the end. */
typedef tps_status (*tps_fill_fn)(void *ctx, unsigned char *buf, size_t cap, tps_chunk *c, tps_error *err);

typedef struct tps_prefetch tps_prefetch;

tps_status tps_prefetch_start(tps_fill_fn fill, void *ctx, size_t cap, int nslots, bool checksum, tps_prefetch **out,
                              tps_error *err);
/* The next chunk, its size and (when started with checksum) CRC-32; *buf is NULL at the end of the stream.  A fill()
 * failure comes back here, in order. */
tps_status tps_prefetch_take(tps_prefetch *p, const unsigned char **buf, size_t *n, uint32_t *crc, tps_error *err);
/* Gives back the chunk last taken. */
void tps_prefetch_done(tps_prefetch *p);
/* Stops the thread (wherever it is) and frees everything; accepts NULL. */
void tps_prefetch_stop(tps_prefetch *p);

#endif
