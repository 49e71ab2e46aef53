#include "dcp_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/buf.h"
#include "../../lib/base/checked.h"
#include "../../lib/base/json.h"
#include "../../lib/engine/publish.h"
#include "../outfile.h"
#include "../torch/pickle_write.h"
#include "../torch/torch_write.h"
#include "../torch/zip_write.h"

#define ROOT "archive" /* torch.save's root folder for a stream without a file name */
#define META "torch.distributed.checkpoint.metadata."

/* The classes .metadata names besides torch's weights_only defaults. */
static const char *const dcp_globals[] = {
    META "Metadata",         META "TensorStorageMetadata", META "BytesStorageMetadata", META "TensorProperties",
    META "ChunkStorageMetadata", META "MetadataIndex",     META "_MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.filesystem._StorageInfo", "torch.serialization._get_layout", NULL,
};

typedef struct chunk {
    const char *fqn; /* in the chunks document */
    int ndim;        /* the global rank */
    uint64_t size[TPS_MAX_DIMS], offsets[TPS_MAX_DIMS], sizes[TPS_MAX_DIMS];
    const tps_torch_dtype *dt;
    uint64_t nbytes;
    uint64_t at, len; /* where its archive lies in the file */
} chunk;

typedef struct bytes_entry {
    const char *key;
    uint64_t at, len;
} bytes_entry;

typedef struct dcp_file {
    tps_zipw_run run; /* first: entry cur is chunk cur's data/0, in its own archive */
    tps_outfile *out;
    char *path;
    tps_json_doc *chunks_doc, *bytes_doc;
    chunk *c;
    bytes_entry *b;
    size_t nb;
} dcp_file;

static void file_free(dcp_file *f)
{
    if (!f) return;
    tps_zipw_abort(f->run.z);
    tps_outfile_abort(f->out);
    tps_json_doc_free(f->chunks_doc);
    tps_json_doc_free(f->bytes_doc);
    free(f->c);
    free(f->b);
    free(f->path);
    free(f->run.label);
    free(f);
}

/* A local TPS_CHECK for functions without a cleanup label. */
#define TPS_CHECK_RET(call)             \
    do {                                \
        tps_status st_ = (call);        \
        if (st_ != TPS_OK) return st_;  \
    } while (0)

static bool u64_array(const tps_json *a, uint64_t *v, int *n)
{
    if (!a || a->type != TPS_JSON_ARRAY || a->u.array.n > TPS_MAX_DIMS) return false;
    for (size_t i = 0; i < a->u.array.n; i++) {
        const tps_json *x = a->u.array.items[i];
        if (x->type != TPS_JSON_NUMBER || !x->u.number.is_u64) return false;
        v[i] = x->u.number.u64;
    }
    *n = (int)a->u.array.n;
    return true;
}

/* Chunk i from its dcp.chunks item and the sink tensor t. */
static tps_status parse_chunk(dcp_file *f, const tps_json *it, const tps_sink_tensor *t, size_t i, tps_error *err)
{
    chunk *c = &f->c[i];
    int no = 0;
    if (!it || it->type != TPS_JSON_ARRAY || it->u.array.n != 3 || it->u.array.items[0]->type != TPS_JSON_STRING ||
        !u64_array(it->u.array.items[1], c->size, &c->ndim) || !u64_array(it->u.array.items[2], c->offsets, &no) ||
        no != c->ndim)
        return tps_fail(err, TPS_EINVALID, "%s: dcp.chunks item %zu is not [fqn, [global size], [offsets]] of one rank",
                        f->run.label, i);
    c->fqn = it->u.array.items[0]->u.string.s;
    if (t->ndim > c->ndim)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' has more dimensions than its fqn '%s'", f->run.label, t->name, c->fqn);
    int lead = c->ndim - t->ndim;
    for (int d = 0; d < c->ndim; d++) {
        c->sizes[d] = d < lead ? 1 : t->shape[d - lead];
        uint64_t end;
        if (!tps_add_u64(c->offsets[d], c->sizes[d], &end) || end > c->size[d])
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' lies outside '%s' in dimension %d", f->run.label, t->name, c->fqn, d);
    }
    if (!(c->dt = tps_torch_dtype_of(t->dtype)))
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' has dtype %s, which a torch archive cannot hold", f->run.label, t->name,
                        tps_dtype_name(t->dtype));
    uint64_t nelem;
    if (!tps_prod_u64(t->shape, t->ndim, &nelem))
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%s': its element count overflows 64 bits", f->run.label, t->name);
    return tps_dtype_nbytes(t->dtype, nelem, &c->nbytes, t->name, err);
}

