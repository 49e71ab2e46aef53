/* A TP x PP grid's files (lib/engine/grid_parts.h). */
#include "grid_parts.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../set/grid.h"
#include "../set/grid_stages.h"
#include "../targets/target.h"
#include "file_names.h"

tps_status tps_grid_parts_split(const tps_manifest *m, size_t *first, size_t *nparts, tps_error *err)
{
    if (m->pp <= 1) return TPS_OK;
    size_t n = *nparts, out = 0;
    size_t *merged = calloc(m->ntensors + 2, sizeof *merged);
    if (!merged) return tps_fail_oom(err, "planning parts");
    for (size_t p = 0, i = 0; i < m->ntensors; i++) {
        bool part_start = p < n && first[p] == i;
        if (part_start) p++;
        if (part_start || (i > 0 && m->tensors[i].pp_stage != m->tensors[i - 1].pp_stage)) merged[out++] = i;
    }
    merged[out] = m->ntensors;
    memcpy(first, merged, (out + 1) * sizeof *first);
    *nparts = out;
    free(merged);
    return TPS_OK;
}

uint64_t tps_grid_part_stage(const tps_manifest *m, size_t first_tensor)
{
    return m->pp > 1 && first_tensor < m->ntensors ? m->tensors[first_tensor].pp_stage : 0;
}

bool tps_grid_part_closes_stage(const tps_manifest *m, const size_t *first, size_t nparts, size_t p)
{
    return p + 1 >= nparts || tps_grid_part_stage(m, first[p + 1]) != tps_grid_part_stage(m, first[p]);
}

bool tps_grid_extra_on(const tps_manifest *m, size_t k, uint64_t s)
{
    return tps_grid_stage_of(tps_grid_pp(m), m->pp_first, m->extras[k].name) == s;
}

uint32_t tps_grid_extras_crc(const tps_manifest *m, uint64_t s, uint64_t *len)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    *len = 0;
    for (size_t k = 0; k < m->nextras; k++) {
        if (!tps_grid_extra_on(m, k, s)) continue;
        unsigned char le[4];
        tps_target_extra_bytes(m->extras[k].value, le);
        crc = crc32(crc, le, sizeof le);
        *len += sizeof le;
    }
    return (uint32_t)crc;
}

tps_status tps_grid_format_name(const tps_manifest *m, const char *tmpl, uint64_t pp_rank, uint64_t r, uint64_t p,
                                char *out, size_t size, tps_error *err)
{
    if (m->pp <= 1) return tps_format_name(tmpl, r, m->tp, p, out, size, err);
    const char *at = strstr(tmpl, "{pp}");
    if (!at) return tps_fail(err, TPS_EARG, "file name template '%s' lacks {pp}, which a pipeline grid needs", tmpl);
    char expanded[1024];
    int n = snprintf(expanded, sizeof expanded, "%.*s%" PRIu64 "%s", (int)(at - tmpl), tmpl, pp_rank, at + 4);
    if (n < 0 || (size_t)n >= sizeof expanded)
        return tps_fail(err, TPS_EARG, "file name template '%s' gives too long a name", tmpl);
    return tps_format_name(expanded, r, m->tp, p, out, size, err);
}
