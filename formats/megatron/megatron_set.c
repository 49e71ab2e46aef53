#include "megatron_set.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/base/buf.h"
#include "../../lib/base/json.h"
#include "../../lib/layout/layout.h"
#include "../../lib/registry/megatron_out.h"
#include "../../lib/set/plan.h"
#include "megatron_read.h"

/* The checkpoint stays open while any rank index reads a view through it. */
typedef struct view_ref {
    const tps_index *ix;
    const tps_tensor *t;
} view_ref;

typedef struct holder {
    tps_megatron_ckpt *c;
    size_t refs;
    view_ref *views; /* the reader_data of the rank indexes' views */
    size_t nviews;
} holder;

static tps_status view_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len,
                            tps_error *err)
{
    (void)ix;
    const view_ref *v = t->reader_data;
    return tps_tensor_read(v->ix, v->t, off, buf, len, err);
}

static void holder_release(void *state)
{
    holder *h = state;
    if (!h || --h->refs) return;
    tps_megatron_close(h->c);
    free(h->views);
    free(h);
}

static const tps_reader_ops view_ops = {view_read, holder_release};

void tps_megatron_source_free(tps_megatron_source *s)
{
    if (!s) return;
    free(s->layer_first);
    free(s->args_json);
    free(s->checkpoint_version_json);
    for (size_t i = 0; i < s->n_extra_state; i++) free(s->extra_state[i]);
    free(s->extra_state);
    free(s);
}

typedef struct opener {
    const char *path;
    tps_megatron_ckpt *c;
    holder *h;
    tps_megatron_model model;
    uint64_t *first; /* pp+1 */
    uint64_t vocab;  /* the global vocabulary rows */
    tps_layout *l;
    tps_index *src;
} opener;

static const tps_megatron_file *file_at(const opener *o, uint64_t r, uint64_t p)
{
    return &o->c->files[p * o->c->tp + r];
}

/* Not weights: RotaryEmbedding._load_from_state_dict pops an older checkpoint's inv_freq.
 * Nor, with tied embeddings, the last stage's output_layer.weight: Megatron's copy of the word
 * embeddings (all-reduced with them in training), which its loader drops; a writer at pp > 1
 * makes it again from the embeddings (lib/registry/megatron_out.h). */
static bool ignored(const opener *o, const char *n)
{
    size_t len = strlen(n), k = strlen("rotary_pos_emb.inv_freq");
    if (!o->model.untied && strcmp(n, "output_layer.weight") == 0) return true;
    return len >= k && strcmp(n + len - k, "rotary_pos_emb.inv_freq") == 0;
}

static bool vocab_name(const char *n)
{
    return strcmp(n, "embedding.word_embeddings.weight") == 0 || strcmp(n, "output_layer.weight") == 0;
}

/* Layers per stage: rank 0's local layer numbers. */
static tps_status stage_layers(opener *o, tps_error *err)
{
    uint64_t pp = o->c->pp;
    if (!(o->first = calloc(pp + 1, sizeof *o->first))) return tps_fail_oom(err, "reading a Megatron checkpoint");
    for (uint64_t p = 0; p < pp; p++) {
        const tps_index *ix = file_at(o, 0, p)->ix;
        uint64_t n = 0;
        for (size_t i = 0; i < ix->ntensors; i++) {
            const char *s = ix->tensors[i].name;
            if (strncmp(s, "decoder.layers.", 15)) continue;
            uint64_t v = strtoull(s + 15, NULL, 10);
            if (v + 1 > n) n = v + 1;
        }
        o->first[p + 1] = o->first[p] + n;
    }
    if (o->first[pp] != o->model.layers)
        return tps_fail(err, TPS_EINVALID, "%s: the stages hold %" PRIu64 " layers, args.num_layers says %" PRIu64,
                        o->path, o->first[pp], o->model.layers);
    return TPS_OK;
}

/* The global shape of rank 0's tensor x (global name g): the cut the layout gives it that
 * gives rank 0 x's shape. */
