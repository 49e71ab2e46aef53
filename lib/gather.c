#include "gather.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "spans.h"

#define CHUNK (4u << 20)

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
    if (st == TPS_OK) wk->rcrc[r] = crc32_z(wk->rcrc[r], buf, n);
    return st;
}

tps_status tps_gather_tensor(tps_shardset *ss, const tps_manifest_tensor *t, const tps_gather_hooks *h,
                             uint32_t *global_crc, uint32_t *rank_crc, tps_error *err)
{
    uint64_t T = ss->m->tp;
    tps_spans sp;
    tps_status st = tps_spans_build(&t->part, t->dtype, t->ndim, t->shape, T, &sp, err);
    if (st) return st;
    walk wk = {ss, t, h, calloc(T, sizeof(tps_index *)), calloc(T, sizeof(tps_tensor *)), calloc(T, sizeof(uLong)),
               malloc(CHUNK), malloc(CHUNK), calloc(T, sizeof(bool))};
    if (!wk.ix || !wk.x || !wk.rcrc || !wk.a || !wk.b || !wk.reported) {
        st = tps_fail_oom(err, "gathering a tensor");
        goto cleanup;
    }
    for (uint64_t r = 0; r < T; r++) {
        TPS_CHECK(tps_shardset_open_rank(ss, r, &wk.ix[r], err));
        wk.x[r] = tps_index_find(wk.ix[r], t->name);
        wk.rcrc[r] = crc32(0, NULL, 0);
    }
    uLong gcrc = crc32(0, NULL, 0);
    for (uint64_t o = 0; o < sp.outer && sp.slab_bytes > 0; o++) {
        for (size_t k = 0; k < sp.nspans; k++) {
            const tps_span *s = &sp.span[k];
            for (uint64_t w = s->begin; w < s->end;) {
                size_t n = s->end - w < CHUNK ? (size_t)(s->end - w) : CHUNK;
                uint32_t r0 = sp.owner[s->owner0];
                uint64_t base = o * sp.rank_slab_bytes[r0] + sp.owner_offset[s->owner0] + (w - s->begin);
                TPS_CHECK(rank_read(&wk, r0, base, wk.a, n, err));
                for (uint32_t j = 1; j < s->nowners; j++) {
                    uint32_t r = sp.owner[s->owner0 + j];
                    uint64_t rb = o * sp.rank_slab_bytes[r] + sp.owner_offset[s->owner0 + j] + (w - s->begin);
                    TPS_CHECK(rank_read(&wk, r, rb, wk.b, n, err));
                    if (memcmp(wk.a, wk.b, n) != 0) {
                        char what[256];
                        snprintf(what, sizeof what, "replicas differ: ranks %u and %u hold different bytes for global bytes from %llu",
                                 (unsigned)r0, (unsigned)r, (unsigned long long)(o * sp.slab_bytes + w));
                        finding(&wk, r, what);
                    }
                }
                gcrc = crc32_z(gcrc, wk.a, n);
                if (h && h->on_bytes) TPS_CHECK(h->on_bytes(h->arg, o * sp.slab_bytes + w, wk.a, n, err));
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
    free(wk.ix);
    free(wk.x);
    free(wk.rcrc);
    free(wk.a);
    free(wk.b);
    free(wk.reported);
    tps_spans_release(&sp);
    return st;
}
