/* The sources of verify/load/source.h: a tensor index, a shard set read through its manifest. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../../lib/base/crc.h"
#include "../../lib/engine/gather.h"
#include "../../lib/engine/shardset.h"
#include "../../lib/set/manifest.h"
#include "../math/vbuf.h"
#include "finite.h"
#include "source.h"

/* A tensor from this size is mapped rather than read (index_load). */
#define MAP_MIN ((uint64_t)4 << 20)

/* Names out and gives it a buffer for a whole tensor (mapped: its bytes mapped from their
 * file already, which out then owns; NULL: a new buffer); *nb is its byte count. */
static tps_status vt_adopt(tps_vt *out, const char *name, uint64_t nbytes, tps_dtype dtype, int ndim,
                           const uint64_t *shape, void *mapped, size_t *nb, tps_error *err)
{
    memset(out, 0, sizeof *out);
    if (!tps_u64_to_size(nbytes, nb)) {
        tps_vbuf_free(mapped);
        return tps_fail_oom(err, name);
    }
    out->data = mapped ? mapped : tps_vbuf_alloc(*nb);
    out->name = strdup(name);
    if (!out->name || !out->data) {
        tps_vt_release(out);
        return tps_fail_oom(err, name);
    }
    out->dtype = dtype;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof out->shape);
    /* the readers checked nbytes against the shape, so the product fits */
    tps_prod_u64(shape, ndim, &out->nelem);
    return TPS_OK;
}

static tps_status vt_prepare(tps_vt *out, const char *name, uint64_t nbytes, tps_dtype dtype, int ndim,
                             const uint64_t *shape, size_t *nb, tps_error *err)
{
    return vt_adopt(out, name, nbytes, dtype, ndim, shape, NULL, nb, err);
}

static tps_status index_load(void *ctx, const char *name, tps_vt *out, tps_error *err)
{
    const tps_index *ix = ctx;
    const tps_tensor *t = tps_index_find(ix, name);
    if (!t) return tps_fail(err, TPS_EINVALID, "%s: no tensor %s", ix->path, name);
    size_t nb;
    /* A tensor that is a plain region of its file is mapped (no copy, no fresh pages); one a
     * format's reader decodes (a zip entry, a pickle's storage) is read. */
    void *mapped = NULL;
    if (!t->reader_data && t->nbytes >= MAP_MIN && t->nbytes <= SIZE_MAX)
        mapped = tps_vbuf_map(ix->files[t->file].fd, t->offset, (size_t)t->nbytes);
    tps_status st = vt_adopt(out, name, t->nbytes, t->dtype, t->ndim, t->shape, mapped, &nb, err);
    if (st == TPS_OK && !mapped) st = tps_tensor_read(ix, t, 0, out->data, nb, err);
    if (st) tps_vt_release(out);
    return st;
}

static bool index_has(void *ctx, const char *name)
{
    return tps_index_find(ctx, name) != NULL;
}

/* A chunk of rows [row0, row0 + k) of a tensor shaped like whole, with a buffer for it. */
static tps_status chunk_prepare(tps_vt *part, const char *name, tps_dtype dtype, int ndim, const uint64_t *shape,
                                uint64_t chunk, uint64_t *row_bytes, tps_error *err)
{
    uint64_t sub[TPS_MAX_DIMS], per = 1, nb;
    memcpy(sub, shape, sizeof sub);
    sub[0] = chunk < shape[0] ? chunk : shape[0];
    for (int i = 1; i < ndim; i++) per *= shape[i]; /* a piece of a shape a reader checked */
    if (tps_dtype_bits(dtype) % 8)
        return tps_fail(err, TPS_EINVALID, "%s: %s packs several values a byte: not read by rows", name,
                        tps_dtype_name(dtype));
    *row_bytes = per * (tps_dtype_bits(dtype) / 8);
    if (!tps_mul_u64(*row_bytes, sub[0], &nb)) return tps_fail_oom(err, name);
    size_t unused;
    return vt_prepare(part, name, nb, dtype, ndim, sub, &unused, err);
}

