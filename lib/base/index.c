#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checked.h"
#include "iocache.h"
#include "json.h"

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

tps_status tps_index_new(const char *path, const char *format, tps_index **out, tps_error *err)
{
    *out = NULL;
    tps_index *ix = calloc(1, sizeof *ix);
    if (!ix) return tps_fail_oom(err, "creating a tensor index");
    ix->path = dup_n(path, strlen(path));
    if (!ix->path) {
        free(ix);
        return tps_fail_oom(err, "creating a tensor index");
    }
    ix->format = format;
    ix->names = (tps_name_hash)TPS_NAME_HASH_INIT(tps_tensor, name);
    *out = ix;
    return TPS_OK;
}

static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *p = realloc(*arr, c * elem);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}

bool tps_index_reserve(tps_index *ix, size_t n)
{
    if (n > SIZE_MAX - ix->ntensors) return false;
    size_t need = ix->ntensors + n;
    if (ix->tensors_cap || need == 0) return grow((void **)&ix->tensors, &ix->tensors_cap, need, sizeof *ix->tensors);
    if (need > SIZE_MAX / sizeof *ix->tensors) return false;
    tps_tensor *t = malloc(need * sizeof *t);
    if (!t) return false;
    ix->tensors = t;
    ix->tensors_cap = need;
    return true;
}

