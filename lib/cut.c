#include "cut.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "checked.h"
#include "spans.h"
#include "formats/safetensors.h"

#define DEFAULT_CHUNK (8u << 20)

static const unsigned char zeros[64 << 10];

tps_status tps_format_name(const char *tmpl, uint64_t r, uint64_t T, uint64_t part, char *out, size_t size,
                           tps_error *err)
{
    size_t n = 0;
    for (const char *p = tmpl; *p;) {
        char num[32];
        const char *piece = NULL;
        size_t plen = 0;
        if (strncmp(p, "{rank}", 6) == 0) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)r);
            piece = num;
            p += 6;
        } else if (strncmp(p, "{tp}", 4) == 0) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)T);
            piece = num;
            p += 4;
        } else if (strncmp(p, "{part}", 6) == 0) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)part);
            piece = num;
            p += 6;
        } else {
            piece = p;
            plen = 1;
            p++;
        }
        if (!plen) plen = strlen(piece);
        if (n + plen + 1 > size) return tps_fail(err, TPS_EUSAGE, "file name template '%s' gives too long a name", tmpl);
        memcpy(out + n, piece, plen);
        n += plen;
    }
    out[n] = '\0';
    if (!n || strchr(out, '/') || strcmp(out, ".") == 0 || strcmp(out, "..") == 0 || out[0] == '.')
        return tps_fail(err, TPS_EUSAGE, "file name template '%s' gives '%s', not a plain file name", tmpl, out);
    if (!strstr(tmpl, "{rank}") && T > 1)
        return tps_fail(err, TPS_EUSAGE, "file name template '%s' lacks {rank}", tmpl);
    return TPS_OK;
}

/* Per-rank output: a writer, or only a running count and CRC for ranks this run does not
 * write (the manifest still describes them, so every node's manifest is identical). */
typedef struct rank_out {
    tps_st_writer *w;
} rank_out;

static tps_status emit(rank_out *ro, const void *p, size_t n, tps_error *err)
{
    return tps_st_writer_write(ro->w, p, n, err);
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

/* Streams global tensor i and hands each byte run to the ranks that hold it. */
static tps_status cut_tensor(tps_manifest *m, size_t i, tps_global_read_fn read, void *ctx, rank_out *outs,
                             unsigned char *buf, size_t chunk, const tps_cut_opts *o, tps_progress *prog,
                             tps_error *err)
{
    tps_manifest_tensor *t = &m->tensors[i];
    tps_spans sp;
    tps_status st = tps_spans_build(&t->part, t->dtype, t->ndim, t->shape, m->tp, &sp, err);
    if (st) return st;
    uLong crc = crc32(0, NULL, 0);
    uint64_t g = 0; /* position in the global tensor */
    size_t k = 0;   /* current span */
    while (g < t->nbytes) {
        if (tps_outdir_interrupted()) {
            st = tps_fail(err, TPS_EIO, "interrupted by signal %d while copying '%s'", tps_outdir_interrupted(), t->name);
            goto cleanup;
        }
        size_t n = t->nbytes - g < chunk ? (size_t)(t->nbytes - g) : chunk;
        TPS_CHECK(read(ctx, i, g, buf, n, err));
        crc = crc32_z(crc, buf, n);
        size_t at = 0;
        while (at < n) {
            uint64_t w = (g + at) % sp.slab_bytes;
            if (w == 0) k = 0;
            while (sp.span[k].end <= w) k++;
            const tps_span *s = &sp.span[k];
            size_t run = s->end - w < n - at ? (size_t)(s->end - w) : n - at;
            for (uint32_t j = 0; j < s->nowners; j++)
                TPS_CHECK(emit(&outs[sp.owner[s->owner0 + j]], buf + at, run, err));
            at += run;
            if (w + run == sp.slab_bytes)
                for (uint64_t r = 0; r < m->tp; r++)
                    if (sp.rank_pad_bytes[r]) TPS_CHECK(emit_zeros(&outs[r], sp.rank_pad_bytes[r], err));
        }
        g += n;
        prog->done += n;
        if (o->progress) o->progress(prog, o->progress_arg);
    }
    t->crc = (uint32_t)crc;
cleanup:
    tps_spans_release(&sp);
    return st;
}

static tps_status open_rank(tps_manifest *m, uint64_t r, const tps_outdir *od, const char *name,
                            rank_out *ro, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t n = m->ntensors;
    tps_st_entry *e = calloc(n ? n : 1, sizeof *e);
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
    for (size_t i = 0; i < n; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        tps_partition_rank_shape(&t->part, t->ndim, t->shape, m->tp, r, shapes + i * TPS_MAX_DIMS);
        e[i] = (tps_st_entry){t->name, t->dtype, t->ndim, shapes + i * TPS_MAX_DIMS};
    }
    if (od) {
        path = tps_outdir_path(od, name);
        if (!path) {
            st = tps_fail_oom(err, "naming rank files");
            goto cleanup;
        }
    }
    st = tps_st_writer_open(path, e, n, meta, 2, &ro->w, err);
cleanup:
    free(path);
    free(e);
    free(shapes);
    return st;
}

tps_status tps_cut(tps_manifest *m, tps_global_read_fn read, void *ctx, const tps_outdir *od, const tps_cut_opts *o,
                   tps_error *err)
{
    tps_status st = TPS_OK;
    const char *tmpl = o->name_template ? o->name_template : TPS_DEFAULT_NAME_TEMPLATE;
    size_t chunk = o->chunk_bytes ? (size_t)o->chunk_bytes : DEFAULT_CHUNK;
    rank_out *outs = calloc(m->tp, sizeof *outs);
    unsigned char *buf = malloc(chunk);
    m->files = calloc(m->tp, sizeof *m->files);
    if (!outs || !buf || !m->files) {
        st = tps_fail_oom(err, "starting the copy");
        goto cleanup;
    }
    tps_progress prog = {0, 0, NULL};
    for (size_t i = 0; i < m->ntensors; i++) prog.total += m->tensors[i].nbytes;
    for (uint64_t r = 0; r < m->tp; r++) {
        char name[1024];
        TPS_CHECK(tps_format_name(tmpl, r, m->tp, 0, name, sizeof name, err));
        for (uint64_t q = 0; q < r; q++)
            if (strcmp(m->files[q].name, name) == 0) {
                st = tps_fail(err, TPS_EUSAGE, "file name template '%s' gives ranks %llu and %llu the same name", tmpl,
                              (unsigned long long)q, (unsigned long long)r);
                goto cleanup;
            }
        m->files[r].name = strdup(name);
        m->files[r].rank = r;
        m->nfiles = r + 1;
        if (!m->files[r].name) {
            st = tps_fail_oom(err, "naming rank files");
            goto cleanup;
        }
        bool write = !o->write_rank || o->write_rank[r];
        TPS_CHECK(open_rank(m, r, write ? od : NULL, name, &outs[r], err));
    }
    for (size_t i = 0; i < m->ntensors; i++) {
        prog.tensor = m->tensors[i].name;
        TPS_CHECK(cut_tensor(m, i, read, ctx, outs, buf, chunk, o, &prog, err));
    }
    for (uint64_t r = 0; r < m->tp; r++) {
        tps_st_writer *w = outs[r].w;
        outs[r].w = NULL; /* commit frees it whatever happens */
        TPS_CHECK(tps_st_writer_commit(w, &m->files[r].crc, &m->files[r].size, err));
    }
cleanup:
    for (uint64_t r = 0; outs && r < m->tp; r++) tps_st_writer_abort(outs[r].w);
    free(outs);
    free(buf);
    return st;
}