static tps_status global_shape(opener *o, const char *g, const tps_tensor *x, uint64_t *shape, tps_error *err)
{
    uint64_t T = o->c->tp;
    for (int d = -1; d < x->ndim; d++) {
        memcpy(shape, x->shape, sizeof(uint64_t) * (size_t)x->ndim);
        if (d >= 0) shape[d] = vocab_name(g) && d == 0 ? o->vocab : x->shape[d] * T;
        tps_partition p;
        size_t rule;
        tps_error e;
        tps_error_clear(&e);
        if (tps_layout_partition(o->l, g, x->dtype, x->ndim, shape, &p, &rule, &e)) continue;
        if (p.replicated != (d < 0) || (d >= 0 && p.dim != d)) continue;
        if (p.pad && !p.replicated) p.pad_multiple = x->shape[d] * T;
        if (tps_partition_check(&p, g, x->dtype, x->ndim, shape, T, &e)) continue;
        uint64_t rs[TPS_MAX_DIMS];
        tps_partition_rank_shape(&p, x->ndim, shape, T, 0, rs);
        if (!memcmp(rs, x->shape, sizeof(uint64_t) * (size_t)x->ndim)) return TPS_OK;
    }
    /* Say why: the layout's own refusal at the shape a plain cut would give. */
    memcpy(shape, x->shape, sizeof(uint64_t) * (size_t)x->ndim);
    tps_partition p;
    size_t rule;
    tps_status st = tps_layout_partition(o->l, g, x->dtype, x->ndim, shape, &p, &rule, err);
    if (st == TPS_OK && !p.replicated) {
        shape[p.dim] = vocab_name(g) && p.dim == 0 ? o->vocab : x->shape[p.dim] * T;
        st = tps_layout_partition(o->l, g, x->dtype, x->ndim, shape, &p, &rule, err);
        if (st == TPS_OK) st = tps_partition_check_rule(&p, g, x->dtype, x->ndim, shape, T,
                                                        tps_layout_rule_label(o->l, rule), err);
    }
    char have[256];
    tps_shape_str(x->shape, x->ndim, have, sizeof have);
    if (st) return st;
    return tps_fail(err, TPS_EINVALID, "%s: no cut of %s at tp %" PRIu64 " gives rank 0 tensor '%s' its shape %s (%s)",
                    o->path, "the megatron_gpt layout", T, g, have, file_at(o, 0, 0)->path);
}

static tps_status build_source(opener *o, tps_error *err)
{
    static const char tag = 0; /* never read: the bytes come from the rank files */
    char g[1024];
    tps_status st = tps_index_new(o->path, "megatron", &o->src, err);
    if (st) return st;
    for (uint64_t p = 0; p < o->c->pp; p++) {
        const tps_megatron_file *f = file_at(o, 0, p);
        for (size_t i = 0; i < f->ix->ntensors; i++) {
            const tps_tensor *x = &f->ix->tensors[i];
            if (ignored(o, x->name)) continue;
            if ((st = tps_megatron_global_name(x->name, o->first, o->c->pp, p, g, sizeof g, err))) {
                return tps_fail(err, TPS_EINVALID, "%s: %s", f->path, err->msg);
            }
            uint64_t shape[TPS_MAX_DIMS];
            if ((st = global_shape(o, g, x, shape, err))) return st;
            if ((st = tps_index_add_tensor(o->src, g, strlen(g), x->dtype, x->ndim, shape, 0, 0, &tag, err))) return st;
        }
    }
    return TPS_OK;
}

static tps_status oom(tps_error *err) { return tps_fail_oom(err, "reading a Megatron checkpoint"); }

/* Rank r's index under global names over its stage files. */
static tps_status rank_index(opener *o, const tps_manifest *m, uint64_t r, tps_index **out, tps_error *err)
{
    tps_index *ix = NULL;
    tps_status st = tps_index_new(o->path, o->c->dist ? "megatron-torch_dist" : "megatron", &ix, err);
    if (st) return st;
    char g[1024];
    for (uint64_t p = 0; st == TPS_OK && p < o->c->pp; p++) {
        const tps_megatron_file *f = file_at(o, r, p);
        /* The reader's files, each once (a rank file is one archive: one file). */
        uint32_t *fid = calloc(f->ix->nfiles + 1, sizeof *fid);
        if (!fid) {
            st = oom(err);
            break;
        }
        for (size_t k = 0; st == TPS_OK && k < f->ix->nfiles; k++)
            st = tps_index_add_file(ix, f->ix->files[k].path, &fid[k], err);
        for (size_t i = 0; st == TPS_OK && i < f->ix->ntensors; i++) {
            const tps_tensor *x = &f->ix->tensors[i];
            if ((st = tps_megatron_global_name(x->name, o->first, o->c->pp, p, g, sizeof g, err))) break;
            if (!tps_manifest_find(m, g)) continue; /* compare_ranks names it */
            if (!x->reader_data) {
                st = tps_index_add_tensor(ix, g, strlen(g), x->dtype, x->ndim, x->shape, fid[x->file], x->offset, NULL,
                                          err);
            } else {
                view_ref *v = &o->h->views[o->h->nviews++];
                *v = (view_ref){f->ix, x};
                st = tps_index_add_tensor(ix, g, strlen(g), x->dtype, x->ndim, x->shape, fid[x->file], 0, v, err);
            }
        }
        free(fid);
    }
    if (st == TPS_OK) {
        ix->ops = &view_ops;
        ix->state = o->h;
        o->h->refs++;
        *out = ix;
        return TPS_OK;
    }
    tps_index_free(ix);
    return st;
}

