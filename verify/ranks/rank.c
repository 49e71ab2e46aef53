/* The sharded pass on the CPU backend: one thread per rank, each with only its own
 * slices, joined by an all-reduce over shared memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../load/layer.h"
#include "../math/ops.h"
#include "device.h"
#include "gated_threads.h"
#include "qkv_chunks.h"
#include "rank.h"

void tps_vstage(const tps_verify_opts *o, const char *what)
{
    if (o && o->on_stage) o->on_stage(o->stage_arg, what);
}

/* ---- the thread all-reduce ---- */

typedef struct tshared {
    pthread_barrier_t bar;
    float **bufs; /* each rank's buffer, published for one collective */
    float *sum;
    size_t cap;
    uint64_t T;
} tshared;

/* Reduce-scatter then all-gather through sum: rank r adds, in rank order, the elements of
 * its own chunk, so every element is summed in the same order whatever the thread timing. */
static tps_status thread_allreduce(tps_vcomm *c, float *buf, size_t n, tps_error *err)
{
    tshared *s = c->impl;
    if (n > s->cap) /* the same n on every rank: all of them fail here together */
        return tps_fail(err, TPS_EIO, "all-reduce of %zu elements exceeds its %zu-element buffer", n, s->cap);
    s->bufs[c->rank] = buf;
    pthread_barrier_wait(&s->bar);
    size_t lo = (size_t)(c->rank * n / s->T), hi = (size_t)((c->rank + 1) * n / s->T);
    memcpy(s->sum + lo, s->bufs[0] + lo, (hi - lo) * sizeof *buf);
    for (uint64_t q = 1; q < s->T; q++)
        for (size_t i = lo; i < hi; i++) s->sum[i] += s->bufs[q][i];
    pthread_barrier_wait(&s->bar);
    memcpy(buf, s->sum, n * sizeof *buf);
    pthread_barrier_wait(&s->bar); /* nobody reuses sum before everyone has copied it */
    return TPS_OK;
}

/* ---- one rank ---- */

typedef struct rank_job {
    const tps_block *b;
    const vdims *d;
    uint64_t layer;
    const tps_vsource *src;
    size_t n;
    const float *x;
    vrank_out *out;
    tps_vcomm comm;
    tps_status st;
    tps_error err;
    vgate *gate; /* every thread waits until all were created (verify/ranks/gated_threads.h) */
    const tps_verify_opts *vo; /* rank 0 reports its stages */
    float *qk_buf;             /* 2 n: a whole-projection q/k norm's sums of squares */
    float *qkv_buf;            /* Megatron's all-gathered qkv (verify/ranks/qkv_chunks.c); NULL: not chunked */
    bool gathered;             /* this attention stage entered the qkv gather */
    struct rank_stream *rs;    /* the streamed experts' checks */
} rank_job;

/* A rank's streamed experts (verify/load/layer.h): each fetched row's shapes are checked
 * against the convention's as the whole layer's are before a stage (a row of another shape
 * makes the stage bad, as there), its dtypes noted and the row uploaded to the device.
 * seen: the experts fetched, so that those no token chose are still checked afterwards. */
typedef struct rank_stream {
    rank_job *j;
    vshare s;
    unsigned char *seen;
    bool upload;
    bool bad;
    char why[sizeof ((vrank_out *)0)->why[0] - 32];
} rank_stream;

static void note_dtype(vrank_out *o, const tps_vt *t)
{
    if (t->data && tps_verify_rtol(tps_vt_math_dtype(t)) > tps_verify_rtol(o->min_dtype)) o->min_dtype = tps_vt_math_dtype(t);
}

void tps_vrank_note_dtypes(vrank_out *o, const vlayer *l)
{
    for (int r = 0; r < TPS_ROLE_COUNT; r++) note_dtype(o, &l->t[r]);
    for (uint64_t i = 0; i < l->nex * TPS_ROLE_COUNT; i++) note_dtype(o, &l->ex[i]);
    for (int r = 0; r < TPS_ROLE_COUNT; r++) note_dtype(o, &l->sh[r]);
}

