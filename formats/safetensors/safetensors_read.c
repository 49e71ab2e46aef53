/* safetensors reader: one file's 8-byte prefix and JSON header into the tensor index.
 *
 * Only the prefix and the header are read, never tensor data, so inspecting a file of any
 * size costs one small read.  The header is validated in full before anything is added to
 * the index: first every entry's fields (in header order), then the data offsets in
 * (begin, end) order, as the reference reader does (safetensors/src/tensor.rs,
 * Metadata::validate).
 *
 * Decisions where the sources differ: shape entries may be any u64 (the schema's 2^48-1 is
 * a CPU limit of the reference, not a format rule) because every product is overflow-checked
 * and the data must fill the file exactly; at most TPS_MAX_DIMS dimensions; unknown keys in
 * a tensor entry are refused (the schema forbids them, the reference ignores them);
 * duplicate keys at any level are refused by the JSON parser (the reference silently keeps
 * the last one, TOB-SFTN-7). */
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../../lib/base/json.h"

/* One tensor entry, pointing into the parsed JSON document. */
typedef struct st_entry {
    const char *name;
    size_t name_len;
    tps_dtype dtype;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS];
    uint64_t begin, end;
    size_t order; /* position in the header, to keep the sort deterministic on ties */
} st_entry;

/* Tensor names are arbitrary UTF-8 of any length; messages show at most this many bytes. */
#define NAME_SHOWN 200
#define SHOWN(len) ((int)((len) > NAME_SHOWN ? NAME_SHOWN : (len)))

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static const char *json_type_name(tps_json_type t)
{
    switch (t) {
    case TPS_JSON_NULL: return "null";
    case TPS_JSON_BOOL: return "a boolean";
    case TPS_JSON_NUMBER: return "a number";
    case TPS_JSON_STRING: return "a string";
    case TPS_JSON_ARRAY: return "an array";
    case TPS_JSON_OBJECT: return "an object";
    }
    return "?";
}

/* Header offsets are reported as file offsets: the header starts at byte 8. */
static unsigned long long file_off(const tps_json *v)
{
    return 8ull + (unsigned long long)v->offset;
}

/* A non-negative integer that fits in 64 bits, written without sign, fraction or exponent. */
static tps_status get_u64(const char *path, const st_entry *e, const char *field, size_t i, const tps_json *v,
                          uint64_t *out, tps_error *err)
{
    if (v->type == TPS_JSON_NUMBER && v->u.number.is_u64) {
        *out = v->u.number.u64;
        return TPS_OK;
    }
    if (v->type == TPS_JSON_NUMBER)
        return tps_fail(err, TPS_EINVALID,
                        "%s: tensor '%.*s': %s[%zu] at file offset %llu is %.*s, not a non-negative integer "
                        "below 2^64",
                        path, SHOWN(e->name_len), e->name, field, i, file_off(v),
                        (int)(v->u.number.len > 64 ? 64 : v->u.number.len), v->u.number.text);
    return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s': %s[%zu] at file offset %llu is %s, not an integer", path,
                    SHOWN(e->name_len), e->name, field, i, file_off(v), json_type_name(v->type));
}

