#include "dcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/base/checked.h"
#include "../torch/pickle.h"
#include "../zip.h"

#define META_CLS "torch.distributed.checkpoint.metadata."
#define FS_CLS "torch.distributed.checkpoint.filesystem."
/* A chunk's torch.save stream: data.pkl and the version/byteorder records are this small. */
#define MAX_CHUNK_PICKLE (1u << 20)

typedef struct dcp_chunk {
    uint64_t off[TPS_MAX_DIMS], size[TPS_MAX_DIMS];
    uint64_t nelem;
    bool stored; /* its storage entry was seen */
    uint32_t file;
    uint64_t data; /* file offset of the chunk's first element */
} dcp_chunk;

typedef struct dcp_tensor {
    char *name; /* borrowed from the pickle while opening */
    const tps_torch_dtype *dt;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS];
    dcp_chunk *chunks;
    size_t nchunks;
} dcp_tensor;

typedef struct dcp_state {
    dcp_tensor *t;
    size_t n;
    char **bytes_names; /* the BytesStorageMetadata entries' names, in .metadata's order */
    size_t nbytes_names;
} dcp_state;

typedef struct dcp_file {
    char *name;
    uint32_t id;
} dcp_file;

typedef struct opener {
    const char *dir;
    tps_index *ix;
    dcp_state *s;
    tps_name_hash names; /* over s->t */
    dcp_file *files;
    size_t nfiles, files_cap;
    tps_name_hash file_names; /* over files */
    size_t bytes_entries;
} opener;

/* ---- reading the global tensor from its chunks ---- */

static const dcp_chunk *chunk_at(const dcp_tensor *t, const uint64_t *idx)
{
    for (size_t c = 0; c < t->nchunks; c++) {
        const dcp_chunk *k = &t->chunks[c];
        int d = 0;
        while (d < t->ndim && idx[d] >= k->off[d] && idx[d] - k->off[d] < k->size[d]) d++;
        if (d == t->ndim && k->nelem) return k;
    }
    return NULL;
}

static tps_status dcp_read(const tps_index *ix, const tps_tensor *tt, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const dcp_tensor *t = tt->reader_data;
    uint64_t es = t->dt->esize;
    unsigned char *out = buf;
    while (len) {
        uint64_t elem = off / es, within = off % es, idx[TPS_MAX_DIMS], rest = elem;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = rest % t->shape[d];
            rest /= t->shape[d];
        }
        const dcp_chunk *k = chunk_at(t, idx);
        if (!k) /* open proved the chunks cover the tensor */
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s': no chunk holds element %llu", ix->path, tt->name,
                            (unsigned long long)elem);
        /* Elements from idx on are contiguous in both the tensor and the chunk while the
         * chunk spans the trailing dimensions whole and idx starts them. */
        uint64_t run = t->ndim ? k->off[t->ndim - 1] + k->size[t->ndim - 1] - idx[t->ndim - 1] : 1, inner = 1;
        for (int d = t->ndim - 1; d > 0 && idx[d] == 0 && k->size[d] == t->shape[d]; d--) {
            inner *= t->shape[d];
            run = (k->off[d - 1] + k->size[d - 1] - idx[d - 1]) * inner;
        }
        uint64_t local = 0;
        for (int d = 0; d < t->ndim; d++) local = local * k->size[d] + (idx[d] - k->off[d]);
        uint64_t n = run * es - within;
        if (n > len) n = len;
        const tps_source_file *f = &ix->files[k->file];
        tps_status st = tps_pread_full(f->fd, f->path, k->data + local * es + within, out, (size_t)n, err);
        if (st) return st;
        out += n;
        off += n;
        len -= (size_t)n;
    }
    return TPS_OK;
}

static void dcp_release(void *state)
{
    dcp_state *s = state;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->t[i].chunks);
    for (size_t i = 0; i < s->nbytes_names; i++) free(s->bytes_names[i]);
    free(s->bytes_names);
    free(s->t);
    free(s);
}

