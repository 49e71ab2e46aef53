/* verify's progress line (cmd/verify_progress.h). */
#include "verify_progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/verify.h"

void tps_cmd_layer_progress_begin(tps_cmd_layer_progress *lp, const tps_manifest *m, const tps_block *b, uint64_t first,
                                 uint64_t count, bool show)
{
    memset(lp, 0, sizeof *lp);
    tps_progress_begin(&lp->s, "verify");
    lp->s.enabled = lp->s.enabled && show;
    if (!lp->s.enabled) return;
    lp->first = first;
    lp->prefix = calloc(count, sizeof *lp->prefix);
    lp->bytes = calloc(count, sizeof *lp->bytes);
    lp->count = lp->prefix && lp->bytes ? count : 0;
    for (uint64_t i = 0; i < lp->count; i++) lp->prefix[i] = tps_verify_layer_prefix(b, first + i);
    tps_vdriver_layer_bytes(m, lp->prefix, lp->count, lp->bytes);
    for (uint64_t i = 0; i < lp->count; i++) lp->p.total += lp->bytes[i];
    lp->s.enabled = lp->count > 0; /* without the tables (out of memory) the run goes on silently */
}

/* i: the index of the layer among those verified; done: whether it has finished.  A layer
 * runs for seconds without an update, so its start is drawn at once (and redrawn after its
 * report line), not left to the rate limit. */
void tps_cmd_layer_progress_at(tps_cmd_layer_progress *lp, uint64_t i, bool done)
{
    if (!lp->s.enabled || i >= lp->count) return;
    lp->current = i;
    if (done) {
        lp->p.done += lp->bytes[i];
        snprintf(lp->label, sizeof lp->label, "layer %llu: done", (unsigned long long)(lp->first + i));
        lp->p.tensor = lp->label;
        tps_progress_update(&lp->p, &lp->s);
        return;
    }
    snprintf(lp->label, sizeof lp->label, "layer %llu (%s)", (unsigned long long)(lp->first + i), lp->prefix[i]);
    lp->p.tensor = lp->label;
    tps_progress_show(&lp->p, &lp->s);
}

/* A tps_verify_opts.on_stage callback: the stage within the layer in flight. */
void tps_cmd_layer_progress_stage(void *arg, const char *stage)
{
    tps_cmd_layer_progress *lp = arg;
    if (!lp->s.enabled || lp->current >= lp->count) return;
    snprintf(lp->label, sizeof lp->label, "layer %llu: %s", (unsigned long long)(lp->first + lp->current), stage);
    lp->p.tensor = lp->label;
    tps_progress_show(&lp->p, &lp->s);
}

void tps_cmd_layer_progress_end(tps_cmd_layer_progress *lp)
{
    tps_progress_end(&lp->s);
    for (uint64_t i = 0; i < lp->count; i++) free(lp->prefix[i]);
    free(lp->prefix);
    free(lp->bytes);
    memset(lp, 0, sizeof *lp);
}

