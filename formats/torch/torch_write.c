#include "torch_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/buf.h"
#include "../../lib/base/checked.h"
#include "../../lib/base/json.h"
#include "pickle_write.h"
#include "zip_write.h"

#define ROOT_DEFAULT "model_optim_rng"

/* The torch dtype of each tensor element type (str(dtype) without "torch."). */
static const struct {
    tps_dtype dt;
    const char *name;
} dtype_names[] = {
    {TPS_DT_BOOL, "bool"},           {TPS_DT_U8, "uint8"},
    {TPS_DT_I8, "int8"},             {TPS_DT_F8_E5M2, "float8_e5m2"},
    {TPS_DT_F8_E4M3, "float8_e4m3fn"}, {TPS_DT_F8_E8M0, "float8_e8m0fnu"},
    {TPS_DT_F8_E4M3FNUZ, "float8_e4m3fnuz"}, {TPS_DT_F8_E5M2FNUZ, "float8_e5m2fnuz"},
    {TPS_DT_I16, "int16"},           {TPS_DT_U16, "uint16"},
    {TPS_DT_F16, "float16"},         {TPS_DT_BF16, "bfloat16"},
    {TPS_DT_I32, "int32"},           {TPS_DT_U32, "uint32"},
    {TPS_DT_F32, "float32"},         {TPS_DT_C64, "complex64"},
    {TPS_DT_F64, "float64"},         {TPS_DT_I64, "int64"},
    {TPS_DT_U64, "uint64"},
};

const tps_torch_dtype *tps_torch_dtype_of(tps_dtype dt)
{
    for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
        if (dtype_names[i].dt == dt) return tps_torch_dtype_by_name(dtype_names[i].name);
    return NULL;
}

typedef struct tps_torch_file {
    tps_zipw_run run; /* first: entry cur is tensor cur's record data/<cur> */
    char *root;
    uint64_t *nbytes; /* per tensor, in sink order */
} torch_file;

static void file_free(torch_file *f)
{
    if (!f) return;
    tps_zipw_abort(f->run.z);
    free(f->root);
    free(f->nbytes);
    free(f->run.label);
    free(f);
}

/* The root folder torch.save gives the archive: the file's base name up to its last dot. */
static char *root_name(const char *path)
{
    if (!path) return strdup(ROOT_DEFAULT);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    char *r = malloc(n + 1);
    if (r) {
        memcpy(r, base, n);
        r[n] = 0;
    }
    return r;
}

/* Opens the record of tensor f->run.cur, first ending (as empty records) the zero-byte tensors
 * before it. */
static tps_status next_record(torch_file *f, tps_error *err)
{
    char name[4096];
    for (; f->run.cur < f->run.n; f->run.cur++) {
        snprintf(name, sizeof name, "%s/data/%zu", f->root, f->run.cur);
        tps_status st = tps_zipw_begin(f->run.z, name, f->nbytes[f->run.cur], err);
        if (st) return st;
        if (f->nbytes[f->run.cur]) return TPS_OK;
        if ((st = tps_zipw_end(f->run.z, err))) return st;
    }
    return TPS_OK;
}

static tps_status record_done(tps_zipw_run *r, tps_error *err)
{
    r->cur++;
    return next_record((torch_file *)r, err);
}

typedef struct meta_in {
    const char *top, *model_key, *entries;
} meta_in;

static tps_status read_meta(const char *label, const tps_kv *meta, size_t nmeta, meta_in *m, tps_error *err)
{
    *m = (meta_in){NULL, "model", NULL};
    for (size_t i = 0; i < nmeta; i++) {
        const char *k = meta[i].key;
        if (!k || !meta[i].value) return tps_fail(err, TPS_EINVALID, "%s: metadata entry %zu has no key or value", label, i);
        if (strncmp(k, "torch.", 6) != 0) continue;
        const char **slot = strcmp(k, "torch.top") == 0 ? &m->top
                            : strcmp(k, "torch.model_key") == 0 ? &m->model_key
                            : strcmp(k, "torch.model_entries") == 0 ? &m->entries : NULL;
        if (!slot)
            return tps_fail(err, TPS_EINVALID, "%s: unknown metadata key '%s' (a torch archive takes torch.top, torch.model_key, torch.model_entries)",
                            label, k);
        *slot = meta[i].value;
    }
    return TPS_OK;
}