/* One torch.save archive of a pickle alone (a non-tensor entry) or of a pickle and the
 * record data/0 of nbytes to come (a chunk: left open on f->run.z). */
static tps_status archive_begin(dcp_file *f, const tps_buf *pkl, bool tensor, uint64_t nbytes, tps_error *err)
{
    TPS_CHECK_RET(tps_zipw_open_in(f->out, &f->run.z, err));
    TPS_CHECK_RET(tps_zipw_record(f->run.z, ROOT "/data.pkl", pkl->data, pkl->len, err));
    return tensor ? tps_zipw_begin(f->run.z, ROOT "/data/0", nbytes, err) : TPS_OK;
}

static tps_status archive_end(dcp_file *f, uint64_t at, uint64_t *len, tps_error *err)
{
    tps_status st = tps_torch_archive_tail(f->run.z, ROOT, err);
    tps_zipw *z = f->run.z;
    f->run.z = NULL;
    if (st) {
        tps_zipw_abort(z);
        return st;
    }
    TPS_CHECK_RET(tps_zipw_commit(z, NULL, NULL, err));
    *len = tps_outfile_size(f->out) - at;
    return TPS_OK;
}

static tps_status write_bytes_entries(dcp_file *f, tps_error *err)
{
    const tps_json *a = tps_json_root(f->bytes_doc);
    for (size_t i = 0; i < f->nb; i++) {
        const tps_json *it = a->u.array.items[i];
        if (it->type != TPS_JSON_ARRAY || it->u.array.n != 2 || it->u.array.items[0]->type != TPS_JSON_STRING)
            return tps_fail(err, TPS_EINVALID, "%s: dcp.bytes item %zu is not [key, value]", f->run.label, i);
        f->b[i].key = it->u.array.items[0]->u.string.s;
        f->b[i].at = tps_outfile_size(f->out);
        tps_buf pkl = TPS_BUF_INIT;
        tps_status st = tps_pickle_write_json(it->u.array.items[1], f->b[i].key, &pkl, err);
        if (!st) st = archive_begin(f, &pkl, false, 0, err);
        tps_buf_release(&pkl);
        if (!st) st = archive_end(f, f->b[i].at, &f->b[i].len, err);
        if (st) return st;
    }
    return TPS_OK;
}

/* Opens the archive of chunk f->run.cur, first writing whole the empty chunks before it. */
static tps_status next_chunk(dcp_file *f, tps_error *err)
{
    for (; f->run.cur < f->run.n; f->run.cur++) {
        chunk *c = &f->c[f->run.cur];
        c->at = tps_outfile_size(f->out);
        tps_pickle_entry e = {c->fqn, c->dt, c->ndim, c->sizes, "0"};
        tps_buf pkl = TPS_BUF_INIT;
        tps_status st = tps_pickle_write_tensor(&e, f->run.label, &pkl, err);
        if (!st) st = archive_begin(f, &pkl, true, c->nbytes, err);
        tps_buf_release(&pkl);
        if (st || c->nbytes) return st;
        TPS_CHECK_RET(tps_zipw_end(f->run.z, err));
        TPS_CHECK_RET(archive_end(f, c->at, &c->len, err));
    }
    return TPS_OK;
}

static tps_status chunk_done(tps_zipw_run *r, tps_error *err)
{
    dcp_file *f = (dcp_file *)r;
    tps_status st = archive_end(f, f->c[r->cur].at, &f->c[r->cur].len, err);
    r->cur++;
    return st ? st : next_chunk(f, err);
}

