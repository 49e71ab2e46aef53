/* tpshard inspect's account of a Megatron checkpoint (formats/megatron/megatron_inspect.h). */
#include "megatron_inspect.h"

#include <string.h>

#include "../../lib/base/json.h"
#include "megatron_read.h"

/* The args shown in the summary: label, field. */
static const char *const shown[][2] = {
    {"layers", "num_layers"},
    {"hidden", "hidden_size"},
    {"heads", "num_attention_heads"},
    {"query groups", "num_query_groups"},
    {"group query attention", "group_query_attention"},
    {"kv_channels", "kv_channels"},
    {"ffn", "ffn_hidden_size"},
    {"swiglu", "swiglu"},
    {"vocab", "vocab_size"},
    {"padded vocab", "padded_vocab_size"},
    {"untied embeddings", "untie_embeddings_and_output_weights"},
    {"normalization", "normalization"},
    {"position embedding", "position_embedding_type"},
    {"params dtype", "params_dtype"},
};

/* A field's value as text: strings bare, {"$dtype": x} as x, "-" when absent. */
static void value_text(const tps_json *fields, const char *key, tps_buf *out)
{
    tps_buf_reset(out);
    const tps_json *v = fields ? tps_json_get(fields, key) : NULL;
    const tps_json *dt = v ? tps_json_get(v, "$dtype") : NULL;
    if (!v) tps_buf_puts(out, "-");
    else if (v->type == TPS_JSON_STRING) tps_buf_append(out, v->u.string.s, v->u.string.len);
    else if (dt && dt->type == TPS_JSON_STRING) tps_buf_append(out, dt->u.string.s, dt->u.string.len);
    else {
        tps_jw w;
        tps_jw_init(&w, out, false);
        tps_jw_value(&w, v);
    }
}

static void print_human(const tps_megatron_ckpt *c, const tps_json *fields, tps_buf *out)
{
    if (c->dist)
        tps_buf_printf(out, "%s: Megatron-Core checkpoint (torch_dist, saved at tp %u x pp %u), %s/%s, iteration %lld, "
               "checkpoint_version %s; its tensors are global, read as tp 1 x pp 1\n"
               "  left out: %zu optimizer tensor%s, %zu non-tensor entr%s (RNG, ...)\n",
               c->root, c->saved_tp, c->saved_pp, c->root, c->iter_dir, (long long)c->iteration, c->checkpoint_version_json,
               c->optimizer_tensors, c->optimizer_tensors == 1 ? "" : "s", c->other_entries,
               c->other_entries == 1 ? "y" : "ies");
    else
        tps_buf_printf(out, "%s: Megatron-LM checkpoint (torch format), %s/%s, iteration %lld, checkpoint_version %s, tp %u x pp %u, "
               "%u file%s\n",
               c->root, c->root, c->iter_dir, (long long)c->iteration, c->checkpoint_version_json, c->tp, c->pp,
               c->tp * c->pp, c->tp * c->pp == 1 ? "" : "s");
    if (c->legacy_names) tps_buf_printf(out, "  legacy language_model names, read as Megatron-Core names\n");
    tps_buf b = TPS_BUF_INIT;
    tps_buf_printf(out, "  model:");
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
        value_text(fields, shown[i][1], &b);
        tps_buf_printf(out, "%s %s %s", i ? "," : "", shown[i][0], tps_buf_cstr(&b) ? b.data : "?");
    }
    tps_buf_printf(out, "\n");
    tps_buf_release(&b);
    uint64_t params = 0, bytes = 0;
    for (size_t i = 0; i < (size_t)c->tp * c->pp; i++) {
        const tps_megatron_file *f = &c->files[i];
        if (c->dist)
            tps_buf_printf(out, "  global tensors: %s and %zu .distcp file%s, %zu tensor%s (decoder layers unstacked), %zu _extra_state "
                   "entr%s\n",
                   f->path, f->ix->nfiles, f->ix->nfiles == 1 ? "" : "s", f->ix->ntensors, f->ix->ntensors == 1 ? "" : "s",
                   f->n_extra_state, f->n_extra_state == 1 ? "y" : "ies");
        else
            tps_buf_printf(out, "  tp rank %u, pp rank %u: %s (%llu bytes), %zu tensor%s, %zu _extra_state entr%s\n", f->tp_rank,
                   f->pp_rank, f->path, (unsigned long long)f->ix->files[0].size, f->ix->ntensors,
                   f->ix->ntensors == 1 ? "" : "s", f->n_extra_state, f->n_extra_state == 1 ? "y" : "ies");
        for (size_t k = 0; k < f->ix->ntensors; k++) {
            const tps_tensor *t = &f->ix->tensors[k];
            char shape[256];
            tps_shape_str(t->shape, t->ndim, shape, sizeof shape);
            tps_buf_printf(out, "    %-58s %-11s %-22s %12llu bytes\n", t->name, tps_dtype_name(t->dtype), shape,
                   (unsigned long long)t->nbytes);
            params += t->nelem;
            bytes += t->nbytes;
        }
    }
    tps_buf_printf(out, "total: %llu parameters, %llu bytes in the rank files' model tensors\n", (unsigned long long)params,
           (unsigned long long)bytes);
}

