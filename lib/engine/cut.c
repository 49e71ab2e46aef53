#include "cut.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../base/checked.h"
#include "../base/helper.h"
#include "../base/index.h"
#include "../base/iocache.h"
#include "../partition/spans.h"
#include "../targets/target.h"
#include "grid_parts.h"
#include "hf_index.h"
#include "prefetch.h"

/* Chunks of 1 MiB, 8 in flight: few syscalls, slices of dimension-0 cuts still written
 * straight from the chunk, chunks still in the shared cache when the consumer writes them
 * out, and memory ~20 MiB whatever the model. */
#define DEFAULT_CHUNK (1u << 20)
#define NSLOTS 8
/* Chunks below this are delivered to every rank by the consumer alone (see cut_tensor). */
#define HELPER_MIN ((size_t)64 << 10)

static const unsigned char zeros[64 << 10];

/* Per-rank output: the writer of the part being filled (a count-only writer for ranks this
 * run does not write: the manifest still describes them, so every node's manifest is
 * identical), and where each part begins in manifest order. */
typedef struct rank_out {
    const tps_sink *sink;
    tps_sink_file *w;
    size_t nparts, cur; /* cur: the part w writes */
    size_t *first;      /* first[p]: the first tensor of part p; first[nparts] == ntensors */
    size_t file0;       /* m->files index of part 0 */
    bool write;
} rank_out;

struct tps_cut_files {
    uint64_t tp;
    rank_out *outs; /* the plan: nparts, first and file0 of each rank */
};

static tps_status emit(rank_out *ro, const void *p, size_t n, tps_error *err)
{
    return ro->sink->write(ro->w, p, n, err);
}

static tps_status emit_zeros(rank_out *ro, uint64_t n, tps_error *err)
{
    while (n > 0) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        tps_status st = emit(ro, zeros, k, err);
        if (st) return st;
        n -= k;
    }
    return TPS_OK;
}

/* The stream the reader thread (lib/engine/prefetch.h) produces: every tensor's bytes in manifest
 * order, in chunks, read through the caller's read(), which therefore needs no locking.
 * Where a tensor's spans are long (dimension-0 cuts, replicated tensors) a chunk never
 * crosses a span boundary, so a chunk is one rank run and the reader's CRC of it is that
 * run's CRC too: the writers combine it instead of checksumming the bytes again. */
/* Source files mapped so far, by fd (a split reads one file or a few; a reshard one per rank). */
typedef struct mapped_file {
    int fd;
    const char *path;
    tps_io_map map;
    uint64_t advised_lo, advised_hi; /* the last read-ahead asked for: [lo, hi) of the file */
} mapped_file;

/* How far ahead of the chunk being checksummed the kernel is asked to read a mapped file, and
 * the least it is asked for at a time: a run of tiny tensors costs one madvise per MiB, not
 * one each (50,000 of them made 1.4 madvise calls a tensor). */
#define WILLNEED_AHEAD ((uint64_t)8 << 20)
#define WILLNEED_STEP ((uint64_t)1 << 20)

typedef struct source_stream {
    const tps_manifest *m;
    tps_global_read_fn read;
    tps_global_locate_fn locate;
    void *ctx;
    mapped_file *maps;
    size_t nmaps, capmaps;
    size_t i;
    uint64_t g;
    tps_spans sp; /* of tensor sp_i */
    size_t sp_i;
    uint32_t *src_crc; /* transposed tensors: the CRC of the source's order, read before their first chunk */
} source_stream;

typedef struct stream_at {
    source_stream *ss;
    size_t i;
} stream_at;

static tps_status read_at(void *ctx, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const stream_at *a = ctx;
    return a->ss->read(a->ss->ctx, a->i, off, buf, len, err);
}

/* A transposed tensor streams in the view's order, so the manifest's CRC (the source's
 * order) takes a pass of its own; blocked rows combine their blocks' CRCs instead. */
static tps_status source_crc(stream_at *a, const tps_manifest_tensor *t, uint32_t *out, tps_error *err)
{
    enum { CRC_CHUNK = 1 << 20 };
    unsigned char *b = malloc(CRC_CHUNK);
    if (!b) return tps_fail_oom(err, "checksumming a transposed tensor");
    uint32_t c = 0;
    tps_status st = TPS_OK;
    for (uint64_t at = 0; at < t->nbytes && st == TPS_OK;) {
        size_t n = t->nbytes - at < CRC_CHUNK ? (size_t)(t->nbytes - at) : CRC_CHUNK;
        st = read_at(a, at, b, n, err);
        if (st == TPS_OK) c = (uint32_t)crc32(c, b, (uInt)n);
        at += n;
    }
    free(b);
    *out = c;
    return st;
}