static tps_status sink_open(const char *path, const tps_sink_tensor *t, size_t n, const tps_kv *meta, size_t nmeta,
                            tps_sink_file **out, tps_error *err)
{
    tps_status st = TPS_OK;
    *out = NULL;
    const char *label = path ? path : "(a rank file this run does not write)";
    meta_in m;
    tps_json_doc *topdoc = NULL, *entdoc = NULL;
    tps_pickle_entry *pe = NULL;
    char *keys = NULL; /* n storage keys of 24 bytes */
    size_t *slot = NULL;
    tps_buf pkl = TPS_BUF_INIT;
    tps_name_hash names = TPS_NAME_HASH_INIT(tps_sink_tensor, name);
    tps_name_hash keyset = TPS_NAME_HASH_INIT(tps_pickle_entry, key);
    torch_file *f = calloc(1, sizeof *f);
    if (!f || !(f->nbytes = calloc(n ? n : 1, sizeof *f->nbytes)) || !(f->root = root_name(path)) ||
        !(f->run.label = strdup(label)) || !(keys = malloc((n ? n : 1) * 24))) {
        st = tps_fail_oom(err, "opening a torch archive writer");
        goto cleanup;
    }
    f->run.n = n;
    f->run.next = record_done;
    TPS_CHECK(read_meta(label, meta, nmeta, &m, err));
    for (size_t i = 0; i < n; i++) {
        size_t dup;
        if (!t[i].name || t[i].ndim < 0 || t[i].ndim > TPS_MAX_DIMS || (t[i].ndim > 0 && !t[i].shape)) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor %zu has no name or an invalid rank", label, i);
            goto cleanup;
        }
        if (!tps_name_hash_add(&names, t, i, &dup)) {
            st = tps_fail_oom(err, "opening a torch archive writer");
            goto cleanup;
        }
        if (dup != SIZE_MAX) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor name '%s' given twice", label, t[i].name);
            goto cleanup;
        }
        if (!tps_torch_dtype_of(t[i].dtype)) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' has dtype %s, which a torch archive cannot hold", label, t[i].name,
                          tps_dtype_name(t[i].dtype));
            goto cleanup;
        }
        char what[512];
        snprintf(what, sizeof what, "%s: tensor '%s'", label, t[i].name);
        uint64_t nelem;
        if (!tps_prod_u64(t[i].shape, t[i].ndim, &nelem)) {
            st = tps_fail(err, TPS_EINVALID, "%s: the element count of its shape overflows 64 bits", what);
            goto cleanup;
        }
        TPS_CHECK(tps_dtype_nbytes(t[i].dtype, nelem, &f->nbytes[i], what, err));
        snprintf(keys + 24 * i, 24, "%zu", i);
    }
    const tps_json *top = NULL;
    if (m.top) {
        char what[512];
        snprintf(what, sizeof what, "%s: torch.top", label);
        TPS_CHECK(tps_json_parse(m.top, strlen(m.top), what, &topdoc, err));
        top = tps_json_root(topdoc);
        if (top->type != TPS_JSON_OBJECT) {
            st = tps_fail(err, TPS_EINVALID, "%s: torch.top is not a JSON object", label);
            goto cleanup;
        }
    }
    /* The state dict's entries: the tensors by name, None for the other keys. */
    size_t ne = n;
    const tps_json *ents = NULL;
    if (m.entries) {
        char what[512];
        snprintf(what, sizeof what, "%s: torch.model_entries", label);
        TPS_CHECK(tps_json_parse(m.entries, strlen(m.entries), what, &entdoc, err));
        ents = tps_json_root(entdoc);
        if (ents->type != TPS_JSON_ARRAY) {
            st = tps_fail(err, TPS_EINVALID, "%s: torch.model_entries is not a JSON array", label);
            goto cleanup;
        }
        ne = ents->u.array.n;
    }
    pe = calloc(ne ? ne : 1, sizeof *pe);
    slot = calloc(n ? n : 1, sizeof *slot);
    if (!pe || !slot) {
        st = tps_fail_oom(err, "opening a torch archive writer");
        goto cleanup;
    }
    for (size_t j = 0; j < ne; j++) {
        size_t i = j;
        if (ents) {
            const tps_json *k = ents->u.array.items[j];
            if (k->type != TPS_JSON_STRING || strlen(k->u.string.s) != k->u.string.len) {
                st = tps_fail(err, TPS_EINVALID, "%s: torch.model_entries item %zu is not a string", label, j);
                goto cleanup;
            }
            pe[j].key = k->u.string.s;
            i = tps_name_hash_find(&names, t, k->u.string.s);
            if (i == SIZE_MAX) continue; /* None */
            if (slot[i]) {
                st = tps_fail(err, TPS_EINVALID, "%s: torch.model_entries names tensor '%s' twice", label, t[i].name);
                goto cleanup;
            }
        }
        slot[i] = j + 1;
        pe[j] = (tps_pickle_entry){t[i].name, tps_torch_dtype_of(t[i].dtype), t[i].ndim, t[i].shape, keys + 24 * i};
    }
    for (size_t i = 0; i < n; i++)
        if (!slot[i]) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is not in torch.model_entries", label, t[i].name);
            goto cleanup;
        }
    /* A None key repeated, or equal to a tensor's, would be a duplicate dict key. */
    for (size_t j = 0; ents && j < ne; j++) {
        size_t dup;
        if (!tps_name_hash_add(&keyset, pe, j, &dup)) {
            st = tps_fail_oom(err, "opening a torch archive writer");
            goto cleanup;
        }
        if (dup != SIZE_MAX) {
            st = tps_fail(err, TPS_EINVALID, "%s: torch.model_entries gives '%s' twice", label, pe[j].key);
            goto cleanup;
        }
    }
    {
        char what[512];
        snprintf(what, sizeof what, "%s: the pickle", label);
        TPS_CHECK(tps_pickle_write_checkpoint(top, m.model_key, pe, ne, what, &pkl, err));
    }
    const char *z64 = getenv("TPS_TORCH_ZIP64");
    TPS_CHECK(tps_zipw_open(path, label, z64 && strcmp(z64, "1") == 0, &f->run.z, err));
    {
        char name[4096];
        snprintf(name, sizeof name, "%s/data.pkl", f->root);
        TPS_CHECK(tps_zipw_record(f->run.z, name, pkl.data, pkl.len, err));
    }
    TPS_CHECK(next_record(f, err));
    *out = (tps_sink_file *)f;
    f = NULL;