static const tps_reader_ops dcp_ops = {dcp_read, dcp_release};

/* ---- the metadata pickle ---- */

/* The BUILD state of v when it is an object of class cls, else NULL. */
static const tps_pv *state_of(const tps_pv *v, const char *cls)
{
    if (!v || v->kind != TPS_PV_OBJECT || strcmp(v->u.obj.cls->u.global.name, cls) != 0) return NULL;
    return v->u.obj.state;
}

static const tps_pv *field(const tps_pv *d, const char *key)
{
    if (!d || d->kind != TPS_PV_DICT) return NULL;
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (d->u.dict.keys[i]->kind == TPS_PV_STR && strcmp(d->u.dict.keys[i]->u.str.s, key) == 0) return d->u.dict.vals[i];
    return NULL;
}

static bool as_u64(const tps_pv *v, uint64_t *out)
{
    if (!v || v->kind != TPS_PV_INT || v->u.i < 0) return false;
    *out = (uint64_t)v->u.i;
    return true;
}

/* A torch.Size (REDUCE torch.Size, ((d0, d1, ...),)) or a plain tuple of ints >= 0. */
static bool as_dims(const tps_pv *v, uint64_t *out, int *ndim)
{
    if (v && v->kind == TPS_PV_OBJECT && strcmp(v->u.obj.cls->u.global.name, "torch.Size") == 0 && !v->u.obj.state &&
        v->u.obj.args->u.seq.n == 1)
        v = v->u.obj.args->u.seq.items[0];
    if (!v || v->kind != TPS_PV_TUPLE || v->u.seq.n > TPS_MAX_DIMS) return false;
    for (size_t i = 0; i < v->u.seq.n; i++)
        if (!as_u64(v->u.seq.items[i], &out[i])) return false;
    *ndim = (int)v->u.seq.n;
    return true;
}

static tps_status parse_chunk(opener *o, dcp_tensor *t, size_t c, const tps_pv *v, tps_error *err)
{
    const tps_pv *s = state_of(v, META_CLS "ChunkStorageMetadata");
    dcp_chunk *k = &t->chunks[c];
    int no = -1, ns = -1;
    if (!s || !as_dims(field(s, "offsets"), k->off, &no) || !as_dims(field(s, "sizes"), k->size, &ns))
        return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s': chunk %zu is not a ChunkStorageMetadata(offsets, sizes)",
                        o->dir, t->name, c);
    if (no != t->ndim || ns != t->ndim)
        return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s' has %d dimensions but chunk %zu has offsets of %d and sizes of %d",
                        o->dir, t->name, t->ndim, c, no, ns);
    k->nelem = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t end;
        if (!tps_add_u64(k->off[d], k->size[d], &end) || end > t->shape[d])
            return tps_fail(err, TPS_EINVALID,
                            "%s/.metadata: tensor '%s': chunk %zu runs past the tensor in dimension %d (offset %llu + size %llu > %llu)",
                            o->dir, t->name, c, d, (unsigned long long)k->off[d], (unsigned long long)k->size[d],
                            (unsigned long long)t->shape[d]);
        if (!tps_mul_u64(k->nelem, k->size[d], &k->nelem))
            return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s': chunk %zu is too large", o->dir, t->name, c);
    }
    return TPS_OK;
}

/* The chunks tile the tensor: no two intersect and their volumes add up to it. */
static tps_status check_tiling(opener *o, const dcp_tensor *t, tps_error *err)
{
    uint64_t total = 0, want = 1;
    for (int d = 0; d < t->ndim; d++) (void)tps_mul_u64(want, t->shape[d], &want); /* the index checks overflow */
    for (size_t a = 0; a < t->nchunks; a++) {
        const dcp_chunk *p = &t->chunks[a];
        if (!tps_add_u64(total, p->nelem, &total)) total = UINT64_MAX;
        for (size_t b = a + 1; b < t->nchunks && p->nelem; b++) {
            const dcp_chunk *q = &t->chunks[b];
            int d = 0;
            while (q->nelem && d < t->ndim && p->off[d] < q->off[d] + q->size[d] && q->off[d] < p->off[d] + p->size[d]) d++;
            if (q->nelem && d == t->ndim)
                return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s': chunks %zu and %zu overlap", o->dir, t->name, a, b);
        }
    }
    if (total != want)
        return tps_fail(err, TPS_EINVALID,
                        "%s/.metadata: tensor '%s': its chunks hold %llu of its %llu elements (a chunk is missing)", o->dir,
                        t->name, (unsigned long long)total, (unsigned long long)want);
    return TPS_OK;
}

