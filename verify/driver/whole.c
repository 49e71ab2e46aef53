/* The whole-model pass (verify.h, tps_verify_whole_begin): the vocabulary-parallel
 * embedding before the layers and the final norm and vocabulary-parallel LM head after
 * them, each rank from its own shard file, against the unsharded model in float64.  The
 * layers in between are tps_verify_layer's, chained through tps_verify_chain. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../../lib/engine/shardset.h"
#include "../../lib/set/manifest.h"
#include "../load/dequant.h"
#include "../load/finite.h"
#include "../load/layer.h"
#include "../load/names.h"
#include "../math/ops.h"
#include "../math/util.h"
#include "../math/vbuf.h"
#include "../ranks/device.h"
#include "head_rows.h"
#include "whole.h"

void tps_verify_whole_release(tps_verify_whole *w)
{
    if (!w) return;
    free(w->ids);
    free(w->chain.x);
    free(w->chain.xref);
    free(w->ref_logits);
    free(w->logits);
    w->ids = NULL;
    w->chain.x = NULL;
    w->chain.xref = NULL;
    w->ref_logits = NULL;
    w->logits = NULL;
}

/* What every process must know before the ranks run (sent from rank 0 under MPI). */
typedef struct wmeta {
    uint64_t vocab, hidden, positions;
    int32_t tied, pos;
    uint64_t vocab_quantum; /* a serving engine's vocabulary padding (a target set's manifest); 0: the tp */
} wmeta;

/* A target set's vocabulary is padded as its engine pads it (a multiple of 64, then cut in
 * T equal blocks: lib/targets/target.h), not to a multiple of T. */
static uint64_t engine_vocab_quantum(const tps_block *b, const tps_verify_opts *o)
{
    const char *en = b->model_role[TPS_MROLE_EMBED];
    const tps_manifest_tensor *t = o->shards && en ? tps_manifest_find(o->shards->m, en) : NULL;
    return t && t->part->pad ? t->part->pad_multiple : 0;
}

static tps_status load_tensor(const tps_block *b, const tps_vsource *src, const char *name, tps_vt *t, tps_error *err)
{
    memset(t, 0, sizeof *t);
    /* a checkpoint that quantizes its embedding or lm_head (FP8 with a scale beside it, or a
     * GPTQ/AWQ qweight in place of the weight): both sides dequantize, as the layers do */
    tps_status st = tps_vload_weight(b, src, name, t, err);
    if (st != TPS_OK) return st;
    if (!tps_vdtype_supported(t->dtype)) {
        st = tps_fail(err, TPS_EINVALID, "%s: dtype %s is not one verify computes in", name, tps_dtype_name(t->dtype));
        tps_vt_release(t);
    }
    return st;
}

/* A reference tensor; one from the source (--source) must be finite (the shard set's checked
 * reads refuse a non-finite one of theirs: verify/load/source.c). */
static tps_status load_ref(const tps_block *b, const tps_vsource *ref, const tps_verify_opts *o, const char *name,
                           tps_vt *t, tps_error *err)
{
    tps_status st = load_tensor(b, ref, name, t, err);
    if (st == TPS_OK && !(o->shards && tps_vsource_is_shardset(ref, o->shards)))
        st = tps_vt_require_finite(t, "the source", err);
    if (st != TPS_OK) tps_vt_release(t);
    return st;
}

static const char *head_name(const tps_block *b, bool tied)
{
    return b->model_role[tied ? TPS_MROLE_EMBED : TPS_MROLE_LM_HEAD];
}

/* Gemma's embedding multiplier: sqrt(hidden) in the embedding's dtype, as transformers casts
 * its normalizer to the activations' dtype (sqrt(3072) = 55.43 becomes 55.5 in BF16); 1
 * without embed_scale. */
static double embed_multiplier(const tps_block *b, uint64_t hidden, tps_dtype dt)
{
    if (!b->embed_scale) return 1.0;
    double v = sqrt((double)hidden);
    unsigned char buf[8];
    if (tps_dtype_from_f64(dt, buf, 0, v)) tps_dtype_to_f64(dt, buf, 0, &v);
    return v;
}

/* Gemma 2's final_logit_softcapping: logits become c tanh(logit / c). */
static void softcap_f32(const tps_block *b, float *y, size_t n)
{
    if (b->final_softcap > 0)
        for (size_t i = 0; i < n; i++) y[i] = (float)(b->final_softcap * tanh((double)y[i] / b->final_softcap));
}

/* ---- the ranks' steps ---- */

enum { STEP_EMBED, STEP_HEAD };

/* One step on every rank: what it reads, and per rank what it found and computed. */
typedef struct wstep {
    const tps_block *b;
    const tps_vsource *ranks;
    const tps_verify_whole *w;
    int step;
    const float *x;        /* STEP_HEAD: the hidden state after the last layer */
    float **out;           /* per rank: [tokens, hidden] (embed) or [tokens, padded_vocab] (head) */
    bool *bad;             /* per rank: a slice of the wrong shape */
    char (*why)[512];
    tps_dtype *min_dtype;  /* per rank */
} wstep;

