/* One verify run (verify/driver/run.h), its steps in the order whose output the command line
 * prints as it goes (tests/cli/verify*.sh check the bytes, messages and exit codes). */
#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/open/checkpoint.h"
#include "formats/open/shardset.h"
#include "lib/base/buf.h"
#include "lib/base/json.h"
#include "lib/layout/layout.h"
#include "config_source.h"
#include "report.h"

/* What the run holds until tps_verify_outcome_close. */
struct tps_verify_state {
    const tps_verify_request *req;
    const tps_verify_observer *obs;
    tps_vbackend *be;
    tps_vbackend_info info;
    tps_shardset *ss;
    tps_layout *l;
    tps_index *src_ix, *shape_ix;
    tps_vsource *ranks;
    tps_vrank_src *rsrc;
    tps_vsource ref;
    tps_block b;
    char *config;
    FILE *dump;
    tps_buf jb, db;
    tps_jw jw, dw;
    bool json; /* this process builds the --json report */
    uint64_t first;
};

#define TELL(s, fn, ...) \
    do { \
        if ((s)->obs && (s)->obs->fn) (s)->obs->fn((s)->obs->arg, __VA_ARGS__); \
    } while (0)

/* The set, its layout and block, the reference and this process's ranks; the layers to run. */
static tps_status open_set(struct tps_verify_state *s, tps_verify_outcome *out, tps_error *err)
{
    const tps_verify_request *q = s->req;
    tps_status st = TPS_OK;
    TPS_CHECK(tps_shardset_open(q->dir, &s->ss, err));
    TPS_CHECK(tps_vdriver_layout(q->dir, s->ss, q->config, q->source, &s->l, &s->config, err));
    if (q->source) TPS_CHECK(tps_checkpoint_open(q->source, &s->src_ix, err));
    TPS_CHECK(tps_vdriver_block(q->dir, s->ss, s->l, s->src_ix, &s->shape_ix, &s->b, err));
    uint64_t T = out->tp = s->ss->m->tp;
    s->ranks = calloc(T, sizeof *s->ranks);
    s->rsrc = calloc(T, sizeof *s->rsrc);
    if (!s->ranks || !s->rsrc) return tps_fail_oom(err, "the rank table");
    for (uint64_t r = 0; r < T; r++) {
        const tps_index *rix;
        if (!tps_vbackend_holds_rank(s->be, r)) continue;
        TPS_CHECK(tps_shardset_open_rank(s->ss, r, &rix, err));
        s->rsrc[r] = (tps_vrank_src){s->ss, rix};
        s->ranks[r] = tps_vsource_rank(&s->rsrc[r]);
    }
    s->ref = s->src_ix ? tps_vsource_index(s->src_ix) : tps_vsource_shardset(s->ss);
    uint64_t nlayers;
    TPS_CHECK(tps_verify_count_layers(&s->b, &s->ref, &nlayers, err));
    if (!q->layer) out->count = nlayers;
    else if (q->first >= nlayers)
        return tps_fail(err, TPS_EARG, "--layer %s: the model has %llu layer%s (0 to %llu)", q->layer,
                        (unsigned long long)nlayers, nlayers == 1 ? "" : "s", (unsigned long long)(nlayers - 1));
cleanup:
    return st;
}

/* The backend started for the set's ranks, the dump file open, the report begun. */
static tps_status begin(struct tps_verify_state *s, tps_verify_outcome *out, tps_error *err)
{
    const tps_verify_request *q = s->req;
    tps_status st = TPS_OK;
    TPS_CHECK(tps_vbackend_start(s->be, out->tp, st, err));
    tps_vbackend_get_info(s->be, &s->info);
    if (q->dump && out->root) {
        s->dump = fopen(q->dump, "w");
        if (!s->dump) return tps_fail_errno(err, errno, "%s: cannot create", q->dump);
        tps_vreport_dump_begin(&s->dw, &s->db);
    }
    tps_jw_init(&s->jw, &s->jb, true);
    if (s->json) {
        tps_vreport_run run = {q->dir, out->tp, &s->info, &s->b, q->source, s->config, q->tokens, q->seed, q->whole};
        tps_vreport_begin(&s->jw, &run);
    }
    tps_verify_run_info info = {q->dir, q->source, s->config, out->tp, s->first, out->count, &s->b, s->ss->m,
                                &s->info, out->root};
    out->started = true;
    TELL(s, begin, &info);
cleanup:
    return st;
}

