/* Shared between the verification modules: one layer's tensors, the resolved sizes, the
 * maps that say which heads / intermediate columns a party computes, and the layer math,
 * generated twice from verify/ops_tmpl.h (float64 for the reference, float32 for ranks). */
#ifndef TPS_VERIFY_INTERNAL_H
#define TPS_VERIFY_INTERNAL_H

#include "verify.h"

/* inter is the width of the layer's MLP: one routed expert's in a MoE layer (experts > 0),
 * else the dense MLP's; sh_inter the shared expert's (0: none). */
typedef struct vdims {
    uint64_t hidden, heads, kv, hd, inter, experts, top_k;
    uint64_t rot; /* rotating dimensions of a head (even), 0 without RoPE */
    uint64_t window; /* this layer's sliding window (tps_block.sliding_window_pattern); 0: none */
    uint64_t sh_inter;
    /* Multi-head latent attention (verify/mla.c): per-head widths and the latent ranks
     * (qlora 0: a plain q_proj). */
    uint64_t nope, rope_d, vhd, qlora, kvlora;
    bool local;      /* a local layer (tps_block_layer_is_local): Gemma 3 rotates it by its own base */
} vdims;

/* One layer's tensors as one party holds them; ex[e * TPS_ROLE_COUNT + role] for a routed
 * expert's MLP roles, sh[role] for the shared expert's.  A dense layer of a MoE model holds
 * its MLP in t, nex 0. */
typedef struct vlayer {
    tps_vt t[TPS_ROLE_COUNT];
    tps_vt *ex;
    uint64_t nex;
    tps_vt sh[TPS_ROLE_COUNT];
} vlayer;

void tps_vlayer_release(vlayer *l);

/* Whether the layer math converts this dtype (BF16, F16, F32, F64, F8_E4M3, F8_E5M2). */
bool tps_vdtype_supported(tps_dtype dt);

/* Tells o's on_stage, when there, that the pass enters stage `what`. */
void tps_vstage(const tps_verify_opts *o, const char *what);

/* Checks every tensor of layer `layer` (nex experts) that the shard set ss holds against its
 * manifest (verify.h, tps_verify_opts.shards) and for non-finite values, adding to *tensors
 * and *bytes.  source: the reference's own source (--source), whose copy a non-finite
 * tensor's message describes; NULL: the reference was loaded from ss through those checked
 * reads, which did the checks: only counts. */
tps_status tps_vlayer_check(const tps_block *b, uint64_t layer, uint64_t nex, struct tps_shardset *ss,
                            const tps_vsource *source, uint64_t *tensors, uint64_t *bytes, tps_error *err);

/* TPS_EINVALID naming the first tensor of l that holds a non-finite value (whose: where l
 * was loaded from, for the message). */
tps_status tps_vlayer_require_finite(const vlayer *l, const char *whose, tps_error *err);

/* Whether src is tps_vsource_shardset(ss). */
bool tps_vsource_is_shardset(const tps_vsource *src, const struct tps_shardset *ss);

/* Loads every role of layer `layer` from src. */
tps_status tps_vlayer_load(const tps_block *b, uint64_t layer, uint64_t experts, const tps_vsource *src, vlayer *out,
                       tps_error *err);

static inline const tps_vt *vrole(const vlayer *l, tps_block_role r, uint64_t expert, bool per_expert)
{
    const tps_vt *t = per_expert ? &l->ex[expert * TPS_ROLE_COUNT + r] : &l->t[r];
    return t->data ? t : NULL;
}

/* Role r of a role table (a vlayer's t, sh, or one expert's row of ex); NULL when absent. */
static inline const tps_vt *vget(const tps_vt *rt, tps_block_role r)
{
    return rt[r].data ? &rt[r] : NULL;
}