static void note_dtype(wstep *s, uint64_t r, tps_dtype dt)
{
    if (tps_verify_rtol(dt) > tps_verify_rtol(s->min_dtype[r])) s->min_dtype[r] = dt;
}

static void note(wstep *s, uint64_t r, const tps_vt *t)
{
    if (t->data) note_dtype(s, r, t->dtype);
}

/* A slice must have the shape the TP convention gives the rank; otherwise the rank joins
 * the collectives with zeros and the report names its slice. */
static bool shape_is(wstep *s, uint64_t r, const tps_vt *t, uint64_t d0, uint64_t d1, int ndim, const char *what)
{
    if (t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1)) return true;
    char have[64] = "", want[64];
    for (int i = 0; i < t->ndim; i++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%llu", i ? ", " : "",
                 (unsigned long long)t->shape[i]);
    if (ndim == 1) snprintf(want, sizeof want, "[%llu]", (unsigned long long)d0);
    else snprintf(want, sizeof want, "[%llu, %llu]", (unsigned long long)d0, (unsigned long long)d1);
    if (!s->bad[r])
        snprintf(s->why[r], sizeof s->why[r], "rank %llu holds %s (%s) with shape [%s] where the TP convention gives %s",
                 (unsigned long long)r, t->name, what, have, want);
    s->bad[r] = true;
    return false;
}