/* Tensor t's spans at tp as the copy engine streams it: those of the view a target's blocked or
 * transposed entry reads (lib/targets/target.h), else of the tensor itself. */
static tps_status view_spans(const tps_manifest_tensor *t, uint64_t tp, tps_spans *sp, tps_error *err)
{
    tps_partition fp;
    uint64_t vs[TPS_MAX_DIMS];
    memcpy(vs, t->shape, sizeof vs);
    tps_target_file_partition(t, &fp);
    tps_target_file_shape(t, vs);
    return tps_spans_build(&fp, t->dtype, t->ndim, vs, tp, sp, err);
}

/* The size of the chunk of tensor i at global byte g, the same for the reader and the consumer. */
static size_t chunk_at(const tps_spans *sp, uint64_t nbytes, uint64_t g, size_t cap)
{
    size_t n = nbytes - g < cap ? (size_t)(nbytes - g) : cap;
    if (sp->outer == 1 && sp->nspans > 0) {
        const tps_span *s = tps_spans_find(sp, g);
        if (s && s->end - g < n) n = (size_t)(s->end - g);
    }
    return n;
}

bool tps_tensor_locate(const tps_index *ix, const tps_tensor *t, uint64_t off, int *fd, const char **path,
                       uint64_t *file_off, uint64_t *len)
{
    if (!t || t->reader_data || off > t->nbytes) return false;
    *len = t->nbytes - off;
    const tps_source_file *f = &ix->files[t->file];
    *fd = f->fd;
    *path = f->path;
    *file_off = t->offset + off;
    return true;
}

static tps_status map_of(source_stream *ss, int fd, const char *path, mapped_file **out, tps_error *err)
{
    *out = NULL;
    for (size_t k = 0; k < ss->nmaps; k++)
        if (ss->maps[k].fd == fd) {
            if (ss->maps[k].map.base) *out = &ss->maps[k];
            return TPS_OK;
        }
    if (ss->nmaps == ss->capmaps) {
        size_t cap = ss->capmaps ? 2 * ss->capmaps : 8;
        mapped_file *m = realloc(ss->maps, cap * sizeof *m);
        if (!m) return tps_fail_oom(err, "mapping the source");
        ss->maps = m;
        ss->capmaps = cap;
    }
    mapped_file *mf = &ss->maps[ss->nmaps++];
    *mf = (mapped_file){.fd = fd, .path = path};
    /* No address space for it (ulimit -v, a 32-bit build) or a file that cannot be mapped:
     * read() it, as before, rather than fail. */
    tps_error ignored;
    tps_error_clear(&ignored);
    if (tps_io_map_file(fd, path, &mf->map, &ignored) == TPS_OK && mf->map.base) *out = mf;
    return TPS_OK;
}

/* The chunk straight from the mapped source file, checksummed there; *done false when the
 * bytes are not in a plain file (or the job runs uncached), for read() to fetch instead. */
static tps_status fill_mapped(source_stream *ss, tps_chunk *c, bool *done, tps_error *err)
{
    int fd;
    const char *path;
    uint64_t fo, len = c->n;
    mapped_file *mf = NULL;
    *done = false;
    /* A chunk that straddles two files (a reshard's piece from two source ranks) is read. */
    if (!ss->locate || tps_io_uncached() || !ss->locate(ss->ctx, ss->i, ss->g, &fd, &path, &fo, &len) || len < c->n)
        return TPS_OK;
    tps_status st = map_of(ss, fd, path, &mf, err);
    if (st || !mf) return st;
    const tps_io_map *mp = &mf->map;
    if (fo > mp->size || mp->size - fo < c->n)
        return tps_fail(err, TPS_EIO, "%s: file ended at offset %llu (it shrank while being read?)", path,
                        (unsigned long long)mp->size);
    uint64_t ahead = fo + WILLNEED_AHEAD;
    if (ahead < mf->advised_lo || ahead + c->n > mf->advised_hi) {
        uint64_t n = c->n > WILLNEED_STEP ? c->n : WILLNEED_STEP;
        tps_io_map_willneed(mp, ahead, n);
        mf->advised_lo = ahead;
        mf->advised_hi = ahead + n;
    }
    c->data = mp->base + fo;
    c->crc = 0;
    if (!tps_io_mapped_crc(c->data, c->n, &c->crc))
        return tps_fail(err, TPS_EIO, "%s: a page between offsets %llu and %llu is gone (the file shrank while being read?)",
                        path, (unsigned long long)fo, (unsigned long long)(fo + c->n));
    c->have_crc = true;
    *done = true;
    return TPS_OK;
}

