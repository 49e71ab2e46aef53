/* Opening a shard set and reading its global tensors back from the ranks' pieces. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/checked.h"
#include "../base/crc.h"
#include "../base/iocache.h"
#include "../partition/spans.h"
#include "cut.h"
#include "../set/manifest.h"
#include "../targets/adopt.h"
#include "../targets/target.h"
#include "shardset.h"

tps_status tps_shardset_open_with(const char *dir, tps_file_reader_fn add_file, tps_shardset **out, tps_error *err)
{
    *out = NULL;
    tps_shardset *ss = calloc(1, sizeof *ss);
    if (!ss || !(ss->dir = strdup(dir))) {
        free(ss);
        return tps_fail_oom(err, "opening a shard set");
    }
    ss->add_file = add_file;
    tps_status st = tps_adopt_is_engine_set(dir) ? tps_adopt_manifest(dir, add_file, &ss->m, err)
                                                 : tps_target_manifest_load(dir, &ss->m, err);
    if (st == TPS_OK && !(ss->rank = calloc(ss->m->tp, sizeof *ss->rank))) st = tps_fail_oom(err, "opening a shard set");
    if (st) {
        tps_shardset_free(ss);
        return st;
    }
    *out = ss;
    return TPS_OK;
}

/* Each tensor of the rank's files must be exactly what the manifest says the rank holds. */
static tps_status check_rank(const tps_shardset *ss, uint64_t r, const tps_index *ix, tps_error *err)
{
    const tps_manifest *m = ss->m;
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        const tps_tensor *x = tps_index_find(ix, t->name);
        if (!x)
            return tps_fail(err, TPS_EINVALID, "%s: rank %llu lacks tensor '%s'", ss->dir, (unsigned long long)r, t->name);
        uint64_t want[TPS_MAX_DIMS];
        tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, want);
        if (x->dtype != t->dtype || x->ndim != t->ndim || memcmp(x->shape, want, sizeof(uint64_t) * (size_t)t->ndim)) {
            char a[256], b[256];
            tps_shape_str(x->shape, x->ndim, a, sizeof a);
            tps_shape_str(want, t->ndim, b, sizeof b);
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is %s %s in %s, but the manifest gives rank %llu %s %s",
                            ss->dir, t->name, tps_dtype_name(x->dtype), a, ix->files[x->file].path,
                            (unsigned long long)r, tps_dtype_name(t->dtype), b);
        }
    }
    if (ix->ntensors != m->ntensors)
        return tps_fail(err, TPS_EINVALID, "%s: rank %llu files hold %zu tensors, the manifest lists %zu", ss->dir,
                        (unsigned long long)r, ix->ntensors, m->ntensors);
    if (m->adopted) return TPS_OK; /* an engine's saver writes no metadata */
    const char *rank_s = tps_index_meta(ix, "tp_rank"), *size_s = tps_index_meta(ix, "tp_size");
    char want_r[32], want_t[32];
    snprintf(want_r, sizeof want_r, "%llu", (unsigned long long)r);
    snprintf(want_t, sizeof want_t, "%llu", (unsigned long long)m->tp);
    if (!rank_s || !size_s || strcmp(rank_s, want_r) || strcmp(size_s, want_t))
        return tps_fail(err, TPS_EINVALID, "%s: %s says tp_rank %s of tp_size %s, but the manifest puts it at rank %s of %s",
                        ss->dir, ix->files[0].path, rank_s ? rank_s : "(none)", size_s ? size_s : "(none)", want_r,
                        want_t);
    return TPS_OK;
}