static tps_status parse_tensor(opener *o, const tps_pv *key, const tps_pv *v, tps_error *err)
{
    dcp_tensor *t = &o->s->t[o->s->n];
    t->name = key->u.str.s;
    const tps_pv *s = state_of(v, META_CLS "TensorStorageMetadata");
    const tps_pv *props = state_of(field(s, "properties"), META_CLS "TensorProperties");
    const tps_pv *chunks = field(s, "chunks");
    if (!s || !props || props->kind != TPS_PV_TUPLE || props->u.seq.n < 1 || props->u.seq.items[0]->kind != TPS_PV_GLOBAL ||
        props->u.seq.items[0]->u.global.kind != TPS_PG_DTYPE || !as_dims(field(s, "size"), t->shape, &t->ndim) || !chunks ||
        chunks->kind != TPS_PV_LIST)
        return tps_fail(err, TPS_EINVALID,
                        "%s/.metadata: entry '%s' is not a TensorStorageMetadata(properties(dtype, ...), size, chunks)", o->dir,
                        t->name);
    t->dt = props->u.seq.items[0]->u.global.dt;
    if (t->dt->dtype < 0)
        return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s' has dtype torch.%s, which has no safetensors equivalent",
                        o->dir, t->name, t->dt->name);
    t->nchunks = chunks->u.seq.n;
    if (!(t->chunks = calloc(t->nchunks ? t->nchunks : 1, sizeof *t->chunks))) return tps_fail_oom(err, "reading .metadata");
    o->s->n++;
    for (size_t c = 0; c < t->nchunks; c++) {
        tps_status st = parse_chunk(o, t, c, chunks->u.seq.items[c], err);
        if (st) return st;
    }
    size_t dup;
    if (!tps_name_hash_add(&o->names, o->s->t, o->s->n - 1, &dup)) return tps_fail_oom(err, "reading .metadata");
    if (dup != SIZE_MAX) return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s' listed twice", o->dir, t->name);
    return check_tiling(o, t, err);
}

/* The file id of relative_path, opening it on first use; it must be a plain name in dir. */
static tps_status file_of(opener *o, const char *rel, uint32_t *id, tps_error *err)
{
    size_t i = tps_name_hash_find(&o->file_names, o->files, rel);
    if (i != SIZE_MAX) {
        *id = o->files[i].id;
        return TPS_OK;
    }
    if (!rel[0] || strchr(rel, '/') || strchr(rel, '\\') || strcmp(rel, ".") == 0 || strcmp(rel, "..") == 0)
        return tps_fail(err, TPS_EINVALID, "%s/.metadata: storage file '%s' is not a plain file name in the directory", o->dir, rel);
    char path[4352];
    if (snprintf(path, sizeof path, "%s/%s", o->dir, rel) >= (int)sizeof path)
        return tps_fail(err, TPS_EINVALID, "%s: path too long", o->dir);
    tps_status st = tps_index_add_file(o->ix, path, id, err);
    if (st) return st;
    dcp_file *nf = o->files;
    if (o->nfiles == o->files_cap) {
        size_t cap = o->files_cap ? o->files_cap * 2 : 16;
        if (!(nf = realloc(o->files, cap * sizeof *nf))) return tps_fail_oom(err, "reading .metadata");
        o->files = nf;
        o->files_cap = cap;
    }
    o->files[o->nfiles] = (dcp_file){(char *)rel, *id};
    size_t dup;
    if (!tps_name_hash_add(&o->file_names, o->files, o->nfiles, &dup)) return tps_fail_oom(err, "reading .metadata");
    o->nfiles++;
    return TPS_OK;
}

