#include "megatron_out.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/buf.h"
#include "../base/index.h"
#include "../base/json.h"
#include "../engine/outdir.h"
#include "../engine/publish.h"
#include "../set/grid_stages.h"
#include "../set/manifest.h"
#include "megatron_args.h"

#define LAYERS "decoder.layers."

uint64_t tps_megatron_padded_vocab(uint64_t v, uint64_t divisor, uint64_t tp)
{
    uint64_t q = (divisor ? divisor : TPS_MEGATRON_VOCAB_DIVISOR) * tp;
    return (v + q - 1) / q * q;
}

tps_status tps_megatron_stages(uint64_t num_layers, uint64_t pp, const char *pp_layers, uint64_t *first,
                               tps_error *err)
{
    if (pp == 0 || pp > num_layers)
        return tps_fail(err, TPS_EARG, "--pp %" PRIu64 ": a pipeline of 1 to %" PRIu64 " stages (the model has %" PRIu64
                                       " layers)",
                        pp, num_layers, num_layers);
    first[0] = 0;
    if (!pp_layers) {
        if (num_layers % pp)
            return tps_fail(err, TPS_EARG,
                            "--pp %" PRIu64 " does not divide the %" PRIu64 " layers: give the split with --pp-layers "
                            "(e.g. --pp-layers %" PRIu64 ",...)",
                            pp, num_layers, num_layers / pp + 1);
        for (uint64_t p = 0; p < pp; p++) first[p + 1] = first[p] + num_layers / pp;
        return TPS_OK;
    }
    tps_status st = tps_grid_layers_parse(num_layers, pp, pp_layers, first, err);
    if (st) return st;
    /* Megatron splits unevenly only at the ends (decoder_first/last_pipeline_num_layers). */
    for (uint64_t p = 2; p + 1 < pp; p++)
        if (first[p + 1] - first[p] != first[2] - first[1])
            return tps_fail(err, TPS_EARG,
                            "--pp-layers '%s': the middle stages must hold one count of layers (Megatron sets only "
                            "the first and the last stage's with --decoder-first/last-pipeline-num-layers)",
                            pp_layers);
    return TPS_OK;
}

/* decoder.layers.N.rest: N and where rest begins; false for other names. */
static bool layer_of(const char *name, uint64_t *n, const char **rest)
{
    if (strncmp(name, LAYERS, strlen(LAYERS))) return false;
    const char *p = name + strlen(LAYERS);
    uint64_t v = 0;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.')) return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (*p != '.') return false;
    *n = v;
    *rest = p;
    return true;
}

static bool first_stage_name(const char *n) { return strncmp(n, "embedding.", 10) == 0; }
static bool last_stage_name(const char *n)
{
    return strncmp(n, "decoder.final_layernorm.", 24) == 0 || strncmp(n, "output_layer.", 13) == 0 ||
           strcmp(n, "decoder.final_layernorm") == 0;
}

tps_status tps_megatron_local_name(const char *global, const uint64_t *first, uint64_t pp, uint64_t *stage,
                                   char *local, size_t size, tps_error *err)
{
    uint64_t g;
    const char *rest;
    if (layer_of(global, &g, &rest)) {
        for (uint64_t p = 0; p < pp; p++)
            if (g >= first[p] && g < first[p + 1]) {
                *stage = p;
                snprintf(local, size, LAYERS "%" PRIu64 "%s", g - first[p], rest);
                return TPS_OK;
            }
        return tps_fail(err, TPS_EINVALID, "tensor '%s': layer %" PRIu64 " beyond the model's %" PRIu64, global, g,
                        first[pp]);
    }
    if (first_stage_name(global)) *stage = 0;
    else if (last_stage_name(global)) *stage = pp - 1;
    else
        return tps_fail(err, TPS_EINVALID,
                        "tensor '%s' is no Megatron-Core GPT name (embedding.*, decoder.layers.N.*, "
                        "decoder.final_layernorm.*, output_layer.*)",
                        global);
    snprintf(local, size, "%s", global);
    return TPS_OK;
}