/* After a failed copy: a mapped source that shrank is the cause, not the output's write that
 * met the missing page (EFAULT). */
static void blame_shrunk_source(const source_stream *ss, tps_error *err)
{
    for (size_t k = 0; k < ss->nmaps; k++) {
        struct stat sb;
        if (ss->maps[k].map.base && fstat(ss->maps[k].fd, &sb) == 0 && (uint64_t)sb.st_size < ss->maps[k].map.size) {
            tps_error_clear(err);
            tps_fail(err, TPS_EIO, "%s: file ended at offset %llu (it shrank while being read?)", ss->maps[k].path,
                     (unsigned long long)sb.st_size);
            return;
        }
    }
}

/* Moves to the tensor the next chunk is of and sets *n to that chunk's size, 0 at the end of
 * the stream; fill_source() and peek_source() both size chunks here, so they agree. */
static tps_status next_chunk(source_stream *ss, size_t cap, size_t *n, tps_error *err)
{
    *n = 0;
    while (ss->i < ss->m->ntensors && ss->g >= ss->m->tensors[ss->i].nbytes) {
        ss->i++;
        ss->g = 0;
    }
    if (ss->i == ss->m->ntensors) return TPS_OK;
    const tps_manifest_tensor *t = &ss->m->tensors[ss->i];
    if (ss->sp_i != ss->i) {
        tps_spans_release(&ss->sp);
        ss->sp_i = (size_t)-1;
        tps_status st = view_spans(t, ss->m->tp, &ss->sp, err);
        if (st) return st;
        ss->sp_i = ss->i;
    }
    *n = chunk_at(&ss->sp, t->nbytes, ss->g, cap);
    return TPS_OK;
}

/* The prefetch ring's peek (lib/engine/prefetch.h): lets a run of tiny tensors share a slot. */
static size_t peek_source(void *arg, size_t cap)
{
    tps_error ignored; /* the fill that follows meets it again */
    size_t n;
    tps_error_clear(&ignored);
    return next_chunk(arg, cap, &n, &ignored) == TPS_OK ? n : 0;
}

static tps_status fill_source(void *arg, unsigned char *buf, size_t cap, tps_chunk *c, tps_error *err)
{
    source_stream *ss = arg;
    size_t *n = &c->n;
    tps_status st = next_chunk(ss, cap, n, err);
    if (st) return st;
    if (*n == 0) {
        c->end = true;
        return TPS_OK;
    }
    const tps_manifest_tensor *t = &ss->m->tensors[ss->i];
    if (tps_outdir_interrupted())
        return tps_fail(err, TPS_EINTERRUPTED, "interrupted by signal %d while copying '%s'", tps_outdir_interrupted(), t->name);
    if (tps_target_permuted(t)) { /* the view the file partition cuts (lib/targets/target.h) */
        stream_at a = {ss, ss->i};
        if (ss->g == 0 && tps_target_crc_from_source(t)) st = source_crc(&a, t, &ss->src_crc[ss->i], err);
        if (st == TPS_OK) st = tps_target_view_read(t, ss->m->tp, read_at, &a, ss->g, buf, *n, err);
    } else {
        bool mapped = false;
        st = fill_mapped(ss, c, &mapped, err);
        if (st == TPS_OK && !mapped) st = ss->read(ss->ctx, ss->i, ss->g, buf, *n, err);
    }
    ss->g += *n;
    return st;
}

/* One chunk (global bytes [g, g+n) of a tensor) handed to the ranks [r0, r1): the runs they
 * hold, and the zeros that pad the end of each of their slabs.  Each rank's writer is used
 * by the one thread its half of the ranks belongs to. */
typedef struct delivery {
    const tps_spans *sp;
    const unsigned char *buf;
    uint64_t g;
    size_t n;
    uint32_t crc; /* of the whole chunk */
    rank_out *outs;
    uint64_t r0, r1;
} delivery;

