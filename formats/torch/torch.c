#include "torch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/buf.h"
#include "../../lib/base/checked.h"
#include "../numpy/npy.h"
#include "pickle.h"
#include "../view.h"
#include "../zip.h"

#define MAX_NEST 32
#define RESAVE_HINT \
    "re-save it with torch.save(torch.load(f, weights_only=True), \"model.bin\") or convert it to safetensors"

static const unsigned char legacy_magic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

bool tps_torch_is_pickle_magic(const unsigned char *magic, size_t n, uint64_t file_size)
{
    if (n > 8) n = 8;
    if (n >= 4 && memcmp(magic, legacy_magic, n) == 0) return true;
    if (n < 8 || magic[0] != 0x80 || magic[1] < 2 || magic[1] > 5) return false;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | magic[i];
    return hlen > file_size;
}

typedef struct tps_torch_file {
    tps_index *ix;
    tps_zip *zip;
    const char *path;
    uint32_t file;
    const char *root; /* "<root>/" */
    bool big;
    tps_buf name;
    size_t visits_left; /* shared containers can make a tree exponentially larger than its DAG */
} tps_torch_file;
typedef tps_torch_file walker;

static tps_status add_tensor(walker *w, const tps_pv *t, tps_error *err)
{
    const char *name = tps_buf_cstr(&w->name);
    if (!name) return tps_fail_oom(err, "naming tensors");
    const tps_torch_dtype *dt = t->u.tensor.dt;
    const tps_pv *s = t->u.tensor.storage;
    if (dt->dtype < 0)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' has dtype torch.%s, which has no safetensors equivalent", w->path,
                        name, dt->name);
    char rec[64];
    snprintf(rec, sizeof rec, "%sdata/%s", w->root, s->u.storage.key);
    const tps_zip_entry *e = tps_zip_find(w->zip, rec);
    if (!e) return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' uses storage record '%s', which the archive lacks", w->path, name, rec);
    uint64_t want;
    if (!tps_mul_u64(s->u.storage.numel, s->u.storage.dt ? s->u.storage.dt->esize : 1, &want) || want != e->usize)
        return tps_fail(err, TPS_EINVALID, "%s: storage record '%s' has %llu bytes but its persistent id declares %llu elements of %s",
                        w->path, rec, (unsigned long long)e->usize, (unsigned long long)s->u.storage.numel,
                        s->u.storage.dt ? s->u.storage.dt->name : "bytes");
    tps_view v = {.zip = w->zip, .entry = e, .esize = dt->esize, .elem0 = t->u.tensor.offset, .ndim = t->u.tensor.ndim};
    v.swap = w->big && dt->swap > 1 ? dt->swap : 0;
    uint64_t nelem = 1, last = t->u.tensor.offset, span;
    for (int i = 0; i < v.ndim; i++) {
        uint64_t reach;
        v.shape[i] = t->u.tensor.size[i];
        v.stride[i] = t->u.tensor.stride[i];
        if (!tps_mul_u64(nelem, v.shape[i], &nelem)) nelem = UINT64_MAX;
        if (v.shape[i] && (!tps_mul_u64(v.shape[i] - 1, v.stride[i], &reach) || !tps_add_u64(last, reach, &last)))
            last = UINT64_MAX;
    }
    /* Elements [offset, last] must fit; an empty tensor only needs its offset inside. */
    bool fits = nelem == 0 ? tps_mul_u64(t->u.tensor.offset, dt->esize, &span) && span <= e->usize
                           : last != UINT64_MAX && tps_mul_u64(last + 1, dt->esize, &span) && span <= e->usize;
    if (!fits) {
        char shape[256];
        tps_shape_str(v.shape, v.ndim, shape, sizeof shape);
        return tps_fail(err, TPS_EINVALID,
                        "%s: tensor '%s' (shape %s, storage offset %llu) reaches past the %llu bytes of record '%s'", w->path,
                        name, shape, (unsigned long long)t->u.tensor.offset, (unsigned long long)e->usize, rec);
    }
    /* Elements that share storage (torch's expand: stride 0) would be written out once per
     * element: a few bytes of record could claim terabytes of output.  A tensor may hold at
     * most as many bytes as its record (a non-overlapping view never holds more). */
    uint64_t nbytes;
    if (!tps_mul_u64(nelem, dt->esize, &nbytes) || nbytes > e->usize) {
        char shape[256];
        tps_shape_str(v.shape, v.ndim, shape, sizeof shape);
        return tps_fail(err, TPS_EINVALID,
                        "%s: tensor '%s' (shape %s) needs more bytes than the %llu of its record '%s': its elements "
                        "overlap in storage (an expanded view), which is refused", w->path, name, shape,
                        (unsigned long long)e->usize, rec);
    }
    const tps_view *rd = NULL;
    uint64_t offset = 0;
    if (tps_view_is_plain(&v)) {
        offset = e->data_ofs + t->u.tensor.offset * dt->esize; /* inside the record: checked above */
    } else {
        tps_status st = tps_view_state_add(w->ix, &v, &rd, err);
        if (st) return st;
    }
    return tps_index_add_tensor(w->ix, name, w->name.len, (tps_dtype)dt->dtype, v.ndim, v.shape, w->file, offset, rd, err);
}