tps_status tps_index_add_file(tps_index *ix, const char *path, uint32_t *file_id, tps_error *err)
{
    if (ix->nfiles >= UINT32_MAX) return tps_fail(err, TPS_EINVALID, "%s: too many files", ix->path);
    if (!grow((void **)&ix->files, &ix->files_cap, ix->nfiles + 1, sizeof *ix->files))
        return tps_fail_oom(err, "listing source files");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return tps_fail(err, e == ENOENT ? TPS_EINVALID : TPS_EIO, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return tps_fail_errno(err, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return tps_fail(err, TPS_EINVALID, "%s: not a regular file", path);
    }
    char *p = dup_n(path, strlen(path));
    if (!p) {
        close(fd);
        return tps_fail_oom(err, "listing source files");
    }
    tps_source_file *f = &ix->files[ix->nfiles];
    f->path = p;
    f->fd = fd;
    f->size = (uint64_t)sb.st_size;
    *file_id = (uint32_t)ix->nfiles++;
    return TPS_OK;
}

/* FNV-1a: a simple hash is plenty for tensor names. */
static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static const char *record_name(const tps_name_hash *h, const void *base, size_t i)
{
    const char *name;
    memcpy(&name, (const char *)base + i * h->stride + h->name_off, sizeof name);
    return name;
}

/* A slot holds the name's hash in its upper 32 bits and the record index + 1 in its lower
 * 32 (0: empty), so a probe that meets another name is refused without reading that
 * record: at 50k names each record read is a cache miss, and they made look-ups grow
 * faster than the name count. */
#define SLOT_TAG(hash) ((uint64_t)(hash) & 0xffffffff00000000ull)
#define SLOT_INDEX_MAX 0xfffffffeull /* the most records a hash holds (index + 1 fits in 32 bits) */

size_t tps_name_hash_find(const tps_name_hash *h, const void *base, const char *name)
{
    if (!h->cap) return SIZE_MAX;
    uint64_t hash = hash_name(name), tag = SLOT_TAG(hash);
    for (size_t slot = (size_t)hash & (h->cap - 1); h->slot[slot]; slot = (slot + 1) & (h->cap - 1)) {
        uint64_t v = h->slot[slot];
        size_t i = (size_t)(v & 0xffffffffu) - 1;
        if (SLOT_TAG(v) == tag && strcmp(record_name(h, base, i), name) == 0) return i;
    }
    return SIZE_MAX;
}

/* Puts record i into the first free slot of its probe sequence; the caller knows it is new. */
static void put(uint64_t *slots, size_t cap, const char *name, size_t i)
{
    uint64_t hash = hash_name(name);
    size_t slot = (size_t)hash & (cap - 1);
    while (slots[slot]) slot = (slot + 1) & (cap - 1);
    slots[slot] = SLOT_TAG(hash) | (uint64_t)(i + 1);
}

bool tps_name_hash_add(tps_name_hash *h, const void *base, size_t i, size_t *dup)
{
    const char *name = record_name(h, base, i);
    *dup = tps_name_hash_find(h, base, name);
    if (*dup != SIZE_MAX) return true;
    if ((uint64_t)i >= SLOT_INDEX_MAX) return false; /* 4 billion records: memory ran out long before */
    if ((i + 1) * 2 > h->cap) { /* at most half full: probe sequences stay short */
        size_t cap = h->cap ? h->cap * 2 : 64;
        while ((i + 1) * 2 > cap) cap *= 2;
        uint64_t *slots = calloc(cap, sizeof *slots);
        if (!slots) return false;
        for (size_t k = 0; k < i; k++) put(slots, cap, record_name(h, base, k), k);
        free(h->slot);
        h->slot = slots;
        h->cap = cap;
    }
    put(h->slot, h->cap, name, i);
    return true;
}

void tps_name_hash_free(tps_name_hash *h)
{
    free(h->slot);
    h->slot = NULL;
    h->cap = 0;
}

const tps_tensor *tps_index_find(const tps_index *ix, const char *name)
{
    size_t i = tps_name_hash_find(&ix->names, ix->tensors, name);
    return i == SIZE_MAX ? NULL : &ix->tensors[i];
}

void tps_shape_str(const uint64_t *shape, int ndim, char *buf, size_t bufsize)
{
    size_t n = 0;
    if (bufsize == 0) return;
    buf[0] = '\0';
    n += (size_t)snprintf(buf + n, n < bufsize ? bufsize - n : 0, "[");
    for (int i = 0; i < ndim; i++)
        n += (size_t)snprintf(buf + n, n < bufsize ? bufsize - n : 0, "%s%llu", i ? ", " : "",
                              (unsigned long long)shape[i]);
    snprintf(buf + n, n < bufsize ? bufsize - n : 0, "]");
}

tps_status tps_index_add_tensor(tps_index *ix, const char *name, size_t name_len, tps_dtype dtype,
                                int ndim, const uint64_t *shape, uint32_t file, uint64_t offset,
                                const void *reader_data, tps_error *err)
{
    const char *where = file < ix->nfiles ? ix->files[file].path : ix->path;
    if (memchr(name, '\0', name_len))
        return tps_fail(err, TPS_EINVALID, "%s: a tensor name contains a NUL byte", where);
    if (ndim < 0 || ndim > TPS_MAX_DIMS)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s' has %d dimensions; at most %d are supported",
                        where, (int)name_len, name, ndim, TPS_MAX_DIMS);
    if ((unsigned)dtype >= TPS_DT_COUNT)
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s' has an unknown dtype", where, (int)name_len, name);
    tps_tensor t = {0};
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    if (!tps_prod_u64(shape, ndim, &t.nelem))
        return tps_fail(err, TPS_EINVALID, "%s: tensor '%.*s': the product of its shape overflows 64 bits",
                        where, (int)name_len, name);
    char what[512];
    snprintf(what, sizeof what, "%s: tensor '%.*s'", where, (int)(name_len > 400 ? 400 : name_len), name);
    tps_status st = tps_dtype_nbytes(dtype, t.nelem, &t.nbytes, what, err);
    if (st) return st;
    t.file = file;
    t.offset = offset;
    t.reader_data = reader_data;
    if (!reader_data) {
        uint64_t end;
        if (file >= ix->nfiles)
            return tps_fail(err, TPS_EINVALID, "%s: internal: tensor '%.*s' names file %u of %zu",
                            ix->path, (int)name_len, name, file, ix->nfiles);
        if (!tps_add_u64(offset, t.nbytes, &end) || end > ix->files[file].size)
            return tps_fail(err, TPS_EINVALID,
                            "%s: tensor '%.*s' needs bytes [%llu, %llu+%llu) but the file has %llu bytes",
                            where, (int)name_len, name, (unsigned long long)offset,
                            (unsigned long long)offset, (unsigned long long)t.nbytes,
                            (unsigned long long)ix->files[file].size);
    }
    t.name = dup_n(name, name_len);
    if (!t.name) return tps_fail_oom(err, "indexing tensors");
    if (!grow((void **)&ix->tensors, &ix->tensors_cap, ix->ntensors + 1, sizeof t)) {
        free(t.name);
        return tps_fail_oom(err, "indexing tensors");
    }
    ix->tensors[ix->ntensors] = t;
    size_t dup;
    if (!tps_name_hash_add(&ix->names, ix->tensors, ix->ntensors, &dup)) st = tps_fail_oom(err, "indexing tensors");
    else if (dup != SIZE_MAX) st = tps_fail(err, TPS_EINVALID, "%s: duplicate tensor name '%s'", where, t.name);
    if (st) {
        free(t.name);
        return st;
    }
    ix->ntensors++;
    return TPS_OK;
}