static tps_status parse_json(const char *label, const char *key, const char *text, tps_json_doc **doc, size_t *n,
                             tps_error *err)
{
    char what[512];
    snprintf(what, sizeof what, "%s: %s", label, key);
    TPS_CHECK_RET(tps_json_parse(text, strlen(text), what, doc, err));
    if (tps_json_root(*doc)->type != TPS_JSON_ARRAY) return tps_fail(err, TPS_EINVALID, "%s is not a JSON array", what);
    *n = tps_json_root(*doc)->u.array.n;
    return TPS_OK;
}

static tps_status sink_open(const char *path, const tps_sink_tensor *t, size_t n, const tps_kv *meta, size_t nmeta,
                            tps_sink_file **out, tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK;
    const char *label = path ? path : "(a rank file this run does not write)";
    const char *chunks = NULL, *bytes = NULL;
    dcp_file *f = calloc(1, sizeof *f);
    if (!f || !(f->run.label = strdup(label)) || (path && !(f->path = strdup(path)))) {
        st = tps_fail_oom(err, "opening a DCP writer");
        goto cleanup;
    }
    for (size_t i = 0; i < nmeta; i++) {
        const char *k = meta[i].key;
        if (!k || !meta[i].value) {
            st = tps_fail(err, TPS_EINVALID, "%s: metadata entry %zu has no key or value", label, i);
            goto cleanup;
        }
        if (strncmp(k, "dcp.", 4) != 0) continue;
        if (strcmp(k, "dcp.chunks") == 0) chunks = meta[i].value;
        else if (strcmp(k, "dcp.bytes") == 0) bytes = meta[i].value;
        else {
            st = tps_fail(err, TPS_EINVALID, "%s: unknown metadata key '%s' (a DCP takes dcp.chunks, dcp.bytes)", label, k);
            goto cleanup;
        }
    }
    size_t nc = 0;
    if (!chunks) {
        st = tps_fail(err, TPS_EINVALID, "%s: no dcp.chunks: where each tensor lies in its fqn is unknown", label);
        goto cleanup;
    }
    TPS_CHECK(parse_json(label, "dcp.chunks", chunks, &f->chunks_doc, &nc, err));
    if (nc != n) {
        st = tps_fail(err, TPS_EINVALID, "%s: dcp.chunks has %zu items for %zu tensors", label, nc, n);
        goto cleanup;
    }
    if (bytes) TPS_CHECK(parse_json(label, "dcp.bytes", bytes, &f->bytes_doc, &f->nb, err));
    f->run.n = n;
    f->run.next = chunk_done;
    if (!(f->c = calloc(n ? n : 1, sizeof *f->c)) || !(f->b = calloc(f->nb ? f->nb : 1, sizeof *f->b))) {
        st = tps_fail_oom(err, "opening a DCP writer");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) TPS_CHECK(parse_chunk(f, tps_json_root(f->chunks_doc)->u.array.items[i], &t[i], i, err));
    TPS_CHECK(tps_outfile_open(path, label, &f->out, err));
    TPS_CHECK(write_bytes_entries(f, err));
    TPS_CHECK(next_chunk(f, err));
    *out = (tps_sink_file *)f;
    f = NULL;
cleanup:
    file_free(f);
    return st;
}

static tps_status sink_write(tps_sink_file *f, const void *buf, size_t len, tps_error *err)
{
    return tps_zipw_run_write((tps_zipw_run *)f, buf, len, false, 0, err);
}

static tps_status sink_write_crc(tps_sink_file *f, const void *buf, size_t len, uint32_t crc, tps_error *err)
{
    return tps_zipw_run_write((tps_zipw_run *)f, buf, len, true, crc, err);
}

/* {"$reduce": [fn, [args...]]}: the opening; the caller writes the arguments. */
static void jw_reduce_begin(tps_jw *w, const char *fn)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "$reduce");
    tps_jw_array_begin(w);
    tps_jw_string(w, fn);
    tps_jw_array_begin(w);
}

