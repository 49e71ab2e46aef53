/* Blocked rows (lib/targets/target_blocks.h, blocked:): a rank file holds a tensor's rank
 * slice with the two leading axes of [groups, B, block] swapped.  Both directions are the
 * same swap of an [X, Y, block] array, so a run never crosses a block: GPT-NeoX's blocks are
 * head_dim rows (head_dim * hidden elements), long runs that the copy engine and pread take
 * as they are. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "target_blocks.h"

#define TPS_CHECK_RET(x)          \
    do {                          \
        tps_status st_ = (x);     \
        if (st_) return st_;      \
    } while (0)

tps_status tps_target_blocked_geometry(const tps_manifest_tensor *t, uint64_t tp, uint64_t *groups,
                                       uint64_t *block_bytes, tps_error *err)
{
    const tps_partition *p = t->part;
    uint64_t B = t->target_blocks;
    uint64_t u = p->nseg == 1 ? p->seg[0].unit : 0;
    if (p->replicated || p->dim != 0 || p->nseg != 1 || p->pad || p->groups > 1 || t->ndim < 1 || B < 2 || !u ||
        u % B || t->shape[0] % u || t->target_transpose)
        return tps_fail(err, TPS_EINVALID,
                        "tensor '%s': blocked rows (%llu blocks) need a split of dimension 0 in one segment whose "
                        "unit divides into the blocks, unpadded and not transposed",
                        t->name, (unsigned long long)B);
    uint64_t G = t->shape[0] / u;
    if (tp == 0 || G % tp)
        return tps_fail(err, TPS_EINVALID,
                        "tensor '%s': its %llu groups of rows (heads) do not divide by tp %llu, and the engine holds "
                        "no replicated heads",
                        t->name, (unsigned long long)G, (unsigned long long)tp);
    *groups = G;
    *block_bytes = t->shape[0] ? t->nbytes / t->shape[0] * (u / B) : 0;
    return TPS_OK;
}

bool tps_target_permuted(const tps_manifest_tensor *t)
{
    return t->target_blocks || t->target_transpose || t->target_rope_halves;
}

bool tps_target_crc_from_source(const tps_manifest_tensor *t)
{
    return t->target_transpose || t->target_rope_halves;
}

/* A rope_halves tensor's head (its partition unit) in rows, and a row's bytes; 0 when its
 * partition cannot carry the permutation (split along dim 0 in whole heads of even rows). */
static uint64_t rope_head_rows(const tps_manifest_tensor *t, uint64_t *row_bytes)
{
    const tps_partition *p = t->part;
    uint64_t u = !p->replicated && p->nseg == 1 ? p->seg[0].unit : 0;
    if (p->dim != 0 || p->pad || p->groups > 1 || t->ndim < 1 || !t->shape[0] || u < 2 || u % 2 || t->shape[0] % u ||
        t->target_transpose || t->target_blocks)
        return 0;
    *row_bytes = t->nbytes / t->shape[0];
    return u;
}

tps_status tps_target_permute_check(const tps_manifest_tensor *t, uint64_t tp, tps_error *err)
{
    uint64_t rb;
    if (t->target_rope_halves && !rope_head_rows(t, &rb))
        return tps_fail(err, TPS_EINVALID,
                        "tensor '%s': rows reordered per head for RoPE (rope_halves) need a split of dimension 0 in "
                        "one segment of whole heads of an even head_dim, unpadded",
                        t->name);
    if (t->target_transpose && (t->ndim < 2 || t->ndim > 3 || t->part->pad || tps_dtype_bits(t->dtype) % 8))
        return tps_fail(err, TPS_EINVALID,
                        "tensor '%s': only an unpadded 2-D or 3-D tensor of whole-byte elements is written transposed",
                        t->name);
    uint64_t G, block;
    return t->target_blocks ? tps_target_blocked_geometry(t, tp, &G, &block, err) : TPS_OK;
}

/* A transpose swaps the last two dimensions; a 3-D tensor's leading one (GPT-OSS's experts)
 * is a batch of 2-D transposes. */