static tps_status walk(walker *w, const tps_pv *v, int depth, tps_error *err);

static tps_status walk_child(walker *w, const tps_pv *key, const tps_pv *v, int depth, tps_error *err)
{
    size_t mark = w->name.len;
    if (mark) tps_buf_putc(&w->name, '.');
    if (key->kind == TPS_PV_STR) tps_buf_append(&w->name, key->u.str.s, key->u.str.len);
    else if (key->kind == TPS_PV_INT) tps_buf_printf(&w->name, "%lld", (long long)key->u.i);
    else if (v->kind == TPS_PV_TENSOR || v->kind == TPS_PV_DICT || v->kind == TPS_PV_LIST || v->kind == TPS_PV_TUPLE)
        return tps_fail(err, TPS_EINVALID, "%s: a dict key that is neither a string nor an int holds tensors", w->path);
    tps_status st = walk(w, v, depth + 1, err);
    w->name.len = mark;
    if (w->name.data) w->name.data[mark] = '\0';
    return st;
}

static tps_status walk(walker *w, const tps_pv *v, int depth, tps_error *err)
{
    if (depth > MAX_NEST)
        return tps_fail(err, TPS_EINVALID, "%s: containers nested more than %d deep (or a cycle) at '%s'", w->path, MAX_NEST,
                        w->name.data ? w->name.data : "");
    if (w->visits_left-- == 0)
        return tps_fail(err, TPS_EINVALID, "%s: the pickle refers to its shared containers too many times (at '%s')", w->path,
                        w->name.data ? w->name.data : "");
    tps_status st = TPS_OK;
    switch (v->kind) {
    case TPS_PV_TENSOR: return add_tensor(w, v, err);
    case TPS_PV_DICT:
        for (size_t i = 0; i < v->u.dict.n && !st; i++) st = walk_child(w, v->u.dict.keys[i], v->u.dict.vals[i], depth, err);
        return st;
    case TPS_PV_LIST:
    case TPS_PV_TUPLE:
        for (size_t i = 0; i < v->u.seq.n && !st; i++) {
            tps_pv idx = {.kind = TPS_PV_INT, .u.i = (int64_t)i};
            st = walk_child(w, &idx, v->u.seq.items[i], depth, err);
        }
        return st;
    case TPS_PV_STORAGE:
        return tps_fail(err, TPS_EINVALID, "%s: '%s' is a bare storage, not a tensor; only tensors can be read", w->path,
                        w->name.data ? w->name.data : "");
    default: return TPS_OK;
    }
}