/* What the TP convention gives rank r of T (module comment of verify.h). */
typedef struct vshare {
    uint64_t q_first, q_n;   /* q heads */
    uint64_t kv_first, kv_n; /* KV heads */
    uint64_t i_first, i_n;   /* intermediate columns (of every expert) */
    uint64_t s_first, s_n;   /* the shared expert's intermediate columns */
} vshare;

void tps_vshare_of(const vdims *d, uint64_t T, uint64_t r, vshare *out);

/* Which heads an attention pass computes from the q/k/v (or fused) tensors it holds:
 * hn q heads, global indices from q_first; the KV heads held are global
 * [kv_first, kv_first + kv_n).  In the held tensors' output dimension, q head h starts at
 * q_off + h * stride, KV head j (local) at k_off / v_off + j * stride; o_proj's input
 * columns for q head h start at o_off + h * hd. */
typedef struct vqk_reduce vqk_reduce;
typedef struct vattn_map {
    uint64_t hn, q_first, kv_first, kv_n;
    uint64_t q_off, k_off, v_off, stride, o_off;
    const vqk_reduce *qk; /* a whole-projection q/k norm's collective (verify/qk_norm.c); NULL: all heads held */
    /* A grouped fused qkv holding several groups (Falcon-40B, qkv_grouped): q heads come in
     * runs of q_run, one run per group every q_gstride rows, the map's first head at place
     * q_phase of its run (q head h at q_off + ((q_phase + h) / q_run) * q_gstride +
     * ((q_phase + h) % q_run) * stride), and KV head j at k_off / v_off + j * kv_stride.
     * q_run 0: q head h at q_off + h * stride, KV head j at k_off / v_off + j * stride. */
    uint64_t q_run, q_phase, q_gstride, kv_stride;
    /* Not NULL: q, k and v rows are read from these activations (REAL of the precision the
     * map is passed to; [n, act_ld], the offsets above index a row) instead of projected
     * (verify/qkv_chunks.c: Megatron's all-gathered qkv). */
    const void *act;
    size_t act_ld;
} vattn_map;

/* Intermediate columns [i_first, i_first + i_n) of the held MLP tensors; a fused
 * [gate; up] holds up from up_off.  sh: the same for the shared expert's tensors. */
typedef struct vmlp_map {
    uint64_t i_first, i_n, up_off;
    uint64_t sh_first, sh_n, sh_up_off;
} vmlp_map;

/* The maps for the heads of a share, in tensors of the full model (global) or in the
 * slices the share's rank holds (local). */
void tps_vattn_map_global(const tps_block *b, const vdims *d, const vshare *s, vattn_map *m);
void tps_vattn_map_local(const tps_block *b, const vdims *d, const vshare *s, vattn_map *m);
void tps_vmlp_map_global(const vdims *d, const vshare *s, vmlp_map *m);
void tps_vmlp_map_local(const vdims *d, const vshare *s, vmlp_map *m);

/* The shape the held tensor of `role` must have for a share (the whole model: T = 1).
 * Returns the number of dimensions (at most 3), 0 when the role has no fixed shape. */
int tps_vexpected_shape(const tps_block *b, const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape);

/* Checks every present tensor of l against tps_vexpected_shape; on a difference, writes a
 * message naming the tensor, both shapes and the share into msg and returns false.
 * mlp selects the MLP-side roles, else the attention-side ones. */
bool tps_vcheck_shapes(const tps_block *b, const vdims *d, const vshare *s, const vlayer *l, bool mlp, char *msg,
                   size_t msgsize);

/* Multi-head latent attention (verify/mla.c): the attention sizes of layer l into d (heads,
 * kv = heads, hd = q head width, rot and the MLA fields), and the shape of an attention role
 * (the tps_vexpected_shape contract). */
tps_status tps_vmla_resolve_dims(const tps_block *b, uint64_t layer, const vlayer *l, vdims *d, tps_error *err);
int tps_vmla_expected_shape(const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape);
/* Whether an MLA q-path role may be absent (a model has q_proj or q_a/q_b, not both). */
bool tps_vmla_role_optional(const tps_block *b, tps_block_role r);

