/* tpshard check: prove a shard set intact from its manifest, in one read of the shards. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "cli.h"
#include "commands.h"
#include "formats/checkpoint.h"
#include "formats/shardset.h"
#include "lib/buf.h"
#include "lib/gather.h"
#include "lib/json.h"
#include "lib/manifest.h"
#include "progress.h"

static struct {
    const char *source;
} o;

static const tps_opt check_opts[] = {
    {"source", 0, TPS_OPT_STRING, &o.source, "SRC", "also compare every tensor with this checkpoint, bit for bit"},
    {"json", 0, TPS_OPT_FLAG, &tps_common.json, NULL, "machine-readable result"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

typedef struct findings {
    char **msg;
    size_t n, cap;
} findings;

static void add_finding(void *arg, const char *msg)
{
    findings *f = arg;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        char **p = realloc(f->msg, cap * sizeof *p);
        if (!p) return;
        f->msg = p;
        f->cap = cap;
    }
    char *s = strdup(msg);
    if (s) f->msg[f->n++] = s;
}

static void add_findingf(findings *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_findingf(findings *f, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    add_finding(f, msg);
}

/* Tensors are independent (each has its own global CRC and its own CRC per rank), so check
 * walks them on several threads: each claims the next tensor and gathers it with its own
 * buffers, keeping that tensor's findings apart; they are reported afterwards in manifest
 * order, so the output does not depend on timing. */
typedef struct check_job {
    tps_shardset *ss;
    const tps_index *src;
    uint32_t *rank_crc;   /* [tensor * tp + rank] */
    findings *per_tensor; /* one list per tensor */
    uint64_t *ok_bytes;   /* per tensor: its bytes once its checksum matched */
    size_t next;          /* the next tensor to claim */
    tps_progress prog;
    tps_progress_state *ps;
    pthread_mutex_t mu; /* next, prog and the progress line */
    int threads;
} check_job;

typedef struct source_cmp {
    check_job *job;
    const tps_tensor *x;
    unsigned char *buf;
    bool differs;
    findings *f;
    const char *name;
} source_cmp;

#define CMP_CHUNK (4u << 20)

