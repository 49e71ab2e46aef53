#include "prefetch.h"

#include <pthread.h>
#include <stdlib.h>

#include "../base/crc.h"

/* A batch: chunks c[0..nc) in order, then, if st is not TPS_OK, fill()'s failure (the end
 * of the stream is a chunk with end set). */
typedef struct slot {
    unsigned char *buf;
    tps_chunk c[TPS_PREFETCH_BATCH];
    int nc;
    tps_status st;
    tps_error err;
} slot;

struct tps_prefetch {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    slot *s;
    int nslots;
    size_t cap;
    uint64_t produced, consumed;
    /* Who sleeps on cv.  Each side wakes the other only when half the slots changed hands
     * (or at the end): a stream of tiny chunks (a many-tensor model's), batched many to a
     * slot, then costs one wake-up per nslots/2 batches, and big chunks still overlap. */
    bool reader_waits, consumer_waits;
    bool stop, started, checksum;
    tps_fill_fn fill;
    tps_peek_fn peek;
    void *ctx;
    /* The consumer's own: whether it holds slot consumed, and the next chunk in it to take. */
    bool holding;
    int next;
};

static uint64_t half(const tps_prefetch *p)
{
    return p->nslots > 1 ? (uint64_t)p->nslots / 2 : 1;
}

/* A chunk small enough to share a slot with others. */
static bool small(const tps_prefetch *p, size_t n)
{
    return n <= p->cap / 16;
}

/* Fills sl with one chunk, or with a run of small ones that fits its buffer (each read into
 * the buffer after the last); true when the stream ended or failed in it. */
static bool fill_slot(tps_prefetch *p, slot *sl)
{
    size_t used = 0;
    sl->nc = 0;
    tps_error_clear(&sl->err);
    for (;;) {
        tps_chunk *c = &sl->c[sl->nc];
        *c = (tps_chunk){sl->buf + used, 0, 0, false, false};
        /* The room left, not cap: should peek() ever disagree with fill(), a chunk comes out
         * shorter (the consumer's out-of-step check), never past the slot's buffer. */
        sl->st = p->fill(p->ctx, sl->buf + used, p->cap - used, c, &sl->err);
        if (sl->st) return true;
        sl->nc++;
        if (c->end) return true;
        if (p->checksum && !c->have_crc) c->crc = tps_crc32(0, c->data, c->n);
        if (c->data == sl->buf + used) used += c->n; /* a mapped chunk takes no room */
        /* Another chunk joins only when peek() promises it is small and fits what is left. */
        if (!p->peek || !small(p, c->n) || sl->nc == TPS_PREFETCH_BATCH) return false;
        size_t next = p->peek(p->ctx, p->cap);
        if (next == 0 || !small(p, next) || next > p->cap - used) return false;
    }
}

static void *run(void *arg)
{
    tps_prefetch *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->produced - p->consumed == (uint64_t)p->nslots) {
            p->reader_waits = true;
            pthread_cond_wait(&p->cv, &p->mu);
        }
        p->reader_waits = false;
        bool stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) return NULL;
        slot *sl = &p->s[p->produced % (uint64_t)p->nslots];
        bool last = fill_slot(p, sl);
        pthread_mutex_lock(&p->mu);
        p->produced++;
        if (p->consumer_waits && (last || p->produced - p->consumed >= half(p))) pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (last) return NULL;
    }
}

tps_status tps_prefetch_start(tps_fill_fn fill, tps_peek_fn peek, void *ctx, size_t cap, int nslots, bool checksum,
                              tps_prefetch **out, tps_error *err)
{
    *out = NULL;
    tps_prefetch *p = calloc(1, sizeof *p);
    if (!p || !(p->s = calloc((size_t)nslots, sizeof *p->s))) {
        free(p);
        return tps_fail_oom(err, "starting the reader thread");
    }
    p->nslots = nslots;
    p->cap = cap;
    p->checksum = checksum;
    p->fill = fill;
    p->peek = peek;
    p->ctx = ctx;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int k = 0; k < nslots; k++)
        if (!(p->s[k].buf = malloc(cap))) {
            tps_prefetch_stop(p);
            return tps_fail_oom(err, "allocating read buffers");
        }
    if (pthread_create(&p->th, NULL, run, p) != 0) {
        tps_prefetch_stop(p);
        return tps_fail(err, TPS_EIO, "cannot start the reader thread");
    }
    p->started = true;
    *out = p;
    return TPS_OK;
}

tps_status tps_prefetch_take(tps_prefetch *p, const unsigned char **buf, size_t *n, uint32_t *crc, tps_error *err)
{
    if (!p->holding) { /* the lock only between batches */
        pthread_mutex_lock(&p->mu);
        while (p->produced == p->consumed) {
            p->consumer_waits = true;
            pthread_cond_wait(&p->cv, &p->mu);
        }
        p->consumer_waits = false;
        pthread_mutex_unlock(&p->mu);
        p->holding = true;
        p->next = 0;
    }
    const slot *sl = &p->s[p->consumed % (uint64_t)p->nslots];
    *buf = NULL;
    *n = 0;
    if (p->next == sl->nc) { /* past its chunks: the slot ends in fill()'s failure */
        *err = sl->err;
        return sl->st;
    }
    const tps_chunk *c = &sl->c[p->next];
    if (!c->end) {
        *buf = c->data;
        *n = c->n;
        *crc = c->crc;
    }
    return TPS_OK;
}

void tps_prefetch_done(tps_prefetch *p)
{
    const slot *sl = &p->s[p->consumed % (uint64_t)p->nslots];
    if (++p->next < sl->nc || sl->st) return; /* a slot that failed is never given back: the reader has stopped */
    p->holding = false;
    pthread_mutex_lock(&p->mu);
    p->consumed++;
    if (p->reader_waits && p->produced - p->consumed <= (uint64_t)p->nslots - half(p)) pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void tps_prefetch_stop(tps_prefetch *p)
{
    if (!p) return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->th, NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    for (int k = 0; k < p->nslots; k++) free(p->s[k].buf);
    free(p->s);
    free(p);
}
