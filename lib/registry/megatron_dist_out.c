#include "megatron_dist_out.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/buf.h"
#include "../base/json.h"
#include "../engine/outdir.h"
#include "../engine/publish.h"
#include "../partition/partition.h"

#define LAYERS "decoder.layers."

/* What megatron-core 0.16.1 writes in metadata.json (dist_checkpointing/core.py). */
#define METADATA_JSON                                                                                                  \
    "{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1, \"common_backend\": \"torch\", "          \
    "\"common_backend_version\": 1}"

/* TransformerEngine's names of the layer norms (torch_dist's, whatever the layer spec) and
 * the legacy local spec's. */
static const char *const te_norm[][2] = {
    {"self_attention.linear_qkv.layer_norm_", "input_layernorm."},
    {"mlp.linear_fc1.layer_norm_", "pre_mlp_layernorm."},
};

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

bool tps_megatron_dist_layer_name(char *out, size_t size, uint64_t l, const char *rest)
{
    for (size_t k = 0; k < sizeof te_norm / sizeof te_norm[0]; k++)
        if (starts(rest, te_norm[k][0]))
            return snprintf(out, size, LAYERS "%" PRIu64 ".%s%s", l, te_norm[k][1], rest + strlen(te_norm[k][0])) <
                   (int)size;
    return snprintf(out, size, LAYERS "%" PRIu64 ".%s", l, rest) < (int)size;
}

bool tps_megatron_dist_key(const char *name, char *key, size_t size, uint64_t *layer, bool *stacked)
{
    const char *p = name + strlen(LAYERS);
    char *end;
    *layer = 0;
    *stacked = starts(name, LAYERS) && *p >= '0' && *p <= '9';
    if (!*stacked) return snprintf(key, size, "%s", name) < (int)size;
    *layer = strtoull(p, &end, 10);
    const char *rest = *end == '.' ? end + 1 : end;
    for (size_t k = 0; k < sizeof te_norm / sizeof te_norm[0]; k++)
        if (starts(rest, te_norm[k][1]))
            return snprintf(key, size, LAYERS "%s%s", te_norm[k][0], rest + strlen(te_norm[k][1])) < (int)size;
    return snprintf(key, size, LAYERS "%s", rest) < (int)size;
}

typedef struct dist_files {
    const tps_megatron_out *mo;
    tps_megatron_common_fn write_common;
    char *chunks, *bytes;
    tps_kv meta[2];
} dist_files;

/* dcp.chunks (formats/dcp/dcp_write.h): each tensor under its key, a layer at its offset on
 * the stacked axis; dcp.bytes: the _extra_state entries of each layer's linears. */
static tps_status chunk_meta(const tps_manifest *m, uint64_t num_layers, dist_files *f, tps_error *err)
{
    tps_buf cb = TPS_BUF_INIT, bb = TPS_BUF_INIT;
    tps_jw c, b;
    tps_jw_init(&c, &cb, false);
    tps_jw_init(&b, &bb, false);
    tps_jw_array_begin(&c);
    tps_jw_array_begin(&b);
    char key[1200];
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        uint64_t layer, shape[TPS_MAX_DIMS], size[TPS_MAX_DIMS + 1], offsets[TPS_MAX_DIMS + 1] = {0};
        bool stacked;
        if (!tps_megatron_dist_key(t->name, key, sizeof key, &layer, &stacked) ||
            (stacked && (layer >= num_layers || t->ndim >= TPS_MAX_DIMS))) {
            tps_buf_release(&cb);
            tps_buf_release(&bb);
            return tps_fail(err, TPS_EINVALID, "tensor '%s' has no place in a torch_dist checkpoint of %" PRIu64 " layers",
                            t->name, num_layers);
        }
        tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, 0, shape);
        int lead = stacked ? 1 : 0;
        size[0] = num_layers;
        offsets[0] = layer;
        memcpy(size + lead, shape, (size_t)t->ndim * sizeof *shape);
        tps_jw_array_begin(&c);
        tps_jw_string(&c, key);
        tps_jw_u64_array(&c, size, (size_t)(t->ndim + lead));
        tps_jw_u64_array(&c, offsets, (size_t)(t->ndim + lead));
        tps_jw_array_end(&c);
        if (!stacked || !tps_megatron_is_linear_weight(t->name)) continue;
        /* "<module>._extra_state/shard_<l>_<L>": the module's key without ".weight" */
        char extra[1300];
        snprintf(extra, sizeof extra, "%.*s._extra_state/shard_%" PRIu64 "_%" PRIu64, (int)(strlen(key) - 7), key, layer,
                 num_layers);
        tps_jw_array_begin(&b);
        tps_jw_string(&b, extra);
        tps_jw_array_begin(&b);
        tps_jw_null(&b);
        tps_jw_array_end(&b);
        tps_jw_array_end(&b);
    }
    tps_jw_array_end(&c);
    tps_jw_array_end(&b);
    const char *cs = tps_buf_cstr(&cb), *bs = tps_buf_cstr(&bb);
    f->chunks = cs ? strdup(cs) : NULL;
    f->bytes = bs ? strdup(bs) : NULL;
    tps_buf_release(&cb);
    tps_buf_release(&bb);
    return f->chunks && f->bytes ? TPS_OK : tps_fail_oom(err, "planning a torch_dist checkpoint");
}