/* The torch.save stream of chunk k at [base, base + len) of file f: one C-contiguous tensor
 * of the chunk's sizes and t's dtype in one stored little-endian record; sets k->data. */
static tps_status read_chunk_stream(opener *o, const dcp_tensor *t, size_t c, uint32_t file, uint64_t base, uint64_t len,
                                    tps_error *err)
{
    dcp_chunk *k = &t->chunks[c];
    const tps_source_file *f = &o->ix->files[file];
    tps_zip *z = NULL;
    tps_pickle *pk = NULL;
    char *pkl = NULL, *order = NULL, name[192], what[4608];
    size_t plen;
    tps_status st = TPS_OK;
    snprintf(what, sizeof what, "%s [%llu, +%llu) (tensor '%s' chunk %zu)", f->path, (unsigned long long)base,
             (unsigned long long)len, t->name, c);
    uint64_t end;
    if (!tps_add_u64(base, len, &end) || end > f->size)
        return tps_fail(err, TPS_EINVALID, "%s: runs past the end of the file (%llu bytes): truncated .distcp", what,
                        (unsigned long long)f->size);
    TPS_CHECK(tps_zip_open_window(f->fd, what, base, len, TPS_ZIP_CRC_ZERO_IS_ABSENT, &z, err));
    const char *first = tps_zip_count(z) ? tps_zip_entry_at(z, 0)->name : "", *slash = strchr(first, '/');
    if (!slash || slash - first > 64) {
        st = tps_fail(err, TPS_EINVALID, "%s: not a torch.save stream (no top-level folder)", what);
        goto cleanup;
    }
    int rl = (int)(slash - first) + 1;
    snprintf(name, sizeof name, "%.*sbyteorder", rl, first);
    const tps_zip_entry *e = tps_zip_find(z, name);
    if (e) {
        TPS_CHECK(tps_zip_read_all(z, e, 16, &order, &plen, err));
        if (strcmp(order, "little") != 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: byteorder '%.8s' (only little-endian chunks are read)", what, order);
            goto cleanup;
        }
    }
    snprintf(name, sizeof name, "%.*sdata.pkl", rl, first);
    if (!(e = tps_zip_find(z, name))) {
        st = tps_fail(err, TPS_EINVALID, "%s: torch.save stream without %s", what, name);
        goto cleanup;
    }
    TPS_CHECK(tps_zip_read_all(z, e, MAX_CHUNK_PICKLE, &pkl, &plen, err));
    const tps_pv *v;
    TPS_CHECK(tps_pickle_load((const unsigned char *)pkl, plen, what, &pk, &v, err));
    bool contiguous = v->kind == TPS_PV_TENSOR && v->u.tensor.ndim == t->ndim && v->u.tensor.dt == t->dt;
    uint64_t stride = 1;
    for (int d = t->ndim - 1; contiguous && d >= 0; d--) {
        contiguous = v->u.tensor.size[d] == k->size[d] && (k->size[d] <= 1 || v->u.tensor.stride[d] == stride);
        stride *= k->size[d];
    }
    if (!contiguous) {
        st = tps_fail(err, TPS_EINVALID, "%s: does not hold one C-contiguous torch.%s tensor of the chunk's sizes", what,
                      t->dt->name);
        goto cleanup;
    }
    const tps_pv *sv = v->u.tensor.storage;
    snprintf(name, sizeof name, "%.*sdata/%s", rl, first, sv->u.storage.key);
    e = tps_zip_find(z, name);
    uint64_t rec, need;
    if (!e || e->method != TPS_ZIP_STORED ||
        !tps_mul_u64(sv->u.storage.numel, sv->u.storage.dt ? sv->u.storage.dt->esize : 1, &rec) || rec != e->usize ||
        !tps_add_u64(v->u.tensor.offset, k->nelem, &need) || !tps_mul_u64(need, t->dt->esize, &need) || need > rec) {
        st = tps_fail(err, TPS_EINVALID, "%s: storage record '%s' is missing, deflated, or smaller than the chunk", what, name);
        goto cleanup;
    }
    k->file = file;
    k->data = base + e->data_ofs + v->u.tensor.offset * t->dt->esize;
    k->stored = true;
cleanup:
    tps_pickle_free(pk);
    free(pkl);
    free(order);
    tps_zip_free(z);
    return st;
}

