#include "view.h"

#include <stdlib.h>
#include <string.h>

#define OUT_CHUNK (1u << 20)
#define SRC_BLOCK (16u << 20)

static void view_release(void *state)
{
    tps_view_state *s = state;
    if (!s) return;
    for (size_t i = 0; i < s->nzips; i++) tps_zip_free(s->zips[i]);
    for (size_t i = 0; i < s->nviews; i++) free(s->views[i]);
    free(s->zips);
    free(s->views);
    free(s);
}

const tps_reader_ops tps_view_ops = {tps_view_read, view_release};

tps_status tps_view_state_init(tps_index *ix, tps_error *err)
{
    tps_view_state *s = calloc(1, sizeof *s);
    if (!s) return tps_fail_oom(err, "opening a checkpoint");
    ix->ops = &tps_view_ops;
    ix->state = s;
    return TPS_OK;
}

static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

tps_status tps_view_state_add_zip(tps_index *ix, tps_zip *z, tps_error *err)
{
    tps_view_state *s = ix->state;
    if (!grow((void **)&s->zips, &s->zips_cap, s->nzips + 1, sizeof *s->zips)) {
        tps_zip_free(z);
        return tps_fail_oom(err, "opening a checkpoint");
    }
    s->zips[s->nzips++] = z;
    return TPS_OK;
}

tps_status tps_view_state_add(tps_index *ix, const tps_view *v, const tps_view **out, tps_error *err)
{
    tps_view_state *s = ix->state;
    tps_view *copy = malloc(sizeof *copy);
    if (!copy || !grow((void **)&s->views, &s->views_cap, s->nviews + 1, sizeof *s->views)) {
        free(copy);
        return tps_fail_oom(err, "indexing tensors");
    }
    *copy = *v;
    s->views[s->nviews++] = copy;
    *out = copy;
    return TPS_OK;
}

void tps_view_c_strides(tps_view *v)
{
    uint64_t s = 1;
    for (int i = v->ndim; i-- > 0;) {
        v->stride[i] = s;
        s *= v->shape[i] ? v->shape[i] : 1; /* callers have bounded the element count */
    }
}

bool tps_view_is_plain(const tps_view *v)
{
    if (v->swap) return false;
    if (v->zip && v->entry->method != TPS_ZIP_STORED) return false;
    uint64_t expect = 1;
    for (int i = v->ndim; i-- > 0;) {
        if (v->shape[i] == 0) return true;
        if (v->shape[i] != 1 && v->stride[i] != expect) return false;
        expect *= v->shape[i];
    }
    return true;
}

static tps_status src_read(const tps_index *ix, const tps_view *v, uint64_t elem, uint64_t n, unsigned char *buf,
                           tps_error *err)
{
    /* Bounds were validated when the view was made: elem + n <= the storage's elements. */
    uint64_t off = v->base + elem * v->esize;
    size_t len = (size_t)(n * v->esize);
    if (v->zip) return tps_zip_read(v->zip, v->entry, off, buf, len, err);
    const tps_source_file *f = &ix->files[v->file];
    return tps_pread_full(f->fd, f->path, off, buf, len, err);
}

/* Source element of each output element in [first, first+count), visited in order. */
typedef struct walk {
    const tps_view *v;
    uint64_t idx[TPS_MAX_DIMS];
    uint64_t src;
} walk;

static void walk_start(walk *w, const tps_view *v, uint64_t e)
{
    w->v = v;
    w->src = v->elem0;
    for (int i = v->ndim; i-- > 0;) {
        w->idx[i] = e % v->shape[i];
        e /= v->shape[i];
        w->src += w->idx[i] * v->stride[i];
    }
}

static void walk_next(walk *w)
{
    const tps_view *v = w->v;
    for (int i = v->ndim; i-- > 0;) {
        if (++w->idx[i] < v->shape[i]) {
            w->src += v->stride[i];
            return;
        }
        w->src -= (v->shape[i] - 1) * v->stride[i];
        w->idx[i] = 0;
    }
}

static void swap_units(unsigned char *p, size_t n, unsigned unit)
{
    for (size_t i = 0; i + unit <= n; i += unit)
        for (unsigned a = 0, b = unit - 1; a < b; a++, b--) {
            unsigned char t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

/* Gathers output elements [e0, e0+n) into out. */
static tps_status gather(const tps_index *ix, const tps_view *v, uint64_t e0, uint64_t n, unsigned char *out,
                         tps_error *err)
{
    walk w;
    uint64_t lo = UINT64_MAX, hi = 0;
    walk_start(&w, v, e0);
    for (uint64_t k = 0; k < n; k++, walk_next(&w)) {
        if (w.src < lo) lo = w.src;
        if (w.src > hi) hi = w.src;
    }
    uint64_t per_block = SRC_BLOCK / v->esize;
    if (hi - lo + 1 < per_block) per_block = hi - lo + 1;
    unsigned char *blk = malloc((size_t)(per_block * v->esize));
    if (!blk) return tps_fail_oom(err, "gathering a strided tensor");
    for (uint64_t b0 = lo; b0 <= hi; b0 += per_block) {
        uint64_t b1 = hi - b0 + 1 < per_block ? hi + 1 : b0 + per_block;
        tps_status st = src_read(ix, v, b0, b1 - b0, blk, err);
        if (st) {
            free(blk);
            return st;
        }
        walk_start(&w, v, e0);
        for (uint64_t k = 0; k < n; k++, walk_next(&w))
            if (w.src >= b0 && w.src < b1) memcpy(out + k * v->esize, blk + (w.src - b0) * v->esize, v->esize);
        if (b1 > hi) break;
    }
    free(blk);
    if (v->swap > 1) swap_units(out, (size_t)(n * v->esize), v->swap);
    return TPS_OK;
}

tps_status tps_view_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_view *v = t->reader_data;
    if (len == 0) return TPS_OK;
    unsigned es = v->esize;
    uint64_t want = (uint64_t)len + 2 * es;
    unsigned char *chunk = malloc(want < OUT_CHUNK ? (size_t)want : OUT_CHUNK);
    tps_status st = TPS_OK;
    if (!chunk) {
        st = tps_fail_oom(err, "gathering a strided tensor");
        goto cleanup;
    }
    unsigned char *dst = buf;
    uint64_t pos = off, end = off + len; /* tps_tensor_read checked off + len <= nbytes */
    while (pos < end) {
        uint64_t e0 = pos / es, skip = pos % es;
        uint64_t e1 = (end + es - 1) / es;
        uint64_t cap = (want < OUT_CHUNK ? want : OUT_CHUNK) / es;
        if (e1 - e0 > cap) e1 = e0 + cap;
        TPS_CHECK(gather(ix, v, e0, e1 - e0, chunk, err));
        uint64_t take = (e1 - e0) * es - skip;
        if (take > end - pos) take = end - pos;
        memcpy(dst, chunk + skip, (size_t)take);
        dst += take;
        pos += take;
    }
cleanup:
    free(chunk);
    return st;
}