/* Every rank file against the plan: the tensors of its stage with the rank's shapes. */
static tps_status compare_ranks(opener *o, const tps_manifest *m, tps_error *err)
{
    tps_buf msg = TPS_BUF_INIT;
    size_t nbad = 0;
    char g[1024], want[256], have[256];
    uint64_t rs[TPS_MAX_DIMS];
    for (uint64_t p = 0; p < o->c->pp; p++)
        for (uint64_t r = 0; r < o->c->tp; r++) {
            const tps_megatron_file *f = file_at(o, r, p);
            size_t found = 0;
            for (size_t i = 0; i < f->ix->ntensors; i++) {
                const tps_tensor *x = &f->ix->tensors[i];
                if (ignored(o, x->name)) continue;
                tps_error e;
                tps_error_clear(&e);
                const tps_manifest_tensor *t = NULL;
                if (!tps_megatron_global_name(x->name, o->first, o->c->pp, p, g, sizeof g, &e))
                    t = tps_manifest_find(m, g);
                if (!t) {
                    if (nbad++ < 8) tps_buf_printf(&msg, "; %s has '%s', which rank 0's stage %" PRIu64 " lacks", f->path,
                                                   x->name, p);
                    continue;
                }
                found++;
                tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, rs);
                if (x->dtype != t->dtype || x->ndim != t->ndim || memcmp(rs, x->shape, sizeof(uint64_t) * (size_t)x->ndim)) {
                    tps_shape_str(rs, t->ndim, want, sizeof want);
                    tps_shape_str(x->shape, x->ndim, have, sizeof have);
                    if (nbad++ < 8)
                        tps_buf_printf(&msg, "; %s: '%s' is %s %s where the partition gives rank %" PRIu64 " %s %s",
                                       f->path, x->name, tps_dtype_name(x->dtype), have, r, tps_dtype_name(t->dtype),
                                       want);
                }
            }
            const tps_index *r0 = file_at(o, 0, p)->ix;
            size_t expect = 0;
            for (size_t i = 0; i < r0->ntensors; i++) expect += !ignored(o, r0->tensors[i].name);
            for (size_t i = 0; found < expect && i < r0->ntensors; i++)
                if (!ignored(o, r0->tensors[i].name) && !tps_index_find(f->ix, r0->tensors[i].name) && nbad++ < 8)
                    tps_buf_printf(&msg, "; %s lacks '%s'", f->path, r0->tensors[i].name);
        }
    tps_status st = TPS_OK;
    if (nbad)
        st = tps_fail(err, TPS_EINVALID, "%s: the rank files do not agree with the partition of tp %u x pp %u: %zu "
                                         "problem%s%s%s",
                      o->path, o->c->tp, o->c->pp, nbad, nbad == 1 ? "" : "s", tps_buf_cstr(&msg) ? tps_buf_cstr(&msg) : "",
                      nbad > 8 ? "; ..." : "");
    tps_buf_release(&msg);
    return st;
}