/* Which roles feed the MLP stage (the rest feed attention). */
bool tps_vrole_is_mlp(tps_block_role r);

/* Layer math, one copy per precision (suffix _f64, _f32).  Inputs are [n, hidden] row
 * major; outputs [n, hidden].  add_bias adds the row-parallel output bias (o / down),
 * which a rank adds only after the all-reduce. */
#define VOPS_DECLARE(REAL, SFX)                                                                         \
    void tps_vnorm_##SFX(const tps_block *b, const vdims *d, const tps_vt *w, const tps_vt *bias, size_t n,  \
                     const REAL *x, REAL *out);                                                         \
    tps_status tps_vattn_##SFX(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m,      \
                           size_t n, const REAL *xn, bool add_bias, REAL *out, tps_error *err);         \
    tps_status tps_vmlp_##SFX(const tps_block *b, const vdims *d, const vlayer *l, const vmlp_map *m,        \
                          size_t n, const REAL *xn, bool add_bias, REAL *out, tps_error *err);          \
    /* The MLP's row-parallel biases, added once after the all-reduce: down_proj's, and         \
     * GPT-OSS's expert down biases weighted by the routing of xn (the MLP's input). */          \
    tps_status tps_vmlp_out_bias_##SFX(const tps_block *b, const vdims *d, const vlayer *l, size_t n,   \
                                       const REAL *xn, REAL *out, tps_error *err);               \
    void tps_vadd_vec_##SFX(const tps_vt *v, size_t n, size_t dim, REAL *y);                               \
    /* Rotates heads in place: x[t, h * hd ..] for h < nh at position t (row stride ldx). */            \
    void tps_vrope_##SFX(const tps_block *b, const vdims *d, size_t n, size_t nh, REAL *x, size_t ldx);   \
    /* Rows of w ([rows, hidden], holding the global rows from row0) for the token ids:      \
     * out[t] = w[ids[t] - row0], or zeros for an id outside them (vocabulary parallel). */  \
    void tps_vembed_##SFX(const tps_vt *w, uint64_t row0, size_t n, const uint64_t *ids, REAL *out);     \
    /* y[t, j] (row stride ldy) = x[t] . w[j] for each row j of w ([rows, hidden]). */                \
    tps_status tps_vlogits_##SFX(const tps_vt *w, size_t n, const REAL *x, REAL *y, size_t ldy, tps_error *err);

VOPS_DECLARE(double, f64)
VOPS_DECLARE(float, f32)

/* The plain loops behind every linear when tpshard is built without a BLAS (make config;
 * HAVE_BLAS=0), kept callable so that a test compares them with the BLAS path:
 * y[t, o - o0] (stride ldy) = sum over i in [i0, i1) of x[t, i - i0] (stride ldx) * W(o, i),
 * W(o, i) = w[o, i] (a Conv1D: w[i, o]). */
tps_status tps_vlinear_loop_f64(const tps_vt *w, bool conv1d, size_t n, const double *x, size_t ldx, uint64_t i0,
                                uint64_t i1, uint64_t o0, uint64_t o1, double *y, size_t ldy, tps_error *err);
/* Whether the linears go through a BLAS (tpshard built with one: make config). */
bool tps_verify_blas(void);
tps_status tps_vlinear_loop_f32(const tps_vt *w, bool conv1d, size_t n, const float *x, size_t ldx, uint64_t i0,
                                uint64_t i1, uint64_t o0, uint64_t o1, float *y, size_t ldy, tps_error *err);

/* y[t, o - o0] (row stride ldy) = x[t] . w[o] + bias[o] for the held rows o in [o0, o1) of
 * w ([rows, in], a Conv1D [in, rows]); bias NULL: none. */
tps_status tps_vlinear_rows_f64(const tps_vt *w, const tps_vt *bias, bool conv1d, size_t n, const double *x,
                                size_t ldx, uint64_t in, uint64_t o0, uint64_t o1, double *y, size_t ldy,
                                tps_error *err);
