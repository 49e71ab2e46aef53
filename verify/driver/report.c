/* verify's JSON reports (verify/driver/report.h). */
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/base/buf.h"
#include "lib/base/dtype.h"

static void json_block(tps_jw *w, const tps_block *b)
{
    tps_jw_object_begin(w);
    const struct {
        const char *key;
        uint64_t v;
    } sizes[] = {{"hidden", b->hidden},         {"heads", b->heads},     {"kv_heads", b->kv_heads},
                 {"head_dim", b->head_dim},     {"intermediate", b->intermediate},
                 {"experts", b->experts},       {"top_k", b->top_k}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        tps_jw_key(w, sizes[i].key);
        tps_jw_u64(w, sizes[i].v);
    }
    const struct {
        const char *key;
        double v;
    } reals[] = {{"norm_eps", b->norm_eps}, {"rope_theta", b->rope_theta}, {"rotary_pct", b->rotary_pct}};
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
        tps_jw_key(w, reals[i].key);
        tps_jw_double(w, reals[i].v);
    }
    tps_jw_object_end(w);
}

static void dump_matrix(tps_jw *w, const double *v, uint64_t rows, uint64_t cols)
{
    tps_jw_array_begin(w);
    for (uint64_t r = 0; r < rows; r++) {
        tps_jw_array_begin(w);
        for (uint64_t c = 0; c < cols; c++) tps_jw_double(w, v[r * cols + c]);
        tps_jw_array_end(w);
    }
    tps_jw_array_end(w);
}

static void json_stage(tps_jw *w, const tps_verify_stage *s)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "max_abs_err");
    tps_jw_double(w, s->max_abs);
    tps_jw_key(w, "rel_err");
    tps_jw_double(w, s->rel);
    tps_jw_key(w, "rtol");
    tps_jw_double(w, s->rtol);
    tps_jw_key(w, "atol");
    tps_jw_double(w, s->atol);
    tps_jw_key(w, "pass");
    tps_jw_bool(w, s->pass);
    tps_jw_object_end(w);
}

/* What failed, on which rank (null when no one rank), and why. */
static void json_failure(tps_jw *w, const char *stage, int64_t culprit, const char *detail)
{
    tps_jw_key(w, "failed_stage");
    tps_jw_string(w, stage);
    tps_jw_key(w, "rank");
    if (culprit >= 0) tps_jw_i64(w, culprit);
    else tps_jw_null(w);
    tps_jw_key(w, "detail");
    tps_jw_string(w, detail);
}

void tps_vreport_layer(tps_jw *w, const tps_verify_result *r)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "layer");
    tps_jw_u64(w, r->layer);
    tps_jw_key(w, "dtype");
    tps_jw_string(w, tps_dtype_name(r->dtype));
    tps_jw_key(w, "seconds");
    tps_jw_double(w, r->seconds);
    tps_jw_key(w, "pass");
    tps_jw_bool(w, r->pass);
    if (r->upload_bytes > 0) {
        tps_jw_key(w, "upload_bytes");
        tps_jw_double(w, r->upload_bytes);
        tps_jw_key(w, "upload_gbps");
        tps_jw_double(w, r->upload_seconds > 0 ? r->upload_bytes / r->upload_seconds / 1e9 : 0);
        tps_jw_key(w, "layer_seconds");
        tps_jw_double(w, r->layer_seconds);
    }
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        tps_jw_key(w, tps_verify_stage_name(s));
        json_stage(w, &r->stage[s]);
    }
    if (!r->pass) json_failure(w, tps_verify_stage_name(r->failed_stage), r->culprit, r->detail);
    tps_jw_object_end(w);
}

static void json_whole(tps_jw *w, const tps_verify_whole *r)
{
    tps_jw_object_begin(w);
    const struct {
        const char *key;
        uint64_t v;
    } nums[] = {{"tokens", r->tokens},          {"vocab", r->vocab},           {"padded_vocab", r->padded_vocab},
                {"ranks", r->ranks},            {"logits", r->tokens * r->vocab}, {"top1_agree", r->top1_agree},
                {"top1_ties", r->top1_ties}};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        tps_jw_key(w, nums[i].key);
        tps_jw_u64(w, nums[i].v);
    }
    tps_jw_key(w, "tied_lm_head");
    tps_jw_bool(w, r->tied);
    tps_jw_key(w, "pos_embed");
    tps_jw_bool(w, r->pos_embed);
    tps_jw_key(w, "dtype");
    tps_jw_string(w, tps_dtype_name(r->chain.dtype));
    tps_jw_key(w, "seconds");
    tps_jw_double(w, r->seconds);
    tps_jw_key(w, "embedding");
    json_stage(w, &r->embed_cmp);
    tps_jw_key(w, "logits_cmp");
    json_stage(w, &r->logits_cmp);
    tps_jw_key(w, "pass");
    tps_jw_bool(w, r->pass);
    if (!r->pass) json_failure(w, r->failed, r->culprit, r->detail);
    tps_jw_object_end(w);
}