/* part now holds k rows from row0 */
static void chunk_rows(tps_vt *part, uint64_t k)
{
    part->shape[0] = k;
    tps_prod_u64(part->shape, part->ndim, &part->nelem);
}

static tps_status index_rows(void *ctx, const char *name, uint64_t chunk, tps_vrows_fn fn, void *arg, tps_error *err)
{
    const tps_index *ix = ctx;
    const tps_tensor *t = tps_index_find(ix, name);
    if (!t) return tps_fail(err, TPS_EINVALID, "%s: no tensor %s", ix->path, name);
    if (t->ndim < 2 || !chunk) return tps_fail(err, TPS_EINVALID, "%s: %s is not a matrix", ix->path, name);
    tps_vt part;
    uint64_t rb;
    tps_status st = chunk_prepare(&part, name, t->dtype, t->ndim, t->shape, chunk, &rb, err);
    for (uint64_t r = 0; st == TPS_OK && r < t->shape[0]; r += chunk) {
        uint64_t k = t->shape[0] - r < chunk ? t->shape[0] - r : chunk;
        chunk_rows(&part, k);
        st = tps_tensor_read(ix, t, r * rb, part.data, (size_t)(k * rb), err);
        if (st == TPS_OK) st = fn(arg, r, &part, err);
    }
    tps_vt_release(&part);
    return st;
}

static int index_dims(void *ctx, const char *name, uint64_t *shape)
{
    const tps_tensor *t = tps_index_find(ctx, name);
    if (!t) return 0;
    memcpy(shape, t->shape, sizeof t->shape);
    return t->ndim;
}

tps_vsource tps_vsource_index(const tps_index *ix)
{
    tps_vsource s = {(void *)ix, index_load, index_has, index_rows, index_dims};
    return s;
}

/* The index a rank reads tensor name from: its own, or rank 0's for a target_rank0 tensor. */
static tps_status rank_index(tps_vrank_src *c, const char *name, const tps_index **ix, tps_error *err)
{
    const tps_manifest_tensor *t = tps_manifest_find(c->ss->m, name);
    *ix = c->ix;
    return t && t->target_rank0 ? tps_shardset_open_rank(c->ss, 0, ix, err) : TPS_OK;
}

static tps_status rank_load(void *ctx, const char *name, tps_vt *out, tps_error *err)
{
    const tps_index *ix;
    tps_status st = rank_index(ctx, name, &ix, err);
    return st ? st : index_load((void *)ix, name, out, err);
}

/* A rank's vocabulary slice by chunks of rows, as the reference's: one chunk held at a time
 * (eight ranks holding their whole LM head slices at once were most of --whole-model's peak). */
static tps_status rank_rows(void *ctx, const char *name, uint64_t chunk, tps_vrows_fn fn, void *arg, tps_error *err)
{
    const tps_index *ix;
    tps_status st = rank_index(ctx, name, &ix, err);
    return st ? st : index_rows((void *)ix, name, chunk, fn, arg, err);
}

static bool rank_has(void *ctx, const char *name)
{
    const tps_vrank_src *c = ctx;
    return tps_index_find(c->ix, name) != NULL;
}

tps_vsource tps_vsource_rank(tps_vrank_src *c)
{
    tps_vsource s = {c, rank_load, rank_has, rank_rows, NULL};
    return s;
}

/* Chunks of rows handed to a caller as the walk goes (shardset_rows). */
typedef struct row_chunks {
    tps_vt part;
    uint64_t rows, chunk, row_bytes, filled, row0; /* filled: bytes of part held */
    tps_vrows_fn fn;
    void *arg;
} row_chunks;

typedef struct checked_read {
    unsigned char *buf; /* the global bytes go here; NULL: only checked */
    char finding[1400];
    tps_vfinite fin;
    row_chunks *rc;     /* not NULL: the bytes go to rc's chunks instead */
} checked_read;

static tps_status fn_call(row_chunks *rc, tps_error *err)
{
    return rc->fn(rc->arg, rc->row0, &rc->part, err);
}

static tps_status chunk_flush(row_chunks *rc, tps_error *err)
{
    uint64_t k = rc->filled / rc->row_bytes;
    chunk_rows(&rc->part, k);
    tps_status st = fn_call(rc, err);
    rc->row0 += k;
    rc->filled = 0;
    return st;
}

