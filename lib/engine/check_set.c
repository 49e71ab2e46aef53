/* Checking a shard set against its manifest (lib/engine/check_set.h). */
#include "check_set.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../base/crc.h"
#include "../base/json.h"
#include "../targets/target.h"
#include "gather.h"
#include "grid_parts.h"

void tps_check_finding(tps_check_findings *f, const char *msg)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        char **p = f->fail_alloc ? NULL : realloc(f->msg, cap * sizeof *p);
        if (!p) {
            f->oom = true;
            return;
        }
        f->msg = p;
        f->cap = cap;
    }
    char *s = strdup(msg);
    if (s) f->msg[f->n++] = s;
    else f->oom = true;
}

void tps_check_findingf(tps_check_findings *f, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tps_check_finding(f, msg);
}

void tps_check_findings_free(tps_check_findings *f)
{
    for (size_t i = 0; i < f->n; i++) free(f->msg[i]);
    free(f->msg);
    f->msg = NULL;
    f->n = f->cap = 0;
}

/* Tensors are independent (each has its own global CRC and its own CRC per rank), so check
 * walks them on several threads: each claims the next tensor and gathers it with its own
 * buffers, keeping that tensor's findings apart; they are reported afterwards in manifest
 * order, so the output does not depend on timing. */
typedef struct check_job {
    tps_shardset *ss;
    const tps_index *src;
    uint32_t *rank_crc;   /* [tensor * tp + rank] */
    tps_check_findings *per_tensor; /* one list per tensor */
    bool *crc_checked;    /* per tensor: its reassembled global CRC was compared with the manifest */
    size_t next;          /* the next tensor to claim */
    tps_progress prog;
    const tps_check_opts *o;
    pthread_mutex_t mu; /* next, prog and the progress line */
    int threads;
} check_job;

typedef struct source_cmp {
    check_job *job;
    const tps_tensor *x;
    unsigned char *buf;
    bool differs;
    tps_check_findings *f;
    const char *name;
} source_cmp;

#define CMP_CHUNK (4u << 20)

static tps_status compare_with_source(void *arg, uint64_t off, const void *p, size_t n, tps_error *err)
{
    source_cmp *c = arg;
    pthread_mutex_lock(&c->job->mu);
    c->job->prog.done += n;
    c->job->prog.tensor = c->name;
    if (c->job->o->progress) c->job->o->progress(&c->job->prog, c->job->o->progress_arg);
    pthread_mutex_unlock(&c->job->mu);
    if (!c->x || c->differs) return TPS_OK;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CMP_CHUNK ? n - done : CMP_CHUNK;
        tps_status st = tps_tensor_read(c->job->src, c->x, off + done, c->buf, k, err);
        if (st) return st;
        if (memcmp(c->buf, (const char *)p + done, k) != 0) {
            const unsigned char *a = c->buf, *b = (const unsigned char *)p + done;
            size_t i = 0;
            while (a[i] == b[i]) i++;
            tps_check_findingf(c->f, "tensor '%s': differs from the source at global byte %llu", c->name,
                         (unsigned long long)(off + done + i));
            c->differs = true;
            return TPS_OK;
        }
        done += k;
    }
    return TPS_OK;
}

static void forward_finding(void *arg, const char *msg)
{
    source_cmp *c = arg;
    tps_check_finding(c->f, msg);
}

static void check_tensor(check_job *j, size_t i, unsigned char *cmpbuf)
{
    const tps_manifest *m = j->ss->m;
    const tps_manifest_tensor *t = &m->tensors[i];
    tps_check_findings *f = &j->per_tensor[i];
    source_cmp c = {j, NULL, cmpbuf, false, f, t->name};
    if (j->src) {
        c.x = tps_index_find(j->src, t->name);
        if (!c.x) tps_check_findingf(f, "tensor '%s' is not in the source", t->name);
        else if (c.x->dtype != t->dtype || c.x->ndim != t->ndim ||
                 memcmp(c.x->shape, t->shape, sizeof(uint64_t) * (size_t)t->ndim)) {
            tps_check_findingf(f, "tensor '%s': dtype or shape differs from the source", t->name);
            c.x = NULL;
        }
    }
    tps_gather_hooks h = {compare_with_source, forward_finding, &c, j->threads > 1};
    uint32_t gcrc;
    tps_error err;
    tps_error_clear(&err);
    if (tps_gather_tensor(j->ss, t, &h, &gcrc, j->rank_crc + i * m->tp, &err)) {
        tps_check_findingf(f, "tensor '%s': %s", t->name, err.msg);
        return;
    }
    if (gcrc != t->crc && !m->adopted) /* an engine's own set records no CRC */
        tps_check_findingf(f, "tensor '%s': CRC-32 of the reassembled tensor is %08x, the manifest says %08x", t->name,
                     (unsigned)gcrc, t->crc);
    j->crc_checked[i] = true;
}