/* Layer first + i: run, counted, told, dumped; the first that differs kept. */
static tps_status one_layer(struct tps_verify_state *s, tps_verify_outcome *out, const tps_verify_opts *vo,
                            uint64_t i, tps_error *err)
{
    uint64_t layer = s->first + i;
    tps_verify_result res;
    TELL(s, at, i, false);
    tps_status st = tps_verify_layer(&s->b, layer, out->tp, &s->ref, s->ranks, vo, &res, err);
    if (st) return st;
    TELL(s, at, i, true);
    out->layers_run++;
    out->checked_tensors += res.checked_tensors;
    out->checked_bytes += res.checked_bytes;
    if (s->json) tps_vreport_layer(&s->jw, &res);
    TELL(s, layer, &res);
    if (i + 1 < out->count) TELL(s, at, i + 1, false);
    if (s->dump) tps_vreport_dump_layer(&s->dw, layer, &res);
    out->mismatched += !res.pass;
    if (!res.pass && out->all_pass) {
        out->all_pass = false;
        out->failed_layer = layer;
        out->bad = res;
        out->bad.x = NULL;
        out->bad.ref_out[0] = out->bad.ref_out[1] = NULL;
    }
    tps_verify_result_release(&res);
    return TPS_OK;
}

/* The layers, and with --whole-model the embedding before them and the head after. */
static tps_status run_layers(struct tps_verify_state *s, tps_verify_outcome *out, tps_error *err)
{
    const tps_verify_request *q = s->req;
    const tps_verify_observer *obs = s->obs;
    tps_status st = TPS_OK;
    tps_verify_opts vo = {.backend = s->be, .tokens = q->tokens, .seed = q->seed, .rtol = q->rtol, .atol = q->atol,
                          .keep_reference = s->dump != NULL, .shards = s->ss, .on_stage = obs ? obs->stage : NULL,
                          .stage_arg = obs ? obs->arg : NULL};
    /* The whole model: the embedding before the layers, which then carry its output on. */
    tps_verify_opts wo = vo;
    wo.on_stage = NULL;
    wo.keep_reference = q->dump_logits != NULL;
    if (q->whole) {
        TPS_CHECK(tps_verify_whole_begin(&s->b, out->tp, &s->ref, s->ranks, &wo, &out->whole, err));
        vo.chain = &out->whole.chain;
    }
    for (uint64_t i = 0; i < out->count; i++) TPS_CHECK(one_layer(s, out, &vo, i, err));
    if (obs && obs->layers_end) obs->layers_end(obs->arg);
    if (q->whole) {
        TPS_CHECK(tps_verify_whole_end(&s->b, out->tp, &s->ref, s->ranks, &wo, &out->whole, err));
        out->checked_tensors += out->whole.checked_tensors;
        out->checked_bytes += out->whole.checked_bytes;
        TELL(s, whole, &out->whole);
        if (out->root && q->dump_logits) TPS_CHECK(tps_vreport_write_logits(q->dump_logits, &out->whole, err));
    }
cleanup:
    return st;
}

/* The first layer, or the whole model's stage, that differs, in a line. */
static void mismatch_line(tps_verify_outcome *out)
{
    char *m = out->mismatch_line;
    size_t size = sizeof out->mismatch_line;
    if (!out->all_pass) {
        const tps_verify_result *bad = &out->bad;
        const tps_verify_stage *fs = &bad->stage[bad->failed_stage];
        snprintf(m, size, "mismatch in layer %llu, %s stage (max abs err %.3g, rel err %.3g; rtol %.3g, atol %.3g): %s",
                 (unsigned long long)out->failed_layer, tps_verify_stage_name(bad->failed_stage), fs->max_abs, fs->rel,
                 fs->rtol, fs->atol, bad->detail);
        return;
    }
    const tps_verify_whole *w = &out->whole;
    const tps_verify_stage *fs = strcmp(w->failed, "embedding") == 0 ? &w->embed_cmp : &w->logits_cmp;
    snprintf(m, size, "mismatch in the whole model, %s stage (max abs err %.3g, rel err %.3g; rtol %.3g, atol %.3g): %s",
             w->failed, fs->max_abs, fs->rel, fs->rtol, fs->atol, w->detail);
}