tps_status tps_vlinear_rows_f32(const tps_vt *w, const tps_vt *bias, bool conv1d, size_t n, const float *x,
                                size_t ldx, uint64_t in, uint64_t o0, uint64_t o1, float *y, size_t ldy,
                                tps_error *err);

/* Megatron's qkv row chunks (tps_block.qkv_row_chunks, verify/qkv_chunks.c): whether the
 * ranks of a T-rank pass hold plain row chunks of a query group's block. */
static inline bool tps_vqkv_chunked(const tps_block *b, const vdims *d, uint64_t T)
{
    return b->qkv_row_chunks && d->kv < T;
}
/* Floats of the all-gathered qkv activations of n tokens: n (heads + 2 kv) head_dim. */
size_t tps_vqkv_gather_len(const vdims *d, size_t n);
/* The rank's attention partial sum (tps_vattn_f32's, o_proj's held columns): its chunk of
 * the group's qkv projected, all-gathered into buf (tps_vqkv_gather_len floats) through
 * comm, its q heads and the group's k and v taken from the group's rows.  xn NULL: the rank
 * only joins the collective, with zeros (it computes nothing this stage); every rank
 * enters it exactly once per attention stage, whatever happened. */
tps_status tps_vattn_chunked_f32(const tps_block *b, const vdims *d, const vlayer *l, const vqk_reduce *qk,
                                 tps_vcomm *comm, size_t n, const float *xn, float *buf, float *out,
                                 tps_error *err);

/* q_norm / k_norm (lib/layout/block.h, tps_qk_norm_kind), applied in place to the projected q
 * [n, m->hn heads] (row stride qld) and k [n, m->kv_n heads] (stride kld) before RoPE.
 * Over the whole projection a pass that holds only some heads gets the per-token sums of
 * squares of the others through m->qk: fn receives ss[t] (q) and ss[n + t] (k) summed over
 * the heads the pass computed and leaves there the sums over the whole projections. */
struct vqk_reduce {
    tps_status (*fn)(void *ctx, double *ss, size_t n, tps_error *err);
    void *ctx;
};

/* Whether the block's q/k norm spans the whole projection (a collective under TP). */
static inline bool tps_vqk_whole(const tps_block *b)
{
    return b->qk_norm == TPS_QK_NORM_WHOLE && (b->role[TPS_ROLE_Q_NORM_W] || b->role[TPS_ROLE_K_NORM_W]);
}

tps_status tps_vqk_norm_f64(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m, size_t n,
                            double *q, size_t qld, double *k, size_t kld, tps_error *err);
tps_status tps_vqk_norm_f32(const tps_block *b, const vdims *d, const vlayer *l, const vattn_map *m, size_t n,
                            float *q, size_t qld, float *k, size_t kld, tps_error *err);

/* Reference outputs for one party's input: attention block output a = attn(norm1 x) and
 * MLP block output m = mlp(norm2 h), with h = x + a (sequential) or h = x (parallel
 * residual).  share NULL: the whole layer with output biases; else the share's partial
 * sums without them (attn input x, MLP input h as given). */
tps_status tps_vref_attn(const tps_block *b, const vdims *d, const vlayer *l, const vshare *share, size_t n,
                     const double *x, double *out, tps_error *err);
tps_status tps_vref_mlp(const tps_block *b, const vdims *d, const vlayer *l, const vshare *share, size_t n,
                    const double *h, double *out, tps_error *err);

/* One rank's results of the sharded pass (float32). */
typedef struct vrank_out {
    float *partial[TPS_VSTAGE_COUNT]; /* the rank's own sum before the all-reduce */
    float *out[TPS_VSTAGE_COUNT];     /* the block output as the rank holds it afterwards */
    bool bad[TPS_VSTAGE_COUNT];       /* its slices do not have the convention's shapes */
    char why[TPS_VSTAGE_COUNT][512];
    tps_dtype min_dtype;
} vrank_out;