tps_status tps_megatron_global_name(const char *local, const uint64_t *first, uint64_t pp, uint64_t stage,
                                    char *global, size_t size, tps_error *err)
{
    uint64_t n;
    const char *rest;
    if (layer_of(local, &n, &rest)) {
        if (first[stage] + n >= first[stage + 1])
            return tps_fail(err, TPS_EINVALID, "'%s': stage %" PRIu64 " holds %" PRIu64 " layers", local, stage,
                            first[stage + 1] - first[stage]);
        snprintf(global, size, LAYERS "%" PRIu64 "%s", first[stage] + n, rest);
        return TPS_OK;
    }
    if ((first_stage_name(local) && stage != 0) || (last_stage_name(local) && stage != pp - 1))
        return tps_fail(err, TPS_EINVALID, "'%s' in pipeline stage %" PRIu64 " of %" PRIu64, local, stage, pp);
    if (!first_stage_name(local) && !last_stage_name(local))
        return tps_fail(err, TPS_EINVALID, "'%s' is no Megatron-Core GPT name", local);
    snprintf(global, size, "%s", local);
    return TPS_OK;
}

void tps_megatron_file_name(const tps_megatron_out *mo, uint64_t r, uint64_t p, char *out, size_t size)
{
    if (mo->pp == 1) snprintf(out, size, "%s/mp_rank_%02" PRIu64 "/" TPS_MEGATRON_FILE, mo->iter_dir, r);
    else snprintf(out, size, "%s/mp_rank_%02" PRIu64 "_%03" PRIu64 "/" TPS_MEGATRON_FILE, mo->iter_dir, r, p);
}

void tps_megatron_out_free(tps_megatron_out *mo)
{
    if (!mo) return;
    free(mo->layer_first);
    free(mo->part_first);
    free(mo->src);
    free(mo->iter_dir);
    free(mo->tracker);
    free(mo->top_json);
    for (uint64_t p = 0; mo->entries_json && p < mo->pp; p++) free(mo->entries_json[p]);
    free(mo->entries_json);
    free(mo);
}

/* The args with the fields a new tp x pp changes; everything else re-emitted as it was. */
static tps_status updated_args(const tps_manifest *m, const tps_megatron_out_opts *o, const tps_megatron_out *mo,
                               uint64_t padded, tps_buf *out, tps_error *err)
{
    tps_json_doc *doc = NULL;
    tps_status st = tps_json_parse(o->args_json, strlen(o->args_json), "args", &doc, err);
    if (st) return st;
    const tps_json *root = tps_json_root(doc), *f = tps_megatron_args_fields(root);
    if (!f) {
        tps_json_doc_free(doc);
        return tps_fail(err, TPS_EINVALID, "args: not an argparse.Namespace of fields");
    }
    const tps_json *no = tps_json_get(root, "$newobj");
    bool uneven = false;
    for (uint64_t p = 1; p < mo->pp; p++)
        uneven |= mo->layer_first[p + 1] - mo->layer_first[p] != mo->layer_first[1] - mo->layer_first[0];
    struct {
        const char *key;
        int kind; /* 0 u64, 1 null, 2 the string "torch" where the source has the key */
        uint64_t v;
        bool done;
    } set[] = {
        {"tensor_model_parallel_size", 0, o->args_tp ? o->args_tp : m->tp, false},
        {"pipeline_model_parallel_size", 0, mo->pp, false},
        {"padded_vocab_size", padded ? 0 : 1, padded, false},
        {"decoder_first_pipeline_num_layers", uneven ? 0 : 1, mo->layer_first[1] - mo->layer_first[0], false},
        {"decoder_last_pipeline_num_layers", uneven ? 0 : 1, mo->layer_first[mo->pp] - mo->layer_first[mo->pp - 1],
         false},
        /* the format written, whatever the source's args said */
        {"ckpt_format", 2, 0, false},
    };
    size_t nset = sizeof set / sizeof set[0];
    tps_jw w;
    tps_jw_init(&w, out, false);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "$newobj");
    tps_jw_array_begin(&w);
    tps_jw_value(&w, no->u.array.items[0]);
    tps_jw_value(&w, no->u.array.items[1]);
    tps_jw_object_begin(&w);
    for (size_t i = 0; i < f->u.object.n; i++) {
        const char *k = f->u.object.keys[i]->u.string.s;
        tps_jw_key(&w, k);
        size_t j = 0;
        while (j < nset && strcmp(set[j].key, k)) j++;
        if (j == nset) {
            tps_jw_value(&w, f->u.object.values[i]);
            continue;
        }
        set[j].done = true;
        if (set[j].kind == 0) tps_jw_u64(&w, set[j].v);
        else if (set[j].kind == 2) tps_jw_string(&w, o->ckpt_format ? o->ckpt_format : "torch");
        else tps_jw_null(&w);
    }
    for (size_t j = 0; j < nset; j++) {
        if (set[j].done || set[j].kind != 0) continue; /* a null or format the source never had stays absent */
        tps_jw_key(&w, set[j].key);
        tps_jw_u64(&w, set[j].v);
    }
    tps_jw_object_end(&w);
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    tps_json_doc_free(doc);
    return out->oom ? tps_fail_oom(err, "writing args") : TPS_OK;
}