/* After the comparisons: a pass must have run something; the report, the dump, the verdict. */
static tps_status conclude(struct tps_verify_state *s, tps_verify_outcome *out, tps_error *err)
{
    const tps_verify_request *q = s->req;
    /* A pass must have run something: every layer asked for, each with tensors checked. */
    if (out->root && (out->layers_run == 0 || out->layers_run != out->count || out->checked_tensors == 0))
        return tps_fail(err, TPS_EINVALID, "%s: nothing was verified (%llu of %llu layers run, %llu tensors checked)",
                        q->dir, (unsigned long long)out->layers_run, (unsigned long long)out->count,
                        (unsigned long long)out->checked_tensors);
    if (s->json) {
        tps_vreport_checked c = {out->layers_run, out->tp, out->checked_tensors, out->checked_bytes,
                                 out->mismatched};
        tps_vreport_end(&s->jw, &c, q->whole ? &out->whole : NULL, out->all_pass && (!q->whole || out->whole.pass));
        out->json = tps_buf_cstr(&s->jb);
    }
    TELL(s, report, out);
    if (s->dump) {
        tps_vreport_dump_end(&s->dw);
        const char *text = tps_buf_cstr(&s->db);
        FILE *f = s->dump;
        s->dump = NULL;
        if (!text || fputs(text, f) == EOF || fputc('\n', f) == EOF || fclose(f) != 0)
            return tps_fail(err, TPS_EIO, "%s: cannot write the reference dump", q->dump);
    }
    out->mismatch = !out->all_pass || (q->whole && out->root && !out->whole.pass);
    if (out->mismatch) mismatch_line(out);
    return out->mismatch ? TPS_EMISMATCH : TPS_OK;
}

tps_status tps_verify_run(const tps_verify_request *req, const tps_verify_observer *obs, tps_verify_outcome *out,
                          tps_error *err)
{
    memset(out, 0, sizeof *out);
    out->root = out->all_pass = true;
    struct tps_verify_state *s = out->state = calloc(1, sizeof *s);
    if (!s) {
        out->report_error = true;
        return tps_fail_oom(err, "verify");
    }
    *s = (struct tps_verify_state){.req = req, .obs = obs, .jb = TPS_BUF_INIT, .db = TPS_BUF_INIT,
                                   .first = req->layer ? req->first : 0};
    out->count = req->layer ? 1 : 0;
    tps_status st = TPS_OK;
    /* First, so that under MPI every later failure is agreed between the processes. */
    TPS_CHECK(tps_vbackend_open(&req->backend, &s->be, err));
    /* Under MPI only rank 0 reports. */
    out->root = tps_vbackend_is_root(s->be);
    TELL(s, opened, out->root);
    s->json = req->json && out->root;
    TPS_CHECK(open_set(s, out, err));
    TPS_CHECK(begin(s, out, err));
    TPS_CHECK(run_layers(s, out, err));
    st = conclude(s, out, err);
cleanup:
    if (obs && obs->layers_end) obs->layers_end(obs->arg);
    /* Every process ends with the same status; a failure of another process is reported by
     * that process alone. */
    st = tps_vbackend_finish(s->be, st, err);
    /* A numeric mismatch (out->mismatch) the command prints from the outcome; one of the
     * shards' bytes (err set) it reports as any error. */
    out->report_error = st != TPS_OK && (st != TPS_EMISMATCH || err->code == TPS_EMISMATCH) &&
                        !tps_vbackend_failed_elsewhere(s->be);
    return st;
}

void tps_verify_outcome_close(tps_verify_outcome *out)
{
    struct tps_verify_state *s = out->state;
    if (!s) return;
    tps_vbackend_close(s->be);
    if (s->dump) fclose(s->dump);
    tps_buf_release(&s->jb);
    tps_buf_release(&s->db);
    free(s->ranks);
    free(s->rsrc);
    free(s->config);
    tps_index_free(s->src_ix);
    tps_index_free(s->shape_ix);
    tps_layout_free(s->l);
    tps_shardset_free(s->ss);
    tps_verify_whole_release(&out->whole);
    free(s);
    out->state = NULL;
    out->json = NULL;
}