static tps_status keep_bytes(void *arg, uint64_t off, const void *p, size_t n, tps_error *err)
{
    checked_read *c = arg;
    if (c->buf) memcpy(c->buf + off, p, n);
    tps_vfinite_feed(&c->fin, p, n); /* the walk gives the global bytes front to back */
    row_chunks *rc = c->rc;
    const unsigned char *b = p;
    while (rc && n) {
        uint64_t room = rc->chunk * rc->row_bytes - rc->filled, k = n < room ? n : room;
        memcpy((unsigned char *)rc->part.data + rc->filled, b, (size_t)k);
        rc->filled += k, b += k, n -= (size_t)k;
        if (rc->filled == rc->chunk * rc->row_bytes) {
            tps_status st = chunk_flush(rc, err);
            if (st) return st;
        }
    }
    return TPS_OK;
}

static void keep_finding(void *arg, const char *msg)
{
    checked_read *c = arg;
    if (!c->finding[0]) snprintf(c->finding, sizeof c->finding, "%s", msg);
}

/* The failure for non-finite values found in shard tensor t (fin); with source (--source),
 * whether the source's copy holds them too. */
static tps_status fail_not_finite(tps_shardset *ss, const tps_manifest_tensor *t, const tps_vfinite *fin,
                                  const tps_vsource *source, tps_error *err)
{
    char what[600], also[400] = "";
    bool source_finite = false; /* then the shards are at fault, not the checkpoint */
    tps_vfinite_describe(fin, t->name, t->shape, t->ndim, what, sizeof what);
    if (source) {
        tps_vt s;
        tps_error serr;
        tps_error_clear(&serr);
        memset(&s, 0, sizeof s);
        if (source->has(source->ctx, t->name) && source->load(source->ctx, t->name, &s, &serr) == TPS_OK) {
            tps_vfinite sf;
            tps_vt_scan(&s, &sf);
            if (sf.count) {
                snprintf(also, sizeof also,
                         "; the source holds it too (%llu non-finite value%s, the first at element %llu)",
                         (unsigned long long)sf.count, sf.count == 1 ? "" : "s", (unsigned long long)sf.first);
            } else {
                source_finite = true;
                snprintf(also, sizeof also,
                         "; the source's copy is finite: these shards were not cut from this source (or were changed "
                         "since, their manifest with them)");
            }
        }
        tps_vt_release(&s);
    }
    return tps_fail(err, TPS_EINVALID, "%s: %s%s%s%s", ss->dir, what, also, source_finite ? "" : ": ",
                    source_finite ? "" : tps_vfinite_why);
}

/* Reads tensor t of the shard set through the gather walk (every rank's bytes once, replicas
 * compared, padding checked) into buf (NULL: only checks), compares its global CRC-32 with
 * the manifest's, and refuses non-finite values (source: the reference's other source, whose
 * copy the message then describes). */
static tps_status read_checked(tps_shardset *ss, const tps_manifest_tensor *t, void *buf, const tps_vsource *source,
                               row_chunks *rc, tps_error *err)
{
    checked_read c = {buf, "", {0}, rc};
    tps_vfinite_init(&c.fin, t->dtype);
    tps_gather_hooks h = {keep_bytes, keep_finding, &c, false};
    uint32_t crc;
    tps_status st = tps_gather_tensor(ss, t, &h, &crc, NULL, err);
    if (st == TPS_OK && rc && rc->filled && !c.finding[0]) st = chunk_flush(rc, err); /* the last, short chunk */
    if (st) return st;
    /* A set tpshard did not write (an engine's, a Megatron checkpoint) records no CRC. */
    if (!c.finding[0] && (crc == t->crc || ss->m->adopted))
        return c.fin.count ? fail_not_finite(ss, t, &c.fin, source, err) : TPS_OK;
    char path[4200];
    bool found = false;
    tps_error ferr;
    tps_error_clear(&ferr);
    tps_shardset_changed_file(ss, t, path, sizeof path, &found, &ferr); /* the best name we can give */
    const char *file = found ? path : NULL;
    if (c.finding[0])
        return tps_fail(err, TPS_EMISMATCH, "%s: %s; the shard set does not match its manifest (tpshard check %s)",
                        file ? file : ss->dir, c.finding, ss->dir);
    return tps_fail(err, TPS_EMISMATCH,
                    "%s: tensor '%s': CRC-32 %08x of its bytes, the manifest says %08x: the shard set does not match "
                    "its manifest (tpshard check %s lists every difference)",
                    file ? file : ss->dir, t->name, (unsigned)crc, t->crc, ss->dir);
}