static void jw_reduce_end(tps_jw *w)
{
    tps_jw_array_end(w);
    tps_jw_array_end(w);
    tps_jw_object_end(w);
}

static void jw_size(tps_jw *w, const uint64_t *v, int n)
{
    jw_reduce_begin(w, "torch.Size");
    tps_jw_object_begin(w);
    tps_jw_key(w, "$tuple");
    tps_jw_u64_array(w, v, (size_t)n);
    tps_jw_object_end(w);
    jw_reduce_end(w);
}

/* {"$newobj": [cls, [], ...state...]}: the opening; the caller writes the state and closes. */
static void jw_newobj(tps_jw *w, const char *cls)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "$newobj");
    tps_jw_array_begin(w);
    tps_jw_string(w, cls);
    tps_jw_array_begin(w);
    tps_jw_array_end(w);
}

static void jw_newobj_end(tps_jw *w)
{
    tps_jw_array_end(w);
    tps_jw_object_end(w);
}

static void jw_tensor_meta(tps_jw *w, const dcp_file *f, size_t first)
{
    const chunk *c0 = &f->c[first];
    jw_newobj(w, META "TensorStorageMetadata");
    tps_jw_object_begin(w);
    tps_jw_key(w, "properties");
    jw_newobj(w, META "TensorProperties");
    tps_jw_object_begin(w);
    tps_jw_key(w, "$tuple");
    tps_jw_array_begin(w);
    tps_jw_object_begin(w);
    tps_jw_key(w, "$dtype");
    tps_jw_string(w, c0->dt->name);
    tps_jw_object_end(w);
    jw_reduce_begin(w, "torch.serialization._get_layout");
    tps_jw_string(w, "torch.strided");
    jw_reduce_end(w);
    tps_jw_bool(w, false);
    jw_reduce_begin(w, META "_MEM_FORMAT_ENCODING"); /* TORCH_CONTIGUOUS_FORMAT */
    tps_jw_u64(w, 0);
    jw_reduce_end(w);
    tps_jw_bool(w, false);
    tps_jw_array_end(w);
    tps_jw_object_end(w);
    jw_newobj_end(w);
    tps_jw_key(w, "size");
    jw_size(w, c0->size, c0->ndim);
    tps_jw_key(w, "chunks");
    tps_jw_array_begin(w);
    for (size_t i = first; i < f->run.n; i++) {
        if (strcmp(f->c[i].fqn, c0->fqn)) continue;
        jw_newobj(w, META "ChunkStorageMetadata");
        tps_jw_object_begin(w);
        tps_jw_key(w, "offsets");
        jw_size(w, f->c[i].offsets, f->c[i].ndim);
        tps_jw_key(w, "sizes");
        jw_size(w, f->c[i].sizes, f->c[i].ndim);
        tps_jw_object_end(w);
        jw_newobj_end(w);
    }
    tps_jw_array_end(w);
    tps_jw_object_end(w);
    jw_newobj_end(w);
}

/* MetadataIndex(fqn, offset, None) -> _StorageInfo(file, at, len), as a $dict pair. */
static void jw_storage(tps_jw *w, const char *file, const char *fqn, const chunk *c, uint64_t at, uint64_t len)
{
    tps_jw_array_begin(w);
    jw_newobj(w, META "MetadataIndex");
    tps_jw_object_begin(w);
    tps_jw_key(w, "fqn");
    tps_jw_string(w, fqn);
    tps_jw_key(w, "offset");
    if (c) jw_size(w, c->offsets, c->ndim);
    else tps_jw_null(w);
    tps_jw_key(w, "index");
    tps_jw_null(w);
    tps_jw_object_end(w);
    jw_newobj_end(w);
    jw_newobj(w, "torch.distributed.checkpoint.filesystem._StorageInfo");
    tps_jw_object_begin(w);
    tps_jw_key(w, "relative_path");
    tps_jw_string(w, file);
    tps_jw_key(w, "offset");
    tps_jw_u64(w, at);
    tps_jw_key(w, "length");
    tps_jw_u64(w, len);
    tps_jw_object_end(w);
    jw_newobj_end(w);
    tps_jw_array_end(w);
}

