/* A Megatron checkpoint as the Hugging Face checkpoint it holds (lib/registry/megatron_as_hf.h). */
#include "megatron_as_hf.h"

#include <stdlib.h>
#include <string.h>

#include "../base/buf.h"
#include "../engine/publish.h"
#include "../set/unsharded.h"

tps_status tps_megatron_as_hf_build(tps_megatron_as_hf *a, const char *src, const char *args_json, tps_error *err)
{
    tps_status st = tps_manifest_unsharded(a->ss->m, &a->um, err);
    if (st == TPS_OK) st = tps_megatron_hf_choose(args_json, &a->preset, &a->arch, &a->model_type, err);
    const tps_manifest_tensor *emb = a->um ? tps_manifest_find(a->um, "embedding.word_embeddings.weight") : NULL;
    if (st == TPS_OK && !emb) st = tps_fail(err, TPS_EINVALID, "%s: no embedding.word_embeddings.weight", src);
    if (st == TPS_OK) st = tps_layout_load_preset(a->preset, &a->l, err);
    if (st == TPS_OK) st = tps_megatron_hf_load(tps_layout_text(a->l), a->preset, &a->h, err);
    if (st == TPS_OK)
        st = tps_megatron_hf_config(a->h, args_json, a->arch, a->model_type, emb->shape[0], &a->config, err);
    if (st == TPS_OK) st = tps_layout_apply_config_text(a->l, a->config, strlen(a->config), "the config.json from args", NULL, err);
    if (st == TPS_OK) {
        a->ss->compare_replicas = true;
        st = tps_megatron_hf_unview(a->h, a->l, a->um, tps_shardset_source_read, a->ss, &a->hm, &a->rd, err);
    }
    return st;
}

void tps_megatron_as_hf_free(tps_megatron_as_hf *a)
{
    if (!a) return;
    free(a->preset);
    free(a->arch);
    free(a->model_type);
    free(a->config);
    tps_megatron_unview_free(a->rd);
    tps_megatron_hf_free(a->h);
    tps_layout_free(a->l);
    tps_manifest_free(a->hm);
    tps_manifest_free(a->um);
    if (a->ms && a->ms_free) a->ms_free(a->ms);
    tps_shardset_free(a->ss);
    free(a);
}

static tps_status as_hf_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_megatron_as_hf *a = ix->state;
    size_t i = (size_t)((const tps_manifest_tensor *)t->reader_data - a->hm->tensors);
    return tps_megatron_hf_unview_read(a->rd, i, off, buf, len, err);
}

static void as_hf_release(void *state) { tps_megatron_as_hf_free(state); }

static const tps_reader_ops as_hf_ops = {as_hf_read, as_hf_release};

tps_status tps_megatron_as_hf_index(tps_megatron_as_hf *a, tps_index **out, tps_error *err)
{
    *out = NULL;
    tps_index *ix = NULL;
    tps_status st = tps_index_new(a->ss->dir, "megatron-hf", &ix, err);
    if (st) {
        tps_megatron_as_hf_free(a);
        return st;
    }
    ix->ops = &as_hf_ops;
    ix->state = a;
    for (size_t i = 0; st == TPS_OK && i < a->hm->ntensors; i++) {
        const tps_manifest_tensor *t = &a->hm->tensors[i];
        st = tps_index_add_tensor(ix, t->name, strlen(t->name), t->dtype, t->ndim, t->shape, 0, 0, t, err);
    }
    if (st) {
        tps_index_free(ix);
        return st;
    }
    *out = ix;
    return TPS_OK;
}

const char *tps_megatron_as_hf_config_of(const tps_index *ix)
{
    return ix && ix->ops == &as_hf_ops ? ((const tps_megatron_as_hf *)ix->state)->config : NULL;
}

tps_status tps_megatron_config_into(const tps_outdir *od, void *text, tps_error *err)
{
    char *path = tps_outdir_path(od, "config.json");
    if (!path) return tps_fail_oom(err, "writing config.json");
    tps_status st = tps_write_file_atomic(path, text, strlen(text), err);
    free(path);
    return st;
}

tps_status tps_megatron_config_beside(const char *out, const char *text, tps_error *err)
{
    tps_buf path = TPS_BUF_INIT;
    const char *slash = strrchr(out, '/');
    if (slash) tps_buf_printf(&path, "%.*s/config.json", (int)(slash - out), out);
    else tps_buf_puts(&path, "config.json");
    const char *p = tps_buf_cstr(&path);
    tps_status st = p ? tps_write_file_atomic(p, text, strlen(text), err) : tps_fail_oom(err, "writing config.json");
    tps_buf_release(&path);
    return st;
}