cleanup:
    file_free(f);
    tps_json_doc_free(topdoc);
    tps_json_doc_free(entdoc);
    tps_name_hash_free(&names);
    tps_name_hash_free(&keyset);
    tps_buf_release(&pkl);
    free(pe);
    free(slot);
    free(keys);
    return st;
}

tps_status tps_torch_archive_tail(tps_zipw *z, const char *root, tps_error *err)
{
    char name[4096];
    snprintf(name, sizeof name, "%s/version", root);
    tps_status st = tps_zipw_record(z, name, "3\n", 2, err);
    snprintf(name, sizeof name, "%s/byteorder", root);
    return st ? st : tps_zipw_record(z, name, "little", 6, err);
}

tps_status tps_torch_write_value(const char *path, const char *value_json, tps_error *err)
{
    tps_json_doc *doc = NULL;
    tps_buf pkl = TPS_BUF_INIT;
    tps_zipw *z = NULL;
    char *root = root_name(path), name[4096];
    if (!root) return tps_fail_oom(err, "writing a torch archive");
    tps_status st = tps_json_parse(value_json, strlen(value_json), path, &doc, err);
    if (!st) st = tps_pickle_write_json(tps_json_root(doc), path, &pkl, err);
    if (!st) st = tps_zipw_open(path, path, false, &z, err);
    snprintf(name, sizeof name, "%s/data.pkl", root);
    if (!st) st = tps_zipw_record(z, name, pkl.data, pkl.len, err);
    if (!st) st = tps_torch_archive_tail(z, root, err);
    if (!st) {
        st = tps_zipw_commit(z, NULL, NULL, err);
        z = NULL;
    }
    tps_zipw_abort(z);
    tps_json_doc_free(doc);
    tps_buf_release(&pkl);
    free(root);
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

static tps_status sink_commit(tps_sink_file *sf, uint32_t *crc, uint64_t *size, tps_error *err)
{
    torch_file *f = (torch_file *)sf;
    tps_status st = TPS_OK;
    if (f->run.failed) {
        st = tps_fail(err, TPS_EIO, "%s: not committed: an earlier write failed", f->run.label);
        goto cleanup;
    }
    if (f->run.cur < f->run.n) {
        st = tps_fail(err, TPS_EINVALID, "%s: not committed: tensor %zu of %zu has %llu bytes still to come", f->run.label, f->run.cur, f->run.n,
                      (unsigned long long)tps_zipw_left(f->run.z));
        goto cleanup;
    }
    TPS_CHECK(tps_torch_archive_tail(f->run.z, f->root, err));
    tps_zipw *z = f->run.z;
    f->run.z = NULL; /* commit frees it */
    st = tps_zipw_commit(z, crc, size, err);
cleanup:
    file_free(f);
    return st;
}

static void sink_abort(tps_sink_file *f) { file_free((torch_file *)f); }

const tps_sink tps_torch_sink = {"torch", sink_open, sink_write, sink_write_crc, sink_commit, sink_abort};
