#include "megatron_read.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/base/buf.h"
#include "../../lib/registry/megatron_out.h"
#include "megatron_dist.h"
#include "../torch/pickle.h"
#include "../torch/pickle_json.h"
#include "../torch/torch.h"
#include "../view.h"

#define MAX_TRACKER_BYTES 4096
#define MAX_NEST 16
#define MAX_GRID 4096 /* ranks per dimension: far above any real run, bounds the grid table */

const char *const tps_megatron_model_fields[] = {
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "group_query_attention",
    "kv_channels", "swiglu", "vocab_size", "padded_vocab_size", "make_vocab_size_divisible_by",
    "untie_embeddings_and_output_weights", "normalization", "position_embedding_type", "add_position_embedding",
    "add_bias_linear", "add_qkv_bias", "qk_layernorm", "params_dtype", "num_experts", "moe_ffn_hidden_size",
    "max_position_embeddings", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "expert_model_parallel_size", "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers", NULL,
};

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

/* Parses "mp_rank_XX[_YYY[_EEE]]": the number of numeric fields (1..3), or 0 if not one. */
static int rank_dir_fields(const char *name, uint32_t v[3])
{
    if (strncmp(name, "mp_rank_", 8) != 0) return 0;
    const char *p = name + 8;
    int n = 0;
    while (n < 3) {
        if (!isdigit((unsigned char)*p)) return 0;
        unsigned long x = 0;
        int digits = 0;
        while (isdigit((unsigned char)*p)) {
            x = x * 10 + (unsigned long)(*p++ - '0');
            if (++digits > 6) return 0;
        }
        v[n++] = (uint32_t)x;
        if (*p == '\0') return n;
        if (*p++ != '_') return 0;
    }
    return 0;
}

static bool has_rank_dirs(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    struct dirent *e;
    uint32_t v[3];
    while (!found && (e = readdir(d)) != NULL) found = rank_dir_fields(e->d_name, v) > 0;
    closedir(d);
    return found;
}

/* path without trailing slashes ("/" stays "/") */
static char *trimmed(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    return strndup(path, n);
}

bool tps_megatron_is_checkpoint(const char *path)
{
    if (!is_dir(path)) return false;
    char *t = join(path, TPS_MEGATRON_TRACKER);
    bool yes = t && is_file(t);
    free(t);
    return yes || has_rank_dirs(path) || tps_megatron_dist_is_dir(path);
}

/* Megatron's read_metadata: int(text) (surrounding whitespace allowed), else "release";
 * iteration 0 (or negative) is refused as Megatron's assertion does. */
static tps_status read_tracker(const char *tracker, bool *release, int64_t *iter, tps_error *err)
{
    char *text = NULL;
    size_t len = 0;
    tps_status st = tps_read_file(tracker, MAX_TRACKER_BYTES, "a tracker file", &text, &len, err);
    if (st) return st;
    char *s = text, *e = text + len;
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;
    *e = '\0';
    *release = false;
    if (strcmp(s, "release") == 0) {
        *release = true;
        free(text);
        return TPS_OK;
    }
    const char *p = s;
    bool neg = false;
    if (*p == '+' || *p == '-') neg = *p++ == '-';
    int64_t v = 0;
    bool ok = isdigit((unsigned char)*p);
    for (; ok && *p; p++) {
        if (*p == '_' && isdigit((unsigned char)p[1]) && isdigit((unsigned char)p[-1])) continue; /* int("1_000") */
        if (!isdigit((unsigned char)*p) || v > (INT64_MAX - 9) / 10) ok = false;
        else v = v * 10 + (*p - '0');
    }
    if (!ok) st = tps_fail(err, TPS_EINVALID, "%s: '%.40s' is neither an iteration number nor 'release'", tracker, s);
    else if (neg || v == 0)
        st = tps_fail(err, TPS_EINVALID, "%s: iteration %s%lld; Megatron loads only iterations > 0 or 'release'", tracker,
                      neg ? "-" : "", (long long)v);
    else *iter = v;
    free(text);
    return st;
}