void tps_target_file_shape(const tps_manifest_tensor *t, uint64_t *shape)
{
    if (!t->target_transpose || t->ndim < 2) return;
    uint64_t a = shape[t->ndim - 2];
    shape[t->ndim - 2] = shape[t->ndim - 1];
    shape[t->ndim - 1] = a;
}

int tps_target_header_shape(const tps_manifest_tensor *t, uint64_t *shape)
{
    tps_target_file_shape(t, shape);
    if (!t->target_flatten || t->ndim < 2) return t->ndim;
    shape[t->ndim - 2] *= shape[t->ndim - 1];
    shape[t->ndim - 1] = 0;
    return t->ndim - 1;
}

void tps_target_file_partition(const tps_manifest_tensor *t, tps_partition *out)
{
    *out = *t->part;
    if (t->target_transpose && !t->part->replicated && t->part->dim >= t->ndim - 2)
        out->dim = 2 * t->ndim - 3 - t->part->dim; /* ndim-2 <-> ndim-1 */
    if (!t->target_blocks) return;
    uint64_t B = t->target_blocks, len = t->part->seg[0].length, u = t->part->seg[0].unit;
    out->nseg = (int)B;
    for (uint64_t b = 0; b < B; b++) {
        out->seg[b] = t->part->seg[0];
        out->seg[b].name[0] = '\0';
        out->seg[b].length = len / B;
        out->seg[b].unit = u / B;
    }
}

uint64_t tps_target_swap_offset(uint64_t off, uint64_t X, uint64_t Y, uint64_t block, uint64_t *run)
{
    uint64_t c = off % block, q = off / block;
    uint64_t y = q % Y, x = q / Y;
    *run = block - c;
    return (y * X + x) * block + c;
}

tps_status tps_target_swap_read(tps_target_read_fn rd, void *ctx, uint64_t off, void *buf, size_t len, uint64_t X,
                                uint64_t Y, uint64_t block, tps_error *err)
{
    unsigned char *out = buf;
    /* Small elements (a transpose): per stored row y, the requested elements with that y are
     * one contiguous stored run, so a chunk costs Y reads, gathered through one buffer. */
    if (block < 512 && off % block == 0 && len % block == 0 && len / block >= 2 * Y) {
        uint64_t e0 = off / block, e1 = (off + len) / block;
        unsigned char *tmp = malloc((size_t)(((e1 - e0) / Y + 2) * block));
        if (!tmp) return tps_fail_oom(err, "reading transposed rows");
        tps_status st = TPS_OK;
        for (uint64_t y = 0; y < Y && st == TPS_OK; y++) {
            uint64_t lo = e0 <= y ? 0 : (e0 - y + Y - 1) / Y;
            uint64_t hi = e1 - 1 < y ? 0 : (e1 - 1 - y) / Y + 1;
            if (hi <= lo) continue;
            st = rd(ctx, (y * X + lo) * block, tmp, (size_t)((hi - lo) * block), err);
            for (uint64_t x = lo; st == TPS_OK && x < hi; x++)
                memcpy(out + (x * Y + y - e0) * block, tmp + (x - lo) * block, (size_t)block);
        }
        free(tmp);
        return st;
    }
    while (len) {
        uint64_t run, at = tps_target_swap_offset(off, X, Y, block, &run);
        size_t n = run < len ? (size_t)run : len;
        tps_status st = rd(ctx, at, out, n, err);
        if (st) return st;
        out += n;
        off += n;
        len -= n;
    }
    return TPS_OK;
}

/* rd shifted by a batch's base: one 2-D transpose of a batch of them. */
typedef struct batch_at {
    tps_target_read_fn rd;
    void *ctx;
    uint64_t base;
} batch_at;

static tps_status batch_read(void *ctx, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const batch_at *b = ctx;
    return b->rd(b->ctx, b->base + off, buf, len, err);
}