static tps_status rank_fetched(void *arg, uint64_t e, tps_vt *row, tps_error *err)
{
    rank_stream *rs = arg;
    vlayer one;
    memset(&one, 0, sizeof one);
    one.ex = row;
    one.nex = 1;
    one.ex_first = e;
    rs->seen[e] = 1;
    if (!tps_vcheck_shapes(rs->j->b, rs->j->d, &rs->s, &one, true, rs->why, sizeof rs->why)) {
        rs->bad = true;
        return tps_fail(err, TPS_EMISMATCH, "%s", rs->why);
    }
    for (int r = 0; r < TPS_ROLE_COUNT; r++) note_dtype(rs->j->out, &row[r]);
    tps_status st = TPS_OK;
    for (int r = 0; rs->upload && r < TPS_ROLE_COUNT && st == TPS_OK; r++)
        st = tps_vdev_upload(rs->j->comm.dev, &row[r], err);
    return st;
}

/* After a streamed MoE stage: the experts no token chose are fetched once for their shapes
 * (their bytes were checked against the manifest on rank 0), and a row of the wrong shape
 * makes the stage bad, its partial zeros, as the whole-layer check would have. */
static void rank_stream_finish(rank_job *j, const vlayer *l, int stage)
{
    rank_stream *rs = j->rs;
    rs->upload = false;
    for (uint64_t e = 1; e < l->nex && j->st == TPS_OK && !rs->bad; e++) {
        if (rs->seen[e]) continue;
        tps_vt tmp[TPS_ROLE_COUNT];
        const tps_vt *row;
        bool fetched;
        j->st = tps_vexpert_row(l, e, tmp, &row, &fetched, &j->err);
        tps_vexpert_row_done(tmp, fetched);
    }
    rs->upload = j->comm.dev != NULL;
    if (!rs->bad) return;
    vrank_out *o = j->out;
    o->bad[stage] = true;
    snprintf(o->why[stage], sizeof o->why[stage], "rank %llu holds %s", (unsigned long long)j->comm.rank, rs->why);
    memset(o->partial[stage], 0, j->n * j->d->hidden * sizeof(float));
    j->st = TPS_OK;
    tps_error_clear(&j->err);
}

/* The ranks' side of a whole-projection q/k norm (verify/math/qk_norm.c): the per-token sums of
 * squares of q and of k, all-reduced.  With T > kv_heads each KV head is held by T / kv_heads
 * ranks; only the first of them adds its k sums, or the replicas would count T / kv_heads
 * times.  ss NULL: the rank joins with zeros (it computes nothing this stage). */
typedef struct rank_qk {
    tps_vcomm *comm;
    uint64_t kv;
    float *buf;
    bool entered;
} rank_qk;

static tps_status rank_qk_sum(void *ctx, double *ss, size_t n, tps_error *err)
{
    rank_qk *c = ctx;
    uint64_t T = c->comm->size;
    bool k_adds = c->kv >= T || c->comm->rank % (T / c->kv) == 0;
    c->entered = true;
    for (size_t i = 0; i < n; i++) {
        c->buf[i] = ss ? (float)ss[i] : 0;
        c->buf[n + i] = ss && k_adds ? (float)ss[n + i] : 0;
    }
    tps_status st = c->comm->allreduce_sum(c->comm, c->buf, 2 * n, err);
    if (st == TPS_OK && ss)
        for (size_t i = 0; i < 2 * n; i++) ss[i] = c->buf[i];
    return st;
}

static void rank_stage_run(rank_job *j, const vlayer *l, int stage, const float *in, float *scratch,
                           const vqk_reduce *qk)
{
    const tps_block *b = j->b;
    const vdims *d = j->d;
    vrank_out *o = j->out;
    vshare s;
    tps_vshare_of(d, j->comm.size, j->comm.rank, &s);
    size_t nh = j->n * d->hidden;
    char why[sizeof o->why[0] - 32];
    memset(o->partial[stage], 0, nh * sizeof(float));
    if (!tps_vcheck_shapes(b, d, &s, l, stage == TPS_VSTAGE_MLP, why, sizeof why)) {
        o->bad[stage] = true;
        snprintf(o->why[stage], sizeof o->why[stage], "rank %llu holds %s", (unsigned long long)j->comm.rank, why);
        return; /* joins the all-reduce with zeros */
    }
    if (j->st != TPS_OK) return;
    if (stage == TPS_VSTAGE_ATTN) {
        vattn_map m;
        tps_vattn_map_local(b, d, &s, &m);
        m.qk = qk;
        tps_vstage_norm_f32(b, d, l, TPS_VSTAGE_ATTN, j->n, in, scratch);
        if (j->qkv_buf) {
            j->gathered = true;
            j->st = tps_vattn_chunked_f32(b, d, l, qk, &j->comm, j->n, scratch, j->qkv_buf, o->partial[stage],
                                          &j->err);
        } else {
            j->st = tps_vattn_f32(b, d, l, &m, j->n, scratch, false, o->partial[stage], &j->err);
        }
    } else {
        vmlp_map m;
        tps_vmlp_map_local(d, &s, &m);
        tps_vstage_norm_f32(b, d, l, TPS_VSTAGE_MLP, j->n, in, scratch);
        j->st = tps_vmlp_f32(b, d, l, &m, j->n, scratch, false, o->partial[stage], &j->err);
        if (l->stream) rank_stream_finish(j, l, stage);
    }
}