static tps_status deliver(void *arg, tps_error *err)
{
    const delivery *d = arg;
    const tps_spans *sp = d->sp;
    size_t at = 0;
    const tps_span *first = tps_spans_find(sp, d->g % sp->slab_bytes);
    size_t k = first ? (size_t)(first - sp->span) : 0; /* current span */
    while (at < d->n) {
        uint64_t w = (d->g + at) % sp->slab_bytes;
        if (w == 0) k = 0;
        while (sp->span[k].end <= w) k++;
        const tps_span *s = &sp->span[k];
        size_t run = s->end - w < d->n - at ? (size_t)(s->end - w) : d->n - at;
        for (uint32_t j = 0; j < s->nowners; j++) {
            uint32_t r = sp->owner[s->owner0 + j];
            if (r < d->r0 || r >= d->r1) continue;
            const rank_out *ro = &d->outs[r];
            tps_status st = run == d->n ? ro->sink->write_crc(ro->w, d->buf, d->n, d->crc, err) /* the whole chunk */
                                        : ro->sink->write(ro->w, d->buf + at, run, err);
            if (st) return st;
        }
        at += run;
        if (w + run == sp->slab_bytes)
            for (uint64_t r = d->r0; r < d->r1; r++)
                if (sp->rank_pad_bytes[r]) {
                    tps_status st = emit_zeros(&d->outs[r], sp->rank_pad_bytes[r], err);
                    if (st) return st;
                }
    }
    return TPS_OK;
}

/* Streams global tensor i and hands each byte run to the ranks that hold it: the upper
 * half of the ranks on the helper thread when there is one, the rest here. */
static tps_status cut_tensor(tps_manifest *m, size_t i, tps_prefetch *pf, size_t chunk, rank_out *outs,
                             tps_helper *helper, const tps_cut_opts *o, tps_progress *prog, tps_error *err)
{
    tps_manifest_tensor *t = &m->tensors[i];
    tps_spans sp;
    tps_status st = view_spans(t, m->tp, &sp, err);
    if (st) return st;
    uint32_t crc = 0;
    /* Blocked rows stream in the view's order: the manifest's CRC is the source's, combined
     * from each block's CRC in source order at the end. */
    uint64_t G = 0, block = 0, nblk = 0;
    uint32_t *bcrc = NULL;
    if (t->target_blocks) {
        TPS_CHECK(tps_target_blocked_geometry(t, m->tp, &G, &block, err));
        nblk = G * t->target_blocks;
        if (!(bcrc = calloc(nblk + 1, sizeof *bcrc))) {
            st = tps_fail_oom(err, "copying blocked rows");
            goto cleanup;
        }
    }
    uint64_t g = 0; /* position in the global tensor */
    uint64_t mid = helper ? m->tp / 2 : m->tp;
    while (g < t->nbytes) {
        if (tps_outdir_interrupted()) {
            st = tps_fail(err, TPS_EINTERRUPTED, "interrupted by signal %d while copying '%s'", tps_outdir_interrupted(), t->name);
            goto cleanup;
        }
        const unsigned char *buf;
        size_t n;
        uint32_t c;
        TPS_CHECK(tps_prefetch_take(pf, &buf, &n, &c, err));
        if (!buf || n != chunk_at(&sp, t->nbytes, g, chunk)) {
            st = tps_fail(err, TPS_EIO, "internal: the read stream is out of step in '%s'", t->name);
            goto cleanup;
        }
        crc = (uint32_t)crc32_combine(crc, c, (z_off_t)n);
        for (size_t at = 0; bcrc && at < n;) {
            uint64_t v = g + at, k = block - v % block;
            if (k > n - at) k = n - at;
            uint64_t b = v / block;
            bcrc[b] = (uint32_t)crc32_combine(bcrc[b], (uint32_t)crc32(0, buf + at, (uInt)k), (z_off_t)k);
            at += (size_t)k;
        }
        /* A small chunk (a tiny tensor of a many-expert model) is written here whole: handing
         * half of it to the helper and waiting for it costs more than writing it. */
        tps_helper *h = n >= HELPER_MIN ? helper : NULL;
        delivery lo = {&sp, buf, g, n, c, outs, 0, h ? mid : m->tp}, hi = lo;
        hi.r0 = mid;
        hi.r1 = m->tp;
        if (h) tps_helper_post(h, deliver, &hi);
        st = deliver(&lo, err);
        tps_status hst = h ? tps_helper_wait(h, err) : TPS_OK; /* first error kept */
        if (st == TPS_OK) st = hst;
        if (st) goto cleanup;
        tps_prefetch_done(pf);
        g += n;
        prog->done += n;
        if (o->progress) o->progress(prog, o->progress_arg);
    }
    if (bcrc) { /* view block b*G + h is source block h*B + b */
        crc = 0;
        for (uint64_t h = 0; h < G; h++)
            for (uint64_t b = 0; b < t->target_blocks; b++)
                crc = (uint32_t)crc32_combine(crc, bcrc[b * G + h], (z_off_t)block);
    }
    t->crc = crc;
cleanup:
    free(bcrc);
    tps_spans_release(&sp);
    return st;
}