static void print_json(const tps_megatron_ckpt *c, const tps_json *args, const tps_json *version, const tps_json *fields,
                       tps_buf *out)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, true);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "format");
    tps_jw_string(&w, "megatron");
    tps_jw_key(&w, "backend");
    tps_jw_string(&w, c->dist ? "torch_dist" : "torch");
    if (c->dist) {
        tps_jw_key(&w, "saved_tp");
        tps_jw_u64(&w, c->saved_tp);
        tps_jw_key(&w, "saved_pp");
        tps_jw_u64(&w, c->saved_pp);
        tps_jw_key(&w, "optimizer_tensors_left_out");
        tps_jw_u64(&w, c->optimizer_tensors);
        tps_jw_key(&w, "non_tensor_entries_left_out");
        tps_jw_u64(&w, c->other_entries);
    }
    tps_jw_key(&w, "root");
    tps_jw_string(&w, c->root);
    tps_jw_key(&w, "iter_dir");
    tps_jw_string(&w, c->iter_dir);
    tps_jw_key(&w, "release");
    tps_jw_bool(&w, c->release);
    tps_jw_key(&w, "iteration");
    tps_jw_i64(&w, c->iteration);
    tps_jw_key(&w, "checkpoint_version");
    tps_jw_value(&w, version);
    tps_jw_key(&w, "tp");
    tps_jw_u64(&w, c->tp);
    tps_jw_key(&w, "pp");
    tps_jw_u64(&w, c->pp);
    tps_jw_key(&w, "legacy_names");
    tps_jw_bool(&w, c->legacy_names);
    tps_jw_key(&w, "model");
    tps_jw_object_begin(&w);
    for (size_t i = 0; fields && i < sizeof shown / sizeof shown[0]; i++) {
        const tps_json *v = tps_json_get(fields, shown[i][1]);
        if (!v) continue;
        tps_jw_key(&w, shown[i][1]);
        tps_jw_value(&w, v);
    }
    tps_jw_object_end(&w);
    tps_jw_key(&w, "args");
    tps_jw_value(&w, args);
    tps_jw_key(&w, "files");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < (size_t)c->tp * c->pp; i++) {
        const tps_megatron_file *f = &c->files[i];
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "tp_rank");
        tps_jw_u64(&w, f->tp_rank);
        tps_jw_key(&w, "pp_rank");
        tps_jw_u64(&w, f->pp_rank);
        tps_jw_key(&w, "path");
        tps_jw_string(&w, f->path);
        tps_jw_key(&w, "bytes");
        tps_jw_u64(&w, f->ix->files[0].size);
        tps_jw_key(&w, "extra_state");
        tps_jw_array_begin(&w);
        for (size_t k = 0; k < f->n_extra_state; k++) tps_jw_string(&w, f->extra_state[k]);
        tps_jw_array_end(&w);
        tps_jw_key(&w, "tensors");
        tps_jw_array_begin(&w);
        for (size_t k = 0; k < f->ix->ntensors; k++) {
            const tps_tensor *t = &f->ix->tensors[k];
            tps_jw_object_begin(&w);
            tps_jw_tensor_head(&w, t->name, t->dtype, t->ndim, t->shape);
            tps_jw_key(&w, "bytes");
            tps_jw_u64(&w, t->nbytes);
            tps_jw_object_end(&w);
        }
        tps_jw_array_end(&w);
        tps_jw_object_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    const char *s = tps_buf_cstr(&b);
    if (s) tps_buf_printf(out, "%s\n", s);
    tps_buf_release(&b);
}

tps_status tps_megatron_inspect(const char *path, bool json, tps_buf *out, tps_error *err)
{
    tps_megatron_ckpt *c = NULL;
    tps_json_doc *args = NULL, *version = NULL;
    const tps_json *fields = NULL;
    tps_status st = tps_megatron_open(path, &c, err);
    if (!st) st = tps_megatron_args(c, &args, &fields, err);
    if (!st) st = tps_json_parse(c->checkpoint_version_json, strlen(c->checkpoint_version_json), "checkpoint_version", &version, err);
    if (!st) {
        if (json) print_json(c, tps_json_root(args), tps_json_root(version), fields, out);
        else print_human(c, fields, out);
    }
    tps_json_doc_free(args);
    tps_json_doc_free(version);
    tps_megatron_close(c);
    return st;
}
