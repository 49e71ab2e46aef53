#include "spans.h"

#include <stdlib.h>
#include <string.h>

#include "../base/checked.h"

void tps_spans_release(tps_spans *s)
{
    free(s->span);
    free(s->owner);
    free(s->owner_offset);
    free(s->rank_slab_bytes);
    free(s->rank_pad_bytes);
    memset(s, 0, sizeof *s);
}

typedef struct raw_piece {
    uint64_t begin, end, rank, local;
} raw_piece;

static int cmp_piece(const void *a, const void *b)
{
    const raw_piece *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

tps_status tps_spans_build(const tps_partition *p, tps_dtype dtype, int ndim, const uint64_t *shape, uint64_t T,
                           tps_spans *out, tps_error *err)
{
    memset(out, 0, sizeof *out);
    out->T = T;
    uint64_t bits = tps_dtype_bits(dtype), nelem, total_bits;
    if (!tps_prod_u64(shape, ndim, &nelem) || !tps_mul_u64(nelem, bits, &total_bits))
        return tps_fail(err, TPS_EINVALID, "tensor shape overflows");
    int dim = p->replicated ? 0 : p->dim;
    uint64_t outer = 1, inner = 1;
    for (int d = 0; d < dim && !p->replicated; d++) outer *= shape[d]; /* <= nelem: cannot overflow */
    for (int d = dim + 1; d < ndim; d++) inner *= shape[d];
    uint64_t D = ndim > 0 && !p->replicated ? shape[dim] : 1;
    uint64_t unit_bits = inner * bits; /* bits per index along dim; <= total_bits unless D == 0 */
    if (p->replicated || ndim == 0) {
        outer = 1;
        D = 1;
        unit_bits = total_bits;
    }
    out->outer = outer;
    out->slab_bytes = (D * unit_bits) / 8;
    size_t maxp = (size_t)T * (p->replicated ? 1 : (size_t)p->nseg);
    raw_piece *rp = calloc(maxp ? maxp : 1, sizeof *rp);
    out->rank_slab_bytes = calloc(T, sizeof(uint64_t));
    out->rank_pad_bytes = calloc(T, sizeof(uint64_t));
    out->span = calloc(maxp ? maxp : 1, sizeof *out->span);
    out->owner = calloc(maxp ? maxp : 1, sizeof *out->owner);
    out->owner_offset = calloc(maxp ? maxp : 1, sizeof *out->owner_offset);
    if (!rp || !out->rank_slab_bytes || !out->rank_pad_bytes || !out->span || !out->owner || !out->owner_offset) {
        free(rp);
        tps_spans_release(out);
        return tps_fail_oom(err, "planning byte ranges");
    }
    size_t np = 0;
    for (uint64_t r = 0; r < T; r++) {
        if (p->replicated || ndim == 0) {
            rp[np++] = (raw_piece){0, out->slab_bytes, r, 0};
            out->rank_slab_bytes[r] = out->slab_bytes;
            continue;
        }
        tps_slice sl;
        tps_partition_slice(p, T, r, &sl);
        uint64_t local = 0;
        for (int k = 0; k < sl.npieces; k++) {
            uint64_t b = sl.piece[k].start * unit_bits / 8, e = (sl.piece[k].start + sl.piece[k].len) * unit_bits / 8;
            rp[np++] = (raw_piece){b, e, r, local};
            local += e - b;
        }
        out->rank_pad_bytes[r] = sl.pad * unit_bits / 8;
        out->rank_slab_bytes[r] = local + out->rank_pad_bytes[r];
    }
    qsort(rp, np, sizeof *rp, cmp_piece);
    /* Replicas hold identical pieces; group them into one span with several owners. */
    size_t ns = 0;
    for (size_t i = 0; i < np; i++) {
        if (rp[i].begin == rp[i].end) continue;
        if (ns > 0 && out->span[ns - 1].begin == rp[i].begin) {
            if (out->span[ns - 1].end != rp[i].end) {
                free(rp);
                tps_spans_release(out);
                return tps_fail(err, TPS_EINVALID, "internal: overlapping pieces of different sizes");
            }
        } else {
            out->span[ns++] = (tps_span){rp[i].begin, rp[i].end, (uint32_t)i, 0};
        }
        tps_span *s = &out->span[ns - 1];
        out->owner[s->owner0 + s->nowners] = (uint32_t)rp[i].rank;
        out->owner_offset[s->owner0 + s->nowners] = rp[i].local;
        s->nowners++;
    }
    out->nspans = ns;
    free(rp);
    /* The spans must tile the slab exactly: anything else is a bug in the algebra. */
    uint64_t at = 0;
    for (size_t k = 0; k < ns; k++) {
        if (out->span[k].begin != at) {
            tps_spans_release(out);
            return tps_fail(err, TPS_EINVALID, "internal: pieces leave a gap or overlap at byte %llu", (unsigned long long)at);
        }
        at = out->span[k].end;
    }
    if (at != out->slab_bytes) {
        tps_spans_release(out);
        return tps_fail(err, TPS_EINVALID, "internal: pieces cover %llu of %llu slab bytes", (unsigned long long)at,
                        (unsigned long long)out->slab_bytes);
    }
    return TPS_OK;
}

const tps_span *tps_spans_find(const tps_spans *s, uint64_t w)
{
    size_t lo = 0, hi = s->nspans;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->span[mid].end <= w) lo = mid + 1;
        else if (s->span[mid].begin > w) hi = mid;
        else return &s->span[mid];
    }
    return NULL;
}
