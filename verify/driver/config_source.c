/* verify's model description from a shard set (verify/driver/config_source.h): the config.json
 * candidates, the hyper-parameters, and what only the manifest records. */
#include "config_source.h"

#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/base/buf.h"
#include "lib/set/manifest.h"
#include "../load/names.h"
#include "pass.h"

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* config.json in path when it is a directory, else beside it; NUL-terminated into b. */
static void add_candidate(tps_buf *b, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        tps_buf_printf(b, "%s/config.json", path);
    } else {
        char *copy = strdup(path);
        if (copy) tps_buf_printf(b, "%s/config.json", dirname(copy));
        free(copy);
    }
    tps_buf_putc(b, '\0');
}

/* config.json beside the source given (in it when it is a directory), else beside the source
 * the set was split from, else in the shard set's directory; NULL when none is a file. */
static char *find_config(const char *dir, const char *source, const tps_manifest *m)
{
    tps_buf b = TPS_BUF_INIT;
    if (source) add_candidate(&b, source);
    if (m->source.path) add_candidate(&b, m->source.path);
    tps_buf_printf(&b, "%s/config.json", dir);
    tps_buf_putc(&b, '\0');
    char *found = NULL;
    for (size_t off = 0; !b.oom && off < b.len && !found; off += strlen(b.data + off) + 1)
        if (is_file(b.data + off)) found = strdup(b.data + off);
    tps_buf_release(&b);
    return found;
}

static tps_status read_hyperparameters(const char *dir, const char *config, const char *source,
                                       const tps_manifest *m, tps_layout *l, char **from, tps_error *err)
{
    tps_status st = TPS_OK;
    tps_buf what = TPS_BUF_INIT;
    char *path = config ? strdup(config) : NULL;
    if (config && !path) return tps_fail_oom(err, "verify");
    if (!path && m->config_keys) {
        tps_buf_printf(&what, "%s/" TPS_MANIFEST_NAME " (config recorded from %s)", dir, m->config_path);
        if (!tps_buf_cstr(&what)) return tps_fail_oom(err, "verify");
        st = tps_layout_apply_config_text(l, m->config_keys, strlen(m->config_keys), what.data, NULL, err);
        *from = what.data;
        return st;
    }
    if (!path) path = find_config(dir, source, m);
    if (path) st = tps_layout_read_config(l, path, NULL, err);
    *from = path ? path : strdup("the block kind's defaults");
    if (!*from) st = tps_fail_oom(err, "verify");
    return st;
}

/* The megatron_gpt presets' block names a dense MLP; a Megatron MoE set (router, SequentialMLP
 * local_experts or TEGroupedMLP weight{e}) would fail as a missing linear_fc1, so it is
 * refused by name. */
static tps_status megatron_moe_refusal(const tps_manifest *m, tps_error *err)
{
    if (!m->layout_name || strncmp(m->layout_name, "preset:megatron_gpt", 19) != 0) return TPS_OK;
    for (size_t i = 0; i < m->ntensors; i++)
        if (strstr(m->tensors[i].name, ".mlp.router.") || strstr(m->tensors[i].name, ".mlp.experts."))
            return tps_fail(err, TPS_EINVALID,
                            "verify does not compute Megatron MoE layers yet ('%s'); check, reshard and merge "
                            "take the set",
                            m->tensors[i].name);
    return TPS_OK;
}

tps_status tps_vdriver_layout(const char *dir, const tps_shardset *ss, const char *config, const char *source,
                              tps_layout **l, char **from, tps_error *err)
{
    if (!tps_manifest_holds_all(ss->m)) {
        char held[256];
        tps_manifest_held_str(ss->m, held, sizeof held);
        return tps_fail(err, TPS_EINVALID,
                        "%s is a partial set: it holds ranks %s of %llu, the other ranks' files are on other nodes; "
                        "verify needs every rank: run it on a directory holding the whole set (or check this "
                        "share with 'tpshard check %s')",
                        dir, held, (unsigned long long)ss->m->tp, dir);
    }
    tps_status st = megatron_moe_refusal(ss->m, err);
    if (st) return st;
    const char *text = ss->m->layout_text ? ss->m->layout_text : "";
    st = tps_layout_parse(text, strlen(text), ss->m->layout_name ? ss->m->layout_name : "manifest layout", l, err);
    if (st) return st;
    return read_hyperparameters(dir, config, source, ss->m, *l, from, err);
}

