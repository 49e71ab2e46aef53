/* The LM head by vocabulary chunks (verify/driver/head_rows.h). */
#include <stdlib.h>
#include <string.h>

#include "../load/finite.h"
#include "../math/ops.h"
#include "head_rows.h"

/* A chunk's float64 copy (the reference's) is at most this many bytes. */
#define CHUNK_BYTES ((uint64_t)32 << 20)

static uint64_t chunk_rows(uint64_t hidden)
{
    uint64_t row = hidden ? hidden * 8 : 1;
    return CHUNK_BYTES / row ? CHUNK_BYTES / row : 1;
}

bool tps_vhead_streams(const tps_vsource *src, const char *name)
{
    if (!src->rows || !name || !src->has(src->ctx, name)) return false;
    static const char *const suffixes[] = {"_scale_inv", "_scale"};
    size_t n = strlen(name);
    bool scaled = false;
    for (size_t i = 0; i < 2 && !scaled; i++) {
        char *s = malloc(n + strlen(suffixes[i]) + 1);
        if (!s) return false;
        memcpy(s, name, n);
        strcpy(s + n, suffixes[i]);
        scaled = src->has(src->ctx, s);
        free(s);
    }
    return !scaled;
}

/* With check, a chunk (rows from row0 of a [vocab, hidden] tensor) holding NaN or Inf fails,
 * named as a whole load names it: the place in the whole tensor. */
static tps_status chunk_finite(bool check, uint64_t row0, uint64_t vocab, uint64_t hidden, const tps_vt *part,
                               tps_error *err)
{
    tps_vfinite f;
    if (!check) return TPS_OK;
    tps_vt_scan(part, &f);
    if (!f.count) return TPS_OK;
    char what[600];
    uint64_t shape[2] = {vocab, hidden};
    f.first += row0 * hidden;
    tps_vfinite_describe(&f, part->name, shape, 2, what, sizeof what);
    return tps_fail(err, TPS_EINVALID, "the source: %s: %s", what, tps_vfinite_why);
}

typedef struct ref_chunks {
    uint64_t vocab, hidden;
    size_t n;
    const double *xn;
    double *logits;
    bool finite_check;
    uint64_t seen;
} ref_chunks;

static tps_status ref_chunk(void *arg, uint64_t row0, const tps_vt *part, tps_error *err)
{
    ref_chunks *c = arg;
    if (part->ndim != 2 || part->shape[1] != c->hidden || row0 + part->shape[0] > c->vocab)
        return tps_fail(err, TPS_EINVALID, "%s: the LM head must be [%llu, %llu]", part->name,
                        (unsigned long long)c->vocab, (unsigned long long)c->hidden);
    if (!tps_vdtype_supported(part->dtype))
        return tps_fail(err, TPS_EINVALID, "%s: dtype %s is not one verify computes in", part->name,
                        tps_dtype_name(part->dtype));
    tps_status st = chunk_finite(c->finite_check, row0, c->vocab, c->hidden, part, err);
    if (st != TPS_OK) return st;
    c->seen += part->shape[0];
    return tps_vlogits_f64(part, c->n, c->xn, c->logits + row0, (size_t)c->vocab, err);
}

tps_status tps_vhead_ref_logits(const tps_vsource *src, const char *name, uint64_t vocab, uint64_t hidden, size_t n,
                                const double *xn, bool finite_check, double *logits, tps_error *err)
{
    ref_chunks c = {vocab, hidden, n, xn, logits, finite_check, 0};
    tps_status st = src->rows(src->ctx, name, chunk_rows(hidden), ref_chunk, &c, err);
    if (st == TPS_OK && c.seen != vocab)
        st = tps_fail(err, TPS_EINVALID, "%s: the LM head must be [%llu, %llu]", name, (unsigned long long)vocab,
                      (unsigned long long)hidden);
    return st;
}

/* A rank's chunk counted into *s (rows, width, the loosest dtype) for the caller's shape check
 * after the walk; *usable when it is [rows, hidden] and fits (fits: the caller's row bound), so
 * that a misshapen tensor is reported once, by that check, not chunk by chunk. */
static tps_status see_chunk(vhead_seen *s, const tps_vt *part, uint64_t hidden, bool fits, bool *usable,
                            tps_error *err)
{
    s->rows += part->shape[0];
    s->cols = part->ndim == 2 ? part->shape[1] : 0;
    if (tps_verify_rtol(part->dtype) > tps_verify_rtol(s->dtype)) s->dtype = part->dtype;
    *usable = part->ndim == 2 && part->shape[1] == hidden && fits;
    if (*usable && !tps_vdtype_supported(part->dtype))
        return tps_fail(err, TPS_EINVALID, "%s: dtype %s is not one verify computes in", part->name,
                        tps_dtype_name(part->dtype));
    return TPS_OK;
}

