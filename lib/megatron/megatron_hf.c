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
#include "../layout/yaml_query.h"
#include "../targets/target.h"
#include "megatron_args.h"

#define MAX_FROM 8
#define NAME_LEN 1024

/* TPS_CHECK for functions with nothing to clean up. */
#define TRY(call)                        \
    do {                                 \
        tps_status try_st = (call);      \
        if (try_st != TPS_OK) return try_st; \
    } while (0)

typedef struct mentry {
    char *into;
    char *from[MAX_FROM];
    char *rows[MAX_FROM];
    size_t nfrom, nrows;
    char *groups;
    size_t line;
} mentry;

typedef struct marg {
    char *arg, *config;
    bool as_float, as_int;
} marg;

typedef struct mhf {
    char *architecture, *model_type, *when, *unless;
} mhf;

struct tps_megatron_hf {
    char *source;
    mentry *e;
    size_t n;
    marg *a;
    size_t na;
    mhf *hf;
    size_t nhf;
};

void tps_megatron_hf_free(tps_megatron_hf *h)
{
    if (!h) return;
    for (size_t i = 0; i < h->n; i++) {
        free(h->e[i].into);
        free(h->e[i].groups);
        for (size_t k = 0; k < MAX_FROM; k++) {
            free(h->e[i].from[k]);
            free(h->e[i].rows[k]);
        }
    }
    for (size_t i = 0; i < h->na; i++) {
        free(h->a[i].arg);
        free(h->a[i].config);
    }
    for (size_t i = 0; i < h->nhf; i++) {
        free(h->hf[i].architecture);
        free(h->hf[i].model_type);
        free(h->hf[i].when);
        free(h->hf[i].unless);
    }
    free(h->e);
    free(h->a);
    free(h->hf);
    free(h->source);
    free(h);
}

/* ---- the megatron: section ---- */

/* The shared libyaml queries (yaml_query.h), under the short names this file's parsers use. */
typedef tps_yaml_ctx yctx;
#define yscalar tps_yaml_scalar
#define ykey tps_yaml_key
#define ybad tps_yaml_fail
#define only_keys tps_yaml_only_keys

/* A scalar or a list of scalars into out[]. */
static tps_status ylist(yctx *c, const yaml_node_t *n, char **out, size_t *count, const char *what)
{
    *count = 0;
    if (yscalar(n)) {
        if (!(out[(*count)++] = strdup(yscalar(n)))) return tps_fail_oom(c->err, "reading the megatron mapping");
        return TPS_OK;
    }
    if (!n || n->type != YAML_SEQUENCE_NODE) return ybad(c, n, what);
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        const char *s = yscalar(yaml_document_get_node(c->doc, *it));
        if (!s || *count == MAX_FROM) return ybad(c, n, what);
        if (!(out[(*count)++] = strdup(s))) return tps_fail_oom(c->err, "reading the megatron mapping");
    }
    return *count ? TPS_OK : ybad(c, n, what);
}

static tps_status parse_entry(yctx *c, const yaml_node_t *en, mentry *e)
{
    static const char *const allowed[] = {"into", "from", "rows", "groups", NULL};
    if (en->type != YAML_MAPPING_NODE) return ybad(c, en, "each tensors: entry is a mapping with into and from");
    TRY(only_keys(c, en, allowed, "unknown key (into, from, rows, groups)"));
    e->line = en->start_mark.line + 1;
    const char *into = yscalar(ykey(c->doc, en, "into"));
    if (!into) return ybad(c, en, "an entry needs into (a name)");
    if (!(e->into = strdup(into))) return tps_fail_oom(c->err, "reading the megatron mapping");
    TRY(ylist(c, ykey(c->doc, en, "from"), e->from, &e->nfrom, "from is a name or a list of at most 8"));
    yaml_node_t *rows = ykey(c->doc, en, "rows");
    if (rows) TRY(ylist(c, rows, e->rows, &e->nrows, "rows is a list of size expressions"));
    const char *groups = yscalar(ykey(c->doc, en, "groups"));
    if (groups && !(e->groups = strdup(groups))) return tps_fail_oom(c->err, "reading the megatron mapping");
    if (e->nfrom > 1 && e->nrows != e->nfrom) return ybad(c, en, "an entry of several from names gives rows for each");
    if (e->nfrom == 1 && (e->nrows || e->groups)) return ybad(c, en, "rows and groups are for entries of several names");
    int w = tps_target_name_wildcards(e->into);
    if (w > TPS_TARGET_MAX_CAPS) return ybad(c, en, "at most 8 wildcards in a name");
    for (size_t k = 0; k < e->nfrom; k++)
        if (tps_target_name_wildcards(e->from[k]) != w)
            return ybad(c, en, "every name of from needs as many wildcards as into");
    return TPS_OK;
}