/* One stage of the rank; every rank enters the attention stage's q/k collective once,
 * whatever happened (with zeros when it computes nothing), as it enters the stage's
 * all-reduce. */
static void rank_stage(rank_job *j, const vlayer *l, int stage, const float *in, float *scratch)
{
    rank_qk c = {&j->comm, j->d->kv, j->qk_buf, false};
    vqk_reduce qk = {rank_qk_sum, &c};
    j->gathered = false;
    rank_stage_run(j, l, stage, in, scratch, &qk);
    tps_error e;
    tps_status st = TPS_OK;
    if (stage == TPS_VSTAGE_ATTN && j->qkv_buf && !j->gathered)
        st = tps_vattn_chunked_f32(j->b, j->d, l, &qk, &j->comm, j->n, NULL, j->qkv_buf, NULL, &e);
    if (st != TPS_OK && j->st == TPS_OK) {
        j->st = st;
        j->err = e;
    }
    if (stage != TPS_VSTAGE_ATTN || !tps_vqk_whole(j->b) || c.entered) return;
    st = rank_qk_sum(&c, NULL, j->n, &e);
    if (st != TPS_OK && j->st == TPS_OK) {
        j->st = st;
        j->err = e;
    }
}

/* Sets j->st; *elsewhere when it stopped because another rank could not load. */
static void rank_body(rank_job *j, bool *elsewhere)
{
    const vdims *d = j->d;
    vrank_out *o = j->out;
    vlayer l;
    memset(&l, 0, sizeof l);
    *elsewhere = false;
    rank_stream rs = {.j = j, .upload = j->comm.dev != NULL};
    vexpert_fetcher fetch = {.after = rank_fetched, .arg = &rs};
    tps_vshare_of(d, j->comm.size, j->comm.rank, &rs.s);
    j->rs = &rs;
    size_t nh = j->n * d->hidden;
    float *h = malloc((nh + 1) * sizeof *h), *scratch = malloc((nh + 1) * sizeof *scratch);
    j->qk_buf = malloc((2 * j->n + 1) * sizeof *j->qk_buf);
    bool chunked = tps_vqkv_chunked(j->b, d, j->comm.size);
    j->qkv_buf = chunked ? malloc((tps_vqkv_gather_len(d, j->n) + 1) * sizeof *j->qkv_buf) : NULL;
    if (!h || !scratch || !j->qk_buf || (chunked && !j->qkv_buf)) j->st = tps_fail_oom(&j->err, "a rank's activations");
    const tps_verify_opts *vo = j->comm.rank == 0 ? j->vo : NULL;
    tps_vstage(vo, "ranks: loading");
    rs.seen = calloc(d->experts + 1, 1);
    if (j->st == TPS_OK && !rs.seen) j->st = tps_fail_oom(&j->err, "a rank's expert table");
    if (j->st == TPS_OK) j->st = tps_vlayer_load_streamed(j->b, j->layer, d->experts, j->src, &fetch, &l, &j->err);
    if (j->st == TPS_OK && j->comm.dev) {
        tps_vstage(vo, "ranks: uploading to the devices");
        j->st = tps_vdev_upload_layer(j->comm.dev, &l, &j->err);
    }
    /* Every rank learns whether any rank failed to load, and then all stop together. */
    float failed = j->st != TPS_OK;
    tps_status cst = j->comm.allreduce_sum(&j->comm, &failed, 1, &j->err);
    if (cst != TPS_OK || failed > 0) {
        if (j->st == TPS_OK) {
            j->st = cst != TPS_OK ? cst : TPS_EIO;
            *elsewhere = cst == TPS_OK;
        }
        goto cleanup;
    }
    tps_vrank_note_dtypes(o, &l);

    for (int stage = 0; stage < TPS_VSTAGE_COUNT; stage++) {
        const float *in = j->x;
        if (stage == TPS_VSTAGE_MLP && !j->b->parallel_residual) {
            for (size_t i = 0; i < nh; i++) h[i] = j->x[i] + o->out[TPS_VSTAGE_ATTN][i];
            in = h;
        }
        tps_vstage(vo, stage == TPS_VSTAGE_ATTN ? "ranks: attention" : "ranks: mlp");
        rank_stage(j, &l, stage, in, scratch);
        memcpy(o->out[stage], o->partial[stage], nh * sizeof(float));
        cst = j->comm.allreduce_sum(&j->comm, o->out[stage], nh, &j->err);
        if (cst != TPS_OK) {
            j->st = cst;
            goto cleanup;
        }
        /* A row-parallel bias is added once, after the sum, by each rank to its copy (scratch
         * still holds the stage's normalized input, which routes GPT-OSS's expert biases). */
        const tps_vt *bias = vrole(&l, TPS_ROLE_O_B, 0, false);
        if (stage == TPS_VSTAGE_ATTN && bias && !o->bad[stage]) tps_vadd_vec_f32(bias, j->n, (size_t)d->hidden, o->out[stage]);
        if (stage == TPS_VSTAGE_MLP && !o->bad[stage] && j->st == TPS_OK)
            j->st = tps_vmlp_out_bias_f32(j->b, d, &l, j->n, scratch, o->out[stage], &j->err);
        if (!o->bad[stage]) tps_vpost_norm_f32(j->b, d, &l, stage, j->n, o->out[stage]); /* Gemma 2: replicated */
    }
cleanup:
    tps_vlayer_release(&l);
    free(rs.seen);
    j->rs = NULL;
    free(h);
    free(scratch);
    free(j->qk_buf);
    j->qk_buf = NULL;
    free(j->qkv_buf);
    j->qkv_buf = NULL;
}

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    bool elsewhere;
    if (vgate_pass(j->gate)) rank_body(j, &elsewhere);
    return NULL;
}

