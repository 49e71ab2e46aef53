/* A reader thread running ahead of its consumer: the copy engine's way to use two cores
 * without making any reader thread-safe.
 *
 * fill() is called from the one reader thread only, sequentially, to produce the next chunk
 * of a stream into a free buffer; when asked, the thread also checksums each chunk (CRC-32)
 * while the consumer works on earlier ones (worth it when the consumer has its own work,
 * such as writing; a consumer with nothing else to do should checksum itself).  The consumer takes chunks in order and gives each back
 * when done with it.  The stream's content and order do not depend on timing, so output
 * stays deterministic.  Memory: nslots buffers of cap bytes.
 *
 * Runs of small chunks (a many-tensor model's tiny tensors) are batched: given a peek(), the
 * reader packs consecutive chunks of at most cap/16 bytes into one slot, up to cap bytes and
 * TPS_PREFETCH_BATCH chunks, so the ring's lock changes hands once a batch, not once a chunk.
 * The consumer still takes and gives back one chunk at a time. */
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

/* The size fill() would give its next chunk (it must be exactly that), or 0 at the end or when
 * not known; it must not fail (a fault shows in the fill that follows). */
typedef size_t (*tps_peek_fn)(void *ctx, size_t cap);

/* The most chunks one slot holds. */
#define TPS_PREFETCH_BATCH 256

typedef struct tps_prefetch tps_prefetch;

/* peek NULL: one chunk a slot. */
tps_status tps_prefetch_start(tps_fill_fn fill, tps_peek_fn peek, void *ctx, size_t cap, int nslots, bool checksum,
                              tps_prefetch **out, tps_error *err);
/* The next chunk, its size and (when started with checksum) CRC-32; *buf is NULL at the end of the stream.  A fill()
 * failure comes back here, in order. */
tps_status tps_prefetch_take(tps_prefetch *p, const unsigned char **buf, size_t *n, uint32_t *crc, tps_error *err);
/* Gives back the chunk last taken (its bytes stay valid until then). */
void tps_prefetch_done(tps_prefetch *p);
/* Stops the thread (wherever it is) and frees everything; accepts NULL. */
void tps_prefetch_stop(tps_prefetch *p);

#endif
