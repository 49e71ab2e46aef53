#include "megatron_dist.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/base/checked.h"
#include "../../lib/base/json.h"
#include "../../lib/registry/megatron_args.h"
#include "../../lib/registry/megatron_dist_out.h"
#include "../dcp/dcp.h"
#include "../torch/pickle.h"
#include "../torch/pickle_json.h"
#include "../torch/torch.h"
#include "../view.h"

#define MAX_METADATA_JSON 65536
#define LAYERS "decoder.layers."

/* Layer l of a stacked tensor: bytes [base, base + its bytes) of src in the DCP index. */
typedef struct layer_ref {
    const tps_tensor *src;
    uint64_t base;
} layer_ref;

typedef struct dist_state {
    tps_index *dcp;
    layer_ref *refs; /* never reallocated once tensors point into it */
    size_t nrefs;
} dist_state;

static tps_status dist_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const dist_state *s = ix->state;
    const layer_ref *r = t->reader_data;
    return tps_tensor_read(s->dcp, r->src, r->base + off, buf, len, err);
}

static void dist_release(void *state)
{
    dist_state *s = state;
    if (!s) return;
    tps_index_free(s->dcp);
    free(s->refs);
    free(s);
}

static const tps_reader_ops dist_ops = {dist_read, dist_release};

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool has_file(const char *dir, const char *name)
{
    char p[4352];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

bool tps_megatron_dist_is_dir(const char *dir)
{
    /* metadata.json alone could be anyone's file: with common.pt or .metadata beside it,
     * it is what dist_checkpointing.save writes. */
    return has_file(dir, "metadata.json") && (has_file(dir, "common.pt") || has_file(dir, ".metadata"));
}

/* metadata.json must name the torch_dist backend: zarr (deprecated) and others store
 * their shards differently. */
static tps_status check_backend(const char *iter_path, tps_error *err)
{
    char path[4352], *text = NULL;
    size_t len;
    tps_json_doc *doc = NULL;
    snprintf(path, sizeof path, "%s/metadata.json", iter_path);
    tps_status st = tps_read_file(path, MAX_METADATA_JSON, "a metadata.json", &text, &len, err);
    if (!st) st = tps_json_parse(text, len, path, &doc, err);
    if (!st) {
        const tps_json *b = tps_json_get(tps_json_root(doc), "sharded_backend");
        if (!b || b->type != TPS_JSON_STRING)
            st = tps_fail(err, TPS_EINVALID, "%s: no \"sharded_backend\" string; not a Megatron-Core distributed checkpoint", path);
        else if (strcmp(b->u.string.s, "torch_dist") != 0)
            st = tps_fail(err, TPS_EINVALID, "%s: sharded_backend \"%s\": only torch_dist checkpoints are read", path,
                          b->u.string.s);
    }
    tps_json_doc_free(doc);
    free(text);
    return st;
}

/* ---- common.pt: args, checkpoint_version, iteration ---- */

typedef struct common_ctx {
    tps_megatron_ckpt *c;
    const char *path;
} common_ctx;

static tps_status common_pick(void *ctx, tps_torch_file *tf, const tps_pv *top, tps_error *err)
{
    (void)tf;
    common_ctx *cc = ctx;
    const tps_pv *args = tps_pv_get(top, "args"), *ver = tps_pv_get(top, "checkpoint_version"),
                 *it = tps_pv_get(top, "iteration");
    if (!args || args->kind != TPS_PV_OBJECT)
        return tps_fail(err, TPS_EINVALID, "%s: no 'args' (argparse.Namespace) at the top level; the model's sizes are unknown",
                        cc->path);
    if (it && it->kind != TPS_PV_INT) return tps_fail(err, TPS_EINVALID, "%s: the top-level 'iteration' is not an int", cc->path);
    cc->c->iteration = it ? it->u.i : 0;
    tps_status st = tps_pickle_json_str(args, cc->path, &cc->c->args_json, err);
    if (!st) st = tps_pickle_json_str(ver ? ver : &(tps_pv){.kind = TPS_PV_NONE}, cc->path, &cc->c->checkpoint_version_json, err);
    return st;
}

static tps_status read_common(tps_megatron_ckpt *c, const char *iter_path, tps_error *err)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/common.pt", iter_path);
    tps_index *tmp = NULL;
    common_ctx cc = {c, path};
    tps_status st = tps_index_new(path, "torch", &tmp, err);
    if (!st) st = tps_view_state_init(tmp, err);
    if (!st) st = tps_torch_add_file_pick(tmp, path, common_pick, &cc, err);
    tps_index_free(tmp);
    return st;
}