tps_status tps_shardset_open_rank(tps_shardset *ss, uint64_t r, const tps_index **out, tps_error *err)
{
    if (r >= ss->m->tp)
        return tps_fail(err, TPS_EARG, "%s: rank %llu out of range (tp %llu)", ss->dir, (unsigned long long)r,
                        (unsigned long long)ss->m->tp);
    if (!tps_manifest_holds(ss->m, r)) {
        char held[256];
        tps_manifest_held_str(ss->m, held, sizeof held);
        return tps_fail(err, TPS_EINVALID,
                        "%s: rank %llu is not in this partial set (it holds ranks %s of %llu; the others are on other nodes)",
                        ss->dir, (unsigned long long)r, held, (unsigned long long)ss->m->tp);
    }
    if (ss->rank[r]) {
        *out = ss->rank[r];
        return TPS_OK;
    }
    tps_index *ix = NULL;
    char path[4096];
    tps_status st = TPS_OK;
    /* The files are sorted by (rank, part): rank r's begin at the first not below r. */
    size_t lo = 0, hi = ss->m->nfiles;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ss->m->files[mid].rank < r) lo = mid + 1;
        else hi = mid;
    }
    for (size_t i = lo; i < ss->m->nfiles && ss->m->files[i].rank == r; i++) {
        const tps_manifest_file *f = &ss->m->files[i];
        if (snprintf(path, sizeof path, "%s/%s", ss->dir, f->name) >= (int)sizeof path) {
            st = tps_fail(err, TPS_EINVALID, "%s: path too long", ss->dir);
            goto cleanup;
        }
        if (!ix) TPS_CHECK(tps_index_new(path, "safetensors", &ix, err));
        TPS_CHECK(ss->add_file(ix, path, err));
    }
    if (ss->m->target && ix) { /* fused tensors: each member a byte range of its fused tensor */
        tps_index *files = ix;
        ix = NULL;
        TPS_CHECK(tps_target_member_index(ss->m, r, files, &ix, err));
    }
    TPS_CHECK(check_rank(ss, r, ix, err));
    ss->rank[r] = ix;
    *out = ix;
    ix = NULL;
cleanup:
    tps_index_free(ix);
    return st;
}

/* One rank's state while a global tensor is read: its rank tensor, looked up once (a
 * dimension-1 cut has a piece per row, and a look-up per piece was most of a tiny tensor's
 * cost), and its pending pieces that follow each other in its file, read by one preadv. */
typedef struct run_batch {
    const tps_index *ix; /* NULL until the rank is first needed */
    const tps_tensor *x;
    const tps_source_file *f;
    uint64_t start, end; /* file offsets [start, end) */
    int n;
    struct iovec iov[256];
} run_batch;

/* Opens rank r (once per shard set) and finds t's rank tensor in it (once per read). */
static tps_status rank_tensor(tps_shardset *ss, run_batch *b, uint32_t r, const tps_manifest_tensor *t,
                              tps_error *err)
{
    if (b->ix) return TPS_OK;
    const tps_index *ix;
    tps_status st = tps_shardset_open_rank(ss, r, &ix, err);
    if (st) return st;
    b->x = tps_index_find(ix, t->name); /* open_rank checked that every rank holds every tensor */
    b->ix = ix;
    return TPS_OK;
}

static tps_status batch_flush(run_batch *b, tps_error *err)
{
    int n = b->n;
    b->n = 0;
    return n ? tps_preadv_full(b->f->fd, b->f->path, b->iov, n, b->start, err) : TPS_OK;
}

/* Reads each further replica of the piece just read into p (global bytes [g, g+run) of t,
 * span s) and compares it with p. */
static tps_status compare_replicas(tps_shardset *ss, run_batch *bt, const tps_manifest_tensor *t, const tps_spans *sp,
                                   const tps_span *s, uint64_t g, const unsigned char *p, uint64_t run,
                                   tps_error *err)
{
    uint64_t o = g / sp->slab_bytes, w = g % sp->slab_bytes;
    unsigned char *scratch = malloc(run < (1u << 20) ? (size_t)run : (1u << 20));
    if (!scratch) return tps_fail_oom(err, "comparing replicas");
    tps_status st = TPS_OK;
    for (uint32_t j = 1; st == TPS_OK && j < s->nowners; j++) {
        uint32_t r = sp->owner[s->owner0 + j];
        TPS_CHECK(rank_tensor(ss, &bt[r], r, t, err));
        const tps_index *ix = bt[r].ix;
        const tps_tensor *x = bt[r].x;
        uint64_t at = o * sp->rank_slab_bytes[r] + sp->owner_offset[s->owner0 + j] + (w - s->begin);
        for (uint64_t done = 0; done < run;) {
            size_t k = run - done < (1u << 20) ? (size_t)(run - done) : (1u << 20);
            TPS_CHECK(tps_tensor_read(ix, x, at + done, scratch, k, err));
            if (memcmp(scratch, p + done, k) != 0) {
                size_t b = 0;
                while (scratch[b] == p[done + b]) b++;
                st = tps_fail(err, TPS_EMISMATCH,
                              "tensor '%s': replicas differ: ranks %u and %u hold different bytes at global byte %llu "
                              "(%s)",
                              t->name, sp->owner[s->owner0], r, (unsigned long long)(g + done + b),
                              ix->files[x->file].path);
                goto cleanup;
            }
            done += k;
        }
    }
cleanup:
    free(scratch);
    return st;
}