/* The directories of a file name with '/' (a caller's file_name), under the output. */
static tps_status make_parents(const tps_outdir *od, const char *name, tps_error *err)
{
    for (const char *slash = strchr(name, '/'); slash; slash = strchr(slash + 1, '/')) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - name), name);
        char *path = tps_outdir_path(od, dir);
        if (!path) return tps_fail_oom(err, "making directories");
        int rc = mkdir(path, 0755);
        int e = errno;
        free(path);
        if (rc && e != EEXIST) return tps_fail_errno(err, e, "%s: cannot make directory %s", od->tmp, dir);
    }
    return TPS_OK;
}

/* Opens part p of rank r: the writer for tensors [first[p], first[p+1]). */
static tps_status open_part(tps_manifest *m, uint64_t r, rank_out *ro, size_t p, const tps_outdir *od,
                            const tps_cut_opts *o, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t i0 = ro->first[p], n = ro->first[p + 1] - i0;
    /* a target's constants close the last part (of their stage, in a grid) */
    uint64_t stage = tps_grid_part_stage(m, i0);
    size_t nx = tps_grid_part_closes_stage(m, ro->first, ro->nparts, p) ? m->nextras : 0;
    tps_sink_tensor *e = calloc(n + nx + 1, sizeof *e);
    uint64_t *shapes = calloc(n ? n * TPS_MAX_DIMS : 1, sizeof *shapes);
    char rank_s[32], tp_s[32];
    snprintf(rank_s, sizeof rank_s, "%llu", (unsigned long long)r);
    snprintf(tp_s, sizeof tp_s, "%llu", (unsigned long long)m->tp);
    tps_kv meta[] = {{(char *)"tp_rank", rank_s}, {(char *)"tp_size", tp_s}};
    char *path = NULL;
    if (!e || !shapes) {
        st = tps_fail_oom(err, "preparing rank headers");
        goto cleanup;
    }
    for (size_t k = 0; k < n; k++) {
        const tps_manifest_tensor *t = &m->tensors[i0 + k];
        tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, shapes + k * TPS_MAX_DIMS);
        int nd = tps_target_header_shape(t, shapes + k * TPS_MAX_DIMS);
        e[k] = (tps_sink_tensor){t->name, t->dtype, nd, shapes + k * TPS_MAX_DIMS};
    }
    if (m->target) n = tps_target_file_tensors(m, i0, n, r, e, shapes); /* fused runs: one tensor each */
    for (size_t k = 0; k < nx; k++)
        if (tps_grid_extra_on(m, k, stage)) e[n++] = (tps_sink_tensor){m->extras[k].name, TPS_DT_F32, 0, shapes};
    if (ro->write) {
        path = tps_outdir_path(od, m->files[ro->file0 + p].name);
        if (!path) {
            st = tps_fail_oom(err, "naming rank files");
            goto cleanup;
        }
        TPS_CHECK(make_parents(od, m->files[ro->file0 + p].name, err));
    }
    const tps_kv *kv = meta;
    size_t nkv = o->checkpoint ? 0 : 2;
    if (o->file_meta) kv = o->file_meta(o->files_arg, r, p, &nkv);
    st = ro->sink->open(path, e, n, kv, nkv, &ro->w, err);
    ro->cur = p;
cleanup:
    free(path);
    free(e);
    free(shapes);
    return st;
}

static tps_status close_part(tps_manifest *m, rank_out *ro, const tps_cut_opts *o, tps_error *err)
{
    tps_manifest_file *f = &m->files[ro->file0 + ro->cur];
    if (tps_grid_part_closes_stage(m, ro->first, ro->nparts, ro->cur)) {
        uint64_t stage = tps_grid_part_stage(m, ro->first[ro->cur]);
        for (size_t k = 0; k < m->nextras; k++) {
            unsigned char le[4];
            if (!tps_grid_extra_on(m, k, stage)) continue;
            tps_target_extra_bytes(m->extras[k].value, le);
            tps_status st = ro->sink->write(ro->w, le, sizeof le, err);
            if (st) return st;
        }
    }
    tps_sink_file *w = ro->w;
    ro->w = NULL; /* commit frees it whatever happens */
    tps_status st = ro->sink->commit(w, &f->crc, &f->size, err);
    if (st == TPS_OK && ro->write && o->file_done) o->file_done(f->name, f->size, o->file_done_arg);
    return st;
}