static tps_status rank_step(void *arg, tps_vcomm *comm, tps_error *err)
{
    wstep *s = arg;
    const tps_block *b = s->b;
    const tps_verify_whole *w = s->w;
    uint64_t r = comm->rank, T = comm->size, rows = w->padded_vocab / T, H = w->hidden;
    size_t n = (size_t)w->tokens, nh = n * (size_t)H, nv = n * (size_t)w->padded_vocab;
    tps_status st = TPS_OK;
    tps_vt vocab_t, extra_t, bias_t; /* the vocabulary slice; positions or final norm; its bias */
    memset(&vocab_t, 0, sizeof vocab_t);
    memset(&extra_t, 0, sizeof extra_t);
    memset(&bias_t, 0, sizeof bias_t);
    const tps_vsource *src = &s->ranks[r];
    float *out = s->out[r], *xn = NULL;
    const char *vname = s->step == STEP_EMBED ? b->model_role[TPS_MROLE_EMBED] : head_name(b, w->tied);
    /* a plain head streams by vocabulary chunks, the rank's slice never whole in memory */
    bool stream = s->step == STEP_HEAD && tps_vhead_streams(src, vname);
    /* the embedding's rows the ids pick, the slice streamed by */
    bool pick = s->step == STEP_EMBED && tps_vhead_streams(src, vname);
    uint64_t *at = NULL;
    vhead_seen seen = {0, 0, TPS_DT_F64};
    if (pick && !(at = malloc((n + 1) * sizeof *at))) st = tps_fail_oom(err, "the token ids");
    else if (pick) st = tps_vembed_pick(src, vname, r * rows, H, n, w->ids, false, &vocab_t, at, &seen, err);
    else if (!stream) st = load_tensor(b, src, vname, &vocab_t, err);
    if (st == TPS_OK && s->step == STEP_EMBED && w->pos_embed)
        st = load_tensor(b, src, b->model_role[TPS_MROLE_POS_EMBED], &extra_t, err);
    if (st == TPS_OK && s->step == STEP_HEAD) {
        st = load_tensor(b, src, b->model_role[TPS_MROLE_FINAL_NORM_W], &extra_t, err);
        const char *fb = b->model_role[TPS_MROLE_FINAL_NORM_B];
        if (st == TPS_OK && fb && src->has(src->ctx, fb)) st = load_tensor(b, src, fb, &bias_t, err);
    }
    if (st == TPS_OK && !(xn = malloc((nh + 1) * sizeof *xn))) st = tps_fail_oom(err, "a rank's activations");
    /* The LM head is a GEMM: on the rank's device, when it has one (the embedding is a lookup of
     * rows, done where the rows were loaded). */
    if (st == TPS_OK && s->step == STEP_HEAD && comm->dev && !stream) st = tps_vdev_upload(comm->dev, &vocab_t, err);
    /* Every rank learns whether any could not load, and then all stop together. */
    float failed = st != TPS_OK;
    tps_error ignored;
    tps_error_clear(&ignored);
    tps_status cst = comm->allreduce_sum(comm, &failed, 1, st == TPS_OK ? err : &ignored);
    if (cst != TPS_OK && st == TPS_OK) st = cst;
    if (st == TPS_OK && failed > 0) st = TPS_EIO; /* err untouched: another rank says why */
    if (st != TPS_OK) goto cleanup;
    /* a picked slice is judged by what streamed by, as a streamed head is */
    tps_vt held = {.name = (char *)vname, .dtype = seen.dtype, .ndim = 2, .shape = {seen.rows, seen.cols}};
    if (pick) note_dtype(s, r, seen.dtype);
    else note(s, r, &vocab_t);
    note(s, r, &extra_t);
    note(s, r, &bias_t);
    const char *what = s->step == STEP_EMBED ? "embed" : w->tied ? "lm_head, tied" : "lm_head";
    bool vocab_ok = stream || shape_is(s, r, pick ? &held : &vocab_t, rows, H, 2, what);
    if (s->step == STEP_EMBED) {
        memset(out, 0, nh * sizeof *out);
        if (vocab_ok && vocab_t.data) tps_vembed_f32(&vocab_t, pick ? 0 : r * rows, n, pick ? at : w->ids, out);
        TPS_CHECK(comm->allreduce_sum(comm, out, nh, err));
        float mult = (float)embed_multiplier(b, H, pick ? seen.dtype : vocab_t.dtype);
        if (mult != 1.0f)
            for (size_t i = 0; i < nh; i++) out[i] *= mult;
        /* Learned positions are replicated: each rank adds its own copy after the sum. */
        if (w->pos_embed && shape_is(s, r, &extra_t, w->positions, H, 2, "pos_embed")) {
            uint64_t *pos = malloc((n + 1) * sizeof *pos);
            if (!pos) {
                st = tps_fail_oom(err, "the positions");
                goto cleanup;
            }
            for (size_t t = 0; t < n; t++) pos[t] = t;
            tps_vembed_f32(&extra_t, 0, n, pos, xn);
            free(pos);
            for (size_t i = 0; i < nh; i++) out[i] += xn[i];
        }
    } else {
        memset(out, 0, nv * sizeof *out);
        bool norm_ok = shape_is(s, r, &extra_t, H, 0, 1, "final_norm") &&
                       (!bias_t.data || shape_is(s, r, &bias_t, H, 0, 1, "final_norm_bias"));
        if (vocab_ok && norm_ok) {
            vdims d;
            memset(&d, 0, sizeof d);
            d.hidden = H;
            tps_vnorm_f32(b, &d, &extra_t, bias_t.data ? &bias_t : NULL, n, s->x, xn);
            if (stream) {
                st = tps_vhead_rank_logits(src, vname, rows, H, n, xn, comm->dev, out + r * rows,
                                           (size_t)w->padded_vocab, &seen, err);
                held.dtype = seen.dtype;
                held.shape[0] = seen.rows;
                held.shape[1] = seen.cols;
                note_dtype(s, r, seen.dtype);
                if (st == TPS_OK && !shape_is(s, r, &held, rows, H, 2, what)) memset(out, 0, nv * sizeof *out);
            } else {
                st = tps_vlogits_f32(&vocab_t, n, xn, out + r * rows, (size_t)w->padded_vocab, err);
            }
            if (st != TPS_OK) memset(out, 0, nv * sizeof *out);
            softcap_f32(b, out, nv); /* elementwise, so before the gather: the other columns stay 0 */
        }
        /* The all-gather, as a sum of disjoint columns (exact: every other term is zero). */
        cst = comm->allreduce_sum(comm, out, nv, err);
        if (st == TPS_OK) st = cst;
    }
cleanup:
    free(at);
    tps_vt_release(&vocab_t);
    tps_vt_release(&extra_t);
    tps_vt_release(&bias_t);
    free(xn);
    return st;
}

/* Runs a step on the ranks; on rank 0 (this process under MPI, every rank otherwise)
 * leaves in *out0 rank 0's output (malloc'd, count floats), in *dt the lowest-precision
 * dtype, and in *culprit / detail the lowest rank whose slice had the wrong shape (under
 * MPI, every rank's shape verdict is summed so that rank 0 knows it). */
