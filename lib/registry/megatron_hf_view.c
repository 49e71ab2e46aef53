#include "megatron_hf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "../base/buf.h"
#include "../base/checked.h"
#include "../base/json.h"
#include "../layout/presets.h"
#include "../base/yaml_query.h"
#include "../targets/target.h"
#include "megatron_args.h"
#include "megatron_hf_int.h"

/* ---- row views ---- */


tps_status tps_mhf_rview_read(const rview *v, tps_global_read_fn read, void *ctx, uint64_t off, void *buf, size_t len,
                             tps_error *err)
{
    char *out = buf;
    uint64_t pos = 0;
    for (size_t k = 0; k < v->n && len; k++) {
        uint64_t bytes = v->p[k].nrows * v->row_bytes;
        if (off < pos + bytes) {
            uint64_t take = pos + bytes - off;
            if (take > len) take = len;
            TRY(read(ctx, v->p[k].src, v->p[k].row * v->row_bytes + (off - pos), out, (size_t)take, err));
            out += take;
            off += take;
            len -= (size_t)take;
        }
        pos += bytes;
    }
    if (len) return tps_fail(err, TPS_EINVALID, "internal: a read past the end of a Megatron view");
    return TPS_OK;
}

void tps_mhf_rviews_free(rview *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i].p);
    free(v);
}

/* One entry's pieces: the members m[0..K) (rows r[k], G groups) into the fused tensor, or,
 * with reverse, member k's pieces out of the fused tensor src. */
bool tps_mhf_build_pieces(rview *v, const size_t *m, const uint64_t *r, size_t K, uint64_t G, size_t k_rev, size_t src,
                         bool reverse)
{
    size_t n = reverse ? (size_t)G : (size_t)G * K;
    if (!(v->p = calloc(n, sizeof *v->p))) return false;
    uint64_t block = 0, before = 0;
    for (size_t k = 0; k < K; k++) {
        if (k < k_rev) before += r[k] / G;
        block += r[k] / G;
    }
    for (uint64_t g = 0; g < G; g++) {
        if (reverse) {
            v->p[v->n++] = (rpiece){src, g * block + before, r[k_rev] / G};
        } else {
            for (size_t k = 0; k < K; k++) v->p[v->n++] = (rpiece){m[k], g * (r[k] / G), r[k] / G};
        }
    }
    return true;
}

/* Rows and groups of entry e over l's sizes, checked: every member divides into G blocks. */
tps_status tps_mhf_entry_rows(const tps_megatron_hf *h, const mentry *e, const tps_layout *l, uint64_t *r, uint64_t *G,
                             tps_error *err)
{
    char what[512];
    snprintf(what, sizeof what, "%s: targets: megatron: line %zu", h->source, e->line);
    *G = 1;
    if (e->groups) TRY(tps_layout_eval(l, e->groups, what, G, err));
    if (*G == 0) return tps_fail(err, TPS_EINVALID, "%s: groups is 0", what);
    for (size_t k = 0; k < e->nrows; k++) {
        TRY(tps_layout_eval(l, e->rows[k], what, &r[k], err));
        if (r[k] % *G)
            return tps_fail(err, TPS_EINVALID, "%s: %s = %llu rows of %s do not make %llu equal groups", what,
                            e->rows[k], (unsigned long long)r[k], e->from[k], (unsigned long long)*G);
    }
    return TPS_OK;
}

/* ---- split: the Hugging Face tensors under Megatron names ---- */

typedef struct vstate {
    const tps_index *src;
    rview *v;
    size_t n;
} vstate;

static tps_status index_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_index *ix = ctx;
    return tps_tensor_read(ix, &ix->tensors[i], off, buf, len, err);
}

static tps_status view_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len,
                            tps_error *err)
{
    const vstate *s = ix->state;
    return tps_mhf_rview_read(t->reader_data, index_read, (void *)s->src, off, buf, len, err);
}

static void view_release(void *state)
{
    vstate *s = state;
    if (!s) return;
    tps_mhf_rviews_free(s->v, s->n);
    free(s);
}

static const tps_reader_ops view_ops = {view_read, view_release};

/* The entry and member that tensor name belongs to (captures into *c), or false. */
static bool find_member(const tps_megatron_hf *h, const char *name, size_t *ei, size_t *k, tps_target_caps *c)
{
    for (size_t i = 0; i < h->n; i++)
        for (size_t j = 0; j < h->e[i].nfrom; j++) {
            tps_target_caps cc = {0};
            if (tps_target_name_match(h->e[i].from[j], name, &cc)) {
                *ei = i;
                *k = j;
                *c = cc;
                return true;
            }
        }
    return false;
}