/* Before tensor i: every rank's writer must be the part that holds i. */
static tps_status enter_tensor(tps_manifest *m, rank_out *outs, size_t i, const tps_outdir *od,
                               const tps_cut_opts *o, tps_error *err)
{
    for (uint64_t r = 0; r < m->tp; r++) {
        rank_out *ro = &outs[r];
        if (i < ro->first[ro->cur + 1]) continue;
        tps_status st = close_part(m, ro, o, err);
        if (st == TPS_OK) st = open_part(m, r, ro, ro->cur + 1, od, o, err);
        if (st) return st;
    }
    return TPS_OK;
}

/* Splits rank r's tensors, in manifest order, into parts of at most max data bytes (0: one
 * part); a slice larger than max gets a part of its own. */
static tps_status plan_parts(const tps_manifest *m, uint64_t r, uint64_t max, const tps_cut_opts *o, rank_out *ro,
                             tps_error *err)
{
    tps_status st = TPS_OK;
    uint64_t *bytes = calloc(m->ntensors + 1, sizeof *bytes);
    ro->first = calloc(m->ntensors + 2, sizeof *ro->first);
    if (!bytes || !ro->first) {
        st = tps_fail_oom(err, "planning parts");
        goto cleanup;
    }
    for (size_t i = 0; max && i < m->ntensors; i++) TPS_CHECK(tps_manifest_rank_bytes(m, i, r, &bytes[i], err));
    if (o->nparts) {
        memcpy(ro->first, o->part_first, (o->nparts + 1) * sizeof *ro->first);
        ro->nparts = o->nparts;
    } else if (m->target) TPS_CHECK(tps_target_parts(m, bytes, max, ro->first, &ro->nparts, err));
    else tps_parts_greedy(bytes, m->ntensors, max, ro->first, &ro->nparts);
    if (!o->nparts) TPS_CHECK(tps_grid_parts_split(m, ro->first, &ro->nparts, err));
cleanup:
    free(bytes);
    return st;
}