static const tps_pv *choose_state_dict(const tps_pv *d)
{
    static const char *const wrappers[] = {"state_dict", "model", "module"};
    for (int depth = 0; depth < MAX_NEST; depth++) {
        for (size_t i = 0; i < d->u.dict.n; i++)
            if (d->u.dict.vals[i]->kind == TPS_PV_TENSOR) return d;
        const tps_pv *next = NULL;
        for (size_t k = 0; k < 3 && !next; k++)
            for (size_t i = 0; i < d->u.dict.n; i++) {
                const tps_pv *key = d->u.dict.keys[i];
                if (key->kind == TPS_PV_STR && strcmp(key->u.str.s, wrappers[k]) == 0 && d->u.dict.vals[i]->kind == TPS_PV_DICT) {
                    next = d->u.dict.vals[i];
                    break;
                }
            }
        if (!next) return d;
        d = next;
    }
    return d;
}

/* A small record as text, or NULL (and TPS_OK) when absent. */
static tps_status small_record(tps_zip *z, const char *root, const char *name, char **out, tps_error *err)
{
    char full[256];
    *out = NULL;
    snprintf(full, sizeof full, "%s%s", root, name);
    const tps_zip_entry *e = tps_zip_find(z, full);
    if (!e) return TPS_OK;
    size_t len;
    return tps_zip_read_all(z, e, 64, out, &len, err);
}

static tps_status check_records(tps_zip *z, const char *path, const char *root, bool *big, tps_error *err)
{
    char *ver = NULL, *order = NULL;
    tps_status st = small_record(z, root, ".data/version", &ver, err);
    if (!st && !ver) st = small_record(z, root, "version", &ver, err);
    if (!st) st = small_record(z, root, "byteorder", &order, err);
    if (st) goto cleanup;
    if (!ver) {
        st = tps_fail(err, TPS_EINVALID, "%s: torch archive without a %sversion record", path, root);
        goto cleanup;
    }
    char *end;
    unsigned long v = strtoul(ver, &end, 10);
    if (end == ver || (*end && strcmp(end, "\n") != 0) || v < 1 || v > 10) {
        st = tps_fail(err, TPS_EINVALID, "%s: torch archive version '%.16s' is not a number from 1 to 10", path, ver);
        goto cleanup;
    }
    *big = false;
    if (order) {
        if (strcmp(order, "big") == 0) *big = true;
        else if (strcmp(order, "little") != 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: byteorder record is '%.16s', not 'little' or 'big'", path, order);
            goto cleanup;
        }
    }
cleanup:
    free(ver);
    free(order);
    return st;
}

tps_status tps_torch_file_add_tensor(tps_torch_file *f, const char *name, const struct tps_pv *tensor, tps_error *err)
{
    if (tensor->kind != TPS_PV_TENSOR) return tps_fail(err, TPS_EINVALID, "%s: '%s' is not a tensor", f->path, name);
    tps_buf_reset(&f->name);
    tps_buf_puts(&f->name, name);
    return add_tensor(f, tensor, err);
}

tps_status tps_torch_file_visit(tps_torch_file *f, tps_error *err)
{
    if (f->visits_left-- == 0)
        return tps_fail(err, TPS_EINVALID, "%s: the pickle refers to its shared containers too many times", f->path);
    return TPS_OK;
}