/* ---------------------------------------------------------------- one rank file */

typedef struct pick_ctx {
    tps_megatron_file *mf;
    const char *path;
    char *args_json, *version_json;
    int64_t iteration;
    bool has_iteration, legacy;
    tps_buf name;
    tps_torch_file *tf;
} pick_ctx;

/* Legacy encoder names inside a layer -> Megatron-Core (r0.10 loader_megatron/saver_mcore). */
static const char *const legacy_layer[][2] = {
    {"input_norm.", "input_layernorm."},
    {"input_layernorm.", "input_layernorm."},
    {"self_attention.query_key_value.", "self_attention.linear_qkv."},
    {"self_attention.dense.", "self_attention.linear_proj."},
    {"post_attention_norm.", "pre_mlp_layernorm."},
    {"post_attention_layernorm.", "pre_mlp_layernorm."},
    {"mlp.dense_h_to_4h.", "mlp.linear_fc1."},
    {"mlp.dense_4h_to_h.", "mlp.linear_fc2."},
};

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* The Megatron-Core name of a legacy path (language_model.… / word_embeddings_for_head.…),
 * into out; false when the path is not part of a legacy GPT model. */
static bool legacy_to_mcore(const char *path, tps_buf *out)
{
    tps_buf_reset(out);
    const char *rest;
    if (starts(path, "language_model.embedding.")) {
        tps_buf_puts(out, "embedding.");
        tps_buf_puts(out, path + strlen("language_model.embedding."));
    } else if (starts(path, "language_model.output_layer.")) {
        tps_buf_puts(out, "output_layer.");
        tps_buf_puts(out, path + strlen("language_model.output_layer."));
    } else if (starts(path, "word_embeddings_for_head.")) {
        tps_buf_puts(out, "output_layer.");
        tps_buf_puts(out, path + strlen("word_embeddings_for_head."));
    } else if (starts(path, "language_model.encoder.") || starts(path, "language_model.transformer.")) {
        rest = strchr(path + strlen("language_model."), '.') + 1;
        if (starts(rest, "final_norm.") || starts(rest, "final_layernorm.")) {
            tps_buf_puts(out, "decoder.final_layernorm.");
            tps_buf_puts(out, strchr(rest, '.') + 1);
        } else if (starts(rest, "layers.") && isdigit((unsigned char)rest[7])) {
            const char *sub = rest + 7;
            while (isdigit((unsigned char)*sub)) sub++;
            if (*sub != '.') return false;
            tps_buf_append(out, "decoder.", 8);
            tps_buf_append(out, rest, (size_t)(sub + 1 - rest));
            sub++;
            size_t k = 0;
            for (; k < sizeof legacy_layer / sizeof legacy_layer[0]; k++)
                if (starts(sub, legacy_layer[k][0])) break;
            if (k < sizeof legacy_layer / sizeof legacy_layer[0]) {
                tps_buf_puts(out, legacy_layer[k][1]);
                sub += strlen(legacy_layer[k][0]);
            }
            tps_buf_puts(out, sub);
        } else {
            return false;
        }
    } else {
        return false;
    }
    return true;
}