/* The module of a tensor or _extra_state key: the name without its last component. */
static size_t module_len(const char *n)
{
    const char *d = strrchr(n, '.');
    return d ? (size_t)(d - n) : 0;
}

bool tps_megatron_is_linear_weight(const char *n)
{
    static const char *const suffix[] = {".linear_qkv.weight", ".linear_proj.weight", ".linear_fc1.weight",
                                         ".linear_fc2.weight", NULL};
    if (strcmp(n, "output_layer.weight") == 0) return true;
    size_t len = strlen(n);
    for (int i = 0; suffix[i]; i++) {
        size_t k = strlen(suffix[i]);
        if (len > k && strcmp(n + len - k, suffix[i]) == 0) return true;
    }
    return false;
}

/* Stage p's model dict keys: its tensors (file names) in order, each module's _extra_state
 * None right after the module's last tensor, leftover extra keys at the end of the stage. */
static tps_status stage_entries(const tps_manifest *m, const tps_megatron_out *mo, uint64_t p, char **extra,
                                size_t nextra, bool *used, char **out, tps_error *err)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    tps_jw_array_begin(&w);
    char local[1024];
    for (size_t i = mo->part_first[p]; i < mo->part_first[p + 1]; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        tps_jw_string(&w, t->target_name ? t->target_name : t->name);
        size_t ml = module_len(t->name);
        bool module_ends = i + 1 == mo->part_first[p + 1] || module_len(m->tensors[i + 1].name) != ml ||
                           strncmp(m->tensors[i + 1].name, t->name, ml) != 0;
        if (!module_ends) continue;
        for (size_t k = 0; k < nextra; k++) {
            if (used[k] || module_len(extra[k]) != ml || strncmp(extra[k], t->name, ml)) continue;
            uint64_t s;
            tps_status st = tps_megatron_local_name(extra[k], mo->layer_first, mo->pp, &s, local, sizeof local, err);
            if (st) {
                tps_buf_release(&b);
                return st;
            }
            used[k] = true;
            tps_jw_string(&w, local);
        }
    }
    for (size_t k = 0; k < nextra; k++) {
        uint64_t s;
        tps_error e;
        tps_error_clear(&e);
        if (used[k] || tps_megatron_local_name(extra[k], mo->layer_first, mo->pp, &s, local, sizeof local, &e) ||
            s != p)
            continue;
        used[k] = true;
        tps_jw_string(&w, local);
    }
    tps_jw_array_end(&w);
    const char *s = tps_buf_cstr(&b);
    *out = s ? strdup(s) : NULL;
    tps_buf_release(&b);
    return *out ? TPS_OK : tps_fail_oom(err, "listing a file's keys");
}

typedef struct staged {
    tps_manifest_tensor t;
    uint64_t stage;
    size_t src, order;
} staged;

/* Within a stage: the embeddings, the layers in order, the final norm, the output layer
 * (GPTModel's module order); tensors of one layer keep their source order. */
static uint64_t stage_rank(const char *n, uint64_t *layer)
{
    const char *rest;
    *layer = 0;
    if (first_stage_name(n)) return 0;
    if (layer_of(n, layer, &rest)) return 1;
    return strncmp(n, "output_layer.", 13) == 0 ? 3 : 2;
}