static tps_status run_step(const tps_block *b, uint64_t T, const tps_vsource *ranks, const tps_verify_opts *o,
                           const tps_verify_whole *w, int step, const float *x, size_t count, float **out0,
                           tps_dtype *dt, int64_t *culprit, char *detail, size_t dsize, tps_error *err)
{
    tps_status st = TPS_OK;
    tps_vbackend *be = o->backend;
    bool multi = tps_vbackend_multi(be);
    uint64_t me = tps_vbackend_rank(be);
    wstep s = {.b = b, .ranks = ranks, .w = w, .step = step, .x = x};
    s.out = calloc(T, sizeof *s.out);
    s.bad = calloc(T, sizeof *s.bad);
    s.why = calloc(T, sizeof *s.why);
    s.min_dtype = calloc(T, sizeof *s.min_dtype);
    float *flags = calloc(2 * T + 1, sizeof *flags);
    if (!s.out || !s.bad || !s.why || !s.min_dtype || !flags) st = tps_fail_oom(err, "the ranks' outputs");
    for (uint64_t r = 0; r < T && st == TPS_OK; r++) {
        s.min_dtype[r] = TPS_DT_F64;
        if ((!multi || r == me) && !(s.out[r] = malloc((count + 1) * sizeof(float))))
            st = tps_fail_oom(err, "the ranks' outputs");
    }
    if (multi) st = tps_vbackend_agree(be, st, err);
    TPS_CHECK(st);
    TPS_CHECK(tps_vbackend_each(be, T, count + 1, rank_step, &s, err));
    if (multi) { /* rank 0 learns every rank's shape verdict and lowest dtype (by its rtol) */
        static const tps_dtype dts[] = {TPS_DT_F64, TPS_DT_F32, TPS_DT_F16, TPS_DT_BF16, TPS_DT_F8_E4M3, TPS_DT_F8_E5M2};
        flags[me] = s.bad[me];
        for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++)
            if (dts[i] == s.min_dtype[me]) flags[T + me] = (float)i;
        TPS_CHECK(tps_vbackend_allreduce(be, flags, 2 * T, err));
        for (uint64_t r = 0; r < T; r++) {
            if (r == me) continue;
            size_t i = (size_t)flags[T + r];
            s.min_dtype[r] = dts[i < sizeof dts / sizeof dts[0] ? i : 0];
            s.bad[r] = flags[r] > 0;
            if (s.bad[r])
                snprintf(s.why[r], sizeof s.why[r],
                         "rank %llu holds a slice of the wrong shape (its process says which; the TP convention "
                         "gives it vocabulary rows %llu-%llu)",
                         (unsigned long long)r, (unsigned long long)(r * (w->padded_vocab / T)),
                         (unsigned long long)((r + 1) * (w->padded_vocab / T) - 1));
        }
    }
    *dt = TPS_DT_F64;
    for (uint64_t r = 0; r < T; r++)
        if (tps_verify_rtol(s.min_dtype[r]) > tps_verify_rtol(*dt)) *dt = s.min_dtype[r];
    *culprit = -1;
    detail[0] = 0;
    for (uint64_t r = 0; r < T; r++)
        if (s.bad[r]) {
            if (*culprit < 0) {
                *culprit = (int64_t)r;
                snprintf(detail, dsize, "%s", s.why[r]);
            } else {
                size_t len = strlen(detail);
                snprintf(detail + len, dsize - len, "; also rank %llu", (unsigned long long)r);
            }
        }
    *out0 = s.out[me];
    s.out[me] = NULL;
cleanup:
    for (uint64_t r = 0; s.out && r < T; r++) free(s.out[r]);
    free(s.out);
    free(s.bad);
    free(s.why);
    free(s.min_dtype);
    free(flags);
    return st;
}

/* rtol and atol of a comparison: --rtol / --atol, else by dtype and the reference's RMS. */
static void tolerances(const tps_verify_opts *o, tps_dtype dt, const double *ref, size_t n, tps_verify_stage *vs)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += ref[i] * ref[i];
    vs->rtol = o->rtol > 0 ? o->rtol : tps_verify_rtol(dt);
    vs->atol = o->atol > 0 ? o->atol : ss > 0 ? vs->rtol * sqrt(ss / (double)n) : vs->rtol;
}

static void fail_with(tps_verify_whole *w, const char *what, int64_t culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_with(tps_verify_whole *w, const char *what, int64_t culprit, const char *fmt, ...)
{
    if (!w->pass) return; /* the first failure is the one reported */
    w->pass = false;
    w->failed = what;
    w->culprit = culprit;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->detail, sizeof w->detail, fmt, ap);
    va_end(ap);
}

/* Token ids below the true vocabulary size, from the seed (splitmix64 modulo the size: its
 * bias, under 2^-40 for any real vocabulary, does not matter here). */
static void draw_ids(uint64_t seed, uint64_t vocab, size_t n, uint64_t *ids)
{
    uint64_t s = seed ^ 0x7f4a7c159e3779b9ull;
    for (size_t t = 0; t < n; t++) ids[t] = tps_vsplitmix64(&s) % vocab;
}