static bool ends(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* One leaf of `model` under its stored dotted path. */
static tps_status model_leaf(pick_ctx *c, const char *path, size_t plen, const tps_pv *v, tps_error *err)
{
    tps_buf mapped = TPS_BUF_INIT;
    const char *name = path;
    tps_status st = TPS_OK;
    if (c->legacy) {
        if (!legacy_to_mcore(path, &mapped) || !(name = tps_buf_cstr(&mapped))) {
            st = mapped.oom ? tps_fail_oom(err, "reading a Megatron checkpoint")
                            : tps_fail(err, TPS_EINVALID,
                                       "%s: model entry '%s' is not part of a legacy Megatron GPT model "
                                       "(language_model.{embedding,encoder,output_layer}, word_embeddings_for_head)",
                                       c->path, path);
            goto done;
        }
        plen = mapped.len;
    }
    if (ends(name, plen, "._extra_state") || strcmp(name, "_extra_state") == 0) st = tps_megatron_file_add_extra(c->mf, name, err);
    else if (ends(name, plen, "rotary_pos_emb.inv_freq")) st = TPS_OK; /* RotaryEmbedding pops it on load */
    else if (v->kind == TPS_PV_TENSOR) st = tps_torch_file_add_tensor(c->tf, name, v, err);
    else if (v->kind != TPS_PV_NONE)
        st = tps_fail(err, TPS_EINVALID, "%s: model entry '%s' is neither a tensor nor an _extra_state value", c->path, path);
done:
    tps_buf_release(&mapped);
    return st;
}

static tps_status model_walk(pick_ctx *c, const tps_pv *d, int depth, tps_error *err)
{
    if (depth > MAX_NEST)
        return tps_fail(err, TPS_EINVALID, "%s: model dicts nested more than %d deep (or a cycle)", c->path, MAX_NEST);
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const tps_pv *k = d->u.dict.keys[i], *v = d->u.dict.vals[i];
        tps_status vst = tps_torch_file_visit(c->tf, err);
        if (vst) return vst;
        if (k->kind != TPS_PV_STR || memchr(k->u.str.s, '\0', k->u.str.len))
            return tps_fail(err, TPS_EINVALID, "%s: a model key is not a plain string (pickle offset %zu)", c->path, k->offset);
        size_t mark = c->name.len;
        if (mark) tps_buf_putc(&c->name, '.');
        tps_buf_append(&c->name, k->u.str.s, k->u.str.len);
        const char *path = tps_buf_cstr(&c->name);
        if (!path) return tps_fail_oom(err, "reading a Megatron checkpoint");
        tps_status st;
        /* an _extra_state value is skipped whatever it holds, a dict included */
        if (v->kind == TPS_PV_DICT && !ends(path, c->name.len, "_extra_state")) st = model_walk(c, v, depth + 1, err);
        else st = model_leaf(c, path, c->name.len, v, err);
        if (st) return st;
        c->name.len = mark;
        if (c->name.data) c->name.data[mark] = '\0';
    }
    return TPS_OK;
}

static const tps_pv *dict_get(const tps_pv *d, const char *key) { return tps_pv_get(d, key); }

static tps_status pick(void *ctx, tps_torch_file *tf, const struct tps_pv *top, tps_error *err)
{
    pick_ctx *c = ctx;
    c->tf = tf;
    for (size_t i = 0; i < top->u.dict.n; i++) {
        const tps_pv *k = top->u.dict.keys[i];
        if (k->kind == TPS_PV_STR && starts(k->u.str.s, "model") && isdigit((unsigned char)k->u.str.s[5]))
            return tps_fail(err, TPS_EINVALID,
                            "%s: holds '%s': a virtual pipeline checkpoint (model0, model1, ...), which tpshard does not "
                            "read; convert it without --num-layers-per-virtual-pipeline-stage first",
                            c->path, k->u.str.s);
    }
    const tps_pv *model = dict_get(top, "model"), *args = dict_get(top, "args"), *ver = dict_get(top, "checkpoint_version"),
                 *it = dict_get(top, "iteration");
    if (!model || model->kind != TPS_PV_DICT)
        return tps_fail(err, TPS_EINVALID, "%s: no 'model' dict at the top level; not a Megatron checkpoint file", c->path);
    tps_status st = tps_pickle_json_str(args ? args : &(tps_pv){.kind = TPS_PV_NONE}, c->path, &c->args_json, err);
    if (!st) st = tps_pickle_json_str(ver ? ver : &(tps_pv){.kind = TPS_PV_NONE}, c->path, &c->version_json, err);
    if (st) return st;
    if (it) {
        if (it->kind != TPS_PV_INT)
            return tps_fail(err, TPS_EINVALID, "%s: the top-level 'iteration' is not an int", c->path);
        c->iteration = it->u.i;
        c->has_iteration = true;
    }
    const tps_pv *lm = dict_get(model, "language_model");
    c->legacy = lm != NULL;
    tps_buf_reset(&c->name);
    return model_walk(c, model, 0, err);
}

