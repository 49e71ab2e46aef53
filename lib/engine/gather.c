#include "gather.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../base/crc.h"
#include "../base/iocache.h"
#include "../partition/spans.h"
#include "prefetch.h"

#define CHUNK (4u << 20)
/* Chunks handed from the reader thread: small enough to still be in the shared cache when
 * the checksum reads them (a 4 MiB chunk goes out to memory and back, halving throughput). */
#define STREAM_CHUNK (512u << 10)
#define STREAM_SLOTS 8
/* Row pieces per preadv: a dimension-1 cut holds one small piece per row on each rank. */
#define MAX_IOV 1024

typedef struct walk {
    tps_shardset *ss;
    const tps_manifest_tensor *t;
    const tps_gather_hooks *h;
    const tps_index **ix;
    const tps_tensor **x;
    uLong *rcrc;
    unsigned char *a, *b;
    bool *reported; /* per rank: a finding was already reported for this tensor */
} walk;

static void finding(walk *wk, uint64_t r, const char *what)
{
    if (wk->reported[r] || !wk->h || !wk->h->on_finding) return;
    wk->reported[r] = true;
    char msg[1400];
    snprintf(msg, sizeof msg, "tensor '%.400s': %s", wk->t->name, what);
    wk->h->on_finding(wk->h->arg, msg);
}

/* Reads n bytes of rank r's tensor at rank offset into buf, feeding that rank's CRC. */
static tps_status rank_read(walk *wk, uint64_t r, uint64_t off, unsigned char *buf, size_t n, tps_error *err)
{
    tps_status st = tps_tensor_read(wk->ix[r], wk->x[r], off, buf, n, err);
    if (st == TPS_OK) wk->rcrc[r] = tps_crc32((uint32_t)wk->rcrc[r], buf, n);
    return st;
}

/* One of rank r's pieces of a row, in the rank's own byte order. */
typedef struct local_piece {
    uint64_t off;  /* within the rank's slab */
    size_t span;   /* index into sp->span */
    uint32_t j;    /* which owner of the span rank r is (0: the one that gives the global bytes) */
} local_piece;

