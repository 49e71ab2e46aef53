/* safetensors streaming writer: header first, then the caller's data bytes in entry order,
 * into a hidden temporary sibling that only commit renames onto the real name. */
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/buf.h"
#include "../../lib/base/checked.h"
#include "../../lib/base/json.h"
#include "../outfile.h"

struct tps_st_writer {
    tps_outfile *out;
    uint64_t total; /* the file size the header announces */
    bool failed;    /* more bytes than announced were offered: only abort is useful */
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static tps_status check_entries(const char *path, const tps_st_entry *entries, size_t n, uint64_t *nbytes,
                                tps_error *err)
{
    tps_status st = TPS_OK;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) return tps_fail_oom(err, "preparing a safetensors header");
    for (size_t i = 0; i < n; i++) {
        const tps_st_entry *e = &entries[i];
        if (!e->name || strcmp(e->name, "__metadata__") == 0 || e->ndim < 0 || e->ndim > TPS_MAX_DIMS ||
            (e->ndim > 0 && !e->shape) || (unsigned)e->dtype >= TPS_DT_COUNT) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor %zu ('%s') has an invalid name, dtype or rank %d", path, i,
                          e->name ? e->name : "(null)", e->ndim);
            goto cleanup;
        }
        char what[512];
        snprintf(what, sizeof what, "%s: tensor '%s'", path, e->name);
        uint64_t nelem;
        if (!tps_prod_u64(e->shape, e->ndim, &nelem)) {
            st = tps_fail(err, TPS_EINVALID, "%s: the element count of its shape overflows 64 bits", what);
            goto cleanup;
        }
        TPS_CHECK(tps_dtype_nbytes(e->dtype, nelem, &nbytes[i], what, err));
        names[i] = e->name;
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor name '%s' given twice", path, names[i]);
            goto cleanup;
        }
cleanup:
    free(names);
    return st;
}

/* {"__metadata__":{"format":"pt",...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...}
 * padded with spaces so that the data start at a multiple of data_align; *data_total is the sum
 * of the tensors' sizes. */
static tps_status build_header(const char *path, const tps_st_entry *entries, size_t n, const tps_kv *meta,
                               size_t nmeta, unsigned data_align, tps_buf *out, uint64_t *data_total, tps_error *err)
{
    tps_status st = TPS_OK;
    uint64_t *nbytes = calloc(n ? n : 1, sizeof *nbytes);
    if (!nbytes) return tps_fail_oom(err, "preparing a safetensors header");
    TPS_CHECK(check_entries(path, entries, n, nbytes, err));
    const char *format = "pt";
    for (size_t i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value) {
            st = tps_fail(err, TPS_EINVALID, "%s: metadata entry %zu has no key or value", path, i);
            goto cleanup;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(meta[j].key, meta[i].key) == 0) {
                st = tps_fail(err, TPS_EINVALID, "%s: metadata key '%s' given twice", path, meta[i].key);
                goto cleanup;
            }
        if (strcmp(meta[i].key, "format") == 0) format = meta[i].value;
    }
    tps_jw w;
    tps_jw_init(&w, out, false);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "__metadata__");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "format");
    tps_jw_string(&w, format);
    for (size_t i = 0; i < nmeta; i++) {
        if (strcmp(meta[i].key, "format") == 0) continue;
        tps_jw_key(&w, meta[i].key);
        tps_jw_string(&w, meta[i].value);
    }
    tps_jw_object_end(&w);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const tps_st_entry *e = &entries[i];
        uint64_t end;
        if (!tps_add_u64(pos, nbytes[i], &end)) {
            st = tps_fail(err, TPS_EINVALID, "%s: the tensors' total size overflows 64 bits at tensor '%s'", path,
                          e->name);
            goto cleanup;
        }
        tps_jw_key(&w, e->name);
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "dtype");
        tps_jw_string(&w, tps_dtype_name(e->dtype));
        tps_jw_key(&w, "shape");
        tps_jw_array_begin(&w);
        for (int d = 0; d < e->ndim; d++) tps_jw_u64(&w, e->shape[d]);
        tps_jw_array_end(&w);
        tps_jw_key(&w, "data_offsets");
        tps_jw_array_begin(&w);
        tps_jw_u64(&w, pos);
        tps_jw_u64(&w, end);
        tps_jw_array_end(&w);
        tps_jw_object_end(&w);
        pos = end;
    }
    tps_jw_object_end(&w);
    while ((8 + out->len) % data_align != 0 && !out->oom) tps_buf_putc(out, ' ');
    if (out->oom) {
        st = tps_fail_oom(err, "preparing a safetensors header");
        goto cleanup;
    }
    if (out->len > TPS_ST_MAX_HEADER) {
        st = tps_fail(err, TPS_EINVALID, "%s: the header would be %zu bytes, more than the %llu readers accept", path,
                      out->len, TPS_ST_MAX_HEADER);
        goto cleanup;
    }
    *data_total = pos;
cleanup:
    free(nbytes);
    return st;
}