static tps_status open_rank_file(tps_megatron_file *mf, pick_ctx *c, tps_error *err)
{
    tps_status st = tps_index_new(mf->path, "megatron", &mf->ix, err);
    if (!st) st = tps_view_state_init(mf->ix, err);
    c->mf = mf;
    c->path = mf->path;
    /* A rank file is mostly optimizer state that reshard, merge and verify never read:
     * checking every record's CRC at open would read the whole file before the copy reads
     * the model again (reshard at twice cp).  The records are left to `tpshard check`
     * (tps_torch_verify_records), as a large checkpoint's are; a truncated or malformed
     * archive is still refused here, and what reshard writes gets CRCs of its own. */
    if (!st) st = tps_torch_add_file_pick_crc(mf->ix, mf->path, pick, c, false, err);
    return st;
}

/* ---------------------------------------------------------------- the directory */

/* Finds root, the iteration directory and its name. */
static tps_status locate(const char *path, tps_megatron_ckpt *c, char **iter_path, tps_error *err)
{
    char *p = trimmed(path), *tracker = p ? join(p, TPS_MEGATRON_TRACKER) : NULL;
    tps_status st = TPS_OK;
    if (!tracker) {
        st = tps_fail_oom(err, "opening a Megatron checkpoint");
        goto done;
    }
    if (!is_dir(p)) {
        st = tps_fail(err, TPS_EINVALID, "%s: not a directory (a Megatron checkpoint is the directory holding %s)", p,
                      TPS_MEGATRON_TRACKER);
        goto done;
    }
    if (is_file(tracker)) {
        int64_t n = 0;
        TPS_CHECK(read_tracker(tracker, &c->release, &n, err));
        char name[32];
        if (c->release) snprintf(name, sizeof name, "release");
        else snprintf(name, sizeof name, "iter_%07lld", (long long)n);
        c->root = p;
        p = NULL;
        if (!(c->iter_dir = strdup(name)) || !(*iter_path = join(c->root, name))) {
            st = tps_fail_oom(err, "opening a Megatron checkpoint");
            goto done;
        }
        if (!is_dir(*iter_path))
            st = tps_fail(err, TPS_EINVALID, "%s names %s, but %s is not a directory", tracker,
                          c->release ? "release" : name, *iter_path);
        goto done;
    }
    if (!has_rank_dirs(p) && !tps_megatron_dist_is_dir(p)) {
        st = tps_fail(err, TPS_EINVALID, "%s: neither %s, mp_rank_* directories nor metadata.json; not a Megatron checkpoint",
                      p, TPS_MEGATRON_TRACKER);
        goto done;
    }
    const char *slash = strrchr(p, '/');
    const char *base = slash ? slash + 1 : p;
    c->release = strcmp(base, "release") == 0;
    if (!(c->iter_dir = strdup(base)) || !(c->root = slash ? strndup(p, slash == p ? 1 : (size_t)(slash - p)) : strdup("."))) {
        st = tps_fail_oom(err, "opening a Megatron checkpoint");
        goto done;
    }
    *iter_path = p;
    p = NULL;
cleanup:
done:
    free(p);
    free(tracker);
    return st;
}

/* The rank directories of the iteration directory: fills c->tp, c->pp and the grid's
 * paths, refusing expert-parallel names, torch_dist contents, mixed forms and holes. */
