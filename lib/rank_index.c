#include "rank_index.h"

#include <stdlib.h>

#include "checked.h"
#include "cut.h"
#include "json.h"
#include "publish.h"

tps_status tps_rank_index_write(const tps_manifest *m, uint64_t r, const size_t *first, size_t file0,
                                const tps_outdir *od, tps_error *err)
{
    tps_status st = TPS_OK;
    tps_buf b = {0};
    char *path = NULL;
    uint64_t total = 0;
    /* HF's total_size is the tensors' bytes, headers excluded (padding rows included: they are
     * in the rank's tensors). */
    size_t p = 0;
    for (size_t i = 0; i < m->ntensors; i++) {
        while (first[p + 1] <= i) p++;
        const tps_manifest_tensor *t = &m->tensors[i];
        uint64_t shape[TPS_MAX_DIMS], nelem, bytes;
        tps_partition_rank_shape(&t->part, t->ndim, t->shape, m->tp, r, shape);
        if (!tps_prod_u64(shape, t->ndim, &nelem)) return tps_fail(err, TPS_EINVALID, "tensor '%s' is too large", t->name);
        TPS_CHECK(tps_dtype_nbytes(t->dtype, nelem, &bytes, t->name, err));
        if (!tps_add_u64(total, bytes, &total)) return tps_fail(err, TPS_EINVALID, "rank %llu is too large", (unsigned long long)r);
    }
    tps_jw w;
    tps_jw_init(&w, &b, true);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "metadata");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "total_size");
    tps_jw_u64(&w, total);
    tps_jw_object_end(&w);
    tps_jw_key(&w, "weight_map");
    tps_jw_object_begin(&w);
    p = 0;
    for (size_t i = 0; i < m->ntensors; i++) {
        while (first[p + 1] <= i) p++;
        tps_jw_key(&w, m->tensors[i].name);
        tps_jw_string(&w, m->files[file0 + p].name);
    }
    tps_jw_object_end(&w);
    tps_jw_object_end(&w);
    tps_buf_putc(&b, '\n');
    char name[1024];
    TPS_CHECK(tps_format_name(TPS_RANK_INDEX_TEMPLATE, r, m->tp, 0, name, sizeof name, err));
    if (b.oom || !(path = tps_outdir_path(od, name))) {
        st = tps_fail_oom(err, "writing a rank index");
        goto cleanup;
    }
    st = tps_write_file_atomic(path, b.data, b.len, err);
cleanup:
    free(path);
    tps_buf_release(&b);
    return st;
}
