#include "hf_index.h"

#include <stdlib.h>

#include "../base/checked.h"
#include "../base/json.h"
#include "file_names.h"
#include "publish.h"

tps_status tps_hf_index_write(const tps_outdir *od, const char *index_name, const tps_manifest *m,
                              const size_t *first, size_t nparts, const char *const *part_names, uint64_t total_size,
                              tps_error *err)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, true);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "metadata");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "total_size");
    tps_jw_u64(&w, total_size);
    tps_jw_object_end(&w);
    tps_jw_key(&w, "weight_map");
    tps_jw_object_begin(&w);
    for (size_t p = 0; p < nparts; p++)
        for (size_t i = first[p]; i < first[p + 1]; i++) {
            tps_jw_key(&w, m->tensors[i].name);
            tps_jw_string(&w, part_names[p]);
        }
    tps_jw_object_end(&w);
    tps_jw_object_end(&w);
    tps_buf_putc(&b, '\n');
    char *path = tps_outdir_path(od, index_name);
    tps_status st = !path || b.oom ? tps_fail_oom(err, "writing a Hugging Face index")
                                   : tps_write_file_atomic(path, b.data, b.len, err);
    free(path);
    tps_buf_release(&b);
    return st;
}

tps_status tps_rank_index_write(const tps_manifest *m, uint64_t r, const size_t *first, size_t file0,
                                const tps_outdir *od, tps_error *err)
{
    tps_status st = TPS_OK;
    uint64_t total = 0;
    size_t nparts = 0;
    while (first[nparts] < m->ntensors) nparts++;
    const char **names = calloc(nparts ? nparts : 1, sizeof *names);
    if (!names) return tps_fail_oom(err, "writing a rank index");
    for (size_t p = 0; p < nparts; p++) names[p] = m->files[file0 + p].name;
    for (size_t i = 0; i < m->ntensors; i++) {
        uint64_t bytes;
        TPS_CHECK(tps_manifest_rank_bytes(m, i, r, &bytes, err));
        if (!tps_add_u64(total, bytes, &total)) {
            st = tps_fail(err, TPS_EINVALID, "rank %llu is too large", (unsigned long long)r);
            goto cleanup;
        }
    }
    char name[1024];
    TPS_CHECK(tps_format_name(TPS_RANK_INDEX_TEMPLATE, r, m->tp, 0, name, sizeof name, err));
    st = tps_hf_index_write(od, name, m, first, nparts, names, total, err);
cleanup:
    free(names);
    return st;
}