static tps_status scan_ranks(tps_megatron_ckpt *c, const char *iter_path, bool *pp_named, tps_error *err)
{
    DIR *d = opendir(iter_path);
    if (!d) return tps_fail_errno(err, errno, "%s: cannot list the iteration directory", iter_path);
    tps_status st = TPS_OK;
    uint32_t max_t = 0, max_p = 0;
    int form = 0;
    size_t n = 0, cap = 0;
    uint32_t(*found)[2] = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        uint32_t v[3];
        int k = rank_dir_fields(e->d_name, v);
        if (strcmp(e->d_name, ".metadata") == 0 || strcmp(e->d_name, "common.pt") == 0) {
            st = tps_fail(err, TPS_EINVALID,
                          "%s holds %s but no metadata.json: neither a legacy nor a complete torch_dist checkpoint", iter_path,
                          e->d_name);
            goto done;
        }
        if (!k) continue;
        if (k == 3) {
            st = tps_fail(err, TPS_EINVALID,
                          "%s/%s: an expert-parallel rank directory (mp_rank_TP_PP_EP); expert parallel checkpoints "
                          "are not read (convert to expert parallel size 1 first)",
                          iter_path, e->d_name);
            goto done;
        }
        if (form && form != k) {
            st = tps_fail(err, TPS_EINVALID, "%s: mixes mp_rank_XX and mp_rank_XX_YYY directories (at %s)", iter_path,
                          e->d_name);
            goto done;
        }
        form = k;
        if (v[0] >= MAX_GRID || (k == 2 && v[1] >= MAX_GRID)) {
            st = tps_fail(err, TPS_EINVALID, "%s/%s: rank number out of range", iter_path, e->d_name);
            goto done;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            void *g = realloc(found, cap * sizeof *found);
            if (!g) {
                st = tps_fail_oom(err, "opening a Megatron checkpoint");
                goto done;
            }
            found = g;
        }
        found[n][0] = v[0];
        found[n][1] = k == 2 ? v[1] : 0;
        if (v[0] > max_t) max_t = v[0];
        if (found[n][1] > max_p) max_p = found[n][1];
        n++;
    }
    if (!n) {
        st = tps_fail(err, TPS_EINVALID, "%s: no mp_rank_* directories", iter_path);
        goto done;
    }
    *pp_named = form == 2;
    c->tp = max_t + 1;
    c->pp = max_p + 1;
    if (!(c->files = calloc((size_t)c->tp * c->pp, sizeof *c->files))) {
        st = tps_fail_oom(err, "opening a Megatron checkpoint");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        tps_megatron_file *f = &c->files[(size_t)found[i][1] * c->tp + found[i][0]];
        if (f->path) {
            st = tps_fail(err, TPS_EINVALID, "%s: two directories for tp rank %u, pp rank %u", iter_path, found[i][0],
                          found[i][1]);
            goto done;
        }
        f->tp_rank = found[i][0];
        f->pp_rank = found[i][1];
        char name[64];
        if (form == 2) snprintf(name, sizeof name, "mp_rank_%02u_%03u/" TPS_MEGATRON_FILE, found[i][0], found[i][1]);
        else snprintf(name, sizeof name, "mp_rank_%02u/" TPS_MEGATRON_FILE, found[i][0]);
        if (!(f->path = join(iter_path, name))) {
            st = tps_fail_oom(err, "opening a Megatron checkpoint");
            goto done;
        }
    }
    for (uint32_t p = 0; p < c->pp; p++)
        for (uint32_t t = 0; t < c->tp; t++)
            if (!c->files[(size_t)p * c->tp + t].path) {
                if (form == 2)
                    st = tps_fail(err, TPS_EINVALID, "%s/mp_rank_%02u_%03u is missing: the rank directories found span tp %u x pp %u",
                                  iter_path, t, p, c->tp, c->pp);
                else st = tps_fail(err, TPS_EINVALID, "%s/mp_rank_%02u is missing: the rank directories found span tp %u", iter_path, t, c->tp);
                goto done;
            }