static tps_status read_archive(tps_index *ix, tps_zip *z, const char *path, uint32_t file, tps_torch_pick_fn pick, void *ctx,
                               bool records_crc, tps_error *err)
{
    tps_status st = TPS_OK;
    char *root = NULL, *pkl = NULL;
    tps_pickle *pk = NULL;
    walker w = {.ix = ix, .zip = z, .path = path, .file = file, .name = TPS_BUF_INIT};
    if (tps_zip_count(z) == 0) return tps_fail(err, TPS_EINVALID, "%s: empty zip archive", path);
    const char *first = tps_zip_entry_at(z, 0)->name, *slash = strchr(first, '/');
    if (!slash || slash - first > 128)
        return tps_fail(err, TPS_EINVALID, "%s: torch archive entry '%s' is not in a top-level folder", path, first);
    size_t rlen = (size_t)(slash - first) + 1;
    if (!(root = malloc(rlen + 1))) return tps_fail_oom(err, "reading a torch archive");
    memcpy(root, first, rlen);
    root[rlen] = '\0';
    for (size_t i = 0; i < tps_zip_count(z); i++) {
        const char *n = tps_zip_entry_at(z, i)->name;
        if (strncmp(n, root, rlen) != 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: entry '%s' is outside the archive folder '%s'", path, n, root);
            goto cleanup;
        }
        if (strcmp(n + rlen, "constants.pkl") == 0 || strncmp(n + rlen, "code/", 5) == 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: a TorchScript archive (has '%s'), not a torch.save state dict; " RESAVE_HINT
                          " (e.g. torch.jit.load(f).state_dict())", path, n);
            goto cleanup;
        }
    }
    w.root = root;
    TPS_CHECK(check_records(z, path, root, &w.big, err));
    char pname[256];
    snprintf(pname, sizeof pname, "%sdata.pkl", root);
    const tps_zip_entry *pe = tps_zip_find(z, pname);
    if (!pe) {
        st = tps_fail(err, TPS_EINVALID, "%s: torch archive without %s", path, pname);
        goto cleanup;
    }
    size_t plen;
    TPS_CHECK(tps_zip_read_all(z, pe, ix->files[file].size, &pkl, &plen, err));
    char what[512];
    snprintf(what, sizeof what, "%s: %s", path, pname);
    const tps_pv *top;
    TPS_CHECK(tps_pickle_load((const unsigned char *)pkl, plen, what, &pk, &top, err));
    if (top->kind != TPS_PV_DICT) {
        st = tps_fail(err, TPS_EINVALID, "%s: the pickle holds a %s, not a state dict", path,
                      top->kind == TPS_PV_TENSOR ? "single tensor" : "non-dict value");
        goto cleanup;
    }
    /* Tied weights visit a tensor twice; a real state dict stays far below this. */
    w.visits_left = 4 * tps_pickle_count(pk) + 1024;
    if (pick) TPS_CHECK(pick(ctx, &w, top, err));
    else TPS_CHECK(walk(&w, choose_state_dict(top), 0, err));
    if (w.name.oom) {
        st = tps_fail_oom(err, "naming tensors");
        goto cleanup;
    }
    if (records_crc && ix->files[file].size <= TPS_EAGER_CRC_MAX)
        for (size_t i = 0; i < tps_zip_count(z); i++) TPS_CHECK(tps_zip_verify(z, tps_zip_entry_at(z, i), err));
cleanup:
    tps_buf_release(&w.name);
    tps_pickle_free(pk);
    free(pkl);
    free(root);
    return st;
}

/* Opens the zip of file id of ix and hands it to ix's view state. */
static tps_status open_zip(tps_index *ix, uint32_t file, tps_zip **out, tps_error *err)
{
    const tps_source_file *f = &ix->files[file];
    tps_zip *z = NULL;
    tps_status st = tps_zip_open(f->fd, f->path, f->size, 0, &z, err);
    if (!st) st = tps_view_state_add_zip(ix, z, err);
    *out = st ? NULL : z;
    return st;
}

static tps_status check_magic(const tps_source_file *f, tps_error *err)
{
    unsigned char magic[sizeof legacy_magic] = {0};
    size_t n = f->size < sizeof magic ? (size_t)f->size : sizeof magic;
    tps_status st = tps_pread_full(f->fd, f->path, 0, magic, n, err);
    if (st) return st;
    if (n >= 4 && memcmp(magic, "PK\3\4", 4) == 0) return TPS_OK;
    if (n == sizeof legacy_magic && memcmp(magic, legacy_magic, n) == 0)
        return tps_fail(err, TPS_EINVALID, "%s: legacy (pre-1.6) torch.save format, which tpshard does not read; " RESAVE_HINT,
                        f->path);
    if (tps_torch_is_pickle_magic(magic, n, f->size))
        return tps_fail(err, TPS_EINVALID, "%s: a bare pickle, not a torch.save zip archive; " RESAVE_HINT, f->path);
    return tps_fail(err, TPS_EINVALID, "%s: not a torch.save zip archive (does not start with PK\\3\\4)", f->path);
}