typedef struct worker {
    check_job *job;
    unsigned char *cmpbuf;
    pthread_t th;
} worker;

static void *check_worker(void *arg)
{
    worker *w = arg;
    check_job *j = w->job;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->ss->m->ntensors) return NULL;
        check_tensor(j, i, w->cmpbuf);
    }
}

/* Threads for the walk: the cores there are, at most 4 (each also has its reader thread);
 * one with --source, whose reader (a .bin, an .npz) need not allow concurrent reads. */
static int check_threads(const tps_manifest *m, bool with_source)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int n = with_source || ncpu < 2 ? 1 : ncpu > 4 ? 4 : (int)ncpu;
    return (size_t)n > m->ntensors ? (m->ntensors ? (int)m->ntensors : 1) : n;
}

static int cmp_file_key(const void *a, const void *b)
{
    const tps_manifest_file *x = *(const tps_manifest_file *const *)a, *y = *(const tps_manifest_file *const *)b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The manifest's entry for rank r's file called path (by its name inside the set's directory
 * dir: a Megatron checkpoint's are iter_.../mp_rank_XX/...), from the sorted table (binary
 * search: a set may have thousands of files). */
static const tps_manifest_file *manifest_file(const tps_manifest_file *const *byname, size_t n, uint64_t r,
                                              const char *dir, const char *path)
{
    const char *base = strrchr(path, '/');
    size_t dl = strlen(dir);
    if (strncmp(path, dir, dl) == 0 && path[dl] == '/') base = path + dl;
    tps_manifest_file key = {.name = (char *)(base ? base + 1 : path), .rank = r};
    const tps_manifest_file *k = &key;
    const tps_manifest_file *const *hit = bsearch(&k, byname, n, sizeof *byname, cmp_file_key);
    return hit ? *hit : NULL;
}

/* A Megatron rank file's zip records carry CRCs the reader leaves unchecked at open
 * (formats/megatron/megatron_read.c): proved here, every record of every rank file. */
static void check_megatron_records(tps_shardset *ss, const tps_check_opts *o, tps_check_findings *f,
                                   tps_check_coverage *cov)
{
    for (uint64_t r = 0; r < ss->m->tp; r++) {
        const tps_index *ix = ss->rank[r];
        for (size_t fi = 0; ix && fi < ix->nfiles; fi++) {
            tps_error e;
            tps_error_clear(&e);
            if (o->verify_records(ix->files[fi].path, &e)) tps_check_findingf(f, "%s", e.msg);
            else cov->zip_records = true;
        }
    }
}

static void compare_file(const tps_source_file *sf, const tps_manifest_file *mf, uint32_t crc, bool adopted,
                         tps_check_findings *f, tps_check_coverage *cov)
{
    if (!mf) {
        tps_check_findingf(f, "%s: not in the manifest", sf->path);
        return;
    }
    cov->files++;
    cov->bytes += sf->size;
    if (mf->size != sf->size)
        tps_check_findingf(f, "%s: %llu bytes, the manifest says %llu", sf->path, (unsigned long long)sf->size,
                     (unsigned long long)mf->size);
    else if (mf->crc != crc && !adopted) /* an engine's own set records no file CRC */
        tps_check_findingf(f, "%s: CRC-32 %08x, the manifest says %08x", sf->path, (unsigned)crc, mf->crc);
}

static const tps_manifest_file **sorted_files(const tps_manifest *m)
{
    const tps_manifest_file **byname = malloc((m->nfiles + 1) * sizeof *byname);
    if (!byname) return NULL;
    for (size_t k = 0; k < m->nfiles; k++) byname[k] = &m->files[k];
    qsort(byname, m->nfiles, sizeof *byname, cmp_file_key);
    return byname;
}

/* CRC-32 of bytes [off, off+len) of sf, read in bounded chunks. */
static tps_status range_crc(const tps_source_file *sf, uint64_t off, uint64_t len, uint32_t *out, tps_error *err)
{
    enum { CHUNK = 1 << 20 };
    unsigned char *b = malloc(CHUNK);
    if (!b) return tps_fail_oom(err, "checking blocked rows");
    uLong c = crc32(0, NULL, 0);
    tps_status st = TPS_OK;
    for (uint64_t at = 0; at < len && st == TPS_OK;) {
        size_t n = len - at < CHUNK ? (size_t)(len - at) : CHUNK;
        st = tps_pread_full(sf->fd, sf->path, off + at, b, n, err);
        if (st == TPS_OK) c = crc32_z(c, b, n);
        at += n;
    }
    free(b);
    *out = (uint32_t)c;
    return st;
}

/* Rebuilds each rank file's CRC from its header bytes and the rank's tensor CRCs, in one
 * pass over each rank's tensors (files of a rank keep their tensors in data-offset order). */
static void check_files(tps_shardset *ss, const uint32_t *rank_crc, tps_check_findings *f, tps_check_coverage *cov, tps_error *err)
{
    const tps_manifest *m = ss->m;
    const tps_manifest_file **byname = sorted_files(m);
    uint64_t *hdr = NULL;
    uLong *crc = NULL;
    size_t nalloc = 0;
    if (!byname) {
        f->oom = true;
        return;
    }
    for (uint64_t r = 0; r < m->tp; r++) {
        const tps_index *ix = ss->rank[r];
        if (!ix) continue;
        if (ix->nfiles > nalloc) {
            free(hdr);
            free(crc);
            hdr = malloc(ix->nfiles * sizeof *hdr);
            crc = malloc(ix->nfiles * sizeof *crc);
            nalloc = hdr && crc ? ix->nfiles : 0;
            if (!nalloc) {
                f->oom = true;
                break;
            }
        }
        for (size_t fi = 0; fi < ix->nfiles; fi++) hdr[fi] = ix->files[fi].size;
        for (size_t i = 0; i < ix->ntensors; i++) {
            const tps_tensor *x = &ix->tensors[i];
            if (x->offset < hdr[x->file]) hdr[x->file] = x->offset;
        }
        bool *hdr_ok = calloc(ix->nfiles + 1, sizeof *hdr_ok);
        for (size_t fi = 0; hdr_ok && fi < ix->nfiles; fi++) {
            const tps_source_file *sf = &ix->files[fi];
            unsigned char *h = malloc(hdr[fi] ? (size_t)hdr[fi] : 1);
            if (!h || tps_pread_full(sf->fd, sf->path, 0, h, (size_t)hdr[fi], err)) {
                free(h);
                tps_check_findingf(f, "%s: cannot read its header", sf->path);
                continue;
            }
            crc[fi] = crc32_z(crc32(0, NULL, 0), h, (size_t)hdr[fi]);
            hdr_ok[fi] = true;
            free(h);
        }
        if (!hdr_ok) {
            f->oom = true;
            break;
        }
        for (size_t i = 0; i < ix->ntensors; i++) {
            const tps_tensor *x = &ix->tensors[i];
            const tps_manifest_tensor *t = tps_manifest_find(m, x->name);
            size_t ti = (size_t)(t - m->tensors);
            uint32_t xc = rank_crc[ti * m->tp + r];
            /* In a grid each file holds its own stage's tensors only: vLLM's stage p reads only
             * model-pp-p-* and has no parameter for another stage's layer. */
            const tps_manifest_file *xf = m->pp > 1 ? manifest_file(byname, m->nfiles, r, ss->dir, ix->files[x->file].path) : NULL;
            if (xf && xf->pp_rank != t->pp_stage)
                tps_check_findingf(f, "%s: holds '%s' of pipeline stage %llu, but the file is stage %llu's", ix->files[x->file].path,
                                   t->name, (unsigned long long)t->pp_stage, (unsigned long long)xf->pp_rank);
            /* Blocked rows (lib/targets/target.h) read back reordered: the file holds them in its own order. */
            if (x->reader_data && range_crc(&ix->files[x->file], x->offset, x->nbytes, &xc, err)) f->oom = true;
            crc[x->file] = crc32_combine(crc[x->file], xc, (z_off_t)x->nbytes);
        }
        /* A target's constants close the rank's last part (lib/targets/target.h), in a grid
         * the last part of their layer's stage (lib/engine/grid_parts.h). */
        for (size_t fi = 0; m->nextras && fi < ix->nfiles; fi++) {
            const tps_manifest_file *mf = manifest_file(byname, m->nfiles, r, ss->dir, ix->files[fi].path);
            bool closes = mf != NULL;
            for (size_t k = 0; mf && k < m->nfiles; k++)
                if (m->files[k].rank == r && m->files[k].pp_rank == mf->pp_rank && m->files[k].part > mf->part)
                    closes = false;
            uint64_t xlen;
            uint32_t xcrc = closes ? tps_grid_extras_crc(m, mf->pp_rank, &xlen) : 0;
            if (closes && xlen) crc[fi] = crc32_combine(crc[fi], xcrc, (z_off_t)xlen);
        }
        for (size_t fi = 0; fi < ix->nfiles; fi++)
            if (hdr_ok[fi])
                compare_file(&ix->files[fi], manifest_file(byname, m->nfiles, r, ss->dir, ix->files[fi].path), (uint32_t)crc[fi],
                             m->adopted, f, cov);
        free(hdr_ok);
    }
    free(hdr);
    free(crc);
    free(byname);
}

/* A partial set cannot be reassembled (the other ranks are on other nodes): each held rank's
 * files are read whole and their CRC-32 compared with the manifest's. */
static void check_partial_files(tps_shardset *ss, tps_check_findings *f, tps_check_coverage *cov, tps_progress *prog,
                                const tps_check_opts *o, tps_error *err)
{
    const tps_manifest *m = ss->m;
    const tps_manifest_file **byname = sorted_files(m);
    unsigned char *buf = malloc(CMP_CHUNK);
    if (!byname || !buf) {
        f->oom = true;
        goto done;
    }
    for (uint64_t r = 0; r < m->tp; r++) {
        const tps_index *ix = ss->rank[r];
        for (size_t fi = 0; ix && fi < ix->nfiles; fi++) {
            const tps_source_file *sf = &ix->files[fi];
            uint32_t crc = 0;
            bool read_ok = true;
            for (uint64_t off = 0; off < sf->size;) {
                size_t k = sf->size - off < CMP_CHUNK ? (size_t)(sf->size - off) : CMP_CHUNK;
                if (tps_pread_full(sf->fd, sf->path, off, buf, k, err)) {
                    tps_check_findingf(f, "%s", err->msg);
                    read_ok = false;
                    break;
                }
                crc = tps_crc32(crc, buf, k);
                off += k;
                prog->done += k;
                prog->tensor = sf->path;
                if (o->progress) o->progress(prog, o->progress_arg);
            }
            if (read_ok) compare_file(sf, manifest_file(byname, m->nfiles, r, ss->dir, sf->path), crc, m->adopted, f, cov);
        }
    }
done:
    free(buf);
    free(byname);
}

bool tps_check_open_ranks(tps_shardset *ss, tps_check_findings *f, tps_check_coverage *cov)
{
    const tps_manifest *m = ss->m;
    bool ranks_ok = true;
    for (uint64_t r = 0; r < m->tp; r++) {
        const tps_index *ix;
        tps_error err;
        if (!tps_manifest_holds(m, r)) continue;
        tps_error_clear(&err);
        if (tps_shardset_open_rank(ss, r, &ix, &err)) {
            tps_check_findingf(f, "rank %llu: %s", (unsigned long long)r, err.msg);
            ranks_ok = false;
        } else {
            cov->ranks++;
        }
    }
    return ranks_ok;
}

static void phase(const tps_check_opts *o, bool begin)
{
    if (o->phase) o->phase(o->progress_arg, begin);
}

/* Every tensor gathered once, on several threads, each tensor's findings kept apart and
 * added afterwards in manifest order. */
static tps_status check_tensors(tps_shardset *ss, const tps_check_opts *o, check_job *job, tps_check_findings *f,
                                tps_check_coverage *cov, tps_error *err)
{
    const tps_manifest *m = ss->m;
    tps_status st = TPS_OK;
    int nthreads = check_threads(m, o->src != NULL);
    job->threads = nthreads;
    job->ss = ss;
    job->src = o->src;
    job->rank_crc = calloc(m->ntensors * m->tp + 1, sizeof *job->rank_crc);
    job->per_tensor = calloc(m->ntensors + 1, sizeof *job->per_tensor);
    job->crc_checked = calloc(m->ntensors + 1, sizeof *job->crc_checked);
    worker *workers = calloc((size_t)nthreads, sizeof *workers);
    bool bufs_ok = workers != NULL;
    for (int k = 0; bufs_ok && k < nthreads; k++) {
        workers[k].job = job;
        bufs_ok = !o->src || (workers[k].cmpbuf = malloc(CMP_CHUNK)) != NULL;
    }
    if (!job->rank_crc || !job->per_tensor || !job->crc_checked || !bufs_ok) {
        st = tps_fail_oom(err, "checking");
        goto done;
    }
    for (size_t i = 0; i < m->ntensors; i++) job->per_tensor[i].fail_alloc = f->fail_alloc;
    for (size_t i = 0; i < m->ntensors; i++) job->prog.total += m->tensors[i].nbytes;
    phase(o, true);
    int started = 0;
    for (int k = 1; k < nthreads; k++, started++)
        if (pthread_create(&workers[k].th, NULL, check_worker, &workers[k]) != 0) break;
    check_worker(&workers[0]);
    for (int k = 1; k <= started; k++) pthread_join(workers[k].th, NULL);
    for (size_t i = 0; i < m->ntensors; i++) {
        for (size_t q = 0; q < job->per_tensor[i].n; q++) tps_check_finding(f, job->per_tensor[i].msg[q]);
        f->oom |= job->per_tensor[i].oom;
        cov->tensors += job->crc_checked[i];
    }
    phase(o, false);
done:
    for (size_t i = 0; job->per_tensor && i < m->ntensors; i++) tps_check_findings_free(&job->per_tensor[i]);
    for (int k = 0; workers && k < nthreads; k++) free(workers[k].cmpbuf);
    free(workers);
    free(job->per_tensor);
    free(job->crc_checked);
    job->per_tensor = NULL;
    job->crc_checked = NULL;
    return st;
}

tps_status tps_check_run(tps_shardset *ss, bool ranks_ok, const tps_check_opts *o, tps_check_findings *f,
                         tps_check_coverage *cov, tps_error *err)
{
    const tps_manifest *m = ss->m;
    check_job job = {.o = o, .mu = PTHREAD_MUTEX_INITIALIZER};
    tps_status st = TPS_OK;
    if (o->src)
        for (size_t i = 0; i < o->src->ntensors; i++)
            if (!tps_manifest_find(m, o->src->tensors[i].name) && !tps_manifest_skipped(m, o->src->tensors[i].name))
                tps_check_findingf(f, "tensor '%s' of the source is not in the shard set", o->src->tensors[i].name);
    if (!ranks_ok) {
        tps_check_findingf(f, "byte-level checks skipped: not every rank's files could be opened");
        return TPS_OK;
    }
    tps_error e;
    tps_error_clear(&e);
    if (!tps_manifest_holds_all(m)) {
        for (size_t k = 0; k < m->nfiles; k++)
            if (tps_manifest_holds(m, m->files[k].rank)) job.prog.total += m->files[k].size;
        phase(o, true);
        check_partial_files(ss, f, cov, &job.prog, o, &e);
        phase(o, false);
        return TPS_OK;
    }
    st = check_tensors(ss, o, &job, f, cov, err);
    if (st) goto done;
    if (ss->rank[0] && strcmp(ss->rank[0]->format, "megatron-torch_dist") == 0) {
        /* a torch_dist checkpoint: its .distcp files are streams of chunks, each validated when
         * opened and read whole by the tensor pass above; there are no rank files to prove */
    } else if (m->nfiles && strchr(m->files[0].name, '/')) { /* a Megatron checkpoint: torch files, read whole */
        phase(o, true);
        check_partial_files(ss, f, cov, &job.prog, o, &e);
        phase(o, false);
        check_megatron_records(ss, o, f, cov);
    } else {
        check_files(ss, job.rank_crc, f, cov, &e);
    }
done:
    free(job.rank_crc);
    return st;
}

void tps_check_json(tps_buf *b, const char *dir, const tps_manifest *m, const tps_check_findings *f,
                    const tps_check_coverage *cov)
{
    tps_jw w;
    tps_jw_init(&w, b, true);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "path");
    tps_jw_string(&w, dir);
    tps_jw_key(&w, "ok");
    tps_jw_bool(&w, f->n == 0);
    tps_jw_key(&w, "tp");
    tps_jw_u64(&w, m ? m->tp : 0);
    tps_jw_key(&w, "tensors");
    tps_jw_u64(&w, m ? m->ntensors : 0);
    tps_jw_key(&w, "files");
    tps_jw_u64(&w, m ? m->nfiles : 0);
    tps_jw_key(&w, "bytes_read");
    tps_jw_u64(&w, cov->bytes);
    tps_jw_key(&w, "checked");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "ranks");
    tps_jw_array_begin(&w);
    for (uint64_t r = 0; m && r < m->tp; r++)
        if (tps_manifest_holds(m, r)) tps_jw_u64(&w, r);
    tps_jw_array_end(&w);
    tps_jw_key(&w, "partial");
    tps_jw_bool(&w, m && !tps_manifest_holds_all(m));
    tps_jw_key(&w, "files");
    tps_jw_u64(&w, cov->files);
    tps_jw_key(&w, "bytes");
    tps_jw_u64(&w, cov->bytes);
    tps_jw_key(&w, "tensors");
    tps_jw_u64(&w, cov->tensors);
    tps_jw_object_end(&w);
    tps_jw_key(&w, "findings");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < f->n; i++) tps_jw_string(&w, f->msg[i]);
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
}