void tps_vrank_out_release(vrank_out *o);

/* Allocates o's buffers for n * hidden floats (and sets min_dtype to F64, the widest). */
tps_status tps_vrank_out_alloc(vrank_out *o, size_t nh, tps_error *err);

/* Lowers o->min_dtype to the lowest-precision weight dtype l holds. */
void tps_vrank_note_dtypes(vrank_out *o, const vlayer *l);

/* One rank of the sharded pass in the calling thread, joined to the others by comm (the
 * MPI backend): loads its slices from src, then both stages, each ending in an
 * all-reduce that every rank enters whatever happened, like tps_vrank_run's threads.  out
 * must be allocated (tps_vrank_out_alloc).  When another rank could not load its slices,
 * every rank stops: this one returns TPS_EIO with *elsewhere set and err untouched. */
tps_status tps_vrank_one(const tps_block *b, const vdims *d, uint64_t layer, const tps_vsource *src, size_t n,
                     const float *x, tps_vcomm *comm, vrank_out *out, bool *elsewhere, const tps_verify_opts *vo,
                     tps_error *err);

/* The sharded pass on T threads.  x is [n, hidden] (float32 values).  Every rank always
 * joins every collective, contributing zeros from slices it cannot use, so a bad rank is
 * reported rather than hanging the others.  dev: each rank's matrices go to its device and
 * its collectives through the device's all-reduce (verify/device.h); NULL: the host
 * computes and the threads sum. */
struct tps_vdev;
tps_status tps_vrank_run(const tps_block *b, const vdims *d, uint64_t layer, uint64_t T, const tps_vsource *ranks,
                         size_t n, const float *x, struct tps_vdev *dev, vrank_out *outs, const tps_verify_opts *vo,
                         tps_error *err);

typedef struct tps_vcmp {
    double max_abs, rel;
    bool pass;
} tps_vcmp;

/* allclose in torch's sense (|a - b| <= atol + rtol |b| everywhere) plus the norm-wise
 * relative error. */
tps_vcmp tps_vcompare(const float *a, const double *b, size_t n, double rtol, double atol);

/* One rank's part of a collective step outside the layers (the whole-model pass): called
 * on every rank with its comm; it must enter the same collectives on every rank whatever
 * happened, as the layer's ranks do. */
typedef tps_status (*tps_vrank_fn)(void *arg, tps_vcomm *comm, tps_error *err);

/* fn on T threads joined by the thread all-reduce (buffers of up to cap floats), or by the
 * devices' (dev not NULL: each comm carries its rank's device). */
tps_status tps_vrank_each_thread(uint64_t T, size_t cap, struct tps_vdev *dev, tps_vrank_fn fn, void *arg,
                                 tps_error *err);

/* Checks tensor `name` of the shard set against its manifest (tps_vlayer_check, one tensor);
 * absent from the set: nothing counted. */
tps_status tps_vtensor_check(struct tps_shardset *ss, const char *name, const tps_vsource *source,
                             uint64_t *tensors, uint64_t *bytes, tps_error *err);

/* Seconds on the monotonic clock (the reports' times). */
double tps_vnow(void);

/* Appends printf-style text to the NUL-terminated buf of size bytes, truncating (the
 * reports' detail strings). */
void tps_vappendf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed, portable stream. */
static inline uint64_t tps_vsplitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The norms around a stage (verify/norms_tmpl.h; stage TPS_VSTAGE_ATTN or _MLP).  stage_norm:
 * the stage's input norm, or x unchanged where the layout names no pre-norm role (OLMo 2).
 * post_norm: the post-norm role's norm of the block output y, in place (nothing without
 * one); a rank applies it to its copy after the all-reduce and the row-parallel bias, so
 * the partial sums the driver compares stay those before it. */