/* Rank 0's reference embedding: the ids' rows of the whole embedding, plus positions. */
static tps_status ref_embed(const tps_block *b, const tps_vsource *ref, const tps_verify_opts *o, tps_verify_whole *w,
                            wmeta *m, tps_error *err)
{
    tps_status st = TPS_OK;
    tps_vt e, p;
    memset(&e, 0, sizeof e);
    memset(&p, 0, sizeof p);
    const char *en = b->model_role[TPS_MROLE_EMBED], *pn = b->model_role[TPS_MROLE_POS_EMBED];
    const char *fn = b->model_role[TPS_MROLE_FINAL_NORM_W], *hn = b->model_role[TPS_MROLE_LM_HEAD];
    if (!en || !fn)
        return tps_fail(err, TPS_EINVALID,
                        "the layout's block: section names no %s tensor (add `%s: NAME` to it; the built-in presets "
                        "name it)",
                        !en ? "embed" : "final_norm", !en ? "embed" : "final_norm");
    size_t n = (size_t)o->tokens;
    /* Where the source knows the embedding's shape without reading it, the ids are drawn first
     * and only their rows kept as the embedding streams by (every byte still read and checked):
     * a 1 GiB embedding is not held for 16 rows. */
    uint64_t shape[TPS_MAX_DIMS] = {0}, *at = NULL;
    bool pick = tps_vhead_streams(ref, en) && ref->dims && ref->dims(ref->ctx, en, shape) == 2 && shape[0] && shape[1];
    if (pick) {
        vhead_seen seen;
        draw_ids(o->seed, shape[0], n, w->ids);
        if (!(at = malloc((n + 1) * sizeof *at))) {
            st = tps_fail_oom(err, "the token ids");
            goto cleanup;
        }
        TPS_CHECK(tps_vembed_pick(ref, en, 0, shape[1], n, w->ids, !(o->shards && tps_vsource_is_shardset(ref, o->shards)),
                                  &e, at, &seen, err));
        if (seen.rows != shape[0] || seen.cols != shape[1] || !e.data) {
            st = tps_fail(err, TPS_EINVALID, "%s: the embedding must be [vocab, hidden]", en);
            goto cleanup;
        }
    } else {
        TPS_CHECK(load_ref(b, ref, o, en, &e, err));
        if (e.ndim != 2 || !e.shape[0] || !e.shape[1]) {
            st = tps_fail(err, TPS_EINVALID, "%s: the embedding must be [vocab, hidden]", en);
            goto cleanup;
        }
        shape[0] = e.shape[0];
        shape[1] = e.shape[1];
    }
    m->vocab = shape[0];
    m->hidden = shape[1];
    m->tied = !(hn && ref->has(ref->ctx, hn));
    m->pos = pn && ref->has(ref->ctx, pn);
    size_t nh = n * (size_t)m->hidden;
    draw_ids(o->seed, m->vocab, n, w->ids);
    if (!(w->chain.xref = malloc((nh + 1) * sizeof *w->chain.xref))) {
        st = tps_fail_oom(err, "the reference's hidden state");
        goto cleanup;
    }
    tps_vembed_f64(&e, 0, n, pick ? at : w->ids, w->chain.xref);
    double mult = embed_multiplier(b, m->hidden, e.dtype);
    for (size_t i = 0; mult != 1.0 && i < nh; i++) w->chain.xref[i] *= mult;
    if (m->pos) {
        TPS_CHECK(load_ref(b, ref, o, pn, &p, err));
        if (p.ndim != 2 || p.shape[1] != m->hidden) {
            st = tps_fail(err, TPS_EINVALID, "%s: the position embedding must be [positions, %llu]", pn,
                          (unsigned long long)m->hidden);
            goto cleanup;
        }
        m->positions = p.shape[0];
        if (o->tokens > m->positions) {
            st = tps_fail(err, TPS_EARG, "--tokens %llu: the model has %llu learned positions (%s)",
                          (unsigned long long)o->tokens, (unsigned long long)m->positions, pn);
            goto cleanup;
        }
        uint64_t *pos = malloc((n + 1) * sizeof *pos);
        double *rows = malloc((nh + 1) * sizeof *rows);
        if (pos && rows) {
            for (size_t t = 0; t < n; t++) pos[t] = t;
            tps_vembed_f64(&p, 0, n, pos, rows);
            for (size_t i = 0; i < nh; i++) w->chain.xref[i] += rows[i];
        } else {
            st = tps_fail_oom(err, "the positions");
        }
        free(pos);
        free(rows);
    }
cleanup:
    free(at);
    tps_vt_release(&e);
    tps_vt_release(&p);
    return st;
}

/* Checks the named tensors against the manifest (o->shards), before any number is trusted. */
static tps_status check_tensors(const tps_block *b, const tps_vsource *ref, const tps_verify_opts *o, int step,
                                bool tied, tps_verify_whole *w, tps_error *err)
{
    if (!o->shards) return TPS_OK;
    bool read = tps_vsource_is_shardset(ref, o->shards);
    const char *names[3] = {NULL, NULL, NULL};
    if (step == STEP_EMBED) {
        names[0] = b->model_role[TPS_MROLE_EMBED];
        names[1] = b->model_role[TPS_MROLE_POS_EMBED];
    } else {
        names[0] = b->model_role[TPS_MROLE_FINAL_NORM_W];
        names[1] = b->model_role[TPS_MROLE_FINAL_NORM_B];
        names[2] = tied ? NULL : b->model_role[TPS_MROLE_LM_HEAD];
    }
    for (int i = 0; i < 3; i++)
        if (names[i]) {
            tps_status st =
                tps_vtensor_check(o->shards, names[i], read ? NULL : ref, &w->checked_tensors, &w->checked_bytes, err);
            if (st != TPS_OK) return st;
        }
    return TPS_OK;
}