/* An index of the manifest's global shapes, for the layout's shape inference when no
 * source is given.  Its tensors are never read (reader_data marks them as not plain
 * ranges of a file). */
static tps_status manifest_shapes(const tps_shardset *ss, tps_index **out, tps_error *err)
{
    tps_status st;
    tps_index *ix = NULL;
    TPS_CHECK(tps_index_new(ss->dir, "manifest", &ix, err));
    for (size_t i = 0; i < ss->m->ntensors; i++) {
        const tps_manifest_tensor *t = &ss->m->tensors[i];
        TPS_CHECK(tps_index_add_tensor(ix, t->name, strlen(t->name), t->dtype, t->ndim, t->shape, 0, 0, t, err));
    }
    *out = ix;
    return TPS_OK;
cleanup:
    tps_index_free(ix);
    return st;
}

/* Sizes a layout infers from config.json, when none is at hand, are still in the manifest:
 * head_dim is the unit of o_proj's cut in every layout that cuts attention by heads, and a
 * fused [q;k;v] records its segments' lengths. */
static void sizes_from_manifest(const tps_shardset *ss, tps_block *b)
{
    bool oom;
    char *name = tps_verify_tensor_name(b, TPS_ROLE_O_W, 0, 0, &oom);
    const tps_manifest_tensor *t = name ? tps_manifest_find(ss->m, name) : NULL;
    free(name);
    if (!b->head_dim && !b->heads && t && !t->part->replicated && t->part->nseg == 1 && t->part->seg[0].unit > 1)
        b->head_dim = t->part->seg[0].unit;
    name = tps_verify_tensor_name(b, TPS_ROLE_QKV_W, 0, 0, &oom);
    t = name ? tps_manifest_find(ss->m, name) : NULL;
    free(name);
    if (!b->head_dim || !t || t->part->replicated || t->part->nseg != 3) return;
    if (!b->heads) b->heads = t->part->seg[0].length / b->head_dim;
    if (!b->kv_heads) b->kv_heads = t->part->seg[1].length / b->head_dim;
}

/* Megatron-Core >= 0.16 at tp above the query groups stores each rank a plain row chunk of
 * its group's [q; k; v] block (the cut the manifest records: the group's block one segment),
 * not its heads with the group's k and v as Falcon's cut does; Megatron's ranks then
 * all-gather the qkv activations (verify/ranks/qkv_chunks.c).  Only Megatron runs such a cut: the
 * same cut of a Falcon checkpoint is wrong for the engines that serve it, and fails. */
static void qkv_cut_from_manifest(const tps_shardset *ss, tps_block *b)
{
    bool oom;
    const char *ln = ss->m->layout_name;
    if (!ln || strncmp(ln, "preset:megatron_gpt", 19) != 0) return;
    char *name = b->qkv_grouped ? tps_verify_tensor_name(b, TPS_ROLE_QKV_W, 0, 0, &oom) : NULL;
    const tps_manifest_tensor *t = name ? tps_manifest_find(ss->m, name) : NULL;
    free(name);
    if (t && !t->part->replicated && t->part->nseg == 1 && ss->m->tp > (t->part->groups ? t->part->groups : 1))
        b->qkv_row_chunks = true;
}

tps_status tps_vdriver_block(const char *dir, const tps_shardset *ss, tps_layout *l, const tps_index *src_ix,
                             tps_index **shape_ix, tps_block *out, tps_error *err)
{
    tps_status st;
    if (src_ix) {
        st = tps_layout_infer_sizes(l, src_ix, err);
    } else {
        st = manifest_shapes(ss, shape_ix, err);
        if (st == TPS_OK) st = tps_layout_infer_sizes(l, *shape_ix, err);
    }
    if (st) return st;
    if (!tps_layout_block(l))
        return tps_fail(err, TPS_EINVALID, "%s: the layout it was cut with (%s) has no block: section to verify with",
                        dir, ss->m->layout_name ? ss->m->layout_name : "?");
    *out = *tps_layout_block(l);
    sizes_from_manifest(ss, out);
    qkv_cut_from_manifest(ss, out);
    return TPS_OK;
}