static tps_status compare_with_source(void *arg, uint64_t off, const void *p, size_t n, tps_error *err)
{
    source_cmp *c = arg;
    pthread_mutex_lock(&c->job->mu);
    c->job->prog.done += n;
    c->job->prog.tensor = c->name;
    tps_progress_update(&c->job->prog, c->job->ps);
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
            add_findingf(c->f, "tensor '%s': differs from the source at global byte %llu", c->name,
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
    add_finding(c->f, msg);
}

static void check_tensor(check_job *j, size_t i, unsigned char *cmpbuf)
{
    const tps_manifest *m = j->ss->m;
    const tps_manifest_tensor *t = &m->tensors[i];
    findings *f = &j->per_tensor[i];
    source_cmp c = {j, NULL, cmpbuf, false, f, t->name};
    if (j->src) {
        c.x = tps_index_find(j->src, t->name);
        if (!c.x) add_findingf(f, "tensor '%s' is not in the source", t->name);
        else if (c.x->dtype != t->dtype || c.x->ndim != t->ndim ||
                 memcmp(c.x->shape, t->shape, sizeof(uint64_t) * (size_t)t->ndim)) {
            add_findingf(f, "tensor '%s': dtype or shape differs from the source", t->name);
            c.x = NULL;
        }
    }
    tps_gather_hooks h = {compare_with_source, forward_finding, &c, j->threads > 1};
    uint32_t gcrc;
    tps_error err;
    tps_error_clear(&err);
    if (tps_gather_tensor(j->ss, t, &h, &gcrc, j->rank_crc + i * m->tp, &err)) {
        add_findingf(f, "tensor '%s': %s", t->name, err.msg);
        return;
    }
    if (gcrc != t->crc)
        add_findingf(f, "tensor '%s': CRC-32 of the reassembled tensor is %08x, the manifest says %08x", t->name,
                     (unsigned)gcrc, t->crc);
    j->ok_bytes[i] = t->nbytes;
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

/* Rebuilds each rank file's CRC from its header bytes and the rank's tensor CRCs. */
static void check_files(tps_shardset *ss, const uint32_t *rank_crc, findings *f, tps_error *err)
{
    const tps_manifest *m = ss->m;
    for (uint64_t r = 0; r < m->tp; r++) {
        const tps_index *ix = ss->rank[r];
        for (size_t fi = 0; ix && fi < ix->nfiles; fi++) {
            const tps_source_file *sf = &ix->files[fi];
            uint64_t hdr = sf->size;
            for (size_t i = 0; i < ix->ntensors; i++)
                if (ix->tensors[i].file == fi && ix->tensors[i].offset < hdr) hdr = ix->tensors[i].offset;
            unsigned char *h = malloc(hdr ? (size_t)hdr : 1);
            if (!h || tps_pread_full(sf->fd, sf->path, 0, h, (size_t)hdr, err)) {
                free(h);
                add_findingf(f, "%s: cannot read its header", sf->path);
                continue;
            }
            uLong crc = crc32_z(crc32(0, NULL, 0), h, (size_t)hdr);
            free(h);
            for (size_t i = 0; i < ix->ntensors; i++) { /* the reader keeps data-offset order */
                const tps_tensor *x = &ix->tensors[i];
                if (x->file != fi) continue;
                const tps_manifest_tensor *t = tps_manifest_find(m, x->name);
                size_t ti = (size_t)(t - m->tensors);
                crc = crc32_combine(crc, rank_crc[ti * m->tp + r], (z_off_t)x->nbytes);
            }
            for (size_t k = 0; k < m->nfiles; k++) {
                const tps_manifest_file *mf = &m->files[k];
                const char *base = strrchr(sf->path, '/');
                if (mf->rank != r || strcmp(base ? base + 1 : sf->path, mf->name) != 0) continue;
                if (mf->size != sf->size)
                    add_findingf(f, "%s: %llu bytes, the manifest says %llu", sf->path, (unsigned long long)sf->size,
                                 (unsigned long long)mf->size);
                else if (mf->crc != (uint32_t)crc)
                    add_findingf(f, "%s: CRC-32 %08x, the manifest says %08x", sf->path, (unsigned)crc, mf->crc);
            }
        }
    }
}

static void print_result(const char *dir, const tps_manifest *m, const findings *f, uint64_t bytes)
{
    if (tps_common.json) {
        tps_buf b = TPS_BUF_INIT;
        tps_jw w;
        tps_jw_init(&w, &b, true);
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
        tps_jw_u64(&w, bytes);
        tps_jw_key(&w, "findings");
        tps_jw_array_begin(&w);
        for (size_t i = 0; i < f->n; i++) tps_jw_string(&w, f->msg[i]);
        tps_jw_array_end(&w);
        tps_jw_object_end(&w);
        if (tps_buf_cstr(&b)) printf("%s\n", b.data);
        tps_buf_release(&b);
        return;
    }
    for (size_t i = 0; i < f->n; i++) fprintf(stderr, "tpshard check: %s\n", f->msg[i]);
    if (f->n) fprintf(stderr, "tpshard check: %s: %zu finding%s\n", dir, f->n, f->n == 1 ? "" : "s");
    else if (!tps_common.quiet)
        printf("%s: ok: tp %llu, %zu tensors, %zu files, every element covered once, replicas equal, checksums match\n",
               dir, (unsigned long long)m->tp, m->ntensors, m->nfiles);
}

static int run_check(char **args, int nargs)
{
    (void)nargs;
    const char *dir = args[0];
    tps_error err;
    tps_error_clear(&err);
    findings f = {0};
    tps_shardset *ss = NULL;
    tps_index *src = NULL;
    uint32_t *rank_crc = NULL;
    tps_progress_state ps;
    check_job job = {.ps = &ps, .mu = PTHREAD_MUTEX_INITIALIZER};
    worker *workers = NULL;
    int nthreads = 0;
    uint64_t bytes = 0;
    int rc = 0;
    if (!tps_is_shard_set(dir)) {
        tps_cli_errorf("check", "%s: not a shard set (no %s)", dir, TPS_MANIFEST_NAME);
        return TPS_EXIT_INVALID;
    }
    if (tps_shardset_open(dir, &ss, &err)) {
        add_findingf(&f, "%s", err.msg); /* a manifest that does not hold up is a finding */
        goto report;
    }
    const tps_manifest *m = ss->m;
    bool ranks_ok = true;
    for (uint64_t r = 0; r < m->tp; r++) {
        const tps_index *ix;
        tps_error_clear(&err);
        if (tps_shardset_open_rank(ss, r, &ix, &err)) {
            add_findingf(&f, "rank %llu: %s", (unsigned long long)r, err.msg);
            ranks_ok = false;
        }
    }
    if (o.source) {
        tps_error_clear(&err);
        if (tps_checkpoint_open(o.source, &src, &err)) {
            rc = tps_cli_report("check", &err);
            goto cleanup;
        }
        for (size_t i = 0; i < src->ntensors; i++)
            if (!tps_manifest_find(m, src->tensors[i].name))
                add_findingf(&f, "tensor '%s' of the source is not in the shard set", src->tensors[i].name);
    }
    if (!ranks_ok) {
        add_findingf(&f, "byte-level checks skipped: not every rank's files could be opened");
        goto report;
    }
    job.threads = nthreads = check_threads(m, src != NULL);
    job.ss = ss;
    job.src = src;
    job.rank_crc = rank_crc = calloc(m->ntensors * m->tp + 1, sizeof *rank_crc);
    job.per_tensor = calloc(m->ntensors + 1, sizeof *job.per_tensor);
    job.ok_bytes = calloc(m->ntensors + 1, sizeof *job.ok_bytes);
    workers = calloc((size_t)nthreads, sizeof *workers);
    bool bufs_ok = workers != NULL;
    for (int k = 0; bufs_ok && k < nthreads; k++) {
        workers[k].job = &job;
        bufs_ok = !src || (workers[k].cmpbuf = malloc(CMP_CHUNK)) != NULL;
    }
    if (!rank_crc || !job.per_tensor || !job.ok_bytes || !bufs_ok) {
        tps_fail_oom(&err, "checking");
        rc = tps_cli_report("check", &err);
        goto cleanup;
    }
    for (size_t i = 0; i < m->ntensors; i++) job.prog.total += m->tensors[i].nbytes;
    tps_progress_begin(&ps, "check");
    int started = 0;
    for (int k = 1; k < nthreads; k++, started++)
        if (pthread_create(&workers[k].th, NULL, check_worker, &workers[k]) != 0) break;
    check_worker(&workers[0]);
    for (int k = 1; k <= started; k++) pthread_join(workers[k].th, NULL);
    for (size_t i = 0; i < m->ntensors; i++) {
        for (size_t q = 0; q < job.per_tensor[i].n; q++) add_finding(&f, job.per_tensor[i].msg[q]);
        bytes += job.ok_bytes[i];
    }
    tps_progress_end(&ps);
    tps_error_clear(&err);
    check_files(ss, rank_crc, &f, &err);
report:
    print_result(dir, ss ? ss->m : NULL, &f, bytes);
    rc = f.n ? TPS_EXIT_MISMATCH : 0;
cleanup:
    for (size_t i = 0; i < f.n; i++) free(f.msg[i]);
    free(f.msg);
    for (size_t i = 0; job.per_tensor && i < job.ss->m->ntensors; i++) {
        for (size_t q = 0; q < job.per_tensor[i].n; q++) free(job.per_tensor[i].msg[q]);
        free(job.per_tensor[i].msg);
    }
    for (int k = 0; workers && k < nthreads; k++) free(workers[k].cmpbuf);
    free(workers);
    free(job.per_tensor);
    free(job.ok_bytes);
    free(rank_crc);
    tps_index_free(src);
    tps_shardset_free(ss);
    return rc;
}

const tps_cmd tps_cmd_check = {
    .name = "check",
    .summary = "prove a shard set intact: files, coverage, replicas, checksums",
    .usage = "check DIR [--source SRC] [--json]",
    .details = "Reads every shard byte once.  Exit 0 when intact; exit 1 listing every finding.\n",
    .opts = check_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_check,
};
