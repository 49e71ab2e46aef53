/* reshard of a Megatron-LM checkpoint planned (lib/registry/megatron_reshard.h). */
#include "megatron_reshard.h"

#include <stdio.h>
#include <stdlib.h>

tps_status tps_megatron_reshard_repad(tps_manifest *m, const tps_megatron_reshard_src *s, uint64_t tp,
                                      const char *dir, const tps_partition ***saved, tps_error *err)
{
    uint64_t q = s->model->vocab_divisor * tp;
    const tps_partition **old = calloc(m->ntensors + 1, sizeof *old);
    *saved = NULL;
    if (!old) return tps_fail_oom(err, "resharding");
    for (size_t i = 0; i < m->ntensors; i++) {
        tps_manifest_tensor *t = &m->tensors[i];
        if (!t->part->pad || t->part->replicated) continue;
        tps_status st = TPS_OK;
        if (!s->vocab_known && t->shape[t->part->dim] % q)
            st = tps_fail(err, TPS_EARG,
                          "%s: the args carry no vocab_size, and the %llu padded vocabulary rows are no multiple "
                          "of make_vocab_size_divisible_by x tp = %llu: give the true vocabulary with --vocab-size V",
                          dir, (unsigned long long)t->shape[t->part->dim], (unsigned long long)q);
        if (st == TPS_OK) {
            old[i] = t->part;
            st = tps_manifest_set_pad_multiple(m, t, q, err);
        }
        if (st) {
            tps_megatron_reshard_restore(m, old);
            return st;
        }
    }
    *saved = old;
    return TPS_OK;
}

void tps_megatron_reshard_restore(tps_manifest *m, const tps_partition **saved)
{
    for (size_t i = 0; saved && i < m->ntensors; i++)
        if (saved[i]) m->tensors[i].part = saved[i];
    free(saved);
}

void tps_megatron_reshard_out_opts(const tps_manifest *src, const tps_megatron_reshard_src *s, uint64_t tp,
                                   uint64_t pp, const char *pp_layers, bool dist, char *split, size_t split_size,
                                   tps_megatron_out_opts *oo)
{
    *oo = (tps_megatron_out_opts){.pp = pp, .pp_layers = pp_layers, .num_layers = s->model->layers,
                                  .vocab_divisor = s->model->vocab_divisor, .tied = !s->model->untied,
                                  .args_json = s->args_json, .checkpoint_version_json = s->checkpoint_version_json,
                                  .iteration = s->iteration, .release = s->release, .extra_state = s->extra_state,
                                  .n_extra_state = s->n_extra_state};
    if (dist) {
        oo->pp = 1;
        oo->pp_layers = NULL;
        oo->args_tp = tp;
        oo->ckpt_format = "torch_dist";
    } else if (pp_layers && !pp) {
        oo->pp = 1;
        for (const char *c = pp_layers; *c; c++) oo->pp += *c == ',';
    }
    if (!dist && !oo->pp) {
        oo->pp = src->files[src->nfiles - 1].part + 1;
        size_t n = 0;
        split[0] = '\0';
        for (uint64_t p = 0; p < oo->pp; p++)
            n += (size_t)snprintf(split + n, split_size - n, "%s%llu", p ? "," : "",
                                  (unsigned long long)(s->layer_first[p + 1] - s->layer_first[p]));
        oo->pp_layers = n < split_size ? split : NULL;
    }
}

static tps_status reshard_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_megatron_reshard *r = ctx;
    return tps_shardset_source_read(r->ss, r->src[i], off, buf, len, err);
}

tps_status tps_megatron_reshard_check(void *arg, size_t i, uint32_t crc, tps_error *err)
{
    const tps_megatron_reshard *r = arg;
    return tps_shardset_source_check(r->ss, r->src[i], crc, err);
}

tps_status tps_megatron_reshard_plan(tps_shardset *ss, tps_manifest *m, const tps_megatron_out_opts *oo, bool dist,
                                     const tps_megatron_sinks *sinks, tps_megatron_reshard **out, tps_error *err)
{
    tps_megatron_reshard *r = calloc(1, sizeof *r);
    size_t *pre = NULL;
    tps_status st = TPS_OK;
    *out = r;
    if (!r || !(pre = calloc(m->ntensors + 1, sizeof *pre))) {
        st = tps_fail_oom(err, "resharding");
        goto done;
    }
    r->ss = ss;
    for (size_t i = 0; i < m->ntensors; i++) pre[i] = (size_t)(tps_manifest_find(ss->m, m->tensors[i].name) - ss->m->tensors);
    if ((st = tps_megatron_out_plan(m, oo, &r->mo, err)) != TPS_OK) goto done;
    if (!(r->src = calloc(m->ntensors + 1, sizeof *r->src))) {
        st = tps_fail_oom(err, "resharding");
        goto done;
    }
    for (size_t i = 0; i < m->ntensors; i++) r->src[i] = pre[r->mo->src[i]];
    ss->compare_replicas = true;
    r->plan = (tps_megatron_plan){.m = m, .mo = r->mo, .dist = dist, .num_layers = oo->num_layers, .sinks = sinks,
                                  .read = reshard_read, .ctx = r};
done:
    free(pre);
    return st;
}

void tps_megatron_reshard_free(tps_megatron_reshard *r)
{
    if (!r) return;
    free(r->src);
    tps_megatron_out_free(r->mo);
    free(r);
}