/* ---- the global tensors, layer by layer ---- */

static bool stacked(const char *name) { return starts(name, LAYERS) && !isdigit((unsigned char)name[strlen(LAYERS)]); }

/* One _extra_state entry ("<key>._extra_state/shard_<l>_<L>" for a stacked layer key) as the
 * legacy name, recorded once. */
static tps_status add_extra(tps_megatron_file *f, const char *entry, tps_error *err)
{
    const char *slash = strchr(entry, '/');
    size_t keylen = slash ? (size_t)(slash - entry) : strlen(entry);
    char key[1024], name[1200];
    if (keylen >= sizeof key) return TPS_OK;
    memcpy(key, entry, keylen);
    key[keylen] = '\0';
    unsigned long long l = 0;
    if (stacked(key) && !(slash && sscanf(slash, "/shard_%llu_", &l) == 1 && tps_megatron_dist_layer_name(name, sizeof name, l, key + strlen(LAYERS))))
        return TPS_OK; /* not a per-layer entry we can place: it is not needed to read the model */
    if (!stacked(key)) snprintf(name, sizeof name, "%s", key);
    for (size_t i = 0; i < f->n_extra_state; i++)
        if (strcmp(f->extra_state[i], name) == 0) return TPS_OK;
    return tps_megatron_file_add_extra(f, name, err);
}

static tps_status add_layers(tps_index *ix, dist_state *s, const tps_tensor *t, uint64_t layers, tps_error *err)
{
    const char *rest = t->name + strlen(LAYERS);
    if (strstr(rest, "experts."))
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%s': MoE expert tensors of torch_dist checkpoints are not read yet",
                        ix->path, t->name);
    if (t->ndim < 1 || t->shape[0] != layers) {
        char shape[256];
        tps_shape_str(t->shape, t->ndim, shape, sizeof shape);
        return tps_fail(err, TPS_EINVALID,
                        "%s: tensor '%s' is %s: a decoder layer tensor stacks args.num_layers = %llu layers on its first "
                        "dimension", ix->path, t->name, shape, (unsigned long long)layers);
    }
    /* Each layer's slice holds bytes: args.num_layers cannot then exceed the bytes the files
     * hold, which bounds the index this makes (an empty tensor would let a hostile num_layers
     * ask for any number of entries). */
    uint64_t each = t->nbytes / layers;
    if (each == 0 || t->nbytes % layers)
        return tps_fail(err, TPS_EINVALID,
                        "%s: tensor '%s' (%llu bytes) does not divide into args.num_layers = %llu non-empty layers",
                        ix->path, t->name, (unsigned long long)t->nbytes, (unsigned long long)layers);
    char name[1200];
    for (uint64_t l = 0; l < layers; l++) {
        if (!tps_megatron_dist_layer_name(name, sizeof name, l, rest))
            return tps_fail(err, TPS_EINVALID, "%s: tensor name '%s' too long", ix->path, t->name);
        tps_status st;
        if (!t->reader_data) { /* one chunk holds it all: layer l is a plain range */
            st = tps_index_add_tensor(ix, name, strlen(name), t->dtype, t->ndim - 1, t->shape + 1, t->file,
                                      t->offset + l * each, NULL, err);
        } else {
            layer_ref *r = &s->refs[s->nrefs++];
            *r = (layer_ref){t, l * each};
            st = tps_index_add_tensor(ix, name, strlen(name), t->dtype, t->ndim - 1, t->shape + 1, 0, 0, r, err);
        }
        if (st) return st;
    }
    return TPS_OK;
}