done:
    free(found);
    closedir(d);
    return st;
}

tps_status tps_megatron_args(const tps_megatron_ckpt *c, tps_json_doc **doc, const tps_json **fields, tps_error *err)
{
    *doc = NULL;
    *fields = NULL;
    tps_status st = tps_json_parse(c->args_json, strlen(c->args_json), "Megatron args", doc, err);
    if (st) return st;
    const tps_json *no = tps_json_get(tps_json_root(*doc), "$newobj");
    if (no && no->type == TPS_JSON_ARRAY && no->u.array.n == 3 && no->u.array.items[2]->type == TPS_JSON_OBJECT)
        *fields = no->u.array.items[2];
    return TPS_OK;
}

/* The JSON text of a field, for comparisons ("" when absent). */
static tps_status field_text(const tps_json *fields, const char *key, tps_buf *out)
{
    tps_buf_reset(out);
    const tps_json *v = fields ? tps_json_get(fields, key) : NULL;
    if (v) {
        tps_jw w;
        tps_jw_init(&w, out, false);
        tps_jw_value(&w, v);
    }
    tps_buf_putc(out, '\0');
    return out->oom ? TPS_EIO : TPS_OK;
}

/* Refuses rank files whose args disagree on a model field with the first file's. */
static tps_status compare_args(const tps_megatron_ckpt *c, const char *first_json, const char *other_json, const char *other_path,
                               tps_error *err)
{
    if (strcmp(first_json, other_json) == 0) return TPS_OK;
    tps_json_doc *a = NULL, *b = NULL;
    tps_buf ta = TPS_BUF_INIT, tb = TPS_BUF_INIT;
    tps_status st = tps_json_parse(first_json, strlen(first_json), c->files[0].path, &a, err);
    if (!st) st = tps_json_parse(other_json, strlen(other_json), other_path, &b, err);
    if (st) goto done;
    const tps_json *fa = NULL, *fb = NULL, *na = tps_json_get(tps_json_root(a), "$newobj"), *nb = tps_json_get(tps_json_root(b), "$newobj");
    if (na && na->type == TPS_JSON_ARRAY && na->u.array.n == 3) fa = na->u.array.items[2];
    if (nb && nb->type == TPS_JSON_ARRAY && nb->u.array.n == 3) fb = nb->u.array.items[2];
    for (size_t i = 0; tps_megatron_model_fields[i]; i++) {
        if (field_text(fa, tps_megatron_model_fields[i], &ta) || field_text(fb, tps_megatron_model_fields[i], &tb)) {
            st = tps_fail_oom(err, "comparing Megatron args");
            goto done;
        }
        if (strcmp(ta.data, tb.data) != 0) {
            st = tps_fail(err, TPS_EINVALID, "args.%s differs between rank files: %s in %s, %s in %s", tps_megatron_model_fields[i],
                          *ta.data ? ta.data : "(absent)", c->files[0].path, *tb.data ? tb.data : "(absent)", other_path);
            goto done;
        }
    }
done:
    tps_buf_release(&ta);
    tps_buf_release(&tb);
    tps_json_doc_free(a);
    tps_json_doc_free(b);
    return st;
}

static bool json_uint(const tps_json *fields, const char *key, uint64_t *v)
{
    const tps_json *j = fields ? tps_json_get(fields, key) : NULL;
    if (!j || j->type != TPS_JSON_NUMBER || !j->u.number.is_u64) return false;
    *v = j->u.number.u64;
    return true;
}

/* args' parallel sizes against the rank grid: a hole at the end of the grid is found here,
 * and an mp_rank_XX_YYY set with pipeline size 1 is expert parallel, not pipeline. */