/* Bytes [off, off+len) of a batch of [X, Y, es] arrays, each stored [Y, X, es], one after another. */
static tps_status batched_swap_read(tps_target_read_fn rd, void *ctx, uint64_t off, void *buf, size_t len, uint64_t X,
                                    uint64_t Y, uint64_t es, tps_error *err)
{
    uint64_t per = X * Y * es;
    unsigned char *out = buf;
    while (len) {
        if (!per) return tps_fail(err, TPS_EINVALID, "internal: a read past an empty transposed tensor");
        uint64_t e = off / per, o = off % per;
        size_t n = per - o < len ? (size_t)(per - o) : len;
        batch_at b = {rd, ctx, e * per};
        tps_status st = tps_target_swap_read(batch_read, &b, o, out, n, X, Y, es, err);
        if (st) return st;
        out += n;
        off += n;
        len -= n;
    }
    return TPS_OK;
}

tps_status tps_target_view_read(const tps_manifest_tensor *t, uint64_t tp, tps_target_read_fn rd, void *ctx,
                                uint64_t off, void *buf, size_t len, tps_error *err)
{
    uint64_t rb, u;
    if (t->target_rope_halves) { /* per head: the view's [2, u/2] rows from the source's [u/2, 2] */
        if (!(u = rope_head_rows(t, &rb))) return tps_target_permute_check(t, tp, err);
        return batched_swap_read(rd, ctx, off, buf, len, 2, u / 2, rb, err);
    }
    if (t->target_transpose)
        return batched_swap_read(rd, ctx, off, buf, len, t->shape[t->ndim - 1], t->shape[t->ndim - 2],
                                 tps_dtype_bits(t->dtype) / 8, err);
    if (!t->target_blocks) return rd(ctx, off, buf, len, err);
    uint64_t G, block;
    tps_status st = tps_target_blocked_geometry(t, tp, &G, &block, err);
    if (st) return st;
    return tps_target_swap_read(rd, ctx, off, buf, len, t->target_blocks, G, block, err);
}

/* The member index's view of one blocked rank slice: rows [A, B, block] read from the file's
 * [B, A, block] at base. */
typedef struct blocked_view {
    uint32_t file;
    uint64_t base, A, B, block;
    /* A transpose read a row at a time (merge, verify) would be one pread per element: the
     * view keeps a tile, requested rows [t0, t1) of every stored row, up to 1 MiB. */
    pthread_mutex_t mu;
    unsigned char *tile;
    uint64_t t0, t1, tb; /* the tile: rows [t0, t1) of matrix tb */
} blocked_view;

enum { TILE_BYTES = 1 << 20 };

/* Bytes [off, off+len) of matrix e's requested [A, B] elements from v's tile, loading the
 * tile that starts at off's row when it does not hold them all. */
static tps_status tile_read(blocked_view *v, const tps_source_file *f, uint64_t e, uint64_t off, unsigned char *out,
                            size_t len, tps_error *err)
{
    uint64_t es = v->block, rowb = v->B * es, base = v->base + e * v->A * v->B * es;
    uint64_t x0 = off / rowb, x1 = (off + len + rowb - 1) / rowb;
    if (!v->tile || e != v->tb || x0 < v->t0 || x1 > v->t1) {
        uint64_t k = TILE_BYTES / rowb ? TILE_BYTES / rowb : 1;
        if (k < x1 - x0) return TPS_EARG; /* larger than a tile: the caller gathers directly */
        if (!v->tile && !(v->tile = malloc((size_t)(k * rowb)))) return tps_fail_oom(err, "reading transposed rows");
        uint64_t t1 = x0 + k < v->A ? x0 + k : v->A;
        unsigned char *run = malloc((size_t)((t1 - x0) * es));
        if (!run) return tps_fail_oom(err, "reading transposed rows");
        tps_status st = TPS_OK;
        for (uint64_t y = 0; y < v->B && st == TPS_OK; y++) {
            st = tps_pread_full(f->fd, f->path, base + (y * v->A + x0) * es, run, (size_t)((t1 - x0) * es), err);
            for (uint64_t x = x0; st == TPS_OK && x < t1; x++)
                memcpy(v->tile + ((x - x0) * v->B + y) * es, run + (x - x0) * es, (size_t)es);
        }
        free(run);
        v->t0 = x0;
        v->tb = e;
        v->t1 = st == TPS_OK ? t1 : x0; /* a failed load holds nothing */
        if (st) return st;
    }
    memcpy(out, v->tile + (off - v->t0 * rowb), len);
    return TPS_OK;
}