static tps_status parse_arg(yctx *c, const yaml_node_t *kn, const yaml_node_t *vn, marg *a)
{
    static const char *const allowed[] = {"config", "float", "int", NULL};
    const char *k = yscalar(kn), *cfg = yscalar(vn);
    if (!k) return ybad(c, kn, "args: keys are Megatron arg names");
    if (!cfg && vn && vn->type == YAML_MAPPING_NODE) {
        TRY(only_keys(c, vn, allowed, "unknown key (config, float, int)"));
        cfg = yscalar(ykey(c->doc, vn, "config"));
        const char *f = yscalar(ykey(c->doc, vn, "float")), *i = yscalar(ykey(c->doc, vn, "int"));
        a->as_float = f && strcmp(f, "true") == 0;
        a->as_int = i && strcmp(i, "true") == 0;
    }
    if (!cfg) return ybad(c, vn, "an args: value is a config.json key, or {config: KEY, float: true}");
    if (!(a->arg = strdup(k)) || !(a->config = strdup(cfg))) return tps_fail_oom(c->err, "reading the megatron mapping");
    return TPS_OK;
}

static tps_status parse_hf(yctx *c, const yaml_node_t *n, mhf *f)
{
    static const char *const allowed[] = {"architecture", "model_type", "when", "unless", NULL};
    if (!n || n->type != YAML_MAPPING_NODE) return ybad(c, n, "each hf: entry is a mapping with an architecture");
    TRY(only_keys(c, n, allowed, "unknown key (architecture, model_type, when, unless)"));
    const char *v[4];
    for (int i = 0; i < 4; i++) v[i] = yscalar(ykey(c->doc, n, allowed[i]));
    if (!v[0] || !v[1]) return ybad(c, n, "an hf: entry needs architecture and model_type");
    char **dst[4] = {&f->architecture, &f->model_type, &f->when, &f->unless};
    for (int i = 0; i < 4; i++)
        if (v[i] && !(*dst[i] = strdup(v[i]))) return tps_fail_oom(c->err, "reading the megatron mapping");
    return TPS_OK;
}

static yaml_node_t *find_megatron(yaml_document_t *doc)
{
    yaml_node_t *t = ykey(doc, ykey(doc, yaml_document_get_root_node(doc), "targets"), "megatron");
    return t && t->type == YAML_MAPPING_NODE ? t : NULL;
}

static bool has_megatron(yaml_document_t *doc, const void *unused)
{
    (void)unused;
    return find_megatron(doc) != NULL;
}