tps_status tps_megatron_hf_view(const tps_megatron_hf *h, tps_layout *l, const tps_index *ix, tps_index **out,
                                tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK;
    tps_index *v = NULL;
    bool *used = calloc(ix->ntensors + 1, sizeof *used);
    vstate *s = calloc(1, sizeof *s);
    if (!used || !s || !(s->v = calloc(ix->ntensors + 1, sizeof *s->v))) {
        st = tps_fail_oom(err, "mapping to Megatron names");
        goto cleanup;
    }
    s->src = ix;
    TPS_CHECK(tps_index_new(ix->path, "megatron-view", &v, err));
    v->ops = &view_ops;
    v->state = s;
    for (size_t f = 0; f < ix->nfiles; f++) {
        uint32_t id;
        TPS_CHECK(tps_index_add_file(v, ix->files[f].path, &id, err));
    }
    for (size_t i = 0; i < ix->ntensors; i++) {
        const tps_tensor *t = &ix->tensors[i];
        if (used[i] || tps_layout_skip_match(l, t->name) != SIZE_MAX) continue;
        size_t ei, k0;
        tps_target_caps c;
        if (!find_member(h, t->name, &ei, &k0, &c)) {
            st = tps_fail(err, TPS_EINVALID,
                          "%s: tensor '%s' has no Megatron-Core name in the megatron mapping of %s (Megatron "
                          "GPT models have no such weight)",
                          ix->path, t->name, h->source);
            goto cleanup;
        }
        const mentry *e = &h->e[ei];
        size_t m[MAX_FROM] = {0};
        uint64_t r[MAX_FROM] = {0}, G = 1;
        char into[NAME_LEN], name[NAME_LEN];
        int w = tps_target_name_wildcards(e->into);
        if (!tps_target_name_subst(e->into, &c, w, into, sizeof into)) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s': its Megatron name is too long", ix->path, t->name);
            goto cleanup;
        }
        for (size_t k = 0; k < e->nfrom; k++) {
            const tps_tensor *mt = NULL;
            if (tps_target_name_subst(e->from[k], &c, w, name, sizeof name)) mt = tps_index_find(ix, name);
            if (!mt) {
                st = tps_fail(err, TPS_EINVALID, "%s: has '%s' but not '%s'; %s is made of both", ix->path, t->name,
                              name, into);
                goto cleanup;
            }
            m[k] = (size_t)(mt - ix->tensors);
            if (used[m[k]]) {
                st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' would go into two Megatron tensors", ix->path, name);
                goto cleanup;
            }
            used[m[k]] = true;
        }
        rview *rv = &s->v[s->n];
        uint64_t shape[TPS_MAX_DIMS];
        const tps_tensor *t0 = &ix->tensors[m[0]];
        memcpy(shape, t0->shape, sizeof shape);
        if (e->nfrom == 1) {
            rv->row_bytes = t0->nbytes;
            size_t zero = m[0];
            uint64_t one = 1;
            if (!tps_mhf_build_pieces(rv, &zero, &one, 1, 1, 0, 0, false)) {
                st = tps_fail_oom(err, "mapping to Megatron names");
                goto cleanup;
            }
        } else {
            TPS_CHECK(tps_mhf_entry_rows(h, e, l, r, &G, err));
            shape[0] = 0;
            for (size_t k = 0; k < e->nfrom; k++) {
                const tps_tensor *mt = &ix->tensors[m[k]];
                bool same = mt->ndim == t0->ndim && mt->ndim >= 1 && mt->dtype == t0->dtype;
                for (int d = 1; same && d < mt->ndim; d++) same = mt->shape[d] == t0->shape[d];
                if (!same || mt->shape[0] != r[k]) {
                    char have[128], want[128];
                    tps_shape_str(mt->shape, mt->ndim, have, sizeof have);
                    tps_shape_str(t0->shape, t0->ndim, want, sizeof want);
                    st = tps_fail(err, TPS_EINVALID,
                                  "%s: '%s' (%s %s) does not fit into %s beside '%s' (%s %s): it needs %s = %llu "
                                  "rows, the dtype and the other dimensions of the first",
                                  ix->path, mt->name, tps_dtype_name(mt->dtype), have, into, t0->name,
                                  tps_dtype_name(t0->dtype), want, e->rows[k], (unsigned long long)r[k]);
                    goto cleanup;
                }
                shape[0] += r[k];
            }
            rv->row_bytes = t0->nbytes / t0->shape[0];
            if (!tps_mhf_build_pieces(rv, m, r, e->nfrom, G, 0, 0, false)) {
                st = tps_fail_oom(err, "mapping to Megatron names");
                goto cleanup;
            }
        }
        s->n++;
        TPS_CHECK(tps_index_add_tensor(v, into, strlen(into), t0->dtype, t0->ndim, shape, 0, 0, rv, err));
    }
    *out = v;
    v = NULL;
    s = NULL;
