/* verify's progress line (cmd/cmd_verify.c): the bytes of the verified layers' weights, the
 * layer in flight and its stage.  A layer runs for seconds without an update, so its start
 * and each stage are drawn at once, not left to the rate limit. */
#ifndef TPS_CMD_VERIFY_PROGRESS_H
#define TPS_CMD_VERIFY_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/layout.h"
#include "lib/set.h"
#include "progress.h"

/* The progress line counts the bytes of the verified layers' weights (each layer's tensors
 * in the manifest, by its name prefix) and names the layer in flight. */
typedef struct tps_cmd_layer_progress {
    tps_progress p;
    tps_progress_state s;
    char **prefix;   /* per verified layer */
    uint64_t *bytes; /* per verified layer */
    uint64_t count, first, current;
    char label[256]; /* "layer 3 (model.layers.3.): ranks: attention" */
} tps_cmd_layer_progress;

/* Starts the line for layers [first, first + count) of the set m (nothing unless show and
 * stderr is a terminal). */
void tps_cmd_layer_progress_begin(tps_cmd_layer_progress *lp, const tps_manifest *m, const tps_block *b,
                                  uint64_t first, uint64_t count, bool show);
/* i: the index of the layer among those verified; done: whether it has finished. */
void tps_cmd_layer_progress_at(tps_cmd_layer_progress *lp, uint64_t i, bool done);
/* A tps_verify_opts.on_stage callback (arg: the tps_cmd_layer_progress). */
void tps_cmd_layer_progress_stage(void *arg, const char *stage);
/* Erases the line and frees the tables; a second call does nothing. */
void tps_cmd_layer_progress_end(tps_cmd_layer_progress *lp);

#endif