tps_status tps_megatron_hf_load(const char *layout_text, const char *layout_name, tps_megatron_hf **out,
                                tps_error *err)
{
    *out = NULL;
    yaml_parser_t p;
    yaml_document_t doc;
    bool doc_ok = false;
    tps_status st = TPS_OK;
    tps_megatron_hf *h = calloc(1, sizeof *h);
    if (!h || !yaml_parser_initialize(&p)) {
        free(h);
        return tps_fail_oom(err, "reading the megatron mapping");
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)layout_text, strlen(layout_text));
    if (!yaml_parser_load(&p, &doc)) {
        st = tps_fail(err, TPS_EINVALID, "%s: the layout is not valid YAML", layout_name);
        goto cleanup;
    }
    doc_ok = true;
    yctx c = {&doc, layout_name, err, "megatron"};
    yaml_node_t *tn = find_megatron(&doc);
    if (!tn) {
        char have[1024];
        st = tps_fail(err, TPS_EINVALID,
                      "%s has no Hugging Face <-> Megatron mapping (targets: megatron:); the presets with one: %s",
                      layout_name, tps_yaml_presets_with(has_megatron, NULL, have, sizeof have));
        goto cleanup;
    }
    if (!(h->source = strdup(layout_name))) {
        st = tps_fail_oom(err, "reading the megatron mapping");
        goto cleanup;
    }
    static const char *const allowed[] = {"tensors", "args", "hf", NULL};
    TPS_CHECK(only_keys(&c, tn, allowed, "unknown key (tensors, args, hf)"));
    yaml_node_t *tensors = ykey(&doc, tn, "tensors"), *args = ykey(&doc, tn, "args"), *hf = ykey(&doc, tn, "hf");
    if (!tensors || tensors->type != YAML_SEQUENCE_NODE) {
        st = ybad(&c, tn, "tensors is a list of {into, from}");
        goto cleanup;
    }
    size_t n = (size_t)(tensors->data.sequence.items.top - tensors->data.sequence.items.start);
    if (!(h->e = calloc(n + 1, sizeof *h->e))) {
        st = tps_fail_oom(err, "reading the megatron mapping");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        h->n = i + 1;
        TPS_CHECK(parse_entry(&c, yaml_document_get_node(&doc, tensors->data.sequence.items.start[i]), &h->e[i]));
    }
    if (args) {
        if (args->type != YAML_MAPPING_NODE) {
            st = ybad(&c, args, "args is a mapping of Megatron arg: config.json key");
            goto cleanup;
        }
        size_t na = (size_t)(args->data.mapping.pairs.top - args->data.mapping.pairs.start);
        if (!(h->a = calloc(na + 1, sizeof *h->a))) {
            st = tps_fail_oom(err, "reading the megatron mapping");
            goto cleanup;
        }
        for (size_t i = 0; i < na; i++) {
            yaml_node_pair_t *pp = &args->data.mapping.pairs.start[i];
            h->na = i + 1;
            TPS_CHECK(parse_arg(&c, yaml_document_get_node(&doc, pp->key), yaml_document_get_node(&doc, pp->value),
                                &h->a[i]));
        }
    }
    if (hf) {
        if (hf->type != YAML_SEQUENCE_NODE) {
            st = ybad(&c, hf, "hf is a list of {architecture, model_type, when, unless}");
            goto cleanup;
        }
        size_t nh = (size_t)(hf->data.sequence.items.top - hf->data.sequence.items.start);
        if (!(h->hf = calloc(nh + 1, sizeof *h->hf))) {
            st = tps_fail_oom(err, "reading the megatron mapping");
            goto cleanup;
        }
        for (size_t i = 0; i < nh; i++) {
            h->nhf = i + 1;
            TPS_CHECK(parse_hf(&c, yaml_document_get_node(&doc, hf->data.sequence.items.start[i]), &h->hf[i]));
        }
    }
    *out = h;
    h = NULL;
cleanup:
    if (doc_ok) yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    tps_megatron_hf_free(h);
    return st;
}

/* ---- row views ---- */

typedef struct rpiece {
    size_t src;
    uint64_t row, nrows;
} rpiece;

/* A tensor made of whole rows of other tensors, in order. */
typedef struct rview {
    uint64_t row_bytes;
    rpiece *p;
    size_t n;
} rview;

static tps_status rview_read(const rview *v, tps_global_read_fn read, void *ctx, uint64_t off, void *buf, size_t len,
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

static void rviews_free(rview *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i].p);
    free(v);
}

/* One entry's pieces: the members m[0..K) (rows r[k], G groups) into the fused tensor, or,
 * with reverse, member k's pieces out of the fused tensor src. */