static int cmp_local(const void *a, const void *b)
{
    const local_piece *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Tensors cut along a later dimension have many short rows (slabs): gather a block of rows
 * at a time, each rank's block with one preadv scattering its row pieces straight to their
 * places in the global block (replica and padding bytes go to a side buffer to be checked),
 * instead of one read per piece.  Returns 1 in *handled when it applied. */
static tps_status gather_rows(walk *wk, const tps_spans *sp, uint64_t *gcrc, bool *handled, tps_error *err)
{
    uint64_t T = wk->ss->m->tp;
    tps_status st = TPS_OK;
    *handled = false;
    size_t nent = 0;
    for (size_t k = 0; k < sp->nspans; k++) nent += sp->span[k].nowners;
    local_piece *lp = calloc(nent + 1, sizeof *lp);
    size_t *first = calloc(T + 1, sizeof *first);
    struct iovec *iov = malloc(MAX_IOV * sizeof *iov);
    if (!lp || !first || !iov) {
        st = tps_fail_oom(err, "gathering a tensor");
        goto cleanup;
    }
    /* Per rank, its pieces in rank order; the side bytes (replicas, padding) one row needs. */
    uint64_t side = 0;
    size_t most = 1, n = 0;
    for (uint64_t r = 0; r < T; r++) {
        first[r] = n;
        for (size_t k = 0; k < sp->nspans; k++)
            for (uint32_t j = 0; j < sp->span[k].nowners; j++)
                if (sp->owner[sp->span[k].owner0 + j] == r) {
                    lp[n++] = (local_piece){sp->owner_offset[sp->span[k].owner0 + j], k, j};
                    if (j) side += sp->span[k].end - sp->span[k].begin;
                }
        qsort(lp + first[r], n - first[r], sizeof *lp, cmp_local);
        side += sp->rank_pad_bytes[r];
        if (n - first[r] + 1 > most) most = n - first[r] + 1;
        if (wk->x[r]->reader_data) goto cleanup; /* not a plain file range: the general path */
    }
    first[T] = n;
    uint64_t rows = CHUNK / sp->slab_bytes;
    if (side && CHUNK / side < rows) rows = CHUNK / side;
    if (MAX_IOV / most < rows) rows = MAX_IOV / most;
    if (rows < 2) goto cleanup;
    *handled = true;
    for (uint64_t o0 = 0; o0 < sp->outer; o0 += rows) {
        uint64_t nr = sp->outer - o0 < rows ? sp->outer - o0 : rows;
        uint64_t bside = 0; /* side bytes of the ranks before r */
        for (uint64_t r = 0; r < T; r++) {
            for (uint64_t pass = 0; pass < 2; pass++) { /* read, then checksum in rank order */
                int ni = 0;
                uint64_t b0 = bside;
                for (uint64_t o = 0; o < nr; o++) {
                    for (size_t e = first[r]; e < first[r + 1]; e++) {
                        const tps_span *s = &sp->span[lp[e].span];
                        size_t len = (size_t)(s->end - s->begin);
                        void *dst = lp[e].j ? wk->b + b0 : wk->a + o * sp->slab_bytes + s->begin;
                        if (lp[e].j) b0 += len;
                        iov[ni++] = (struct iovec){dst, len};
                    }
                    if (sp->rank_pad_bytes[r]) {
                        iov[ni++] = (struct iovec){wk->b + b0, (size_t)sp->rank_pad_bytes[r]};
                        b0 += sp->rank_pad_bytes[r];
                    }
                }
                if (pass == 0) {
                    const tps_source_file *f = &wk->ix[r]->files[wk->x[r]->file];
                    TPS_CHECK(tps_preadv_full(f->fd, f->path, iov, ni, wk->x[r]->offset + o0 * sp->rank_slab_bytes[r],
                                              err));
                } else {
                    for (int q = 0; q < ni; q++)
                        wk->rcrc[r] = tps_crc32((uint32_t)wk->rcrc[r], iov[q].iov_base, iov[q].iov_len);
                    bside = b0;
                }
            }
        }
        /* Replicas against the first owner's bytes, padding against zero: the side bytes were
         * laid out rank by rank in the order above, so walk them the same way. */
        uint64_t b0 = 0;
        for (uint64_t r = 0; r < T; r++)
            for (uint64_t o = 0; o < nr; o++) {
                for (size_t e = first[r]; e < first[r + 1]; e++) {
                    if (!lp[e].j) continue;
                    const tps_span *s = &sp->span[lp[e].span];
                    size_t len = (size_t)(s->end - s->begin);
                    if (memcmp(wk->a + o * sp->slab_bytes + s->begin, wk->b + b0, len) != 0) {
                        char what[256];
                        snprintf(what, sizeof what,
                                 "replicas differ: ranks %u and %u hold different bytes for global bytes from %llu",
                                 (unsigned)sp->owner[s->owner0], (unsigned)r,
                                 (unsigned long long)((o0 + o) * sp->slab_bytes + s->begin));
                        finding(wk, r, what);
                    }
                    b0 += len;
                }
                for (uint64_t z = 0; z < sp->rank_pad_bytes[r]; z++)
                    if (wk->b[b0 + z]) {
                        char what[256];
                        snprintf(what, sizeof what, "rank %llu's padding is not zero at its byte %llu",
                                 (unsigned long long)r,
                                 (unsigned long long)((o0 + o + 1) * sp->rank_slab_bytes[r] - sp->rank_pad_bytes[r] + z));
                        finding(wk, r, what);
                        break;
                    }
                b0 += sp->rank_pad_bytes[r];
            }
        size_t nb = (size_t)(nr * sp->slab_bytes);
        *gcrc = tps_crc32((uint32_t)*gcrc, wk->a, nb);
        if (wk->h && wk->h->on_bytes) TPS_CHECK(wk->h->on_bytes(wk->h->arg, o0 * sp->slab_bytes, wk->a, nb, err));
    }
cleanup:
    free(lp);
    free(first);
    free(iov);
    return st;
}

/* The global bytes of a tensor with long slabs, chunk by chunk from each span's first
 * owner, in global order: what the reader thread produces (lib/engine/prefetch.h). */
typedef struct first_owner_stream {
    walk *wk;
    const tps_spans *sp;
    uint64_t o, w;
    size_t k;
} first_owner_stream;

static tps_status fill_first(void *arg, unsigned char *buf, size_t cap, tps_chunk *c, tps_error *err)
{
    size_t *n = &c->n;
    first_owner_stream *fs = arg;
    const tps_spans *sp = fs->sp;
    while (fs->o < sp->outer && fs->k < sp->nspans && fs->w >= sp->span[fs->k].end) {
        if (++fs->k == sp->nspans) {
            fs->k = 0;
            fs->o++;
        }
        fs->w = sp->span[fs->k].begin;
    }
    if (fs->o >= sp->outer || sp->slab_bytes == 0) {
        c->end = true;
        return TPS_OK;
    }
    const tps_span *s = &sp->span[fs->k];
    *n = s->end - fs->w < cap ? (size_t)(s->end - fs->w) : cap;
    uint32_t r0 = sp->owner[s->owner0];
    uint64_t base = fs->o * sp->rank_slab_bytes[r0] + sp->owner_offset[s->owner0] + (fs->w - s->begin);
    fs->w += *n;
    return tps_tensor_read(fs->wk->ix[r0], fs->wk->x[r0], base, buf, *n, err);
}

tps_status tps_gather_tensor(tps_shardset *ss, const tps_manifest_tensor *t, const tps_gather_hooks *h,
                             uint32_t *global_crc, uint32_t *rank_crc, tps_error *err)
{
    uint64_t T = ss->m->tp;
    tps_spans sp;
    tps_status st = tps_spans_build(t->part, t->dtype, t->ndim, t->shape, T, &sp, err);
    if (st) return st;
    tps_prefetch *pf = NULL;
    walk wk = {ss, t, h, calloc(T, sizeof(tps_index *)), calloc(T, sizeof(tps_tensor *)), calloc(T, sizeof(uLong)),
               malloc(CHUNK), malloc(CHUNK), calloc(T, sizeof(bool))};
    if (!wk.ix || !wk.x || !wk.rcrc || !wk.a || !wk.b || !wk.reported) {
        st = tps_fail_oom(err, "gathering a tensor");
        goto cleanup;
    }
    for (uint64_t r = 0; r < T; r++) {
        TPS_CHECK(tps_shardset_open_rank(ss, r, &wk.ix[r], err));
        wk.x[r] = tps_index_find(wk.ix[r], t->name);
        wk.rcrc[r] = 0;
    }
    uLong gcrc = 0;
    bool rows_done = false;
    if (sp.outer > 1 && sp.slab_bytes > 0 && sp.slab_bytes <= CHUNK / 2) TPS_CHECK(gather_rows(&wk, &sp, &gcrc, &rows_done, err));
    first_owner_stream fs = {&wk, &sp, 0, sp.nspans ? sp.span[0].begin : 0, 0};
    /* Several chunks: read them in a second thread while this one checksums and hands out. */
    if (!rows_done && t->nbytes > CHUNK && !(h && h->in_caller_thread))
        TPS_CHECK(tps_prefetch_start(fill_first, NULL, &fs, STREAM_CHUNK, STREAM_SLOTS, false, &pf, err));
    for (uint64_t o = 0; !rows_done && o < sp.outer && sp.slab_bytes > 0; o++) {
        for (size_t k = 0; k < sp.nspans; k++) {
            const tps_span *s = &sp.span[k];
            for (uint64_t w = s->begin; w < s->end;) {
                size_t n = s->end - w < STREAM_CHUNK ? (size_t)(s->end - w) : STREAM_CHUNK;
                uint32_t r0 = sp.owner[s->owner0];
                /* The first owner's bytes are the global bytes: checksum them once for both. */
                const unsigned char *a = wk.a;
                size_t got = 0;
                uint32_t c = 0;
                if (pf) TPS_CHECK(tps_prefetch_take(pf, &a, &got, &c, err));
                else {
                    tps_chunk ch = {wk.a, 0, 0, false, false};
                    TPS_CHECK(fill_first(&fs, wk.a, STREAM_CHUNK, &ch, err));
                    got = ch.n;
                }
                if (!a || got != n) {
                    st = tps_fail(err, TPS_EIO, "internal: the read stream of '%s' is out of step", t->name);
                    goto cleanup;
                }
                c = tps_crc32(0, a, got);
                wk.rcrc[r0] = crc32_combine(wk.rcrc[r0], c, (z_off_t)n);
                gcrc = crc32_combine(gcrc, c, (z_off_t)n);
                for (uint32_t j = 1; j < s->nowners; j++) {
                    uint32_t r = sp.owner[s->owner0 + j];
                    uint64_t rb = o * sp.rank_slab_bytes[r] + sp.owner_offset[s->owner0 + j] + (w - s->begin);
                    TPS_CHECK(rank_read(&wk, r, rb, wk.b, n, err));
                    if (memcmp(a, wk.b, n) != 0) {
                        char what[256];
                        snprintf(what, sizeof what, "replicas differ: ranks %u and %u hold different bytes for global bytes from %llu",
                                 (unsigned)r0, (unsigned)r, (unsigned long long)(o * sp.slab_bytes + w));
                        finding(&wk, r, what);
                    }
                }
                if (h && h->on_bytes) TPS_CHECK(h->on_bytes(h->arg, o * sp.slab_bytes + w, a, n, err));
                if (pf) tps_prefetch_done(pf);
                w += n;
            }
        }
        for (uint64_t r = 0; r < T; r++) {
            uint64_t pad = sp.rank_pad_bytes[r], at = (o + 1) * sp.rank_slab_bytes[r] - pad;
            while (pad > 0) {
                size_t n = pad < CHUNK ? (size_t)pad : CHUNK;
                TPS_CHECK(rank_read(&wk, r, at, wk.b, n, err));
                for (size_t i = 0; i < n; i++)
                    if (wk.b[i]) {
                        char what[256];
                        snprintf(what, sizeof what, "rank %llu's padding is not zero at its byte %llu",
                                 (unsigned long long)r, (unsigned long long)(at + i));
                        finding(&wk, r, what);
                        break;
                    }
                pad -= n;
                at += n;
            }
        }
    }
    if (global_crc) *global_crc = (uint32_t)gcrc;
    for (uint64_t r = 0; rank_crc && r < T; r++) rank_crc[r] = (uint32_t)wk.rcrc[r];
cleanup:
    tps_prefetch_stop(pf); /* before the buffers and indexes it reads with */
    free(wk.ix);
    free(wk.x);
    free(wk.rcrc);
    free(wk.a);
    free(wk.b);
    free(wk.reported);
    tps_spans_release(&sp);
    return st;
}