tps_status tps_vrank_one(const tps_block *b, const vdims *d, uint64_t layer, const tps_vsource *src, size_t n,
                     const float *x, tps_vcomm *comm, vrank_out *out, bool *elsewhere, const tps_verify_opts *vo,
                     tps_error *err)
{
    rank_job j = {.b = b, .d = d, .layer = layer, .src = src, .n = n, .x = x, .out = out, .comm = *comm, .vo = vo};
    tps_error_clear(&j.err);
    rank_body(&j, elsewhere);
    if (j.st != TPS_OK && !*elsewhere) tps_fail(err, j.st, "%s", j.err.msg);
    return j.st;
}

tps_status tps_vrank_out_alloc(vrank_out *o, size_t nh, tps_error *err)
{
    memset(o, 0, sizeof *o);
    o->min_dtype = TPS_DT_F64;
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        o->partial[s] = malloc((nh + 1) * sizeof(float));
        o->out[s] = malloc((nh + 1) * sizeof(float));
        if (!o->partial[s] || !o->out[s]) {
            tps_vrank_out_release(o);
            return tps_fail_oom(err, "the ranks' outputs");
        }
    }
    return TPS_OK;
}

void tps_vrank_out_release(vrank_out *o)
{
    if (!o) return;
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        free(o->partial[s]);
        free(o->out[s]);
    }
    memset(o, 0, sizeof *o);
}

/* Rank r's comm: the device's, or the threads' all-reduce over sh. */
static tps_vcomm rank_comm(tps_vdev *dev, uint64_t r, uint64_t T, tshared *sh)
{
    if (dev) {
        tps_vcomm c = tps_vdev_comm(tps_vdev_rank_of(dev, r), NULL);
        c.size = T;
        return c;
    }
    return (tps_vcomm){.rank = r, .size = T, .allreduce_sum = thread_allreduce, .impl = sh};
}