tps_status tps_torch_add_file(tps_index *ix, const char *path, tps_error *err)
{
    return tps_torch_add_file_pick(ix, path, NULL, NULL, err);
}

tps_status tps_torch_add_file_pick(tps_index *ix, const char *path, tps_torch_pick_fn pick, void *ctx, tps_error *err)
{
    return tps_torch_add_file_pick_crc(ix, path, pick, ctx, true, err);
}

tps_status tps_torch_add_file_pick_crc(tps_index *ix, const char *path, tps_torch_pick_fn pick, void *ctx,
                                       bool records_crc, tps_error *err)
{
    uint32_t file;
    tps_zip *z;
    tps_status st = tps_index_add_file(ix, path, &file, err);
    if (!st) st = check_magic(&ix->files[file], err);
    if (!st) st = open_zip(ix, file, &z, err);
    if (!st) tps_zip_set_flags(z, TPS_ZIP_CRC_ZERO_IS_ABSENT);
    if (!st) st = read_archive(ix, z, ix->files[file].path, file, pick, ctx, records_crc, err);
    return st;
}

static tps_status open_common(const char *path, bool allow_npz, tps_index **out, tps_error *err)
{
    *out = NULL;
    tps_index *ix = NULL;
    uint32_t file;
    tps_zip *z = NULL;
    tps_status st = tps_index_new(path, "torch", &ix, err);
    if (st) return st;
    TPS_CHECK(tps_view_state_init(ix, err));
    TPS_CHECK(tps_index_add_file(ix, path, &file, err));
    TPS_CHECK(check_magic(&ix->files[file], err));
    TPS_CHECK(open_zip(ix, file, &z, err));
    if (allow_npz) {
        /* Decide on the directory alone: npz when every entry is a .npy member. */
        bool npz = tps_zip_count(z) > 0;
        for (size_t i = 0; i < tps_zip_count(z) && npz; i++) {
            const char *n = tps_zip_entry_at(z, i)->name;
            size_t l = strlen(n);
            npz = l > 4 && strcmp(n + l - 4, ".npy") == 0;
        }
        if (npz) {
            ix->format = "npz";
            TPS_CHECK(tps_npz_read(ix, z, file, err));
            goto done;
        }
    }
    tps_zip_set_flags(z, TPS_ZIP_CRC_ZERO_IS_ABSENT);
    TPS_CHECK(read_archive(ix, z, ix->files[file].path, file, NULL, NULL, true, err));
done:
    *out = ix;
    ix = NULL;
cleanup:
    tps_index_free(ix);
    return st;
}

tps_status tps_torch_open(const char *path, tps_index **out, tps_error *err)
{
    return open_common(path, false, out, err);
}

tps_status tps_zip_checkpoint_open(const char *path, tps_index **out, tps_error *err)
{
    return open_common(path, true, out, err);
}

tps_status tps_torch_verify_records(const char *path, tps_error *err)
{
    tps_index *ix = NULL;
    tps_status st = tps_index_new(path, "torch", &ix, err);
    uint32_t file;
    tps_zip *z = NULL;
    if (!st) st = tps_index_add_file(ix, path, &file, err);
    if (!st) st = tps_zip_open(ix->files[file].fd, ix->files[file].path, ix->files[file].size,
                               TPS_ZIP_CRC_ZERO_IS_ABSENT, &z, err);
    for (size_t i = 0; !st && i < tps_zip_count(z); i++) st = tps_zip_verify(z, tps_zip_entry_at(z, i), err);
    tps_zip_free(z);
    tps_index_free(ix);
    return st;
}