void tps_vreport_begin(tps_jw *w, const tps_vreport_run *run)
{
    const tps_vbackend_info *info = run->info;
    tps_jw_object_begin(w);
    tps_jw_key(w, "dir");
    tps_jw_string(w, run->dir);
    tps_jw_key(w, "tp");
    tps_jw_u64(w, run->tp);
    tps_jw_key(w, "backend");
    tps_jw_string(w, info->device);
    tps_jw_key(w, "launcher");
    tps_jw_string(w, info->launcher);
    tps_jw_key(w, "processes");
    tps_jw_u64(w, info->processes);
    tps_jw_key(w, "backend_detail");
    tps_jw_string(w, info->desc);
    tps_jw_key(w, "gemm");
    tps_jw_string(w, info->gemm);
    tps_jw_key(w, "reference_kernel");
    tps_jw_string(w, info->reference);
    if (strcmp(info->device, "cpu") != 0) {
        tps_jw_key(w, "devices");
        tps_jw_u64(w, info->devices);
        tps_jw_key(w, "ranks_per_device");
        tps_jw_u64(w, info->ranks_per_device);
        tps_jw_key(w, "nccl");
        tps_jw_bool(w, info->nccl);
    }
    tps_jw_key(w, "kind");
    tps_jw_string(w, tps_block_kind_name(run->block->kind));
    tps_jw_key(w, "reference");
    tps_jw_string(w, run->source ? "source" : "reassembled from shards");
    if (run->source) {
        tps_jw_key(w, "source");
        tps_jw_string(w, run->source);
    }
    tps_jw_key(w, "config");
    tps_jw_string(w, run->config);
    tps_jw_key(w, "block");
    json_block(w, run->block);
    tps_jw_key(w, "tokens");
    tps_jw_u64(w, run->tokens);
    tps_jw_key(w, "seed");
    tps_jw_u64(w, run->seed);
    tps_jw_key(w, "whole_model");
    tps_jw_bool(w, run->whole);
    tps_jw_key(w, "layers");
    tps_jw_array_begin(w);
}

void tps_vreport_end(tps_jw *w, const tps_vreport_checked *c, const tps_verify_whole *whole, bool pass)
{
    tps_jw_array_end(w);
    tps_jw_key(w, "checked");
    tps_jw_object_begin(w);
    tps_jw_key(w, "layers");
    tps_jw_u64(w, c->layers);
    tps_jw_key(w, "ranks");
    tps_jw_u64(w, c->tp);
    tps_jw_key(w, "tensors");
    tps_jw_u64(w, c->tensors);
    tps_jw_key(w, "bytes");
    tps_jw_u64(w, c->bytes);
    tps_jw_key(w, "mismatched_layers");
    tps_jw_u64(w, c->mismatched);
    if (whole) {
        tps_jw_key(w, "tokens");
        tps_jw_u64(w, whole->tokens);
        tps_jw_key(w, "logits");
        tps_jw_u64(w, whole->tokens * whole->vocab);
    }
    tps_jw_object_end(w);
    if (whole) {
        tps_jw_key(w, "whole_model");
        json_whole(w, whole);
    }
    tps_jw_key(w, "pass");
    tps_jw_bool(w, pass);
    tps_jw_object_end(w);
}

void tps_vreport_dump_begin(tps_jw *w, tps_buf *out)
{
    tps_jw_init(w, out, false);
    tps_jw_object_begin(w);
    tps_jw_key(w, "layers");
    tps_jw_array_begin(w);
}

void tps_vreport_dump_end(tps_jw *w)
{
    tps_jw_array_end(w);
    tps_jw_object_end(w);
}

void tps_vreport_dump_layer(tps_jw *w, uint64_t layer, const tps_verify_result *r)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "layer");
    tps_jw_u64(w, layer);
    tps_jw_key(w, "x");
    dump_matrix(w, r->x, r->tokens, r->hidden);
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        tps_jw_key(w, tps_verify_stage_name(s));
        dump_matrix(w, r->ref_out[s], r->tokens, r->hidden);
    }
    tps_jw_object_end(w);
}

tps_status tps_vreport_write_logits(const char *path, const tps_verify_whole *r, tps_error *err)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "tokens");
    tps_jw_array_begin(&w);
    for (uint64_t t = 0; t < r->tokens; t++) tps_jw_u64(&w, r->ids[t]);
    tps_jw_array_end(&w);
    tps_jw_key(&w, "vocab");
    tps_jw_u64(&w, r->vocab);
    tps_jw_key(&w, "reference");
    dump_matrix(&w, r->ref_logits, r->tokens, r->vocab);
    tps_jw_key(&w, "ranks");
    tps_jw_array_begin(&w);
    for (uint64_t t = 0; t < r->tokens; t++) {
        tps_jw_array_begin(&w);
        for (uint64_t v = 0; v < r->vocab; v++) tps_jw_double(&w, r->logits[t * r->vocab + v]);
        tps_jw_array_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    const char *s = tps_buf_cstr(&b);
    FILE *f = s ? fopen(path, "w") : NULL;
    tps_status st = TPS_OK;
    if (!s) st = tps_fail_oom(err, "the logits dump");
    else if (!f) st = tps_fail_errno(err, errno, "%s: cannot create", path);
    else if (fputs(s, f) == EOF || fputc('\n', f) == EOF) st = tps_fail(err, TPS_EIO, "%s: cannot write the logits", path);
    if (f && fclose(f) != 0 && st == TPS_OK) st = tps_fail(err, TPS_EIO, "%s: cannot write the logits", path);
    tps_buf_release(&b);
    return st;
}