tps_status tps_vrank_run(const tps_block *b, const vdims *d, uint64_t layer, uint64_t T, const tps_vsource *ranks,
                         size_t n, const float *x, tps_vdev *dev, vrank_out *outs, const tps_verify_opts *vo,
                         tps_error *err)
{
    tps_status st = TPS_OK;
    size_t nh = n * (size_t)d->hidden;
    tshared sh = {.T = T, .cap = nh};
    rank_job *jobs = calloc(T, sizeof *jobs);
    pthread_t *tid = calloc(T, sizeof *tid);
    sh.bufs = calloc(T, sizeof *sh.bufs);
    sh.sum = malloc((nh + 1) * sizeof *sh.sum);
    vgate gate = VGATE_INIT;
    uint64_t started = 0;
    bool bar = false;
    if (!jobs || !tid || !sh.bufs || !sh.sum) {
        st = tps_fail_oom(err, "the rank threads");
        goto cleanup;
    }
    for (uint64_t r = 0; r < T; r++) memset(&outs[r], 0, sizeof outs[r]);
    for (uint64_t r = 0; r < T; r++) TPS_CHECK(tps_vrank_out_alloc(&outs[r], nh, err));
    if (pthread_barrier_init(&sh.bar, NULL, (unsigned)T) != 0) {
        st = tps_fail(err, TPS_EIO, "cannot create a barrier for %llu rank threads", (unsigned long long)T);
        goto cleanup;
    }
    bar = true;
    for (uint64_t r = 0; r < T; r++) {
        jobs[r] = (rank_job){.b = b, .d = d, .layer = layer, .src = &ranks[r], .n = n, .x = x, .out = &outs[r],
                             .comm = rank_comm(dev, r, T, &sh), .gate = &gate, .vo = vo};
        tps_error_clear(&jobs[r].err);
    }
    started = vgate_run(&gate, tid, T, rank_main, jobs, sizeof *jobs);
    if (started < T) st = tps_fail(err, TPS_EIO, "cannot start the thread of rank %llu", (unsigned long long)started);
    for (uint64_t r = 0; r < started && st == TPS_OK; r++)
        if (jobs[r].st != TPS_OK && jobs[r].err.code != TPS_OK) {
            *err = jobs[r].err;
            st = jobs[r].st;
        }
    for (uint64_t r = 0; r < started && st == TPS_OK; r++)
        if (jobs[r].st != TPS_OK) st = jobs[r].st; /* a rank that stopped because another failed */
cleanup:
    if (bar) pthread_barrier_destroy(&sh.bar);
    if (st != TPS_OK && outs)
        for (uint64_t r = 0; r < T; r++) tps_vrank_out_release(&outs[r]);
    free(jobs);
    free(tid);
    free(sh.bufs);
    free(sh.sum);
    return st;
}

/* ---- a collective step outside the layers (the whole-model pass) ---- */

typedef struct each_job {
    tps_vrank_fn fn;
    void *arg;
    tps_vcomm comm;
    tps_status st;
    tps_error err;
    vgate *gate;
} each_job;

static void *each_main(void *arg)
{
    each_job *j = arg;
    if (vgate_pass(j->gate)) j->st = j->fn(j->arg, &j->comm, &j->err);
    return NULL;
}

tps_status tps_vrank_each_thread(uint64_t T, size_t cap, tps_vdev *dev, tps_vrank_fn fn, void *arg, tps_error *err)
{
    tps_status st = TPS_OK;
    tshared sh = {.T = T, .cap = cap};
    each_job *jobs = calloc(T, sizeof *jobs);
    pthread_t *tid = calloc(T, sizeof *tid);
    sh.bufs = calloc(T, sizeof *sh.bufs);
    sh.sum = malloc((cap + 1) * sizeof *sh.sum);
    vgate gate = VGATE_INIT;
    bool bar = false;
    if (!jobs || !tid || !sh.bufs || !sh.sum) {
        st = tps_fail_oom(err, "the rank threads");
        goto cleanup;
    }
    if (pthread_barrier_init(&sh.bar, NULL, (unsigned)T) != 0) {
        st = tps_fail(err, TPS_EIO, "cannot create a barrier for %llu rank threads", (unsigned long long)T);
        goto cleanup;
    }
    bar = true;
    for (uint64_t r = 0; r < T; r++) {
        jobs[r] = (each_job){.fn = fn, .arg = arg, .gate = &gate, .comm = rank_comm(dev, r, T, &sh)};
        tps_error_clear(&jobs[r].err);
    }
    uint64_t started = vgate_run(&gate, tid, T, each_main, jobs, sizeof *jobs);
    if (started < T) st = tps_fail(err, TPS_EIO, "cannot start the thread of rank %llu", (unsigned long long)started);
    /* The first rank's own failure; one that stopped because another failed says less. */
    for (uint64_t r = 0; r < started && st == TPS_OK; r++)
        if (jobs[r].st != TPS_OK && jobs[r].err.code != TPS_OK) {
            *err = jobs[r].err;
            st = jobs[r].st;
        }
    for (uint64_t r = 0; r < started && st == TPS_OK; r++)
        if (jobs[r].st != TPS_OK) st = tps_fail(err, jobs[r].st, "rank %llu stopped", (unsigned long long)r);
cleanup:
    if (bar) pthread_barrier_destroy(&sh.bar);
    free(jobs);
    free(tid);
    free(sh.bufs);
    free(sh.sum);
    return st;
}