static tps_status parse_entry(const char *path, const tps_json *key, const tps_json *val, st_entry *e,
                              tps_error *err)
{
    e->name = key->u.string.s;
    e->name_len = key->u.string.len;
    if (memchr(e->name, '\0', e->name_len))
        return tps_fail(err, TPS_EINVALID, "%s: the tensor name at file offset %llu contains a NUL character", path,
                        file_off(key));
    if (val->type != TPS_JSON_OBJECT)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s' at file offset %llu is %s, not an object", path,
                        SHOWN(e->name_len), e->name, file_off(val), json_type_name(val->type));
    const tps_json *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (size_t i = 0; i < val->u.object.n; i++) {
        const tps_json *k = val->u.object.keys[i];
        const char *ks = k->u.string.s;
        size_t kl = k->u.string.len;
        /* The JSON parser refuses duplicate keys, so each slot is filled at most once. */
        if (kl == 5 && memcmp(ks, "dtype", 5) == 0) dtype = val->u.object.values[i];
        else if (kl == 5 && memcmp(ks, "shape", 5) == 0) shape = val->u.object.values[i];
        else if (kl == 12 && memcmp(ks, "data_offsets", 12) == 0) offsets = val->u.object.values[i];
        else
            /* The reference ignores unknown keys but its JSON schema forbids them; a key we do
             * not understand may change the meaning of the bytes, so refuse it. */
            return tps_fail(err, TPS_EINVALID,
                            "%s: tensor '%.*s' has unknown key '%.*s' at file offset %llu "
                            "(allowed: dtype, shape, data_offsets)",
                            path, SHOWN(e->name_len), e->name, SHOWN(kl), ks, file_off(k));
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offsets ? "data_offsets" : NULL;
    if (missing)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s' (file offset %llu) has no '%s' key", path,
                        SHOWN(e->name_len), e->name, file_off(val), missing);

    if (dtype->type != TPS_JSON_STRING)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s': dtype at file offset %llu is %s, not a string", path,
                        SHOWN(e->name_len), e->name, file_off(dtype), json_type_name(dtype->type));
    if (!tps_dtype_parse(dtype->u.string.s, dtype->u.string.len, &e->dtype))
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s': unknown dtype '%.*s' at file offset %llu", path,
                        SHOWN(e->name_len), e->name, SHOWN(dtype->u.string.len), dtype->u.string.s,
                        file_off(dtype));

    if (shape->type != TPS_JSON_ARRAY)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s': shape at file offset %llu is %s, not an array", path,
                        SHOWN(e->name_len), e->name, file_off(shape), json_type_name(shape->type));
    if (shape->u.array.n > TPS_MAX_DIMS)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s' has %zu dimensions; at most %d are supported", path,
                        SHOWN(e->name_len), e->name, shape->u.array.n, TPS_MAX_DIMS);
    e->ndim = (int)shape->u.array.n;
    tps_status st;
    for (size_t i = 0; i < shape->u.array.n; i++)
        if ((st = get_u64(path, e, "shape", i, shape->u.array.items[i], &e->shape[i], err))) return st;

    if (offsets->type != TPS_JSON_ARRAY || offsets->u.array.n != 2)
        return tps_fail(err, TPS_EINVALID,
                        "%s: tensor '%.*s': data_offsets at file offset %llu must be an array of exactly 2 "
                        "integers",
                        path,
                        SHOWN(e->name_len), e->name, file_off(offsets));
    if ((st = get_u64(path, e, "data_offsets", 0, offsets->u.array.items[0], &e->begin, err))) return st;
    if ((st = get_u64(path, e, "data_offsets", 1, offsets->u.array.items[1], &e->end, err))) return st;
    if (e->end < e->begin)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s': data_offsets [%llu, %llu] end before they begin",
                        path, SHOWN(e->name_len), e->name, (unsigned long long)e->begin,
                        (unsigned long long)e->end);
    return TPS_OK;
}

/* __metadata__ is a string-to-string map (the safetensors README: "all values must be
 * strings"); nothing nested. */
static tps_status check_metadata(const char *path, const tps_json *meta, tps_error *err)
{
    if (meta->type != TPS_JSON_OBJECT)
        return tps_fail(err, TPS_EINVALID,
                        "%s: __metadata__ at file offset %llu is %s, not an object of strings", path,
                        file_off(meta), json_type_name(meta->type));
    for (size_t i = 0; i < meta->u.object.n; i++) {
        const tps_json *k = meta->u.object.keys[i], *v = meta->u.object.values[i];
        if (v->type != TPS_JSON_STRING)
            return tps_fail(err, TPS_EINVALID,
                            "%s: __metadata__ value of '%.*s' at file offset %llu is %s, not a string", path,
                            SHOWN(k->u.string.len), k->u.string.s, file_off(v), json_type_name(v->type));
        /* The index keeps metadata as C strings. */
        if (memchr(k->u.string.s, '\0', k->u.string.len) || memchr(v->u.string.s, '\0', v->u.string.len))
            return tps_fail(err, TPS_EINVALID,
                            "%s: __metadata__ entry at file offset %llu contains a NUL character", path, file_off(k));
    }
    return TPS_OK;
}