tps_status tps_shardset_read_global(tps_shardset *ss, const tps_manifest_tensor *t, uint64_t off, void *buf, size_t len,
                                    tps_error *err)
{
    uint64_t end;
    if (!tps_add_u64(off, len, &end) || end > t->nbytes)
        return tps_fail(err, TPS_EINVALID, "read outside tensor '%s'", t->name);
    if (len == 0) return TPS_OK;
    tps_spans sp;
    tps_status st = tps_spans_build(t->part, t->dtype, t->ndim, t->shape, ss->m->tp, &sp, err);
    if (st) return st;
    /* A dimension-1 cut gives every rank one short piece per row, and a rank's pieces of
     * successive rows are adjacent in its file: gather each rank's with one preadv per batch
     * instead of one read per piece. */
    /* Not calloc: zeroing every rank's 4 KiB of iovecs was a tenth of a tiny tensor's read.
     * tp <= TPS_MAX_TP (the manifest reader refuses more), so the size cannot overflow. */
    run_batch *bt = malloc((size_t)ss->m->tp * sizeof *bt);
    if (!bt) {
        st = tps_fail_oom(err, "reading shards");
        goto cleanup;
    }
    for (uint64_t r = 0; r < ss->m->tp; r++) bt[r].ix = NULL, bt[r].n = 0;
    unsigned char *p = buf;
    uint64_t g = off;
    while (g < end) {
        uint64_t o = g / sp.slab_bytes, w = g % sp.slab_bytes;
        const tps_span *s = tps_spans_find(&sp, w);
        uint32_t owner = sp.owner[s->owner0]; /* any replica will do; the lowest rank is deterministic */
        uint64_t local = sp.owner_offset[s->owner0] + (w - s->begin);
        uint64_t run = s->end - w < end - g ? s->end - w : end - g;
        TPS_CHECK(rank_tensor(ss, &bt[owner], owner, t, err));
        const tps_index *ix = bt[owner].ix;
        const tps_tensor *x = bt[owner].x;
        /* o * rank_slab_bytes <= the rank tensor's size, which the reader bounded by its file. */
        uint64_t at = o * sp.rank_slab_bytes[owner] + local;
        if (ss->compare_replicas && s->nowners > 1) {
            /* The replicas are compared with the bytes themselves, so read them now. */
            TPS_CHECK(batch_flush(&bt[owner], err));
            TPS_CHECK(tps_tensor_read(ix, x, at, p, (size_t)run, err));
            TPS_CHECK(compare_replicas(ss, bt, t, &sp, s, g, p, run, err));
        } else if (x->reader_data) {
            TPS_CHECK(tps_tensor_read(ix, x, at, p, (size_t)run, err));
        } else {
            run_batch *b = &bt[owner];
            uint64_t fo = x->offset + at;
            if (b->n && (b->end != fo || b->n == (int)(sizeof b->iov / sizeof b->iov[0]))) TPS_CHECK(batch_flush(b, err));
            if (!b->n) {
                b->f = &ix->files[x->file];
                b->start = b->end = fo;
            }
            b->iov[b->n++] = (struct iovec){p, (size_t)run};
            b->end += run;
        }
        p += run;
        g += run;
    }
    for (uint64_t r = 0; r < ss->m->tp; r++) TPS_CHECK(batch_flush(&bt[r], err));
cleanup:
    free(bt);
    tps_spans_release(&sp);
    return st;
}

/* The whole file's CRC-32, read again: only on the path that explains a mismatch. */
static tps_status file_crc(const char *path, uint32_t *out, tps_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tps_fail_errno(err, errno, "%s: cannot open", path);
    unsigned char *buf = malloc(1u << 20);
    tps_status st = buf ? TPS_OK : tps_fail_oom(err, "checking a file");
    uint32_t crc = 0;
    for (uint64_t at = 0; st == TPS_OK;) {
        ssize_t n = pread(fd, buf, 1u << 20, (off_t)at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) st = tps_fail_errno(err, errno, "%s: read failed", path);
        if (n <= 0) break;
        crc = tps_crc32(crc, buf, (size_t)n);
        at += (uint64_t)n;
    }
    free(buf);
    close(fd);
    *out = crc;
    return st;
}