cleanup:
    if (v) {
        v->state = NULL; /* s is freed below */
        tps_index_free(v);
    }
    view_release(s);
    free(used);
    return st;
}


/* ---- merge --target hf: the Megatron tensors under Hugging Face names ---- */

struct tps_megatron_unview {
    rview *v;
    size_t n;
    tps_global_read_fn read;
    void *ctx;
};

void tps_megatron_unview_free(tps_megatron_unview *rd)
{
    if (!rd) return;
    tps_mhf_rviews_free(rd->v, rd->n);
    free(rd);
}

tps_status tps_megatron_hf_unview_read(void *rd, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_megatron_unview *u = rd;
    return tps_mhf_rview_read(&u->v[i], u->read, u->ctx, off, buf, len, err);
}

tps_status tps_megatron_hf_unview(const tps_megatron_hf *h, tps_layout *l, const tps_manifest *src,
                                  tps_global_read_fn read, void *ctx, tps_manifest **out, tps_megatron_unview **rd,
                                  tps_error *err)
{
    *out = NULL;
    *rd = NULL;
    tps_status st = TPS_OK;
    size_t cap = src->ntensors * MAX_FROM + 1;
    tps_manifest *m = calloc(1, sizeof *m);
    tps_megatron_unview *u = calloc(1, sizeof *u);
    if (!m || !u || !(m->tensors = calloc(cap, sizeof *m->tensors)) || !(u->v = calloc(cap, sizeof *u->v))) {
        st = tps_fail_oom(err, "mapping to Hugging Face names");
        goto cleanup;
    }
    u->read = read;
    u->ctx = ctx;
    m->version = TPS_MANIFEST_VERSION;
    m->tp = 1;
    for (size_t i = 0; i < src->ntensors; i++) {
        const tps_manifest_tensor *t = &src->tensors[i];
        const mentry *e = NULL;
        tps_target_caps c = {0};
        for (size_t j = 0; j < h->n && !e; j++) {
            tps_target_caps cc = {0};
            if (tps_target_name_match(h->e[j].into, t->name, &cc)) {
                e = &h->e[j];
                c = cc;
            }
        }
        if (!e) {
            st = tps_fail(err, TPS_EINVALID, "Megatron tensor '%s' has no Hugging Face name in the megatron mapping of %s",
                          t->name, h->source);
            goto cleanup;
        }
        uint64_t r[MAX_FROM] = {0}, G = 1, sum = 0;
        if (e->nfrom > 1) {
            TPS_CHECK(tps_mhf_entry_rows(h, e, l, r, &G, err));
            for (size_t k = 0; k < e->nfrom; k++) sum += r[k];
            if (t->ndim < 1 || t->shape[0] != sum) {
                char have[128];
                tps_shape_str(t->shape, t->ndim, have, sizeof have);
                st = tps_fail(err, TPS_EINVALID, "Megatron tensor '%s' %s: the mapping (%s) needs %llu rows", t->name,
                              have, h->source, (unsigned long long)sum);
                goto cleanup;
            }
        }
        int w = tps_target_name_wildcards(e->into);
        for (size_t k = 0; k < e->nfrom; k++) {
            char name[NAME_LEN];
            if (!tps_target_name_subst(e->from[k], &c, w, name, sizeof name)) {
                st = tps_fail(err, TPS_EINVALID, "Megatron tensor '%s': its Hugging Face name is too long", t->name);
                goto cleanup;
            }
            tps_manifest_tensor *o = &m->tensors[m->ntensors];
            rview *v = &u->v[u->n];
            *o = *t;
            TPS_CHECK(tps_manifest_set_part(m, o, &(tps_partition){.replicated = true}, err));
            o->rule = NULL;
            o->target_name = NULL;
            o->target_stack = 0;
            o->crc = 0;
            if (!(o->name = strdup(name))) {
                st = tps_fail_oom(err, "mapping to Hugging Face names");
                goto cleanup;
            }
            m->ntensors++;
            u->n++;
            bool ok;
            if (e->nfrom == 1) {
                v->row_bytes = t->nbytes;
                uint64_t one = 1;
                ok = tps_mhf_build_pieces(v, &i, &one, 1, 1, 0, i, true);
            } else {
                v->row_bytes = t->nbytes / t->shape[0];
                o->shape[0] = r[k];
                o->nbytes = r[k] * v->row_bytes;
                ok = tps_mhf_build_pieces(v, NULL, r, e->nfrom, G, k, i, true);
            }
            if (!ok) {
                st = tps_fail_oom(err, "mapping to Hugging Face names");
                goto cleanup;
            }
        }
    }
    *out = m;
    *rd = u;
    m = NULL;
    u = NULL;
cleanup:
    tps_manifest_free(m);
    tps_megatron_unview_free(u);
    return st;
}