tps_status tps_verify_whole_begin(const tps_block *b, uint64_t T, const tps_vsource *ref, const tps_vsource *ranks,
                                  const tps_verify_opts *o, tps_verify_whole *w, tps_error *err)
{
    tps_status st = TPS_OK;
    double t0 = tps_vnow();
    tps_vbackend *be = o->backend;
    bool root = tps_vbackend_rank(be) == 0, multi = tps_vbackend_multi(be);
    wmeta m;
    memset(&m, 0, sizeof m);
    memset(w, 0, sizeof *w);
    w->pass = true;
    w->culprit = -1;
    w->ranks = T;
    w->tokens = o->tokens;
    w->chain.tokens = o->tokens;
    w->chain.dtype = TPS_DT_F64;
    if (T == 0 || o->tokens == 0) return tps_fail(err, TPS_EINVALID, "verify needs at least one rank and one token");
    size_t n;
    if (!tps_u64_to_size(o->tokens, &n) || !(w->ids = malloc((n + 1) * sizeof *w->ids)))
        return tps_fail_oom(err, "the token ids");
    /* The vocabulary size is the reference's: rank 0 finds it, then every process draws
     * the same ids from the seed. */
    if (root) {
        tps_vstage(o, "embedding: reference");
        /* the shards' copies first: a non-finite one is reported with the source's verdict */
        st = check_tensors(b, ref, o, STEP_EMBED, false, w, err);
        if (st == TPS_OK) st = ref_embed(b, ref, o, w, &m, err);
        m.vocab_quantum = engine_vocab_quantum(b, o);
    }
    if (multi) {
        TPS_CHECK(tps_vbackend_agree(be, st, err));
        TPS_CHECK(tps_vbackend_bcast(be, &m, sizeof m, err));
    }
    TPS_CHECK(st);
    w->vocab = m.vocab;
    w->hidden = w->chain.hidden = m.hidden;
    w->positions = m.positions;
    w->tied = m.tied;
    w->pos_embed = m.pos;
    w->padded_vocab = (m.vocab + T - 1) / T * T;
    if (m.vocab_quantum) {
        uint64_t q = (m.vocab + m.vocab_quantum - 1) / m.vocab_quantum * m.vocab_quantum;
        if (q % T == 0) w->padded_vocab = q; /* split refuses a tp that does not divide it */
    }
    draw_ids(o->seed, m.vocab, n, w->ids); /* the same ids as rank 0's */
    uint64_t nh64;
    size_t nh;
    if (!tps_mul_u64(o->tokens, m.hidden, &nh64) || !tps_u64_to_size(nh64, &nh) || nh > (size_t)1 << 32) {
        st = tps_fail(err, TPS_EINVALID, "%llu tokens of hidden size %llu is too many", (unsigned long long)o->tokens,
                      (unsigned long long)m.hidden);
        goto cleanup;
    }
    tps_vstage(o, "embedding: ranks");
    tps_dtype dt;
    int64_t culprit;
    char detail[sizeof w->detail];
    TPS_CHECK(run_step(b, T, ranks, o, w, STEP_EMBED, NULL, nh, &w->chain.x, &dt, &culprit, detail, sizeof detail, err));
    w->chain.dtype = dt;
    if (root) {
        tolerances(o, dt, w->chain.xref, nh, &w->embed_cmp);
        tps_vcmp c = tps_vcompare(w->chain.x, w->chain.xref, nh, w->embed_cmp.rtol, w->embed_cmp.atol);
        w->embed_cmp.max_abs = c.max_abs;
        w->embed_cmp.rel = c.rel;
        w->embed_cmp.pass = c.pass && culprit < 0;
        if (culprit >= 0) {
            fail_with(w, "embedding", culprit, "%s", detail);
        } else if (!c.pass) {
            /* The row of a token that differs is one rank's: the first such token names it. */
            uint64_t rows = w->padded_vocab / T, H = m.hidden;
            for (size_t t = 0; t < n; t++) {
                tps_vcmp ct = tps_vcompare(w->chain.x + t * H, w->chain.xref + t * H, (size_t)H, w->embed_cmp.rtol,
                                           w->embed_cmp.atol);
                if (ct.pass) continue;
                uint64_t r = w->ids[t] / rows;
                fail_with(w, "embedding", (int64_t)r,
                          "token %llu (position %zu) looked up from rank %llu's rows %llu-%llu differs from the "
                          "reference's row (max abs err %.3g): its slice of %s holds other rows",
                          (unsigned long long)w->ids[t], t, (unsigned long long)r, (unsigned long long)(r * rows),
                          (unsigned long long)((r + 1) * rows - 1), ct.max_abs, b->model_role[TPS_MROLE_EMBED]);
                break;
            }
        }
    }
cleanup:
    w->seconds += tps_vnow() - t0;
    return st;
}