tps_status tps_shardset_changed_file(tps_shardset *ss, const tps_manifest_tensor *t, char *path, size_t size,
                                     bool *found, tps_error *err)
{
    const tps_manifest *m = ss->m;
    *found = false;
    for (uint64_t r = 0; r < m->tp; r++) {
        if (m->held && !m->held[r]) continue;
        const tps_index *ix;
        tps_status st = tps_shardset_open_rank(ss, r, &ix, err);
        if (st) return st;
        const tps_tensor *x = tps_index_find(ix, t->name);
        if (!x) continue;
        const tps_source_file *sf = &ix->files[x->file];
        const char *base = strrchr(sf->path, '/');
        base = base ? base + 1 : sf->path;
        const tps_manifest_file *mf = tps_manifest_find_file(m, base);
        if (mf && mf->rank != r) mf = NULL;
        uint32_t crc = 0;
        st = file_crc(sf->path, &crc, err);
        if (st) return st;
        if (!mf || mf->size != sf->size || mf->crc != crc) {
            snprintf(path, size, "%s", sf->path);
            *found = true;
            return TPS_OK;
        }
    }
    return TPS_OK;
}

tps_status tps_shardset_check_tensor(tps_shardset *ss, size_t i, uint32_t crc, tps_error *err)
{
    const tps_manifest_tensor *t = &ss->m->tensors[i];
    if (crc == t->crc || ss->m->adopted) return TPS_OK; /* an engine's set records no CRC */
    char path[4200];
    bool found;
    tps_status st = tps_shardset_changed_file(ss, t, path, sizeof path, &found, err);
    if (st) return st;
    if (found)
        return tps_fail(err, TPS_EMISMATCH,
                        "%s: tensor '%s' read back with CRC-32 %08x where the manifest says %08x: the file changed "
                        "after it was written (its own CRC-32 differs from the manifest's)",
                        path, t->name, (unsigned)crc, (unsigned)t->crc);
    return tps_fail(err, TPS_EMISMATCH,
                    "%s: tensor '%s' read back with CRC-32 %08x where the manifest says %08x, though its files' CRCs "
                    "match: the manifest does not describe these files",
                    ss->dir, t->name, (unsigned)crc, (unsigned)t->crc);
}

tps_status tps_shardset_source_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    tps_shardset *ss = ctx;
    return tps_shardset_read_global(ss, &ss->m->tensors[i], off, buf, len, err);
}

bool tps_shardset_locate_global(tps_shardset *ss, const tps_manifest_tensor *t, uint64_t off, int *fd, const char **path,
                                uint64_t *file_off, uint64_t *len)
{
    tps_spans sp;
    tps_error ignored;
    tps_error_clear(&ignored);
    if (off >= t->nbytes || tps_spans_build(t->part, t->dtype, t->ndim, t->shape, ss->m->tp, &sp, &ignored)) return false;
    bool found = false;
    uint64_t o = off / sp.slab_bytes, w = off % sp.slab_bytes;
    const tps_span *s = tps_spans_find(&sp, w);
    const tps_index *ix;
    /* Replicas are compared with the bytes themselves (read), and only a plain range maps. */
    if (s && !(ss->compare_replicas && s->nowners > 1)) {
        uint32_t owner = sp.owner[s->owner0];
        uint64_t at = o * sp.rank_slab_bytes[owner] + sp.owner_offset[s->owner0] + (w - s->begin);
        if (tps_shardset_open_rank(ss, owner, &ix, &ignored) == TPS_OK) {
            uint64_t in_tensor;
            found = tps_tensor_locate(ix, tps_index_find(ix, t->name), at, fd, path, file_off, &in_tensor);
            *len = s->end - w < in_tensor ? s->end - w : in_tensor;
        }
    }
    tps_spans_release(&sp);
    return found;
}

bool tps_shardset_source_locate(void *ctx, size_t i, uint64_t off, int *fd, const char **path, uint64_t *file_off,
                                uint64_t *len)
{
    tps_shardset *ss = ctx;
    return tps_shardset_locate_global(ss, &ss->m->tensors[i], off, fd, path, file_off, len);
}

tps_status tps_shardset_source_check(void *ctx, size_t i, uint32_t crc, tps_error *err)
{
    return tps_shardset_check_tensor(ctx, i, crc, err);
}

void tps_shardset_free(tps_shardset *ss)
{
    if (!ss) return;
    for (uint64_t r = 0; ss->m && ss->rank && r < ss->m->tp; r++) tps_index_free(ss->rank[r]);
    free(ss->rank);
    tps_manifest_free(ss->m);
    free(ss->dir);
    free(ss);
}