tps_status tps_index_add_meta(tps_index *ix, const char *key, const char *value, tps_error *err)
{
    if (tps_index_meta(ix, key))
        return tps_fail(err, TPS_EINVALID, "%s: duplicate metadata key '%s'", ix->path, key);
    if (!grow((void **)&ix->meta, &ix->meta_cap, ix->nmeta + 1, sizeof *ix->meta))
        return tps_fail_oom(err, "reading metadata");
    char *k = dup_n(key, strlen(key)), *v = dup_n(value, strlen(value));
    if (!k || !v) {
        free(k);
        free(v);
        return tps_fail_oom(err, "reading metadata");
    }
    ix->meta[ix->nmeta].key = k;
    ix->meta[ix->nmeta].value = v;
    ix->nmeta++;
    return TPS_OK;
}

const char *tps_index_meta(const tps_index *ix, const char *key)
{
    for (size_t i = 0; i < ix->nmeta; i++)
        if (strcmp(ix->meta[i].key, key) == 0) return ix->meta[i].value;
    return NULL;
}

tps_status tps_pread_full(int fd, const char *path, uint64_t off, void *buf, size_t len, tps_error *err)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = tps_io_pread(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return tps_fail_errno(err, errno, "%s: read of %zu bytes at offset %llu failed", path, len,
                                  (unsigned long long)off);
        }
        if (n == 0)
            return tps_fail(err, TPS_EIO, "%s: file ended at offset %llu (it shrank while being read?)", path,
                            (unsigned long long)off);
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return TPS_OK;
}

tps_status tps_read_file(const char *path, uint64_t max, const char *what, char **text, size_t *len, tps_error *err)
{
    tps_status st;
    tps_index *tmp = NULL;
    uint32_t fid;
    *text = NULL;
    *len = 0;
    /* The index's opening: regular files only, the size taken once. */
    TPS_CHECK(tps_index_new(path, "file", &tmp, err));
    TPS_CHECK(tps_index_add_file(tmp, path, &fid, err));
    uint64_t size = tmp->files[fid].size;
    if (size > max) {
        st = tps_fail(err, TPS_EINVALID, "%s: %llu bytes, more than the %llu %s may have", path,
                      (unsigned long long)size, (unsigned long long)max, what);
        goto cleanup;
    }
    if (!(*text = malloc((size_t)size + 1))) {
        st = tps_fail_oom(err, "reading a file");
        goto cleanup;
    }
    TPS_CHECK(tps_pread_full(tmp->files[fid].fd, path, 0, *text, (size_t)size, err));
    (*text)[size] = '\0';
    *len = (size_t)size;
cleanup:
    if (st) {
        free(*text);
        *text = NULL;
    }
    tps_index_free(tmp);
    return st;
}

tps_status tps_tensor_read(const tps_index *ix, const tps_tensor *t, uint64_t off, void *buf, size_t len,
                           tps_error *err)
{
    uint64_t end;
    if (!tps_add_u64(off, len, &end) || end > t->nbytes)
        return tps_fail(err, TPS_EINVALID, "%s: read of bytes [%llu, %llu+%zu) is outside tensor '%s' (%llu bytes)",
                        ix->path, (unsigned long long)off, (unsigned long long)off, len, t->name,
                        (unsigned long long)t->nbytes);
    if (t->reader_data) {
        if (!ix->ops || !ix->ops->read)
            return tps_fail(err, TPS_EINVALID, "%s: internal: tensor '%s' has no read hook", ix->path, t->name);
        return ix->ops->read(ix, t, off, buf, len, err);
    }
    const tps_source_file *f = &ix->files[t->file];
    return tps_pread_full(f->fd, f->path, t->offset + off, buf, len, err);
}

void tps_index_free(tps_index *ix)
{
    if (!ix) return;
    if (ix->ops && ix->ops->release) ix->ops->release(ix->state);
    for (size_t i = 0; i < ix->nfiles; i++) {
        free(ix->files[i].path);
        if (ix->files[i].fd >= 0) close(ix->files[i].fd);
    }
    for (size_t i = 0; i < ix->ntensors; i++) free(ix->tensors[i].name);
    for (size_t i = 0; i < ix->nmeta; i++) {
        free(ix->meta[i].key);
        free(ix->meta[i].value);
    }
    free(ix->files);
    free(ix->tensors);
    free(ix->meta);
    tps_name_hash_free(&ix->names);
    free(ix->path);
    free(ix);
}

void tps_jw_tensor_head(tps_jw *w, const char *name, tps_dtype dtype, int ndim, const uint64_t *shape)
{
    tps_jw_key(w, "name");
    tps_jw_string(w, name);
    tps_jw_key(w, "dtype");
    tps_jw_string(w, tps_dtype_name(dtype));
    tps_jw_key(w, "shape");
    tps_jw_u64_array(w, shape, (size_t)ndim);
}
