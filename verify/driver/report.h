/* verify's reports as JSON, built here so the command line (cmd/cmd_verify.c) only prints
 * them: the --json report (a header naming the run, one object per layer, what was checked
 * and the verdict), the --dump-reference file (inputs and float64 reference outputs per
 * layer) and the --dump-logits file. */
#ifndef TPS_VERIFY_REPORT_H
#define TPS_VERIFY_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/base/buf.h"
#include "lib/base/json.h"
#include "lib/base/status.h"
#include "lib/layout/block.h"
#include "pass.h"
#include "whole.h"

/* What the --json report says of the run before its layers. */
typedef struct tps_vreport_run {
    const char *dir;
    uint64_t tp;
    const tps_vbackend_info *info;
    const tps_block *block;
    const char *source; /* --source, or NULL: the reference reassembled from the shards */
    const char *config; /* where the hyper-parameters came from */
    uint64_t tokens, seed;
    bool whole; /* --whole-model */
} tps_vreport_run;

/* What the run covered, for the report's "checked" object. */
typedef struct tps_vreport_checked {
    uint64_t layers, tp, tensors, bytes, mismatched;
} tps_vreport_checked;

/* Opens the report's object with the run's description and its "layers" array. */
void tps_vreport_begin(tps_jw *w, const tps_vreport_run *run);
/* One verified layer, an element of "layers". */
void tps_vreport_layer(tps_jw *w, const tps_verify_result *r);
/* Closes "layers", then what was checked, the whole model's comparison (whole: NULL without
 * --whole-model) and the verdict. */
void tps_vreport_end(tps_jw *w, const tps_vreport_checked *c, const tps_verify_whole *whole, bool pass);

/* --dump-reference, into out: begin opens its object and its "layers" array, each layer
 * adds its input and the reference's output of each stage, end closes them. */
void tps_vreport_dump_begin(tps_jw *w, tps_buf *out);
void tps_vreport_dump_layer(tps_jw *w, uint64_t layer, const tps_verify_result *r);
void tps_vreport_dump_end(tps_jw *w);

/* --dump-logits: the token ids and the logits [tokens, vocab] of the reference (float64)
 * and of the ranks (float32, gathered, padding dropped), written to path as JSON. */
tps_status tps_vreport_write_logits(const char *path, const tps_verify_whole *r, tps_error *err);

#endif