static tps_status build_view(tps_megatron_ckpt *c, tps_megatron_file *f, tps_index *dcp, uint64_t layers, tps_error *err)
{
    dist_state *s = calloc(1, sizeof *s);
    uint64_t nrefs = 1;
    bool fits = true; /* args.num_layers > 0 (tps_megatron_args_read) */
    for (size_t i = 0; i < dcp->ntensors && fits; i++)
        fits = tps_add_u64(nrefs, stacked(dcp->tensors[i].name) ? layers : 1, &nrefs);
    if (!fits) {
        free(s);
        tps_index_free(dcp);
        return tps_fail(err, TPS_EINVALID, "%s: args.num_layers = %llu does not fit %zu tensors' layers", f->path,
                        (unsigned long long)layers, dcp->ntensors);
    }
    if (!s || nrefs > SIZE_MAX / sizeof *s->refs || !(s->refs = calloc((size_t)nrefs, sizeof *s->refs))) {
        free(s);
        tps_index_free(dcp);
        return tps_fail_oom(err, "reading a torch_dist checkpoint");
    }
    s->dcp = dcp;
    tps_status st = tps_index_new(f->path, "megatron-torch_dist", &f->ix, err);
    if (st) {
        dist_release(s);
        return st;
    }
    f->ix->ops = &dist_ops;
    f->ix->state = s;
    /* The same files in the same order: a plain range keeps its file id. */
    for (size_t k = 0; k < dcp->nfiles; k++) {
        uint32_t id;
        TPS_CHECK(tps_index_add_file(f->ix, dcp->files[k].path, &id, err));
    }
    for (size_t i = 0; i < dcp->ntensors; i++) {
        const tps_tensor *t = &dcp->tensors[i];
        if (starts(t->name, "optimizer.")) {
            c->optimizer_tensors++;
        } else if (stacked(t->name)) {
            TPS_CHECK(add_layers(f->ix, s, t, layers, err));
        } else if (!t->reader_data) {
            TPS_CHECK(tps_index_add_tensor(f->ix, t->name, strlen(t->name), t->dtype, t->ndim, t->shape, t->file,
                                           t->offset, NULL, err));
        } else {
            layer_ref *r = &s->refs[s->nrefs++];
            *r = (layer_ref){t, 0};
            TPS_CHECK(tps_index_add_tensor(f->ix, t->name, strlen(t->name), t->dtype, t->ndim, t->shape, 0, 0, r, err));
        }
    }
    const char *const *names;
    size_t nb = tps_dcp_bytes_entries(dcp, &names);
    for (size_t i = 0; i < nb; i++) {
        if (strstr(names[i], "._extra_state")) TPS_CHECK(add_extra(f, names[i], err));
        else c->other_entries++;
    }
cleanup:
    return st;
}

tps_status tps_megatron_dist_open(tps_megatron_ckpt *c, const char *iter_path, tps_error *err)
{
    tps_index *dcp = NULL;
    tps_megatron_model model;
    tps_status st = check_backend(iter_path, err);
    if (!st) st = read_common(c, iter_path, err);
    if (!st) st = tps_megatron_args_read(c->args_json, iter_path, &model, err);
    if (st) return st;
    if (!(c->files = calloc(1, sizeof *c->files))) return tps_fail_oom(err, "reading a torch_dist checkpoint");
    c->tp = c->pp = 1;
    c->dist = true;
    c->saved_tp = (uint32_t)model.tp;
    c->saved_pp = (uint32_t)model.pp;
    tps_megatron_file *f = &c->files[0];
    size_t n = strlen(iter_path);
    if (!(f->path = malloc(n + sizeof "/.metadata"))) return tps_fail_oom(err, "reading a torch_dist checkpoint");
    memcpy(f->path, iter_path, n);
    memcpy(f->path + n, "/.metadata", sizeof "/.metadata");
    if ((st = tps_dcp_open(iter_path, &dcp, err))) return st;
    return build_view(c, f, dcp, model.layers, err);
}