tps_status tps_st_writer_open(const char *path, const tps_st_entry *entries, size_t n, const tps_kv *meta,
                              size_t nmeta, unsigned data_align, tps_st_writer **out, tps_error *err)
{
    tps_status st;
    tps_buf hdr = TPS_BUF_INIT;
    tps_st_writer *w = NULL;
    uint64_t data_total = 0;
    *out = NULL;
    const char *label = path ? path : "(a rank file this run does not write)";
    if (data_align < 8 || data_align > TPS_ST_DATA_ALIGN || (data_align & (data_align - 1)) != 0)
        return tps_fail(err, TPS_EARG, "%s: data alignment %u is not a power of two from 8 to %u", label, data_align,
                        TPS_ST_DATA_ALIGN);
    TPS_CHECK(build_header(label, entries, n, meta, nmeta, data_align, &hdr, &data_total, err));
    w = calloc(1, sizeof *w);
    if (!w) {
        st = tps_fail_oom(err, "opening a safetensors writer");
        goto cleanup;
    }
    if (!tps_add_u64(8 + (uint64_t)hdr.len, data_total, &w->total)) {
        st = tps_fail(err, TPS_EINVALID, "%s: the file size overflows 64 bits", label);
        goto cleanup;
    }
    TPS_CHECK(tps_outfile_open(path, label, &w->out, err));
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    TPS_CHECK(tps_outfile_put(w->out, prefix, 8, false, 0, err));
    TPS_CHECK(tps_outfile_put(w->out, hdr.data, hdr.len, false, 0, err));
    *out = w;
    w = NULL;
cleanup:
    tps_st_writer_abort(w);
    tps_buf_release(&hdr);
    return st;
}

static tps_status write_data(tps_st_writer *w, const void *buf, size_t len, bool have_crc, uint32_t crc,
                             tps_error *err)
{
    const char *name = tps_outfile_name(w->out);
    if (w->failed || tps_outfile_failed(w->out)) return tps_fail(err, TPS_EIO, "%s: an earlier write failed", name);
    uint64_t end;
    if (!tps_add_u64(tps_outfile_size(w->out), len, &end) || end > w->total) {
        w->failed = true;
        return tps_fail(err, TPS_EINVALID, "%s: %zu more bytes would pass the %llu bytes the header announces",
                        name, len, (unsigned long long)w->total);
    }
    return tps_outfile_put(w->out, buf, len, have_crc, crc, err);
}

tps_status tps_st_writer_write(tps_st_writer *w, const void *buf, size_t len, tps_error *err)
{
    return write_data(w, buf, len, false, 0, err);
}

tps_status tps_st_writer_write_crc(tps_st_writer *w, const void *buf, size_t len, uint32_t crc, tps_error *err)
{
    return write_data(w, buf, len, true, crc, err);
}

tps_status tps_st_writer_commit(tps_st_writer *w, uint32_t *crc, uint64_t *size, tps_error *err)
{
    tps_status st = TPS_OK;
    const char *name = tps_outfile_name(w->out);
    if (w->failed || tps_outfile_failed(w->out)) {
        st = tps_fail(err, TPS_EIO, "%s: not committed: an earlier write failed", name);
        goto cleanup;
    }
    if (tps_outfile_size(w->out) != w->total) {
        st = tps_fail(err, TPS_EINVALID,
                      "%s: not committed: %llu of the %llu bytes the header announces were written",
                      name, (unsigned long long)tps_outfile_size(w->out), (unsigned long long)w->total);
        goto cleanup;
    }
    TPS_CHECK(tps_outfile_commit(w->out, err));
    if (crc) *crc = tps_outfile_crc(w->out);
    if (size) *size = w->total;
cleanup:
    tps_st_writer_abort(w);
    return st;
}

void tps_st_writer_abort(tps_st_writer *w)
{
    if (!w) return;
    tps_outfile_abort(w->out);
    free(w);
}

/* The sink's file handle is the writer itself, passed through the opaque type. */
static tps_status open_aligned(const char *path, const tps_sink_tensor *tensors, size_t n, const tps_kv *meta,
                               size_t nmeta, unsigned data_align, tps_sink_file **out, tps_error *err)
{
    tps_st_writer *w = NULL;
    tps_status st = tps_st_writer_open(path, tensors, n, meta, nmeta, data_align, &w, err);
    *out = (tps_sink_file *)w;
    return st;
}

static tps_status sink_open(const char *path, const tps_sink_tensor *tensors, size_t n, const tps_kv *meta,
                            size_t nmeta, tps_sink_file **out, tps_error *err)
{
    return open_aligned(path, tensors, n, meta, nmeta, TPS_ST_DATA_ALIGN, out, err);
}

static tps_status checkpoint_open(const char *path, const tps_sink_tensor *tensors, size_t n, const tps_kv *meta,
                                  size_t nmeta, tps_sink_file **out, tps_error *err)
{
    return open_aligned(path, tensors, n, meta, nmeta, TPS_ST_LIBRARY_ALIGN, out, err);
}

static tps_status sink_write(tps_sink_file *f, const void *buf, size_t len, tps_error *err)
{
    return tps_st_writer_write((tps_st_writer *)f, buf, len, err);
}

static tps_status sink_write_crc(tps_sink_file *f, const void *buf, size_t len, uint32_t crc, tps_error *err)
{
    return tps_st_writer_write_crc((tps_st_writer *)f, buf, len, crc, err);
}

static tps_status sink_commit(tps_sink_file *f, uint32_t *crc, uint64_t *size, tps_error *err)
{
    return tps_st_writer_commit((tps_st_writer *)f, crc, size, err);
}

static void sink_abort(tps_sink_file *f) { tps_st_writer_abort((tps_st_writer *)f); }

const tps_sink tps_safetensors_sink = {"safetensors", sink_open, sink_write, sink_write_crc, sink_commit, sink_abort};
const tps_sink tps_safetensors_checkpoint_sink = {"safetensors",   checkpoint_open, sink_write,
                                                  sink_write_crc, sink_commit,     sink_abort};