static bool build_pieces(rview *v, const size_t *m, const uint64_t *r, size_t K, uint64_t G, size_t k_rev, size_t src,
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
static tps_status entry_rows(const tps_megatron_hf *h, const mentry *e, const tps_layout *l, uint64_t *r, uint64_t *G,
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
    return rview_read(t->reader_data, index_read, (void *)s->src, off, buf, len, err);
}

static void view_release(void *state)
{
    vstate *s = state;
    if (!s) return;
    rviews_free(s->v, s->n);
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
            if (!build_pieces(rv, &zero, &one, 1, 1, 0, 0, false)) {
                st = tps_fail_oom(err, "mapping to Megatron names");
                goto cleanup;
            }
        } else {
            TPS_CHECK(entry_rows(h, e, l, r, &G, err));
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
            if (!build_pieces(rv, m, r, e->nfrom, G, 0, 0, false)) {
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

/* ---- args ---- */

static void put_key(tps_buf *b, const char *k)
{
    if (b->len > 1) tps_buf_puts(b, ", ");
    tps_json_escape(b, k, strlen(k));
    tps_buf_puts(b, ": ");
}

static bool has_key(const char *const *keys, size_t n, const char *k)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i], k) == 0) return true;
    return false;
}

/* A float as the contract writes one: always with a '.' or an exponent. */
static void put_float(tps_buf *b, double v)
{
    char text[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, v);
        if (strtod(text, NULL) == v) break;
    }
    tps_buf_puts(b, text);
    if (!strpbrk(text, ".eEn")) tps_buf_puts(b, ".0");
}

typedef struct argw {
    tps_buf b;
    const char *keys[256];
    size_t n;
} argw;

/* Starts arg k unless it was written already; false then. */
static bool arg_begin(argw *w, const char *k)
{
    if (has_key(w->keys, w->n, k) || w->n == sizeof w->keys / sizeof *w->keys) return false;
    w->keys[w->n++] = k;
    put_key(&w->b, k);
    return true;
}

static void arg_u64(argw *w, const char *k, uint64_t v)
{
    if (arg_begin(w, k)) tps_buf_printf(&w->b, "%llu", (unsigned long long)v);
}

static void arg_raw(argw *w, const char *k, const char *text)
{
    if (arg_begin(w, k)) tps_buf_puts(&w->b, text);
}

static void arg_bool(argw *w, const char *k, bool v)
{
    arg_raw(w, k, v ? "true" : "false");
}

static void arg_str(argw *w, const char *k, const char *s)
{
    if (arg_begin(w, k)) tps_json_escape(&w->b, s, strlen(s));
}

static void arg_float(argw *w, const char *k, double v)
{
    if (arg_begin(w, k)) put_float(&w->b, v);
}

static const char *dtype_torch(tps_dtype d)
{
    switch (d) {
    case TPS_DT_BF16: return "bfloat16";
    case TPS_DT_F16: return "float16";
    case TPS_DT_F32: return "float32";
    default: return NULL;
    }
}

static bool number_of(const tps_json *v, double *out)
{
    if (!v || v->type != TPS_JSON_NUMBER) return false;
    *out = v->u.number.f64;
    return true;
}

/* Megatron's Llama-3.1 RoPE scaling (rope_utils.apply_scaling) is factor with low 1, high 4
 * and original 8192 fixed: anything else it would compute differently. */
static tps_status rope_scaling(const tps_json *cfg, const char *what, argw *w, tps_error *err)
{
    const tps_json *rs = tps_json_get(cfg, "rope_scaling");
    if (!rs || rs->type == TPS_JSON_NULL) {
        arg_bool(w, "use_rope_scaling", false);
        return TPS_OK;
    }
    const tps_json *type = tps_json_get(rs, "rope_type");
    if (!type) type = tps_json_get(rs, "type");
    double factor, low = 1, high = 4, orig = 8192;
    bool llama3 = type && type->type == TPS_JSON_STRING && strcmp(type->u.string.s, "llama3") == 0;
    if (!llama3 || !number_of(tps_json_get(rs, "factor"), &factor))
        return tps_fail(err, TPS_EINVALID,
                        "%s: rope_scaling of type '%s': Megatron computes only Llama-3.1's (rope_type llama3)", what,
                        type && type->type == TPS_JSON_STRING ? type->u.string.s : "?");
    number_of(tps_json_get(rs, "low_freq_factor"), &low);
    number_of(tps_json_get(rs, "high_freq_factor"), &high);
    number_of(tps_json_get(rs, "original_max_position_embeddings"), &orig);
    if (low != 1 || high != 4 || orig != 8192)
        return tps_fail(err, TPS_EINVALID,
                        "%s: rope_scaling low_freq_factor %g, high_freq_factor %g, original_max_position_embeddings "
                        "%g: Megatron's Llama-3.1 scaling has them fixed at 1, 4 and 8192",
                        what, low, high, orig);
    arg_bool(w, "use_rope_scaling", true);
    arg_float(w, "rope_scaling_factor", factor);
    return TPS_OK;
}