static int cmp_entry(const void *pa, const void *pb)
{
    const st_entry *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* Walks the entries in (begin, end) order: contiguous from 0, each range exactly the size
 * its dtype and shape need. */
static tps_status check_offsets(const char *path, const st_entry *v, size_t n, uint64_t *data_len, tps_error *err)
{
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const st_entry *e = &v[i];
        if (e->begin > pos)
            return tps_fail(err, TPS_EINVALID,
                            "%s: tensor '%.*s' starts at data offset %llu, leaving a gap of %llu bytes after data "
                            "offset %llu that no tensor covers",
                            path, SHOWN(e->name_len), e->name, (unsigned long long)e->begin,
                            (unsigned long long)(e->begin - pos), (unsigned long long)pos);
        if (e->begin < pos)
            return tps_fail(err, TPS_EINVALID,
                            "%s: tensor '%.*s' data_offsets [%llu, %llu] overlap tensor '%.*s', which ends at data "
                            "offset %llu",
                            path, SHOWN(e->name_len), e->name, (unsigned long long)e->begin,
                            (unsigned long long)e->end, SHOWN(v[i - 1].name_len), v[i - 1].name,
                            (unsigned long long)pos);
        uint64_t nelem, nbytes;
        char what[512];
        snprintf(what, sizeof what, "%s: tensor '%.*s'", path, SHOWN(e->name_len), e->name);
        if (!tps_prod_u64(e->shape, e->ndim, &nelem)) {
            char s[256];
            tps_shape_str(e->shape, e->ndim, s, sizeof s);
            return tps_fail(err, TPS_EINVALID, "%s: the element count of shape %s overflows 64 bits", what, s);
        }
        tps_status st = tps_dtype_nbytes(e->dtype, nelem, &nbytes, what, err);
        if (st) return st;
        if (e->end - e->begin != nbytes) {
            char s[256];
            tps_shape_str(e->shape, e->ndim, s, sizeof s);
            return tps_fail(err, TPS_EINVALID,
                            "%s: data_offsets [%llu, %llu] hold %llu bytes but %s %s needs %llu bytes", what,
                            (unsigned long long)e->begin, (unsigned long long)e->end,
                            (unsigned long long)(e->end - e->begin), tps_dtype_name(e->dtype), s,
                            (unsigned long long)nbytes);
        }
        pos = e->end;
    }
    *data_len = pos;
    return TPS_OK;
}

/* The header's members as the parser hands them over (tps_json_parse_members): each
 * tensor's entry checked and copied (its name stays in the tree's keys), __metadata__ kept
 * in the tree; the first refusal is remembered, not returned, so that a syntax error further
 * on is still what the header is refused for. */
typedef struct header_walk {
    const char *path;
    st_entry *entries;
    size_t n, cap;
    const tps_json *meta;
    tps_status st;
    tps_error err;
} header_walk;

static bool is_metadata_key(void *ctx, const tps_json *k)
{
    (void)ctx;
    return k->u.string.len == 12 && memcmp(k->u.string.s, "__metadata__", 12) == 0;
}

static void walk_member(void *ctx, const tps_json *k, const tps_json *v)
{
    header_walk *w = ctx;
    if (w->st) return;
    if (is_metadata_key(w, k)) {
        w->st = check_metadata(w->path, v, &w->err);
        w->meta = v;
        return;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        st_entry *e = cap <= SIZE_MAX / sizeof *e ? realloc(w->entries, cap * sizeof *e) : NULL;
        if (!e) {
            w->st = tps_fail_oom(&w->err, "reading a safetensors header");
            return;
        }
        w->entries = e;
        w->cap = cap;
    }
    st_entry *e = &w->entries[w->n];
    memset(e, 0, sizeof *e);
    e->order = w->n++;
    w->st = parse_entry(w->path, k, v, e, &w->err);
}