static tps_status shardset_load(void *ctx, const char *name, tps_vt *out, tps_error *err)
{
    tps_shardset *ss = ctx;
    const tps_manifest_tensor *t = tps_manifest_find(ss->m, name);
    if (!t) return tps_fail(err, TPS_EINVALID, "%s: the manifest has no tensor %s", ss->dir, name);
    size_t nb;
    tps_status st = vt_prepare(out, name, t->nbytes, t->dtype, t->ndim, t->shape, &nb, err);
    if (st == TPS_OK) st = read_checked(ss, t, out->data, NULL, NULL, err);
    if (st) tps_vt_release(out);
    return st;
}

static tps_status shardset_rows(void *ctx, const char *name, uint64_t chunk, tps_vrows_fn fn, void *arg,
                                tps_error *err)
{
    tps_shardset *ss = ctx;
    const tps_manifest_tensor *t = tps_manifest_find(ss->m, name);
    if (!t) return tps_fail(err, TPS_EINVALID, "%s: the manifest has no tensor %s", ss->dir, name);
    if (t->ndim < 2 || !chunk || !t->shape[0]) return tps_fail(err, TPS_EINVALID, "%s: %s is not a matrix", ss->dir, name);
    row_chunks rc = {.chunk = chunk, .fn = fn, .arg = arg};
    tps_status st = chunk_prepare(&rc.part, name, t->dtype, t->ndim, t->shape, chunk, &rc.row_bytes, err);
    if (st == TPS_OK && rc.row_bytes) {
        rc.chunk = rc.part.shape[0];
        st = read_checked(ss, t, NULL, NULL, &rc, err);
    }
    tps_vt_release(&rc.part);
    return st;
}

bool tps_vsource_is_shardset(const tps_vsource *src, const tps_shardset *ss)
{
    return src->load == shardset_load && src->ctx == ss;
}

tps_status tps_vtensor_check(tps_shardset *ss, const char *name, const tps_vsource *source, uint64_t *tensors,
                             uint64_t *bytes, tps_error *err)
{
    const tps_manifest_tensor *t = tps_manifest_find(ss->m, name);
    if (!t) return TPS_OK;
    if (source) {
        tps_status st = read_checked(ss, t, NULL, source, NULL, err);
        if (st) return st;
    }
    (*tensors)++;
    *bytes += t->nbytes;
    return TPS_OK;
}

tps_status tps_vtensor_check_read(tps_shardset *ss, const char *name, uint64_t *tensors, uint64_t *bytes,
                                  tps_error *err)
{
    const tps_manifest_tensor *t = tps_manifest_find(ss->m, name);
    if (!t) return TPS_OK;
    tps_status st = read_checked(ss, t, NULL, NULL, NULL, err);
    if (st) return st;
    (*tensors)++;
    *bytes += t->nbytes;
    return TPS_OK;
}

static bool shardset_has(void *ctx, const char *name)
{
    const tps_shardset *ss = ctx;
    return tps_manifest_find(ss->m, name) != NULL;
}

static int shardset_dims(void *ctx, const char *name, uint64_t *shape)
{
    const tps_shardset *ss = ctx;
    const tps_manifest_tensor *t = tps_manifest_find(ss->m, name);
    if (!t) return 0;
    memcpy(shape, t->shape, sizeof t->shape);
    return t->ndim;
}

tps_vsource tps_vsource_shardset(tps_shardset *ss)
{
    tps_vsource s = {ss, shardset_load, shardset_has, shardset_rows, shardset_dims};
    return s;
}
