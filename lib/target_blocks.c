/* Blocked rows (lib/target.h, blocked:): a rank file holds a tensor's rank slice with the
 * two leading axes of [groups, B, block] swapped.  Both directions are the same swap of an
 * [X, Y, block] array, so a run never crosses a block: GPT-NeoX's blocks are head_dim rows
 * (head_dim * hidden elements), long runs that the copy engine and pread take as they are. */
#include <stdlib.h>
#include <string.h>

#include "target.h"

tps_status tps_target_blocked_geometry(const tps_manifest_tensor *t, uint64_t tp, uint64_t *groups,
                                       uint64_t *block_bytes, tps_error *err)
{
    const tps_partition *p = &t->part;
    uint64_t B = t->target_blocks;
    uint64_t u = p->nseg == 1 ? p->seg[0].unit : 0;
    if (p->replicated || p->dim != 0 || p->nseg != 1 || p->pad || p->groups > 1 || t->ndim < 1 || B < 2 || !u ||
        u % B || t->shape[0] % u || t->target_name)
        return tps_fail(err, TPS_EINVALID,
                        "tensor '%s': blocked rows (%llu blocks) need a split of dimension 0 in one segment whose "
                        "unit divides into the blocks, unpadded and under its own name",
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

void tps_target_file_partition(const tps_manifest_tensor *t, tps_partition *out)
{
    *out = t->part;
    if (!t->target_blocks) return;
    uint64_t B = t->target_blocks, len = t->part.seg[0].length, u = t->part.seg[0].unit;
    out->nseg = (int)B;
    for (uint64_t b = 0; b < B; b++) {
        out->seg[b] = t->part.seg[0];
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

/* The member index's view of one blocked rank slice: rows [A, B, block] read from the file's
 * [B, A, block] at base. */
typedef struct blocked_view {
    uint32_t file;
    uint64_t base, A, B, block;
} blocked_view;

typedef struct blocked_state {
    blocked_view **v;
    size_t n, cap;
} blocked_state;

static tps_status blocked_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len,
                               tps_error *err)
{
    const blocked_view *v = t->reader_data;
    const tps_source_file *f = &ix->files[v->file];
    unsigned char *out = buf;
    while (len) {
        uint64_t run, at = tps_target_swap_offset(off, v->A, v->B, v->block, &run);
        size_t n = run < len ? (size_t)run : len;
        tps_status st = tps_pread_full(f->fd, f->path, v->base + at, out, n, err);
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
    for (size_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    free(s);
}

static const tps_reader_ops blocked_ops = {blocked_read, blocked_release};

tps_status tps_target_blocked_member(tps_index *vx, const tps_manifest_tensor *t, uint64_t tp, const uint64_t *rs,
                                     uint32_t file, uint64_t base, tps_error *err)
{
    uint64_t G, block;
    tps_status st = tps_target_blocked_geometry(t, tp, &G, &block, err);
    if (st) return st;
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
    *v = (blocked_view){file, base, G / tp, t->target_blocks, block};
    s->v[s->n++] = v;
    return tps_index_add_tensor(vx, t->name, strlen(t->name), t->dtype, t->ndim, rs, file, base, v, err);
}