static bool seen_before(const dcp_file *f, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (strcmp(f->c[j].fqn, f->c[i].fqn) == 0) return true;
    return false;
}

/* The Metadata of what was written, as JSON for pickle_write.h. */
static void metadata_json(const dcp_file *f, const char *file, tps_buf *out)
{
    tps_jw w;
    tps_jw_init(&w, out, false);
    jw_newobj(&w, META "Metadata");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "state_dict_metadata");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "$dict");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < f->nb; i++) {
        tps_jw_array_begin(&w);
        tps_jw_string(&w, f->b[i].key);
        jw_newobj(&w, META "BytesStorageMetadata");
        tps_jw_null(&w);
        jw_newobj_end(&w);
        tps_jw_array_end(&w);
    }
    for (size_t i = 0; i < f->run.n; i++) {
        if (seen_before(f, i)) continue; /* quadratic in the fqns' chunks only: a few per fqn */
        tps_jw_array_begin(&w);
        tps_jw_string(&w, f->c[i].fqn);
        jw_tensor_meta(&w, f, i);
        tps_jw_array_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    tps_jw_key(&w, "planner_data");
    tps_jw_null(&w);
    tps_jw_key(&w, "storage_data");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "$dict");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < f->nb; i++) jw_storage(&w, file, f->b[i].key, NULL, f->b[i].at, f->b[i].len);
    for (size_t i = 0; i < f->run.n; i++) jw_storage(&w, file, f->c[i].fqn, &f->c[i], f->c[i].at, f->c[i].len);
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    tps_jw_key(&w, "storage_meta");
    tps_jw_null(&w);
    tps_jw_object_end(&w);
    jw_newobj_end(&w);
}

static tps_status write_metadata(const dcp_file *f, tps_error *err)
{
    const char *slash = strrchr(f->path, '/');
    const char *file = slash ? slash + 1 : f->path;
    tps_buf js = TPS_BUF_INIT, pkl = TPS_BUF_INIT, path = TPS_BUF_INIT;
    tps_json_doc *doc = NULL;
    metadata_json(f, file, &js);
    tps_buf_printf(&path, "%.*s.metadata", (int)(file - f->path), f->path);
    tps_status st = TPS_OK;
    if (!tps_buf_cstr(&js) || !tps_buf_cstr(&path)) st = tps_fail_oom(err, "writing a DCP .metadata");
    if (!st) st = tps_json_parse(js.data, js.len, "the DCP metadata", &doc, err);
    if (!st) st = tps_pickle_write_json_also(tps_json_root(doc), dcp_globals, path.data, &pkl, err);
    if (!st) st = tps_write_file_atomic(path.data, pkl.data, pkl.len, err);
    tps_json_doc_free(doc);
    tps_buf_release(&js);
    tps_buf_release(&pkl);
    tps_buf_release(&path);
    return st;
}

static tps_status sink_commit(tps_sink_file *sf, uint32_t *crc, uint64_t *size, tps_error *err)
{
    dcp_file *f = (dcp_file *)sf;
    tps_status st = TPS_OK;
    if (f->run.failed) {
        st = tps_fail(err, TPS_EIO, "%s: not committed: an earlier write failed", f->run.label);
        goto cleanup;
    }
    if (f->run.cur < f->run.n) {
        st = tps_fail(err, TPS_EINVALID, "%s: not committed: tensor %zu of %zu has %llu bytes still to come", f->run.label,
                      f->run.cur, f->run.n, (unsigned long long)tps_zipw_left(f->run.z));
        goto cleanup;
    }
    if (crc) *crc = tps_outfile_crc(f->out);
    if (size) *size = tps_outfile_size(f->out);
    TPS_CHECK(tps_outfile_commit(f->out, err));
    if (f->path) st = write_metadata(f, err);
cleanup:
    file_free(f);
    return st;
}

static void sink_abort(tps_sink_file *f) { file_free((dcp_file *)f); }

const tps_sink tps_dcp_sink = {"dcp", sink_open, sink_write, sink_write_crc, sink_commit, sink_abort};