typedef struct rank_chunks {
    uint64_t rows, hidden;
    size_t n, ldy;
    const float *xn;
    float *y;
    tps_vdev_rank *dev;
    vhead_seen *seen;
} rank_chunks;

static tps_status rank_chunk(void *arg, uint64_t row0, const tps_vt *part, tps_error *err)
{
    rank_chunks *c = arg;
    bool usable;
    tps_status st = see_chunk(c->seen, part, c->hidden, row0 + part->shape[0] <= c->rows, &usable, err);
    if (st || !usable) return st;
    tps_vt t = *part; /* the source owns the bytes; the device copy is this chunk's own */
    t.dev = NULL;
    st = c->dev ? tps_vdev_upload(c->dev, &t, err) : TPS_OK;
    if (st == TPS_OK) st = tps_vlogits_f32(&t, c->n, c->xn, c->y + row0, c->ldy, err);
    if (t.dev) t.dev->ops->release(&t);
    return st;
}

tps_status tps_vhead_rank_logits(const tps_vsource *src, const char *name, uint64_t rows, uint64_t hidden, size_t n,
                                 const float *xn, tps_vdev_rank *dev, float *y, size_t ldy, vhead_seen *seen,
                                 tps_error *err)
{
    seen->rows = seen->cols = 0;
    seen->dtype = TPS_DT_F64;
    rank_chunks c = {rows, hidden, n, ldy, xn, y, dev, seen};
    return src->rows(src->ctx, name, chunk_rows(hidden), rank_chunk, &c, err);
}

typedef struct pick_chunks {
    uint64_t first, hidden, vocab;
    size_t n;
    const uint64_t *ids;
    bool finite_check;
    tps_vt *sel;
    uint64_t *at;
    vhead_seen *seen;
} pick_chunks;

static tps_status pick_chunk(void *arg, uint64_t row0, const tps_vt *part, tps_error *err)
{
    pick_chunks *c = arg;
    bool usable;
    tps_status st = see_chunk(c->seen, part, c->hidden, true, &usable, err);
    if (st || !usable) return st;
    st = chunk_finite(c->finite_check, row0, c->vocab, c->hidden, part, err);
    if (st != TPS_OK) return st;
    size_t rb = (size_t)c->hidden * (tps_dtype_bits(part->dtype) / 8); /* a chunk of this many bytes a row was read */
    tps_vt *sel = c->sel;
    if (!sel->data) {
        if (!(sel->data = calloc(c->n + 1, rb)) || !(sel->name = strdup(part->name))) return tps_fail_oom(err, part->name);
        sel->dtype = part->dtype;
        sel->ndim = 2;
        sel->shape[0] = c->n;
        sel->shape[1] = c->hidden;
        sel->nelem = (uint64_t)c->n * c->hidden;
    }
    for (size_t t = 0; t < c->n; t++) {
        uint64_t id = c->ids[t];
        if (id < c->first + row0 || id - c->first - row0 >= part->shape[0]) continue;
        memcpy((unsigned char *)sel->data + t * rb, (const unsigned char *)part->data + (id - c->first - row0) * rb, rb);
        c->at[t] = t;
    }
    return TPS_OK;
}

tps_status tps_vembed_pick(const tps_vsource *src, const char *name, uint64_t first, uint64_t hidden, size_t n,
                           const uint64_t *ids, bool finite_check, tps_vt *sel, uint64_t *at, vhead_seen *seen,
                           tps_error *err)
{
    memset(sel, 0, sizeof *sel);
    seen->rows = seen->cols = 0;
    seen->dtype = TPS_DT_F64;
    for (size_t t = 0; t < n; t++) at[t] = n;
    uint64_t shape[TPS_MAX_DIMS] = {0};
    uint64_t vocab = src->dims && src->dims(src->ctx, name, shape) == 2 ? shape[0] : 0; /* for a message only */
    pick_chunks c = {first, hidden, vocab, n, ids, finite_check, sel, at, seen};
    tps_status st = src->rows(src->ctx, name, chunk_rows(hidden), pick_chunk, &c, err);
    if (st != TPS_OK) tps_vt_release(sel);
    return st;
}