tps_status tps_safetensors_add_file(tps_index *ix, const char *path, tps_error *err)
{
    tps_status st = TPS_OK;
    char *text = NULL;
    tps_json_doc *doc = NULL;
    st_entry *entries = NULL;
    uint32_t fid;
    TPS_CHECK(tps_index_add_file(ix, path, &fid, err));
    const tps_source_file *f = &ix->files[fid];
    if (f->size < 8) {
        st = tps_fail(err, TPS_EINVALID, "%s: file is %llu bytes, too short for the 8-byte header length", path,
                      (unsigned long long)f->size);
        goto cleanup;
    }
    unsigned char prefix[8];
    TPS_CHECK(tps_pread_full(f->fd, path, 0, prefix, 8, err));
    uint64_t n = le64(prefix), header_end;
    if (n > TPS_ST_MAX_HEADER) {
        st = tps_fail(err, TPS_EINVALID, "%s: header length %llu exceeds the limit of %llu bytes", path,
                      (unsigned long long)n, TPS_ST_MAX_HEADER);
        goto cleanup;
    }
    if (!tps_add_u64(n, 8, &header_end) || header_end > f->size) {
        st = tps_fail(err, TPS_EINVALID, "%s: header length %llu needs %llu bytes but the file has %llu (truncated?)",
                      path, (unsigned long long)n, (unsigned long long)n + 8, (unsigned long long)f->size);
        goto cleanup;
    }
    /* n is now bounded by both the file size and TPS_ST_MAX_HEADER. */
    text = malloc(n ? (size_t)n : 1);
    if (!text) {
        st = tps_fail_oom(err, "reading a safetensors header");
        goto cleanup;
    }
    TPS_CHECK(tps_pread_full(f->fd, path, 8, text, (size_t)n, err));
    char what[4200];
    snprintf(what, sizeof what, "%s: JSON header at file offset 8", path);
    /* One entry's parse tree at a time: a whole header's is about 1 KiB a tensor, more than
     * the index keeps (docs/design.md, "The manifest in memory"). */
    header_walk w = {.path = path};
    tps_error_clear(&w.err);
    st = tps_json_parse_members(text, (size_t)n, what, is_metadata_key, walk_member, &w, &doc, err);
    entries = w.entries;
    if (st) goto cleanup;
    const tps_json *root = tps_json_root(doc), *meta = w.meta;
    if (root->type != TPS_JSON_OBJECT) {
        st = tps_fail(err, TPS_EINVALID, "%s: the header is %s, not a JSON object", path,
                      json_type_name(root->type));
        goto cleanup;
    }
    if (w.st) { /* the first entry refused, in header order, as a walk of the whole tree finds it */
        *err = w.err;
        st = w.st;
        goto cleanup;
    }
    size_t ntensors = w.n;
    /* What the index is built from is in entries and the kept keys now: the text and the
     * entries' spare room go before the index grows beside them. */
    free(text);
    text = NULL;
    if (ntensors && ntensors < w.cap) {
        st_entry *fit = realloc(entries, ntensors * sizeof *fit);
        if (fit) entries = fit;
    }
    if (ntensors) qsort(entries, ntensors, sizeof *entries, cmp_entry);
    uint64_t data_len = 0, total = UINT64_MAX;
    TPS_CHECK(check_offsets(path, entries, ntensors, &data_len, err));
    if (!tps_add_u64(header_end, data_len, &total) || total != f->size) {
        if (total < f->size)
            st = tps_fail(err, TPS_EINVALID,
                          "%s: %llu trailing bytes after the last tensor's data, which ends at file offset %llu",
                          path,
                          (unsigned long long)(f->size - total), (unsigned long long)total);
        else
            st = tps_fail(err, TPS_EINVALID,
                          "%s: the tensors' data needs %llu bytes after the header (file offset %llu) but the file "
                          "has only %llu bytes (truncated?)",
                          path, (unsigned long long)data_len, (unsigned long long)header_end,
                          (unsigned long long)f->size);
        goto cleanup;
    }
    if (!tps_index_reserve(ix, ntensors)) {
        st = tps_fail_oom(err, "indexing tensors");
        goto cleanup;
    }
    for (size_t i = 0; i < ntensors; i++) {
        const st_entry *e = &entries[i];
        /* Names are unique within a header (the JSON parser refuses duplicate keys) and free
         * of NULs (parse_entry); a name already in the index came from another file of a
         * multi-file set. */
        const tps_tensor *prev = tps_index_find(ix, e->name);
        if (prev) {
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s' is also in %s", path, SHOWN(e->name_len), e->name,
                          ix->files[prev->file].path);
            goto cleanup;
        }
        TPS_CHECK(tps_index_add_tensor(ix, e->name, e->name_len, e->dtype, e->ndim, e->shape, fid,
                                       header_end + e->begin, NULL, err));
    }
    if (meta && fid == 0)
        for (size_t i = 0; i < meta->u.object.n; i++)
            TPS_CHECK(tps_index_add_meta(ix, meta->u.object.keys[i]->u.string.s,
                                         meta->u.object.values[i]->u.string.s, err));
cleanup:
    free(entries);
    tps_json_doc_free(doc);
    free(text);
    return st;
}

tps_status tps_safetensors_open(const char *path, tps_index **out, tps_error *err)
{
    tps_status st;
    tps_index *ix = NULL;
    *out = NULL;
    TPS_CHECK(tps_index_new(path, "safetensors", &ix, err));
    TPS_CHECK(tps_safetensors_add_file(ix, path, err));
    *out = ix;
    ix = NULL;
cleanup:
    tps_index_free(ix);
    return st;
}