tps_status tps_megatron_hf_args(const tps_megatron_hf *h, const tps_layout *l, const char *config_text,
                                size_t config_len, const tps_index *view, uint64_t tp, uint64_t pp, char **out,
                                tps_error *err)
{
    *out = NULL;
    tps_json_doc *doc = NULL;
    argw w = {.b = TPS_BUF_INIT};
    tps_status st = tps_json_parse(config_text, config_len, "config.json", &doc, err);
    if (st) return st;
    const tps_json *cfg = tps_json_root(doc);
    const tps_model_sizes *s = tps_layout_sizes(l);
    const tps_tensor *emb = tps_index_find(view, "embedding.word_embeddings.weight");
    if (!emb || emb->ndim != 2) {
        st = tps_fail(err, TPS_EINVALID, "%s: no embedding.word_embeddings.weight [V, H] after the mapping",
                      view->path);
        goto cleanup;
    }
    const char *dt = dtype_torch(emb->dtype);
    if (!dt) {
        st = tps_fail(err, TPS_EINVALID, "%s: embeddings of dtype %s; Megatron's params_dtype is bf16, f16 or f32",
                      view->path, tps_dtype_name(emb->dtype));
        goto cleanup;
    }
    tps_buf_putc(&w.b, '{');
    for (size_t i = 0; i < h->na; i++) {
        const marg *a = &h->a[i];
        const tps_json *v = tps_json_get(cfg, a->config);
        if (!v || v->type == TPS_JSON_NULL) continue;
        if (a->as_float || a->as_int) {
            double d;
            if (!number_of(v, &d) || (a->as_int && (d != floor(d) || fabs(d) > 9e15))) {
                st = tps_fail(err, TPS_EINVALID, "config.json: %s is not %s (for Megatron's %s)", a->config,
                              a->as_int ? "an integer" : "a number", a->arg);
                goto cleanup;
            }
            if (a->as_int) {
                if (arg_begin(&w, a->arg)) tps_buf_printf(&w.b, "%lld", (long long)d);
            } else {
                arg_float(&w, a->arg, d);
            }
        } else if (arg_begin(&w, a->arg)) {
            tps_buf b2 = TPS_BUF_INIT;
            tps_jw jw;
            tps_jw_init(&jw, &b2, false);
            tps_jw_value(&jw, v);
            const char *text = tps_buf_cstr(&b2);
            tps_buf_puts(&w.b, text ? text : "null");
            tps_buf_release(&b2);
        }
    }
    /* What every Megatron GPT model from a Hugging Face one has: the sizes tpshard checked
     * against the tensors where config.json lacks them, then the fixed choices
     * (what Megatron's tools/checkpoint loaders read: loader_base.ensure_required_arguments,
     * check_checkpoint_args in megatron/training/checkpointing.py). */
    arg_u64(&w, "num_layers", s->layers);
    arg_u64(&w, "hidden_size", s->hidden);
    arg_u64(&w, "ffn_hidden_size", s->intermediate);
    arg_u64(&w, "num_attention_heads", s->heads);
    arg_u64(&w, "num_query_groups", s->kv_heads ? s->kv_heads : s->heads);
    arg_bool(&w, "group_query_attention", s->kv_heads && s->kv_heads != s->heads);
    arg_u64(&w, "kv_channels", s->head_dim);
    arg_str(&w, "position_embedding_type", "rope");
    arg_bool(&w, "add_position_embedding", true);
    arg_bool(&w, "use_rotary_position_embeddings", true);
    arg_float(&w, "rotary_percent", 1.0);
    arg_bool(&w, "rotary_interleaved", false);
    TPS_CHECK(rope_scaling(cfg, view->path, &w, err));
    arg_str(&w, "normalization", "RMSNorm");
    arg_bool(&w, "apply_layernorm_1p", false);
    arg_bool(&w, "swiglu", true);
    arg_bool(&w, "squared_relu", false);
    bool qkv_bias = false, untied = false;
    for (size_t i = 0; i < view->ntensors; i++) {
        const char *n = view->tensors[i].name;
        size_t len = strlen(n), k = strlen(".linear_qkv.bias");
        qkv_bias = qkv_bias || (len >= k && strcmp(n + len - k, ".linear_qkv.bias") == 0);
        untied = untied || strcmp(n, "output_layer.weight") == 0;
    }
    arg_bool(&w, "add_bias_linear", false);
    arg_bool(&w, "disable_bias_linear", true);
    arg_bool(&w, "add_qkv_bias", qkv_bias);
    arg_bool(&w, "untie_embeddings_and_output_weights", untied);
    arg_bool(&w, "apply_query_key_layer_scaling", false);
    arg_float(&w, "attention_dropout", 0.0);
    arg_float(&w, "hidden_dropout", 0.0);
    uint64_t V = emb->shape[0], mult = 128 * tp, padded;
    if (!tps_mul_u64((V + mult - 1) / mult, mult, &padded)) {
        st = tps_fail(err, TPS_EARG, "--tp %llu: the padded vocabulary overflows", (unsigned long long)tp);
        goto cleanup;
    }
    arg_str(&w, "tokenizer_type", "HuggingFaceTokenizer");
    arg_raw(&w, "tokenizer_model", "null");
    arg_u64(&w, "vocab_size", V);
    arg_u64(&w, "padded_vocab_size", padded);
    arg_u64(&w, "make_vocab_size_divisible_by", 128);
    arg_u64(&w, "tensor_model_parallel_size", tp);
    arg_u64(&w, "pipeline_model_parallel_size", pp);
    arg_raw(&w, "virtual_pipeline_model_parallel_size", "null");
    arg_raw(&w, "num_layers_per_virtual_pipeline_stage", "null");
    arg_u64(&w, "expert_model_parallel_size", 1);
    arg_raw(&w, "num_experts", "null");
    arg_bool(&w, "sequence_parallel", false);
    arg_bool(&w, "fp16", emb->dtype == TPS_DT_F16);
    arg_bool(&w, "bf16", emb->dtype == TPS_DT_BF16);
    if (arg_begin(&w, "params_dtype")) tps_buf_printf(&w.b, "{\"$dtype\": \"%s\"}", dt);
    arg_str(&w, "ckpt_format", "torch");
    arg_str(&w, "transformer_impl", "local");
    arg_bool(&w, "bert_binary_head", false);
    arg_u64(&w, "consumed_train_samples", 0);
    arg_u64(&w, "consumed_valid_samples", 0);
    arg_u64(&w, "skipped_train_samples", 0);
    arg_u64(&w, "iteration", 1);
    tps_buf_putc(&w.b, '}');
    const char *text = tps_buf_cstr(&w.b);
    if (!text || !(*out = strdup(text))) st = tps_fail_oom(err, "writing Megatron's args");
cleanup:
    tps_json_doc_free(doc);
    tps_buf_release(&w.b);
    return st;
}