#define VNORMS_DECLARE(REAL, SFX)                                                                                \
    void tps_vstage_norm_##SFX(const tps_block *b, const vdims *d, const vlayer *l, int stage, size_t n,           \
                               const REAL *x, REAL *out);                                                        \
    void tps_vpost_norm_##SFX(const tps_block *b, const vdims *d, const vlayer *l, int stage, size_t n, REAL *y);

VNORMS_DECLARE(double, f64)
VNORMS_DECLARE(float, f32)

/* ---- experts fused into whole-layer tensors (GPT-OSS; verify/fused_experts.c) ---- */

/* Whether role is one of the experts_* roles (lib/layout/block.h). */
bool tps_vrole_fused_experts(tps_block_role role);

/* The shape a share holds of a fused experts_* role (returns 3 or 2). */
int tps_vexperts_fused_shape(const vdims *d, const vshare *s, tps_block_role role, uint64_t *shape);

/* When l holds the fused experts_* tensors, fills its per-expert table l->ex (allocated by
 * tps_vlayer_load, l->nex experts) with each expert's gate_proj, up_proj [inter, hidden],
 * their biases, down_proj [hidden, inter] and its down bias, so the MoE math runs as for
 * per-expert checkpoints.  Tensors whose shapes do not fit together are left fused and the
 * table empty: the shape check (tps_vcheck_shapes) reports them. */
tps_status tps_vexperts_unfuse(vlayer *l, tps_error *err);

/* ---- quantized weights (verify/dequant.c) ---- */

/* When w is an FP8 weight with a scale beside it in src (NAME_scale_inv, NAME_scale),
 * replaces its data with the dequantized values in F32 (weight times its tensor, channel or
 * block scale; the block from b->fp8_block); otherwise leaves it as it is. */
tps_status tps_vdequant(const tps_block *b, const tps_vsource *src, tps_vt *w, tps_error *err);

/* ---- backends (verify/backend.c) ---- */

/* fn on the ranks this process runs: every rank on threads (cpu and cuda in one process;
 * the steps outside the layers run on the host), or this process's rank under MPI.  Every
 * process returns the same status. */
/* Under MPI: MPI_Allreduce of buf between the processes (sum); one process: nothing. */
tps_status tps_vbackend_allreduce(tps_vbackend *be, float *buf, size_t n, tps_error *err);

tps_status tps_vbackend_each(tps_vbackend *be, uint64_t T, size_t cap, tps_vrank_fn fn, void *arg, tps_error *err);

/* What a backend measured of one layer's pass (verify.h, tps_verify_result). */
typedef struct vstats {
    double upload_bytes, upload_seconds, layer_seconds;
} vstats;

/* Whether the pass spans several processes (MPI); be may be NULL (CPU threads). */
bool tps_vbackend_multi(const tps_vbackend *be);

/* This process's rank under MPI, else 0. */
uint64_t tps_vbackend_rank(const tps_vbackend *be);

/* The highest status of all processes (st itself in one process).  When it is another
 * process's failure, err says so; the agreement is recorded for tps_vbackend_finish. */
tps_status tps_vbackend_agree(tps_vbackend *be, tps_status st, tps_error *err);

/* Rank 0's n bytes of buf into every process's buf. */
tps_status tps_vbackend_bcast(tps_vbackend *be, void *buf, size_t n, tps_error *err);

/* The sharded pass of one layer: runs the ranks this process holds, and leaves every
 * rank's results in outs[0..T) on rank 0 (allocated there, released by the caller with
 * tps_vrank_out_release; elsewhere outs is only written for the process's own rank).  Every
 * process enters it and returns the same status. */
tps_status tps_vbackend_run(tps_vbackend *be, const tps_block *b, const vdims *d, uint64_t layer, uint64_t T,
                        const tps_vsource *ranks, size_t n, const float *x, vrank_out *outs, vstats *stats,
                        const tps_verify_opts *vo, tps_error *err);

#endif
