/* A TP x PP grid's files (lib/set/grid.h): a rank's parts cut at each stage's start, named by
 * vLLM's pipeline pattern, and a target's extras (per-layer constants) closing the last part
 * of their layer's stage instead of the rank's last part.  With pp <= 1 every answer is the
 * TP-only set's: one stage 0 holding everything. */
#ifndef TPS_GRID_PARTS_H
#define TPS_GRID_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../set/manifest.h"

/* vLLM's sharded_state_loader.py PP_AND_TP_PATTERN (parts count from 0 within a stage). */
#define TPS_GRID_PART_TEMPLATE "model-pp-{pp}-tp-{rank}-part-{part}.safetensors"

/* Adds a part break at every stage's first tensor to the parts first[0..*nparts] (first has
 * room for ntensors + 2 entries; a stage holds at least one tensor, so parts stay non-empty). */
tps_status tps_grid_parts_split(const tps_manifest *m, size_t *first, size_t *nparts, tps_error *err);
/* The stage of the part starting at tensor first_tensor. */
uint64_t tps_grid_part_stage(const tps_manifest *m, size_t first_tensor);
/* Whether part p (of nparts, first as above) is its stage's last. */
bool tps_grid_part_closes_stage(const tps_manifest *m, const size_t *first, size_t nparts, size_t p);
/* Whether extra k belongs to stage s. */
bool tps_grid_extra_on(const tps_manifest *m, size_t k, uint64_t s);
/* The extras' bytes that close stage s's last part: their CRC-32, *len bytes. */
uint32_t tps_grid_extras_crc(const tps_manifest *m, uint64_t s, uint64_t *len);

/* Formats tmpl for stage pp_rank, rank r of T, part p ({pp}, {rank}, {tp}, {part}); a grid's
 * template must hold {pp} (else two stages would share a name). */
tps_status tps_grid_format_name(const tps_manifest *m, const char *tmpl, uint64_t pp_rank, uint64_t r, uint64_t p,
                                char *out, size_t size, tps_error *err);

#endif