/* Rank 0's reference logits from xref. */
static tps_status ref_head(const tps_block *b, const tps_vsource *ref, const tps_verify_opts *o,
                           const tps_verify_whole *w, double *logits, tps_error *err)
{
    tps_status st = TPS_OK;
    tps_vt nw, nb, h;
    memset(&nw, 0, sizeof nw);
    memset(&nb, 0, sizeof nb);
    memset(&h, 0, sizeof h);
    size_t n = (size_t)w->tokens, nh = n * (size_t)w->hidden;
    double *xn = malloc((nh + 1) * sizeof *xn);
    if (!xn) return tps_fail_oom(err, "the reference's hidden state");
    const char *fb = b->model_role[TPS_MROLE_FINAL_NORM_B];
    TPS_CHECK(load_ref(b, ref, o, b->model_role[TPS_MROLE_FINAL_NORM_W], &nw, err));
    if (fb && ref->has(ref->ctx, fb)) TPS_CHECK(load_ref(b, ref, o, fb, &nb, err));
    if (nw.ndim != 1 || nw.shape[0] != w->hidden || (nb.data && (nb.ndim != 1 || nb.shape[0] != w->hidden))) {
        st = tps_fail(err, TPS_EINVALID, "%s: the final norm must be [%llu]", nw.name, (unsigned long long)w->hidden);
        goto cleanup;
    }
    vdims d;
    memset(&d, 0, sizeof d);
    d.hidden = w->hidden;
    tps_vnorm_f64(b, &d, &nw, nb.data ? &nb : NULL, n, w->chain.xref, xn);
    const char *hn = head_name(b, w->tied);
    if (tps_vhead_streams(ref, hn)) { /* by vocabulary chunks: one chunk of the head held */
        TPS_CHECK(tps_vhead_ref_logits(ref, hn, w->vocab, w->hidden, n, xn,
                                       !(o->shards && tps_vsource_is_shardset(ref, o->shards)), logits, err));
        goto softcap;
    }
    TPS_CHECK(load_ref(b, ref, o, hn, &h, err));
    if (h.ndim != 2 || h.shape[0] != w->vocab || h.shape[1] != w->hidden) {
        st = tps_fail(err, TPS_EINVALID, "%s: the LM head must be [%llu, %llu]", h.name, (unsigned long long)w->vocab,
                      (unsigned long long)w->hidden);
        goto cleanup;
    }
    st = tps_vlogits_f64(&h, n, xn, logits, (size_t)w->vocab, err);
softcap:
    for (size_t i = 0; st == TPS_OK && b->final_softcap > 0 && i < n * (size_t)w->vocab; i++)
        logits[i] = b->final_softcap * tanh(logits[i] / b->final_softcap);
cleanup:
    tps_vt_release(&nw);
    tps_vt_release(&nb);
    tps_vt_release(&h);
    free(xn);
    return st;
}

/* Rank 0's half of the head: the shards' copies checked, then the reference's logits. */
typedef struct head_job {
    const tps_block *b;
    const tps_vsource *ref;
    const tps_verify_opts *o;
    tps_verify_whole *w;
    double *logits;
    tps_status st;
    tps_error err, rank_err; /* the reference's; the ranks' while both run */
    pthread_t tid;
} head_job;

static tps_status ref_head_checked(head_job *j, tps_error *err)
{
    tps_status st = check_tensors(j->b, j->ref, j->o, STEP_HEAD, j->w->tied, j->w, err);
    return st != TPS_OK ? st : ref_head(j->b, j->ref, j->o, j->w, j->logits, err);
}

static void *head_thread(void *arg)
{
    head_job *j = arg;
    j->st = ref_head_checked(j, &j->err);
    return NULL;
}

static size_t argmax_f32(const float *v, size_t n)
{
    size_t k = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[k]) k = i;
    return k;
}

static size_t argmax_f64(const double *v, size_t n)
{
    size_t k = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[k]) k = i;
    return k;
}