static int cmp_staged(const void *a, const void *b)
{
    const staged *x = a, *y = b;
    uint64_t lx, ly, rx = stage_rank(x->t.name, &lx), ry = stage_rank(y->t.name, &ly);
    if (x->stage != y->stage) return x->stage < y->stage ? -1 : 1;
    if (rx != ry) return rx < ry ? -1 : 1;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

tps_status tps_megatron_out_plan(tps_manifest *m, const tps_megatron_out_opts *o, tps_megatron_out **out,
                                 tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK;
    staged *v = NULL;
    size_t nv = 0;
    char **extra = NULL;
    size_t nextra = 0;
    bool *used = NULL;
    tps_buf args = TPS_BUF_INIT, top = TPS_BUF_INIT;
    tps_megatron_out *mo = calloc(1, sizeof *mo);
    if (!mo) return tps_fail_oom(err, "planning a Megatron checkpoint");
    mo->tp = m->tp;
    mo->pp = o->pp;
    mo->layer_first = calloc(o->pp + 2, sizeof *mo->layer_first);
    mo->part_first = calloc(o->pp + 2, sizeof *mo->part_first);
    mo->entries_json = calloc(o->pp + 1, sizeof *mo->entries_json);
    if (!mo->layer_first || !mo->part_first || !mo->entries_json) {
        st = tps_fail_oom(err, "planning a Megatron checkpoint");
        goto cleanup;
    }
    TPS_CHECK(tps_megatron_stages(o->num_layers, o->pp, o->pp_layers, mo->layer_first, err));
    /* The tensors by stage, with the tied copy added or dropped. */
    const tps_manifest_tensor *embed = tps_manifest_find(m, "embedding.word_embeddings.weight");
    bool has_out = tps_manifest_find(m, "output_layer.weight") != NULL;
    bool want_copy = o->tied && o->pp > 1 && embed && !has_out;
    if (!(v = calloc(m->ntensors + 2, sizeof *v))) {
        st = tps_fail_oom(err, "planning a Megatron checkpoint");
        goto cleanup;
    }
    uint64_t padded = 0;
    /* the vocabulary padded for the tp the checkpoint is for */
    uint64_t pad_tp = o->args_tp ? o->args_tp : m->tp;
    for (size_t i = 0; i < m->ntensors + (want_copy ? 1 : 0); i++) {
        bool copy = i == m->ntensors;
        const tps_manifest_tensor *t = copy ? embed : &m->tensors[i];
        const char *name = copy ? "output_layer.weight" : t->name;
        if (o->tied && o->pp == 1 && strcmp(name, "output_layer.weight") == 0) continue; /* the embeddings serve */
        staged s = {.t = *t, .src = copy ? (size_t)(embed - m->tensors) : i, .order = i};
        char local[1024];
        TPS_CHECK(tps_megatron_local_name(name, mo->layer_first, o->pp, &s.stage, local, sizeof local, err));
        s.t.name = strdup(name);
        s.t.rule = t->rule ? strdup(t->rule) : NULL;
        s.t.target_name = strdup(local);
        s.t.target_stack = 0;
        bool vocab = s.t.part->pad && !s.t.part->replicated;
        if (vocab) padded = tps_megatron_padded_vocab(s.t.shape[s.t.part->dim], o->vocab_divisor, pad_tp);
        v[nv++] = s;
        if (!s.t.name || !s.t.target_name || (t->rule && !s.t.rule)) {
            st = tps_fail_oom(err, "planning a Megatron checkpoint");
            goto cleanup;
        }
        if (vocab)
            TPS_CHECK(tps_manifest_set_pad_multiple(
                m, &v[nv - 1].t, (o->vocab_divisor ? o->vocab_divisor : TPS_MEGATRON_VOCAB_DIVISOR) * pad_tp, err));
    }
    qsort(v, nv, sizeof *v, cmp_staged);
    if (!(mo->src = calloc(nv + 1, sizeof *mo->src))) {
        st = tps_fail_oom(err, "planning a Megatron checkpoint");
        goto cleanup;
    }
    for (uint64_t p = 0, i = 0; p <= o->pp; p++) {
        while (i < nv && v[i].stage < p) i++;
        mo->part_first[p] = i;
    }
    mo->part_first[o->pp] = nv;
    for (uint64_t p = 0; p < o->pp; p++)
        if (mo->part_first[p] == mo->part_first[p + 1]) {
            st = tps_fail(err, TPS_EARG, "pipeline stage %" PRIu64 " would hold no tensor", p);
            goto cleanup;
        }
    /* The _extra_state keys: the source's, or one per linear (Megatron-Core's local spec).
     * GPTModel's last stage always has output_layer (with tied embeddings at pp 1 it holds no
     * weight, yet its _extra_state is saved): the key stays on the last stage whatever happens
     * to the weight, and is added where a source that had _extra_state keys lacked it. */
    if (o->n_extra_state) {
        if (!(extra = calloc(o->n_extra_state + 2, sizeof *extra))) {
            st = tps_fail_oom(err, "planning a Megatron checkpoint");
            goto cleanup;
        }
        bool had = false;
        for (size_t k = 0; k < o->n_extra_state; k++) {
            had |= strcmp(o->extra_state[k], "output_layer._extra_state") == 0;
            if (!(extra[nextra++] = strdup(o->extra_state[k]))) {
                st = tps_fail_oom(err, "planning a Megatron checkpoint");
                goto cleanup;
            }
        }
        if (!had && !(extra[nextra++] = strdup("output_layer._extra_state"))) {
            st = tps_fail_oom(err, "planning a Megatron checkpoint");
            goto cleanup;
        }
    } else {
        if (!(extra = calloc(nv + 1, sizeof *extra))) {
            st = tps_fail_oom(err, "planning a Megatron checkpoint");
            goto cleanup;
        }
        for (size_t i = 0; i < nv; i++) {
            if (!tps_megatron_is_linear_weight(v[i].t.name)) continue;
            size_t ml = module_len(v[i].t.name);
            if (!(extra[nextra] = malloc(ml + 14))) {
                st = tps_fail_oom(err, "planning a Megatron checkpoint");
                goto cleanup;
            }
            snprintf(extra[nextra++], ml + 14, "%.*s._extra_state", (int)ml, v[i].t.name);
        }
        bool out_weight = false;
        for (size_t i = 0; i < nv; i++) out_weight |= strcmp(v[i].t.name, "output_layer.weight") == 0;
        if (!out_weight && !(extra[nextra++] = strdup("output_layer._extra_state"))) {
            st = tps_fail_oom(err, "planning a Megatron checkpoint");
            goto cleanup;
        }
    }
    /* The manifest in the new order. */
    for (size_t i = 0; i < m->ntensors; i++) {
        if (!m->strings) { /* else in the pool, dropped below */
            free(m->tensors[i].name);
            free(m->tensors[i].rule);
        }
        free(m->tensors[i].target_name);
    }
    free(m->tensors);
    tps_strpool_unref(m->strings); /* the staged tensors' names and rules are mallocs of their own */
    m->strings = NULL;
    if (!(m->tensors = calloc(nv + 1, sizeof *m->tensors))) {
        m->ntensors = 0;
        st = tps_fail_oom(err, "planning a Megatron checkpoint");
        goto cleanup;
    }
    for (size_t i = 0; i < nv; i++) {
        m->tensors[i] = v[i].t;
        mo->src[i] = v[i].src;
        v[i].t.name = v[i].t.rule = v[i].t.target_name = NULL;
    }
    m->ntensors = nv;
    free(m->target);
    if (!(m->target = strdup("megatron"))) {
        st = tps_fail_oom(err, "planning a Megatron checkpoint");
        goto cleanup;
    }
    tps_name_hash_free(&m->tensor_names);
    TPS_CHECK(tps_manifest_index(m, "the Megatron plan", err));
    if (!(used = calloc(nextra + 1, sizeof *used))) {
        st = tps_fail_oom(err, "planning a Megatron checkpoint");
        goto cleanup;
    }
    for (uint64_t p = 0; p < o->pp; p++) TPS_CHECK(stage_entries(m, mo, p, extra, nextra, used, &mo->entries_json[p], err));
    /* The iteration directory, the tracker and the top-level entries. */
    char iter[64];
    if (o->release) snprintf(iter, sizeof iter, "release");
    else if (o->iteration < 1) {
        st = tps_fail(err, TPS_EINVALID, "iteration %" PRId64 ": Megatron loads iterations from 1 (or release)",
                      o->iteration);
        goto cleanup;
    } else snprintf(iter, sizeof iter, "iter_%07" PRId64, o->iteration);
    mo->iter_dir = strdup(iter);
    if (o->release) mo->tracker = strdup("release");
    else if ((mo->tracker = malloc(32))) snprintf(mo->tracker, 32, "%" PRId64, o->iteration);
    tps_buf_puts(&top, "{\"args\":");
    if (o->args_json) {
        TPS_CHECK(updated_args(m, o, mo, padded, &args, err));
        tps_buf_puts(&top, tps_buf_cstr(&args));
    } else {
        tps_buf_puts(&top, "null");
    }
    tps_buf_printf(&top, ",\"checkpoint_version\":%s",
                   o->checkpoint_version_json ? o->checkpoint_version_json : "3.0");
    /* A release checkpoint's files carry no iteration of their own (Megatron's saver: none). */
    if (!o->release || o->iteration) tps_buf_printf(&top, ",\"iteration\":%" PRId64, o->iteration);
    tps_buf_puts(&top, "}");
    const char *ts = tps_buf_cstr(&top);
    if (!ts || !(mo->top_json = strdup(ts)) || !mo->iter_dir || !mo->tracker) {
        st = tps_fail_oom(err, "planning a Megatron checkpoint");
        goto cleanup;
    }
    *out = mo;
    mo = NULL;
cleanup:
    for (size_t i = 0; v && i < nv; i++) {
        free(v[i].t.name);
        free(v[i].t.rule);
        free(v[i].t.target_name);
    }
    free(v);
    for (size_t k = 0; extra && k < nextra; k++) free(extra[k]);
    free(extra);
    free(used);
    tps_buf_release(&args);
    tps_buf_release(&top);
    tps_megatron_out_free(mo);
    return st;
}

typedef struct out_files {
    const tps_megatron_out *mo;
    tps_kv meta[3];
} out_files;

static tps_status out_file_name(void *arg, uint64_t r, uint64_t tp, size_t p, char *out, size_t size, tps_error *err)
{
    (void)tp;
    (void)err;
    const out_files *f = arg;
    tps_megatron_file_name(f->mo, r, p, out, size);
    return TPS_OK;
}

static const tps_kv *out_file_meta(void *arg, uint64_t r, size_t p, size_t *n)
{
    (void)r;
    out_files *f = arg;
    f->meta[0] = (tps_kv){(char *)"torch.top", f->mo->top_json};
    f->meta[1] = (tps_kv){(char *)"torch.model_key", (char *)"model"};
    f->meta[2] = (tps_kv){(char *)"torch.model_entries", f->mo->entries_json[p]};
    *n = 3;
    return f->meta;
}

tps_status tps_megatron_write_tracker(const tps_outdir *od, const tps_megatron_out *mo, tps_error *err)
{
    char *path = tps_outdir_path(od, TPS_MEGATRON_TRACKER);
    if (!path) return tps_fail_oom(err, "writing the tracker");
    tps_status st = tps_write_file_atomic(path, mo->tracker, strlen(mo->tracker), err);
    free(path);
    return st;
}

static tps_status write_tracker(const tps_outdir *od, void *arg, tps_error *err)
{
    const out_files *f = arg;
    return tps_megatron_write_tracker(od, f->mo, err);
}

tps_status tps_megatron_write(tps_manifest *m, const tps_megatron_out *mo, const tps_sink *sink,
                              tps_global_read_fn read, void *ctx, const tps_write_opts *o, tps_error *err)
{
    out_files f = {.mo = mo};
    tps_write_opts wo = *o;
    tps_megatron_files_opts(&wo, sink, mo, mo->pp, out_file_name, out_file_meta, write_tracker, &f);
    return tps_write_set(m, read, ctx, &wo, err);
}

void tps_megatron_files_opts(tps_write_opts *wo, const tps_sink *sink, const tps_megatron_out *mo, size_t nparts,
                             tps_megatron_file_name_fn name, tps_megatron_file_meta_fn meta,
                             tps_megatron_before_publish_fn before, void *arg)
{
    wo->kind = TPS_OUT_SHARDSET;
    wo->cut.sink = sink;
    wo->cut.max_part_bytes = 0;
    wo->cut.name_template = NULL;
    wo->cut.part_first = mo->part_first;
    wo->cut.nparts = nparts;
    wo->cut.file_name = name;
    wo->cut.file_meta = meta;
    wo->cut.files_arg = arg;
    wo->before_publish = before;
    wo->before_publish_arg = arg;
}