/* CRCs from tpshard.json beside the tracker, when its tensors and files are these. */
static void take_crcs(const char *root, tps_manifest *m)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" TPS_MANIFEST_NAME, root);
    char *text = NULL;
    size_t len;
    tps_error e;
    tps_error_clear(&e);
    tps_json_doc *doc = NULL;
    if (tps_read_file(path, 1ull << 30, "a manifest", &text, &len, &e) || tps_json_parse(text, len, path, &doc, &e)) {
        free(text);
        return;
    }
    const tps_json *root_j = tps_json_root(doc), *ts = tps_json_get(root_j, "tensors"),
                   *fs = tps_json_get(root_j, "files"), *tp = tps_json_get(root_j, "tp");
    bool ok = ts && fs && tp && ts->type == TPS_JSON_ARRAY && fs->type == TPS_JSON_ARRAY && tp->type == TPS_JSON_NUMBER &&
              tp->u.number.u64 == m->tp && ts->u.array.n == m->ntensors && fs->u.array.n == m->nfiles;
    uint32_t *tcrc = calloc(m->ntensors + 1, sizeof *tcrc), *fcrc = calloc(m->nfiles + 1, sizeof *fcrc);
    ok = ok && tcrc && fcrc;
    for (size_t i = 0; ok && i < m->ntensors; i++) {
        const tps_json *t = ts->u.array.items[i], *n = tps_json_get(t, "name"), *c = tps_json_get(t, "crc32");
        ok = n && c && n->type == TPS_JSON_STRING && c->type == TPS_JSON_STRING && !strcmp(n->u.string.s, m->tensors[i].name);
        if (ok) tcrc[i] = (uint32_t)strtoul(c->u.string.s, NULL, 16);
    }
    for (size_t i = 0; ok && i < m->nfiles; i++) {
        const tps_json *f = fs->u.array.items[i], *n = tps_json_get(f, "name"), *c = tps_json_get(f, "crc32"),
                       *s = tps_json_get(f, "size");
        ok = n && c && s && n->type == TPS_JSON_STRING && c->type == TPS_JSON_STRING && s->type == TPS_JSON_NUMBER &&
             !strcmp(n->u.string.s, m->files[i].name);
        if (ok) fcrc[i] = (uint32_t)strtoul(c->u.string.s, NULL, 16);
    }
    if (ok) {
        for (size_t i = 0; i < m->ntensors; i++) m->tensors[i].crc = tcrc[i];
        for (size_t i = 0; i < m->nfiles; i++) m->files[i].crc = fcrc[i];
        m->adopted = false;
    }
    free(tcrc);
    free(fcrc);
    tps_json_doc_free(doc);
    free(text);
}