tps_status tps_verify_whole_end(const tps_block *b, uint64_t T, const tps_vsource *ref, const tps_vsource *ranks,
                                const tps_verify_opts *o, tps_verify_whole *w, tps_error *err)
{
    tps_status st = TPS_OK;
    double t0 = tps_vnow();
    tps_vbackend *be = o->backend;
    bool root = tps_vbackend_rank(be) == 0, multi = tps_vbackend_multi(be);
    size_t n = (size_t)w->tokens, V = (size_t)w->vocab, Vp = (size_t)w->padded_vocab;
    uint64_t nv64;
    size_t nv;
    float *gathered = NULL, *logits = NULL;
    double *ref_logits = NULL;
    tps_vbuf_trim(); /* the last layer's reference buffers, kept for a next layer */
    if (!tps_mul_u64(w->tokens, w->padded_vocab, &nv64) || !tps_u64_to_size(nv64, &nv) || nv > (size_t)1 << 32)
        return tps_fail(err, TPS_EINVALID, "%llu tokens of a %llu-row vocabulary is too many",
                        (unsigned long long)w->tokens, (unsigned long long)w->padded_vocab);
    head_job job = {.b = b, .ref = ref, .o = o, .w = w, .st = TPS_OK};
    bool async = false;
    if (root) {
        tps_vstage(o, "lm head: reference");
        if (!(ref_logits = malloc((n * V + 1) * sizeof *ref_logits)) || !(logits = malloc((n * V + 1) * sizeof *logits)))
            st = tps_fail_oom(err, "the logits");
        job.logits = ref_logits;
        /* On threads, the reference's head (one thread's float64 pass) runs beside the ranks'
         * (the shard set's ranks are all open by now: the two only read); its failure, were
         * both to fail, is the one reported, as when it ran first. */
        tps_error_clear(&job.err);
        if (st == TPS_OK && !multi) async = pthread_create(&job.tid, NULL, head_thread, &job) == 0;
        if (st == TPS_OK && !async) st = ref_head_checked(&job, err);
    }
    if (multi) TPS_CHECK(tps_vbackend_agree(be, st, err));
    TPS_CHECK(st);
    tps_vstage(o, "lm head: ranks");
    tps_dtype dt;
    int64_t culprit;
    char detail[sizeof w->detail];
    st = run_step(b, T, ranks, o, w, STEP_HEAD, w->chain.x, nv, &gathered, &dt, &culprit, detail, sizeof detail,
                  async ? &job.rank_err : err);
    if (async) {
        pthread_join(job.tid, NULL);
        if (job.st != TPS_OK) {
            *err = job.err;
            st = job.st;
        } else if (st != TPS_OK) {
            *err = job.rank_err;
        }
    }
    TPS_CHECK(st);
    if (!root) goto cleanup;
    tps_vstage(o, "comparing logits");
    if (tps_verify_rtol(dt) > tps_verify_rtol(w->chain.dtype)) w->chain.dtype = dt;
    /* Gathered in rank order, [tokens, Vp]: the padding columns (the last Vp - V) dropped. */
    for (size_t t = 0; t < n; t++) memcpy(logits + t * V, gathered + t * Vp, V * sizeof *logits);
    tps_verify_stage *ls = &w->logits_cmp;
    tolerances(o, w->chain.dtype, ref_logits, n * V, ls);
    tps_vcmp c = tps_vcompare(logits, ref_logits, n * V, ls->rtol, ls->atol);
    ls->max_abs = c.max_abs;
    ls->rel = c.rel;
    ls->pass = c.pass && culprit < 0;
    for (size_t t = 0; t < n; t++) {
        size_t a = argmax_f32(logits + t * V, V), r = argmax_f64(ref_logits + t * V, V);
        if (a == r) {
            w->top1_agree++;
        } else if (ref_logits[t * V + r] - ref_logits[t * V + a] <= ls->atol) {
            w->top1_agree++;
            w->top1_ties++;
        }
    }
    if (culprit >= 0) {
        fail_with(w, "logits", culprit, "%s", detail);
    } else if (!c.pass) {
        /* A logit column is one rank's rows of the head: the lowest rank with a column that
         * differs is blamed. */
        uint64_t rows = w->padded_vocab / T;
        for (size_t j = 0; j < V && w->pass; j++)
            for (size_t t = 0; t < n; t++) {
                double e = fabs((double)logits[t * V + j] - ref_logits[t * V + j]);
                if (e <= ls->atol + ls->rtol * fabs(ref_logits[t * V + j])) continue;
                uint64_t r = j / rows;
                fail_with(w, "logits", (int64_t)r,
                          "the logit of vocabulary row %zu (rank %llu's rows %llu-%llu of %s) differs at position %zu "
                          "(%.6g, reference %.6g): its slice holds other rows, or the hidden state before it differs",
                          j, (unsigned long long)r, (unsigned long long)(r * rows),
                          (unsigned long long)((r + 1) * rows - 1), head_name(b, w->tied), t,
                          (double)logits[t * V + j], ref_logits[t * V + j]);
                break;
            }
    } else if (w->top1_agree != n) {
        fail_with(w, "top-1", -1, "%llu of %zu positions pick another top-1 token than the reference",
                  (unsigned long long)(n - w->top1_agree), n);
    }
    if (o->keep_reference) {
        w->ref_logits = ref_logits;
        w->logits = logits;
        ref_logits = NULL;
        logits = NULL;
    }
cleanup:
    free(gathered);
    free(logits);
    free(ref_logits);
    w->seconds += tps_vnow() - t0;
    return st;
}