static tps_status parse_storage(opener *o, const tps_pv *key, const tps_pv *val, tps_error *err)
{
    const tps_pv *mi = state_of(key, META_CLS "MetadataIndex"), *si = state_of(val, FS_CLS "_StorageInfo");
    const tps_pv *fqn = field(mi, "fqn"), *rel = field(si, "relative_path");
    uint64_t off[TPS_MAX_DIMS], base, len;
    int n = -1;
    if (!fqn || fqn->kind != TPS_PV_STR || !rel || rel->kind != TPS_PV_STR || !as_u64(field(si, "offset"), &base) ||
        !as_u64(field(si, "length"), &len))
        return tps_fail(err, TPS_EINVALID, "%s/.metadata: a storage_data entry is not MetadataIndex(fqn, ...) -> "
                        "_StorageInfo(relative_path, offset, length)", o->dir);
    size_t ti = tps_name_hash_find(&o->names, o->s->t, fqn->u.str.s);
    if (ti == SIZE_MAX) return TPS_OK; /* a BytesStorageMetadata item: not read */
    dcp_tensor *t = &o->s->t[ti];
    if (!as_dims(field(mi, "offset"), off, &n) || n != t->ndim)
        return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s': a storage entry's offset is not %d-dimensional", o->dir,
                        t->name, t->ndim);
    size_t c = 0;
    for (; c < t->nchunks; c++)
        if (memcmp(t->chunks[c].off, off, (size_t)n * sizeof *off) == 0) break;
    if (c == t->nchunks)
        return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s': a storage entry names no chunk's offset", o->dir, t->name);
    if (t->chunks[c].stored)
        return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s': chunk %zu has two storage entries", o->dir, t->name, c);
    uint32_t file;
    tps_status st = file_of(o, rel->u.str.s, &file, err);
    return st ? st : read_chunk_stream(o, t, c, file, base, len, err);
}

static tps_status add_tensors(opener *o, tps_error *err)
{
    for (size_t i = 0; i < o->s->n; i++) {
        dcp_tensor *t = &o->s->t[i];
        const dcp_chunk *whole = NULL;
        for (size_t c = 0; c < t->nchunks; c++) {
            if (!t->chunks[c].stored && t->chunks[c].nelem)
                return tps_fail(err, TPS_EINVALID, "%s/.metadata: tensor '%s': chunk %zu has no storage entry", o->dir, t->name, c);
            if (t->chunks[c].nelem && !whole) whole = &t->chunks[c];
        }
        bool plain = t->nchunks == 1 || !whole; /* one chunk, or an empty tensor */
        tps_status st = tps_index_add_tensor(o->ix, t->name, strlen(t->name), (tps_dtype)t->dt->dtype, t->ndim, t->shape,
                                             plain && whole ? whole->file : 0, plain && whole ? whole->data : 0,
                                             plain ? NULL : t, err);
        if (st) return st;
        t->name = NULL; /* the pickle's string; the index has its own copy */
    }
    return TPS_OK;
}