/* The name of part p of rank r: the template's, or for a plain checkpoint Hugging Face's. */
static tps_status file_name(const tps_cut_opts *o, const char *tmpl, uint64_t r, uint64_t T, size_t p, size_t nparts,
                            char *out, size_t size, tps_error *err)
{
    /* A plain checkpoint in one file may be given its name (merge -o FILE.safetensors). */
    if (o->file_name) return o->file_name(o->files_arg, r, T, p, out, size, err);
    if (!o->checkpoint || (o->name_template && nparts == 1)) return tps_format_name(tmpl, r, T, p, out, size, err);
    if (nparts == 1) snprintf(out, size, "model.safetensors");
    else snprintf(out, size, "model-%05zu-of-%05zu.safetensors", p + 1, nparts);
    return TPS_OK;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every name the set will hold, files and the manifest and indexes alike, must be distinct:
 * sorted, so a set of 65536 ranks is checked in n log n. */
static tps_status refuse_collisions(const tps_manifest *m, const tps_cut_opts *o,
                                    const char *tmpl, tps_error *err)
{
    /* A rank index name is TPS_RANK_INDEX_TEMPLATE with two numbers of at most 5 digits
     * (tp <= TPS_MAX_TP): under 64 bytes, so 4 MiB at the largest tp. */
    enum { INDEX_NAME_MAX = 64 };
    bool rank_indexes = o->max_part_bytes && !o->checkpoint && !m->target;
    size_t n = m->nfiles + 1 + (rank_indexes ? m->tp : 0);
    char **names = calloc(n, sizeof *names);
    char *index_names = rank_indexes ? calloc(m->tp, INDEX_NAME_MAX) : NULL;
    tps_status st = TPS_OK;
    if (!names || (rank_indexes && !index_names)) {
        st = tps_fail_oom(err, "naming rank files");
        goto cleanup;
    }
    size_t k = 0;
    for (size_t f = 0; f < m->nfiles; f++) names[k++] = m->files[f].name;
    names[k++] = o->checkpoint ? (char *)TPS_CHECKPOINT_INDEX_NAME : (char *)TPS_MANIFEST_NAME;
    for (uint64_t r = 0; rank_indexes && r < m->tp; r++) {
        char *name = index_names + r * INDEX_NAME_MAX;
        TPS_CHECK(tps_format_name(TPS_RANK_INDEX_TEMPLATE, r, m->tp, 0, name, INDEX_NAME_MAX, err));
        names[k++] = name;
    }
    qsort(names, k, sizeof *names, cmp_name);
    for (size_t i = 1; i < k; i++) {
        if (strcmp(names[i - 1], names[i]) != 0) continue;
        const char *what = strcmp(names[i], TPS_MANIFEST_NAME) == 0 ? "the manifest's name"
                           : strstr(names[i], ".index.json")         ? "an index's name"
                                                                     : "two files the same name";
        st = tps_fail(err, TPS_EARG, "file name template '%s' gives %s, '%s'", tmpl, what, names[i]);
        goto cleanup;
    }
cleanup:
    free(index_names);
    free(names);
    return st;
}

/* Names every file (rank-major, parts in order) and refuses names that collide. */
static tps_status name_files(tps_manifest *m, rank_out *outs, const tps_cut_opts *o, const char *tmpl, tps_error *err)
{
    size_t n = 0;
    for (uint64_t r = 0; r < m->tp; r++) n += outs[r].nparts;
    if (!(m->files = calloc(n, sizeof *m->files))) return tps_fail_oom(err, "naming rank files");
    for (uint64_t r = 0; r < m->tp; r++) {
        outs[r].file0 = m->nfiles;
        for (size_t p = 0, stage_part = 0; p < outs[r].nparts; p++) {
            char name[1024];
            uint64_t stage = tps_grid_part_stage(m, outs[r].first[p]);
            if (p && stage != tps_grid_part_stage(m, outs[r].first[p - 1])) stage_part = 0;
            /* a grid's parts count from 0 in each stage, as vLLM's loader globs them */
            tps_status st = m->pp > 1 ? tps_grid_format_name(m, tmpl, stage, r, stage_part, name, sizeof name, err)
                                      : file_name(o, tmpl, r, m->tp, p, outs[r].nparts, name, sizeof name, err);
            if (st) return st;
            stage_part++;
            tps_manifest_file *f = &m->files[m->nfiles];
            if (!(f->name = strdup(name))) return tps_fail_oom(err, "naming rank files");
            f->rank = r;
            f->part = p;
            f->pp_rank = stage;
            m->nfiles++;
        }
    }
    return refuse_collisions(m, o, tmpl, err);
}

void tps_cut_files_free(tps_cut_files *f)
{
    if (!f) return;
    for (uint64_t r = 0; f->outs && r < f->tp; r++) free(f->outs[r].first);
    free(f->outs);
    free(f);
}

tps_status tps_cut_files_plan(tps_manifest *m, const tps_cut_opts *o, tps_cut_files **out, tps_error *err)
{
    *out = NULL;
    const char *tmpl = o->name_template ? o->name_template
                       : o->max_part_bytes ? TPS_DEFAULT_PART_TEMPLATE
                                           : TPS_DEFAULT_NAME_TEMPLATE;
    if (m->pp > 1 && strcmp(tmpl, TPS_DEFAULT_PART_TEMPLATE) == 0) tmpl = TPS_GRID_PART_TEMPLATE;
    if (o->checkpoint && m->tp != 1)
        return tps_fail(err, TPS_EINVALID, "internal: a plain checkpoint is written at tp 1, not %llu",
                        (unsigned long long)m->tp);
    if (!o->checkpoint && o->max_part_bytes && !strstr(tmpl, "{part}"))
        return tps_fail(err, TPS_EARG, "file name template '%s' lacks {part}, which a size cap needs", tmpl);
    tps_status st = TPS_OK;
    tps_cut_files *f = calloc(1, sizeof *f);
    if (!f || !(f->outs = calloc(m->tp, sizeof *f->outs))) {
        free(f);
        return tps_fail_oom(err, "planning the files");
    }
    f->tp = m->tp;
    for (uint64_t r = 0; r < m->tp; r++) TPS_CHECK(plan_parts(m, r, o->nparts ? 0 : o->max_part_bytes, o, &f->outs[r], err));
    TPS_CHECK(name_files(m, f->outs, o, tmpl, err));
    *out = f;
    f = NULL;
cleanup:
    tps_cut_files_free(f);
    return st;
}

/* model.safetensors.index.json of a plain checkpoint in several parts. */
static tps_status checkpoint_index_write(const tps_manifest *m, const rank_out *ro, const tps_outdir *od,
                                         tps_error *err)
{
    const char **names = calloc(ro->nparts, sizeof *names);
    if (!names) return tps_fail_oom(err, "writing the index");
    uint64_t total = 0;
    for (size_t p = 0; p < ro->nparts; p++) names[p] = m->files[ro->file0 + p].name;
    for (size_t i = 0; i < m->ntensors; i++) total += m->tensors[i].nbytes;
    tps_status st = tps_hf_index_write(od, TPS_CHECKPOINT_INDEX_NAME, m, ro->first, ro->nparts, names, total, err);
    free(names);
    return st;
}

tps_status tps_cut(tps_manifest *m, const tps_cut_files *files, tps_global_read_fn read, void *ctx,
                   const tps_outdir *od, const tps_cut_opts *o, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t chunk = o->chunk_bytes ? (size_t)o->chunk_bytes : DEFAULT_CHUNK;
    rank_out *outs = calloc(m->tp, sizeof *outs);
    source_stream ss = {.m = m, .read = read, .locate = o->locate, .ctx = ctx, .sp_i = (size_t)-1};
    tps_prefetch *pf = NULL;
    tps_helper *helper = NULL;
    if (!outs || !(ss.src_crc = calloc(m->ntensors + 1, sizeof *ss.src_crc))) {
        st = tps_fail_oom(err, "starting the copy");
        goto cleanup;
    }
    tps_progress prog = {0, 0, NULL};
    for (size_t i = 0; i < m->ntensors; i++) prog.total += m->tensors[i].nbytes;
    for (uint64_t r = 0; r < m->tp; r++) {
        outs[r] = files->outs[r];
        outs[r].sink = o->sink;
        outs[r].w = NULL;
        outs[r].write = od && (!o->write_rank || o->write_rank[r]);
    }
    for (uint64_t r = 0; r < m->tp; r++) TPS_CHECK(open_part(m, r, &outs[r], 0, od, o, err));
    /* Jobs larger than a quarter of memory cannot stay cached anyway: read and write them
     * around the page cache instead of evicting everything else (lib/base/iocache.h). */
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    tps_io_set_uncached(pages > 0 && psize > 0 && prog.total > (uint64_t)pages * (uint64_t)psize / 4);
    TPS_CHECK(tps_prefetch_start(fill_source, peek_source, &ss, chunk, NSLOTS, true, &pf, err));
    /* With two cores or more, a second writer takes half of the ranks (lib/base/helper.h). */
    if (m->tp >= 2 && sysconf(_SC_NPROCESSORS_ONLN) >= 2) TPS_CHECK(tps_helper_start(&helper, err));
    for (size_t i = 0; i < m->ntensors; i++) {
        prog.tensor = m->tensors[i].name;
        TPS_CHECK(enter_tensor(m, outs, i, od, o, err));
        TPS_CHECK(cut_tensor(m, i, pf, chunk, outs, helper, o, &prog, err));
        if (tps_target_crc_from_source(&m->tensors[i])) m->tensors[i].crc = ss.src_crc[i];
        if (o->tensor_done) TPS_CHECK(o->tensor_done(o->tensor_done_arg, i, m->tensors[i].crc, err));
    }
    for (uint64_t r = 0; r < m->tp; r++) {
        TPS_CHECK(close_part(m, &outs[r], o, err));
        if (!o->max_part_bytes || !outs[r].write) continue;
        if (o->checkpoint) {
            if (outs[r].nparts > 1) TPS_CHECK(checkpoint_index_write(m, &outs[r], od, err));
        } else if (!m->target) { /* an engine finds its parts by glob; an index would name source tensors */
            TPS_CHECK(tps_rank_index_write(m, r, outs[r].first, outs[r].file0, od, err));
        }
    }
cleanup:
    tps_helper_stop(helper);
    tps_prefetch_stop(pf);
    if (st && st != TPS_EINTERRUPTED) blame_shrunk_source(&ss, err);
    for (size_t k = 0; k < ss.nmaps; k++) tps_io_unmap(&ss.maps[k].map); /* after the threads that read it */
    free(ss.maps);
    tps_spans_release(&ss.sp);
    free(ss.src_crc);
    tps_io_set_uncached(false);
    for (uint64_t r = 0; outs && r < m->tp; r++)
        if (outs[r].w) o->sink->abort(outs[r].w);
    free(outs);
    return st;
}