tps_status tps_megatron_shardset_open(const char *path, uint64_t vocab, tps_shardset **out, tps_megatron_source **srcp,
                                      tps_error *err)
{
    *out = NULL;
    if (srcp) *srcp = NULL;
    opener o = {.path = path};
    tps_manifest *m = NULL;
    tps_shardset *ss = NULL;
    tps_megatron_source *src = NULL;
    char *cfg = NULL, *kept = NULL;
    tps_status st = tps_megatron_open(path, &o.c, err);
    if (st) return st;
    if (!(o.h = calloc(1, sizeof *o.h))) {
        tps_megatron_close(o.c);
        return oom(err);
    }
    o.h->c = o.c;
    o.h->refs = 1;
    const tps_megatron_file *f0 = &o.c->files[0];
    TPS_CHECK(tps_megatron_args_read(o.c->args_json, f0->path, &o.model, err));
    if (o.c->dist) o.model.tp = o.model.pp = 1; /* torch_dist tensors are global whatever tp x pp saved them */
    if (o.model.tp != o.c->tp || o.model.pp != o.c->pp) {
        st = tps_fail(err, TPS_EINVALID,
                      "%s: the rank directories make tp %u x pp %u, but args say tensor_model_parallel_size %" PRIu64
                      " and pipeline_model_parallel_size %" PRIu64,
                      path, o.c->tp, o.c->pp, o.model.tp, o.model.pp);
        goto cleanup;
    }
    TPS_CHECK(stage_layers(&o, err));
    /* The vocabulary: the true one when known, else the source's padded rows. */
    const tps_tensor *emb = tps_index_find(f0->ix, "embedding.word_embeddings.weight");
    uint64_t padded = emb && emb->ndim == 2 ? emb->shape[0] * o.c->tp : o.model.padded_vocab;
    if (o.model.vocab && vocab && vocab != o.model.vocab) {
        st = tps_fail(err, TPS_EARG, "--vocab-size %" PRIu64 ": the checkpoint's args say vocab_size %" PRIu64, vocab,
                      o.model.vocab);
        goto cleanup;
    }
    o.vocab = o.model.vocab ? o.model.vocab : vocab ? vocab : padded;
    if (padded && o.vocab > padded) {
        st = tps_fail(err, TPS_EINVALID, "%s: vocabulary %" PRIu64 " is more than the %" PRIu64 " rows the ranks hold",
                      path, o.vocab, padded);
        goto cleanup;
    }
    char layout_name[64];
    snprintf(layout_name, sizeof layout_name, "preset:%s", tps_megatron_preset(&o.model));
    TPS_CHECK(tps_layout_load_preset(tps_megatron_preset(&o.model), &o.l, err));
    TPS_CHECK(tps_megatron_config_text(&o.model, o.vocab, &cfg, err));
    TPS_CHECK(tps_layout_apply_config_text(o.l, cfg, strlen(cfg), "the checkpoint's args", &kept, err));
    TPS_CHECK(build_source(&o, err));
    tps_buf problems = TPS_BUF_INIT, unused = TPS_BUF_INIT;
    st = tps_plan_build(o.src, o.l, layout_name, o.c->tp, &m, &problems, &unused, err);
    tps_buf_release(&problems);
    tps_buf_release(&unused);
    if (st) goto cleanup;
    for (size_t i = 0; i < m->ntensors; i++) {
        tps_manifest_tensor *t = &m->tensors[i];
        TPS_CHECK(tps_manifest_set_pad_multiple(m, t, padded, err)); /* the source's rows, zeros or not */
    }
    m->adopted = true;
    m->config_keys = kept;
    kept = NULL;
    free(m->target);
    m->target = NULL;
    /* Files: the rank files by (rank, stage), named from the root. */
    for (size_t i = 0; i < m->nfiles; i++) free(m->files[i].name);
    free(m->files);
    m->nfiles = 0;
    size_t nfiles = (size_t)o.c->tp * o.c->pp;
    if (!(m->files = calloc(nfiles, sizeof *m->files))) {
        st = oom(err);
        goto cleanup;
    }
    size_t rl = strlen(o.c->root);
    for (uint64_t r = 0; r < o.c->tp; r++)
        for (uint64_t p = 0; p < o.c->pp; p++) {
            const tps_megatron_file *f = file_at(&o, r, p);
            const char *rel = strncmp(f->path, o.c->root, rl) == 0 && f->path[rl] == '/' ? f->path + rl + 1 : f->path;
            struct stat sb;
            tps_manifest_file *mf = &m->files[m->nfiles];
            if (!(mf->name = strdup(rel))) {
                st = oom(err);
                goto cleanup;
            }
            mf->rank = r;
            mf->part = p;
            mf->size = stat(f->path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
            m->nfiles++;
        }
    TPS_CHECK(tps_manifest_index(m, path, err));
    TPS_CHECK(compare_ranks(&o, m, err));
    take_crcs(o.c->root, m);
    /* The shard set, every rank's index ready. */
    size_t nview = 0;
    for (size_t k = 0; k < nfiles; k++) nview += o.c->files[k].ix->ntensors;
    if (!(o.h->views = calloc(nview + 1, sizeof *o.h->views))) {
        st = oom(err);
        goto cleanup;
    }
    if (!(ss = calloc(1, sizeof *ss)) || !(ss->dir = strdup(o.c->root)) || !(ss->rank = calloc(o.c->tp, sizeof *ss->rank))) {
        st = oom(err);
        goto cleanup;
    }
    ss->m = m;
    m = NULL;
    for (uint64_t r = 0; r < o.c->tp; r++) TPS_CHECK(rank_index(&o, ss->m, r, &ss->rank[r], err));
    if (srcp) {
        if (!(src = calloc(1, sizeof *src))) {
            st = oom(err);
            goto cleanup;
        }
        src->model = o.model;
        src->model.vocab = o.vocab;
        src->vocab_known = o.model.vocab || vocab;
        src->layer_first = o.first;
        o.first = NULL;
        src->args_json = strdup(o.c->args_json);
        src->checkpoint_version_json = o.c->checkpoint_version_json ? strdup(o.c->checkpoint_version_json) : NULL;
        src->iteration = o.c->iteration;
        src->release = o.c->release;
        src->dist = o.c->dist;
        src->saved_tp = o.c->saved_tp;
        src->saved_pp = o.c->saved_pp;
        src->optimizer_tensors = o.c->optimizer_tensors;
        src->other_entries = o.c->other_entries;
        size_t n = 0;
        for (uint64_t p = 0; p < o.c->pp; p++) n += file_at(&o, 0, p)->n_extra_state;
        src->extra_state = calloc(n + 1, sizeof *src->extra_state);
        if (!src->args_json || !src->extra_state) {
            st = oom(err);
            goto cleanup;
        }
        char g[1024];
        for (uint64_t p = 0; p < o.c->pp; p++) {
            const tps_megatron_file *f = file_at(&o, 0, p);
            for (size_t k = 0; k < f->n_extra_state; k++) {
                tps_error e;
                tps_error_clear(&e);
                if (tps_megatron_global_name(f->extra_state[k], src->layer_first, o.c->pp, p, g, sizeof g, &e) ||
                    !(src->extra_state[src->n_extra_state] = strdup(g)))
                    continue;
                src->n_extra_state++;
            }
        }
        *srcp = src;
        src = NULL;
    }
    *out = ss;
    ss = NULL;
cleanup:
    holder_release(o.h);
    if (ss && !ss->m) ss->m = m, m = NULL;
    tps_shardset_free(ss);
    tps_manifest_free(m);
    tps_megatron_source_free(src);
    tps_index_free(o.src);
    tps_layout_free(o.l);
    free(o.first);
    free(cfg);
    free(kept);
    return st;
}