static tps_status dist_file_name(void *arg, uint64_t r, uint64_t tp, size_t p, char *out, size_t size, tps_error *err)
{
    (void)r;
    (void)tp;
    (void)p;
    (void)err;
    const dist_files *f = arg;
    snprintf(out, size, "%s/" TPS_MEGATRON_DIST_FILE, f->mo->iter_dir);
    return TPS_OK;
}

static const tps_kv *dist_file_meta(void *arg, uint64_t r, size_t p, size_t *n)
{
    (void)r;
    (void)p;
    dist_files *f = arg;
    f->meta[0] = (tps_kv){(char *)"dcp.chunks", f->chunks};
    f->meta[1] = (tps_kv){(char *)"dcp.bytes", f->bytes};
    *n = 2;
    return f->meta;
}

/* The tracker, metadata.json and common.pt, after the DCP. */
static tps_status write_rest(const tps_outdir *od, void *arg, tps_error *err)
{
    const dist_files *f = arg;
    tps_status st = tps_megatron_write_tracker(od, f->mo, err);
    tps_buf name = TPS_BUF_INIT;
    char *path = NULL;
    if (!st) {
        tps_buf_printf(&name, "%s/metadata.json", f->mo->iter_dir);
        path = tps_buf_cstr(&name) ? tps_outdir_path(od, name.data) : NULL;
        st = path ? tps_write_file_atomic(path, METADATA_JSON, strlen(METADATA_JSON), err)
                  : tps_fail_oom(err, "writing metadata.json");
        free(path);
        path = NULL;
    }
    if (!st) {
        name.len = 0;
        tps_buf_printf(&name, "%s/common.pt", f->mo->iter_dir);
        path = tps_buf_cstr(&name) ? tps_outdir_path(od, name.data) : NULL;
        st = path ? f->write_common(path, f->mo->top_json, err) : tps_fail_oom(err, "writing common.pt");
        free(path);
    }
    tps_buf_release(&name);
    return st;
}

tps_status tps_megatron_dist_write(tps_manifest *m, const tps_megatron_out *mo, uint64_t num_layers,
                                   const tps_sink *sink, tps_megatron_common_fn write_common, tps_global_read_fn read,
                                   void *ctx, const tps_write_opts *o, tps_error *err)
{
    if (m->tp != 1 || mo->pp != 1)
        return tps_fail(err, TPS_EINVALID, "a torch_dist checkpoint is written from a tp 1 x pp 1 plan of global tensors");
    dist_files f = {.mo = mo, .write_common = write_common};
    tps_status st = chunk_meta(m, num_layers, &f, err);
    if (!st) {
        tps_write_opts wo = *o;
        tps_megatron_files_opts(&wo, sink, mo, 1, dist_file_name, dist_file_meta, write_rest, &f);
        st = tps_write_set(m, read, ctx, &wo, err);
    }
    free(f.chunks);
    free(f.bytes);
    return st;
}