static tps_status check_grid(const tps_megatron_ckpt *c, const char *iter_path, bool pp_named, tps_error *err)
{
    tps_json_doc *doc = NULL;
    const tps_json *f = NULL;
    tps_status st = tps_megatron_args(c, &doc, &f, err);
    if (st) return st;
    uint64_t tp, pp, ep;
    if (json_uint(f, "expert_model_parallel_size", &ep) && ep > 1)
        st = tps_fail(err, TPS_EINVALID, "%s: args.expert_model_parallel_size is %llu: expert parallel checkpoints are not read "
                      "(convert to expert parallel size 1 first)", iter_path, (unsigned long long)ep);
    else if (json_uint(f, "tensor_model_parallel_size", &tp) && tp != c->tp)
        st = tps_fail(err, TPS_EINVALID, "%s: args.tensor_model_parallel_size is %llu but the rank directories span tp %u%s",
                      iter_path, (unsigned long long)tp, c->tp, tp > c->tp ? " (rank directories are missing)" : "");
    else if (json_uint(f, "pipeline_model_parallel_size", &pp) && pp != c->pp && !(pp == 1 && !pp_named))
        st = tps_fail(err, TPS_EINVALID, "%s: args.pipeline_model_parallel_size is %llu but the rank directories span pp %u%s",
                      iter_path, (unsigned long long)pp, c->pp,
                      pp == 1 ? " (mp_rank_XX_YYY with pipeline size 1 would be expert parallel, which is not read)"
                      : pp > c->pp ? " (rank directories are missing)" : "");
    tps_json_doc_free(doc);
    return st;
}

tps_status tps_megatron_open(const char *path, tps_megatron_ckpt **out, tps_error *err)
{
    *out = NULL;
    tps_megatron_ckpt *c = calloc(1, sizeof *c);
    char *iter_path = NULL;
    pick_ctx pc = {.name = TPS_BUF_INIT};
    bool pp_named = false;
    if (!c) return tps_fail_oom(err, "opening a Megatron checkpoint");
    tps_status st = locate(path, c, &iter_path, err);
    if (!st && tps_megatron_dist_is_dir(iter_path)) {
        st = tps_megatron_dist_open(c, iter_path, err);
        free(iter_path);
        if (st) tps_megatron_close(c);
        else *out = c;
        return st;
    }
    if (!st) st = scan_ranks(c, iter_path, &pp_named, err);
    for (size_t i = 0; !st && i < (size_t)c->tp * c->pp; i++) {
        tps_megatron_file *f = &c->files[i];
        pc.args_json = pc.version_json = NULL;
        pc.has_iteration = false;
        pc.iteration = 0;
        if (!is_file(f->path)) {
            st = tps_fail(err, TPS_EINVALID, "%s is missing", f->path);
            break;
        }
        st = open_rank_file(f, &pc, err);
        if (!st && i == 0) {
            c->args_json = pc.args_json;
            c->checkpoint_version_json = pc.version_json;
            c->iteration = pc.has_iteration ? pc.iteration : 0;
            c->legacy_names = pc.legacy;
            pc.args_json = pc.version_json = NULL;
        } else if (!st) {
            st = compare_args(c, c->args_json, pc.args_json, f->path, err);
            if (!st && (pc.has_iteration ? pc.iteration : 0) != c->iteration)
                st = tps_fail(err, TPS_EINVALID, "%s: iteration %lld, but %s has %lld", f->path, (long long)pc.iteration,
                              c->files[0].path, (long long)c->iteration);
            if (!st && pc.legacy != c->legacy_names)
                st = tps_fail(err, TPS_EINVALID, "%s and %s differ in naming (legacy language_model nesting in one only)",
                              c->files[0].path, f->path);
        }
        free(pc.args_json);
        free(pc.version_json);
        pc.args_json = pc.version_json = NULL;
    }
    if (!st) st = check_grid(c, iter_path, pp_named, err);
    tps_buf_release(&pc.name);
    free(iter_path);
    if (st) {
        tps_megatron_close(c);
        return st;
    }
    *out = c;
    return TPS_OK;
}
