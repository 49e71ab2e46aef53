/* A planned set's report (lib/set/plan_report.h). */
#include "plan_report.h"

#include <stdlib.h>

#include "../base/dtype.h"
#include "../base/json.h"
#include "../partition/partition.h"
#include "marlin_note.h"

/* Rank r's slice of t: its shape into shape, its bytes returned. */
static uint64_t rank_slice(const tps_manifest *m, const tps_manifest_tensor *t, uint64_t r, uint64_t *shape)
{
    uint64_t n = 1;
    tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, shape);
    for (int d = 0; d < t->ndim; d++) n *= shape[d]; /* a rank's slice is no larger than the padded tensor */
    return n * tps_dtype_bits(t->dtype) / 8;
}

void tps_plan_rank_bytes(const tps_manifest *m, uint64_t *rank_bytes)
{
    uint64_t shape[TPS_MAX_DIMS];
    for (size_t i = 0; i < m->ntensors; i++)
        for (uint64_t r = 0; r < m->tp; r++) rank_bytes[r] += rank_slice(m, &m->tensors[i], r, shape);
}

void tps_plan_marlin_line(const tps_manifest *m, const struct tps_quant *q, tps_buf *out)
{
    tps_marlin_note n;
    tps_quant_marlin_note(q, m, &n);
    if (!n.count) return;
    tps_buf_printf(out, "%llu GPTQ/AWQ tensor%s leave%s a rank a piece vLLM's Marlin kernels do not tile (output a "
                   "multiple of %d, input of %d a rank), e.g. %s: %s %llu a rank; vLLM then pads the tile or falls "
                   "back to a slower kernel (older vLLM refuses the layer unless run with --quantization gptq or "
                   "awq); the cut itself is legal", (unsigned long long)n.count, n.count == 1 ? "" : "s",
                   n.count == 1 ? "s" : "", TPS_MARLIN_MIN_N, TPS_MARLIN_MIN_K, n.example,
                   n.wdim == 0 ? "output" : "input", (unsigned long long)n.local);
}

bool tps_plan_json(const tps_manifest *m, const struct tps_quant *q, tps_buf *out)
{
    uint64_t *rank_bytes = calloc(m->tp, sizeof *rank_bytes);
    if (!rank_bytes) return false;
    tps_jw w;
    tps_jw_init(&w, out, true);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "tp");
    tps_jw_u64(&w, m->tp);
    tps_jw_key(&w, "layout");
    tps_jw_string(&w, m->layout_name);
    tps_jw_key(&w, "tensors");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        char desc[256];
        tps_partition_describe(t->part, desc, sizeof desc);
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "name");
        tps_jw_string(&w, t->name);
        tps_jw_key(&w, "rule");
        tps_jw_string(&w, t->rule);
        tps_jw_key(&w, "partition");
        tps_jw_string(&w, desc);
        tps_jw_key(&w, "dtype");
        tps_jw_string(&w, tps_dtype_name(t->dtype));
        tps_jw_key(&w, "rank_shapes");
        tps_jw_array_begin(&w);
        for (uint64_t r = 0; r < m->tp; r++) {
            uint64_t shape[TPS_MAX_DIMS];
            rank_bytes[r] += rank_slice(m, t, r, shape);
            tps_jw_u64_array(&w, shape, (size_t)t->ndim);
        }
        tps_jw_array_end(&w);
        tps_jw_object_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_key(&w, "skipped");
    tps_manifest_skipped_json(&w, m);
    tps_buf note = TPS_BUF_INIT;
    tps_plan_marlin_line(m, q, &note);
    tps_jw_key(&w, "notes");
    tps_jw_array_begin(&w);
    if (note.len && tps_buf_cstr(&note)) tps_jw_string(&w, note.data);
    tps_jw_array_end(&w);
    tps_buf_release(&note);
    tps_jw_key(&w, "rank_bytes");
    tps_jw_array_begin(&w);
    for (uint64_t r = 0; r < m->tp; r++) tps_jw_u64(&w, rank_bytes[r]);
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    free(rank_bytes);
    return true;
}
