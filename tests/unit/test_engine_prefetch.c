/* The prefetch ring's batching of small chunks (lib/engine/prefetch.h, issue 27): a stream of
 * chunk sizes around the boundaries (cap/16 and cap/16 + 1, runs that overflow a slot's cap
 * bytes or its TPS_PREFETCH_BATCH chunks, chunks that point into a "mapped" file and take no
 * room) comes out in order with the bytes fill() wrote and their zlib CRC; every chunk a
 * batch packs lies inside its slot's cap bytes; a failure in the middle of a batch comes
 * after the chunks before it. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "lib/engine/prefetch.h"
#include "tps_test.h"

enum { CAP = 4096, SMALL = CAP / 16, MAXCHUNKS = 4000 };

typedef struct stream {
    size_t size[MAXCHUNKS];
    bool mapped[MAXCHUNKS]; /* data points into file instead of the slot's buffer */
    size_t n, next, fail_at; /* fail_at: the chunk whose fill fails (n when none) */
    unsigned char file[CAP]; /* what a mapped chunk points at: byte_of(0, at), never rewritten */
    const unsigned char *buf[MAXCHUNKS]; /* where fill() was told to write chunk k */
} stream;

static unsigned char byte_of(size_t k, size_t at)
{
    return (unsigned char)(k * 31 + at * 7 + 3);
}

static unsigned char byte_in(const stream *s, size_t k, size_t at)
{
    return byte_of(s->mapped[k] ? 0 : k, at);
}

static size_t peek(void *arg, size_t cap)
{
    const stream *s = arg;
    CHECK(cap == CAP);
    return s->next < s->n ? s->size[s->next] : 0;
}

static tps_status fill(void *arg, unsigned char *buf, size_t cap, tps_chunk *c, tps_error *err)
{
    stream *s = arg;
    CHECK(cap <= CAP); /* the room left in the slot's buffer */
    if (s->next == s->n) {
        c->end = true;
        return TPS_OK;
    }
    size_t k = s->next++;
    CHECK(s->size[k] <= cap); /* the ring never hands a chunk less room than it needs */
    if (k == s->fail_at) return tps_fail(err, TPS_EIO, "chunk %zu fails", k);
    s->buf[k] = buf;
    c->n = s->size[k];
    if (!s->mapped[k])
        for (size_t at = 0; at < c->n; at++) buf[at] = byte_of(k, at);
    else {
        c->data = s->file;
        c->crc = (uint32_t)crc32(0, s->file, (uInt)c->n);
        c->have_crc = true;
    }
    return TPS_OK;
}

/* Takes the whole stream and checks each chunk's size, bytes and CRC against what fill()
 * wrote; returns how many chunks came before the end (or the failure). */
static size_t drain(stream *s, int nslots, tps_status *last)
{
    tps_prefetch *p;
    tps_error err;
    tps_error_clear(&err);
    s->next = 0;
    for (size_t at = 0; at < CAP; at++) s->file[at] = byte_of(0, at);
    CHECK(tps_prefetch_start(fill, peek, s, CAP, nslots, true, &p, &err) == TPS_OK);
    size_t k = 0;
    unsigned char want[CAP];
    for (;; k++) {
        const unsigned char *b;
        size_t n;
        uint32_t crc = 0;
        *last = tps_prefetch_take(p, &b, &n, &crc, &err);
        if (*last || !b) break;
        CHECK_EQ_U64(n, s->size[k]);
        for (size_t at = 0; at < n; at++) want[at] = byte_in(s, k, at);
        if (n != s->size[k] || memcmp(b, want, n) != 0) {
            CHECK(!"chunk bytes differ");
            break;
        }
        CHECK_EQ_U64(crc, crc32(0, want, (uInt)n));
        tps_prefetch_done(p);
    }
    tps_prefetch_stop(p);
    return k;
}

/* Packed chunks follow each other in a slot's buffer and end within its cap bytes; a big
 * chunk, or a small one after a big one, starts a slot of its own. */
static void check_packing(const stream *s)
{
    const unsigned char *base = NULL, *end = NULL;
    size_t in_batch = 0;
    for (size_t k = 0; k < s->n; k++) {
        bool joined = k > 0 && s->buf[k] == end && s->size[k - 1] <= SMALL && s->size[k] <= SMALL &&
                      in_batch < TPS_PREFETCH_BATCH;
        if (!joined) {
            base = end = s->buf[k];
            in_batch = 0;
        }
        in_batch++;
        CHECK(in_batch <= TPS_PREFETCH_BATCH);
        if (!s->mapped[k]) end += s->size[k];
        CHECK((size_t)(end - base) <= CAP);
    }
}

static void mixed(stream *s)
{
    uint64_t seed = 7;
    memset(s, 0, sizeof *s);
    s->n = MAXCHUNKS;
    s->fail_at = s->n;
    for (size_t k = 0; k < s->n; k++) {
        double u = tps_test_uniform(&seed);
        s->size[k] = u < 0.05 ? CAP : u < 0.1 ? SMALL + 1 : u < 0.15 ? SMALL : 1 + (size_t)(u * 200);
        s->mapped[k] = tps_test_uniform(&seed) < 0.2;
    }
    for (size_t k = 1000; k < 1600; k++) { /* a run longer than a batch's chunk count */
        s->size[k] = 1;
        s->mapped[k] = false;
    }
}

TEST(prefetch_batches_keep_order_bytes_and_crc)
{
    static stream s;
    for (int nslots = 1; nslots <= 8; nslots *= 2) {
        mixed(&s);
        tps_status st;
        CHECK_EQ_U64(drain(&s, nslots, &st), s.n);
        CHECK(st == TPS_OK);
        check_packing(&s);
    }
}

TEST(prefetch_batches_fill_a_slot)
{
    static stream s;
    memset(&s, 0, sizeof s);
    s.n = 3 * TPS_PREFETCH_BATCH; /* small chunks that fill a slot's bytes before its count */
    s.fail_at = s.n;
    for (size_t k = 0; k < s.n; k++) s.size[k] = SMALL;
    tps_status st;
    CHECK_EQ_U64(drain(&s, 2, &st), s.n);
    CHECK(st == TPS_OK);
    /* Sixteen to a slot, not one: within each run of CAP / SMALL chunks every chunk follows
     * the one before it in the same buffer.  (Where a batch starts is not told by addresses:
     * an allocator may place two slots' buffers back to back, as ThreadSanitizer's does.) */
    size_t packed = 0;
    for (size_t k = 0; k < s.n; k++) packed += k % (CAP / SMALL) == 0 || s.buf[k] == s.buf[k - 1] + SMALL;
    CHECK_EQ_U64(packed, s.n);
}

TEST(prefetch_failure_inside_a_batch_comes_in_order)
{
    static stream s;
    memset(&s, 0, sizeof s);
    s.n = 40;
    s.fail_at = 5;
    for (size_t k = 0; k < s.n; k++) s.size[k] = 10;
    tps_status st;
    CHECK_EQ_U64(drain(&s, 4, &st), 5);
    CHECK(st == TPS_EIO);
}

int main(void)
{
    RUN(prefetch_batches_keep_order_bytes_and_crc);
    RUN(prefetch_batches_fill_a_slot);
    RUN(prefetch_failure_inside_a_batch_comes_in_order);
    return tps_test_done();
}
