/* What `plan` (and split --dry-run) report of a planned set, as data: each rank's bytes of
 * tensor data, the Marlin note, and the --json report (every tensor's rule, partition and
 * per-rank shapes, the skipped tensors, the notes, the bytes per rank).  The command line
 * (cmd/layout_args.c) prints them. */
#ifndef TPS_PLAN_REPORT_H
#define TPS_PLAN_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/buf.h"
#include "../quant/quant.h"
#include "manifest.h"

/* Adds to rank_bytes[r] (m->tp entries, zeroed by the caller) the bytes of rank r's slice
 * of every tensor of m. */
void tps_plan_rank_bytes(const tps_manifest *m, uint64_t *rank_bytes);

/* The Marlin note (marlin_note.h) as one line into out, or nothing when no linear misses
 * vLLM's tile; q: the quantization the plan was made with, or NULL. */
void tps_plan_marlin_line(const tps_manifest *m, const struct tps_quant *q, tps_buf *out);

/* The --json report of m into out; false when out of memory for its tables. */
bool tps_plan_json(const tps_manifest *m, const struct tps_quant *q, tps_buf *out);

#endif