typedef struct blocked_state {
    blocked_view **v;
    size_t n, cap;
} blocked_state;

typedef struct file_at {
    const tps_source_file *f;
    uint64_t base;
} file_at;

static tps_status file_read(void *ctx, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const file_at *a = ctx;
    return tps_pread_full(a->f->fd, a->f->path, a->base + off, buf, len, err);
}

static tps_status blocked_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len,
                               tps_error *err)
{
    blocked_view *v = (blocked_view *)t->reader_data;
    file_at a = {&ix->files[v->file], v->base};
    /* A matrix ([A, B] of [A, B, block]) at a time: the rank slice itself (blocked rows), one
     * expert's (a 3-D transpose) or one head's (rope_halves). */
    uint64_t per = v->A * v->B * v->block;
    unsigned char *out = buf;
    if (!per && len) return tps_fail(err, TPS_EINVALID, "internal: a read past an empty permuted tensor");
    while (len) {
        uint64_t e = off / per, o = off % per;
        size_t n = per - o < len ? (size_t)(per - o) : len;
        tps_status st = TPS_EARG;
        if (v->block < 512) { /* small elements (a transpose): through the tile */
            pthread_mutex_lock(&v->mu);
            st = tile_read(v, a.f, e, o, out, n, err);
            pthread_mutex_unlock(&v->mu);
        }
        if (st == TPS_EARG) {
            file_at m = {a.f, v->base + e * per};
            st = tps_target_swap_read(file_read, &m, o, out, n, v->A, v->B, v->block, err);
        }
        if (st) return st;
        out += n;
        off += n;
        len -= n;
    }
    return TPS_OK;
}

static void blocked_release(void *state)
{
    blocked_state *s = state;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        pthread_mutex_destroy(&s->v[i]->mu);
        free(s->v[i]->tile);
        free(s->v[i]);
    }
    free(s->v);
    free(s);
}

static const tps_reader_ops blocked_ops = {blocked_read, blocked_release};

tps_status tps_target_blocked_member(tps_index *vx, const tps_manifest_tensor *t, uint64_t tp, const uint64_t *rs,
                                     uint32_t file, uint64_t base, tps_error *err)
{
    uint64_t G = 0, block = 0;
    tps_status st = tps_target_permute_check(t, tp, err);
    if (st) return st;
    if (t->target_blocks) TPS_CHECK_RET(tps_target_blocked_geometry(t, tp, &G, &block, err));
    if (!vx->ops) {
        if (!(vx->state = calloc(1, sizeof(blocked_state)))) return tps_fail_oom(err, "reading blocked rows");
        vx->ops = &blocked_ops;
    } else if (vx->ops != &blocked_ops) {
        return tps_fail(err, TPS_EINVALID, "internal: an index with another reader holds blocked rows");
    }
    blocked_state *s = vx->state;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        blocked_view **v = realloc(s->v, cap * sizeof *v);
        if (!v) return tps_fail_oom(err, "reading blocked rows");
        s->v = v;
        s->cap = cap;
    }
    blocked_view *v = calloc(1, sizeof *v);
    if (!v) return tps_fail_oom(err, "reading blocked rows");
    uint64_t rb, u;
    if (t->target_rope_halves && (u = rope_head_rows(t, &rb))) { /* a head's [u/2, 2] rows from the file's [2, u/2] */
        v->A = u / 2;
        v->B = 2;
        v->block = rb;
    } else if (t->target_transpose) { /* the slice [(E,) a, b] from the file's [(E,) b, a] */
        v->A = rs[t->ndim - 2];
        v->B = rs[t->ndim - 1];
        v->block = tps_dtype_bits(t->dtype) / 8;
    } else {
        v->A = G / tp;
        v->B = t->target_blocks;
        v->block = block;
    }
    v->file = file;
    v->base = base;
    pthread_mutex_init(&v->mu, NULL);
    s->v[s->n++] = v;
    return tps_index_add_tensor(vx, t->name, strlen(t->name), t->dtype, t->ndim, rs, file, base, v, err);
}