bool tps_dcp_is_dir(const char *dir)
{
    char p[4352];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/.metadata", dir) < (int)sizeof p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

tps_status tps_dcp_open(const char *dir, tps_index **out, tps_error *err)
{
    *out = NULL;
    opener o = {.dir = dir, .names = TPS_NAME_HASH_INIT(dcp_tensor, name), .file_names = TPS_NAME_HASH_INIT(dcp_file, name)};
    char path[4352], *text = NULL;
    size_t len;
    tps_pickle *pk = NULL;
    tps_index *ix = NULL;
    tps_status st = TPS_OK;
    if (snprintf(path, sizeof path, "%s/.metadata", dir) >= (int)sizeof path) return tps_fail(err, TPS_EINVALID, "%s: path too long", dir);
    TPS_CHECK(tps_read_file(path, TPS_DCP_MAX_METADATA, "a DCP .metadata", &text, &len, err));
    const tps_pv *root;
    TPS_CHECK(tps_pickle_load((const unsigned char *)text, len, path, &pk, &root, err));
    const tps_pv *meta = state_of(root, META_CLS "Metadata"), *sdm = field(meta, "state_dict_metadata"),
                 *sd = field(meta, "storage_data");
    if (!sdm || sdm->kind != TPS_PV_DICT || !sd || sd->kind != TPS_PV_DICT) {
        st = tps_fail(err, TPS_EINVALID, "%s: not a torch.distributed.checkpoint Metadata(state_dict_metadata, storage_data)", path);
        goto cleanup;
    }
    TPS_CHECK(tps_index_new(dir, "dcp", &ix, err));
    o.ix = ix;
    if (!(o.s = calloc(1, sizeof *o.s)) || !(o.s->t = calloc(sdm->u.dict.n ? sdm->u.dict.n : 1, sizeof *o.s->t))) {
        free(o.s);
        st = tps_fail_oom(err, "reading .metadata");
        goto cleanup;
    }
    ix->ops = &dcp_ops;
    ix->state = o.s;
    if (!(o.s->bytes_names = calloc(sdm->u.dict.n ? sdm->u.dict.n : 1, sizeof *o.s->bytes_names))) {
        st = tps_fail_oom(err, "reading .metadata");
        goto cleanup;
    }
    for (size_t i = 0; i < sdm->u.dict.n; i++) {
        const tps_pv *k = sdm->u.dict.keys[i], *v = sdm->u.dict.vals[i];
        if (k->kind != TPS_PV_STR) {
            st = tps_fail(err, TPS_EINVALID, "%s: a state_dict_metadata key is not a string", path);
            goto cleanup;
        }
        if (state_of(v, META_CLS "BytesStorageMetadata") || (v->kind == TPS_PV_OBJECT &&
                                                              strcmp(v->u.obj.cls->u.global.name, META_CLS "BytesStorageMetadata") == 0)) {
            o.bytes_entries++;
            if (!(o.s->bytes_names[o.s->nbytes_names] = strdup(k->u.str.s))) {
                st = tps_fail_oom(err, "reading .metadata");
                goto cleanup;
            }
            o.s->nbytes_names++;
            continue;
        }
        TPS_CHECK(parse_tensor(&o, k, v, err));
    }
    if (o.s->n == 0) {
        st = tps_fail(err, TPS_EINVALID, "%s: the checkpoint holds no tensors", path);
        goto cleanup;
    }
    for (size_t i = 0; i < sd->u.dict.n; i++) TPS_CHECK(parse_storage(&o, sd->u.dict.keys[i], sd->u.dict.vals[i], err));
    TPS_CHECK(add_tensors(&o, err));
    if (o.bytes_entries) {
        char n[32];
        snprintf(n, sizeof n, "%zu", o.bytes_entries);
        TPS_CHECK(tps_index_add_meta(ix, "dcp.bytes_entries", n, err));
    }
    *out = ix;
    ix = NULL;
cleanup:
    tps_index_free(ix);
    tps_name_hash_free(&o.names);
    tps_name_hash_free(&o.file_names);
    free(o.files);
    tps_pickle_free(pk);
    free(text);
    return st;
}

size_t tps_dcp_bytes_entries(const tps_index *ix, const char *const **names)
{
    const dcp_state *s = ix && ix->ops == &dcp_ops ? ix->state : NULL;
    *names = s ? (const char *const *)s->bytes_names : NULL;
    return s ? s->nbytes_names : 0;
}