/* ---- merge --target hf ---- */

/* Whether args has key set to something other than null, false, 0 or "". */
static bool truthy(const tps_json *args, const char *key)
{
    const tps_json *v = tps_json_get(args, key);
    if (!v) return false;
    switch (v->type) {
    case TPS_JSON_NULL: return false;
    case TPS_JSON_BOOL: return v->u.boolean;
    case TPS_JSON_NUMBER: return v->u.number.f64 != 0;
    case TPS_JSON_STRING: return v->u.string.len != 0;
    default: return true;
    }
}

static tps_status parse_args(const char *args_json, tps_json_doc **doc, const tps_json **args, tps_error *err)
{
    TRY(tps_json_parse(args_json, strlen(args_json), "the checkpoint's args", doc, err));
    /* The Namespace as the reader encodes it, or its fields alone. */
    const tps_json *f = tps_megatron_args_fields(tps_json_root(*doc));
    *args = f ? f : tps_json_root(*doc);
    if ((*args)->type != TPS_JSON_OBJECT) {
        tps_json_doc_free(*doc);
        *doc = NULL;
        return tps_fail(err, TPS_EINVALID, "the checkpoint's args are not a Namespace of fields");
    }
    return TPS_OK;
}

tps_status tps_megatron_hf_choose(const char *args_json, char **preset, char **architecture, char **model_type,
                                  tps_error *err)
{
    *preset = *architecture = *model_type = NULL;
    tps_json_doc *doc;
    const tps_json *args;
    TRY(parse_args(args_json, &doc, &args, err));
    tps_status st = TPS_OK;
    for (const tps_preset *pr = tps_presets; pr->name && !*preset; pr++) {
        if (!tps_yaml_text_has(pr->yaml, has_megatron, NULL)) continue;
        tps_megatron_hf *h = NULL;
        char name[256];
        snprintf(name, sizeof name, "preset:%s", pr->name);
        TPS_CHECK(tps_megatron_hf_load(pr->yaml, name, &h, err));
        for (size_t i = 0; i < h->nhf; i++) {
            const mhf *f = &h->hf[i];
            if ((f->when && !truthy(args, f->when)) || (f->unless && truthy(args, f->unless))) continue;
            *preset = strdup(pr->name);
            *architecture = strdup(f->architecture);
            *model_type = strdup(f->model_type);
            if (!*preset || !*architecture || !*model_type) st = tps_fail_oom(err, "choosing the architecture");
            break;
        }
        tps_megatron_hf_free(h);
    }
    if (st == TPS_OK && !*preset)
        st = tps_fail(err, TPS_EINVALID,
                      "no Hugging Face architecture for this Megatron model (num_experts %s, add_qkv_bias %s, "
                      "swiglu %s): merge --target hf writes Llama, Qwen2 and Mixtral models",
                      truthy(args, "num_experts") ? "set" : "unset", truthy(args, "add_qkv_bias") ? "true" : "false",
                      truthy(args, "swiglu") ? "true" : "false");
cleanup:
    if (st) {
        free(*preset);
        free(*architecture);
        free(*model_type);
        *preset = *architecture = *model_type = NULL;
    }
    tps_json_doc_free(doc);
    return st;
}

static bool u64_of(const tps_json *v, uint64_t *out)
{
    if (!v || v->type != TPS_JSON_NUMBER || !v->u.number.is_u64) return false;
    *out = v->u.number.u64;
    return true;
}

tps_status tps_megatron_hf_config(const tps_megatron_hf *h, const char *args_json, const char *architecture,
                                  const char *model_type, uint64_t vocab, char **out, tps_error *err)
{
    *out = NULL;
    tps_json_doc *doc;
    const tps_json *args;
    TRY(parse_args(args_json, &doc, &args, err));
    tps_status st = TPS_OK;
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, true);
    const char *written[256];
    size_t nw = 0;
    if (!truthy(args, "swiglu") || !tps_json_get(args, "normalization") ||
        tps_json_get(args, "normalization")->type != TPS_JSON_STRING ||
        strcmp(tps_json_get(args, "normalization")->u.string.s, "RMSNorm") != 0) {
        st = tps_fail(err, TPS_EINVALID, "%s needs swiglu and RMSNorm; the checkpoint's args say otherwise",
                      architecture);
        goto cleanup;
    }
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "architectures");
    tps_jw_array_begin(&w);
    tps_jw_string(&w, architecture);
    tps_jw_array_end(&w);
    tps_jw_key(&w, "model_type");
    tps_jw_string(&w, model_type);
    uint64_t heads = 0, hidden = 0, kvc = 0;
    u64_of(tps_json_get(args, "num_attention_heads"), &heads);
    u64_of(tps_json_get(args, "hidden_size"), &hidden);
    for (size_t i = 0; i < h->na && nw < sizeof written / sizeof *written; i++) {
        const marg *a = &h->a[i];
        const tps_json *v = tps_json_get(args, a->arg);
        if (has_key(written, nw, a->config)) continue;
        /* Without group_query_attention Megatron ignores num_query_groups: one group a head. */
        if (strcmp(a->arg, "num_query_groups") == 0 && !truthy(args, "group_query_attention"))
            v = tps_json_get(args, "num_attention_heads");
        if (!v || v->type == TPS_JSON_NULL) continue;
        written[nw++] = a->config;
        tps_jw_key(&w, a->config);
        tps_jw_value(&w, v);
    }
    if (u64_of(tps_json_get(args, "kv_channels"), &kvc) && heads && kvc * heads != hidden) {
        tps_jw_key(&w, "head_dim");
        tps_jw_u64(&w, kvc);
    }
    tps_jw_key(&w, "vocab_size");
    tps_jw_u64(&w, vocab);
    tps_jw_key(&w, "tie_word_embeddings");
    tps_jw_bool(&w, !truthy(args, "untie_embeddings_and_output_weights"));
    tps_jw_key(&w, "hidden_act");
    tps_jw_string(&w, "silu");
    const tps_json *pd = tps_json_get(args, "params_dtype");
    const tps_json *dn = pd ? tps_json_get(pd, "$dtype") : NULL;
    tps_jw_key(&w, "torch_dtype");
    if (dn && dn->type == TPS_JSON_STRING) tps_jw_string(&w, dn->u.string.s);
    else tps_jw_string(&w, truthy(args, "bf16") ? "bfloat16" : truthy(args, "fp16") ? "float16" : "float32");
    tps_jw_key(&w, "rope_scaling");
    if (truthy(args, "use_rope_scaling")) {
        double factor = 8;
        number_of(tps_json_get(args, "rope_scaling_factor"), &factor);
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "rope_type");
        tps_jw_string(&w, "llama3");
        tps_jw_key(&w, "factor");
        tps_jw_double(&w, factor);
        tps_jw_key(&w, "low_freq_factor");
        tps_jw_double(&w, 1.0);
        tps_jw_key(&w, "high_freq_factor");
        tps_jw_double(&w, 4.0);
        tps_jw_key(&w, "original_max_position_embeddings");
        tps_jw_u64(&w, 8192);
        tps_jw_object_end(&w);
    } else {
        tps_jw_null(&w);
    }
    tps_jw_object_end(&w);
    tps_buf_putc(&b, '\n');
    const char *text = tps_buf_cstr(&b);
    if (!text || !(*out = strdup(text))) st = tps_fail_oom(err, "writing config.json");
cleanup:
    tps_buf_release(&b);
    tps_json_doc_free(doc);
    return st;
}

struct tps_megatron_unview {
    rview *v;
    size_t n;
    tps_global_read_fn read;
    void *ctx;
};

void tps_megatron_unview_free(tps_megatron_unview *rd)
{
    if (!rd) return;
    rviews_free(rd->v, rd->n);
    free(rd);
}

tps_status tps_megatron_hf_unview_read(void *rd, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_megatron_unview *u = rd;
    return rview_read(&u->v[i], u->read, u->ctx, off, buf, len, err);
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
            TPS_CHECK(entry_rows(h, e, l, r, &G, err));
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
            o->part = (tps_partition){.replicated = true};
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
                ok = build_pieces(v, &i, &one, 1, 1, 0, i, true);
            } else {
                v->row_bytes = t->nbytes / t->shape[0];
                o->shape[0] = r[k];
                o->nbytes = r[k] * v->row_bytes;
                ok = build_pieces(v, NULL, r, e->nfrom, G, k, i, true);
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
